"""The optimiser of every trained model: AdamW over its parameter groups, defined only here.

Training (:class:`catlib.training.loop.SideBySide`, also under DDP, which wraps the same models
and optimisers) and the audit build their optimisers with :func:`make_optimizer`.
``decay_on`` (``TrainConfig.weight_decay_on``) says which tensors AdamW's weight decay
(its default 0.01, as the published script) acts on:

- ``"all"``: every parameter, one group in ``model.parameters()`` order: the published
  optimiser exactly.
- ``"matrices"``: only the weight matrices of linear maps and embeddings
  (:func:`decays`); biases, LayerNorms, the kernels' spectral coefficients and scales and
  the priors' parameters (KERPLE's r1, r2) are not decayed, so that the Sobolev penalty is
  the only regulariser on the kernel (the usual practice, e.g. nanoGPT's).
- ``None``: follows the model's variant (:data:`DECAY_BY_VARIANT`): the published model
  ``"all"``, the corrected (causal) model ``"matrices"``.
"""
from __future__ import annotations

import torch
import torch.nn as nn

WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, which the published script uses
DECAY_ON = ("all", "matrices")
DECAY_BY_VARIANT = {"published": "all", "causal": "matrices"}
# Weight matrices by the module that holds them: (module type, parameter name).
_MATRICES = ((nn.Linear, "weight"), (nn.Embedding, "weight"),
             (nn.MultiheadAttention, "in_proj_weight"), (nn.MultiheadAttention, "q_proj_weight"),
             (nn.MultiheadAttention, "k_proj_weight"), (nn.MultiheadAttention, "v_proj_weight"))


def resolve_decay_on(model: torch.nn.Module, decay_on: str | None) -> str:
    """``decay_on``, or when None the choice of ``model.config.variant``."""
    if decay_on is None:
        config = getattr(model, "config", None)
        if config is None:
            raise ValueError("weight_decay_on=None follows the model's variant, but the model "
                             "has no .config; pass 'all' or 'matrices'")
        decay_on = DECAY_BY_VARIANT[config.variant]
    if decay_on not in DECAY_ON:
        raise ValueError(f"weight_decay_on must be one of {list(DECAY_ON)} or None, "
                         f"got {decay_on!r}")
    return decay_on


def decays(model: torch.nn.Module) -> set[int]:
    """The ``id`` of every parameter of ``model`` that is a weight matrix (:data:`_MATRICES`:
    ``nn.Linear`` and ``nn.Embedding`` weights, ``nn.MultiheadAttention``'s input
    projections; its ``out_proj`` is an ``nn.Linear``)."""
    found = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if any(isinstance(module, kind) and name == pname for kind, pname in _MATRICES):
                found.add(id(p))
    return found


def param_groups(model: torch.nn.Module, weight_decay: float = WEIGHT_DECAY,
                 decay_on: str | None = "all") -> list[dict]:
    """The parameter groups of ``model``'s optimiser: ``[{"params": [...], "weight_decay"}]``.

    ``"all"``: one group holding every parameter in ``model.parameters()`` order (the
    published optimiser exactly: the order fixes AdamW's state layout and so its
    checkpoints). ``"matrices"``: the weight matrices with ``weight_decay``, then the other
    parameters with none, each group in ``model.parameters()`` order (an empty group is
    left out). ``None``: ``model.config.variant`` decides (:func:`resolve_decay_on`).
    """
    if resolve_decay_on(model, decay_on) == "all":
        return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    matrices = decays(model)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if id(p) in matrices], "weight_decay": weight_decay},
              {"params": [p for p in params if id(p) not in matrices], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def make_optimizer(model: torch.nn.Module, lr: float,
                   decay_on: str | None = "all") -> torch.optim.AdamW:
    """AdamW at learning rate ``lr`` over :func:`param_groups` of ``model``."""
    return torch.optim.AdamW(param_groups(model, decay_on=decay_on), lr=lr)
