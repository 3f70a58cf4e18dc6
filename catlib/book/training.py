"""The book's first stage: the training runs of the experiment chapters (05, 06, 08, 09),
in one pool."""
from __future__ import annotations

import dataclasses
from pathlib import Path

TRAINING_STAGE = "training runs of 05, 06, 08, 09 and 10"
CONTEXT_CHAPTER = "09_using_context"   # its study's settings and its copy test


def train_book_pool(params: dict[str, dict], root: Path, device: str,
                    log=print) -> dict | None:
    """Train every run the selected experiment chapters (05, 06, 08, 09) will ask for, in
    one pool of workers, before they execute; they then reuse the runs, with their stored
    evaluations, per-position curves, context gains (at the chapters' ``gain_windows``),
    dropout-on tables and (09 selected) copy tests.

    One pool for all of them keeps every core busy to the end, where a pool per chapter
    ends with one worker idle behind its longest run. Only time depends on this: a chapter
    trains whatever it misses itself. ``params``: each selected notebook's parameters,
    read as an :class:`~catlib.experiment.config.ExperimentConfig` each.
    Returns ``{"trained": n, "reused": m}`` (runs), or None (nothing done) when no such
    chapter is selected, or when their shared sizes and settings differ (then each chapter
    trains its own).
    """
    from ..experiment import grid as ex
    from ..experiment.config import ExperimentConfig

    chosen = {n: p for n, p in params.items() if n in ex.CHAPTER_ROWS}
    if not chosen:
        return None
    setups = {n: ExperimentConfig.from_parameters(p) for n, p in chosen.items()}
    first = next(iter(setups.values()))
    if any(s.shared() != first.shared() for s in setups.values()):
        log("[book] the experiment chapters differ in their shared settings: each trains its own runs")
        return None
    # 05's plots read the validation lines of its runs: its training settings, when chosen.
    experiment = setups.get("05_training", first)
    copy = None
    if CONTEXT_CHAPTER in chosen:     # the study's rows, and every row's copy test
        experiment = dataclasses.replace(experiment, study=setups[CONTEXT_CHAPTER].study)
        copy = (chosen[CONTEXT_CHAPTER]["copy_distances"], chosen[CONTEXT_CHAPTER]["copy_passages"])
    seeds = _row_seeds(chosen)
    protocol = chosen.get("06_context_length", {}).get("published_protocol", False)
    n_runs = sum(len(v) for v in seeds.values())
    log(f"[book] {TRAINING_STAGE}: {len(seeds)} rows, {n_runs} row-seed pairs, one pool ...",
        flush=True)
    profile = next(iter(chosen.values()))["profile"]
    runs = ex.train_grid(list(seeds), experiment, seeds=lambda label: sorted(seeds[label]),
                         root=root / "runs" / f"book-{profile}", device=device,
                         dropout_on=list(experiment.evaluation.lengths) if protocol else None,
                         echo=lambda line: log(f"[book]   {line}", flush=True), copy=copy,
                         gain_windows=_gain_windows(chosen))
    unique = {id(run): run for run in runs.values()}.values()
    return {"trained": sum(not run.reused for run in unique),
            "reused": sum(run.reused for run in unique)}


train_runs_first = train_book_pool   # its name in earlier versions


def _gain_windows(chosen: dict[str, dict]) -> int | None:
    """The windows of the context gain the ``chosen`` chapters read (their ``gain_windows``;
    the largest where they differ: a chapter that reads fewer scores its own), None where
    none reads it."""
    return max((p["gain_windows"] for p in chosen.values() if p.get("gain_windows")), default=None)


def _row_seeds(chosen: dict[str, dict]) -> dict[str, set]:
    """Row label -> every seed any of the ``chosen`` chapters asks of that row."""
    from ..experiment import grid as ex

    seeds: dict[str, set] = {}
    for name, p in chosen.items():
        for label in ex.CHAPTER_ROWS[name]:
            seeds.setdefault(label, set()).update(ex.chapter_seeds(name, label, p))
    return {label: s for label, s in seeds.items() if s}   # a row no chapter trains: none
