"""A small synthetic artefact of the scale study on the code corpus (chapter 12's
``results/scale_code_<device>.json``): the rows of ``study_rows("code")`` (the two oracle
rows at 1× only) at 1×, 2× and 4× on seeds 0-2, no extra seeds, per-seed records with
passes, training CE and the context gain beyond 128 at 5000 with its per-position curves,
scored on 21 stretches of the validation files (``scoring["span_tiles"]``).

Two lengths (128: 8 windows, 5000: 5 windows). Every CE is a row's offset from the Euler
CAT (:data:`OFFSET`), a seed's shift (:data:`SPREAD`), a budget's gain and a window's
difficulty, and every context gain a row's :data:`GAIN` plus a little noise, so that a
test knows what each comparison should read: by default the Euler CAT is ahead of every
other row at every budget and length, and it and the oracle gain from context beyond 128.
:func:`code_study` takes other offsets, spreads, gains and passes, and leaves out runs
(a study in progress); :func:`study` makes an artefact of any rows and plan (chapter 11's
Tiny Shakespeare study for the comparison of orders)."""
from __future__ import annotations

import numpy as np

from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, CONTROL, EULER, EULER_DEEP,
                                          FOX, KERPLE_LOG, ORACLE_ALIBI, ORACLE_EULER, ROPE,
                                          plan_text, row_plan, study_rows)
from catlib.experiment.scale_records import assemble_rows, position_bins

LENGTHS = ("128", "5000")
WINDOWS = {"128": 8, "5000": 5}
PLAN = {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2)}
ROWS = study_rows("code")
# Each row's CE above the Euler CAT's (nats): every other row well behind it; the oracle
# rows, trained on long windows, below it.
OFFSET = {EULER: 0.0, EULER_DEEP: 0.04, BUCKETS: 0.03, KERPLE_LOG: 0.05, FOX: 0.06,
          CONTROL: 0.08, ALIBI: 0.10, ALIBI_DEEP: 0.09, ROPE: 0.12,
          ORACLE_ALIBI: -0.05, ORACLE_EULER: -0.04}
SPREAD = 0.003                  # each seed's shift (nats, standard deviation)
# Each row's context gain beyond 128 (nats): the oracle gains, the Euler CAT a little, the
# others nothing.
GAIN = {ORACLE_ALIBI: 0.06, ORACLE_EULER: 0.05, EULER: 0.012}
BETTER = {1: 0.0, 2: -0.05, 4: -0.08}          # what a budget takes off every CE
PASSES = 0.22                   # passes over the training files per 1× (4×: 0.88)


def _record(row: str, seed: int, budget: int, offset: dict, spread: dict, gain: dict,
            passes: float, overfit: dict) -> dict:
    # a seed's shift is its run's, the same at every budget it is trained to
    shift = np.random.default_rng([seed, sum(map(ord, row))]).normal(0, spread.get(row, SPREAD))
    rng = np.random.default_rng([seed, budget, sum(map(ord, row))])
    up = overfit.get(row, {}).get(budget, 0.0)
    base = offset.get(row, 0.0) + shift + BETTER.get(budget, -0.1) + up
    window_ce = {L: (1.6 - 0.02 * i + 0.03 * np.arange(WINDOWS[L]) + base
                     + rng.normal(0, 0.002, WINDOWS[L])).round(6).tolist()
                 for i, L in enumerate(LENGTHS)}
    full = (np.array(window_ce["5000"]) - 0.01).tolist()
    g = gain.get(row, 0.0)
    sliding = (np.array(full) + g + rng.normal(0, 0.001, WINDOWS["5000"])).tolist()
    edges = position_bins(128, 5000)
    far = np.log(np.array(edges[:-1]) / 128) / np.log(5000 / 128)       # 0 at 128, ~1 at 5000
    full_curve = (np.mean(full) + 0.03 - 0.06 * far).tolist()
    return {"steps": 100 * budget, "train_flops": 1e12 * budget, "seconds": 10.0 * budget,
            "passes": passes * budget,
            "ce": {L: float(np.mean(w)) for L, w in window_ce.items()},
            "se": {L: float(np.std(w, ddof=1) / np.sqrt(len(w))) for L, w in window_ce.items()},
            "windows": dict(WINDOWS), "window_ce": window_ce,
            "train_ce": {"128": 1.5 - 0.04 * (budget - 1) + offset.get(row, 0.0) + shift - up},
            "context_gain": {"length": 5000, "train_length": 128, "stride": 16,
                             "windows": WINDOWS["5000"], "full": full, "sliding": sliding,
                             "gain": (np.array(sliding) - np.array(full)).tolist(),
                             "bins": edges, "full_curve": full_curve,
                             "sliding_curve": (np.array(full_curve) + 2 * g * far).tolist()}}


def study(rows=ROWS, plan=None, offset=None, spread=None, gain=None, passes: float = PASSES,
          overfit=None, missing=(), span_tiles: int | None = 21) -> dict:
    """An artefact of ``rows`` on ``plan`` (default :data:`PLAN`), each row's CE
    ``offset[row]`` above the Euler CAT's, its seeds spread by ``spread[row]``, its context
    gain ``gain[row]``, ``passes`` passes per 1×, ``overfit[row][budget]`` nats added to
    its validation CE there (and taken off its training CE). ``missing``: ``(row, seed)``
    runs not finished (the artefact is then a study in progress, ``"partial": True``).
    Not split (the oracle rows in ``rows``): the chapter splits it as it loads it."""
    plan = PLAN if plan is None else plan
    offset, spread, gain = ({**OFFSET, **(offset or {})}, spread or {},
                            GAIN if gain is None else gain)
    plans = {row: row_plan(plan, {}, row) for row in rows}
    per_seed = {}
    for row, own in plans.items():
        seeds = sorted({s for ss in own.values() for s in ss} - {s for r, s in missing if r == row})
        if seeds:
            per_seed[row] = {str(s): {"run": f"{row}-{s}", "budgets": {
                str(b): _record(row, s, b, offset, spread, gain, passes, overfit or {})
                for b, ss in own.items() if s in ss}} for s in seeds}
    finished = [{"row": r, "seed": int(s), "run": e["run"], "trained": True}
                for r, runs in per_seed.items() for s, e in runs.items()]
    scoring = {"lengths": [int(L) for L in LENGTHS], "caps": [10**9] * len(LENGTHS),
               "span_length": 5000, "train_ce_length": 128,
               "gain": {"length": 5000, "train_length": 128, "stride": 16}}
    if span_tiles is not None:
        scoring["span_tiles"] = span_tiles
    return {"plan": plan_text(plan), "extra_seeds": {}, "scoring": scoring,
            "per_seed": per_seed, "rows": assemble_rows(per_seed, plans, list(rows)),
            "identity": {"plan": plan_text(plan), "extra_seeds": {}, "rows": list(rows),
                         "corpus": "synthetic"},
            "finished_runs": finished, "partial": bool(missing),
            "provenance": {"profile": "cpu"}}


def code_study(**changes) -> dict:
    """The code study's synthetic artefact (:func:`study` on the code study's rows and
    plan), with ``changes`` (``offset``, ``spread``, ``gain``, ``passes``, ``overfit``,
    ``missing``)."""
    return study(ROWS, PLAN, **changes)
