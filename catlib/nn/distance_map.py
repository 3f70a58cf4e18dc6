"""The distance map of the length-invariant kernels, and the relative kernel's graded bins.

The published operator rescales positions to [0, 1] at every length, so a kernel
learned at T = 128 is stretched 40-fold at T = 5000 and its Q nodes read the recent
past ever more coarsely. The operators here measure position in tokens instead,
through one fixed map (c = ``kernel_scale``, D = ``kernel_horizon``, independent of T):

    psi(d) = log(1 + d / c),   u(d) = min(1, psi(d) / psi(D)),   d = i - j >= 0.

Each head's kernel is a 1-D spectral expansion on [0, 1] (:class:`.kernel.SpectralKernel1D`),
k(u) = softplus(log_scale) * sum_k a_k phi_k(u), penalised by the exact squared H^2
seminorm integral_0^1 k''(u)^2 du (zero for a constant kernel).

The operators that read it: :mod:`.relative` (bins of distances, :func:`graded_bins`) and
:mod:`.content` (the score bias of query-key attention); :mod:`.distance_kernels` re-exports
all three under their old path.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch


def distance_map(d, scale: float, horizon: float, clip: bool = True):
    """u(d) = psi(d) / psi(D), psi(d) = log(1 + d / c); clipped at 1 unless ``clip`` is false.

    ``d``: distances in tokens (tensor or float); ``scale`` c and ``horizon`` D in tokens.
    """
    if isinstance(d, torch.Tensor):
        u = torch.log1p(d / scale) / math.log1p(horizon / scale)
        return u.clamp(max=1.0) if clip else u
    u = math.log1p(d / scale) / math.log1p(horizon / scale)
    return min(u, 1.0) if clip else u


@lru_cache(maxsize=None)
def graded_bins(q: int, scale: float, horizon: float) -> tuple[tuple[int, ...], tuple[int, ...],
                                                               tuple[float, ...]]:
    """The relative kernel's Q bins of token distances: ``(starts, stops, nodes)``.

    Bin q holds the distances a_q <= d < b_q; the last stop is ``None`` (open, all
    distances beyond). ``nodes`` are the u_q at which the kernel is evaluated.
    See the module docstring for the rule.
    """
    if not isinstance(q, int) or q < 1:
        raise ValueError(f"quad_nodes (Q) must be an integer >= 1, got {q!r}")
    if not (scale > 0 and horizon > 0):
        raise ValueError(f"kernel_scale and kernel_horizon must be > 0, got {scale!r}, {horizon!r}")
    starts, width = [0], 1
    for k in range(1, q):
        target = scale * math.expm1(k / (q - 1) * math.log1p(horizon / scale))   # u^{-1}(k/(Q-1))
        starts.append(max(starts[-1] + width, math.floor(target)))
        width = starts[-1] - starts[-2]
    stops = starts[1:] + [None]
    nodes = [(distance_map(a, scale, horizon) + distance_map(b - 1, scale, horizon)) / 2
             for a, b in zip(starts[:-1], stops[:-1])]
    nodes.append(distance_map(starts[-1], scale, horizon))
    return tuple(starts), tuple(stops), tuple(nodes)
