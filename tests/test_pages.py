"""The book's pages as text: prose at least equal to code, one-line set-up, glue keys that resolve.

These tests read the notebook sources (``notebooks/*.ipynb``) as JSON; they execute nothing
except :func:`catlib.book.page.setup`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SKIPPED = ("parameters", "injected-parameters")   # values, not code a reader reads
GLUE_ROLE = re.compile(r"\{glue(?::(?:text|md|any|figure|math))?\}`([^`]+)`")
GLUE_DIRECTIVE = re.compile(r"```\{glue(?::\w+)?\}\s+(\S+)")
WORKFLOW = re.compile(r"\b(issues?|tickets?|TODO|FIXME|XXX)\b|\bP\d\b", re.IGNORECASE)


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def word_counts(path: Path) -> tuple[int, int]:
    """Words (whitespace-separated) of the Markdown cells and of the code cells, the
    ``parameters`` cell excluded."""
    prose = code = 0
    for cell in cells(path):
        if any(t in tags(cell) for t in SKIPPED):
            continue
        n = len(source(cell).split())
        if cell["cell_type"] == "markdown":
            prose += n
        elif cell["cell_type"] == "code":
            code += n
    return prose, code


def glued_keys(path: Path) -> list[re.Pattern]:
    """The keys a notebook glues, as patterns (an f-string key ``f"ce_{key}_short"`` matches
    any ``ce_..._short``)."""
    patterns = []
    for cell in cells(path):
        if cell["cell_type"] != "code":
            continue
        for f, key in re.findall(r"\bglue\(\s*(f?)[\"']([^\"']+)[\"']", source(cell)):
            text = re.escape(key)
            if f:
                text = re.sub(r"\\\{[^}]*\\\}", r"\\w+", text)
            patterns.append(re.compile(text + r"\Z"))
    return patterns


def used_keys(text: str) -> list[str]:
    """Glue keys used by Markdown ``text`` (roles and directives), without path or format."""
    keys = []
    for ref in GLUE_ROLE.findall(text) + GLUE_DIRECTIVE.findall(text):
        ref = ref.split("::", 1)[-1]
        keys.append(ref.split(":", 1)[0])
    return keys


def test_every_notebook_is_found():
    assert len(NOTEBOOKS) == 12, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_prose_at_least_code(path):
    prose, code = word_counts(path)
    assert prose >= code, (f"{path.name}: {prose} words of prose against {code} of code; "
                           "explain the cells or move page plumbing into catlib.book.page")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_line_page_setup(path):
    code = "\n".join(source(c) for c in cells(path) if c["cell_type"] == "code")
    assert code.count("page.setup(device)") == 1, path.name
    for pasted in ("Path.cwd().parents", "plt.rcParams.update", "resolve_device("):
        assert pasted not in code, f"{path.name} still pastes {pasted!r}: use page.setup"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_workflow_words(path):
    shown = [c for c in cells(path)
             if c["cell_type"] == "markdown" or "remove-cell" not in tags(c)]
    found = [m.group(0) for c in shown for m in WORKFLOW.finditer(source(c))]
    assert not found, f"{path.name}: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_glue_keys_of_a_page_are_glued(path):
    glued = glued_keys(path)
    text = "\n".join(source(c) for c in cells(path) if c["cell_type"] == "markdown")
    missing = [k for k in used_keys(text) if not any(p.match(k) for p in glued)]
    assert not missing, f"{path.name} uses glue keys it never glues: {missing}"


def fstring_prose(code: str, limit: int = 25) -> list[str]:
    """f-strings outside ``print`` with more than ``limit`` words of literal text: sentences
    that belong in a Markdown cell (the numbers glued), not in code."""
    import ast

    found = []

    def visit(node):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
            return                                   # checked output, not prose
        if isinstance(node, ast.JoinedStr):
            words = " ".join(v.value for v in node.values
                             if isinstance(v, ast.Constant) and isinstance(v.value, str)).split()
            if len(words) > limit:
                found.append(" ".join(words[:8]) + " ...")
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(code))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_findings_are_markdown_not_fstrings(path):
    """A paragraph of findings is a Markdown cell with glued numbers, not an f-string."""
    found = []
    for cell in cells(path):
        if cell["cell_type"] == "code":
            code = "\n".join(line for line in source(cell).splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            found += fstring_prose(code)
    assert not found, f"{path.name}: prose built as f-strings: {found}"


def test_cross_page_glue_keys_resolve():
    """Keys that the text pages read from a notebook are glued there, as text (not Markdown:
    ``{glue:md}`` cannot reach another page)."""
    problems = []
    for page in sorted((ROOT / "book").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for name, key in re.findall(r"notebooks/(\w+)\.ipynb::(\w+)", text):
            path = ROOT / "notebooks" / f"{name}.ipynb"
            if not path.is_file():
                problems.append(f"{page.name}: {name} has no notebook")
                continue
            if not any(p.match(key) for p in glued_keys(path)):
                problems.append(f"{page.name}: {name} does not glue {key}")
            code = "\n".join(source(c) for c in cells(path) if c["cell_type"] == "code")
            if re.search(r"glue\(\s*[\"']%s[\"']\s*,\s*markdown\(" % re.escape(key), code):
                problems.append(f"{page.name}: {name} glues {key} as Markdown")
    assert not problems, problems


def test_style_file_is_package_data():
    from importlib.resources import files

    from catlib.book import page
    assert (files("catlib.book") / page.STYLE).is_file()
    assert page.STYLE in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_setup_finds_the_root_resolves_the_device_and_applies_the_style(monkeypatch):
    import matplotlib
    import matplotlib.pyplot as plt
    import torch

    from catlib.book import page
    monkeypatch.chdir(ROOT / "notebooks")          # nbval and jupyter-cache run there
    with matplotlib.rc_context():
        plt.rcParams["axes.grid"] = False
        result = page.setup("cpu")
        root, dev = result
        assert root == ROOT and (root / "_config.yml").is_file()
        assert dev == torch.device("cpu") and result.device == dev
        assert plt.rcParams["axes.grid"] is True and plt.rcParams["figure.dpi"] == 96
    with pytest.raises(AttributeError):
        result.root = Path("/")                     # frozen


def test_page_helpers():
    import numpy as np
    import torch

    from catlib.book import page
    np.testing.assert_allclose(page.smooth([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    assert page.pm_cells([[1.0, 2.0]]) == ["1.000", "2.000"]
    assert page.pm_cells([[1.0], [3.0]])[0].startswith("2.000")
    assert page.pm_cells([[0.5], [0.7]], sign=True)[0].startswith("+0.600")
    out, seconds = page.timed(lambda: 42, torch.device("cpu"))
    assert out == 42 and seconds >= 0


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_findings_are_stated_not_asserted(path):
    """A page runs for any valid parameters: what it finds is stated (glued words), never
    asserted; what must hold for the book's profiles is checked by the tests and nbval."""
    import ast

    found = []
    for cell in cells(path):
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(line for line in source(cell).splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Assert):
                found.append(ast.unparse(node)[:60])
            elif isinstance(node, ast.Attribute) and node.attr.startswith("assert_"):
                found.append(node.attr)
    assert not found, f"{path.name} asserts {found}: state the finding in glued words instead"


RESULTS = [p for p in NOTEBOOKS if "05" <= p.stem[:2] <= "12"]


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_results_chapters_answer_first(path):
    """A results chapter states its question and its (generated) answer within its first
    150 words, before the method."""
    words = source(cells(path)[0]).split()[:150]
    head = " ".join(words)
    assert "question" in head.lower() or "?" in head, f"{path.name}: no question in its first 150 words"
    assert "answer" in head.lower(), f"{path.name}: no answer in its first 150 words"
