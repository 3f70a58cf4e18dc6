"""catlib's layers run one way: a module imports only its own layer and those below it.

Read from the source (every ``import`` and ``from ... import``, those inside functions
included), so that a lazy import cannot hide an upward one. ``catlib/__main__.py`` (the
command line's entry point) and ``catlib/__init__.py`` (the public API) are left out; a
layer's own ``__main__`` is held to its layer.
"""
import ast
from pathlib import Path

import catlib

PACKAGE = Path(catlib.__file__).parent
# Bottom to top; nn, common and code_corpus import nothing of catlib but themselves
# (code_corpus, the second corpus, sits below data so that data can load it).
LAYERS = ("nn", "common", "code_corpus", "data", "measure", "training", "runs", "experiment",
          "audit", "cli", "book")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts in (("__main__",), ("__init__",)):
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


SELF_CONTAINED = ("nn", "common", "code_corpus")


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
            if parts[0] in SELF_CONTAINED and top in LAYERS and top != parts[0]:
                upward.append(f"{'/'.join(parts)} imports {top} (imports nothing of catlib)")
    assert not upward, upward


def test_the_top_level_names_its_architecture():
    entries = sorted(p.name for p in PACKAGE.iterdir()
                     if p.name not in ("__init__.py", "__main__.py", "__pycache__"))
    assert len(entries) <= 11, entries
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


def _module_imports(path) -> set:
    """The modules of ``path``'s own package that it imports (``from .x import``, ``from .
    import x``), those inside functions and under ``if TYPE_CHECKING`` included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out.update([node.module.split(".")[0]] if node.module else
                       [a.name for a in node.names])
    return out


def _circles(folder) -> list:
    """The modules of ``folder`` that reach themselves through their imports."""
    stems = {q.stem for q in folder.glob("*.py")}
    graph = {p.stem: _module_imports(p) & stems for p in folder.glob("*.py")
             if p.stem != "__init__"}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n)))
                   for n in graph.get(start, ()))
    return sorted(m for m in graph if reaches(m, m))


def test_no_package_imports_in_a_circle():
    """An import circle is one module in two: in experiment/, grid trains and scores the
    rows and frontier reads what grid scored (grid -> frontier -> grid, lazily inside
    functions); in training/, config and schedule imported each other, one of the two for
    a type only. Each package's modules import one way."""
    found = {folder.name: _circles(folder) for folder in [PACKAGE, *PACKAGE.iterdir()]
             if folder.is_dir() and (folder / "__init__.py").exists()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_a_circle_is_caught(tmp_path):
    """The check itself can fail: two modules that import each other for a type only."""
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from .b import B\n")
    (tmp_path / "b.py").write_text("from . import a\n")
    assert _circles(tmp_path) == ["a", "b"]


# The method's modules stay short enough to read in one sitting (the house's rule): a
# module past it holds a concept that wants a module of its own.
NN_MAX_LINES = 300


def test_every_module_of_the_method_is_at_most_300_lines():
    long = {p.name: n for p in sorted((PACKAGE / "nn").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > NN_MAX_LINES}
    assert not long, f"catlib/nn/ modules over {NN_MAX_LINES} lines: {long}"
