"""The book's profiles and its papermill runner (``python -m catlib.book``), one module a concept:

- :mod:`~catlib.book.profiles`: ``PROFILES``, ``_EXPERIMENT``, ``COMMON_PARAMETERS`` (what
  each profile is for; how to add a notebook);
- :mod:`~catlib.book.parameters`: the notebooks' ``parameters`` cells, checked against the profiles;
- :mod:`~catlib.book.runner`: ``run``, the notebooks of a profile in order, after
  :mod:`~catlib.book.training` (``train_book_pool``, the experiment chapters' runs in one pool);
- :mod:`~catlib.book.execution`: one notebook through papermill, atomically, and its failure;
  :mod:`~catlib.book.processes` (Ctrl-C, the kernel's process tree) and
  :mod:`~catlib.book.rewrite` (the parameters shown once) serve it;
- :mod:`~catlib.book.run_report`: ``Record`` and the run report of the reproducibility page;
- :mod:`~catlib.book.device_check`: that page's section "On a GPU", read from ``results/gpu_check_*.json``;
- :mod:`~catlib.book.builder`: ``jupyter-book build``;
- :mod:`~catlib.book.publish`: the README's headline table and the ``results/`` artefacts;
- :mod:`~catlib.book.references`: the smoke book's execution against the nbval references
  (``python -m catlib.book.references``, ``make nbval-check``);
- :mod:`~catlib.book.cli` (and ``__main__``): the command line;
- :mod:`~catlib.book.locate`: ``find_root``, ``save_figure`` (the notebooks import it from here);
  :mod:`~catlib.book.errors`: ``BookError``, ``NotebookFailed``.

Every name below is importable from ``catlib.book`` as before the split. A test that
replaces one (``monkeypatch``) patches the module that looks it up: the profile table is
read as ``catlib.book.profiles.PROFILES`` everywhere.
"""
from ..common.devices import DEVICES, DeviceError, resolve_device
from .builder import build, first_page
from .cli import main
from .errors import BookError, NotebookFailed
from .execution import _failed_cell, execute, notebook_failed
from .locate import FIGURE_DIR, find_root, save_figure
from .parameters import _papermill_names, check_profiles, notebook_parameters
from .processes import _descendants, _descendants_from_proc, _stop_kernel_on_ctrl_c
from .profiles import _EXPERIMENT, COMMON_PARAMETERS, PROFILES
from .publish import README_MARKERS, publish_extrapolation, publish_headline
from .run_report import BOOK_PACKAGES, Record, _now, _update_report, render_profiles, render_report
from .rewrite import show_parameters_once
from .runner import run
from .training import TRAINING_STAGE, train_book_pool, train_runs_first

__all__ = [
    "BOOK_PACKAGES", "COMMON_PARAMETERS", "DEVICES", "FIGURE_DIR", "PROFILES", "README_MARKERS",
    "TRAINING_STAGE", "BookError", "DeviceError", "NotebookFailed", "Record", "build",
    "check_profiles", "execute", "find_root", "first_page", "main", "notebook_failed",
    "notebook_parameters", "publish_extrapolation", "publish_headline", "render_profiles",
    "render_report", "resolve_device", "run", "save_figure", "show_parameters_once",
    "train_book_pool", "train_runs_first",
    # private, imported by tests and benchmarks
    "_EXPERIMENT", "_descendants", "_descendants_from_proc", "_failed_cell", "_now",
    "_papermill_names", "_stop_kernel_on_ctrl_c", "_update_report",
]
