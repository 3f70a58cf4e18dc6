"""The book's first stage: the training runs of the experiment chapters (05, 06, 08), in one pool."""
from __future__ import annotations

from pathlib import Path

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
    from .. import experiment as ex

    chosen = {n: p for n, p in params.items() if n in ex.CHAPTER_ROWS}
    if not chosen:
        return None
    first = next(iter(chosen.values()))
    if any(p.get(k) != first.get(k) for p in chosen.values() for k in _SHARED):
        log("[book] the experiment chapters differ in their shared settings: each trains its own runs")
        return None
    seeds = _row_seeds(chosen)
    train, sizes = _train_settings(chosen, first), _sizes(first)
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


def _row_seeds(chosen: dict[str, dict]) -> dict[str, set]:
    """Row label -> every seed any of the ``chosen`` chapters asks of that row."""
    from .. import experiment as ex

    seeds: dict[str, set] = {}
    for name, p in chosen.items():
        for label in ex.CHAPTER_ROWS[name]:
            seeds.setdefault(label, set()).update(ex.chapter_seeds(name, label, p))
    return seeds


def _train_settings(chosen: dict[str, dict], first: dict) -> dict:
    """The training settings the chapters share (with 05's validation, when 05 is chosen)."""
    train = dict(train_steps=first["train_steps"], lr=first["lr"], batch=first["batch"],
                 seq=first["seq"])
    if "05_training" in chosen:      # its plots read the validation lines of its runs
        train.update(val_every=chosen["05_training"]["val_every"],
                     val_windows=chosen["05_training"]["val_windows"])
    return train


def _sizes(first: dict) -> dict:
    """The model sizes the chapters share."""
    return dict(d_model=first["d_model"], n_heads=first["n_heads"], n_freq=first["n_freq"],
                blocks=first["blocks"], solver=first["solver"], solver_steps=first["solver_steps"],
                dropout=first["dropout"])
