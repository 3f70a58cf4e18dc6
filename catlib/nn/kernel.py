"""Spectral kernels: CAT's 2-D kernel W(s, t) and the 1-D kernel k(u) of the distance kernels.

W(s, t) = softplus(log_scale) * sum_kl C[k, l] phi_k(s) phi_l(t), made
row-stochastic by a softmax over the integration nodes. The functions here
work on a stack of heads at once (coefficients ``[h, n, n]``); ``Kernel2D``
is the per-head module whose parameter names match the published checkpoints.
``SpectralKernel1D`` holds all heads' k_h(u) = softplus(log_scale_h) sum_k a_hk phi_k(u).
Both exact penalties integrate Gram matrices of basis derivatives (:func:`basis_gram`).
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bases import BASIS_NAMES, basis, basis_recurrence
from .config import PENALTIES
from .quadrature import gauss_legendre


def kernel_logits(coeffs: torch.Tensor, log_scale: torch.Tensor,
                  phi_s: torch.Tensor, phi_t: torch.Tensor) -> torch.Tensor:
    """Unnormalised kernel W for a stack of heads.

    Args:
        coeffs: ``[h, n, n]``; log_scale: ``[h, 1]``.
        phi_s: basis at the query positions, ``[n, S]``.
        phi_t: basis at the nodes, ``[n, Q]`` (shared by all queries) or
            ``[n, S, Q]`` (one set of nodes per query, the causal rule).
    Returns:
        ``[h, S, Q]``.
    """
    left = torch.einsum("ks,hkl->hsl", phi_s, coeffs)           # [h, S, n]
    if phi_t.dim() == 2:
        w = left @ phi_t                                          # [h, S, Q]
    else:
        w = torch.einsum("hsl,lsq->hsq", left, phi_t)
    return F.softplus(log_scale)[:, :, None] * w


def published_penalty(coeffs: torch.Tensor) -> torch.Tensor:
    """sum_kl (2 pi)^4 (k^2 + l^2)^2 C_kl^2 over all heads (the published formula, any basis)."""
    n = coeffs.shape[-1]
    k = torch.arange(n, dtype=coeffs.dtype, device=coeffs.device)
    weights = (2 * math.pi) ** 4 * (k[:, None] ** 2 + k[None, :] ** 2) ** 2
    return (weights * coeffs ** 2).sum()


def exact_penalty(coeffs: torch.Tensor, basis_name: str,
                  grams: "GramTables | None" = None) -> torch.Tensor:
    """Integral over [0,1]^2 of (Laplacian of sum_kl C_kl phi_k(s) phi_l(t))^2, summed over heads.

    With Gram matrices G0 = <phi_k, phi_m>, G1 = <phi_k'', phi_m>, G2 = <phi_k'', phi_m''>:
    |Lap W|^2 = tr(G2 C G0 C^T) + tr(G0 C G2 C^T) + 2 sum C_kl C_mn G1_km G1_nl.
    ``grams``: a module's :class:`GramTables` (already on its device); without, the
    matrices are cast and moved here.
    """
    n = coeffs.shape[-1]
    g0, g1, g2 = (_gram(grams, basis_name, n, d, coeffs) for d in ((0, 0), (2, 0), (2, 2)))
    c = coeffs
    ss = torch.einsum("km,hkl,ln,hmn->", g2, c, g0, c)
    tt = torch.einsum("km,hkl,ln,hmn->", g0, c, g2, c)
    st = torch.einsum("km,hkl,nl,hmn->", g1, c, g1, c)
    return ss + tt + 2 * st


@lru_cache(maxsize=None)
@torch.inference_mode(False)
def basis_gram(basis_name: str, n: int, deriv_a: int = 0, deriv_b: int = 0) -> torch.Tensor:
    """G[k, m] = integral_0^1 phi_k^(deriv_a)(t) phi_m^(deriv_b)(t) dt, ``[n, n]`` float64 on
    the CPU, cached and shared by every caller (the 2-D and the 1-D exact penalties).

    Gauss-Legendre in float64 with far more nodes than the highest frequency or degree
    needs: exact for the polynomials, to rounding for the cosines. Built with inference
    mode off: the first call may come from an evaluation under torch.inference_mode, and
    a float64 caller uses this very tensor (``.to`` makes no copy), which must then be
    savable for backward.
    """
    t, w = gauss_legendre(8 * n + 64)
    a = basis(basis_name, t, n, deriv=deriv_a)
    b = a if deriv_b == deriv_a else basis(basis_name, t, n, deriv=deriv_b)
    return (a * w) @ b.T


def sobolev_penalty(coeffs: torch.Tensor, basis_name: str, kind: str,
                    grams: "GramTables | None" = None) -> torch.Tensor:
    """The Sobolev penalty of a stack of heads: ``kind`` is "published" or "exact"."""
    if kind == "published":
        return published_penalty(coeffs)
    if kind == "exact":
        return exact_penalty(coeffs, basis_name, grams)
    raise ValueError(f"penalty must be one of {list(PENALTIES)}, got {kind!r}")


class GramTables(nn.Module):
    """The Gram matrices (:func:`basis_gram`) an exact penalty reads, as non-persistent
    buffers ``[n, n]`` on the module's device and in its dtype: no host -> device move per
    step, and state_dicts unchanged. ``gram_<a>_<b>`` holds derivative orders (a, b).

    Every move or cast of the module (.to, .double, .float, .cuda) recasts them from the
    float64 master: cast on the CPU, then moved (MPS holds no float64), the values a cast
    per call would give, at any dtype.
    """

    def __init__(self, basis_name: str, n: int, orders: tuple[tuple[int, int], ...]):
        super().__init__()
        self.basis_name, self.n, self.orders = basis_name, n, orders
        for a, b in orders:
            master = basis_gram(basis_name, n, a, b)
            self.register_buffer(f"gram_{a}_{b}", master.to(torch.get_default_dtype()),
                                 persistent=False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # Inference mode off: a move made under torch.inference_mode must still serve a
        # training pass (the penalty's backward saves these matrices).
        with torch.inference_mode(False):
            self._recast()
        return self

    def _recast(self) -> None:
        for a, b in self.orders:
            now = getattr(self, f"gram_{a}_{b}")
            master = basis_gram(self.basis_name, self.n, a, b)
            setattr(self, f"gram_{a}_{b}", master.to(now.dtype).to(now.device))


def _gram(grams: GramTables | None, basis_name: str, n: int, orders: tuple[int, int],
          like: torch.Tensor) -> torch.Tensor:
    """G of derivative ``orders`` in ``like``'s dtype and device: from ``grams`` when it holds
    them so, else cast on the CPU and moved (MPS holds no float64)."""
    held = getattr(grams, f"gram_{orders[0]}_{orders[1]}", None) if grams is not None else None
    if held is not None and held.dtype == like.dtype and held.device == like.device:
        return held
    return basis_gram(basis_name, n, *orders).to(like.dtype).to(like.device)


def check_kernel_args(n_freq, basis: str, penalty: str) -> None:
    """Raise ``ValueError`` naming a bad ``n_freq``, ``basis`` or ``penalty`` of a kernel module."""
    if not isinstance(n_freq, int) or n_freq < 1:
        raise ValueError(f"n_freq must be an integer >= 1, got {n_freq!r}")
    if basis not in BASIS_NAMES:
        raise ValueError(f"basis must be one of {list(BASIS_NAMES)}, got {basis!r}")
    if penalty not in PENALTIES:
        raise ValueError(f"penalty must be one of {list(PENALTIES)}, got {penalty!r}")


class Kernel2D(nn.Module):
    """One head's kernel. Parameters ``coeffs [n, n]`` (init 0.01 N(0,1)) and ``log_scale [1]`` (init 0).

    Args:
        n_freq: n, basis functions per axis.
        basis: "fourier", "cosine" (half-range) or "cheb".
        penalty: "published" (biharmonic weights) or "exact".
    """

    def __init__(self, n_freq: int, basis: str = "fourier", penalty: str = "published"):
        super().__init__()
        check_kernel_args(n_freq, basis, penalty)
        self.n_freq, self.basis, self.penalty = n_freq, basis, penalty
        self.coeffs = nn.Parameter(0.01 * torch.randn(n_freq, n_freq))
        self.log_scale = nn.Parameter(torch.zeros(1))
        self.grams = (GramTables(basis, n_freq, ((0, 0), (2, 0), (2, 2)))
                      if penalty == "exact" else None)

    def forward(self, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Row-stochastic kernel: ``s [S]``, ``t [Q]`` -> softmax over t of W(s, t), ``[S, Q]``."""
        phi_s = basis(self.basis, s.to(self.coeffs.dtype), self.n_freq)
        phi_t = basis(self.basis, t.to(self.coeffs.dtype), self.n_freq)
        w = kernel_logits(self.coeffs[None], self.log_scale[None], phi_s, phi_t)[0]
        return torch.softmax(w, dim=-1)

    def sobolev_penalty(self) -> torch.Tensor:
        return sobolev_penalty(self.coeffs[None], self.basis, self.penalty, self.grams)

    def extra_repr(self) -> str:
        return f"n_freq={self.n_freq}, basis={self.basis!r}, penalty={self.penalty!r}"


