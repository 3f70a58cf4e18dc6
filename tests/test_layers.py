"""catlib's layers run one way: a module imports only its own layer and those below it.

Read from the source (every ``import`` and ``from ... import``, those inside functions
included), so that a lazy import cannot hide an upward one. ``__main__`` modules are
entry points (they run a command) and ``catlib/__init__.py`` names the public API: both
are left out.
"""
import ast
from pathlib import Path

import catlib

PACKAGE = Path(catlib.__file__).parent
# Bottom to top; nn and common import nothing of catlib but themselves.
LAYERS = ("nn", "common", "data", "measure", "training", "runs", "experiment", "audit", "cli",
          "book")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__main__" or parts == ("__init__",):
            continue
        yield path, parts


def _imported(path, parts):
    """The top-level parts of catlib (``nn``, ``measure``, ...) that ``path`` imports."""
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - (node.level - 1)])
                target = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names] if not node.module else []
                yield (target or names)[0] if target else names[0]
                if not target:
                    yield from names
            elif node.module and node.module.split(".")[0] == "catlib":
                rest = node.module.split(".")[1:]
                yield rest[0] if rest else node.names[0].name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "catlib" and "." in a.name:
                    yield a.name.split(".")[1]


def _layer(name: str) -> int:
    return LAYERS.index(name)


def test_every_module_has_a_layer():
    tops = {parts[0] for _, parts in _modules()}
    assert tops <= set(LAYERS), sorted(tops - set(LAYERS))


def test_no_import_runs_upward():
    upward = []
    for path, parts in _modules():
        own = _layer(parts[0])
        for top in set(_imported(path, parts)):
            if top in LAYERS and _layer(top) > own:
                upward.append(f"{'/'.join(parts)} imports {top}")
            if parts[0] in ("nn", "common") and top in LAYERS and top != parts[0]:
                upward.append(f"{'/'.join(parts)} imports {top} (imports nothing of catlib)")
    assert not upward, upward


def test_the_top_level_names_its_architecture():
    entries = sorted(p.name for p in PACKAGE.iterdir()
                     if p.name not in ("__init__.py", "__main__.py", "__pycache__"))
    assert len(entries) <= 10, entries
    for entry in entries:
        init = PACKAGE / entry / "__init__.py" if (PACKAGE / entry).is_dir() else PACKAGE / entry
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "TODO" not in doc, f"{entry} has no docstring saying what it holds"


def test_an_upward_import_is_caught(tmp_path):
    """The check itself can fail: a measurement that imports a page helper."""
    fake = tmp_path / "measure" / "x.py"
    fake.parent.mkdir()
    fake.write_text("from ..book.page import pm_cells\n")
    assert "book" in set(_imported(fake, ("measure", "x")))
    assert _layer("book") > _layer("measure")
