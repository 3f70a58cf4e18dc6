"""Causal score biases of query-key attention: the :class:`CausalBias` type, ALiBi's slopes
and bias, and the one builder of a distance (Toeplitz) bias.

A bias B_h[i, j] is added to q_i . k_j / sqrt(d) before the causal softmax. Every bias
here is built causal (-inf above the diagonal) once per forward pass or ODE solve, and
every call of the attention reads views of it (:class:`CausalBias`), never a masked copy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class CausalBias:
    """A score bias that is already causal: ``masked [Bb, Hb, T, T]`` (Bb in {1, B}, Hb in
    {1, h}) whose entries above the diagonal (j > i) are -inf; those on and below it are
    the bias itself (finite, or -inf to forbid a pair).

    Made by a builder that writes -inf above the diagonal itself (:func:`causal_toeplitz`,
    :func:`alibi_bias`, the content kernel's plan): no second [h, T, T] copy. Nothing checks
    the mask per call: a finite entry above the diagonal would let a query read the future.
    Gradients flow to ``masked`` (and through it to whatever it was computed from); it
    is the tensor to hand to an adjoint as a parameter.

    ``keys_reversed``: column j' of ``masked`` holds key T - 1 - j' (a Toeplitz bias built
    without grad, :func:`toeplitz_bias`: then it is a strided view of 2T - 1 numbers,
    nothing of size T x T written); the attention reverses its keys and values to match.
    """

    masked: torch.Tensor
    keys_reversed: bool = False

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

    def ordered(self) -> torch.Tensor:
        """The bias with its keys in order, ``[Bb, Hb, T, T]`` (a copy when reversed)."""
        return self.masked.flip(-1) if self.keys_reversed else self.masked


def causal_toeplitz(values: torch.Tensor) -> torch.Tensor:
    """``values [h, T]`` at distances d = 0..T-1 -> ``[h, T, T]``: entry (i, j) is
    ``values[:, i - j]`` for j <= i and -inf above the diagonal (a causal bias as it is).

    In place after the gather: at T = 5000, h = 8 the bias alone is 0.8 GB in float32.
    Without grad (evaluation) the same entries are copied from a strided view instead of
    gathered through a [T, T] index: the same values, about twice as fast at long T.
    """
    h, length = values.shape
    if not (torch.is_grad_enabled() and values.requires_grad):
        # w[k] = values[T-1-k] for k < T, -inf after; row T-1-i of the view is w[T-1-i:],
        # whose entry j is values[i - j] (or -inf for j > i): flip the rows to order by i.
        w = torch.cat([values.flip(-1), values.new_full((h, length - 1), -math.inf)], dim=-1)
        return w.as_strided((h, length, length), (w.stride(0), 1, 1)).flip(-2)
    pos = torch.arange(length, device=values.device)
    distance = pos[:, None] - pos[None, :]
    return values[:, distance.clamp(min=0)].masked_fill_(distance < 0, -math.inf)


def toeplitz_bias(values: torch.Tensor) -> CausalBias:
    """``values [h, T]`` at distances d = 0..T-1 -> the :class:`CausalBias` of b_h(i - j).

    With grad (training): :func:`causal_toeplitz`, keys in order. Without (evaluation):
    keys reversed (``keys_reversed``), a view of ``w`` = [-inf x (T-1), values], whose entry
    (i, j') is ``w[i + j']`` = values[i - j] for key j = T - 1 - j' <= i and -inf beyond:
    no [h, T, T] tensor is written (at T = 5000, h = 8 writing it took longer than the
    attention that reads it, on one CPU thread).
    """
    h, length = values.shape
    if torch.is_grad_enabled() and values.requires_grad:
        return CausalBias(causal_toeplitz(values))
    w = torch.cat([values.new_full((h, length - 1), -math.inf), values], dim=-1)   # [h, 2T-1]
    return CausalBias(w.as_strided((1, h, length, length), (0, w.stride(0), 1, 1)),
                      keys_reversed=True)


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


@lru_cache(maxsize=None)
@torch.inference_mode(False)
def _slopes_on(n_heads: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The slopes ``[h]`` on ``device`` in ``dtype``, made once per (h, device, dtype): no
    host -> device copy per forward pass. Inference mode off: a tensor made under it could
    not serve a training pass later."""
    return torch.tensor(alibi_slopes(n_heads), device=device, dtype=dtype)


def alibi_values(n_heads: int, length: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """ALiBi's bias at distances d = 0..T-1, ``[h, T]``: -slope_h * d."""
    slopes = _slopes_on(n_heads, torch.device(device or "cpu"), dtype)
    distance = torch.arange(length, device=device).to(dtype)                     # d = 0..T-1
    return -slopes[:, None] * distance[None, :]


def alibi_bias(n_heads: int, length: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """ALiBi score bias ``[h, T, T]``: -slope_h * (i - j) for j <= i, -inf for j > i."""
    return causal_toeplitz(alibi_values(n_heads, length, device, dtype))
