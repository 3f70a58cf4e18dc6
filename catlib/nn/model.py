"""CAT: embedding, K continuous-depth blocks, projection to the vocabulary.

Each block is an ODE dh/dtau = f(h) on tau in [0, 1] with
f(h) = FF(LayerNorm(h + attention(h))), FF = Linear(D, 4D), GELU, Linear(4D, D).
Module and parameter names follow the published script, so its checkpoints load as they are.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn as nn

from .attention import ContinuousAttention
from .config import CATConfig
from .decay_prior import DecayPriorAttention
from .forgetting import ForgetGateAttention
from .kernel_choice import KERNELS
from .learned_bias import DistanceBiasAttention, FireAttention, KerpleLogKernel
from .plan import Plan
from .relative import RelativeAttention
from .reused_plans import plan_for
from .content import ContentAttention
from .solvers import CountedDynamics, integrate


def make_attention(cfg: CATConfig) -> nn.Module:
    """The attention of one CAT block, chosen by ``cfg.kernel`` (the config is resolved first).

    "absolute": the published/corrected :class:`~catlib.nn.attention.ContinuousAttention`;
    "relative": :class:`~catlib.nn.relative.RelativeAttention`; "content":
    :class:`~catlib.nn.content.ContentAttention`; "alibi-prior", "kerple-prior":
    :class:`~catlib.nn.decay_prior.DecayPriorAttention`; the learned biases of
    :data:`~catlib.nn.kernel_choice.LEARNED_BIASES` in the same block: "alibi-buckets" (the
    ALiBi prior with learned buckets as its residual), "kerple-log"
    (:class:`~catlib.nn.learned_bias.KerpleLogKernel`), "fire"
    (:class:`~catlib.nn.learned_bias.FireAttention`), "fox"
    (:class:`~catlib.nn.forgetting.ForgetGateAttention`).
    """
    cfg = cfg.resolved()
    d = cfg.d_model
    if cfg.kernel == "absolute":
        return ContinuousAttention(
            d, cfg.n_heads, cfg.n_freq, cfg.basis, cfg.quad_nodes, cfg.dropout,
            causal=cfg.causal, normalised_integral=cfg.normalised_integral,
            half_range_cosine=cfg.half_range_cosine, penalty=cfg.penalty,
            dropout_in_dynamics=cfg.dropout_in_dynamics)
    common = dict(kernel_scale=cfg.kernel_scale, kernel_horizon=cfg.kernel_horizon,
                  half_range_cosine=cfg.half_range_cosine, penalty=cfg.penalty,
                  dropout_in_dynamics=cfg.dropout_in_dynamics)
    if cfg.kernel == "relative":
        return RelativeAttention(d, cfg.n_heads, cfg.n_freq, cfg.basis, cfg.quad_nodes,
                                 cfg.dropout, **common)
    if cfg.kernel == "content":
        return ContentAttention(d, cfg.n_heads, cfg.n_freq, cfg.basis, cfg.dropout, **common)
    if cfg.kernel in ("alibi-prior", "kerple-prior", "alibi-buckets"):
        return DecayPriorAttention(d, cfg.n_heads, cfg.n_freq, cfg.kernel.split("-")[0],
                                   cfg.train_length, cfg.kernel_scale, cfg.kernel_residual,
                                   cfg.penalty, cfg.dropout, cfg.dropout_in_dynamics,
                                   far_heads=cfg.far_heads,
                                   residual_kind="buckets" if cfg.kernel == "alibi-buckets"
                                   else "spectral")
    if cfg.kernel == "kerple-log":
        return DistanceBiasAttention(d, cfg.n_heads, KerpleLogKernel(cfg.n_heads), cfg.dropout,
                                     cfg.dropout_in_dynamics)
    if cfg.kernel == "fire":
        return FireAttention(d, cfg.n_heads, cfg.train_length, cfg.dropout,
                             cfg.dropout_in_dynamics)
    if cfg.kernel == "fox":
        return ForgetGateAttention(d, cfg.n_heads, cfg.dropout, cfg.dropout_in_dynamics)
    raise ValueError(f"kernel must be one of {list(KERNELS)}, got {cfg.kernel!r}")


class Block(nn.Module):
    """One CAT block (the published ``ODEFunc``): the right-hand side of the depth ODE."""

    def __init__(self, cfg: CATConfig):
        super().__init__()
        d = cfg.d_model
        self.attn = make_attention(cfg)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.attention_residual = cfg.attention_residual

    def rhs(self, h: torch.Tensor, plan: Plan | None = None) -> torch.Tensor:
        """f(h) for ``h [B, T, D]``: the published FF(LN(h + a)), a = attn(h), where what
        attention reads reaches the state only through the feed-forward network; with
        ``attention_residual``, a + FF(LN(h + a)), so that it is also added directly, as a
        Transformer layer's residual path adds it."""
        a = self.attn(h, plan)
        f = self.ff(self.norm(h + a))
        return f + a if self.attention_residual else f


