"""A small synthetic artefact of the scale study in its new schema (issue 61): budgets 1x
and 2x on seeds 0-2 for every row, seeds 3-9 at 1x for the rows of the kernel question,
per-seed records (``per_seed``), passes, training CE and the context gain beyond 128 at
5000. Two lengths (128: 6 windows, 5000: 4 windows); every CE is made from a row's offset
from the Euler CAT, a seed's shift and a window's difficulty, so that a test knows what
each comparison should read.

:func:`old_study` is the same rows in the schema of the artefact before issue 61 (as
committed at 364f0a7): budgets 1x, 2x and 4x on seeds 0-2 for every row, no per-seed
records, no passes and no context gain (its points keep their training CE)."""
from __future__ import annotations

import numpy as np

from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, CONTROL, EULER, FOX, KERPLE,
                                          KERPLE_LOG, KERNEL_QUESTION_ROWS, KERNEL_QUESTION_SEEDS,
                                          ROPE, plan_text, row_plan)
from catlib.experiment.scale_records import assemble_rows

LENGTHS = ("128", "5000")
WINDOWS = {"128": 6, "5000": 4}
# Each row's CE above the Euler CAT's (nats) and the spread of its seeds: the buckets the
# same within 0.02, KERPLE-log ahead by 0.03, FoX unresolved (noisy), the control and the
# baselines well behind.
OFFSET = {EULER: 0.0, BUCKETS: 0.002, KERPLE_LOG: 0.03, FOX: 0.01, CONTROL: 0.05,
          ALIBI: 0.06, ROPE: 0.08, KERPLE: 0.04, ALIBI_DEEP: 0.07}
SPREAD = {FOX: 0.04}
PLAN = {1: (0, 1, 2), 2: (0, 1, 2)}
OLD_PLAN = {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2)}
EXTRA = {row: {1: KERNEL_QUESTION_SEEDS} for row in KERNEL_QUESTION_ROWS}
# At 2x the KERPLE-log row overfits: validation CE up, training CE down.
OVERFIT = {KERPLE_LOG: 0.05}


def _record(row: str, seed: int, budget: int) -> dict:
    rng = np.random.default_rng([seed, budget, sum(map(ord, row))])
    shift = rng.normal(0, SPREAD.get(row, 0.004))
    better = {1: 0.0, 2: -0.05 + OVERFIT.get(row, 0.0), 4: -0.08}[budget]
    window_ce = {L: (1.6 - 0.02 * i + 0.03 * np.arange(WINDOWS[L]) + OFFSET[row] + shift + better
                     + rng.normal(0, 0.003, WINDOWS[L])).round(6).tolist()
                 for i, L in enumerate(LENGTHS)}
    full = (np.array(window_ce["5000"]) - 0.01).tolist()
    sliding = (np.array(full) + 0.02 - OFFSET[row] / 4 + rng.normal(0, 0.002, WINDOWS["5000"])).tolist()
    return {"steps": 100 * budget, "train_flops": 1e12 * budget, "seconds": 10.0 * budget,
            "passes": 1.3 * budget, "ce": {L: float(np.mean(w)) for L, w in window_ce.items()},
            "se": {L: float(np.std(w, ddof=1) / np.sqrt(len(w))) for L, w in window_ce.items()},
            "windows": dict(WINDOWS), "window_ce": window_ce,
            "train_ce": {"128": 1.5 - 0.04 * (budget - 1) + OFFSET[row] + shift},
            "context_gain": {"length": 5000, "train_length": 128, "stride": 16,
                             "windows": WINDOWS["5000"], "full": full, "sliding": sliding,
                             "gain": (np.array(sliding) - np.array(full)).tolist()}}


def _per_seed(plans: dict) -> dict:
    """``{row: {"<seed>": {"run", "budgets": {"<budget>": record}}}}`` for ``plans``
    (``{row: {budget: seeds}}``)."""
    return {row: {str(s): {"run": f"{row}-{s}", "budgets": {
        str(b): _record(row, s, b) for b, seeds in plan.items() if s in seeds}}
        for s in sorted({s for seeds in plan.values() for s in seeds})}
        for row, plan in plans.items()}


def new_study() -> dict:
    """The synthetic artefact (see the module's docstring)."""
    plans = {row: row_plan(PLAN, EXTRA, row) for row in OFFSET}
    per_seed = _per_seed(plans)
    return {"plan": plan_text(PLAN),
            "extra_seeds": {row: plan_text(s) for row, s in EXTRA.items()},
            "scoring": {"lengths": [128, 5000], "caps": [10**9, 10**9], "span_length": None,
                        "train_ce_length": 128,
                        "gain": {"length": 5000, "train_length": 128, "stride": 16}},
            "per_seed": per_seed, "rows": assemble_rows(per_seed, plans, list(OFFSET)),
            "provenance": {"profile": "cpu"}}


def old_study() -> dict:
    """The same rows as an artefact from before issue 61 (see the module's docstring):
    only ``plan``, ``rows`` (points without ``passes`` or ``context_gain``) and
    ``provenance``."""
    plans = {row: row_plan(OLD_PLAN, None, row) for row in OFFSET}
    rows = assemble_rows(_per_seed(plans), plans, list(OFFSET))
    for table in rows.values():
        for p in table["points"]:
            del p["passes"], p["context_gain"]
    return {"plan": plan_text(OLD_PLAN), "rows": rows, "provenance": {"profile": "cpu"}}
