"""Chapter 10's measurements: budgets matched in training compute, the loss-compute frontier
and the inference dial.

- :func:`~catlib.experiment.rows.budget_configs` (in :mod:`~catlib.experiment.rows`): the
  configuration of a row whose steps or layers are set by counted compute.
- :func:`frontier_table`: CE against training FLOPs, per row, at several budgets. On the
  book's recipe a point is a run of that many steps branched from the row's run where its
  own decay starts (``TrainConfig.branches``): the shorter run, bit for bit on the same
  kernels (its warm-up, constant rate and Sobolev weight do not depend on the run's
  length). On the constant rate a point is the weights the long run kept
  (``TrainConfig.checkpoints``), the shorter run there too. Points away from a row's final
  budget are scored for one seed.
- :func:`dial_table`: an ODE-consistent CAT evaluated with other solvers (fewer or more
  evaluations than it was trained with), CE against inference FLOPs per token.
"""
from __future__ import annotations

import numpy as np

from ..common.verdicts import called, verdict
from .grid import run_refinement
from .ladder import (FRONTIER_LONG_WINDOWS, frontier_scoring, ladder_ce,  # noqa: F401
                     ladder_model, ladder_point, ladder_points, step_train_flops)
from .rows import ROWS, budget_configs  # noqa: F401 (budget_configs: its earlier home)

# The inference dial: (solver, steps), from the cheapest; the trained solver is added.
DIAL = (("euler", 1), ("euler", 2), ("rk4-classic", 1), ("euler", 4), ("rk4-classic", 2),
        ("euler", 8), ("rk4-classic", 4))


def frontier_table(runs: dict, points: dict, corpus, lengths, caps, device=None,
                   span_length: int | None = None) -> dict:
    """The artefact ``results/frontier_<profile>.json``: ``{row: {"points": [{"steps": n,
    "train_flops": f, "seconds": s, "ce": {"<length>": [CE per seed]}}]}}``.

    ``points``: ``{row: [(label, seeds, step), ...]}``, each point the weights of the runs
    ``runs[label, seed]`` after ``step`` steps (their final weights or a ladder point);
    ``train_flops`` and ``seconds`` are the mean over its seeds. ``corpus``: the rows' split;
    ``span_length``: every length reads the same text (:mod:`catlib.measure.evaluate`).
    """
    out = {}
    for row, plist in points.items():
        pts = []
        for label, seeds, step in plist:
            pts.append({"steps": int(step), "seeds": [int(s) for s in seeds],
                        **ladder_point([(runs[label, s], step) for s in seeds], ROWS[label].model,
                                       corpus, lengths, caps, device,
                                       span_length=span_length)})
        out[row] = {"points": sorted(pts, key=lambda p: p["train_flops"])}
    return out


def dial_table(run, corpus, lengths, caps, dial=DIAL, device=None,
               span_length: int | None = None) -> dict:
    """The inference dial of one CAT run: ``{solver label: {"flops_per_token": {"<L>": f},
    "ce": {"<L>": ce}}}`` for its trained solver and each of ``dial`` ((solver, steps)
    pairs), at ``lengths`` on at most ``caps`` windows each (with ``span_length``, spread
    over the book's common span). CE from
    :func:`catlib.measure.refinement.run_refinement` (stored with the run), FLOPs per token from
    :func:`catlib.measure.cost.forward_flops_per_token` on one window of each length."""
    from ..nn.model import solved_with
    from ..measure.refinement import solver_label

    cat = run.load_weights(device or "cpu")[0]["cat"]
    out = {}
    for L, n in zip(lengths, caps):
        ref = run_refinement(run, corpus, L, n, finer=dial, device=device, span_length=span_length)
        for label, ce in ref["ce_by_solver"].items():
            out.setdefault(label, {"flops_per_token": {}, "ce": {}})["ce"][str(L)] = ce
    trained = ref["trained_solver"]
    for solver, steps in [(None, None), *dial]:
        label = trained if solver is None else solver_label(solver, steps)
        with solved_with(cat, solver, steps):
            for L in lengths:
                out[label]["flops_per_token"][str(L)] = flops_per_token(cat, L)
    return out


