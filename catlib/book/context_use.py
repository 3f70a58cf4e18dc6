"""Chapter 09: which rows use context, read from their runs' copy tests
(:mod:`catlib.measure.copying`), and its artefact.

The copy gains of rows and seeds against the test's control (:func:`copy_gains`, with
their position terms), what they say (:func:`uses_context`, :func:`reach`,
:func:`kept_fraction` and, per seed with an interval over passages, :func:`kept_intervals`,
at the distances of :func:`reference_distances`), the
far heads' log-length factor at other strengths (:func:`gains_by_slope`), the figure
(:func:`plot_copy_gains`), and ``results/context_use_<profile>.json``
(:func:`context_use_table`): ``{row: {"copy_gain": {"<distance>": [gain per seed]}, "ce":
{"<length>": mean CE on plain text}, "blocks": n, "train": "plain" or "repeat p=...,
r=lo-hi", "position": {"<distance>": [CE(control) - CE(first copy) per seed]}, "kept":
{"<m>": [[kept, lo, hi] per seed]}}}``, every row of chapters 06 and 08 under its book label and the
repeated-passage study's rows (their labels end in ", repeat"), these also with
``"copy_gain_random"`` (the test on random characters); and the ceiling, the k-gram copy
oracle's best gain per distance (:func:`best_oracle`), on text and on random characters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..experiment import grid as ex
from ..experiment.config import ExperimentConfig
from ..measure.copying import in_range_distance, oracle_copy_gain
from ..measure.kept import kept_interval
from ..measure.refinement import ODE_DRIFT

# A mean copy gain below this (nats per character) counts as no copying, nothing to keep:
# the two copies also differ at the junction, where the end of x meets its start.
MIN_GAIN = 0.05


@dataclass
class CopyTest:
    """One row's copy tests over its seeds: ``gain [seeds, distances]``, CE(control) - CE(second
    copy); ``position [seeds, distances]``, CE(control) - CE(first copy), what position alone
    changes; ``by_passage {distance: [seeds, passages]}``, the gain of each passage."""
    gain: np.ndarray
    position: np.ndarray
    by_passage: dict


def copy_gains(runs: dict, labels: Iterable[str], seeds_of: Callable[[str], list],
               corpus: dict, distances, passages: int, device=None,
               random_seed: int | None = None) -> dict[str, CopyTest]:
    """``{label: CopyTest}`` from each run's stored copy test
    (:func:`catlib.experiment.grid.run_copy_gain`, with ``random_seed`` the one on random
    characters; computed now where missing). ``corpus``: ``{split: Corpus}``."""
    d, out = sorted(distances), {}
    for label in labels:
        row = ex.ROWS[label]
        tests = [ex.run_copy_gain(runs[label, s], row.model, corpus[row.split], d, passages, device,
                                  random_seed) for s in seeds_of(label)]
        by_passage = {x: np.array([t[x]["control"] - t[x]["second"] for t in tests]) for x in d}
        out[label] = CopyTest(
            gain=np.array([[by_passage[x][i].mean() for x in d] for i in range(len(tests))]),
            position=np.array([[(t[x]["control"] - t[x]["first"]).mean() for x in d] for t in tests]),
            by_passage=by_passage)
    return out


def kept_intervals(test: CopyTest, near: int, far: int, min_gain: float = MIN_GAIN) -> np.ndarray:
    """``[seeds, 3]``: each seed's kept fraction at ``far`` of its gain at ``near`` and its
    bootstrap interval over passages (:func:`catlib.measure.kept.kept_interval`), nan where
    the seed has no in-range copying to keep."""
    return np.array([kept_interval(n, f, min_gain)
                     for n, f in zip(test.by_passage[near], test.by_passage[far])])


def half_kept(kept: dict[int, np.ndarray]) -> bool:
    """Whether every seed keeps at least half of its in-range gain at every multiple of
    :data:`HALF_KEPT` that ``kept`` ({m: :func:`kept_intervals`}) tests: every seed, as
    the moonshot reads them; False when none is tested."""
    tested = [kept[m][:, 0] for m in HALF_KEPT if m in kept]
    return bool(tested) and all((k >= 0.5).all() for k in tested)


def kept_words(k: np.ndarray) -> str:
    """``"58% [53–63%]"`` for one seed's ``(kept, lo, hi)``; "nothing to keep" for nan."""
    from ..common.formatting import percent
    return f"{percent(k[0])} [{percent(k[1])[:-1]}–{percent(k[2])}]" if np.isfinite(k[0]) \
        else "nothing to keep"


