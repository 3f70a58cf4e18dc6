"""Gauss-Legendre quadrature and the interpolation of token sequences at nodes."""
from __future__ import annotations

import numpy as np
import torch


def gauss_legendre(q: int, a: float = 0.0, b: float = 1.0,
                   dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes and weights of the q-point Gauss-Legendre rule on [a, b].

    Exact for polynomials of degree <= 2q - 1. Computed in float64 (numpy
    ``leggauss``, as the published code) and then cast to ``dtype``.
    Returns ``(nodes [q], weights [q])``.
    """
    if not isinstance(q, int) or q < 1:
        raise ValueError(f"quad_nodes (q) must be an integer >= 1, got {q!r}")
    x, w = np.polynomial.legendre.leggauss(q)
    half = (b - a) / 2.0
    nodes = torch.from_numpy(a + (x + 1.0) * half).to(dtype)
    weights = torch.from_numpy(w * half).to(dtype)
    return nodes, weights


def interpolation_stencil(positions: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear interpolation between neighbouring tokens at continuous positions.

    A token sequence of ``length`` T sits at t_j = j / (T - 1). For positions
    p in [0, 1], f = p (T - 1), i0 = floor(f), a = f - i0, and
    v(p) = (1 - a) v[i0] + a v[i0 + 1].

    Returns ``(i0, a)``, both shaped like ``positions``. i0 is clamped to
    [0, T - 2], so that i0 + 1 stays in range: at p = 1 this gives i0 = T - 2,
    a = 1, the same value. For T = 1 both indices are 0 (the caller clamps i0 + 1).
    """
    f = positions * (length - 1)
    i0 = torch.floor(f).long().clamp(0, max(length - 2, 0))
    a = f - i0.to(f.dtype)
    return i0, a


def neighbours(positions: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two tokens each position reads and their weights: ``(index, weight)``, each
    ``[*positions.shape, 2]``, with v(p) = sum_k weight[..., k] * v[index[..., k]]."""
    i0, a = interpolation_stencil(positions, length)
    index = torch.stack([i0, (i0 + 1).clamp(max=length - 1)], dim=-1)
    return index, torch.stack([1 - a, a], dim=-1)


def interpolation_matrix(positions: torch.Tensor, length: int) -> torch.Tensor:
    """Linear interpolation as a matrix: ``[P, T]`` for ``positions [P]``, so that
    ``matrix @ values[T, ...]`` is the interpolant at the positions."""
    index, weight = neighbours(positions, length)
    matrix = weight.new_zeros(len(positions), length)
    return matrix.scatter_add_(1, index, weight)


def interpolate(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear interpolant of ``values [B, T, D]`` at ``positions [P]`` in [0, 1].

    Returns ``[B, P, D]``.
    """
    return interpolation_matrix(positions.to(values.dtype), values.shape[1]) @ values
