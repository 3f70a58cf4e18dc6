"""The scale study's artefact read: its budgets, lengths, points and seeds; each difference
between two rows with the window-sampling error of its mean, so that the book's one rule
(:func:`~catlib.common.verdicts.called`) can call it; the leads over the best baseline, the
lowest row at a budget, the crossings and the moonshot. Chapter 11's sentences are
:mod:`catlib.book.scale_study`'s, its tables and frontier :mod:`catlib.book.scale_tables`', the
intro's figure (each row against the Euler CAT) :mod:`catlib.book.scale_figure`'s.

The study (:mod:`catlib.experiment.scale`) writes ``results/scale_<device>.json``:
``{"plan": {budget: seeds}, "rows": {row: {"points": [{"budget", "steps", "seeds",
"train_flops", "seconds", "ce": {"<length>": [CE per seed]}, "se": {"<length>": [its
standard error over the windows, per seed]}, "windows": {"<length>": n}, "window_ce":
{"<length>": [each window's CE, the mean over the seeds]}}]}}, "provenance": ...}``, a
budget being a multiple of the KERPLE-prior CAT's training FLOPs at the book's steps. The
chapter never trains it; it reads what is there and says what is not. A margin whose
window-sampling error the artefact cannot give (no standard error at that length) is not
called (:func:`window_term`).

At each budget and length the comparison is at equal training compute: every row spent
the same FLOPs (within 5 %). "The best baseline" there is the lowest of the baseline rows
(ALiBi as steps or as layers, RoPE) at that budget and length, seed by seed where a seed
is shared. A CAT row *leads* where its CE is below the best baseline's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..common.verdicts import called, paired_window_error, unpaired_error_bound
from ..experiment.scale_plan import (ALIBI, ALIBI_DEEP, BASELINE_ROWS, BIAS_KERNELS, BUCKETS,
                                     CONTROL, CONTROL_DEEP, EULER, EULER_DEEP, FIRE, FOX, KERPLE,
                                     KERPLE_LOG, KERPLE_ODE, ORACLE_ALIBI, ORACLE_EULER, ORACLES,
                                     ROPE)
from ..experiment.scale_records import seed_window_ce

# The devices a study artefact can come from (``results/scale_<device>.json``), the CPU first.
STUDY_DEVICES = ("cpu", "cuda")
# The moonshot: a row with the CAT's kernel ahead of the best baseline by this much (nats)
# at every length and every budget measured, called by the book's rule.
MOON_LEAD = 0.05
# The rows with the CAT's kernel (the kernel's controls and the learned biases, the CAT
# block with another bias, are compared with the Euler CAT apart: :func:`row_leads`).
CAT_ROWS = (KERPLE, KERPLE_ODE, EULER, EULER_DEEP)
# What the Euler CAT's kernel is measured against in its own block: ALiBi's fixed bias
# (one block and at depth) and the field's learned biases (issue 54).
KERNEL_RIVALS = ((EULER, CONTROL), (EULER_DEEP, CONTROL_DEEP),
                 *((EULER, bias) for bias in BIAS_KERNELS))
# The rows as the chapter's sentences, tables and figure name them (short enough to read;
# the chapter says what each is).
NAMES = {ALIBI: "ALiBi baseline", ALIBI_DEEP: "deep ALiBi baseline", ROPE: "RoPE baseline",
         KERPLE: "KERPLE-prior CAT", KERPLE_ODE: "ODE-consistent CAT", EULER: "Euler CAT",
         EULER_DEEP: "deep Euler CAT", CONTROL: "kernel control",
         CONTROL_DEEP: "deep kernel control", BUCKETS: "bucket bias", KERPLE_LOG: "KERPLE-log bias",
         FIRE: "FIRE bias", FOX: "FoX gate", ORACLE_ALIBI: "deep ALiBi on long windows",
         ORACLE_EULER: "Euler CAT on long windows"}


def name(row: str) -> str:
    return NAMES.get(row, row)


def load_studies(root) -> dict[str, dict]:
    """``{device: artefact}`` for each ``results/scale_<device>.json`` present, CPU first,
    each with its oracle apart (:func:`split_oracle`)."""
    out = {}
    for device in STUDY_DEVICES:
        path = Path(root) / "results" / f"scale_{device}.json"
        if path.is_file():
            out[device] = split_oracle(json.loads(path.read_text()))
    return out


def split_oracle(study: dict) -> dict:
    """``study`` with the oracle's rows (:data:`~catlib.experiment.scale_plan.ORACLES`, trained on
    longer windows: not rivals of the rows trained at 128) moved from ``rows`` and
    ``per_seed`` to ``oracle`` (``{row: {"points": [...]}}``, empty where the study has
    none), so that every reading of the rivals leaves them out."""
    apart = lambda part: {k: v for k, v in (study.get(part) or {}).items() if k not in ORACLES}  # noqa: E731
    return {**study, "rows": apart("rows"), "per_seed": apart("per_seed"),
            "oracle": {k: v for k, v in (study.get("rows") or {}).items() if k in ORACLES}}


def budgets(study: dict) -> list[int]:
    """The study's budgets, smallest first."""
    return sorted(int(b) for b in study["plan"])


