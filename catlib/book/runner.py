"""The runner: every notebook of a profile (or the ``--only`` ones), in :data:`PROFILES`
order, executed with papermill into ``book/notebooks/``, after the training stage.

It records run times, environment and git commit for the reproducibility page
(:mod:`catlib.book.run_report`) after every notebook. ``--refs`` runs it into
``tests/nbval/`` instead (the nbval references: no figures, no report).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable

from ..common.devices import DEVICES, resolve_device
from . import profiles as _profiles
from .errors import BookError, NotebookFailed
from .execution import execute
from .locate import FIGURE_DIR, find_root
from .parameters import check_profiles, notebook_parameters
from .run_report import Record, _now, _update_report
from .training import TRAINING_STAGE, train_runs_first


def run(profile: str, device: str = "auto", only: Iterable[str] | None = None, *,
        root: Path | None = None, output_dir: Path | None = None,
        figure_dir: str | None = FIGURE_DIR, profiles: dict | None = None,
        report: bool = True, train_first: bool = True, log=print) -> list[Record]:
    """Execute the notebooks of ``profile`` (or just ``only``) on ``device``.

    With ``train_first``, the training runs of the experiment chapters go first, in one
    pool (:func:`train_runs_first`). Returns one :class:`Record` per executed notebook
    (and one for that stage); raises :class:`BookError`
    on bad input and :class:`NotebookFailed` when a notebook raises. With
    ``report``, ``book/_generated/run_report.{json,md}`` are updated after every
    notebook (a failure is recorded too).
    """
    root = root or find_root()
    profiles = _profiles.PROFILES if profiles is None else profiles
    source_dir = root / "notebooks"
    selected, dev = _check_input(profile, device, only, profiles, source_dir)
    output_dir = output_dir or root / "book" / "notebooks"
    _prepare(output_dir)
    records = []
    params_of = {name: {**profiles[profile][name], "device": dev, "profile": profile,
                        "figure_dir": figure_dir or ""} for name in selected}
    if train_first:
        record = _training_stage(params_of, source_dir, root, profile, dev, log)
        if record:
            records.append(record)
            if report:
                _update_report(root, [record])
    for name in selected:
        record = _execute_one(name, params_of[name], source_dir, output_dir, root, report, log)
        records.append(record)
        if report:
            _update_report(root, [record])
    return records


def _check_input(profile: str, device: str, only: Iterable[str] | None, profiles: dict,
                 source_dir: Path) -> tuple[list[str], str]:
    """The notebooks to run and the resolved device type; :class:`BookError` on an unknown
    profile, notebook or device, or a profile table the notebooks do not match."""
    if profile not in profiles:
        raise BookError(f"unknown profile {profile!r}; choose one of {list(profiles)}")
    names = check_profiles(profiles, source_dir)
    selected = list(only) if only else names
    unknown = [n for n in selected if n not in names]
    if unknown:
        raise BookError(f"unknown notebook(s) {unknown}; the book has {names}")
    if device not in DEVICES:
        raise BookError(f"unknown device {device!r}; choose one of {list(DEVICES)}")
    return selected, resolve_device(device).type


def _prepare(output_dir: Path) -> None:
    """Remove what a killed build left in ``output_dir``; set the kernels' OpenMP policy."""
    # Leftovers of a build killed while a notebook landed (older runners staged here too).
    for stale in (*output_dir.glob(".*.landing.ipynb"), *output_dir.glob(".*.running.ipynb")):
        stale.unlink(missing_ok=True)
    # Idle OpenMP threads sleep instead of spinning: on a busy machine spinning
    # threads slow small torch operations down 10-50x. Kernels inherit this.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _training_stage(params_of: dict[str, dict], source_dir: Path, root: Path, profile: str,
                    dev: str, log) -> Record | None:
    """:func:`train_runs_first` on the selected notebooks' full parameters (their defaults
    under the profile's); its :class:`Record`, or None when it did nothing."""
    start = time.perf_counter()
    done = train_runs_first({n: {**notebook_parameters(source_dir / f"{n}.ipynb"), **p}
                             for n, p in params_of.items()}, root, dev, log)
    if not done:
        return None
    status = f"ok: {done['trained']} runs trained, {done['reused']} reused"
    record = Record(TRAINING_STAGE, profile, dev,
                    round(time.perf_counter() - start, 1), status, _now())
    log(f"[book] {TRAINING_STAGE}: {record.seconds:.1f} s ({status})", flush=True)
    return record


def _execute_one(name: str, params: dict, source_dir: Path, output_dir: Path, root: Path,
                 report: bool, log) -> Record:
    """:func:`execute` one notebook and return its :class:`Record`; a failure is recorded
    in the report (with ``report``) before :class:`NotebookFailed` goes on."""
    profile, dev = params["profile"], params["device"]
    log(f"[book] {name}: profile {profile}, device {dev} ...", flush=True)
    try:
        seconds = execute(name, params, source_dir, output_dir, log=log)
    except NotebookFailed:
        if report:
            _update_report(root, [Record(name, profile, dev, float("nan"), "failed", _now())])
        raise
    record = Record(name, profile, dev, round(seconds, 1), "ok", _now())
    log(f"[book] {name}: {record.seconds:.1f} s", flush=True)
    return record
