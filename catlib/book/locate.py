"""Where things are: the repository root, and the figures the text pages share."""
from __future__ import annotations

from pathlib import Path

from .errors import BookError

FIGURE_DIR = "book/figures"  # relative to the repository root; cross-page figures go here


def find_root(start: Path | None = None) -> Path:
    """The repository root: the first folder upward from ``start`` (default: cwd) with ``_config.yml``.

    Falls back to the folder above the ``catlib`` package, so ``python -m catlib.book``
    works from anywhere inside an editable checkout.
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    package_parent = Path(__file__).resolve().parents[2]     # catlib/book/locate.py -> root
    if (package_parent / "_config.yml").is_file():
        return package_parent
    raise BookError(f"no _config.yml found above {here}: run from inside the repository")


def save_figure(fig, name: str, figure_dir: str, root: Path | None = None) -> Path | None:
    """Save ``fig`` as ``root/figure_dir/name`` for the text pages; nothing when ``figure_dir`` is empty.

    Notebooks show their figures inline; a file is only needed where another page
    shows the figure (a ``{figure}`` directive, with caption and label).
    """
    if not figure_dir:
        return None
    path = (root or find_root()) / figure_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    return path
