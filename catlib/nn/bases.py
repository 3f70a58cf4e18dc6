"""Spectral bases on [0, 1], with their first and second derivatives.

Every basis returns ``[n, *t.shape]``: function k evaluated at every point,
scaled by 1/sqrt(n) as in the published code.

- ``fourier``: cos(2 pi k t), the published basis (period 1: t = 0 and t = 1 coincide);
- ``cosine``: cos(pi k t), the half-range cosine basis of the corrected variant;
- ``cheb``: Chebyshev polynomials T_k(2t - 1).

Two evaluations of the same functions, both here: :func:`basis` (each cosine computed
directly, with derivatives; the 2-D kernel, the Gram matrices) and :func:`basis_recurrence`
(values only, unscaled, from the three-term recurrence: one cosine per point instead of n;
the 1-D kernels, which evaluate millions of points). They agree to rounding, not bitwise,
and each caller keeps the one its numbers were computed with.
"""
from __future__ import annotations

import math

import torch

BASIS_NAMES = ("fourier", "cosine", "cheb")


def kernel_basis_name(basis_name: str, half_range_cosine: bool) -> str:
    """The basis of a model's kernels from its config: "fourier" with ``half_range_cosine``
    is "cosine" (cos(pi k t)); "cheb" stays."""
    if basis_name not in ("fourier", "cheb"):
        raise ValueError(f"basis must be one of ['fourier', 'cheb'], got {basis_name!r}")
    return "cosine" if (basis_name == "fourier" and half_range_cosine) else basis_name


def basis(name: str, t: torch.Tensor, n: int, deriv: int = 0) -> torch.Tensor:
    """Evaluate n basis functions (or their ``deriv``-th derivative in t) at ``t``.

    Args:
        name: one of ``BASIS_NAMES``.
        t: points in [0, 1], any shape S.
        n: number of functions, k = 0..n-1.
        deriv: 0, 1 or 2.
    Returns:
        ``[n, *S]`` tensor of t's dtype and device.
    """
    if deriv not in (0, 1, 2):
        raise ValueError(f"deriv must be 0, 1 or 2, got {deriv!r}")
    if name in ("fourier", "cosine"):
        omega = (2.0 if name == "fourier" else 1.0) * math.pi
        return _cosines(t, n, omega, deriv) / math.sqrt(n)
    if name == "cheb":
        return _chebyshev(t, n, deriv) / math.sqrt(n)
    raise ValueError(f"basis must be one of {list(BASIS_NAMES)}, got {name!r}")


def _cosines(t: torch.Tensor, n: int, omega: float, deriv: int) -> torch.Tensor:
    k = torch.arange(n, dtype=t.dtype, device=t.device).reshape(n, *([1] * t.dim()))
    w = omega * k
    phase = w * t.unsqueeze(0)
    if deriv == 0:
        return torch.cos(phase)
    if deriv == 1:
        return -w * torch.sin(phase)
    return -(w ** 2) * torch.cos(phase)


def _chebyshev(t: torch.Tensor, n: int, deriv: int) -> torch.Tensor:
    # Three-term recurrences for T_k and its x-derivatives; dx/dt = 2.
    x = 2.0 * t - 1.0
    one, zero = torch.ones_like(x), torch.zeros_like(x)
    values = [one, x]
    firsts = [zero, one]
    seconds = [zero, zero]
    for k in range(2, n):
        values.append(2 * x * values[k - 1] - values[k - 2])
        firsts.append(2 * values[k - 1] + 2 * x * firsts[k - 1] - firsts[k - 2])
        seconds.append(4 * firsts[k - 1] + 2 * x * seconds[k - 1] - seconds[k - 2])
    chosen = (values, firsts, seconds)[deriv][:n]
    return torch.stack(chosen) * (2.0 ** deriv)


def basis_recurrence(name: str, t: torch.Tensor, n: int) -> torch.Tensor:
    """The n basis functions at flat ``t [P]``, ``[n, P]``, without the 1/sqrt(n) scale.

    Every basis is a Chebyshev series in x = cos(omega t) (cosines: cos(k omega t) =
    T_k(cos omega t)) or x = 2t - 1 (cheb): the three-term recurrence needs one cosine per
    point instead of n.
    """
    if name == "cheb":
        x = 2.0 * t - 1.0
    else:
        x = torch.cos((2.0 if name == "fourier" else 1.0) * math.pi * t)
    phi = x.new_empty(n, x.numel())                                              # [n, P]
    phi[0] = 1.0
    if n > 1:
        phi[1] = x
    for k in range(2, n):
        torch.mul(x, phi[k - 1], out=phi[k])
        phi[k].mul_(2.0).sub_(phi[k - 2])
    return phi
