"""The scale study's per-seed records, and its points assembled from them.

A *record* is everything one run of the study says about one budget: the run of a row and
a seed, read at the step where that budget's weights were kept (its branch, or its last
step). A *point* is a row at a budget over its seeds: the records of those seeds side by
side (a list per seed) or averaged. The study's artefact keeps every record
(``per_seed``), so that a study resumed in a later session, on a machine where the run
directories are gone, reads what a run it finished says instead of training it again, and
builds the same points from them (:func:`assemble_rows`).

A record (:func:`run_records`) holds, at its budget:

- ``steps``, ``train_flops``, ``seconds``: the run's steps to the budget and what they
  cost (:func:`~catlib.experiment.ladder.step_train_flops`);
- ``passes``: the characters its batches read (``steps · batch · seq``) over the characters
  of the training part: how many times the row went over the text it learns from;
- ``ce``, ``se``, ``windows``, ``window_ce`` per length: CE on every window of the
  validation span, its standard error from window sampling, the number of windows and
  each window's CE (rounded to :data:`WINDOW_DIGITS` decimals: far below any margin the
  book reads, and a seventh of the artefact);
- ``train_ce``: CE at the shortest length on as many windows of the training part (a row
  whose validation CE rises while this falls is overfitting);
- ``context_gain``: the context gain beyond the training length
  (:func:`catlib.measure.context_gain.context_gain`) at the longest length, every window of
  the span: per window the CE of the targets past the training length read in full and
  with a sliding window of the training length, and their difference.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..common.devices import one_thread
from ..measure.context_gain import context_gain
from ..measure.evaluate import window_starts
from .ladder import ladder_model, ladder_scores, step_train_flops, text_digest

# What a point's context gain keeps per seed: per window (the first three) and, where the
# record has them, per position bin (:func:`position_bins`, ``bins``).
CURVE_KEYS = ("full", "sliding", "gain", "full_curve", "sliding_curve")
# Decimals kept of each window's CE in a record (a nat to a millionth).
WINDOW_DIGITS = 6
# What a record holds; a record without one of them is not a finished record.
RECORD_KEYS = ("steps", "train_flops", "seconds", "passes", "ce", "se", "windows", "window_ce",
               "train_ce", "context_gain")


def scoring_of(lengths, caps, span_length: int | None, train_length: int,
               span_tiles: int | None = None) -> dict:
    """What every record is scored on, as the artefact keeps it: ``{"lengths", "caps",
    "span_length", "train_ce_length", "gain": {"length", "train_length", "stride"}}``
    (``train_length``: the rows' training length T; the gain's stride T // 8), and
    ``"span_tiles"`` where the span is that many stretches of the validation part
    (:func:`span_corpus`; absent: all of it). Records of another scoring are not read
    (:func:`catlib.experiment.scale.recorded_runs`)."""
    out = {"lengths": [int(L) for L in lengths], "caps": [int(c) for c in caps],
           "span_length": span_length, "train_ce_length": int(lengths[0]),
           "gain": {"length": int(max(lengths)), "train_length": int(train_length),
                    "stride": max(1, int(train_length) // 8)}}
    return out if span_tiles is None else {**out, "span_tiles": int(span_tiles)}


def span_corpus(corpus, span_length: int | None, tiles: int | None):
    """``corpus`` with its validation part cut to the span a study scores: ``tiles``
    stretches of ``span_length`` ids spread evenly over it (first and last included), read
    back to back as files are, and one stretch more after them (the book's protocol keeps
    a whole stretch for the last window's next id,
    :func:`~catlib.measure.evaluate.text_span`); ``corpus`` itself where ``tiles`` is None
    (every window of the whole validation part: Tiny Shakespeare's, 21 stretches of 5000)."""
    if tiles is None:
        return corpus
    starts = window_starts(len(corpus.val), span_length, tiles + 1, span_length).tolist()
    val = torch.cat([corpus.val[s:s + span_length] for s in starts]
                    + [corpus.val[starts[-1] + span_length:][:1]])
    return dataclasses.replace(corpus, val=val)


def passes(steps: int, batch: int, seq: int, train_characters: int) -> float:
    """Passes over the training part: ``steps · batch · seq`` characters read over its
    ``train_characters``."""
    return steps * batch * seq / train_characters


def point_context_gain(run, model_key: str, step: int, corpus, gain: dict,
                       span_length: int | None, device=None) -> dict:
    """The context gain of the weights ``run`` kept after ``step`` steps, a point of its
    ladder (a branch, or its last step; ``gain``: :func:`scoring_of`'s), stored with the
    run (:func:`catlib.experiment.gain_runs.run_context_gain` stores a run's final
    weights'): ``{"length", "train_length", "stride", "windows", "full", "sliding",
    "gain"}``, the last three lists of floats ``[windows]``."""
    from ..common.provenance import code_fingerprint
    from ..runs.identity import weights_digest
    from ..runs.stored import stored_with_run

    model = ladder_model(run, step, model_key, device or "cpu")
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("measure.context_gain",)),
             "step": step, **gain, "span_length": span_length, "text": text_digest(corpus.val)}

    def measure() -> dict:
        found = context_gain(model, corpus.val, gain["length"], gain["train_length"],
                             gain["stride"], span_length=span_length, device=device)
        edges = position_bins(gain["train_length"], gain["length"])
        curve = lambda at: [float(at[a:b].mean()) for a, b in zip(  # noqa: E731
            np.subtract(edges[:-1], gain["train_length"]), np.subtract(edges[1:], gain["train_length"]))]
        return {**{k: found[k] for k in ("length", "train_length", "stride", "windows")},
                **{k: found[k].tolist() for k in ("full", "sliding", "gain")},
                "bins": edges, "full_curve": curve(found["full_positions"]),
                "sliding_curve": curve(found["sliding_positions"])}
    return stored_with_run(run, f"context-gain-{step}-{model_key}.json", ident, measure)


