"""The command line: execute the notebooks of a profile, then build the book::

    python -m catlib.book --profile smoke|cpu|paper --device auto|cpu|cuda|mps [--only NAME]

The runner (:mod:`catlib.book.runner`) executes the notebooks in :data:`PROFILES` order
with papermill into ``book/notebooks/``, records run times, environment and git commit
for the reproducibility page, then builds the book with ``jupyter-book build . -W -n
--keep-going`` (:mod:`catlib.book.builder`). A full cpu or paper run also publishes the
headline table and the extrapolation artefacts (:mod:`catlib.book.publish`).

On an error it names the notebook, the cell and the cause, keeps the notebooks
executed before it (and the last good copy of the failing one), saves the failed
execution as ``NAME.failed.ipynb`` and exits non-zero. ``--refs`` writes the
nbval references (``tests/nbval/``) instead of the book's notebooks.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..common.devices import DEVICES, DeviceError, check_jobs
from . import profiles as _profiles
from .builder import build
from .errors import BookError
from .locate import find_root
from .parameters import check_profiles
from .publish import publish_headline
from .runner import run


def main(argv: list[str] | None = None) -> int:
    """``python -m catlib.book``: 0 when built (or executed), 1 on an error, 2 on bad
    ``--jobs``/``--devices``, 130 on Ctrl-C."""
    args = _parser().parse_args(argv)
    bad = _set_jobs(args.jobs) if args.jobs is not None else None
    if bad is None and args.devices:
        bad = _set_devices(args.devices)
    if bad is not None:
        return bad
    try:
        return _run_and_build(args)
    except (BookError, DeviceError) as err:
        print(f"[book] error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("[book] interrupted: the notebooks executed so far are kept and no half-written "
              "notebook is left; run the same command again (finished training runs are reused, "
              "interrupted ones resume)", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    """The command line's options."""
    parser = argparse.ArgumentParser(
        prog="python -m catlib.book",
        description="Execute the book's notebooks with papermill for a profile, then build the book.")
    parser.add_argument("--profile", default="cpu",
                        help=f"one of {list(_profiles.PROFILES)} (default: cpu)")
    parser.add_argument("--device", default="auto", help=f"one of {list(DEVICES)} (default: auto)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="training runs at once, each on one thread (default: "
                             "$CATLIB_JOBS, else the CPU cores, or on a GPU as many as its "
                             "memory and the CPUs allow); the numbers do not depend on it")
    parser.add_argument("--devices", default=None, metavar="LIST",
                        help="GPUs to spread the independent runs over, e.g. cuda:0,cuda:1 "
                             "(with --device cuda; --jobs runs on each, default one)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this notebook (repeatable); the others keep their last execution")
    parser.add_argument("--no-build", action="store_true", help="execute only, do not build")
    parser.add_argument("--build-only", action="store_true",
                        help="build from the notebooks already executed")
    parser.add_argument("--refs", action="store_true",
                        help="write nbval references to tests/nbval (no figures, report or build)")
    return parser


def _set_jobs(jobs: int) -> int | None:
    """``--jobs``: into ``CATLIB_JOBS``, which the notebooks' kernels inherit; 2 when < 1."""
    try:
        check_jobs(jobs)
    except ValueError as e:
        print(f"[book] error: {e}", file=sys.stderr)
        return 2
    os.environ["CATLIB_JOBS"] = str(jobs)   # the notebooks' kernels inherit it
    return None


def _set_devices(devices: str) -> int | None:
    """``--devices``: checked against this machine's GPUs, into ``CATLIB_DEVICES``; 2 when
    one is not a CUDA device of this machine."""
    import torch
    try:
        listed = [torch.device(d.strip()) for d in devices.split(",") if d.strip()]
    except RuntimeError as e:
        print(f"[book] error: --devices {devices!r}: {e}", file=sys.stderr)
        return 2
    absent = [str(d) for d in listed if d.type != "cuda" or d.index is None
              or d.index >= torch.cuda.device_count()]
    if absent:
        print(f"[book] error: --devices: {absent} are not CUDA devices of this machine "
              f"({torch.cuda.device_count()} found); list them as cuda:0,cuda:1", file=sys.stderr)
        return 2
    os.environ["CATLIB_DEVICES"] = ",".join(str(d) for d in listed)
    return None


def _run_and_build(args: argparse.Namespace) -> int:
    """Execute (unless ``--build-only``), publish the results of a full cpu or paper run,
    then build (unless ``--no-build``); ``--refs`` writes the nbval references only."""
    root = find_root()
    if not args.build_only:
        if args.refs:
            run(args.profile, args.device, args.only, root=root,
                output_dir=root / "tests" / "nbval", figure_dir="", report=False)
            print(f"[book] nbval references written to {root / 'tests' / 'nbval'}")
            return 0
        records = run(args.profile, args.device, args.only, root=root)
        if not args.only and args.profile != "smoke":
            publish_headline(root, args.profile, records)
    if args.no_build:
        return 0
    missing = [n for n in check_profiles() if not (root / "book" / "notebooks" / f"{n}.ipynb").exists()]
    if missing:
        raise BookError(f"not executed yet: {missing}; run without --only/--build-only first")
    first = build(root)
    print(f"[book] built; first page: {first}")
    return 0
