"""Distance kernels: CAT attention whose kernel reads token distances, not [0, 1].

The published operator rescales positions to [0, 1] at every length, so a kernel
learned at T = 128 is stretched 40-fold at T = 5000 and its Q nodes read the recent
past ever more coarsely. The operators here measure position in tokens instead,
through one fixed map (c = ``kernel_scale``, D = ``kernel_horizon``, independent of T):

    psi(d) = log(1 + d / c),   u(d) = min(1, psi(d) / psi(D)),   d = i - j >= 0.

Each head's kernel is a 1-D spectral expansion on [0, 1] (:class:`.kernel.SpectralKernel1D`),
k(u) = softplus(log_scale) * sum_k a_k phi_k(u), penalised by the exact squared H^2
seminorm integral_0^1 k''(u)^2 du (zero for a constant kernel).

**Relative kernel** (:class:`RelativeAttention`, ``kernel="relative"``). The distances
are cut into Q = ``quad_nodes`` bins [a_q, b_q), fixed once (:func:`graded_bins`):
a_0 = 0, a_q = max(a_{q-1} + w_{q-1}, floor(u^{-1}(q / (Q - 1)))), w_q = b_q - a_q
(w_{-1} = 1), the last bin [a_{Q-1}, inf) holding every distance >= about D. Bins
follow equal steps in u where a step spans a token or more and are single tokens
where it does not: the recent past is read token by token, the distant past
geometrically coarser (defaults c = 4, D = 1024, Q = 64: single tokens for
d = 0..20, widths growing by (1 + D/c)^(1/(Q-1)) = 1.092 beyond, one bin for d >= 1024).
The node of bin q is u_q = (u(a_q) + u(b_q - 1)) / 2 (u = 1
for the last). For query i the prefix [0, i] meets bin q in
w_iq = max(0, min(b_q, i + 1) - a_q) tokens, and

    c_iq = softmax_q(k(u_q) + log w_iq),   out_i = sum_q c_iq * mean_{j in bin q, j <= i} v_j,

the quadrature of integral_0^i k v with log-width weights. Bin means are exact, so
every token is read: token j gets exp(k(u_q)) / Z_i, Z_i = sum_q w_iq exp(k(u_q)),
which depends on i and the kernel only, never on T. The plan is ``weights [h, T, Q]``;
the mixing is one dense ``[h, T, T]`` matmul up to ``dense_max`` tokens, beyond it Q
shifted multiply-adds over prefix sums of the values (O(T Q h d) time, linear memory).

**Content-aware kernel** (:class:`ContentAttention`, ``kernel="content"``). CAT's
kernel as the position term of query-key attention (:class:`.qk_attention.QKAttention`):

    score(i, j) = q_i . k_j / sqrt(d) + k(t_ij),   t_ij = psi(i - j) / psi(max(i, D)),

softmax over j <= i: FIRE's progressive normalisation with a log transform. Up to D
tokens t = u(d), a pure function of distance; beyond, distances are divided by the
query's own psi(i), so t stays in [0, 1] and the kernel is interpolated, never
extrapolated. The bias ``[h, T, T]`` is built once per solve, already causal (-inf
above the diagonal, read through :class:`.qk_attention.CausalBias`): rows i <= D are
one Toeplitz vector, exact; rows beyond read k by linear interpolation from a uniform
grid of G = ``bias_grid`` values k(g / (G - 1)), with error at most
Delta^2 / 8 * max |k''|, Delta = 1 / (G - 1) (:meth:`ContentAttention.grid_error_bound`).
``bias_grid = None`` evaluates those rows point by point (the reference). The
attention itself is quadratic in T.

Both take the place of :class:`.attention.ContinuousAttention` in a CAT block
(:func:`catlib.nn.model.make_attention`): ``plan(T, device, dtype)`` once per solve, a
plan with ``grad_tensors()``, ``forward(x, plan)``, ``sobolev_penalty()``. Kernel
parameters live under ``kernels`` so that the adjoint reaches them through the plan only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kernel import SpectralKernel1D
from .qk_attention import CausalBias, QKAttention

# Up to this length the relative operator mixes with one dense [h, T, T] matrix
# (32 MB at T = 1024, h = 8); beyond it, with Q shifted prefix sums, linear in T.
DENSE_RELATIVE_MAX = 1024
# Kernel values computed at once when evaluating the content bias point by point
# (rows in chunks; the reference path, ``bias_grid = None``).
BIAS_CHUNK = 1 << 22
# Grid points of the content bias beyond the horizon (2^13 + 1: the nodes g / 2^13 are
# exact in float32), and bias entries (h x rows x keys) interpolated per chunk: 2 MB of
# float32, so that the chunk is still in cache when it is copied into the bias.
BIAS_GRID = (1 << 13) + 1
GRID_CHUNK = 1 << 19


# ----------------------------------------------------------------- distance map

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


# ----------------------------------------------------------------- basis of both kernels

def _basis_name(basis_name: str, half_range_cosine: bool) -> str:
    if basis_name not in ("fourier", "cheb"):
        raise ValueError(f"basis must be one of ['fourier', 'cheb'], got {basis_name!r}")
    return "cosine" if (basis_name == "fourier" and half_range_cosine) else basis_name


# ----------------------------------------------------------------- relative kernel

@dataclass
class RelativePlan:
    """The relative kernel at one length T.

    ``weights [h, T, Q]``: the weight of each token of bin q for query i,
    exp(k(u_q)) / Z_i (0 for bins outside the prefix), O(T Q). ``mixing [h, T, T]``:
    the same as a lower-triangular matrix, present only for T <= ``dense_max``.
    ``starts``/``stops``: the bins (see :func:`graded_bins`).
    """

    length: int
    weights: torch.Tensor
    starts: tuple[int, ...]
    stops: tuple[int | None, ...]
    mixing: torch.Tensor | None = None

    def grad_tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors through which gradients reach the kernel parameters."""
        t = self.mixing if self.mixing is not None else self.weights
        return (t,) if t.requires_grad else ()

    def token_weights(self, i: int) -> torch.Tensor:
        """The weights of query ``i`` on the tokens 0..i, ``[h, i + 1]`` (they sum to 1)."""
        if not 0 <= i < self.length:
            raise ValueError(f"query {i} is outside 0..{self.length - 1}")
        if self.mixing is not None:
            return self.mixing[:, i, :i + 1]
        distance = torch.arange(i, -1, -1, device=self.weights.device)           # d = i - j
        bins = torch.as_tensor(self.starts, device=distance.device)
        return self.weights[:, i, torch.searchsorted(bins, distance, right=True) - 1]