class SpectralKernel1D(nn.Module):
    """All heads' 1-D kernels k_h(u) = softplus(log_scale_h) * sum_k a_hk phi_k(u), u in [0, 1].

    Parameters ``coeffs [h, n]`` (init 0.01 N(0, 1), as the published Kernel2D) and
    ``log_scale [h, 1]`` (init 0). ``basis``: "cosine" (half-range), "fourier" or "cheb".
    ``penalty``: "exact", sum_h integral_0^1 k_h''(u)^2 du without the scale (as Kernel2D),
    or "published", the published weights on one axis, sum (2 pi k)^4 a_k^2.
    """

    def __init__(self, n_heads: int, n_freq: int, basis: str = "cosine", penalty: str = "exact"):
        super().__init__()
        check_kernel_args(n_freq, basis, penalty)
        self.n_freq, self.basis, self.penalty = n_freq, basis, penalty
        self.coeffs = nn.Parameter(0.01 * torch.randn(n_heads, n_freq))
        self.log_scale = nn.Parameter(torch.zeros(n_heads, 1))
        self.grams = GramTables(basis, n_freq, ((2, 2),)) if penalty == "exact" else None

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """``u`` of any shape S (in the coefficients' dtype) -> ``[h, *S]``, the basis from
        its recurrence (:func:`~catlib.nn.bases.basis_recurrence`):
        ``from_basis(basis_values(u), u.shape)``."""
        return self.from_basis(self.basis_values(u), u.shape)

    def basis_values(self, u: torch.Tensor) -> torch.Tensor:
        """The parameter-free part of :meth:`forward`: the unscaled basis ``[n, |S|]`` at
        ``u`` (any shape S), which depends on ``u``, ``basis`` and ``n_freq`` only (no
        gradient: positions carry none). A plan may keep it for its ``u`` (the geometry
        cache, :func:`~catlib.nn.plan.kernel_at`): it is then a constant that nothing
        writes into (:meth:`from_basis` only reads it)."""
        flat = u.detach().reshape(-1)          # positions carry no gradient
        return basis_recurrence(self.basis, flat, self.n_freq)                   # [n, |S|]

    def from_basis(self, phi: torch.Tensor, shape) -> torch.Tensor:
        """The kernel ``[h, *shape]`` from :meth:`basis_values` ``phi [n, |S|]`` of points of
        ``shape`` S: the part of :meth:`forward` that reads the parameters (the very same
        operations, so the same numbers bit for bit)."""
        k = ((self.coeffs / math.sqrt(self.n_freq)) @ phi).reshape(-1, *shape)
        return F.softplus(self.log_scale).reshape(-1, *([1] * len(shape))) * k

    def curvature_bound(self) -> torch.Tensor:
        """An upper bound of max_u |k_h''(u)| per head, ``[h]``: s_h / sqrt(n) * sum_k
        |a_hk| max |phi_k''|, with max |phi_k''| = (omega k)^2 for cosines (omega = pi, or
        2 pi for "fourier") and 4 k^2 (k^2 - 1) / 3 for Chebyshev (Markov, x = 2u - 1)."""
        c = self.coeffs.detach()
        k = torch.arange(self.n_freq, dtype=c.dtype, device=c.device)
        if self.basis == "cheb":
            top = 4.0 * k ** 2 * (k ** 2 - 1).clamp(min=0) / 3.0
        else:
            top = ((2.0 if self.basis == "fourier" else 1.0) * math.pi * k) ** 2
        scale = F.softplus(self.log_scale.detach())[:, 0]
        return scale * (c.abs() @ top) / math.sqrt(self.n_freq)

    def sobolev_penalty(self) -> torch.Tensor:
        c = self.coeffs
        if self.penalty == "published":
            k = torch.arange(self.n_freq, dtype=c.dtype, device=c.device)
            return ((2 * math.pi * k) ** 4 * c ** 2).sum()
        g2 = _gram(self.grams, self.basis, self.n_freq, (2, 2), c)
        return torch.einsum("hk,km,hm->", c, g2, c)

    def extra_repr(self) -> str:
        return (f"n_heads={self.coeffs.shape[0]}, n_freq={self.n_freq}, basis={self.basis!r}, "
                f"penalty={self.penalty!r}")
