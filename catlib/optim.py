"""The optimiser of every trained model: AdamW over its parameter groups, defined only here.

Training (:class:`catlib.train.SideBySide`, also under DDP, which wraps the same models
and optimisers) and the audit build their optimisers with :func:`make_optimizer`. Today
there is one group, every parameter with AdamW's default weight decay (0.01), as the
published script; :func:`param_groups` is the one place where a later option may put the
non-matrix tensors (biases, norms, kernel coefficients) in a group without decay.
"""
from __future__ import annotations

import torch

WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, which the published script uses


def param_groups(model: torch.nn.Module, weight_decay: float = WEIGHT_DECAY) -> list[dict]:
    """The parameter groups of ``model``'s optimiser: ``[{"params": [...], "weight_decay"}]``.

    One group holding every parameter in ``model.parameters()`` order (the published
    optimiser exactly: the order fixes AdamW's state layout and so its checkpoints).
    """
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """AdamW at learning rate ``lr`` over :func:`param_groups` of ``model``."""
    return torch.optim.AdamW(param_groups(model), lr=lr)
