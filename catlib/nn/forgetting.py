"""FoX's forgetting attention (Lin et al., "Forgetting Transformer: Softmax Attention with a
Forget Gate", ICLR 2025) as the attention of a CAT block (``kernel="fox"``).

Per head h a scalar forget gate at every position t, read from the block's input x_t
(the ODE state the attention is evaluated at):

    f_t,h = sigmoid(w_h . x_t + b_h),   D_h[i, j] = sum_{l = j+1..i} log f_l,h   (j <= i),

and score(i, j) = q_i . k_j / sqrt(d) + D_h[i, j], causal softmax. D is computed from the
cumulative sums c_t = sum_{l <= t} log f_l as c_i - c_j (0 on the diagonal exactly). There
is no other position information: no kernel, no rotary embedding, no fixed decay.

Initialisation, FoX's released "full" (data-dependent) gate: w ~ N(0, 0.02^2) per entry
(its ``initializer_range``), b = 0, so f = sigmoid(0) = 1/2 at a zero input and about a
decay of log 2 per token at the start; the special bias initialisation of its paper
(decay times between T_min and T_max) belongs to its data-independent gates only and is
not used. Difference of setting: FoX reads the gate from a normalised hidden state (its
block's pre-norm); the CAT block's attention reads the state itself, and so does the gate.

The gate depends on the state, so D is computed in every evaluation of the dynamics, not
once per solve: the plan holds only the length, and the gate's parameters (``fgate``,
not under ``kernels``) reach the adjoint directly as parameters of the dynamics. D is
``[B, h, T, T]``: at T = 5000, B = 1, h = 8 that is 0.8 GB in float32, as the content
kernel's bias. D depends on positions <= i only, so a prefix's logits do not depend on T.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bias import CausalBias
from .plan import Plan
from .qk_attention import QKAttention

# FoX's initialisation of its forget gate's projection (the model's initializer_range) and bias.
FOX_WEIGHT_STD, FOX_BIAS_INIT = 0.02, 0.0


@dataclass
class ForgetGatePlan(Plan):
    """The plan of :class:`ForgetGateAttention`: nothing but the length (its bias depends on
    the state, so it is built in every evaluation); no tensor carries a kernel's gradient."""

    def kernel_tensor(self) -> torch.Tensor:
        raise NotImplementedError("the forget gate's bias depends on the state: it has no plan tensor")

    def grad_tensors(self) -> tuple[torch.Tensor, ...]:
        return ()


class ForgetGateAttention(nn.Module):
    """Causal query-key attention with FoX's forget-gate bias (see the module docstring):
    ``x [B, T, D]`` -> ``[B, T, D]``.

    Parameters: ``qk`` (:class:`~catlib.nn.qk_attention.QKAttention`, no rotary) and
    ``fgate`` (Linear(D, h), D h + h numbers; init w ~ N(0, 0.02^2), b = 0).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.1,
                 dropout_in_dynamics: bool = False):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)   # no random right-hand side
        self.fgate = nn.Linear(d_model, n_heads)
        with torch.no_grad():
            self.fgate.weight.normal_(0.0, FOX_WEIGHT_STD)
            self.fgate.bias.fill_(FOX_BIAS_INIT)
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """log f_t,h ``[B, h, T]`` from ``x [B, T, D]``."""
        return F.logsigmoid(self.fgate(x)).transpose(1, 2)

    def bias(self, x: torch.Tensor) -> CausalBias:
        """D ``[B, h, T, T]``: c_i - c_j for j <= i (c the cumulative sum of log f over
        positions), -inf above the diagonal."""
        c = self.log_forget(x).cumsum(-1)                                        # [B, h, T]
        d = c[..., :, None] - c[..., None, :]                                    # [B, h, T, T]
        length = x.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        return CausalBias(d.masked_fill_(future, -math.inf))    # in place: one [B, h, T, T]

    def sobolev_penalty(self) -> torch.Tensor:
        return self.fgate.bias.new_zeros(())

    def plan(self, length: int, device=None, dtype=None) -> ForgetGatePlan:
        if length < 1:
            raise ValueError(f"sequence length T must be >= 1, got {length}")
        return ForgetGatePlan(length)

    def forward(self, x: torch.Tensor, plan: ForgetGatePlan | None = None) -> torch.Tensor:
        return self.drop(self.qk(x, self.bias(x)))
