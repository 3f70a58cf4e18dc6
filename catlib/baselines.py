"""The Transformer baseline trained beside CAT.

Published: Embedding -> nn.TransformerEncoder (K post-norm layers, ReLU, 4D
feed-forward, dropout 0.1), no mask and no positional encoding, then a Linear
to the vocabulary and dropout on the logits. Corrected: causal mask,
sinusoidal positions computed at any length, no dropout on the logits.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .config import CATConfig


def sinusoidal_positions(length: int, d_model: int, device=None, dtype=None) -> torch.Tensor:
    """The Transformer's sinusoidal encoding, ``[T, D]``, defined at every length."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32)
                     * (-math.log(10000.0) / d_model))
    enc = torch.zeros(length, d_model, device=device)
    enc[:, 0::2] = torch.sin(pos * freq)
    enc[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return enc.to(dtype or torch.float32)


class Baseline(nn.Module):
    """``forward(tokens [B, T]) -> (logits [B, T, V], zero penalty)``, as CAT's."""

    def __init__(self, config: CATConfig):
        super().__init__()
        self.config = cfg = config.resolved()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        layer = nn.TransformerEncoderLayer(d, cfg.n_heads, 4 * d, dropout=cfg.dropout,
                                           batch_first=True)
        # Nested tensors only matter with padding masks; keeping them off avoids a warning.
        self.enc = nn.TransformerEncoder(layer, num_layers=cfg.blocks, enable_nested_tensor=False)
        self.proj = nn.Linear(d, cfg.vocab_size)
        self.drop = nn.Dropout(cfg.dropout) if cfg.logit_dropout else nn.Identity()

    def forward(self, tokens: torch.Tensor, penalty: bool = True):
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must be [B, T] with T >= 1, got shape {tuple(tokens.shape)}")
        length = tokens.shape[1]
        x = self.embed(tokens)
        if self.config.positional_encoding:
            x = x + sinusoidal_positions(length, x.shape[-1], x.device, x.dtype)
        mask = None
        if self.config.causal:
            mask = nn.Transformer.generate_square_subsequent_mask(length, device=x.device, dtype=x.dtype)
        h = self.enc(x, mask=mask, is_causal=self.config.causal)
        logits = self.drop(self.proj(h))
        return logits, logits.new_zeros(())
