"""What a model costs: its parameters and its forward FLOPs per token, counted.

FLOPs are counted by :class:`torch.utils.flop_counter.FlopCounterMode` on one forward
pass in evaluation mode (matrix products, as the counter defines them: 2 per
multiply-add), so that every ODE function evaluation of a CAT solve is counted as it
runs. The CPU's fused attention kernel is not in the counter's table; it is counted here
as the counter counts the other fused attention kernels (``sdpa_flop_count``: the full
T x T score and value products, masked entries included, as for every model).
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from ..nn.baselines import explicit_encoder


def parameter_count(model: nn.Module) -> int:
    """Number of parameters (shared ones counted once; buffers, such as ALiBi's fixed
    slopes, are not parameters)."""
    return sum(p.numel() for p in model.parameters())


def _cpu_sdpa_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def forward_flops_per_token(model: nn.Module, length: int, vocab_size: int | None = None) -> float:
    """Forward FLOPs per token of ``model`` on one sequence of ``length`` tokens.

    Eval mode, no grad, on the model's device; the baseline's fused encoder path is switched
    off for the count (it is one opaque kernel to the counter). The model's mode is restored.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    param = next(model.parameters())
    vocab = vocab_size or model.config.vocab_size
    tokens = torch.randint(0, vocab, (1, length), device=param.device)
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), explicit_encoder(), \
                FlopCounterMode(display=False, custom_mapping=mapping) as counter:
            model(tokens)
    finally:
        model.train(was_training)
    return counter.get_total_flops() / length
