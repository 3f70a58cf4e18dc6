"""The relative kernel (``kernel="relative"``): CAT attention whose kernel reads token
distances through the map of :mod:`.distance_map`. The distances
are cut into Q = ``quad_nodes`` bins [a_q, b_q), fixed once (:func:`.distance_map.graded_bins`):
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

It takes the place of :class:`.attention.ContinuousAttention` in a CAT block
(:func:`catlib.nn.model.make_attention`) through the plan protocol of :mod:`.plan`.
Kernel parameters live under ``kernels`` so that the adjoint reaches them through the
plan only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .bases import kernel_basis_name
from .distance_map import graded_bins
from .kernel import SpectralKernel1D
from .plan import GeometryCache, Plan, cache_key, kernel_at, plan_target

# Up to this length the relative operator mixes with one dense [h, T, T] matrix
# (32 MB at T = 1024, h = 8); beyond it, with Q shifted prefix sums, linear in T.
DENSE_RELATIVE_MAX = 1024


@dataclass
class RelativePlan(Plan):
    """The relative kernel at one length T.

    ``weights [h, T, Q]``: the weight of each token of bin q for query i,
    exp(k(u_q)) / Z_i (0 for bins outside the prefix), O(T Q). ``mixing [h, T, T]``:
    the same as a lower-triangular matrix, present only for T <= ``dense_max``.
    ``starts``/``stops``: the bins (see :func:`graded_bins`).
    """

    weights: torch.Tensor
    starts: tuple[int, ...]
    stops: tuple[int | None, ...]
    mixing: torch.Tensor | None = None

    def kernel_tensor(self) -> torch.Tensor:
        return self.mixing if self.mixing is not None else self.weights

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
        ``out_proj``, applied only if ``dropout_in_dynamics``; kernel_scale c and
        kernel_horizon D in tokens; penalty: "exact" or "published".
    Resolution: every token for the last ``n_exact`` distances (21 for c = 4, D = 1024,
    Q = 64), bins growing geometrically beyond, one bin for d >= D.
    """

    dense_max = DENSE_RELATIVE_MAX

    def __init__(self, d_model: int, n_heads: int, n_freq: int, basis: str = "fourier",
                 quad_nodes: int = 64, dropout: float = 0.1, kernel_scale: float = 4.0,
                 kernel_horizon: float = 1024.0, half_range_cosine: bool = True,
                 penalty: str = "exact", dropout_in_dynamics: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim, self.n_freq = n_heads, d_model // n_heads, n_freq
        self.basis_name = kernel_basis_name(basis, half_range_cosine)
        self.kernel_scale, self.kernel_horizon = float(kernel_scale), float(kernel_horizon)
        self.starts, self.stops, self.nodes = graded_bins(quad_nodes, self.kernel_scale,
                                                          self.kernel_horizon)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.kernels = SpectralKernel1D(n_heads, n_freq, self.basis_name, penalty)
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()
        self._cache = GeometryCache()

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

        Nothing here depends on parameters or buffers (the bins are fixed at construction),
        so the key is complete: .double(), .to(device) and load_state_dict need no invalidation.
        """
        device = torch.device(device)
        return self._cache.get(cache_key(length, device, dtype, length <= self.dense_max),
                               lambda: self._build_geometry(length, device, dtype))

    def _build_geometry(self, length: int, device, dtype) -> dict:
        """The uncached entry of :meth:`_geometry` (width, log_w, nodes; bin, future if dense)."""
        i = torch.arange(length, device=device)
        starts = torch.as_tensor(self.starts, device=device)
        stops = torch.as_tensor([s if s is not None else length + 1 for s in self.stops],
                                device=device)
        width = (torch.minimum(stops, i[:, None] + 1) - starts).clamp(min=0)    # [T, Q]
        geo = dict(width=width.to(dtype), log_w=torch.log(width.to(dtype)))     # -inf: empty
        geo["nodes"] = torch.tensor(self.nodes, device=device, dtype=dtype)    # u_q [Q]
        if length <= self.dense_max:
            distance = (i[:, None] - i[None, :])                                # [T, T]
            geo["bin"] = (torch.searchsorted(starts, distance.clamp(min=0), right=True) - 1)
            geo["future"] = distance < 0
        return geo

    def plan(self, length: int, device=None, dtype=None) -> RelativePlan:
        """Per-token bin weights for sequences of ``length`` T; computed once per solve."""
        device, dtype = plan_target(self, length, device, dtype, ref=self.kernels.coeffs)
        geo = self._geometry(length, device, dtype)
        # The basis at the Q nodes, the same at every T: one entry per (device, dtype).
        k = kernel_at(self.kernels, self._cache, cache_key(len(self.nodes), device, dtype,
                                                           "basis at the nodes"),
                      lambda: geo["nodes"])                                         # [h, Q]
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
