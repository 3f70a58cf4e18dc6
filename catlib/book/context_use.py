"""Chapter 09: which rows use context, read from their runs' copy tests
(:mod:`catlib.measure.copying`), and its artefact.

The copy gains of rows and seeds (:func:`copy_gains`), what they say (:func:`uses_context`,
:func:`reach`, :func:`kept_fraction` at the distances of :func:`reference_distances`), the
far heads' log-length factor at other strengths (:func:`gains_by_slope`), the figure
(:func:`plot_copy_gains`), and ``results/context_use_<profile>.json``
(:func:`context_use_table`): ``{row: {"copy_gain": {"<distance>": [gain per seed]}, "ce":
{"<length>": mean CE on plain text}, "blocks": n, "train": "plain" or "repeat p=...,
r=lo-hi"}}``, every row of chapters 06 and 08 under its book label and the
repeated-passage study's rows (their labels end in ", repeat"), these also with
``"copy_gain_random"`` (the test on random characters); and the ceiling, the k-gram copy
oracle's best gain per distance (:func:`best_oracle`), on text and on random characters.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from ..experiment import grid as ex
from ..experiment.config import ExperimentConfig
from ..measure.copying import in_range_distance, oracle_copy_gain

# A mean copy gain below this (nats per character) counts as no copying, nothing to keep:
# the two copies also differ at the junction, where the end of x meets its start.
MIN_GAIN = 0.05


def copy_gains(runs: dict, labels: Iterable[str], seeds_of: Callable[[str], list],
               corpus: dict, distances, passages: int, device=None,
               random_seed: int | None = None) -> dict[str, np.ndarray]:
    """``{label: gains [seeds, distances]}`` from each run's stored copy test
    (:func:`catlib.experiment.grid.run_copy_gain`, with ``random_seed`` the one on random
    characters; computed now where missing). ``corpus``: ``{split: Corpus}``."""
    out = {}
    for label in labels:
        row = ex.ROWS[label]
        out[label] = np.array([[g for _, g in sorted(ex.run_copy_gain(
            runs[label, s], row.model, corpus[row.split], distances, passages, device,
            random_seed).items())] for s in seeds_of(label)], dtype=float)
    return out


ORACLE = "k-gram copy oracle"     # its row in the artefact


def context_use_table(gains: dict[str, np.ndarray], ce: dict[str, np.ndarray], distances,
                      lengths: dict[str, list], experiment: ExperimentConfig,
                      random_gains: dict[str, np.ndarray] | None = None,
                      oracle: dict[str, tuple] | None = None) -> dict[str, dict]:
    """The artefact's rows: ``gains`` ``{label: [seeds, distances]}`` (:func:`copy_gains`),
    ``ce`` ``{label: [seeds, lengths]}`` (plain-text CE at ``lengths[label]``: the book's
    rows at the chapters' lengths, :func:`~catlib.experiment.grid.table_scores`; the study's at
    their training length, :func:`~catlib.experiment.grid.scores`); ``random_gains`` the
    same test on random characters (``"copy_gain_random"``, the rows that have it);
    ``oracle`` ``{"text": best, "random": best}``, each :func:`best_oracle`'s pair, as the
    row :data:`ORACLE` (with ``"best_k"`` per distance)."""
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
    if oracle:
        (text, k_text), (rand, k_rand) = oracle["text"], oracle["random"]
        table[ORACLE] = {"copy_gain": by_distance(text), "copy_gain_random": by_distance(rand),
                         "best_k": {str(x): k for x, k in zip(d, k_text)},
                         "best_k_random": {str(x): k for x, k in zip(d, k_rand)},
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


def reference_distances(distances, train_length: int, multiples=(8, 16)) -> tuple[int, dict]:
    """``(near, {m: far_m})``: the in-range reference, the longest test distance whose
    whole input [x ; x] fits the training length (2d - 1 <= T,
    :func:`~catlib.measure.copying.in_range_distance`; the shortest distance when none
    does), and for each multiple m the test distance nearest to m times the training
    length. (Earlier builds took the longest distance below T: at T = 128, d = 100, whose
    second copy runs to position 198, beyond the training length.)"""
    d = sorted(distances)
    near = max([x for x in d if x <= in_range_distance(train_length)] or d[:1])
    return near, {m: min(d, key=lambda x: abs(x - m * train_length)) for m in multiples}


def oracle_ceiling(val, vocab_size: int, distances, passages: int,
                   random_seed: int) -> dict[str, tuple[np.ndarray, list[int]]]:
    """The k-gram copy oracle (k = 1-8) on the copy test's passages of ``val`` and on
    random characters (``random_seed``), each as :func:`best_oracle`'s pair:
    ``{"text": ..., "random": ...}``."""
    return {kind: best_oracle(oracle_copy_gain(val, vocab_size, distances, passages,
                                               random_seed=seed), distances)
            for kind, seed in (("text", None), ("random", random_seed))}


def best_oracle(oracle: dict[int, dict[int, float]], distances) -> tuple[np.ndarray, list[int]]:
    """The k-gram copy oracle's best gain at each distance and the k that gives it:
    ``(gains [1, distances], [k per distance])`` from ``oracle`` ``{k: {distance: gain}}``
    (:func:`catlib.measure.copying.oracle_copy_gain`); shaped as one seed of a row, so
    that :func:`kept_fraction` reads it as it reads a model's."""
    d = sorted(distances)
    best_k = [max(oracle, key=lambda k: oracle[k][x]) for x in d]
    return np.array([[oracle[k][x] for k, x in zip(best_k, d)]]), best_k


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
                   device=None) -> dict[float, np.ndarray]:
    """``{slope: gains [models, distances]}``: the copy gains of far-head models evaluated
    with their log-length factor at each slope (:func:`catlib.nn.decay_prior.far_head_slope`)."""
    from ..measure.copying import copy_gain
    from ..nn.decay_prior import far_head_slope

    out = {}
    for k in slopes:
        rows = []
        for model in models:
            with far_head_slope(model, k):
                g = copy_gain(model, val, distances, passages, device)
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