class RelativeAttention(nn.Module):
    """Causal continuous attention with a kernel on token distances (see the module docstring).

    Args:
        d_model: D; n_heads: h; n_freq: n; basis: "fourier" or "cheb" ("fourier" with
        ``half_range_cosine`` gives cos(pi k u)); quad_nodes: Q bins; dropout: after
        ``out_proj``, applied only if ``dropout_inside``; kernel_scale c and
        kernel_horizon D in tokens; penalty: "exact" or "published".
    Resolution: every token for the last ``n_exact`` distances (21 for c = 4, D = 1024,
    Q = 64), bins growing geometrically beyond, one bin for d >= D.
    """

    dense_max = DENSE_RELATIVE_MAX

    def __init__(self, d_model: int, n_heads: int, n_freq: int, basis: str = "fourier",
                 quad_nodes: int = 64, dropout: float = 0.1, kernel_scale: float = 4.0,
                 kernel_horizon: float = 1024.0, half_range_cosine: bool = True,
                 penalty: str = "exact", dropout_inside: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim, self.n_freq = n_heads, d_model // n_heads, n_freq
        self.basis_name = _basis_name(basis, half_range_cosine)
        self.kernel_scale, self.kernel_horizon = float(kernel_scale), float(kernel_horizon)
        self.starts, self.stops, self.nodes = graded_bins(quad_nodes, self.kernel_scale,
                                                          self.kernel_horizon)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.kernels = SpectralKernel1D(n_heads, n_freq, self.basis_name, penalty)
        self.drop = nn.Dropout(dropout) if dropout_inside else nn.Identity()
        self._geo: dict = {}

    @property
    def n_exact(self) -> int:
        """How many of the most recent distances (0, 1, ...) have a bin of their own."""
        n = 0
        while n < len(self.starts) - 1 and self.stops[n] == self.starts[n] + 1:
            n += 1
        return n

    def sobolev_penalty(self) -> torch.Tensor:
        return self.kernels.sobolev_penalty()

    def _geometry(self, length: int, device, dtype) -> dict:
        """log w_iq ``[T, Q]`` (and the dense bin index), cached per (length, device, dtype).

        Built with inference mode off: an entry made while evaluating under
        torch.inference_mode must still serve a training pass afterwards (inference
        tensors cannot be saved for backward). Nothing here needs grad, and nothing
        depends on parameters or buffers (the bins are fixed at construction), so the
        key is complete: .double(), .to(device) and load_state_dict need no invalidation.
        """
        device = torch.device(device)
        key = (length, device, dtype, length <= self.dense_max)
        if key not in self._geo:
            with torch.inference_mode(False), torch.no_grad():
                geo = self._build_geometry(length, device, dtype)
            if len(self._geo) >= 8:
                self._geo.clear()
            self._geo[key] = geo
        return self._geo[key]

    def _build_geometry(self, length: int, device, dtype) -> dict:
        """The uncached entry of :meth:`_geometry` (width, log_w; bin, future if dense)."""
        i = torch.arange(length, device=device)
        starts = torch.as_tensor(self.starts, device=device)
        stops = torch.as_tensor([s if s is not None else length + 1 for s in self.stops],
                                device=device)
        width = (torch.minimum(stops, i[:, None] + 1) - starts).clamp(min=0)    # [T, Q]
        geo = dict(width=width.to(dtype), log_w=torch.log(width.to(dtype)))     # -inf: empty
        if length <= self.dense_max:
            distance = (i[:, None] - i[None, :])                                # [T, T]
            geo["bin"] = (torch.searchsorted(starts, distance.clamp(min=0), right=True) - 1)
            geo["future"] = distance < 0
        return geo

    def plan(self, length: int, device=None, dtype=None) -> RelativePlan:
        """Per-token bin weights for sequences of ``length`` T; computed once per solve."""
        if length < 1:
            raise ValueError(f"sequence length T must be >= 1, got {length}")
        coeffs = self.kernels.coeffs
        device = device or coeffs.device
        dtype = dtype or coeffs.dtype
        geo = self._geometry(length, device, dtype)
        nodes = torch.tensor(self.nodes, device=device, dtype=dtype)
        k = self.kernels(nodes)                                                     # [h, Q]
        c = torch.softmax(k[:, None, :] + geo["log_w"], dim=-1)                     # [h, T, Q]
        weights = c / geo["width"].clamp(min=1)                                     # per token
        plan = RelativePlan(length, weights, self.starts, self.stops)
        if length <= self.dense_max:
            h = weights.shape[0]
            mixing = weights.gather(2, geo["bin"].expand(h, length, length))
            plan.mixing = mixing.masked_fill(geo["future"], 0.0)
        return plan

    def forward(self, x: torch.Tensor, plan: RelativePlan | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``; pass a ``plan`` to reuse the hoisted kernel."""
        b, length, d_model = x.shape
        if plan is None:
            plan = self.plan(length, x.device, x.dtype)
        values = self.v_proj(x).view(b, length, self.n_heads, self.head_dim)          # [B, T, h, d]
        if plan.mixing is not None:
            out = torch.einsum("hij,bjhd->bihd", plan.mixing, values)
        else:
            out = self._graded_mix(plan, values)
        return self.drop(self.out_proj(out.reshape(b, length, d_model)))

    @staticmethod
    def _graded_mix(plan: RelativePlan, values: torch.Tensor) -> torch.Tensor:
        """sum_q p_iq * (sum of v_j over bin q within [0, i]), from prefix sums.

        With P[k] = sum_{j < k} v_j (P[k] = 0 for k <= 0) and b_q = a_{q+1}, the bin
        sums telescope: out_i = sum_q (p_iq - p_i,q-1) P[i + 1 - a_q], p_i,-1 = 0.
        Each term reads only P[<= i + 1], i.e. tokens <= i: causal exactly.
        """
        b, length, h, d = values.shape
        work = values.dtype if values.device.type == "mps" else torch.float64
        prefix = values.to(work).cumsum(1)                                 # prefix[i] = P[i + 1]
        step = torch.diff(plan.weights.to(work), dim=-1, prepend=plan.weights.new_zeros(
            h, length, 1, dtype=work))                                     # [h, T, Q]
        step = step.permute(1, 0, 2)[None, :, :, None, :]                  # [1, T, h, 1, Q]
        out = prefix.new_zeros(prefix.shape)
        for q, a in enumerate(plan.starts):
            if a >= length:
                break
            # rows i >= a read P[i + 1 - a] = prefix[i - a]
            out[:, a:] += step[:, a:, :, :, q] * prefix[:, :length - a]
        return out.to(values.dtype)

    def extra_repr(self) -> str:
        return (f"bins={len(self.starts)}, exact_last={self.n_exact}, scale={self.kernel_scale}, "
                f"horizon={self.kernel_horizon}")


# ----------------------------------------------------------------- content-aware kernel

@dataclass
class ContentPlan:
    """``bias [h, T, T]``: k(t_ij) for j <= i, -inf above the diagonal, built masked so
    that every call of the solve reads it as it is (``causal``, a
    :class:`~catlib.nn.qk_attention.CausalBias` view of it), never a masked copy."""

    length: int
    bias: torch.Tensor

    @property
    def causal(self) -> CausalBias:
        return CausalBias(self.bias)

    def grad_tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors through which gradients reach the kernel parameters."""
        return (self.bias,) if self.bias.requires_grad else ()


class ContentAttention(nn.Module):
    """Query-key attention with CAT's spectral kernel as its positional score bias.

    score(i, j) = q_i . k_j / sqrt(d) + k(t_ij), t_ij = psi(i - j) / psi(max(i, D)),
    psi(x) = log(1 + x / c); causal softmax (see the module docstring). Arguments as
    :class:`RelativeAttention`; ``quad_nodes`` is unused (every token is read). The
    query-key part is :class:`catlib.nn.qk_attention.QKAttention` (``qk``) without dropout
    on its weights: dropout inside the ODE dynamics would make the right-hand side random.
    With all kernel coefficients zero this is plain causal softmax attention.
    """

    def __init__(self, d_model: int, n_heads: int, n_freq: int, basis: str = "fourier",
                 dropout: float = 0.1, kernel_scale: float = 4.0, kernel_horizon: float = 1024.0,
                 half_range_cosine: bool = True, penalty: str = "exact",
                 dropout_inside: bool = False):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)
        self.n_heads, self.head_dim, self.n_freq = n_heads, d_model // n_heads, n_freq
        self.basis_name = _basis_name(basis, half_range_cosine)
        self.kernel_scale, self.kernel_horizon = float(kernel_scale), float(kernel_horizon)
        self.kernels = SpectralKernel1D(n_heads, n_freq, self.basis_name, penalty)
        self.drop = nn.Dropout(dropout) if dropout_inside else nn.Identity()

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

    def plan(self, length: int, device=None, dtype=None) -> ContentPlan:
        """The score bias for sequences of ``length`` T, causally masked, once per solve
        (one [h, T, T] tensor: 0.8 GB at T = 5000, h = 8 in float32)."""
        if length < 1:
            raise ValueError(f"sequence length T must be >= 1, got {length}")
        coeffs = self.kernels.coeffs
        device = device or coeffs.device
        dtype = dtype or coeffs.dtype
        # Rows i <= D: t = u(i - j), one vector read at i - j (all rows at training lengths).
        n0 = min(length, math.floor(self.kernel_horizon) + 1)
        pos = torch.arange(n0, device=device)
        kvec = self.kernels(self.positions(pos[-1:], n0, dtype)[0].flip(0))         # [h, n0], at d
        distance = pos[:, None] - pos[None, :]
        future = distance < 0
        toeplitz = kvec[:, distance.clamp(min=0)].masked_fill_(future, -math.inf)   # [h, n0, n0]
        if n0 == length:
            return ContentPlan(length, toeplitz)
        # Every entry is written once: the Toeplitz block, -inf to its right, then the rows
        # beyond D (their causal triangle, -inf to its right).
        bias = toeplitz.new_empty((toeplitz.shape[0], length, length))
        bias[:, :n0, :n0] = toeplitz
        bias[:, :n0, n0:] = -math.inf
        if self.bias_grid is None:
            self._rows_exact(bias, n0)
        else:
            self._rows_grid(bias, n0)
        return ContentPlan(length, bias)

    def _rows_exact(self, bias: torch.Tensor, n0: int) -> None:
        """Rows i >= n0 of ``bias``: t = psi(i - j) / psi(i), k evaluated point by point."""
        length = bias.shape[-1]
        rows = torch.arange(length, device=bias.device)
        start = n0
        while start < length:
            stop = min(length, start + max(1, BIAS_CHUNK // (self.n_freq * length)))
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
        nodes = torch.arange(g, device=device, dtype=dtype) / (g - 1)                # exact
        table = self.kernels(nodes)[None, :, None, :]                                # [1, h, 1, G]
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

    def forward(self, x: torch.Tensor, plan: ContentPlan | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``."""
        if plan is None:
            plan = self.plan(x.shape[1], x.device, x.dtype)
        return self.drop(self.qk(x, plan.causal))

    def extra_repr(self) -> str:
        return f"scale={self.kernel_scale}, horizon={self.kernel_horizon}"