def kept_range(kept: dict, far: dict) -> str:
    """The range over seeds of a row's kept fractions at each far multiple, short enough
    for a bold paste: "51–58% at 1000 (8×) and 37–44% at 2000 (16×)"; ``kept``: ``{m:
    [fraction per seed]}``, ``far``: ``{m: distance}``; "nothing to keep" where no seed
    has an in-range gain."""
    from ..common.formatting import percent
    parts = []
    for m in far:
        v = np.asarray(kept[m], dtype=float)
        v = v[np.isfinite(v)]
        lo, hi = (percent(v.min()), percent(v.max())) if len(v) else ("", "")
        span = "nothing to keep" if not len(v) else lo if lo == hi else f"{lo[:-1]}–{hi}"
        parts.append(f"{span} at {far[m]} ({m}×)")
    return " and ".join(parts)


ORACLE = "k-gram copy oracle"     # its row in the artefact


def context_use_table(gains: dict[str, np.ndarray], ce: dict[str, np.ndarray], distances,
                      lengths: dict[str, list], experiment: ExperimentConfig,
                      random_gains: dict[str, np.ndarray] | None = None,
                      oracle: dict[str, tuple] | None = None,
                      drift: dict[str, np.ndarray] | None = None,
                      extra: dict[str, dict] | None = None) -> dict[str, dict]:
    """The artefact's rows: ``gains`` ``{label: [seeds, distances]}`` (:func:`copy_gains`),
    ``ce`` ``{label: [seeds, lengths]}`` (plain-text CE at ``lengths[label]``: the book's
    rows at the chapters' lengths, :func:`~catlib.experiment.grid.table_scores`; the study's at
    their training length, :func:`~catlib.experiment.grid.scores`); ``random_gains`` the
    same test on random characters (``"copy_gain_random"``, the rows that have it);
    ``oracle`` ``{"text": best, "random": best}``, each :func:`best_oracle`'s triple, as the
    row :data:`ORACLE` (with ``"best_k"`` per distance and the gain of every k at every
    distance); ``drift`` ``{label: [seeds]}``: the refinement test's drift of the CATs that
    have one (:func:`~catlib.measure.refinement.refinement`); ``extra`` ``{label: {key:
    value}}``, more entries of a row (the position terms and the kept fractions with their
    intervals, per seed)."""
    d = sorted(distances)
    by_distance = lambda g: {str(x): [float(v) for v in g[:, i]] for i, x in enumerate(d)}  # noqa: E731
    table = {}
    for label, g in gains.items():
        row = ex.ROWS[label]
        table[label] = {
            "copy_gain": by_distance(g),
            "ce": {str(L): float(np.mean(ce[label][:, i])) for i, L in enumerate(lengths[label])},
            "blocks": experiment.study.study_blocks if row.study else experiment.model.blocks,
            "train": experiment.study.label() if row.study else "plain"}
        if random_gains and label in random_gains:
            table[label]["copy_gain_random"] = by_distance(random_gains[label])
        if drift and label in drift:
            table[label]["drift"] = [float(v) for v in drift[label]]
        table[label].update((extra or {}).get(label, {}))
    if oracle:
        (text, k_text, by_k), (rand, k_rand, by_k_rand) = oracle["text"], oracle["random"]
        every_k = lambda o: {str(k): {str(x): float(o[k][x]) for x in d} for k in sorted(o)}  # noqa: E731
        table[ORACLE] = {"copy_gain": by_distance(text), "copy_gain_random": by_distance(rand),
                         "best_k": {str(x): k for x, k in zip(d, k_text)},
                         "best_k_random": {str(x): k for x, k in zip(d, k_rand)},
                         "copy_gain_by_k": every_k(by_k), "copy_gain_random_by_k": every_k(by_k_rand),
                         "train": "none: counts of the input's own k-grams, k = 1-8"}
    return table


def kept_fraction(gains: np.ndarray, distances, near: int, far: int,
                  min_gain: float = MIN_GAIN) -> float:
    """Mean gain(far) / mean gain(near) over seeds, from ``gains [seeds, distances]``: the
    share of a model's copying at ``near`` characters that it keeps at ``far``; nan when
    its mean gain at ``near`` is below ``min_gain`` (nothing to keep)."""
    d = sorted(distances)
    g_near, g_far = gains[:, d.index(near)], gains[:, d.index(far)]
    if not g_near.mean() >= min_gain:
        return float("nan")
    return float(g_far.mean() / g_near.mean())


# The multiples of the training length that chapter 9's targets name: half kept at 8x and
# 16x, and the moonshot's (MOONSHOT, below).
HALF_KEPT = (8, 16)


