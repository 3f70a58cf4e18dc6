"""The Transformer baseline trained beside CAT.

Published: Embedding -> nn.TransformerEncoder (K post-norm layers, ReLU, 4D
feed-forward, dropout 0.1), no mask and no positional encoding, then a Linear
to the vocabulary and dropout on the logits. Corrected: causal mask,
sinusoidal positions computed at any length, no dropout on the logits.

``baseline_positions="rope"`` or ``"alibi"`` (corrected baseline only): the
same layers written out with :class:`~catlib.nn.qk_attention.QKAttention`, nothing
added to the embeddings; positions enter through rotary q/k or the ALiBi score
bias, the two schemes a reader would pick for length extrapolation.
``baseline_loops`` = n applies each of those layers n times with the same weights:
n block evaluations per layer for the parameters of one, as CAT's RK4 step spends.
``baseline_loop_scale``: each of the n applications adds 1/n of each sublayer's update
(:meth:`QKEncoderLayer.forward`), the forward-Euler form of the loop, as CAT's fixed-step
solvers weigh their evaluations; off, each application adds the full update.
``baseline_block``: those layers post-norm with ReLU ("post-ln-relu", the default: the
published baseline's layer) or pre-norm with GELU and a final LayerNorm before the output
head ("pre-ln-gelu", nanoGPT's block, the one a reader would train today).
"""
from __future__ import annotations

import contextlib
import contextvars
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bias import alibi_values, toeplitz_bias
from .config import BASELINE_BLOCKS, CATConfig
from .qk_attention import QKAttention

# Set by :func:`explicit_encoder` for the calls inside its block (this thread or task only).
_EXPLICIT = contextvars.ContextVar("catlib_explicit_encoder", default=False)