def lengths(study: dict) -> list[str]:
    """The lengths any point is scored at, shortest first (as the artefact's keys); a point
    without one of them reads NaN there (:func:`matrix`)."""
    return sorted({L for t in study["rows"].values() for p in t["points"] for L in p["ce"]}, key=int)


def point(study: dict, row: str, budget: int) -> dict | None:
    """``row``'s point at ``budget`` (None where the row has none)."""
    points = study["rows"].get(row, {}).get("points", [])
    return next((p for p in points if p["budget"] == budget), None)


def per_seed(study: dict, row: str, budget: int, length: str, key: str = "ce") -> dict[int, float]:
    """``{seed: CE}`` (``key`` "se": its standard error) of ``row`` at ``budget`` and
    ``length``; empty where not measured."""
    p = point(study, row, budget)
    return dict(zip(p["seeds"], p[key][length])) if p and length in p.get(key, {}) else {}


def common_seeds(study: dict, budget: int, rows) -> list[int]:
    """The seeds every row of ``rows`` was measured on at ``budget``, smallest first; none
    where one of them has no point there. Every mean, verdict and crossing of the chapter
    is taken over such a common set, so that no row's mean holds a seed another lacks."""
    sets = [set((point(study, r, budget) or {}).get("seeds", [])) for r in rows]
    return sorted(set.intersection(*sets)) if sets and all(sets) else []


def compared_seeds(study: dict, row: str, budget: int, against=BASELINE_ROWS) -> list[int]:
    """The seeds at ``budget`` shared by ``row`` and *every* row of ``against`` (default:
    the baselines): a "who leads" verdict reads a budget only where none of them is missing
    (else "the best baseline" would be the best of the baselines that happen to be there)."""
    return common_seeds(study, budget, (row, *against))


def rivals(study: dict) -> list[str]:
    """The rows without the CAT's kernel that the moonshot is against, the best of them at
    each length: every baseline (required: one missing leaves a budget untested), then the
    study's other rows but :data:`CAT_ROWS` (the kernel's controls, the learned biases and
    FoX), each at the same compute."""
    return [*BASELINE_ROWS, *(r for r in study["rows"] if r not in (*CAT_ROWS, *BASELINE_ROWS))]


def matrix(study: dict, row: str, budget: int, seeds, key: str = "ce") -> np.ndarray:
    """CE (``key`` "se": its standard error) of ``row`` at ``budget``, ``[seeds, lengths]``
    (the seeds in the order given); NaN where the point lacks a length or a seed."""
    cols = [per_seed(study, row, budget, L, key) for L in lengths(study)]
    return np.array([[c.get(s, np.nan) for c in cols] for s in seeds], dtype=float).reshape(
        len(seeds), len(cols))


def difference(study: dict, budget: int, seeds, above, below) -> tuple[np.ndarray, np.ndarray]:
    """``(diff, window)``: CE(``above``) − CE(``below``) per seed and length ``[seeds,
    lengths]`` (each a row, or a row per length), and the window-sampling error of its mean
    per length (:func:`window_term`, NaN where it is not known: such a margin is not called)."""
    return _ce_difference(study, budget, seeds, above, below), window_term(
        study, budget, seeds, above, below)[0]


def _ce_difference(study: dict, budget: int, seeds, above, below) -> np.ndarray:
    """CE(``above``) − CE(``below``) ``[seeds, lengths]``."""
    pairs = list(zip(_per_length(study, above), _per_length(study, below)))
    ce = {r: matrix(study, r, budget, seeds) for pair in pairs for r in pair}
    return np.array([[ce[a][k, i] - ce[b][k, i] for i, (a, b) in enumerate(pairs)]
                     for k in range(len(seeds))], dtype=float).reshape(len(seeds), len(pairs))


