"""Distance kernels: CAT attention whose kernel reads token distances, not [0, 1].

The old import path of the length-invariant kernels, which now live one per module:
:mod:`.distance_map` (the distance map psi(d) / psi(D) and the graded bins),
:mod:`.relative` (the relative kernel) and :mod:`.content` (the content-aware kernel).
"""
from .content import BIAS_GRID, GRID_CHUNK, KERNEL_CHUNK, ContentAttention, ContentPlan
from .distance_map import distance_map, graded_bins
from .relative import DENSE_RELATIVE_MAX, RelativeAttention, RelativePlan

__all__ = ["BIAS_GRID", "DENSE_RELATIVE_MAX", "GRID_CHUNK", "KERNEL_CHUNK", "ContentAttention",
           "ContentPlan", "RelativeAttention", "RelativePlan", "distance_map", "graded_bins"]