def flops_per_token(model, length: int) -> float:
    """Forward FLOPs per token of ``model`` on a sequence of ``length`` tokens
    (:func:`catlib.measure.cost.forward_flops_per_token`; beyond 1024 tokens from three short counts,
    see :func:`_flops_per_token`)."""
    from ..measure.cost import forward_flops_per_token

    return _flops_per_token(model, length, forward_flops_per_token)


def _flops_per_token(model, length: int, count) -> float:
    """Forward FLOPs per token at ``length``: counted at the length itself up to 1024 tokens;
    beyond, from three counts at 128, 256 and 512 tokens, which fix the FLOPs per sequence
    a + b L + c L^2 (every product is linear or quadratic in L) exactly."""
    if length <= 1024:
        return count(model, length)
    # three short counts fix the quadratic exactly (every product is linear or quadratic in L)
    xs = np.array([128, 256, 512], dtype=float)
    ys = np.array([count(model, int(x)) * x for x in xs])
    a = np.polyfit(xs, ys, 2)
    return float(np.polyval(a, length) / length)


def real_lengths(diff, lengths, rebuild: float | None = None, window=None, window_df=None) -> list:
    """The lengths where a per-seed difference ``[seeds, lengths]`` is called, by the book's
    one rule (:func:`catlib.common.verdicts.called`; ``window``: the window-sampling error
    per length, ``window_df`` its degrees of freedom, as
    :class:`~catlib.experiment.grid.WindowTerm` holds them; ``rebuild`` is no floor any
    more, accepted for the old calls)."""
    return [L for L, r in zip(lengths, called(diff, window, window_df)) if r]


def who_wins(diff, lengths, rebuild: float | None, first: str, second: str, window=None,
             window_df=None) -> str:
    """:func:`catlib.common.verdicts.verdict` of ``diff`` = CE(first) − CE(second) per seed
    ``[seeds, lengths]`` (chapter 10's name for it): one sentence, each row named once.
    ``window``, ``window_df``: the window term per length and its degrees of freedom
    (``who_wins(diff, lengths, rebuild, first, second, *term)`` with a
    :class:`~catlib.experiment.grid.WindowTerm`)."""
    return verdict(diff, lengths, first, second, rebuild, window, window_df)


def comparison_table(ce: dict, comparisons, lengths, windows: dict) -> str:
    """Chapter 10's answer as a small Markdown table, one line per comparison ``(what, row,
    against)``: the lead of ``row`` over ``against`` (CE(against) − CE(row), mean over the
    seeds; positive: ``row`` is lower) at the shortest and the longest of ``lengths``, and
    the lengths where it is called by the book's rule (:func:`catlib.common.verdicts.called`,
    with ``windows[row, against]`` the :class:`~catlib.experiment.grid.WindowTerm` of the
    difference: its window error and degrees of freedom per length).
    ``ce``: ``{label: CE [seeds, lengths]}``, the two rows of a comparison on the same seeds."""
    from ..common.formatting import signed

    ends = [0, len(lengths) - 1]
    lines = [f"| comparison | against | lead at {lengths[0]} | lead at {lengths[-1]} | called at |",
             "|---|---|---:|---:|---|"]
    for what, row, against in comparisons:
        diff = np.asarray(ce[against], float) - np.asarray(ce[row], float)
        mean = diff.mean(0)
        at = [L for i, (L, c) in enumerate(zip(lengths, called(diff, *windows[row, against])))
              if c and i in ends]
        said = " and ".join(str(L) for L in at) or ("one seed: not called" if len(diff) < 2 else "neither")
        lines.append(f"| {what} | {against} | {signed(mean[ends[0]])} | {signed(mean[ends[1]])} "
                     f"| {said} |")
    return "\n".join(lines)