def window_term(study: dict, budget: int, seeds, above, below) -> tuple[np.ndarray, np.ndarray]:
    """``(window, window_df)`` per length: the window-sampling error of the mean difference
    CE(``above``) − CE(``below``) over ``seeds`` and its degrees of freedom (the windows − 1),
    as :func:`~catlib.common.verdicts.interval` takes them.

    The error is paired (:func:`~catlib.common.verdicts.paired_window_error`) where both
    rows' windows can be averaged over exactly these seeds: from the artefact's per-seed
    records (:func:`~catlib.experiment.scale_records.seed_window_ce`: a comparison on seeds
    0-2 of a row trained on seeds 0-9 is paired too), else from a point scored on exactly
    these seeds (its ``window_ce`` is the mean over its own seeds). Else it is bounded from
    the rows' own standard errors (:func:`~catlib.common.verdicts.unpaired_error_bound`),
    on the fewer of the two points' recorded windows. A point that does not record its
    number of windows gets one degree of freedom, t(0.975, 1) = 12.7: a standard error
    needs two windows at least, so no quantile that could hold is wider. NaN where a point
    keeps no standard error at a length (an artefact from before every window was scored,
    or a length scored without one): the error is not known there, and the margin is not
    called on its seeds alone (issue 60: the rule never gets looser where less is known)."""
    window, df, seen = [], [], {}
    for a, b, L in zip(_per_length(study, above), _per_length(study, below), lengths(study)):
        pa, pb = point(study, a, budget), point(study, b, budget)
        wa, wb = (_windows_over(study, r, budget, seeds, seen).get(L) for r in (a, b))
        if wa is not None and wb is not None and len(wa) == len(wb) > 1:
            window.append(paired_window_error(wa, wb))
            df.append(len(wa) - 1)
            continue
        se = [matrix(study, r, budget, seeds, "se")[:, lengths(study).index(L)] for r in (a, b)]
        window.append(float(unpaired_error_bound(*se)) if len(seeds) else np.nan)
        counts = [(p or {}).get("windows", {}).get(L) for p in (pa, pb)]
        df.append(min(counts) - 1 if None not in counts else 1)
    return np.array(window, dtype=float), np.array(df, dtype=float)


def _windows_over(study: dict, row: str, budget: int, seeds, seen: dict) -> dict:
    """``{"<length>": [each window's CE, the mean over seeds]}`` of ``row`` at ``budget``
    over exactly ``seeds``: from the per-seed records where the artefact has them, else
    the point's own ``window_ce`` where it was scored on exactly these seeds, else empty
    (``seen``: a cache, by row, for one comparison's lengths)."""
    if row not in seen:
        got = seed_window_ce(study, row, budget, list(seeds)) if len(seeds) else None
        p = point(study, row, budget)
        if got is None and p is not None and sorted(p["seeds"]) == sorted(seeds):
            got = p.get("window_ce", {})
        seen[row] = got or {}
    return seen[row]


def _per_length(study: dict, rows) -> list[str]:
    """A row, or a row per length, as a row per length."""
    return [rows] * len(lengths(study)) if isinstance(rows, str) else list(rows)


def compare(study: dict, budget: int, seeds, above, below) -> dict:
    """``{"diff", "window", "window_df", "called"}``: CE(``above``) − CE(``below``) per seed
    and length (:func:`difference`), its window term (:func:`window_term`) and whether the
    book's rule calls it (:func:`~catlib.common.verdicts.called`)."""
    diff = _ce_difference(study, budget, seeds, above, below)
    window, df = window_term(study, budget, seeds, above, below)
    return {"diff": diff, "window": window, "window_df": df, "called": called(diff, window, df)}


def lead_at(study: dict, row: str, budget: int, seeds=None, against=BASELINE_ROWS) -> dict | None:
    """``row`` against the best of ``against`` (default: the baselines) at ``budget`` on
    ``seeds`` (default: its compared seeds): ``{"seeds", "best": [row per length], "diff":
    [seeds, lengths], "window": [lengths], "called": [lengths]}``, where ``best`` is
    the row of ``against`` with the lowest mean CE over those seeds at each length and
    ``diff`` = CE(best) − CE(row) per seed (> 0: ``row`` leads), called by the book's rule
    (:func:`compare`: also ``"window_df"``, and ``window`` NaN where it is not known). None
    where a row of ``against`` or a seed is missing."""
    against = tuple(against)
    seeds = compared_seeds(study, row, budget, against) if seeds is None else list(seeds)
    if not seeds or not set(seeds) <= set(compared_seeds(study, row, budget, against)):
        return None
    base = {r: matrix(study, r, budget, seeds).mean(0) for r in against}
    best = [min(against, key=lambda r: _rank(base[r][i])) for i in range(len(lengths(study)))]
    return {"seeds": seeds, "best": best, **compare(study, budget, seeds, best, row)}


