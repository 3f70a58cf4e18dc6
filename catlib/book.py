"""The book's profiles and its papermill runner.

Every notebook in ``notebooks/`` has one cell tagged ``parameters``. A *profile*
fixes the sizes of every notebook at once; its definition lives only here, in
:data:`PROFILES` (profile -> notebook -> parameter overrides):

- ``smoke``: each notebook in under a minute on 2 CPU cores (CI, nbval references);
- ``cpu``: the default, the whole book in under 30 minutes on 2 CPU cores; a
  notebook's own ``parameters`` cell holds these values, so that running it by
  hand gives the cpu profile (``tests/test_book.py`` checks they agree);
- ``paper``: the published sizes, for a GPU.

The runner executes the notebooks in :data:`PROFILES` order with papermill into
``book/notebooks/``, records run times, environment and git commit for the
reproducibility page, then builds the book with ``jupyter-book build . -W -n
--keep-going``::

    python -m catlib.book --profile smoke|cpu|paper --device auto|cpu|cuda|mps [--only NAME]

On an error it names the notebook, the cell and the cause, keeps the notebooks
executed before it (and the last good copy of the failing one), saves the failed
execution as ``NAME.failed.ipynb`` and exits non-zero. ``--refs`` writes the
nbval references (``tests/nbval/``) instead of the book's notebooks.

To add a notebook: put ``notebooks/NN_name.ipynb`` (with a ``parameters`` cell
holding ``device``, ``profile``, ``figure_dir`` and its own sizes) in every
profile below, and ``book/notebooks/NN_name`` in ``_toc.yml``.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from .devices import DEVICES, DeviceError, resolve_device
from .provenance import environment

# Parameters every notebook declares; the runner sets them, profiles may not.
COMMON_PARAMETERS = ("device", "profile", "figure_dir")
FIGURE_DIR = "book/figures"  # relative to the repository root; cross-page figures go here

# The experiment of notebooks 05, 06 and 08 (and the split study of 07): one set of sizes
# and training settings per profile, shared so that their runs are the same runs.
_EXPERIMENT: dict[str, dict] = {
    "smoke": dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
                  dropout=0.0, train_steps=40, lr=4e-3, batch=4, seq=32, lengths=[16, 32, 64],
                  eval_windows=4, curve_windows=4),
    "cpu": dict(d_model=128, n_heads=8, n_freq=32, blocks=1, solver="rk4-classic", solver_steps=1,
                dropout=0.0, train_steps=500, lr=4e-3, batch=32, seq=128,
                lengths=[128, 512, 1024, 5000], eval_windows=32, curve_windows=8),
    "paper": dict(d_model=128, n_heads=8, n_freq=32, blocks=1, solver="rk4-classic", solver_steps=4,
                  dropout=0.1, train_steps=800, lr=3e-4, batch=32, seq=256,
                  lengths=[128, 512, 1024, 5000], eval_windows=256, curve_windows=256),
}

PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "01_spectral_kernels": dict(n_freq=12, grid=48, n_heads=2),
        "02_quadrature": dict(n_freq=12, q_max=128, lengths=[128, 512, 1024, 5000],
                              conv_length=64),
        "03_sobolev_penalty": dict(n_freq=12, grid=32, fit_steps=300,
                                   penalty_weights=[0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-2]),
        "04_depth_solvers": dict(d_model=32, n_heads=2, n_freq=8, seq=32, batch=2,
                                 euler_steps=[1, 2, 4, 8], rk4_steps=[1, 2, 4],
                                 dopri5_rtols=[1e-3, 1e-5], dropout_max_steps=60,
                                 published_batch=2, published_max_steps=3, step_repeats=1),
        "05_training": dict(_EXPERIMENT["smoke"], val_every=10, val_windows=2, check_windows=2),
        "06_context_length": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2], published_seeds=[0]),
        "07_audit": dict(d_model=16, n_heads=2, n_freq=8, seq=32, batch=2, dopri5_max_steps=40,
                         brief_steps=30, eval_windows=4, split_d_model=16, split_n_heads=2,
                         split_steps=40, split_lr=4e-3, split_batch=4, split_seq=32,
                         split_val_every=10),
        "08_beyond": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2]),
    },
    "cpu": {
        "01_spectral_kernels": dict(n_freq=32, grid=128, n_heads=4),
        "02_quadrature": dict(n_freq=32, q_max=512, lengths=[128, 256, 512, 1024, 2048, 5000],
                              conv_length=256),
        "03_sobolev_penalty": dict(n_freq=16, grid=64, fit_steps=600,
                                   penalty_weights=[0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2]),
        "04_depth_solvers": dict(d_model=64, n_heads=4, n_freq=16, seq=64, batch=4,
                                 euler_steps=[1, 2, 4, 8, 16, 32], rk4_steps=[1, 2, 4, 8],
                                 dopri5_rtols=[1e-3, 1e-5, 1e-7], dropout_max_steps=600,
                                 published_batch=32, published_max_steps=40, step_repeats=2),
        "05_training": dict(_EXPERIMENT["cpu"], val_every=50, val_windows=8, check_windows=8),
        "06_context_length": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2], published_seeds=[0]),
        "07_audit": dict(d_model=32, n_heads=4, n_freq=16, seq=64, batch=4, dopri5_max_steps=600,
                         brief_steps=200, eval_windows=16, split_d_model=128, split_n_heads=8,
                         split_steps=500, split_lr=4e-3, split_batch=32, split_seq=128,
                         split_val_every=50),
        "08_beyond": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2]),
    },
    "paper": {
        "01_spectral_kernels": dict(n_freq=48, grid=256, n_heads=8),
        "02_quadrature": dict(n_freq=48, q_max=1024, lengths=[128, 256, 512, 1024, 2048, 5000],
                              conv_length=256),
        "03_sobolev_penalty": dict(n_freq=24, grid=96, fit_steps=1500,
                                   penalty_weights=[0.0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3,
                                                    1e-2]),
        "04_depth_solvers": dict(d_model=128, n_heads=8, n_freq=32, seq=256, batch=8,
                                 euler_steps=[1, 2, 4, 8, 16, 32, 64], rk4_steps=[1, 2, 4, 8, 16],
                                 dopri5_rtols=[1e-3, 1e-5, 1e-7], dropout_max_steps=2000,
                                 published_batch=32, published_max_steps=2000, step_repeats=3),
        "05_training": dict(_EXPERIMENT["paper"], val_every=100, val_windows=32, check_windows=32),
        "06_context_length": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2], published_seeds=[0, 1, 2]),
        "07_audit": dict(d_model=128, n_heads=8, n_freq=32, seq=256, batch=8,
                         dopri5_max_steps=2000, brief_steps=300, eval_windows=64,
                         split_d_model=128, split_n_heads=8, split_steps=800, split_lr=3e-4,
                         split_batch=32, split_seq=256, split_val_every=100),
        "08_beyond": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2]),
    },
}


class BookError(RuntimeError):
    """Bad input to the runner (profile, parameter, device, notebook name) or a failed build."""


class NotebookFailed(BookError):
    """A notebook raised: which one, which cell, why, and where the failed execution is."""

    def __init__(self, name: str, cell: str, cause: str, saved: Path | None):
        self.name, self.cell, self.cause, self.saved = name, cell, cause, saved
        where = f"; the failed execution is saved as {saved}" if saved else ""
        super().__init__(f"notebook {name} failed in {cell}: {cause}{where}")


@dataclass
class Record:
    """One notebook execution, as the reproducibility page lists it."""

    notebook: str
    profile: str
    device: str
    seconds: float
    status: str
    finished: str


# ------------------------------------------------------------------ locating things

def find_root(start: Path | None = None) -> Path:
    """The repository root: the first folder upward from ``start`` (default: cwd) with ``_config.yml``.

    Falls back to the folder above this package, so ``python -m catlib.book`` works
    from anywhere inside an editable checkout.
    """
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "notebooks").is_dir():
            return folder
    package_parent = Path(__file__).resolve().parent.parent
    if (package_parent / "_config.yml").is_file():
        return package_parent
    raise BookError(f"no _config.yml found above {here}: run from inside the repository")


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
    profiles = PROFILES if profiles is None else profiles
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
        path = source_dir / f"{name}.ipynb"
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
    return names


def _papermill_names(path: Path) -> list[str]:
    import logging

    import papermill as pm
    logger = logging.getLogger("papermill")
    level = logger.level
    logger.setLevel(logging.ERROR)           # its own warning would repeat ours
    try:
        return list(pm.inspect_notebook(str(path)))
    finally:
        logger.setLevel(level)


# ------------------------------------------------------------------ running

def _failed_cell(err: Exception, executed: Path) -> str:
    """'cell index N (first line)': N counts from 0 in the source notebook (injected cell left out)."""
    index = getattr(err, "cell_index", None)
    if index is None:
        return "an unknown cell (the kernel stopped)"
    shift = 0
    try:
        import nbformat
        nb = nbformat.read(str(executed), as_version=4)
        injected = [i for i, c in enumerate(nb.cells)
                    if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        shift = int(bool(injected) and injected[0] < index)
    except Exception:  # noqa: BLE001 - the message is still useful without the shift
        pass
    first = (getattr(err, "source", "") or "").strip().splitlines()[:1]
    return f"cell index {index - shift}" + (f" ({first[0][:60]!r})" if first else "")


@contextlib.contextmanager
def _stop_kernel_on_ctrl_c(interrupted: list):
    """Ctrl-C while a notebook runs: kill the kernel (and its workers) at once, then let the
    caller raise KeyboardInterrupt. The kernel runs in a session of its own, so a terminal's
    Ctrl-C never reaches it, and papermill would otherwise wait for the running cell."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(*_):
        interrupted.append(True)
        children = _descendants(os.getpid())
        if not children:
            raise KeyboardInterrupt
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _descendants(pid: int) -> list[int]:
    """Process ids of every descendant of ``pid``.

    From psutil (the book extra) on every OS; without it, from /proc, which macOS lacks.
    Where neither is there the list is empty, and Ctrl-C only raises KeyboardInterrupt
    in the runner instead of killing the kernel first.
    """
    try:
        import psutil   # imported here: the library itself does not need it
    except ImportError:
        return _descendants_from_proc(pid)
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:   # pid has exited
        return []


