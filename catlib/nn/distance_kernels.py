"""Distance kernels: CAT attention whose kernel reads token distances, not [0, 1].

The published operator rescales positions to [0, 1] at every length, so a kernel
learned at T = 128 is stretched 40-fold at T = 5000 and its Q nodes read the recent
past ever more coarsely. The operators here measure position in tokens instead,
through one fixed map (c = ``kernel_scale``, D = ``kernel_horizon``, independent of T):

    psi(d) = log(1 + d / c),   u(d) = min(1, psi(d) / psi(D)),   d = i - j >= 0.

Each head's kernel is a 1-D spectral expansion on [0, 1] (:class:`.kernel.SpectralKernel1D`),
k(u) = softplus(log_scale) * sum_k a_k phi_k(u), penalised by the exact squared H^2
seminorm integral_0^1 k''(u)^2 du (zero for a constant kernel).

The operators now live one per module: :mod:`.distance_map` (the map and the graded bins),
:mod:`.relative` (the relative kernel) and :mod:`.content` (the content-aware kernel).
This module keeps their old import path.
"""
from .content import BIAS_GRID, GRID_CHUNK, KERNEL_CHUNK, ContentAttention, ContentPlan
from .distance_map import distance_map, graded_bins
from .relative import DENSE_RELATIVE_MAX, RelativeAttention, RelativePlan

__all__ = ["BIAS_GRID", "DENSE_RELATIVE_MAX", "GRID_CHUNK", "KERNEL_CHUNK", "ContentAttention",
           "ContentPlan", "RelativeAttention", "RelativePlan", "distance_map", "graded_bins"]
