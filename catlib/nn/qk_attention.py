"""Causal query-key self-attention, with an optional additive score bias and RoPE.

For head h with query q_i, key k_j (head size d) and a bias B_h[i, j]:

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d) + B_h[i, j]) v_j.

The bias is the hook for position schemes that act on the scores: ALiBi
(:func:`alibi_bias`) is one; a kernel W(s_i, t_j) on continuous positions
("content-aware CAT": score = q.k / sqrt(d) + W) is another. ``rotary=True``
rotates q and k by their positions instead (RoPE, rotate-half convention), so
that q_i . k_j depends on i - j only. Neither scheme adds anything to the tokens.

A bias passed as a tensor is masked (future entries set to -inf) on every call, a
copy of each chunk of it. A caller that uses one bias for many calls (CAT's content
kernel: 16 calls per RK4 solve) prepares it once, :func:`prepare_bias` ->
:class:`CausalBias`, and every call then reads views of it: the per-call cost is the
attention alone (on the CPU, the fused kernel instead of the explicit softmax).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

ROPE_BASE = 10000.0
# With a bias, queries go in chunks of about this many score entries (B * h * C * T):
# each chunk reads only the keys up to its last query (causal), so the work is about
# half of the full T x T, and no full masked copy of the bias is ever made.
BIAS_CHUNK = 1 << 24


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


# ------------------------------------------------------------------------- ALiBi

def alibi_slopes(n_heads: int) -> list[float]:
    """The ALiBi paper's head slopes.

    For h a power of two: 2^(-8 i / h), i = 1..h. Otherwise, with m the largest power of
    two below h: the m slopes for m heads, then every other slope of the 2m-head
    sequence (its odd-numbered ones), h - m of them.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def power_of_two(h: int) -> list[float]:
        return [2.0 ** (-8.0 * i / h) for i in range(1, h + 1)]

    m = 2 ** int(math.floor(math.log2(n_heads)))
    if m == n_heads:
        return power_of_two(n_heads)
    return power_of_two(m) + power_of_two(2 * m)[0::2][: n_heads - m]