def _rank(ce: float) -> tuple:
    """A sort key that puts a NaN (not measured) after every number."""
    return (bool(np.isnan(ce)), 0.0 if np.isnan(ce) else ce)


def lead_path(study: dict, row: str) -> tuple[list[int], list[int]]:
    """``(seeds, budgets)``: the seeds ``row`` and every baseline share at the smallest
    budget, and the budgets where all of them were measured on those seeds: the path along
    which ``row``'s lead is followed and its crossing sought. A budget trained on fewer
    seeds (the CPU's 8×, seed 0 only) is left off the path and said apart."""
    bs = budgets(study)
    seeds = compared_seeds(study, row, bs[0]) if bs else []
    on = [b for b in bs if seeds and set(seeds) <= set(compared_seeds(study, row, b))]
    return seeds, on


def leads(study: dict, row: str, length: str) -> dict[int, float]:
    """``{budget: mean lead over the best baseline}`` at ``length`` along :func:`lead_path`
    (> 0: ``row`` leads)."""
    seeds, on = lead_path(study, row)
    i = lengths(study).index(length)
    return {b: float(lead_at(study, row, b, seeds)["diff"][:, i].mean()) for b in on}


def crossings(study: dict, row: str, length: str) -> list[dict]:
    """Every sign change of ``row``'s mean lead over the best baseline along
    :func:`lead_path` at ``length``: ``{"between": (lo, hi), "at": budget or None,
    "seeds": [budget or None per seed]}``. ``at`` is interpolated linearly in log training
    FLOPs (the budgets are FLOPs multiples) between the two budgets, and only where the
    lead is called on both sides (:func:`~catlib.common.verdicts.called`); None: the order
    between ``lo`` and ``hi`` is not resolved. ``seeds``: per seed, where its own lead
    against the same baselines first changes sign (resolved changes only)."""
    seeds, on = lead_path(study, row)
    i = lengths(study).index(length)
    at = {b: lead_at(study, row, b, seeds) for b in on}
    diffs = {b: a["diff"][:, i] for b, a in at.items()}
    out = []
    for lo, hi in zip(on, on[1:]):
        a, b = diffs[lo].mean(), diffs[hi].mean()
        if a * b < 0:
            resolved = bool(at[lo]["called"][i] and at[hi]["called"][i])
            out.append({"between": (lo, hi), "at": _sign_change(lo, hi, a, b) if resolved else None,
                        "seeds": [_first_change(on, [diffs[x][k] for x in on]) if resolved else None
                                  for k in range(len(seeds))]})
    return out


def crossing(study: dict, row: str, length: str) -> dict | None:
    """The first crossing of :func:`crossings` that is resolved (called on both sides),
    the one a sentence states and the figure draws; None where there is none."""
    return next((c for c in crossings(study, row, length) if c["at"] is not None), None)


def _sign_change(lo: int, hi: int, a: float, b: float) -> float:
    """The budget between ``lo`` and ``hi`` where a lead going from ``a`` to ``b`` is 0,
    linear in log budget."""
    return float(np.exp(np.log(lo) + (np.log(hi) - np.log(lo)) * a / (a - b)))


def _first_change(bs, values) -> float | None:
    for (lo, a), (hi, b) in zip(zip(bs, values), zip(bs[1:], values[1:])):
        if a * b < 0:
            return _sign_change(lo, hi, a, b)
    return None


