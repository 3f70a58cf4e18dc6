"""The build: ``jupyter-book build`` of the executed notebooks and the text pages."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .errors import BookError


def build(root: Path, log=print) -> Path:
    """``jupyter-book build --all -W -n --keep-going``; return the path of the first page."""
    exe = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--all",
           "-W", "-n", "--keep-going"]
    log("[book] " + " ".join(cmd), flush=True)
    result = subprocess.run(cmd, cwd=root)
    if result.returncode != 0:
        raise BookError(f"jupyter-book build failed (exit {result.returncode}); "
                        f"with -W every warning above is an error")
    first = root / "_build" / "html" / (first_page(root) + ".html")
    if not first.exists():
        raise BookError(f"the build finished but {first} is missing")
    return first


def first_page(root: Path) -> str:
    """The ``root:`` entry of ``_toc.yml`` (without suffix)."""
    for line in (root / "_toc.yml").read_text().splitlines():
        if line.startswith("root:"):
            return line.split(":", 1)[1].strip().removesuffix(".md").removesuffix(".ipynb")
    raise BookError("_toc.yml has no root: entry")
