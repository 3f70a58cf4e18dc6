"""Continuous attention: values interpolated at quadrature nodes, mixed by spectral kernels.

For a query at s_i = i / (T - 1) and an integration interval [0, L_i]
(L_i = 1 for the published operator, L_i = s_i for the causal one), the
Gauss-Legendre rule of order Q is mapped to nodes t_iq = L_i t_q with weights
L_i w_q, and

    out_i = sum_q c_iq v(t_iq),   v = piecewise-linear interpolant of the token values.

Published: c_iq = softmax_q(W(s_i, t_q)) * w_q (defect 4: the row sums fall far
below 1). Normalised: c_iq = exp(W_iq) w_iq / sum_q' exp(W_iq') w_iq', a
quadrature of integral_0^{L_i} k(s_i, t) v(t) dt with integral k dt = 1.
Causal, at s_0 = 0 the interval is empty: the row has weight 0 (published c_iq), or
reads token 0 alone (normalised: the limit as s -> 0 of the kernel normalised on [0, s]).

The mixing weights depend on the length T and the kernel parameters only, not
on the hidden state, so :meth:`ContinuousAttention.plan` computes them once per
ODE solve and every function evaluation reuses them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .bases import basis, kernel_basis_name
from .kernel import Kernel2D, kernel_logits, sobolev_penalty
from .plan import GeometryCache, Plan, cache_key, plan_target
from .quadrature import gauss_legendre, interpolation_matrix, neighbours

# Up to this length the causal operator is one dense [h, T, T] matmul: quadratic in T
# (4 h T^2 bytes in float32) but one BLAS call. Beyond it, a gather of 2Q neighbours per
# query, linear in time and memory (benchmarks/bench.py compares the two paths).
DENSE_CAUSAL_MAX = 6144
# Tokens x neighbours x features gathered at once on the sparse path.
GATHER_CHUNK = 1 << 24


def _buffer_record(buffer: torch.Tensor) -> tuple:
    """What :func:`_same_buffer` compares: the tensor and its version, or (an inference
    tensor, which has no version counter) a copy of its values."""
    if buffer.is_inference():
        return buffer, None, buffer.detach().clone()
    return buffer, buffer._version, None


def _same_buffer(record: tuple, buffer: torch.Tensor) -> bool:
    held, version, values = record
    if values is not None:
        return (buffer.device == values.device and buffer.dtype == values.dtype
                and torch.equal(buffer, values))
    return buffer is held and not buffer.is_inference() and buffer._version == version


@dataclass
class AttentionPlan(Plan):
    """The hidden-state-independent part of attention at one length T.

    Non-causal: ``weights [h, T, Q]`` on the values at the shared nodes,
    which ``interp [Q, T]`` interpolates from the tokens. Causal, short sequences: ``mixing
    [h, T, T]``, a lower-triangular matrix from token values to outputs.
    Causal, long sequences (T > ``DENSE_CAUSAL_MAX``): ``weights [h, T, 2Q]``
    on the tokens ``index [T, 2Q]``, the two interpolation neighbours of every
    node, so that memory and time stay linear in T.
    """

    weights: torch.Tensor | None = None
    interp: torch.Tensor | None = None
    mixing: torch.Tensor | None = None
    index: torch.Tensor | None = None

    def kernel_tensor(self) -> torch.Tensor:
        return self.mixing if self.mixing is not None else self.weights


class ContinuousAttention(nn.Module):
    """Multi-head continuous attention, published or causal.

    Args:
        d_model: D; n_heads: h (D % h == 0); n_freq: n; basis: "fourier" or "cheb".
        quad_nodes: Q; dropout: rate of the dropout after ``out_proj``.
        causal: integrate over [0, s_i] only (the corrected operator).
        normalised_integral: normalise the kernel on its interval (defect 4 fixed).
        half_range_cosine: use cos(pi k t) in place of cos(2 pi k t) (defect 5 fixed).
        penalty: the Sobolev penalty's kind, "published" or "exact".
        dropout_in_dynamics: apply the dropout here (published: inside the ODE dynamics).
    Buffers ``t_nodes``, ``t_w`` [Q] (float32) hold the rule on [0, 1].
    """

    def __init__(self, d_model: int, n_heads: int, n_freq: int, basis: str = "fourier",
                 quad_nodes: int = 64, dropout: float = 0.1, causal: bool = False,
                 normalised_integral: bool = False, half_range_cosine: bool = False,
                 penalty: str = "published", dropout_in_dynamics: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim, self.n_freq = n_heads, d_model // n_heads, n_freq
        self.basis_name = kernel_basis_name(basis, half_range_cosine)
        self.causal, self.normalised_integral = causal, normalised_integral
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.kernels = nn.ModuleList(
            Kernel2D(n_freq, self.basis_name, penalty) for _ in range(n_heads))
        nodes, weights = gauss_legendre(quad_nodes)
        self.register_buffer("t_nodes", nodes.float())
        self.register_buffer("t_w", weights.float())
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()
        # Geometry per (length, device, dtype), valid for the buffers it was built from.
        self._cache = GeometryCache()
        self._built_from: tuple | None = None

    # -- kernels ---------------------------------------------------------------
    def stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All heads' ``coeffs [h, n, n]`` and ``log_scale [h, 1]``."""
        return (torch.stack([k.coeffs for k in self.kernels]),
                torch.stack([k.log_scale for k in self.kernels]))

    def sobolev_penalty(self) -> torch.Tensor:
        coeffs, _ = self.stacked()
        first = self.kernels[0]
        return sobolev_penalty(coeffs, self.basis_name, first.penalty, first.grams)

    def _geometry(self, length: int, device, dtype) -> dict:
        """Basis values and interpolation stencils at one length, built once and cached.

        Returns ``phi_s [n, T]``; ``phi_t [n, Q]`` (published) or ``[n, T, Q]`` (causal);
        ``log_w [Q]`` or ``[T, Q]``, the log quadrature weights (-inf on the empty interval
        of s = 0); ``log_w_normalised``, the same with that row made finite; and
        ``interp [Q, T]`` (published) or ``index``, ``split [T, Q, 2]`` (causal).
        """
        self._drop_stale_geometry()
        return self._cache.get(cache_key(length, device, dtype),
                               lambda: self._build_geometry(length, device, dtype))

    def _drop_stale_geometry(self) -> None:
        """Empty the cache when the quadrature buffers are not those it was built from.

        A buffer is the same when it is the same tensor object (held here, so that its
        memory cannot be reused by a new one) at the same version counter: a new buffer
        (``.to``, ``.half().float()``, reassignment) fails the first test, load_state_dict
        and in-place edits of ``t_nodes`` or ``t_w`` the second. Nothing is read from the
        device (no host synchronisation per plan). Buffers made under inference_mode have
        no version counter: theirs are compared by value (2Q numbers per plan).
        """
        current = (self.t_nodes, self.t_w)
        built_from = self._built_from
        if built_from is not None and all(_same_buffer(record, buffer)
                                          for record, buffer in zip(built_from, current)):
            return
        self._cache.clear()
        with torch.inference_mode(False):
            self._built_from = tuple(_buffer_record(b) for b in current)

    def _build_geometry(self, length: int, device, dtype) -> dict:
        s = torch.linspace(0, 1, length, device=device, dtype=dtype)   # query positions [T]
        nodes, w = self.t_nodes.to(dtype), self.t_w.to(dtype)
        if self.causal:
            t = s[:, None] * nodes[None, :]                              # [T, Q] nodes on [0, s_i]
            log_w = torch.log(s[:, None] * w[None, :])                   # [T, Q], -inf at s = 0
            # Normalised on the empty interval [0, 0] the kernel has a limit: all nodes sit
            # at t = 0, so the row reads token 0 whatever its weights; finite ones avoid 0/0.
            log_w_normalised = torch.where(s[:, None] > 0, log_w, torch.log(w))
        else:
            t = nodes
            log_w = log_w_normalised = torch.log(w)                     # [Q]
        geo = dict(phi_s=basis(self.basis_name, s, self.n_freq),
                   phi_t=basis(self.basis_name, t, self.n_freq),
                   log_w=log_w, log_w_normalised=log_w_normalised)
        if self.causal:
            geo["index"], geo["split"] = neighbours(t, length)          # [T, Q, 2] each
        else:
            # Interpolation as a [Q, T] matrix: a matmul is cheaper than a gather
            # and its backward than a scatter.
            geo["interp"] = interpolation_matrix(t, length)
        return geo

    def plan(self, length: int, device=None, dtype=None) -> AttentionPlan:
        """Mixing weights for sequences of ``length`` T (see the module docstring)."""
        if length == 1 and not self.causal:
            raise ValueError(
                "T = 1 is undefined in the published (non-causal) operator: its interpolation "
                "reads token i0 + 1 = 1, out of range (defect 8); use causal=True "
                "(variant='causal') or T >= 2")
        coeffs, log_scale = self.stacked()
        device, dtype = plan_target(self, length, device, dtype, ref=coeffs)
        geo = self._geometry(length, device, dtype)
        w = kernel_logits(coeffs, log_scale, geo["phi_s"], geo["phi_t"])          # [h, T, Q]
        if self.normalised_integral:
            weights = torch.softmax(w + geo["log_w_normalised"], dim=-1)
        else:
            # Weights L_i w_q: exp(-inf) = 0 at s = 0, where [0, s] is empty.
            weights = torch.softmax(w, dim=-1) * geo["log_w"].exp()
        if not self.causal:
            return AttentionPlan(length, weights=weights, interp=geo["interp"])
        # Each node reads two tokens: split its weight over them.
        index = geo["index"].flatten(1)                                       # [T, 2Q]
        token_w = (weights[..., None] * geo["split"]).flatten(2)             # [h, T, 2Q]
        if length > DENSE_CAUSAL_MAX:
            return AttentionPlan(length, weights=token_w, index=index)
        mixing = token_w.new_zeros(token_w.shape[0], length, length)
        return AttentionPlan(length, mixing=mixing.scatter_add(-1, index.expand_as(token_w), token_w))

    # -- forward ---------------------------------------------------------------
    def forward(self, x: torch.Tensor, plan: AttentionPlan | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``; pass a ``plan`` to reuse hoisted kernels."""
        b, length, d_model = x.shape
        if plan is None:
            plan = self.plan(length, x.device, x.dtype)
        heads = (self.n_heads, self.head_dim)
        if plan.interp is not None:
            # Interpolation and projection are both linear: interpolating the Q nodes
            # first and projecting them is the same value at Q/T of the projection cost.
            at_nodes = self.v_proj(plan.interp @ x).view(b, -1, *heads)      # [B, Q, h, d]
            out = torch.einsum("hiq,bqhd->bihd", plan.weights, at_nodes)
        else:
            values = self.v_proj(x).view(b, length, *heads)                  # [B, T, h, d]
            if plan.mixing is not None:
                out = torch.einsum("hij,bjhd->bihd", plan.mixing, values)
            else:
                out = self._gather_mix(plan, values)
        return self.drop(self.out_proj(out.reshape(b, length, d_model)))

    @staticmethod
    def _gather_mix(plan: AttentionPlan, values: torch.Tensor) -> torch.Tensor:
        """Sparse causal mixing, ``values [B, T, h, d]`` -> ``[B, T, h, d]``, in chunks of queries."""
        b, length, h, d = values.shape
        width = plan.index.shape[1]
        chunk = max(1, GATHER_CHUNK // max(1, b * width * h * d))
        pieces = []
        for start in range(0, length, chunk):
            idx = plan.index[start:start + chunk]                          # [C, 2Q]
            picked = values[:, idx]                                        # [B, C, 2Q, h, d]
            w = plan.weights[:, start:start + chunk]                       # [h, C, 2Q]
            pieces.append(torch.einsum("hck,bckhd->bchd", w, picked))
        return torch.cat(pieces, dim=1)
