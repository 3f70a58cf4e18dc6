"""Build catlib models from checkpoints of the published script.

Sizes are inferred from the parameter shapes (the published script's parameter names):
D and V from ``embed.weight``, K from the block indices, h from the number of
kernels, n from ``coeffs``, Q from ``t_nodes``.
"""
from __future__ import annotations

import re

import torch

from .baselines import Baseline
from .config import CATConfig
from .model import CAT


def _indices(state_dict: dict, pattern: str) -> set[int]:
    return {int(m.group(1)) for key in state_dict if (m := re.match(pattern, key))}


def _require(state_dict: dict, key: str, what: str) -> torch.Tensor:
    if key not in state_dict:
        raise ValueError(f"not a published {what} checkpoint: key {key!r} is missing")
    return state_dict[key]


def load_published(state_dict: dict, basis: str = "fourier", **overrides) -> CAT:
    """A ``CAT`` holding the published model's weights (variant "published" unless overridden).

    The basis is not recorded in the checkpoint: pass the one it was trained with.
    """
    vocab, d_model = _require(state_dict, "embed.weight", "CAT").shape
    blocks = _indices(state_dict, r"blocks\.(\d+)\.")
    heads = _indices(state_dict, r"blocks\.0\.attn\.kernels\.(\d+)\.coeffs")
    if not blocks or not heads:
        raise ValueError("not a published CAT checkpoint: no blocks.<b>.attn.kernels.<j>.coeffs keys")
    n_freq = state_dict["blocks.0.attn.kernels.0.coeffs"].shape[0]
    quad = _require(state_dict, "blocks.0.attn.t_nodes", "CAT").shape[0]
    sizes = dict(vocab_size=vocab, d_model=d_model, n_heads=len(heads), n_freq=n_freq,
                 blocks=len(blocks), quad_nodes=quad, basis=basis)
    model = CAT(CATConfig(**{**sizes, **overrides}))
    model.load_state_dict(state_dict)
    return model


def load_published_baseline(state_dict: dict, n_heads: int = 8, **overrides) -> Baseline:
    """A ``Baseline`` holding the published baseline's weights.

    The head count is not visible in the shapes: pass it if it is not 8.
    """
    vocab, d_model = _require(state_dict, "embed.weight", "baseline").shape
    layers = _indices(state_dict, r"enc\.layers\.(\d+)\.")
    if not layers:
        raise ValueError("not a published baseline checkpoint: no enc.layers.<k> keys")
    sizes = dict(vocab_size=vocab, d_model=d_model, n_heads=n_heads, blocks=len(layers))
    model = Baseline(CATConfig(**{**sizes, **overrides}))
    model.load_state_dict(state_dict)
    return model