def _descendants_from_proc(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """:func:`_descendants` read from ``proc`` (Linux's /proc); empty where there is none."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def execute(name: str, parameters: dict, source_dir: Path, output_dir: Path,
            timeout: float | None = None) -> float:
    """Run one notebook with papermill; return its wall time in seconds.

    The execution is written to a private temporary folder and moved to
    ``NAME.ipynb`` only on success: a failure, Ctrl-C or kill -9 never leaves a
    half-written notebook in ``output_dir`` nor replaces a good executed copy.
    """
    import tempfile

    import papermill as pm
    source = source_dir / f"{name}.ipynb"
    output_dir.mkdir(parents=True, exist_ok=True)
    failed = output_dir / f"{name}.failed.ipynb"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="catlib-book-") as staging:
        partial = Path(staging) / f"{name}.ipynb"
        interrupted: list[bool] = []
        try:
            with _stop_kernel_on_ctrl_c(interrupted):
                pm.execute_notebook(str(source), str(partial), parameters=parameters,
                                    kernel_name="python3", cwd=str(output_dir), progress_bar=False,
                                    request_save_on_cell_execute=False, execution_timeout=timeout)
        except Exception as err:  # noqa: BLE001 - every failure is reported the same way
            if interrupted:
                raise KeyboardInterrupt from None
            cause = (f"{err.ename}: {err.evalue}" if hasattr(err, "ename")
                     else f"{type(err).__name__}: {err}")
            saved = None
            if partial.exists():
                shutil.move(str(partial), str(failed))
                saved = failed
            raise NotebookFailed(name, _failed_cell(err, failed), cause.strip(), saved) from None
        if interrupted:
            raise KeyboardInterrupt
        # Same filesystem or not, the copy lands under a hidden name first, then one rename.
        landing = output_dir / f".{name}.landing.ipynb"
        show_parameters_once(partial, landing)
        os.replace(landing, output_dir / f"{name}.ipynb")
    failed.unlink(missing_ok=True)
    return time.perf_counter() - start


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
        values = {}
        for node in ast.parse(injected[0].source).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                values[node.targets[0].id] = ast.get_source_segment(injected[0].source, node.value)
        lines = []
        for line in params[0].source.splitlines():
            code, hash_, comment = line.partition("#")
            name = code.split("=", 1)[0].strip()
            if "=" in code and name in values:
                new_code = f"{name} = {values.pop(name)}"
                width = max(len(code) - 1, len(new_code))          # keep the comments aligned
                line = f"{new_code.ljust(width)} #{comment}" if hash_ else new_code
            lines.append(line)
        lines += [f"{k} = {v}" for k, v in values.items()]   # injected names the cell lacks
        params[0].source = "\n".join(lines)
        tags = injected[0].metadata.setdefault("tags", [])
        if "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, str(dest))


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
    profiles = PROFILES if profiles is None else profiles
    if profile not in profiles:
        raise BookError(f"unknown profile {profile!r}; choose one of {list(profiles)}")
    source_dir = root / "notebooks"
    names = check_profiles(profiles, source_dir)
    selected = list(only) if only else names
    unknown = [n for n in selected if n not in names]
    if unknown:
        raise BookError(f"unknown notebook(s) {unknown}; the book has {names}")
    if device not in DEVICES:
        raise BookError(f"unknown device {device!r}; choose one of {list(DEVICES)}")
    dev = resolve_device(device).type
    output_dir = output_dir or root / "book" / "notebooks"
    # Leftovers of a build killed while a notebook landed (older runners staged here too).
    for stale in (*output_dir.glob(".*.landing.ipynb"), *output_dir.glob(".*.running.ipynb")):
        stale.unlink(missing_ok=True)
    # Idle OpenMP threads sleep instead of spinning: on a busy machine spinning
    # threads slow small torch operations down 10-50x. Kernels inherit this.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    records = []
    params_of = {name: {**profiles[profile][name], "device": dev, "profile": profile,
                        "figure_dir": figure_dir or ""} for name in selected}
    if train_first:
        start = time.perf_counter()
        done = train_runs_first({n: {**notebook_parameters(source_dir / f"{n}.ipynb"), **p}
                                 for n, p in params_of.items()}, root, dev, log)
        if done:
            status = f"ok: {done['trained']} runs trained, {done['reused']} reused"
            record = Record(TRAINING_STAGE, profile, dev,
                            round(time.perf_counter() - start, 1), status, _now())
            log(f"[book] {TRAINING_STAGE}: {record.seconds:.1f} s ({status})", flush=True)
            records.append(record)
            if report:
                _update_report(root, [record])
    for name in selected:
        params = params_of[name]
        log(f"[book] {name}: profile {profile}, device {dev} ...", flush=True)
        try:
            seconds = execute(name, params, source_dir, output_dir)
        except NotebookFailed:
            if report:
                _update_report(root, [Record(name, profile, dev, float("nan"), "failed", _now())])
            raise
        record = Record(name, profile, dev, round(seconds, 1), "ok", _now())
        log(f"[book] {name}: {record.seconds:.1f} s", flush=True)
        records.append(record)
        if report:
            _update_report(root, [record])
    return records


TRAINING_STAGE = "training runs of 05, 06 and 08"
_SHARED = ("d_model", "n_heads", "n_freq", "blocks", "solver", "solver_steps", "dropout",
           "train_steps", "lr", "batch", "seq", "lengths", "eval_windows",
           "curve_windows")


def train_runs_first(params: dict[str, dict], root: Path, device: str,
                     log=print) -> dict | None:
    """Train every run the selected experiment chapters (05, 06, 08) will ask for, in one
    pool of workers, before they execute; they then reuse the runs, with their stored
    evaluations, per-position curves and dropout-on tables.

    One pool for all of them keeps every core busy to the end, where a pool per chapter
    ends with one worker idle behind its longest run. Only time depends on this: a chapter
    trains whatever it misses itself. ``params``: each selected notebook's parameters.
    Returns ``{"trained": n, "reused": m}`` (runs), or None (nothing done) when no such
    chapter is selected, or when their shared sizes and settings differ (then each chapter
    trains its own).
    """
    from . import experiment as ex

    chosen = {n: p for n, p in params.items() if n in ex.CHAPTER_ROWS}
    if not chosen:
        return None
    first = next(iter(chosen.values()))
    if any(p.get(k) != first.get(k) for p in chosen.values() for k in _SHARED):
        log("[book] the experiment chapters differ in their shared settings: each trains its own runs")
        return None
    seeds: dict[str, set] = {}
    for name, p in chosen.items():
        for label in ex.CHAPTER_ROWS[name]:
            seeds.setdefault(label, set()).update(ex.chapter_seeds(name, label, p))
    train = dict(train_steps=first["train_steps"], lr=first["lr"], batch=first["batch"],
                 seq=first["seq"])
    if "05_training" in chosen:      # its plots read the validation lines of its runs
        train.update(val_every=chosen["05_training"]["val_every"],
                     val_windows=chosen["05_training"]["val_windows"])
    sizes = dict(d_model=first["d_model"], n_heads=first["n_heads"], n_freq=first["n_freq"],
                 blocks=first["blocks"], solver=first["solver"], solver_steps=first["solver_steps"],
                 dropout=first["dropout"])
    lengths = list(first["lengths"])
    protocol = chosen.get("06_context_length", {}).get("published_protocol", False)
    n_runs = sum(len(v) for v in seeds.values())
    log(f"[book] {TRAINING_STAGE}: {len(seeds)} rows, {n_runs} row-seed pairs, one pool ...",
        flush=True)
    runs = ex.train_rows(list(seeds), lambda label: sorted(seeds[label]), sizes, train,
                         root=root / "runs" / f"book-{first['profile']}", device=device,
                         lengths=lengths[:-1], eval_windows=first["eval_windows"],
                         curve_length=lengths[-1], curve_windows=first.get("curve_windows"),
                         dropout_on=lengths if protocol else None,
                         echo=lambda line: log(f"[book]   {line}", flush=True))
    unique = {id(run): run for run in runs.values()}.values()
    return {"trained": sum(not run.reused for run in unique),
            "reused": sum(run.reused for run in unique)}


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


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


# ------------------------------------------------------------------ reproducibility report

# The packages whose versions the run report records.
BOOK_PACKAGES = ("catlib", "torch", "torchdiffeq", "numpy", "matplotlib", "papermill",
                 "jupyter-book", "myst-nb", "sphinx", "nbval")


def _update_report(root: Path, records: list[Record]) -> None:
    folder = root / "book" / "_generated"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run_report.json"
    data = json.loads(path.read_text()) if path.exists() else {"notebooks": {}}
    for record in records:
        data["notebooks"][record.notebook] = asdict(record)
    data["environment"] = environment(BOOK_PACKAGES, root=root)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    (folder / "run_report.md").write_text(render_report(data, root))
    (folder / "profiles.md").write_text(render_profiles())


def render_profiles(profiles: dict | None = None) -> str:
    """A Markdown table of every profile's parameters, one row per notebook and parameter."""
    profiles = PROFILES if profiles is None else profiles
    names = list(profiles)
    lines = ["| notebook | parameter | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for notebook in next(iter(profiles.values())):
        keys = list(dict.fromkeys(k for p in names for k in profiles[p][notebook]))
        for key in keys:
            cells = [f"`{profiles[p][notebook].get(key, '')}`" for p in names]
            lines.append(f"| `{notebook}` | `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_report(data: dict, root: Path) -> str:
    """The Markdown tables the reproducibility page includes."""
    try:
        order = check_profiles()
    except BookError:
        order = []
    rows = sorted(data["notebooks"].values(),
                  key=lambda r: (order.index(r["notebook"]) if r["notebook"] in order else -1,
                                 r["notebook"]))
    lines = ["| notebook | profile | device | run time (s) | status | finished |",
             "|---|---|---|---:|---|---|"]
    for r in rows:
        secs = "" if r["seconds"] != r["seconds"] else f"{r['seconds']:.1f}"
        name = r["notebook"] if r["notebook"] == TRAINING_STAGE else f"`{r['notebook']}`"
        lines.append(f"| {name} | {r['profile']} | {r['device']} | {secs} | "
                     f"{r['status']} | {r['finished']} |")
    total = sum(r["seconds"] for r in rows if r["seconds"] == r["seconds"])
    lines += ["", f"Total run time: {total:.0f} s.", ""]
    env = data["environment"]
    commit = env["git"]["commit"] or "unknown (not a git checkout)"
    if env["git"]["dirty"]:
        commit += " (with uncommitted changes)"
    lines += ["| | |", "|---|---|",
              f"| git commit | `{commit}` |",
              f"| Python | {env['python']} |",
              f"| platform | `{env['platform']}`, {env['cpus']} CPUs |"]
    lines += [f"| {pkg} | {ver or 'not installed'} |" for pkg, ver in env["versions"].items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ building

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


# ------------------------------------------------------------------ command line

README_MARKERS = ("<!-- headline:start -->", "<!-- headline:end -->")


def publish_headline(root: Path, profile: str, records: list[Record]) -> Path | None:
    """Label the headline table notebook 06 wrote and copy it to ``results/`` and the README.

    The label names the profile, device, commit and date of the build, so the README's
    numbers are an artefact of this project, never typed by hand.
    """
    table = root / "book" / "_generated" / "headline_table.md"
    if not table.exists():
        return None
    from .provenance import git_state

    git = git_state(root, ignore=("README.md", "results"))   # our own outputs do not count
    commit = (git["commit"] or "unknown")[:12] + (" (uncommitted changes)" if git["dirty"] else "")
    device = records[0].device if records else "?"
    label = (f"_Written by `python -m catlib.book --profile {profile}` on {device}, "
             f"commit {commit}, {_now()}._")
    text = f"{label}\n\n{table.read_text().strip()}\n"
    out = root / "results" / f"headline_{profile}.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    publish_extrapolation(root, profile, {"profile": profile, "device": device,
                                          "commit": commit, "date": _now()})
    readme = root / "README.md"
    start, end = README_MARKERS
    body = readme.read_text() if readme.exists() else ""
    if profile == "cpu" and start in body and end in body:
        head, rest = body.split(start, 1)
        readme.write_text(f"{head}{start}\n{text}{end}{rest.split(end, 1)[1]}")
    print(f"[book] headline table written to {out}")
    return out


def publish_extrapolation(root: Path, profile: str, label: dict) -> list[Path]:
    """Merge the notebooks' shares of the extrapolation artefacts into ``results/``.

    ``book/_generated/extrapolation/<notebook>.json`` and ``.csv`` (written by
    :func:`catlib.experiment.write_part`) become ``results/extrapolation_<profile>.json``
    (``{model: {"train_length", "leak", "ce"}}``) and ``results/position_ce_<profile>.csv``
    (``model,position,ce``); ``results/provenance_<profile>.json`` labels both.
    """
    from .extrapolation import (read_extrapolation_json, read_position_csv,
                                write_extrapolation_json, write_position_csv)

    parts = root / "book" / "_generated" / "extrapolation"
    rows, curves, written = {}, {}, []
    for part in sorted(parts.glob("*.json")) if parts.is_dir() else []:
        rows.update(read_extrapolation_json(part))
    for part in sorted(parts.glob("*.csv")) if parts.is_dir() else []:
        curves.update(read_position_csv(part))
    results = root / "results"
    results.mkdir(exist_ok=True)
    if rows:
        written.append(results / f"extrapolation_{profile}.json")
        write_extrapolation_json(written[-1], rows)
    if curves:
        written.append(results / f"position_ce_{profile}.csv")
        write_position_csv(written[-1], curves)
    if written:
        meta = {**label, "written_by": f"python -m catlib.book --profile {profile}",
                "artefacts": [p.name for p in written]}
        (results / f"provenance_{profile}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"[book] extrapolation artefacts written: {', '.join(p.name for p in written)}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m catlib.book",
        description="Execute the book's notebooks with papermill for a profile, then build the book.")
    parser.add_argument("--profile", default="cpu",
                        help=f"one of {list(PROFILES)} (default: cpu)")
    parser.add_argument("--device", default="auto", help=f"one of {list(DEVICES)} (default: auto)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="training runs at once on a CPU, each on one thread (default: "
                             "$CATLIB_JOBS or the number of CPU cores); the numbers do not "
                             "depend on it")
    parser.add_argument("--devices", default=None, metavar="LIST",
                        help="GPUs to spread the independent runs over, e.g. cuda:0,cuda:1 "
                             "(with --device cuda; one process per GPU)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only this notebook (repeatable); the others keep their last execution")
    parser.add_argument("--no-build", action="store_true", help="execute only, do not build")
    parser.add_argument("--build-only", action="store_true",
                        help="build from the notebooks already executed")
    parser.add_argument("--refs", action="store_true",
                        help="write nbval references to tests/nbval (no figures, report or build)")
    args = parser.parse_args(argv)
    if args.jobs is not None:
        if args.jobs < 1:
            print(f"[book] error: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
            return 2
        os.environ["CATLIB_JOBS"] = str(args.jobs)   # the notebooks' kernels inherit it
    if args.devices:
        import torch
        try:
            listed = [torch.device(d.strip()) for d in args.devices.split(",") if d.strip()]
        except RuntimeError as e:
            print(f"[book] error: --devices {args.devices!r}: {e}", file=sys.stderr)
            return 2
        absent = [str(d) for d in listed if d.type != "cuda" or d.index is None
                  or d.index >= torch.cuda.device_count()]
        if absent:
            print(f"[book] error: --devices: {absent} are not CUDA devices of this machine "
                  f"({torch.cuda.device_count()} found); list them as cuda:0,cuda:1", file=sys.stderr)
            return 2
        os.environ["CATLIB_DEVICES"] = ",".join(str(d) for d in listed)
    try:
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
    except (BookError, DeviceError) as err:
        print(f"[book] error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("[book] interrupted: the notebooks executed so far are kept and no half-written "
              "notebook is left; run the same command again (finished training runs are reused, "
              "interrupted ones resume)", file=sys.stderr)
        return 130
    print(f"[book] built; first page: {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