def alibi_bias(n_heads: int, length: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """ALiBi score bias ``[h, T, T]``: -slope_h * (i - j) for j <= i, -inf for j > i.

    The future entries are -inf so that the bias is causal on its own; :class:`QKAttention`
    masks them again, which changes nothing.
    """
    slopes = torch.tensor(alibi_slopes(n_heads), device=device, dtype=dtype)
    pos = torch.arange(length, device=device)
    distance = (pos[:, None] - pos[None, :]).to(dtype)                               # i - j
    bias = -slopes[:, None, None] * distance
    # In place: at T = 5000, h = 8 the bias alone is 0.8 GB in float32.
    return bias.masked_fill_(distance < 0, float("-inf"))


# ------------------------------------------------------------------------- prepared bias

@dataclass(frozen=True)
class CausalBias:
    """A score bias that is already causal: ``masked [Bb, Hb, T, T]`` (Bb in {1, B}, Hb in
    {1, h}) whose entries above the diagonal (j > i) are -inf; those on and below it are
    the bias itself (finite, or -inf to forbid a pair).

    Made by :func:`prepare_bias` (which masks), or directly by a caller that built the
    tensor with -inf above the diagonal itself (no second [h, T, T] copy). Nothing checks
    the mask per call: a finite entry above the diagonal would let a query read the future.
    Gradients flow to ``masked`` (and through it to whatever it was computed from); it
    is the tensor to hand to an adjoint as a parameter.
    """

    masked: torch.Tensor

    def __post_init__(self):
        if not 2 <= self.masked.dim() <= 4 or self.masked.shape[-1] != self.masked.shape[-2]:
            raise ValueError(f"a causal bias is [T, T], [h, T, T] or [B, h, T, T], got shape "
                             f"{tuple(self.masked.shape)}")
        if self.masked.dim() < 4:   # 4-D: the fused CPU kernel takes 2-D or 4-D masks only
            object.__setattr__(self, "masked", self.masked.reshape(
                (1,) * (4 - self.masked.dim()) + tuple(self.masked.shape)))

    @property
    def length(self) -> int:
        return self.masked.shape[-1]


def prepare_bias(bias: torch.Tensor, inplace: bool = False) -> CausalBias:
    """``bias [T, T]``, ``[h, T, T]`` or ``[B, h, T, T]`` -> a :class:`CausalBias`, its
    entries above the diagonal set to -inf once (for every later call of
    :meth:`QKAttention.forward`). ``inplace=True`` masks ``bias`` itself (no copy; not
    for a leaf that requires grad): at T = 5000, h = 8 a copy is 0.8 GB in float32.
    """
    if bias.dim() < 2 or bias.shape[-1] != bias.shape[-2]:
        raise ValueError(f"bias must end in [T, T], got shape {tuple(bias.shape)}")
    length = bias.shape[-1]
    pos = torch.arange(length, device=bias.device)
    future = pos[None, :] > pos[:, None]
    if inplace:
        return CausalBias(bias.masked_fill_(future, float("-inf")))
    return CausalBias(bias.masked_fill(future, float("-inf")))


# ------------------------------------------------------------------------- module

class QKAttention(nn.Module):
    """Causal multi-head query-key self-attention.

    Args:
        d_model: D; n_heads: h (D % h == 0); dropout: on the attention weights in
        train mode (as ``nn.MultiheadAttention``); rotary: apply RoPE to q and k.
    Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, each Linear(D, D) with
    bias: 4 D^2 + 4 D, as many as ``nn.MultiheadAttention(D, h)``. Separate value and
    output projections let :mod:`catlib.extrapolation` probe the mixing weights.
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

    def forward(self, x: torch.Tensor,
                bias: torch.Tensor | CausalBias | None = None) -> torch.Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``.

        ``bias``: additive score bias, ``[h, T, T]`` or anything broadcastable to
        ``[B, h, T, T]`` (e.g. ``[B, h, T, T]``, ``[1, h, T, T]``, ``[T, T]``); entry
        (i, j) is added to q_i . k_j / sqrt(d) before the causal softmax. Future entries
        (j > i) are masked whatever the bias holds, by a copy of each chunk on every call.
        Or a :class:`CausalBias` (:func:`prepare_bias`), masked once and read as views:
        the form for a bias shared by many calls. Memory beyond the bias itself: one chunk
        of scores, about ``BIAS_CHUNK`` entries, at any T.
        """
        b, length, d_model = x.shape
        heads = (b, length, self.n_heads, self.head_dim)
        q, k, v = (proj(x).view(heads).transpose(1, 2)                       # [B, h, T, d]
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.rotary:
            cos, sin = rotary_cos_sin(length, self.head_dim, x.device, q.dtype)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        p = self.dropout if self.training else 0.0
        if bias is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        elif isinstance(bias, CausalBias):
            out = self._prepared(q, k, v, bias, p)
        else:
            out = self._biased(q, k, v, bias, p)
        return self.out_proj(out.transpose(1, 2).reshape(b, length, d_model))

    @staticmethod
    def _biased(q, k, v, bias, dropout_p):
        """Causal attention with a score bias, ``q, k, v [B, h, T, d]`` -> ``[B, h, T, d]``,
        in chunks of queries, each against the keys it may see."""
        b, h, length, _ = q.shape
        bias = bias.to(q.dtype).expand(*bias.shape[:-2], length, length)   # a view: no copy
        chunk = max(1, BIAS_CHUNK // (b * h * length))
        pos = torch.arange(length, device=q.device)
        pieces = []
        for start in range(0, length, chunk):
            stop = min(start + chunk, length)
            future = pos[None, :stop] > pos[start:stop, None]                # [C, stop]
            mask = bias[..., start:stop, :stop].masked_fill(future, float("-inf"))
            pieces.append(F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
                attn_mask=mask, dropout_p=dropout_p))
        return torch.cat(pieces, dim=2)

    @staticmethod
    def _prepared(q, k, v, bias: CausalBias, dropout_p):
        """As :meth:`_biased` for a bias masked beforehand: chunks of queries read views of it.

        Row blocks come from one ``split`` (its backward is one concatenation, not a full
        [h, T, T] per chunk). Without grad (evaluation, an adjoint's forward solve) the bias
        is detached so that the CPU's fused kernel takes it: that kernel refuses a mask that
        requires grad, even under no_grad.
        """
        b, h, length, _ = q.shape
        masked = bias.masked
        if masked.shape[-1] != length:
            raise ValueError(f"the causal bias is for T = {masked.shape[-1]}, the input has "
                             f"T = {length}")
        if masked.dtype != q.dtype:
            masked = masked.to(q.dtype)
        if not torch.is_grad_enabled():
            masked = masked.detach()
        chunk = max(1, BIAS_CHUNK // (b * h * length))
        if chunk >= length:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=masked, dropout_p=dropout_p)
        pieces = []
        for start, rows in zip(range(0, length, chunk), masked.split(chunk, dim=-2)):
            stop = start + rows.shape[-2]
            pieces.append(F.scaled_dot_product_attention(
                q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop],
                attn_mask=rows[..., :stop], dropout_p=dropout_p))
        return torch.cat(pieces, dim=2)