def length_change(ce: dict, names: dict, lengths, read: dict | None = None) -> str:
    """How CE changes from the shortest to the longest of ``lengths`` for each row of
    ``names`` (``{label: the name a sentence gives it}``; ``ce``: ``{label: [seeds,
    lengths]}``), in a sentence: "From 128 to 5000 characters, on the same text, CE falls
    by 0.031 nats for the X and rises by 0.012 for the Y".

    ``read``: the windows the rows read, ``{"windows": {length: n}, "span": characters}``
    (one split's entry of :func:`catlib.experiment.grid.table_errors`). The two lengths are
    compared only where each read every window of the span: windows of one text differ in
    difficulty by more than the change (chapter 10's 128 windows of 820 read 0.016-0.024
    nats easier than all 820, issue 60), so a change from a sample of them to all of them
    is not stated, and the sentence says why."""
    from ..common.verdicts import size_words

    short, long = lengths[0], lengths[-1]
    whole = _whole_span(read, (short, long))
    if whole is not True:
        return f"From {short} to {long} characters, the change in CE is not stated: {whole}."
    parts = []
    for k, (label, shown) in enumerate(names.items()):
        change = float(np.mean(np.asarray(ce[label], float)[:, -1] - np.asarray(ce[label], float)[:, 0]))
        verb = "falls" if change < 0 else "rises" if change > 0 else "stays level"
        amount = "" if change == 0 else f" by {size_words(change)}{' nats' if k == 0 else ''}"
        parts.append(f"{verb}{amount} for the {shown}")
    return (f"From {short} to {long} characters, on the same text, CE "
            + (parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}") + ".")


def _whole_span(read: dict | None, lengths) -> bool | str:
    """True where every one of ``lengths`` read every window of the span ``read`` records
    (:func:`length_change`); else why not, as a clause."""
    if not read or not read.get("span"):
        return "the windows each length read over one text are not recorded"
    counts = {str(k): n for k, n in read.get("windows", {}).items()}
    short = []
    for L in lengths:
        n, tiles = counts.get(str(L)), read["span"] // int(L)
        if n is None:
            return f"the windows read at {L} are not recorded"
        if n < tiles:
            short.append(f"at {L} the rows read {n} of the span's {tiles} windows")
    if not short:
        return True
    return (f"{' and '.join(short)}, {'a sample' if len(short) == 1 else 'samples'} of the span, "
            "so the two lengths did not read the same text")


# The Euler CAT's target at equal compute (issue 31's moonshot): ahead of every baseline
# given the same training compute by at least this many nats, at every length in every seed.
TARGET_LEAD = 0.05


def equal_compute_target(ce: dict, row: str, baselines, seeds, lengths,
                         margin: float = TARGET_LEAD) -> dict:
    """Whether ``row`` meets its target against every one of ``baselines``: ``{"met",
    "closest", "smallest", "against", "seed", "length"}``.

    ``ce``: ``{label: CE [seeds, lengths]}``, every row on ``seeds`` in that order. A lead
    is CE of a baseline minus CE of ``row`` in the same seed; ``closest`` ``[seeds,
    lengths]`` the lead over the nearest baseline; met: every lead at least ``margin`` (a
    lead not measured, NaN, misses it). ``smallest``: the smallest lead (NaN where one is
    not measured), ``against`` the baseline, ``seed`` and ``length`` where it is.
    """
    leads = np.stack([np.asarray(ce[b], float) - np.asarray(ce[row], float) for b in baselines])
    b, s, i = np.unravel_index(np.argmin(np.where(np.isnan(leads), -np.inf, leads)), leads.shape)
    return {"met": bool((leads >= margin).all()), "closest": leads.min(0),
            "smallest": float(leads[b, s, i]), "against": baselines[b], "seed": seeds[s],
            "length": lengths[i]}


def target_lead_words(target: dict) -> str:
    """The smallest lead of :func:`equal_compute_target` and the row it is against, in
    words: "+0.011 at 128 in seed 0, against RoPE baseline, CAT's compute as steps"."""
    from ..common.formatting import signed

    lead = "not measured" if np.isnan(target["smallest"]) else signed(target["smallest"])
    return f"{lead} at {target['length']} in seed {target['seed']}, against {target['against']}"


def frontier_leads(table: dict, row: str, other: str, length: str) -> list:
    """At each budget of ``row``: CE of ``other`` minus CE of ``row``, ``other``'s CE
    interpolated in log training FLOPs between its points (None outside its range); > 0
    where ``row``'s frontier lies below ``other``'s there."""
    b = table[other]["points"]
    xs = np.log([p["train_flops"] for p in b])
    ys = [np.mean(p["ce"][length]) for p in b]
    out = []
    for p in table[row]["points"]:
        x = float(np.log(p["train_flops"]))
        out.append(float(np.interp(x, xs, ys) - np.mean(p["ce"][length]))
                   if xs[0] <= x <= xs[-1] else None)
    return out


def frontier_lead(table: dict, row: str, other: str, length: str) -> float | None:
    """:func:`frontier_leads` at ``row``'s largest budget."""
    return frontier_leads(table, row, other, length)[-1]