class _PlannedDynamics(nn.Module):
    """A block's dynamics with the attention plan of one solve bound in (the ODE ``func``)."""

    def __init__(self, block: Block, plan: Plan):
        super().__init__()
        self.block, self.plan = block, plan

    def forward(self, t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.block.rhs(h, self.plan)

    def adjoint_params(self) -> tuple[torch.Tensor, ...]:
        # Kernel coefficients act only through the plan: the adjoint takes the
        # plan's gradient, and autograd carries it back to the coefficients once.
        own = [p for name, p in self.block.named_parameters() if ".kernels." not in name]
        return tuple(own) + self.plan.grad_tensors()


class CAT(nn.Module):
    """Continuous Attention Transformer.

    ``forward(tokens [B, T] int64, with_penalty=True)`` returns ``(logits [B, T, V],
    penalty_value)``, penalty_value = sob_lambda * the summed Sobolev penalty of all heads
    (a zero tensor when ``with_penalty`` is false; ``penalty=`` is its old name). ``nfe`` holds the function evaluations of the last
    pass, summed over blocks: ``{"forward": int, "backward": int}``; the
    backward count grows while ``loss.backward()`` runs the adjoint.
    """

    def __init__(self, config: CATConfig):
        super().__init__()
        self.config = cfg = config.resolved()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
        self.proj = nn.Linear(cfg.d_model, cfg.vocab_size)
        # Corrected variant: dropout after each block instead of inside its dynamics.
        self.block_dropout = (nn.Identity() if cfg.dropout_in_dynamics
                              else nn.Dropout(cfg.dropout))
        self._counters: list = []

    @property
    def nfe(self) -> dict[str, int]:
        return {"forward": sum(c.nfe_forward for c in self._counters),
                "backward": sum(c.nfe_backward for c in self._counters)}

    def solve_options(self) -> dict:
        cfg = self.config
        return dict(rtol=cfg.rtol, atol=cfg.atol, adjoint=cfg.adjoint and torch.is_grad_enabled(),
                    adjoint_seminorm=cfg.adjoint_seminorm, steps=cfg.solver_steps, max_steps=cfg.max_steps)

    def forward(self, tokens: torch.Tensor, with_penalty: bool = True, *,
                penalty: bool | None = None):
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must be [B, T] with T >= 1, got shape {tuple(tokens.shape)}")
        h = self.embed(tokens)
        self._counters = []
        options = self.solve_options()
        for block in self.blocks:
            # Built once per pass; in an evaluation's scope, once per length (reused_plans).
            plan = plan_for(block.attn, tokens.shape[1], h.device, h.dtype)
            dynamics = _PlannedDynamics(block, plan)
            counter = CountedDynamics(dynamics)
            self._counters.append(counter)   # before the solve: a capped solve still reports its NFE
            h, _ = integrate(counter, h, self.config.solver,
                             adjoint_params=dynamics.adjoint_params(), **options)
            h = self.block_dropout(h)
        logits = self.proj(h)
        if penalty is not None:   # the flag's old name
            with_penalty = penalty
        if not with_penalty:
            return logits, logits.new_zeros(())
        return logits, self.config.sob_lambda * self.sobolev_penalty()

    def sobolev_penalty(self) -> torch.Tensor:
        """Sum over blocks and heads of the kernels' Sobolev penalties (without sob_lambda)."""
        return sum(block.attn.sobolev_penalty() for block in self.blocks)


@contextlib.contextmanager
def solved_with(model: CAT, solver: str | None = None, steps: int | None = None):
    """``model`` (a :class:`CAT`) integrating its depth ODE with another ``solver`` or step
    count for the calls inside the block, and no drawn training step counts; the weights
    are untouched and the config is restored on exit (``CAT.forward`` reads ``model.config``
    on every call)."""
    config = model.config
    change = {"train_solver_steps": None}
    if solver is not None:
        change["solver"] = solver
    if steps is not None:
        change["solver_steps"] = steps
    model.config = dataclasses.replace(config, **change)
    try:
        yield model
    finally:
        model.config = config