def reference_distances(distances, train_length: int, multiples=None) -> tuple[int, dict]:
    """``(near, {m: far_m})``: the in-range reference, the longest test distance whose
    whole input [x ; x] fits the training length (2d - 1 <= T,
    :func:`~catlib.measure.copying.in_range_distance`; the shortest distance when none
    does), and for each multiple m (default: every multiple the targets name,
    :data:`HALF_KEPT` and :data:`MOONSHOT`'s) the test distance nearest to m times the
    training length, only where it lies within a quarter of m times the training length
    (so that two multiples never share a distance): a multiple it leaves out is not tested.
    (Earlier builds took the longest distance below T: at T = 128, d = 100, whose second
    copy runs to position 198, beyond the training length.)"""
    d = sorted(distances)
    near = max([x for x in d if x <= in_range_distance(train_length)] or d[:1])
    multiples = sorted({*HALF_KEPT, *MOONSHOT}) if multiples is None else multiples
    nearest = lambda m: min(d, key=lambda x: abs(x - m * train_length))  # noqa: E731
    return near, {m: nearest(m) for m in multiples
                  if abs(nearest(m) - m * train_length) <= m * train_length / 4}


def kept_by_seed(gains: np.ndarray, distances, near: int, far: int,
                 min_gain: float = MIN_GAIN) -> np.ndarray:
    """``[seeds]``: each seed's gain(far) / gain(near), from ``gains [seeds, distances]``;
    nan for a seed whose gain at ``near`` is below ``min_gain`` (nothing to keep).
    :func:`kept_fraction` divides the means; a target met "in every seed" reads these."""
    d = sorted(distances)
    g_near, g_far = gains[:, d.index(near)], gains[:, d.index(far)]
    return np.where(g_near >= min_gain, g_far / np.where(g_near >= min_gain, g_near, 1.0), np.nan)


# Issue 32's moonshot: at least this share of the in-range copy gain kept at m times the
# training length in every seed, with plain-text CE at most MOONSHOT_CE above the study's
# ALiBi row and a refinement drift of at most MOONSHOT_DRIFT (an ODE by the book's rule).
MOONSHOT = {16: 0.90, 32: 0.75}
MOONSHOT_CE, MOONSHOT_DRIFT = 0.02, ODE_DRIFT


def moonshot_seeds(gains: np.ndarray, ce: np.ndarray, drift: np.ndarray, distances, near: int,
                   far: dict, oracle_kept: dict, alibi_ce: float) -> list[dict]:
    """One verdict per seed of a CAT row: ``{"kept": {m: fraction}, "of_oracle": {m:
    fraction / the oracle's}, "ce_gap", "drift", "misses": [what it missed]}`` for every
    target m of :data:`MOONSHOT` that ``far`` ({m: distance}) tests (one it does not test is
    neither met nor missed: :func:`moonshot_markdown` names it). ``gains [seeds, distances]``, ``ce [seeds, 1]`` (plain text, at
    the training length), ``drift [seeds]``; ``oracle_kept`` {m: the k-gram oracle's kept
    fraction}. A seed with no in-range copying keeps nan, a miss."""
    kept_all = {m: kept_by_seed(gains, distances, near, far[m]) for m in MOONSHOT if m in far}
    out = []
    for i in range(len(gains)):
        kept = {m: float(k[i]) for m, k in kept_all.items()}
        of_oracle = {m: k / oracle_kept[m] if oracle_kept[m] > 0 else float("nan")
                     for m, k in kept.items()}
        gap, d = float(ce[i, 0] - alibi_ce), float(drift[i])
        misses = [f"{m}×" for m, target in MOONSHOT.items() if m in kept and not kept[m] >= target]
        misses += ["CE"] * (not gap <= MOONSHOT_CE) + ["drift"] * (not abs(d) <= MOONSHOT_DRIFT)
        out.append(dict(kept=kept, of_oracle=of_oracle, ce_gap=gap, drift=d, misses=misses))
    return out


def moonshot_markdown(verdicts: dict[str, tuple[list, list[dict]]], flops_x: dict[str, float],
                      far: dict) -> str:
    """The moonshot's table: one line per row and seed. ``verdicts`` {row name: (seeds,
    :func:`moonshot_seeds` of the row)}; ``flops_x`` {row name: training FLOPs over the
    study's ALiBi baseline's}; ``far`` {m: distance} (a target it lacks: "not tested")."""
    from ..common.formatting import md_table, percent, signed
    header = ["row", "seed", "training FLOPs × ALiBi"]
    for m, target in MOONSHOT.items():
        header += [f"kept at {m}×" + (f" ({far[m]})" if m in far else "") + f", target {target:.0%}",
                   "of the oracle's"]
    header += [f"CE − ALiBi (≤ {MOONSHOT_CE:+g})", f"drift (≤ {MOONSHOT_DRIFT:g})", "verdict"]
    rows = []
    for name, (seeds, seed_verdicts) in verdicts.items():
        for s, v in zip(seeds, seed_verdicts):
            kept = sum(([percent(v["kept"][m]), percent(v["of_oracle"][m])] if m in far else ["not tested", "–"]
                        for m in MOONSHOT), [])
            untested = ", ".join(f"{m}×" for m in MOONSHOT if m not in far)
            verdict = ("missed (" + ", ".join(v["misses"]) + ")" if v["misses"] else
                       f"met where tested ({untested} not tested)" if untested else "met")
            rows.append([name, str(s), f"{flops_x[name]:.1f}", *kept, signed(v["ce_gap"]),
                         signed(v["drift"], 4), verdict])
    return md_table(header, rows, "llr" + "rr" * len(MOONSHOT) + "rrl")


