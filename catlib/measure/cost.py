"""What a model costs: its parameters and its FLOPs, counted by one rule.

The counting rule, the same for every model, forward or training, on every device:
:class:`torch.utils.flop_counter.FlopCounterMode` counts the matrix products (2 FLOPs per
multiply-add) of the computation run inside :func:`counting`, where attention runs
PyTorch's MATH backend of ``scaled_dot_product_attention`` (the products written out, as
the CATs' attention with a learned bias always runs: :mod:`catlib.nn.qk_attention`) and the
baseline's encoder runs its layers written out (:func:`catlib.nn.baselines.explicit_encoder`).
The fused kernels a run may take instead (the CPU's flash kernel, CUDA's flash and
memory-efficient kernels) compute the same products, but the counter knows the backward
op of none of the CPU's and would count it as zero: counted that way, a baseline's training
step lost its attention backward and the compute-matched baselines trained about 10 % more
than the CAT they were matched to (issue 42). Under the rule the training step of every
model, CAT or baseline, one block or several, is 3 x its forward FLOPs within a few
percent: the backward pass computes two products (the input's and the weight's gradient)
per forward product.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..nn.baselines import explicit_encoder


def parameter_count(model: nn.Module) -> int:
    """Number of parameters (shared ones counted once; buffers, such as ALiBi's fixed
    slopes, are not parameters)."""
    return sum(p.numel() for p in model.parameters())


@contextlib.contextmanager
def counting():
    """The counting rule (module docstring): yields a ``FlopCounterMode`` counting what runs
    in the block, attention on the MATH backend, the baseline's encoder written out."""
    with explicit_encoder(), sdpa_kernel(SDPBackend.MATH), \
            FlopCounterMode(display=False) as counter:
        yield counter


def forward_flops_per_token(model: nn.Module, length: int, vocab_size: int | None = None) -> float:
    """Forward FLOPs per token of ``model`` on one sequence of ``length`` tokens.

    Eval mode, no grad, on the model's device, counted by the module's rule
    (:func:`counting`). The model's mode is restored.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    param = next(model.parameters())
    vocab = vocab_size or model.config.vocab_size
    tokens = torch.randint(0, vocab, (1, length), device=param.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), counting() as counter:
            model(tokens)
    finally:
        model.train(was_training)
    return counter.get_total_flops() / length