def moonshot(study: dict, row: str) -> dict:
    """Whether ``row`` leads the best compute-matched row without the CAT's kernel
    (:func:`rivals`: the baselines, the kernel's controls, the learned biases and FoX) by
    :data:`MOON_LEAD` at every length and every budget of the study, by the book's rule:
    ``{"met": the lead's 95 % interval lies above MOON_LEAD everywhere, "missed": somewhere
    it lies below, "smallest": the smallest mean lead or None, "where": (budget, length, the
    row it is against) of the smallest, "untested": [budgets where a seed of the plan is
    missing from the row or from any rival]}``. An untested budget is not met; neither met
    nor missed: not resolved."""
    smallest, where, untested, above, below = None, None, [], True, False
    plan = {int(b): set(s) for b, s in study["plan"].items()}
    against = rivals(study)
    for b in budgets(study):
        if set(compared_seeds(study, row, b, against)) != plan[b]:
            untested.append(b)
            continue
        lead = lead_at(study, row, b, against=against)
        mean, short = lead["diff"].mean(0), called(lead["diff"] - MOON_LEAD, lead["window"],
                                                     lead["window_df"])
        above = above and bool((short & (mean > MOON_LEAD)).all())
        below = below or bool((short & (mean < MOON_LEAD)).any())
        for m, L, best in zip(mean, lengths(study), lead["best"]):
            if np.isfinite(m) and (smallest is None or m < smallest):
                smallest, where = float(m), (b, L, best)
    met = not untested and smallest is not None and above
    return {"met": met, "missed": below, "smallest": smallest, "where": where, "untested": untested}


def lowest(study: dict, budget: int) -> dict | None:
    """At ``budget``, on the seeds every row shares: ``{"seeds", "firsts": [the lowest row
    per length, None where a row was not measured there], "nexts": [the next row],
    "unmeasured": {length: [rows not measured there]}, "diff": the next row's CE minus the
    lowest's [seeds, lengths], "window", "window_df", "called": [lengths]}`` (the margin
    called by the book's rule, :func:`compare`); None where no seed was measured on every
    row."""
    ls, rows = lengths(study), list(study["rows"])
    seeds = common_seeds(study, budget, rows)
    if not seeds:
        return None
    ce = {r: matrix(study, r, budget, seeds) for r in rows}
    unmeasured = {L: [r for r in rows if np.isnan(ce[r][:, i]).any()] for i, L in enumerate(ls)}
    ranked = [sorted(rows, key=lambda r: _rank(ce[r][:, i].mean())) for i in range(len(ls))]
    firsts = [None if unmeasured[L] else r[0] for L, r in zip(ls, ranked)]
    nexts = [r[1] if len(r) > 1 else r[0] for r in ranked]
    return {"seeds": seeds, "firsts": firsts, "nexts": nexts,
            "unmeasured": {L: r for L, r in unmeasured.items() if r},
            **compare(study, budget, seeds, nexts, [r[0] for r in ranked])}


def row_leads(study: dict, row: str, rival: str) -> dict[int, dict]:
    """Per budget, ``row`` against ``rival`` on their common seeds: ``{budget: {"seeds",
    "diff": CE(rival) − CE(row) [seeds, lengths], "window", "window_df", "called"}}``
    (:func:`compare`; > 0: ``row`` is lower); empty where the study lacks either row."""
    if not {row, rival} <= set(study["rows"]):
        return {}
    out = {}
    for b in budgets(study):
        seeds = common_seeds(study, b, (row, rival))
        if seeds:
            out[b] = {"seeds": seeds, **compare(study, b, seeds, rival, row)}
    return out


def kernel_leads(study: dict) -> dict[int, dict]:
    """Per budget, the Euler CAT against its kernel control (the same block with ALiBi's fixed
    bias, the learned kernel off): :func:`row_leads` (> 0: the kernel gains)."""
    return row_leads(study, EULER, CONTROL)


def within_budget(study: dict, tolerance: float = 0.05) -> bool:
    """Whether every point's counted training FLOPs lie within ``tolerance`` of its budget
    times the 1× budget's FLOPs (:func:`unit_flops`)."""
    unit = unit_flops(study)
    return all(abs(p["train_flops"] / (p["budget"] * unit) - 1) < tolerance
               for t in study["rows"].values() for p in t["points"])


def unit_flops(study: dict) -> float:
    """The FLOPs of the 1× budget: the KERPLE-prior CAT's point there, else any row's. A
    study without a 1× point (budgets 2 and 4, say) takes the KERPLE-prior CAT's (else any
    row's) smallest point, divided by its multiple."""
    rows = [KERPLE, *[r for r in study["rows"] if r != KERPLE]]
    points = [p for r in rows for p in sorted(study["rows"].get(r, {}).get("points", []),
                                              key=lambda p: p["budget"])]
    if not points:
        raise ValueError("the scale study holds no point: nothing measures its 1× budget")
    p = next((p for p in points if p["budget"] == 1), points[0])
    return p["train_flops"] / p["budget"]
