"""The executed notebook as the page shows it: its parameters once, with the values used."""
from __future__ import annotations

import ast
from pathlib import Path


def show_parameters_once(executed: Path, dest: Path) -> None:
    """Copy an executed notebook, showing its parameters once: the values papermill
    injected are written into the ``parameters`` cell (each ``name = value  # comment``
    line keeps its comment) and the injected cell gets ``remove-cell``, so the page
    shows the values the notebook ran with, once, with their explanations."""
    import nbformat
    nb = nbformat.read(str(executed), as_version=4)
    tagged = lambda tag: [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]  # noqa: E731
    params, injected = tagged("parameters"), tagged("injected-parameters")
    if params and injected:
        values = _injected_values(injected[0].source)
        params[0].source = _with_values(params[0].source, values)
        tags = injected[0].metadata.setdefault("tags", [])
        if "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, str(dest))


def _injected_values(source: str) -> dict[str, str]:
    """``name -> value`` (as written) of each assignment in papermill's injected cell."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.get_source_segment(source, node.value)
    return values


def _with_values(source: str, values: dict[str, str]) -> str:
    """The ``parameters`` cell ``source`` with ``values`` written in: each ``name = value
    # comment`` line keeps its comment (aligned); injected names the cell lacks go last."""
    values = dict(values)
    lines = []
    for line in source.splitlines():
        code, hash_, comment = line.partition("#")
        name = code.split("=", 1)[0].strip()
        if "=" in code and name in values:
            new_code = f"{name} = {values.pop(name)}"
            width = max(len(code) - 1, len(new_code))          # keep the comments aligned
            line = f"{new_code.ljust(width)} #{comment}" if hash_ else new_code
        lines.append(line)
    lines += [f"{k} = {v}" for k, v in values.items()]   # injected names the cell lacks
    return "\n".join(lines)
