"""The notebooks' ``parameters`` cells, and the check of the profile table against them."""
from __future__ import annotations

import ast
from pathlib import Path

from . import profiles as _profiles
from .errors import BookError
from .profiles import COMMON_PARAMETERS


def notebook_parameters(path: Path) -> dict[str, object]:
    """Names and default values of the ``parameters`` cell of the notebook at ``path``."""
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise BookError(f"{path.name} must have exactly one cell tagged 'parameters', "
                        f"found {len(cells)}")
    values: dict[str, object] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    try:
                        values[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        values[target.id] = ast.unparse(node.value)
    return values


def check_profiles(profiles: dict | None = None, source_dir: Path | None = None) -> list[str]:
    """Validate the profile table against the notebook sources; return the notebook order.

    Every profile lists the same notebooks; every override names a parameter of
    that notebook's ``parameters`` cell (and not one the runner sets itself).
    """
    profiles = _profiles.PROFILES if profiles is None else profiles
    if not profiles:
        raise BookError("no profiles defined")
    names = list(next(iter(profiles.values())))
    for profile, table in profiles.items():
        if list(table) != names:
            raise BookError(f"profile {profile!r} lists notebooks {list(table)}, expected {names} "
                            f"(every profile lists every notebook, in the same order)")
    if source_dir is None:
        return names
    for name in names:
        _check_notebook(name, source_dir / f"{name}.ipynb", profiles)
    return names


def _check_notebook(name: str, path: Path, profiles: dict) -> None:
    """One notebook of :func:`check_profiles`: it exists, papermill parses its parameters,
    it declares :data:`COMMON_PARAMETERS`, and every profile's overrides name its parameters."""
    if not path.is_file():
        raise BookError(f"notebook {name!r} is in the profiles but {path} does not exist")
    declared = notebook_parameters(path)
    unparsed = sorted(set(declared) - set(_papermill_names(path)))
    if unparsed:
        raise BookError(f"{name}: papermill cannot parse the parameters {unparsed} "
                        f"(one 'name = value  # comment' per line; no '=' or quotes in comments)")
    missing = [p for p in COMMON_PARAMETERS if p not in declared]
    if missing:
        raise BookError(f"{name}: its parameters cell must declare {missing}")
    for profile, table in profiles.items():
        for key in table[name]:
            if key in COMMON_PARAMETERS:
                raise BookError(f"profile {profile!r}, notebook {name}: {key!r} is set by "
                                f"the runner, not by a profile")
            if key not in declared:
                raise BookError(
                    f"profile {profile!r}, notebook {name}: unknown parameter {key!r}; "
                    f"the notebook's parameters are {sorted(declared)}")


def _papermill_names(path: Path) -> list[str]:
    """The parameter names papermill itself finds in the notebook at ``path``."""
    import logging

    import papermill as pm
    logger = logging.getLogger("papermill")
    level = logger.level
    logger.setLevel(logging.ERROR)           # its own warning would repeat ours
    try:
        return list(pm.inspect_notebook(str(path)))
    finally:
        logger.setLevel(level)
