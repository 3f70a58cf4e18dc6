"""The GitHub Actions workflows run the README's two commands: `make test` on every push
and pull request, `make book` with the runs cached, the failed notebooks kept and the
built book deployed to Pages. The commands are read from the README, not retyped here."""
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def readme_commands() -> dict[str, str]:
    """{"book": "make book", "test": "make test"} from the README's "The two commands" block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    return {c.split()[-1]: c for c in commands}


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))   # YAML 1.1 reads the key `on` as True
    return data


def steps(workflow: dict) -> list[dict]:
    return [s for job in workflow["jobs"].values() for s in job.get("steps", [])]


def runs_command(workflow: dict, command: str) -> bool:
    pattern = re.compile(rf"(^|[;&|]\s*|\n){re.escape(command)}(\s|$)")
    return any(pattern.search(s.get("run", "")) for s in steps(workflow))


def uses(workflow: dict, action: str) -> list[dict]:
    return [s for s in steps(workflow) if s.get("uses", "").split("@")[0] == action]


def test_readme_names_the_two_commands():
    assert set(readme_commands()) == {"book", "test"}


def test_test_workflow_runs_the_readme_test_command_on_push_and_pull_request():
    wf = load("test.yml")
    assert "push" in wf["on"] and "pull_request" in wf["on"]
    assert runs_command(wf, readme_commands()["test"])
    (setup,) = uses(wf, "actions/setup-python")
    assert str(setup["with"]["python-version"]) == "3.11"
    (cache,) = uses(wf, "actions/cache")       # the corpus, keyed on its SHA-256
    assert cache["with"]["path"] == "~/.cache/catlib" and "sha256" in cache["with"]["key"]
    assert not re.search(r"\.\./shared", (WORKFLOWS / "test.yml").read_text())


def test_book_workflow_builds_caches_keeps_failures_and_deploys():
    wf = load("book.yml")
    assert runs_command(wf, readme_commands()["book"])
    caches = {c["with"]["path"]: c["with"]["key"] for c in uses(wf, "actions/cache")}
    assert "hashFiles('catlib/**')" in caches["runs"]
    (kept,) = uses(wf, "actions/upload-artifact")
    assert kept["if"] == "failure()" and kept["with"]["path"] == "book/notebooks/*.failed.ipynb"
    (pages,) = uses(wf, "actions/upload-pages-artifact")
    assert pages["with"]["path"] == "_build/html"
    assert uses(wf, "actions/deploy-pages")
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