# Bins of the per-position curves a record keeps (log-spaced from the training length to
# the longest: the far positions are many and change slowly).
CURVE_BINS = 24


def position_bins(train_length: int, length: int) -> list[int]:
    """Edges of the position bins of a record's curves, from ``train_length`` to ``length``
    (positions ``edges[i] <= p < edges[i + 1]``), log-spaced, distinct."""
    edges = np.unique(np.geomspace(train_length, length, CURVE_BINS + 1).round().astype(int))
    return [int(e) for e in edges]


def run_records(run, model_key: str, steps: dict, corpus, scoring: dict, device=None) -> dict:
    """``{"<budget>": record}`` of ``run`` at each budget of ``steps`` (``{budget: step}``),
    scored as ``scoring`` (:func:`scoring_of`) says; every score is read where it is
    stored with the run (the pool scores them as it trains, :func:`score_run`), else
    computed and stored."""
    with one_thread():
        return _run_records(run, model_key, steps, corpus, scoring, device)


def _run_records(run, model_key: str, steps: dict, corpus, scoring: dict, device=None) -> dict:
    lengths, caps, span = scoring["lengths"], scoring["caps"], scoring["span_length"]
    short = scoring["train_ce_length"]
    tc = run.train_config
    out = {}
    for budget, step in sorted(steps.items()):
        flops, seconds = step_train_flops(run, model_key, step)
        val = ladder_scores(run, model_key, step, corpus, lengths, caps, device, span_length=span)
        seen = ladder_scores(run, model_key, step, corpus, [short], [caps[lengths.index(short)]],
                             device, split="train", span_length=span)
        out[str(budget)] = {
            "steps": int(step), "train_flops": float(flops), "seconds": float(seconds),
            "passes": passes(step, tc.batch, tc.seq, len(corpus.train)),
            "ce": {str(L): val[str(L)]["ce"] for L in lengths},
            "se": {str(L): val[str(L)]["se"] for L in lengths},
            "windows": {str(L): val[str(L)]["windows"] for L in lengths},
            "window_ce": {str(L): [round(float(c), WINDOW_DIGITS) for c in val[str(L)]["window_ce"]]
                          for L in lengths},
            "train_ce": {str(short): seen[str(short)]["ce"]},
            "context_gain": point_context_gain(run, model_key, step, corpus, scoring["gain"], span,
                                             device)}
    return out


def score_run(run, model_key: str, steps, corpus, scoring: dict, device=None) -> None:
    """Score ``run`` at each of ``steps`` where a record reads it (the training CE and the
    context gain; the validation CE the pool's job scores already), stored with the run,
    so that a record is read, not computed, in the study's own process (one thread)."""
    span = scoring["span_length"]
    short, caps = scoring["train_ce_length"], scoring["caps"]
    with one_thread():
        for step in steps:
            ladder_scores(run, model_key, step, corpus, [short],
                          [caps[scoring["lengths"].index(short)]], device, split="train",
                          span_length=span)
            point_context_gain(run, model_key, step, corpus, scoring["gain"], span, device)


