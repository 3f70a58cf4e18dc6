"""Causal query-key self-attention, with an optional additive score bias and RoPE.

For head h with query q_i, key k_j (head size d) and a bias B_h[i, j]:

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d) + B_h[i, j]) v_j.

The bias is the hook for position schemes that act on the scores: ALiBi
(:func:`alibi_bias`) is one; a kernel W(s_i, t_j) on continuous positions
("content-aware CAT": score = q.k / sqrt(d) + W) is another. ``rotary=True``
rotates q and k by their positions instead (RoPE, rotate-half convention), so
that q_i . k_j depends on i - j only. Neither scheme adds anything to the tokens.

The bias is a :class:`~catlib.nn.bias.CausalBias`, built causal once (ALiBi's, CAT's
content kernel, the decay prior: 16 calls per RK4 solve share one) and read as views
on every call: the per-call cost is the attention alone (on the CPU, the fused kernel
instead of the explicit softmax).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bias import CausalBias, alibi_bias, alibi_slopes  # noqa: F401  (their old home)

ROPE_BASE = 10000.0
# With a bias, queries go in chunks of about this many score entries (B * h * C * T):
# each chunk reads only the keys up to its last query (causal), so the work is about
# half of the full T x T.
SCORE_CHUNK = 1 << 24


# ------------------------------------------------------------------------- RoPE

def rotary_cos_sin(length: int, head_dim: int, device=None, dtype=torch.float32,
                   base: float = ROPE_BASE) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles at positions 0..T-1, ``[T, d]`` each.

    Pair (c, c + d/2) of a head turns by the angle p * base^(-2c/d) at position p
    (rotate-half convention). Angles are computed in float32, or float64 for a
    float64 ``dtype``, at any length.
    """
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head size, got {head_dim}")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=work) / head_dim)
    angles = torch.arange(length, device=device, dtype=work)[:, None] * inv_freq   # [T, d/2]
    angles = torch.cat([angles, angles], dim=-1)                                    # [T, d]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., T, d]`` by the angles of its positions (``cos``, ``sin`` [T, d])."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated_half * sin


# ------------------------------------------------------------------------- module

class QKAttention(nn.Module):
    """Causal multi-head query-key self-attention.

    Args:
        d_model: D; n_heads: h (D % h == 0); dropout: on the attention weights in
        train mode (as ``nn.MultiheadAttention``); rotary: apply RoPE to q and k.
    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, each Linear(D, D) with
    bias: 4 D^2 + 4 D, as many as ``nn.MultiheadAttention(D, h)``. Separate value and
    output projections let :mod:`catlib.measure.extrapolation` probe the mixing weights.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, rotary: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        if rotary and self.head_dim % 2:
            raise ValueError(f"rotary=True needs an even head size, got {self.head_dim}")
        self.dropout, self.rotary = dropout, rotary
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x: torch.Tensor, bias: CausalBias | None = None,
                query_scale: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``.

        ``bias``: a :class:`~catlib.nn.bias.CausalBias` (``[Bb, Hb, T, T]``, -inf above the
        diagonal), added to q_i . k_j / sqrt(d) before the causal softmax and read as views.
        ``query_scale`` ``[h, T]``: multiplies head h's scores q_i . k_j of query i (not the
        bias). Memory beyond the bias itself: one chunk of scores, about ``SCORE_CHUNK`` entries.
        """
        b, length, d_model = x.shape
        heads = (b, length, self.n_heads, self.head_dim)
        q, k, v = (proj(x).view(heads).transpose(1, 2)                       # [B, h, T, d]
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.rotary:
            cos, sin = rotary_cos_sin(length, self.head_dim, x.device, q.dtype)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if query_scale is not None:
            q = q * query_scale.to(q.dtype)[:, :, None]                        # [B, h, T, d]
        p = self.dropout if self.training else 0.0
        if bias is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        elif isinstance(bias, CausalBias):
            out = self._biased(q, k, v, bias, p)
        else:
            raise TypeError(f"bias must be a CausalBias (built -inf above the diagonal, e.g. "
                            f"catlib.nn.bias.causal_toeplitz), got {type(bias).__name__}")
        return self.out_proj(out.transpose(1, 2).reshape(b, length, d_model))

    @staticmethod
    def _biased(q, k, v, bias: CausalBias, dropout_p):
        """Causal attention with a score bias, ``q, k, v [B, h, T, d]`` -> ``[B, h, T, d]``,
        in chunks of queries, each against the keys it may see (views of the bias).

        Row blocks come from one ``split`` (its backward is one concatenation, not a full
        [h, T, T] per chunk). Without grad (evaluation, an adjoint's forward solve) the bias
        is detached so that the CPU's fused kernel takes it: that kernel refuses a mask that
        requires grad, even under no_grad. A bias with ``keys_reversed`` reads the keys and
        values reversed (the sum over keys is the same, in another order).
        """
        b, h, length, _ = q.shape
        masked = bias.masked
        if bias.keys_reversed:
            k, v = k.flip(-2), v.flip(-2)
        if masked.shape[-1] != length:
            raise ValueError(f"the causal bias is for T = {masked.shape[-1]}, the input has "
                             f"T = {length}")
        if masked.dtype != q.dtype:
            masked = masked.to(q.dtype)
        if not torch.is_grad_enabled():
            masked = masked.detach()
        chunk = max(1, SCORE_CHUNK // (b * h * length))
        attend = _attend if masked.requires_grad else F.scaled_dot_product_attention
        if chunk >= length:
            return attend(q, k, v, attn_mask=masked, dropout_p=dropout_p)
        pieces = []
        for start, rows in zip(range(0, length, chunk), masked.split(chunk, dim=-2)):
            stop = start + rows.shape[-2]
            keys = slice(length - stop, None) if bias.keys_reversed else slice(None, stop)
            pieces.append(attend(
                q[:, :, start:stop], k[:, :, keys], v[:, :, keys],
                attn_mask=rows[..., keys], dropout_p=dropout_p))
        return torch.cat(pieces, dim=2)


def _attend(q, k, v, attn_mask, dropout_p=0.0):
    """Softmax attention with an additive mask that requires grad, written out: what
    ``F.scaled_dot_product_attention`` computes on such a mask (its unfused path), without
    that path's guard for rows masked whole (a causal bias has its diagonal finite), which
    cost about 5 % of a KERPLE-prior CAT's training step on the CPU."""
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1)) + attn_mask   # scale the smaller
    weights = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return torch.matmul(weights, v)
