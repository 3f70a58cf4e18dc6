"""The run report of the reproducibility page: each notebook's run time, status and
finish time, the environment and git commit, and the table of every profile.

``book/_generated/run_report.{json,md}``, ``profiles.md`` and the device checks' section
(:mod:`~catlib.book.device_check`) are rewritten after every notebook the runner
executes (a failure is recorded too).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..common.provenance import environment
from . import profiles as _profiles
from . import device_check
from .errors import BookError
from .parameters import check_profiles
from .training import TRAINING_STAGE

# The packages whose versions the run report records.
BOOK_PACKAGES = ("catlib", "torch", "torchdiffeq", "numpy", "matplotlib", "papermill",
                 "jupyter-book", "myst-nb", "sphinx", "nbval")


@dataclass
class Record:
    """One notebook execution, as the reproducibility page lists it."""

    notebook: str
    profile: str
    device: str
    seconds: float
    status: str
    finished: str


def _now() -> str:
    """The local time, as the report and the results' labels write it."""
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def _update_report(root: Path, records: list[Record]) -> None:
    """Merge ``records`` into ``book/_generated/run_report.json``; rewrite the Markdown pages."""
    folder = root / "book" / "_generated"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run_report.json"
    data = json.loads(path.read_text()) if path.exists() else {"notebooks": {}}
    for record in records:
        data["notebooks"][record.notebook] = asdict(record)
    data["environment"] = environment(BOOK_PACKAGES, root=root)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    (folder / "run_report.md").write_text(render_report(data, root))
    (folder / "profiles.md").write_text(render_profiles())
    device_check.write(root)


def render_profiles(profiles: dict | None = None) -> str:
    """A Markdown table of every profile's parameters, one row per notebook and parameter."""
    profiles = _profiles.PROFILES if profiles is None else profiles
    names = list(profiles)
    lines = ["| notebook | parameter | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for notebook in next(iter(profiles.values())):
        keys = list(dict.fromkeys(k for p in names for k in profiles[p][notebook]))
        for key in keys:
            cells = [f"`{profiles[p][notebook].get(key, '')}`" for p in names]
            lines.append(f"| `{notebook}` | `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_report(data: dict, root: Path) -> str:
    """The Markdown tables the reproducibility page includes."""
    return "\n".join(_run_table(data["notebooks"]) + _environment_table(data["environment"])) + "\n"


def _run_table(notebooks: dict) -> list[str]:
    """Lines of the table of executions, in the book's order, and the total run time."""
    try:
        order = check_profiles()
    except BookError:
        order = []
    rows = sorted(notebooks.values(),
                  key=lambda r: (order.index(r["notebook"]) if r["notebook"] in order else -1,
                                 r["notebook"]))
    lines = ["| notebook | profile | device | run time (s) | status | finished |",
             "|---|---|---|---:|---|---|"]
    for r in rows:
        secs = "" if r["seconds"] != r["seconds"] else f"{r['seconds']:.1f}"
        name = r["notebook"] if r["notebook"] == TRAINING_STAGE else f"`{r['notebook']}`"
        lines.append(f"| {name} | {r['profile']} | {r['device']} | {secs} | "
                     f"{r['status']} | {r['finished']} |")
    total = sum(r["seconds"] for r in rows if r["seconds"] == r["seconds"])
    return lines + ["", f"Total run time: {total:.0f} s.", ""]


def _environment_table(env: dict) -> list[str]:
    """Lines of the table of the git commit, Python, platform and package versions."""
    commit = env["git"]["commit"] or "unknown (not a git checkout)"
    if env["git"]["dirty"]:
        commit += " (with uncommitted changes)"
    lines = ["| | |", "|---|---|",
             f"| git commit | `{commit}` |",
             f"| Python | {env['python']} |",
             f"| platform | `{env['platform']}`, {env['cpus']} CPUs |"]
    return lines + [f"| {pkg} | {ver or 'not installed'} |" for pkg, ver in env["versions"].items()]