def assemble_point(budget: int, seeds, records) -> dict:
    """The point of one row at ``budget`` from the records of its ``seeds`` (one record
    per seed, in that order): ``{"budget", "steps", "seeds", "passes", "train_flops",
    "seconds"`` (the mean over the seeds), ``"ce", "se", "train_ce": {"<length>": [per
    seed]}, "windows": {"<length>": n}, "window_ce": {"<length>": [each window's CE, the
    mean over the seeds]}, "context_gain": {"length", "train_length", "stride", "windows",
    "full", "sliding", "gain": [per seed: [per window]], and where the records have them
    "bins" and "full_curve", "sliding_curve": [per seed: [per position bin]]}}``."""
    first = records[0]
    per_seed = lambda key: {L: [r[key][L] for r in records] for L in first[key]}  # noqa: E731
    gain = first["context_gain"]
    return {"budget": int(budget), "steps": first["steps"], "seeds": [int(s) for s in seeds],
            "passes": first["passes"],
            "train_flops": float(np.mean([r["train_flops"] for r in records])),
            "seconds": float(np.mean([r["seconds"] for r in records])),
            "ce": per_seed("ce"), "se": per_seed("se"), "train_ce": per_seed("train_ce"),
            "windows": dict(first["windows"]),
            # each window's CE, the mean over the seeds: the paired error of a difference
            # between two points of the same seeds (the mean of differences is linear)
            "window_ce": {L: np.round(np.mean([r["window_ce"][L] for r in records], 0),
                                      WINDOW_DIGITS).tolist() for L in first["window_ce"]},
            "context_gain": {**{k: gain[k] for k in ("length", "train_length", "stride", "windows",
                                                     "bins") if k in gain},
                             **{k: [r["context_gain"][k] for r in records]
                                for k in CURVE_KEYS if k in gain}}}


def assemble_rows(per_seed: dict, plans: dict, order) -> dict:
    """``{row: {"points": [...]}}`` from the records ``per_seed`` (``{row: {"<seed>": {"run",
    "budgets": {"<budget>": record}}}}``): each row of ``order`` at each budget of its plan
    (``plans[row]``: ``{budget: seeds}``) on the seeds of that plan that have a record
    there (:func:`assemble_point`); a budget no seed has a record at, and a row with none,
    are left out."""
    out = {}
    for label in order:
        runs, points = per_seed.get(label, {}), []
        for budget, seeds in sorted(plans.get(label, {}).items()):
            have = [s for s in sorted(seeds) if str(budget) in runs.get(str(s), {}).get("budgets", {})]
            if have:
                points.append(assemble_point(budget, have, [runs[str(s)]["budgets"][str(budget)]
                                                            for s in have]))
        if points:
            out[label] = {"points": points}
    return out


def complete(entry: dict, budgets) -> bool:
    """Whether the recorded run ``entry`` (``{"run", "budgets"}``) holds a finished record
    (every key of :data:`RECORD_KEYS`) at each of ``budgets``."""
    held = entry.get("budgets") or {}
    return all(isinstance(held.get(str(b)), dict) and all(k in held[str(b)] for k in RECORD_KEYS)
               for b in budgets)


def seed_window_ce(study: dict, row: str, budget: int, seeds) -> dict | None:
    """``{"<length>": [each window's CE, the mean over seeds]}`` of ``row`` at ``budget``
    over ``seeds`` (any of the point's: the seeds two rows share), from the artefact's
    records (``study["per_seed"]``), as :func:`assemble_point` makes a point's
    ``window_ce`` over all of its own; None where a seed has no record there (an artefact
    from before the records: its points' ``window_ce`` serves their own seeds only)."""
    runs = (study.get("per_seed") or {}).get(row) or {}
    records = [((runs.get(str(s)) or {}).get("budgets") or {}).get(str(budget)) for s in seeds]
    if not records or any(r is None for r in records):
        return None
    return {L: np.round(np.mean([r["window_ce"][L] for r in records], 0), WINDOW_DIGITS).tolist()
            for L in records[0]["window_ce"]}