def oracle_ceiling(val, vocab_size: int, distances, passages: int,
                   random_seed: int) -> dict[str, tuple[np.ndarray, list[int], dict]]:
    """The k-gram copy oracle (k = 1-8) on the copy test's passages of ``val`` and on
    random characters (``random_seed``), each as :func:`best_oracle`'s triple:
    ``{"text": ..., "random": ...}``."""
    return {kind: best_oracle(oracle_copy_gain(val, vocab_size, distances, passages,
                                               random_seed=seed), distances)
            for kind, seed in (("text", None), ("random", random_seed))}


def best_oracle(oracle: dict[int, dict[int, float]], distances) -> tuple[np.ndarray, list[int], dict]:
    """The k-gram copy oracle's best gain at each distance and the k that gives it:
    ``(gains [1, distances], [k per distance], oracle)`` from ``oracle`` ``{k: {distance:
    gain}}`` (:func:`catlib.measure.copying.oracle_copy_gain`, kept whole for the
    artefact); the gains shaped as one seed of a row, so that :func:`kept_fraction` reads
    them as it reads a model's."""
    d = sorted(distances)
    best_k = [max(oracle, key=lambda k: oracle[k][x]) for x in d]
    return np.array([[oracle[k][x] for k, x in zip(best_k, d)]]), best_k, oracle


def uses_context(gains: np.ndarray, distances, min_gain: float = MIN_GAIN) -> list[int]:
    """The distances at which a row uses context, from ``gains [seeds, distances]``: its mean
    gain is at least ``min_gain`` and every seed's gain is positive."""
    return [d for d, g in zip(sorted(distances), gains.T) if g.mean() >= min_gain and (g > 0).all()]


def reach(gains: np.ndarray, distances, near: int, min_gain: float = MIN_GAIN) -> int | None:
    """The farthest distance from ``near`` on at which the mean gain is at least half the
    mean gain at ``near``; None when that is below ``min_gain`` (no copying to keep)."""
    d, g = sorted(distances), gains.mean(0)
    g0 = g[d.index(near)]
    if not g0 >= min_gain:
        return None
    return max(x for x, v in zip(d, g) if x >= near and v >= 0.5 * g0)


def gains_by_slope(models: list, val, distances, passages: int, slopes,
                   device=None, train_length: int | None = None) -> dict[float, np.ndarray]:
    """``{slope: gains [models, distances]}``: the copy gains (against the control) of
    far-head models evaluated with their log-length factor at each slope
    (:func:`catlib.nn.decay_prior.far_head_slope`); ``train_length`` as
    :func:`~catlib.measure.copying.copy_test`'s."""
    from ..measure.copying import copy_gain
    from ..nn.decay_prior import far_head_slope

    out = {}
    for k in slopes:
        rows = []
        for model in models:
            with far_head_slope(model, k):
                g = copy_gain(model, val, distances, passages, device, train_length=train_length)
            rows.append([g[d] for d in sorted(distances)])
        out[k] = np.array(rows)
    return out


def plot_copy_gains(ax, gains: dict[str, np.ndarray], labels, distances, train_length: int,
                    title: str = "") -> None:
    """Mean copy gain against distance for ``labels`` (CAT rows solid, baselines dashed),
    a band from the lowest to the highest seed, the training length marked."""
    d = sorted(distances)
    for k, label in enumerate(labels):
        g, colour = gains[label], f"C{k % 10}"
        ax.plot(d, g.mean(0), "-" if ex.ROWS[label].is_cat else "--", marker="o", ms=4,
                color=colour, label=label)
        if len(g) > 1:
            ax.fill_between(d, g.min(0), g.max(0), color=colour, alpha=0.15)
    ax.axvline(train_length, color="k", ls=":", lw=1, label=f"training length ({train_length})")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xscale="log", xlabel="distance d (characters)", title=title)
    ax.legend(fontsize=6.5)