def sinusoidal_positions(length: int, d_model: int, device=None, dtype=None) -> torch.Tensor:
    """The Transformer's sinusoidal encoding, ``[T, D]``, defined at every length."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32)
                     * (-math.log(10000.0) / d_model))
    enc = torch.zeros(length, d_model, device=device)
    enc[:, 0::2] = torch.sin(pos * freq)
    enc[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return enc.to(dtype or torch.float32)


class QKEncoderLayer(nn.Module):
    """``nn.TransformerEncoderLayer`` (post-norm, ReLU, 4D feed-forward) around a causal
    :class:`QKAttention`: ``x [B, T, D]``, optional score ``bias`` -> ``[B, T, D]``.

    x = norm1(x + drop(attn(x))); x = norm2(x + drop(ff(x))), with the same parameter
    count as the library layer.

    ``step`` = 1/n scales both sublayer updates: x = norm1(x + step * drop(attn(x)));
    x = norm2(x + step * drop(ff(x))). Applied n times with shared weights, this is forward
    Euler with n steps of size 1/n on depth t in [0, 1] for h' = u(h), u the layer's two
    sublayer updates (attention, then feed-forward: a split step), each step followed by the
    layer's post-norm LayerNorms, which map the state back onto the normalised states (a
    projected Euler step). The norms stay where the layer has them, so the parameters are
    the layer's own and n = 1 is the layer. The projection is exact where a norm's affine
    map is the identity (its initialisation); a learned gain and shift make the repeated
    norm a map of its own, so the n -> infinity limit is an ODE only as far as they stay
    near it. ``step`` = 1 (one application, or the unscaled loop) is the layer exactly: no
    multiplication is made, so the numbers are bitwise the unscaled layer's.

    ``block="pre-ln-gelu"`` (``CATConfig.baseline_block``): the layer a reader would train
    today (nanoGPT's), pre-norm with a GELU feed-forward (4D hidden), the same modules and
    parameter names (``norm1``, ``norm2`` normalise each sublayer's input):
    x = x + drop(attn(norm1(x))); x = x + drop(ff(norm2(x))). Its model adds a final
    LayerNorm before the output head (:class:`Baseline`'s ``ln_f``). ``step`` scales each
    update, x = x + step * drop(attn(norm1(x))) etc.: with n shared applications of size
    1/n this is forward Euler on depth for h' = u(h) itself, nothing projecting the state
    between steps (the residual stream is not normalised); ``step`` = 1 multiplies nothing.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, rotary: bool,
                 block: str = "post-ln-relu"):
        super().__init__()
        if block not in BASELINE_BLOCKS:
            raise ValueError(f"block must be one of {list(BASELINE_BLOCKS)}, got {block!r}")
        self.pre_norm = block == "pre-ln-gelu"
        self.self_attn = QKAttention(d_model, n_heads, dropout, rotary=rotary)
        act = nn.GELU() if self.pre_norm else nn.ReLU()
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), act, nn.Dropout(dropout),
                                nn.Linear(4 * d_model, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None,
                step: float = 1.0) -> torch.Tensor:
        if self.pre_norm:
            if step == 1.0:
                x = x + self.drop1(self.self_attn(self.norm1(x), bias))
                return x + self.drop2(self.ff(self.norm2(x)))
            x = x + step * self.drop1(self.self_attn(self.norm1(x), bias))
            return x + step * self.drop2(self.ff(self.norm2(x)))
        if step == 1.0:
            x = self.norm1(x + self.drop1(self.self_attn(x, bias)))
            return self.norm2(x + self.drop2(self.ff(x)))
        x = self.norm1(x + step * self.drop1(self.self_attn(x, bias)))
        return self.norm2(x + step * self.drop2(self.ff(x)))


class Baseline(nn.Module):
    """``forward(tokens [B, T]) -> (logits [B, T, V], zero penalty)``, as CAT's.

    ``config.baseline_positions`` picks the layers: "sinusoidal" (published or corrected,
    ``nn.TransformerEncoder`` in ``enc``) or "rope" / "alibi" (:class:`QKEncoderLayer`
    in ``layers``, no positions added to the embeddings).
    """

    def __init__(self, config: CATConfig):
        super().__init__()
        self.config = cfg = config.resolved()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        if cfg.baseline_positions == "sinusoidal":
            layer = nn.TransformerEncoderLayer(d, cfg.n_heads, 4 * d, dropout=cfg.dropout,
                                               batch_first=True)
            # Nested tensors only matter with padding masks; keeping them off avoids a warning.
            self.enc = nn.TransformerEncoder(layer, num_layers=cfg.blocks,
                                             enable_nested_tensor=False)
        else:
            rotary = cfg.baseline_positions == "rope"
            self.layers = nn.ModuleList(QKEncoderLayer(d, cfg.n_heads, cfg.dropout, rotary,
                                                       cfg.baseline_block)
                                        for _ in range(cfg.blocks))
            if cfg.baseline_block == "pre-ln-gelu":
                # nanoGPT's ln_f (no random init: the other weights are drawn as without it).
                self.ln_f = nn.LayerNorm(d)
        self.proj = nn.Linear(d, cfg.vocab_size)
        self.drop = nn.Dropout(cfg.dropout) if cfg.logit_dropout else nn.Identity()

    def forward(self, tokens: torch.Tensor, with_penalty: bool = True, *,
                penalty: bool | None = None):
        """``tokens [B, T]`` -> ``(logits [B, T, V], zero penalty)``. ``with_penalty`` (old
        name: ``penalty``) is accepted for CAT's signature; the baseline has no penalty."""
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must be [B, T] with T >= 1, got shape {tuple(tokens.shape)}")
        length = tokens.shape[1]
        x = self.embed(tokens)
        if self.config.baseline_positions != "sinusoidal":
            return self._forward_qk(x)
        if self.config.positional_encoding:
            x = x + sinusoidal_positions(length, x.shape[-1], x.device, x.dtype)
        if self.config.causal or _EXPLICIT.get():
            mask = None
            if self.config.causal and torch.is_grad_enabled():
                mask = nn.Transformer.generate_square_subsequent_mask(length, device=x.device,
                                                                      dtype=x.dtype)
            elif self.config.causal:        # evaluation: no [T, T] mask written per pass
                mask = causal_hint(length, x)
            h = _encoder_explicit(self.enc, x, mask, self.config.causal)
        else:
            h = self.enc(x)
        logits = self.drop(self.proj(h))
        return logits, logits.new_zeros(())

    def _forward_qk(self, x: torch.Tensor):
        """RoPE / ALiBi layers on embeddings ``x [B, T, D]``; the ALiBi bias is built once."""
        bias = None
        if self.config.baseline_positions == "alibi":
            # Already -inf above the diagonal: a CausalBias as it is (no masked copy per call),
            # which the fused CPU kernel takes; without grad a view (keys reversed).
            bias = toeplitz_bias(alibi_values(self.config.n_heads, x.shape[1], x.device, x.dtype))
        loops = self.config.baseline_loops
        step = 1.0 / loops if self.config.baseline_loop_scale else 1.0   # Euler step in depth
        for layer in self.layers:
            for _ in range(loops):   # weight-tied repeats (1: none)
                x = layer(x, bias, step)
        if self.config.baseline_block == "pre-ln-gelu":
            x = self.ln_f(x)
        logits = self.drop(self.proj(x))
        return logits, logits.new_zeros(())


def causal_hint(length: int, like: torch.Tensor) -> torch.Tensor:
    """The ``[T, T]`` attn_mask that ``F.multi_head_attention_forward`` requires beside
    ``is_causal=True`` and then drops (no padding mask, no weights asked: the causal kernel
    runs): NaN, a stride-0 view of one number, so that nothing of size T x T is written
    (at T = 5000 the causal mask took 40 % of the sinusoidal baseline's forward pass) and a
    read of it would show. Training keeps the mask it always built."""
    return like.new_full((1, 1), math.nan).expand(length, length)


def _encoder_explicit(enc: nn.TransformerEncoder, x: torch.Tensor, mask: torch.Tensor | None,
                      causal: bool) -> torch.Tensor:
    """``enc``'s layers on ``x [B, T, D]`` written out, the library's own path off its
    inference "fast path": post-norm, x = norm1(x + drop1(attn(x))), x = norm2(x +
    drop2(ff(x))), the attention through ``F.multi_head_attention_forward`` as
    ``nn.MultiheadAttention`` calls it. Causal: the fused causal kernel (the mask, required
    by the call, is dropped for ``is_causal``), where the fast path would apply the mask as
    a dense [T, T] pass. Nothing of the process is switched (no fast-path flag)."""
    for layer in enc.layers:
        mha = layer.self_attn
        seq = x.transpose(1, 0)                                              # [T, B, D]
        att = F.multi_head_attention_forward(
            seq, seq, seq, mha.embed_dim, mha.num_heads, mha.in_proj_weight, mha.in_proj_bias,
            mha.bias_k, mha.bias_v, mha.add_zero_attn, mha.dropout, mha.out_proj.weight,
            mha.out_proj.bias, training=mha.training, key_padding_mask=None,
            need_weights=False, attn_mask=mask, is_causal=causal)[0].transpose(1, 0)
        x = layer.norm1(x + layer.dropout1(att))
        ff = layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))
        x = layer.norm2(x + layer.dropout2(ff))
    return x if enc.norm is None else enc.norm(x)


@contextlib.contextmanager
def explicit_encoder():
    """Within the block, the sinusoidal baseline runs its layers written out
    (:func:`_encoder_explicit`) in every variant, e.g. so that a FLOP counter sees every
    operation (the fast path is one opaque kernel). Local to this thread or task."""
    token = _EXPLICIT.set(True)
    try:
        yield
    finally:
        _EXPLICIT.reset(token)


# Its old name (catlib.measure.cost imports it).
_without_mha_fastpath = explicit_encoder
