"""The content-aware kernel (``kernel="content"``). CAT's
kernel as the position term of query-key attention (:class:`.qk_attention.QKAttention`):

    score(i, j) = q_i . k_j / sqrt(d) + k(t_ij),   t_ij = psi(i - j) / psi(max(i, D)),

softmax over j <= i: FIRE's progressive normalisation with a log transform. Up to D
tokens t = u(d), a pure function of distance; beyond, distances are divided by the
query's own psi(i), so t stays in [0, 1] and the kernel is interpolated, never
extrapolated. The bias ``[h, T, T]`` is built once per solve, already causal (-inf
above the diagonal, read through :class:`.bias.CausalBias`): rows i <= D are
one Toeplitz vector, exact; rows beyond read k by linear interpolation from a uniform
grid of G = ``bias_grid`` values k(g / (G - 1)), with error at most
Delta^2 / 8 * max |k''|, Delta = 1 / (G - 1) (:meth:`ContentAttention.grid_error_bound`).
``bias_grid = None`` evaluates those rows point by point (the reference). The
attention itself is quadratic in T.

psi and the horizon D are those of :mod:`.distance_map` (c = ``kernel_scale``,
D = ``kernel_horizon``). The plan is a :class:`.plan.ScoreBiasPlan`.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bases import kernel_basis_name
from .bias import causal_toeplitz
from .kernel import SpectralKernel1D
from .plan import GeometryCache, ScoreBiasPlan, cache_key, kernel_at, plan_target
from .qk_attention import QKAttention

# Kernel values computed at once when evaluating the content bias point by point
# (rows in chunks; the reference path, ``bias_grid = None``).
KERNEL_CHUNK = 1 << 22
# Grid points of the content bias beyond the horizon (2^13 + 1: the nodes g / 2^13 are
# exact in float32), and bias entries (h x rows x keys) interpolated per chunk: 2 MB of
# float32, so that the chunk is still in cache when it is copied into the bias.
BIAS_GRID = (1 << 13) + 1
GRID_CHUNK = 1 << 19
# The content kernel's plan, under its old name.
ContentPlan = ScoreBiasPlan


class ContentAttention(nn.Module):
    """Query-key attention with CAT's spectral kernel as its positional score bias.

    score(i, j) = q_i . k_j / sqrt(d) + k(t_ij), t_ij = psi(i - j) / psi(max(i, D)),
    psi(x) = log(1 + x / c); causal softmax (see the module docstring). Arguments as
    :class:`~catlib.nn.relative.RelativeAttention` without ``quad_nodes`` (every token is
    read). The query-key part is :class:`catlib.nn.qk_attention.QKAttention` (``qk``) without dropout
    on its weights: dropout inside the ODE dynamics would make the right-hand side random.
    With all kernel coefficients zero this is plain causal softmax attention.
    """

    def __init__(self, d_model: int, n_heads: int, n_freq: int, basis: str = "fourier",
                 dropout: float = 0.1, kernel_scale: float = 4.0, kernel_horizon: float = 1024.0,
                 half_range_cosine: bool = True, penalty: str = "exact",
                 dropout_in_dynamics: bool = False):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)
        self.n_heads, self.head_dim, self.n_freq = n_heads, d_model // n_heads, n_freq
        self.basis_name = kernel_basis_name(basis, half_range_cosine)
        self.kernel_scale, self.kernel_horizon = float(kernel_scale), float(kernel_horizon)
        self.kernels = SpectralKernel1D(n_heads, n_freq, self.basis_name, penalty)
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()
        # The kernel's basis at the Toeplitz distances and at the grid (kernel_at): they
        # depend on (rows, device, dtype, kernel_scale, kernel_horizon, bias_grid) only.
        self._cache = GeometryCache()

    # Grid of k for the bias rows beyond the horizon (None: point by point, the reference).
    bias_grid: int | None = BIAS_GRID

    def sobolev_penalty(self) -> torch.Tensor:
        return self.kernels.sobolev_penalty()

    def positions(self, rows: torch.Tensor, length: int, dtype) -> torch.Tensor:
        """t_ij for queries ``rows`` and keys 0..T-1, ``[len(rows), T]`` (0 for j > i)."""
        keys = torch.arange(length, device=rows.device)
        distance = (rows[:, None] - keys[None, :]).clamp(min=0)
        c = self.kernel_scale
        psi = torch.log1p(torch.arange(length, device=rows.device, dtype=dtype) / c)  # psi(d)
        norm = torch.log1p(rows.to(dtype).clamp(min=self.kernel_horizon) / c)
        return psi[distance] * (1.0 / norm)[:, None]

    def grid_error_bound(self) -> float:
        """Bound on |bias - k(t)| beyond the horizon from the linear interpolation alone
        (rounding aside): Delta^2 / 8 * max |k''|, Delta = 1 / (G - 1); 0 without a grid."""
        if self.bias_grid is None:
            return 0.0
        return float(self.kernels.curvature_bound().max()) / (8.0 * (self.bias_grid - 1) ** 2)

    def plan(self, length: int, device=None, dtype=None) -> ScoreBiasPlan:
        """The score bias for sequences of ``length`` T, causally masked, once per solve
        (one [h, T, T] tensor: 0.8 GB at T = 5000, h = 8 in float32)."""
        device, dtype = plan_target(self, length, device, dtype, ref=self.kernels.coeffs)
        # Rows i <= D: t = u(i - j), one vector read at i - j (all rows at training lengths).
        n0 = min(length, math.floor(self.kernel_horizon) + 1)
        def distances() -> torch.Tensor:   # u(d), d = 0..n0-1: no parameter, so its basis cached
            pos = torch.arange(n0, device=device)
            return self.positions(pos[-1:], n0, dtype)[0].flip(0)
        kvec = kernel_at(self.kernels, self._cache, cache_key(
            n0, device, dtype, "toeplitz", self.kernel_scale, self.kernel_horizon),
            distances)                                                              # [h, n0], at d
        toeplitz = causal_toeplitz(kvec)                                            # [h, n0, n0]
        if n0 == length:
            return ScoreBiasPlan(length, toeplitz)
        # Every entry is written once: the Toeplitz block, -inf to its right, then the rows
        # beyond D (their causal triangle, -inf to its right).
        bias = toeplitz.new_empty((toeplitz.shape[0], length, length))
        bias[:, :n0, :n0] = toeplitz
        bias[:, :n0, n0:] = -math.inf
        if self.bias_grid is None:
            self._rows_exact(bias, n0)
        else:
            self._rows_grid(bias, n0)
        return ScoreBiasPlan(length, bias)

    def _rows_exact(self, bias: torch.Tensor, n0: int) -> None:
        """Rows i >= n0 of ``bias``: t = psi(i - j) / psi(i), k evaluated point by point."""
        length = bias.shape[-1]
        rows = torch.arange(length, device=bias.device)
        start = n0
        while start < length:
            stop = min(length, start + max(1, KERNEL_CHUNK // (self.n_freq * length)))
            block = self.kernels(self.positions(rows[start:stop], stop, bias.dtype))  # [h, C, stop]
            future = rows[start:stop, None] < rows[None, :stop]
            bias[:, start:stop, :stop] = block.masked_fill_(future, -math.inf)
            bias[:, start:stop, stop:] = -math.inf
            start = stop

    def _rows_grid(self, bias: torch.Tensor, n0: int) -> None:
        """Rows i >= n0 of ``bias``: k(psi(i - j) / psi(i)) interpolated linearly between
        the G grid values k(g / (G - 1)) (differentiable in them, so in the coefficients).

        One ``grid_sample`` per chunk of rows (a [1, h, 1, G] image read at x = 2t - 1;
        align_corners: x = -1, 1 are the first and last nodes): the weights of each
        entry are computed once for all heads. Row i of psi(i - j), j < T, is a window
        of psi reversed (zeros past the diagonal), so no [C, T] distance index is built.
        On CUDA the backward of ``grid_sample`` uses atomic adds (not deterministic);
        gradients need this path only for T > D + 1, beyond training lengths.
        """
        h, length = bias.shape[0], bias.shape[-1]
        device, dtype = bias.device, bias.dtype
        g = self.bias_grid
        table = kernel_at(self.kernels, self._cache, cache_key(g, device, dtype, "grid"),
                          lambda: torch.arange(g, device=device, dtype=dtype) / (g - 1)  # exact
                          )[None, :, None, :]                                        # [1, h, 1, G]
        psi = torch.log1p(torch.arange(length, device=device, dtype=dtype) / self.kernel_scale)
        # window m = rev[m : m + T], rev = psi(T-1), ..., psi(0), 0, ...: row i is window
        # T - 1 - i, i.e. psi(i - j) for j <= i and 0 beyond.
        windows = torch.cat([psi.flip(0), psi.new_zeros(length)]).unfold(0, length, 1)
        rows = torch.arange(length, device=device)
        start = n0
        while start < length:
            stop = min(length, start + max(1, GRID_CHUNK // (h * (start + 1))))
            r = rows[start:stop]
            coord = psi.new_zeros(1, stop - start, stop, 2)                          # (x, y = 0)
            torch.mul(windows[length - 1 - r, :stop], (2.0 / psi[r])[:, None],
                      out=coord[0, :, :, 0]).sub_(1.0)                               # 2t - 1
            block = F.grid_sample(table, coord, mode="bilinear", padding_mode="border",
                                  align_corners=True)[0]                             # [h, C, stop]
            future = r[:, None] < r[None, :]                                         # j > i
            block[:, :, start:].masked_fill_(future, -math.inf)
            bias[:, start:stop, :stop] = block
            bias[:, start:stop, stop:] = -math.inf
            start = stop

    def forward(self, x: torch.Tensor, plan: ScoreBiasPlan | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``."""
        if plan is None:
            plan = self.plan(x.shape[1], x.device, x.dtype)
        return self.drop(self.qk(x, plan.causal))

    def extra_repr(self) -> str:
        return f"scale={self.kernel_scale}, horizon={self.kernel_horizon}"
