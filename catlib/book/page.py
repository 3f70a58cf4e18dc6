"""What every page of the book does first, and the small helpers its cells share.

A notebook's first code cell checks its parameters, then calls :func:`setup` once::

    page.check_parameters(globals())
    ROOT, dev = page.setup(device)

:func:`check_parameters` (:mod:`catlib.book.parameter_rules`, named here for the
notebooks) reads the values of the ``parameters`` cell (those papermill injected
included) and stops an invalid one with one line naming the parameter and the fix.

:func:`setup` finds the book's root (:func:`catlib.book.find_root`: the folder with ``_config.yml``,
found upward from the working directory, since papermill, nbval and jupyter-cache each
start the kernel elsewhere),
resolves the ``device`` parameter to a ``torch.device`` (``"auto"`` picks CUDA, then MPS,
then the CPU; :func:`catlib.common.devices.resolve_device`) and applies the book's plot style,
``catlib/book/catlib.mplstyle``, shipped with the package.

The other functions are page plumbing, not the methods a page shows: :func:`show` (lay
out, save for other pages, display), :func:`timed` (wall time of a call, the device
synchronised), :func:`smooth` (a trailing moving average of a training curve) and
:func:`pm_cells` (the "mean ± std" cells of one row of a result table).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from ..common.devices import resolve_device
from ..common.formatting import mean_std, pm
from .locate import find_root, save_figure
from .parameter_rules import ParameterError, check_parameters  # noqa: F401 (the notebooks' first cell)

STYLE = "catlib.mplstyle"   # package data of catlib.book (pyproject.toml)


@dataclass(frozen=True)
class Page:
    """Where a page runs: the book's ``root`` folder and the torch ``device`` it computes on.

    Unpacks as ``root, device`` (``ROOT, dev = page.setup(device)``).
    """

    root: Path
    device: torch.device

    def __iter__(self) -> Iterator:
        return iter((self.root, self.device))


def build_log(line: str) -> None:
    """``line`` for the book's build log, not the page (a run trained or reused, the pool's
    progress): appended to the file that the book's runner names in its kernel's
    environment (:data:`catlib.book.execution.BUILD_LOG_ENV`), which relays it to its log;
    in a notebook run otherwise, printed. A chapter prints one summary line instead
    (:func:`catlib.experiment.runs_summary`)."""
    from .execution import BUILD_LOG_ENV

    path = os.environ.get(BUILD_LOG_ENV)
    if not path:
        print(line, flush=True)
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(" ".join(line.splitlines()) + "\n")


def use_style() -> None:
    """Apply the book's matplotlib style (``catlib/book/catlib.mplstyle``) to this process."""
    import matplotlib.style
    with as_file(files("catlib.book") / STYLE) as path:
        matplotlib.style.use(str(path))


def setup(device: str = "auto") -> Page:
    """Set up a page: find the book root, resolve ``device``, apply the plot style.

    ``device``: the notebook's ``device`` parameter (``auto``, ``cpu``, ``cuda``, ``mps``);
    an unknown or absent device raises :class:`catlib.common.devices.DeviceError`. Returns a
    :class:`Page`, which unpacks as ``(root, device)``.
    """
    root = find_root()
    dev = torch.device(resolve_device(device))
    use_style()
    return Page(root, dev)


def show(fig, name: str = "", figure_dir: str = "", root: Path | None = None) -> None:
    """Lay out ``fig`` (unless it holds a legend of its own, laid out by its maker), save
    it as ``root/figure_dir/name`` when both are given (a figure that another page shows,
    :func:`catlib.book.save_figure`), and display it."""
    import matplotlib.pyplot as plt
    if not fig.legends:     # a legend of the figure's own has been laid out with the axes
        fig.tight_layout()  # (tight_layout knows nothing of it and would draw over it)
    if name and figure_dir:
        save_figure(fig, name, figure_dir, root)
    plt.show()


def synchronize(device: torch.device) -> None:
    """Wait for the queued work of ``device`` (CUDA, MPS) to finish; nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn: Callable, device: torch.device):
    """``(fn(), seconds)``: the wall time of one call, ``device`` synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def smooth(values: Sequence[float], width: int) -> np.ndarray:
    """Trailing moving average over ``width`` points, as long as ``values`` (the first
    points average what there is so far)."""
    values = np.asarray(values, dtype=float)
    width = max(1, int(width))
    csum = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - width, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def rebuild_spread(root: Path, profile: str) -> float | None:
    """What a rebuild on another CPU kernel dispatch moved a row by (nats,
    ``results/rebuild_spread_<profile>.json``), stated beside the book's verdicts, no floor
    of their rule (:func:`catlib.common.verdicts.called`); None where it was never measured."""
    import json

    path = Path(root) / "results" / f"rebuild_spread_{profile}.json"
    return json.loads(path.read_text())["max_abs_diff"] if path.is_file() else None


def pm_cells(per_seed, sign: bool = False, digits: int = 3) -> list[str]:
    """The cells of one table row from per-seed values ``[seeds, columns]``: "mean ± std"
    per column, the mean alone when there is one seed."""
    a = np.asarray(per_seed, dtype=float)
    m, s = mean_std(a)
    one = a.shape[0] == 1
    return [pm(x, None if one else y, digits, sign) for x, y in zip(m, s)]
