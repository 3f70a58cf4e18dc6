"""The context gain beyond the training length: does a model read further back than it was
trained to, or does a long window only spare its targets the start of a window?

A model trained on windows of ``T`` ids scores a window of ``L > T`` ids; every target at a
position ``p >= T`` of that window reads ``p + 1`` ids, more than ``T``. The same targets
are scored twice (issue 61, item 2):

- *full*: one forward over the window, each target reading all of the window's earlier ids
  (what :func:`catlib.measure.evaluate.cross_entropy` does at length ``L``);
- *sliding*: a window of ``T`` ids slid by ``stride`` (``T // 8``), each target scored by
  the chunk that gives it the most context within ``T`` ids (:func:`sliding_plan`), so it
  reads between ``T − stride + 1`` and ``T`` ids, between 7/8·T and T.

The *gain* is CE(sliding) − CE(full) per window: above zero, the model uses context beyond
its training length; about zero, its fall in CE with length came from fewer targets at a
window's start (ALiBi's paper: Press et al., 2022, §4 on sliding-window evaluation).
:func:`gain_interval` gives its mean over seeds and windows with the book's paired 95 %
interval (:func:`catlib.common.verdicts.interval`).

Windows are those of the book's protocol at the longest length (``span_length``: every
window tiling the span by default). Only for causal models: a chunk is a fresh input whose
first id sits at position 0, as in training. The chunks of a window go through the model in
passes of :func:`~catlib.measure.evaluate.windows_per_batch` chunks (``[b, T]`` each, as
the windows of length ``T`` in :func:`~catlib.measure.evaluate.cross_entropy`), not as one
batch ``[C, T]`` (305 chunks at 5000 and T = 128), whose activations stream through memory;
an adaptive solver's step control couples the chunks of a pass, as it couples the windows
of a batch. The scoring runs within :func:`~catlib.nn.reused_plans.evaluation_plans`: a plan
that depends on the length and the weights alone (a CAT's kernel, a learned bias) is built
once per length (``L`` and ``T``), not once per window and pass.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..common.verdicts import interval
from ..nn.reused_plans import evaluation_plans
from .evaluate import window_se, windows_per_batch
from .evaluate import _float64, eval_mode, n_windows, windows


class SlidingPlan(NamedTuple):
    """Where the chunks of one window sit and what each scores (``C`` chunks of ``T`` ids).

    ``starts`` int64 ``[C]``: each chunk's first position in the window, increasing;
    ``scored`` bool ``[C, T]``: the chunk's slots that it scores (a suffix of each row);
    ``positions`` int64 ``[C, T]``: each slot's position in the window;
    ``reads`` int64 ``[C, T]``: ids each slot's target reads (the slot's index + 1);
    ``stride``: the slide between consecutive chunks (the last may slide less).
    ``positions[scored]`` lists ``T, T + 1, ..., L − 1`` once each, in order.
    """

    starts: torch.Tensor
    scored: torch.Tensor
    positions: torch.Tensor
    reads: torch.Tensor
    stride: int


def sliding_plan(length: int, train_length: int, stride: int | None = None) -> SlidingPlan:
    """The chunks that score every target at positions ``T..L−1`` of a window of ``length``
    (``L``) ids with at most ``train_length`` (``T``) ids each, slid by ``stride``
    (default ``T // 8``, at least 1).

    Chunk ``k`` starts at ``(k + 1) · stride`` and scores its last ``stride`` slots, so its
    targets read ``T − stride + 1 .. T`` ids (both bounds inclusive; with the default stride
    between 7/8·T and T). Where ``L − T`` is not a multiple of ``stride`` the last chunk
    ends at the window's end (starts at ``L − T``) and scores only the targets no earlier
    chunk reached: fewer slots, the same bounds. Each target is scored by the chunk of the
    plan that gives it the most context within ``T`` ids, and by no other.
    """
    for name, v in (("length", length), ("train_length", train_length)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if length <= train_length:
        raise ValueError(f"length ({length}) must exceed train_length ({train_length}): "
                         "no target would read beyond the training length")
    stride = max(1, train_length // 8) if stride is None else stride
    if not isinstance(stride, int) or not 1 <= stride <= train_length:
        raise ValueError(f"stride must be an integer in 1..train_length ({train_length}), "
                         f"got {stride!r}")
    n = math.ceil((length - train_length) / stride)
    starts = torch.arange(1, n + 1) * stride
    starts[-1] = min(int(starts[-1]), length - train_length)   # the last ends at L − 1
    slot = torch.arange(train_length)
    positions = starts[:, None] + slot                                     # [C, T]
    # A chunk scores from its regular first scored position (start + T − stride) on, or,
    # for a last chunk pulled back to L − T, from the first position its predecessor left.
    first = torch.arange(1, n + 1) * stride + train_length - stride        # [C]
    scored = positions >= first[:, None]
    return SlidingPlan(starts, scored, positions, (slot + 1).repeat(n, 1), stride)


def context_gain(model: torch.nn.Module, val: torch.Tensor, length: int = 5000,
                 train_length: int = 128, stride: int | None = None,
                 eval_windows: int | None = None, span_length: int | None = None,
                 device=None) -> dict:
    """Score the targets at positions ``>= train_length`` of each window of ``length`` in
    full and sliding (module docstring); ``model``: forward(tokens [B, T]) -> (logits
    [B, T, V], _), causal.

    ``val [N]`` int64 ids. Windows: those of :func:`catlib.measure.evaluate.windows` at
    ``length`` on the span of ``span_length`` (default ``length``: the longest length
    scored), every one of them, or ``eval_windows`` spread over the span. Per window one
    forward ``[1, L]`` and the ``C`` chunks of :func:`sliding_plan` in passes ``[b, T]`` of
    ``b = windows_per_batch(T)`` chunks; eval mode (no dropout), ``torch.inference_mode``,
    plans reused per length (:func:`~catlib.nn.reused_plans.evaluation_plans`), the
    model's mode restored after; CEs in float64.
    Returns {"length", "train_length", "stride", "windows" (n), "targets" (L − T per
    window), "full", "sliding", "gain" (float64 ``[n]`` on the CPU: each window's mean CE of
    its targets under each reading, and sliding − full), "full_positions",
    "sliding_positions" (float64 ``[L − T]``: the mean over windows at positions T..L−1)}.
    """
    plan = sliding_plan(length, train_length, stride)
    span_length = span_length or length
    cap = eval_windows if eval_windows is not None else len(val)
    n = n_windows(len(val), length, cap, span_length)
    if n == 0:
        raise ValueError(f"context_gain at length {length} needs a span of at least one "
                         f"window; the split has {len(val)} ids")
    device = torch.device(device or next(model.parameters()).device)
    x, y = windows(val, length, n, span_length)                             # [n, L] each
    full = torch.zeros(n, length - train_length, dtype=torch.float64)
    sliding = torch.zeros_like(full)
    per_pass = windows_per_batch(train_length, device=device)
    # Every window's full reading, then every window's sliding one: a scope keeps one plan
    # per module (its last length), so each length's plans are built once, not per window.
    with eval_mode(model, False), torch.inference_mode(), evaluation_plans():
        for i in range(n):
            logits = _float64(model(x[i:i + 1].to(device))[0][0, train_length:])  # [L−T, V]
            full[i] = F.cross_entropy(logits, y[i, train_length:].to(logits.device),
                                      reduction="none").cpu()
        for i in range(n):
            sliding[i] = _sliding_ce(model, x[i], y[i], plan, per_pass, device)
    full_ce, sliding_ce = full.mean(1), sliding.mean(1)
    return {"length": length, "train_length": train_length,
            "stride": plan.stride, "windows": n, "targets": length - train_length,
            "full": full_ce, "sliding": sliding_ce, "gain": sliding_ce - full_ce,
            "full_positions": full.mean(0), "sliding_positions": sliding.mean(0)}


def _sliding_ce(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, plan: SlidingPlan,
                per_pass: int, device) -> torch.Tensor:
    """The CE of each target at positions ``T..L−1`` of one window (``x``, ``y``: int64
    ``[L]``) read by the chunks of ``plan``, ``per_pass`` chunks ``[b, T]`` a forward pass;
    float64 ``[L − T]`` on the CPU, in position order (the chunks score them in order)."""
    inputs, targets = x[plan.positions], y[plan.positions]                  # [C, T] each
    out = []
    for k in range(0, len(inputs), per_pass):
        logits = model(inputs[k:k + per_pass].to(device))[0]                # [b, T, V]
        scored = plan.scored[k:k + per_pass]                                # [b, T]
        picked = _float64(logits[scored.to(logits.device)])                 # [scored, V]
        out.append(F.cross_entropy(picked, targets[k:k + per_pass][scored].to(picked.device),
                                   reduction="none").cpu())
    return torch.cat(out)


def gain_interval(gains) -> tuple[float, float]:
    """The mean gain and the half-width of its 95 % interval, from ``gains`` ``[seeds,
    windows]`` (each seed's ``context_gain(...)["gain"]``, the same windows for every seed).

    The gain is itself a paired difference (the same targets read two ways), so the book's
    rule applies as to any difference (:func:`catlib.common.verdicts.interval`): the spread
    of the seeds' mean gains (Student's t over the seeds) combined with the windows'
    sampling error of the mean (per window the mean over seeds; their standard deviation
    over sqrt(windows), Student's t on windows − 1 degrees of freedom). Half-width NaN with
    one seed or one window (no interval can be formed: not called).
    """
    gains = np.asarray(gains, dtype=float)
    if gains.ndim != 2 or 0 in gains.shape:
        raise ValueError(f"gains must be [seeds, windows], got shape {gains.shape}")
    per_window = gains.mean(0)                                              # [windows]
    window = window_se(per_window) if len(per_window) > 1 else math.nan
    mean, half = interval(gains.mean(1)[:, None], window=[window],
                          window_df=[len(per_window) - 1])
    return float(mean[0]), float(half[0])


def uses_context_beyond(gains) -> bool:
    """Whether the gain ``[seeds, windows]`` is called above zero: its 95 % interval
    (:func:`gain_interval`) lies above zero. False with one seed or a NaN."""
    mean, half = gain_interval(gains)
    return bool(mean - half > 0)        # a NaN compares False
