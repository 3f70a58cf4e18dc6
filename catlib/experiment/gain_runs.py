"""A run's context gain beyond its training length, stored with the run beside its evaluation.

The book's pool (:func:`catlib.experiment.grid.train_grid`) scores every model of a causal
run twice on the same targets, those at positions ``>= T`` (``T`` the run's training
``seq``) of windows of the longest length: once reading every earlier character of the
window, once reading at most ``T`` of them (:func:`catlib.measure.context_gain.context_gain`).
It stores the result in the run directory, valid for the weights, the code and the
settings, so that the chapters that read it (6, 8, 9 and 10) and a rebuild never score it
again. :func:`row_context_gain` gathers a row's seeds for a chapter: the gains ``[seeds,
windows]`` that :func:`~catlib.measure.context_gain.gain_interval` reads, and both
readings per position, which chapter 9 draws.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np

from ..common.provenance import code_fingerprint
from ..data import Corpus
from ..measure.context_gain import context_gain
from ..measure.evaluate import n_windows
from ..runs import Run, check_split, stored_with_run, weights_digest
from .rows import ROWS


def run_context_gain(run: Run, model_key: str, corpus: Corpus, length: int, windows: int,
                     device=None, span_length: int | None = None) -> dict:
    """:func:`~catlib.measure.context_gain.context_gain` of one model of a run at ``length``
    beyond its training length (the run's ``seq``), on at most ``windows`` windows spread
    over the span that ``span_length``'s windows tile (default ``length``: the book's
    protocol), stored in the run directory as ``context-gain-<model>-<length>x<n>.json``
    (``n`` the windows read) and read back from there while the weights, the code and the
    settings are the same.

    Returns {"length", "train_length", "stride", "windows", "targets", "full", "sliding",
    "gain" (float64 ``[windows]``: each window's mean CE of its targets read in full, read
    by the sliding window, and their difference sliding − full), "full_positions",
    "sliding_positions" (float64 ``[length − seq]``, the mean over windows at positions
    seq .. length − 1)}."""
    check_split(run, corpus)
    model = run.load_weights(device or "cpu")[0][model_key]
    if model is None:
        raise ValueError(f"{run.path.name} did not train {model_key!r}")
    train_length, span_length = run.train_config.seq, span_length or length
    n = n_windows(len(corpus.val), length, windows, span_length)
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("measure.context_gain",)),
             "length": length, "train_length": train_length, "windows": n,
             "span_length": span_length}

    def scored():
        r = context_gain(model, corpus.val, length, train_length, eval_windows=n,
                         span_length=span_length, device=device)
        return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in r.items()}
    value = stored_with_run(run, f"context-gain-{model_key}-{length}x{n}.json", ident, scored)
    return {k: np.array(v, dtype=float) if isinstance(v, list) else v for k, v in value.items()}


class RowGain(NamedTuple):
    """A row's context gain over its seeds (the same windows for every seed): ``gain``,
    ``full`` and ``sliding`` ``[seeds, windows]`` (each window's mean CE of its targets;
    gain = sliding − full, above zero where reading beyond ``train_length`` helps);
    ``full_positions`` and ``sliding_positions`` ``[seeds, length − train_length]`` (per
    position from ``train_length`` on, the mean over windows); ``length`` the windows'
    length, ``stride`` the sliding window's slide, ``windows`` the windows read of the
    ``span_windows`` that tile the span."""
    gain: np.ndarray
    full: np.ndarray
    sliding: np.ndarray
    full_positions: np.ndarray
    sliding_positions: np.ndarray
    train_length: int
    length: int
    stride: int
    windows: int
    span_windows: int


def row_context_gain(runs: dict, label: str, seeds: Iterable[int], corpus: dict, length: int,
                     windows: int, device=None, span_length: int | None = None) -> RowGain:
    """The :class:`RowGain` of row ``label`` over ``seeds`` from its runs (``{(label,
    seed): Run}``), each seed's read from the stored scoring (:func:`run_context_gain`;
    computed now where missing). ``corpus``: ``{split: Corpus}``; ``windows``: the cap on
    the windows of ``length`` read, spread over the span ``span_length``'s windows tile
    (default ``length``: the book's protocol)."""
    row = ROWS[label]
    if not row.causal:
        raise ValueError(f"{label!r} is not causal: a sliding window gives a model that reads "
                         "later characters nothing to compare with")
    held = corpus[row.split]
    span_length = span_length or length
    seeds = list(seeds)
    if not seeds:
        raise ValueError(f"{label!r}: no seeds given, so no run to read the context gain of")
    scored = [run_context_gain(runs[label, s], row.model, held, length, windows, device,
                               span_length) for s in seeds]
    stack = lambda key: np.array([r[key] for r in scored], dtype=float)      # noqa: E731
    first = scored[0]
    return RowGain(stack("gain"), stack("full"), stack("sliding"), stack("full_positions"),
                   stack("sliding_positions"), int(first["train_length"]), length,
                   int(first["stride"]), int(first["windows"]),
                   n_windows(len(held.val), length, len(held.val), span_length))
