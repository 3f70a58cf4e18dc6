"""Chapter 09's artefact: which rows use context, from their runs' copy tests.

``results/context_use_<profile>.json`` is ``{row: {"copy_gain": {"<distance>": [gain per
seed]}, "ce": {"<length>": mean CE on plain text}, "blocks": n, "train": "plain" or
"repeat p=..., r=lo-hi"}}``: every row of chapters 06 and 08 under its book label, and
the repeated-passage study's rows (their labels end in ", repeat").
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from . import experiment as ex
from .experiment_config import ExperimentConfig


def copy_gains(runs: dict, labels: Iterable[str], seeds_of: Callable[[str], list],
               corpus: dict, distances, passages: int, device=None) -> dict[str, np.ndarray]:
    """``{label: gains [seeds, distances]}`` from each run's stored copy test
    (:func:`catlib.experiment.run_copy_gain`; computed now where missing).
    ``corpus``: ``{split: Corpus}``."""
    out = {}
    for label in labels:
        row = ex.ROWS[label]
        out[label] = np.array([[g for _, g in sorted(ex.run_copy_gain(
            runs[label, s], row.model, corpus[row.split], distances, passages, device).items())]
            for s in seeds_of(label)], dtype=float)
    return out


def context_use_table(gains: dict[str, np.ndarray], ce: dict[str, np.ndarray], distances,
                      lengths: dict[str, list], experiment: ExperimentConfig) -> dict[str, dict]:
    """The artefact's rows: ``gains`` ``{label: [seeds, distances]}`` (:func:`copy_gains`),
    ``ce`` ``{label: [seeds, lengths]}`` (plain-text CE at ``lengths[label]``: the book's
    rows at the chapters' lengths, :func:`~catlib.experiment.table_scores`; the study's at
    their training length, :func:`~catlib.experiment.scores`)."""
    table = {}
    for label, g in gains.items():
        row = ex.ROWS[label]
        table[label] = {
            "copy_gain": {str(d): [float(x) for x in g[:, i]] for i, d in enumerate(sorted(distances))},
            "ce": {str(L): float(np.mean(ce[label][:, i])) for i, L in enumerate(lengths[label])},
            "blocks": experiment.study.study_blocks if row.study else experiment.model.blocks,
            "train": experiment.study.label() if row.study else "plain"}
    return table


# A mean copy gain below this (nats per character) is no copying: nothing to keep.
MIN_GAIN = 0.01


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
