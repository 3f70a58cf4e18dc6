"""Learned relative-position biases of the literature, each the score bias of the CAT
block's query-key attention in place of CAT's kernel (``kernel=`` in :class:`CATConfig`):

    score(i, j) = q_i . k_j / sqrt(d) + b_h(i, j),   causal softmax over j <= i,

the block, its solver and everything else unchanged. FoX's data-dependent forget gate
(``kernel="fox"``) is in :mod:`.forgetting`. Here, for d = i - j >= 0:

- ``"alibi-buckets"``: ALiBi's bias plus learned buckets, b_h(d) = -m_h d + a_h,k(d) for
  d < T_train - 1 and -m_h d beyond: the spectral residual of :mod:`.decay_prior` replaced
  by piecewise-constant values (:class:`BucketResidual`; the module is that of the
  decay prior, :class:`~catlib.nn.decay_prior.DecayPriorKernel`, with ``residual="buckets"``);
- ``"kerple-log"``: KERPLE's logarithmic bias (Chi et al., NeurIPS 2022) as its paper
  defines and initialises it, b_h(d) = -r1_h log(1 + r2_h d), no residual
  (:class:`KerpleLogKernel`);
- ``"fire"``: FIRE (Li et al., ICLR 2024), b(i, j) = f_theta(psi(i - j) / psi(max(L, i))),
  psi(x) = log(c x + 1), f_theta an MLP 1 -> 32 -> h shared by the layer's heads, c and L
  learned (:class:`FireKernel`).

The first two are functions of d alone (one Toeplitz bias per plan, as the decay prior's);
FIRE's rows i > L are normalised by the query's own psi(i). All three depend on (i, j)
only, never on the length T, so the logits of a prefix do not change when the input grows.
Their parameters live under ``kernels``: the adjoint reaches them through the plan.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bias import toeplitz_bias
from .distance_map import graded_bins
from .plan import GeometryCache, ScoreBiasPlan, cache_key, plan_target
from .qk_attention import QKAttention

# KERPLE's released code: r1 ~ U(0, 2), r2 ~ U(0, 1) per head, both kept >= 0.01 by a
# projection before every forward pass.
KERPLE_R1_INIT, KERPLE_R2_INIT, KERPLE_EPS = 2.0, 1.0, 1e-2
# FIRE's paper (its listing): MLP width 32 with ReLU, c = 0.1, L = |multiplier * L0| with
# the multiplier learned from 1, and 1e-6 added to the normaliser. L0 is 512 there, a
# quarter of the 2048 tokens its language models train on; here L0 = FIRE_L_SHARE * T_train,
# so that the rows i >= L0 (three quarters of a training window) are normalised by their
# own psi(i) in training, as in the paper, and not only beyond the training length.
FIRE_WIDTH, FIRE_C_INIT, FIRE_L_SHARE, FIRE_EPS = 32, 0.1, 0.25, 1e-6
# FIRE's MLP hidden values computed at once (rows of the bias in chunks), without grad.
FIRE_CHUNK = 1 << 22


def bucket_starts(n_buckets: int, scale: float, train_length: int) -> tuple[int, ...]:
    """The first distance of each of the ``n_buckets`` buckets on 0 <= d < T_train - 1:
    the graded bins of :func:`~catlib.nn.distance_map.graded_bins` with n + 1 bins up to
    the horizon T_train - 1 (u = log(1 + d / c) / log(1 + (T_train - 1) / c), the decay
    prior's coordinate), less the last (d >= about T_train - 1, where the residual is 0).
    Single distances where an equal step in u spans less than a token, log-spaced beyond
    (T5's exact-then-logarithmic buckets, in the residual's own coordinate): with c = 4,
    T_train = 128, n = 16 they start at 0, 1, 2, 3, 5, 7, 10, 14, 18, 24, 31, 40, 50, 64,
    80, 101. Where n exceeds the distances (n > T_train - 1) the last buckets are empty."""
    starts = graded_bins(n_buckets + 1, float(scale), float(train_length - 1))[0]
    return tuple(starts[:n_buckets])


class BucketResidual(nn.Module):
    """Piecewise-constant residual r_h(d) = a_h,k(d) on log-spaced buckets of distance,
    exactly 0 for d >= T_train - 1 (the support of the spectral residual it replaces).

    ``values [h, n]`` (init 0: the model starts as its prior), n = ``n_buckets`` (the
    config's n_freq, as many numbers per head as the spectral residual's coefficients).
    Bucket k holds ``starts[k] <= d < starts[k + 1]`` (:func:`bucket_starts`), the last up
    to T_train - 2. No smoothness penalty (T5's buckets have none).
    """

    def __init__(self, n_heads: int, n_buckets: int, train_length: int, scale: float = 4.0):
        super().__init__()
        if isinstance(n_buckets, bool) or not isinstance(n_buckets, int) or n_buckets < 1:
            raise ValueError(f"n_buckets must be an integer >= 1, got {n_buckets!r}")
        self.n_buckets, self.train_length, self.scale = n_buckets, train_length, float(scale)
        self.starts = bucket_starts(n_buckets, self.scale, train_length)
        self.values = nn.Parameter(torch.zeros(n_heads, n_buckets))
        self._cache = GeometryCache()

    def bucket(self, d: torch.Tensor) -> torch.Tensor:
        """The bucket index ``[L]`` (int64) of distances ``d [L]`` (float or int; those
        >= T_train - 1 get the last bucket's index, and 0 from :meth:`forward`)."""
        starts = torch.as_tensor(self.starts, device=d.device, dtype=d.dtype)
        return (torch.searchsorted(starts, d.contiguous(), right=True) - 1).clamp(min=0)

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        """r_h(d) ``[h, L]`` at distances ``d [L]``: 0 itself (masked) for d >= T_train - 1."""
        beyond = d >= self.train_length - 1
        return self.values.to(d.dtype)[:, self.bucket(d)].masked_fill(beyond, 0.0)

    def at_distances(self, length: int, device, dtype) -> torch.Tensor:
        """:meth:`forward` at d = 0..T-1, ``[h, T]``, with the bucket indices and the mask
        (no parameter) kept per (T, device)."""
        geo = self._cache.get(cache_key(length, device, None), lambda: self._geometry(length, device))
        return self.values.to(dtype)[:, geo["bucket"]].masked_fill(geo["beyond"], 0.0)

    def _geometry(self, length: int, device) -> dict:
        d = torch.arange(length, device=device)
        return {"bucket": self.bucket(d), "beyond": d >= self.train_length - 1}

    def sobolev_penalty(self) -> torch.Tensor:
        return self.values.new_zeros(())

    def extra_repr(self) -> str:
        return f"buckets={self.n_buckets}, starts={self.starts}, train_length={self.train_length}"


def _at_least(p: torch.Tensor, eps: float) -> torch.Tensor:
    """max(p, eps) in value, the identity in gradient: KERPLE's projection onto p >= eps
    without writing into the parameter during a forward pass (a parameter pushed below eps
    keeps its gradient, where a plain clamp would freeze it)."""
    return p + (p.clamp(min=eps) - p).detach()


class KerpleLogKernel(nn.Module):
    """KERPLE-log's bias b_h(d) = -r1_h log(1 + r2_h d), ``[h, L]`` at distances ``d [L]``.

    Parameters ``r1 [h]``, ``r2 [h]``, drawn as KERPLE's released code draws them: r1 ~
    U(0, 2), r2 ~ U(0, 1) (clamped to >= 0.01), from torch's generator at construction.
    Positive as in the paper: the value used is max(r, 0.01) (:func:`_at_least`). Unlike
    the decay prior's KERPLE (``kernel="kerple-prior"``: r1 = 1 + softplus > 1, r1 spread
    from 8 to 1.25 over the heads, r2 = 1), this is the paper's parameterisation.
    """

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.r1 = nn.Parameter((KERPLE_R1_INIT * torch.rand(n_heads)).clamp(min=KERPLE_EPS))
        self.r2 = nn.Parameter((KERPLE_R2_INIT * torch.rand(n_heads)).clamp(min=KERPLE_EPS))

    def coefficients(self, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(r1, r2) ``[h]`` each as used, >= 0.01."""
        return (_at_least(self.r1.to(dtype), KERPLE_EPS), _at_least(self.r2.to(dtype), KERPLE_EPS))

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        r1, r2 = self.coefficients(d.dtype)
        return -r1[:, None] * torch.log1p(r2[:, None] * d[None, :])

    def at_distances(self, length: int, device, dtype) -> torch.Tensor:
        return self(torch.arange(length, device=device).to(dtype))

    def sobolev_penalty(self) -> torch.Tensor:
        return self.r1.new_zeros(())


class DistanceBiasAttention(nn.Module):
    """Query-key attention with a learned bias of distance b_h(i - j) (``kernels``, a
    module with ``at_distances(T, device, dtype) -> [h, T]`` and ``sobolev_penalty()``):
    ``x [B, T, D]`` -> ``[B, T, D]``. The bias ``[h, T, T]`` is one causal Toeplitz plan per
    solve, as :class:`~catlib.nn.decay_prior.DecayPriorAttention`'s."""

    def __init__(self, d_model: int, n_heads: int, kernels: nn.Module, dropout: float = 0.1,
                 dropout_in_dynamics: bool = False):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)   # no random right-hand side
        self.kernels = kernels
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()

    def sobolev_penalty(self) -> torch.Tensor:
        return self.kernels.sobolev_penalty()

    def plan(self, length: int, device=None, dtype=None) -> ScoreBiasPlan:
        device, dtype = plan_target(self.qk, length, device, dtype)
        bias = toeplitz_bias(self.kernels.at_distances(length, device, dtype))
        return ScoreBiasPlan(length, bias.masked, None, bias.keys_reversed)

    def forward(self, x: torch.Tensor, plan: ScoreBiasPlan | None = None) -> torch.Tensor:
        if plan is None:
            plan = self.plan(x.shape[1], x.device, x.dtype)
        return self.drop(self.qk(x, plan.causal))


class FireKernel(nn.Module):
    """FIRE's bias b_h(i, j) = f_theta(t_ij)_h, t_ij = psi(i - j) / (psi(max(L, i)) + 1e-6),
    psi(x) = log(|c| x + 1), for queries i and keys j <= i (0-based positions).

    Parameters: ``mlp`` (Linear(1, 32), ReLU, Linear(32, h); PyTorch's default init, as the
    paper's listing), ``c`` (init 0.1) and ``L_multiplier`` (init 1), L = |L_multiplier| * L0
    with L0 = ``FIRE_L_SHARE`` * T_train (see :data:`FIRE_L_SHARE`; not a parameter).
    The normaliser is the query's: row i reads psi(max(L, i)), so a row of the bias is the
    same at every length T. The MLP's output bias ``mlp.2.bias`` adds a constant to a whole
    row of a head's scores, which the softmax ignores: its gradient is 0 (kept, as the
    paper's MLP has it; it counts in the parameters).
    """

    def __init__(self, n_heads: int, train_length: int, width: int = FIRE_WIDTH):
        super().__init__()
        if not (isinstance(train_length, int) and train_length >= 2):
            raise ValueError(f"train_length must be an integer >= 2, got {train_length!r}")
        self.n_heads, self.train_length = n_heads, train_length
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, n_heads))
        self.c = nn.Parameter(torch.tensor(FIRE_C_INIT))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.init_L = FIRE_L_SHARE * train_length

    def threshold(self, dtype=None) -> torch.Tensor:
        """L = |L_multiplier| * L0, a 0-d tensor."""
        return (self.L_multiplier.to(dtype) * self.init_L).abs()

    def positions(self, rows: torch.Tensor, keys: int, dtype) -> torch.Tensor:
        """t_ij ``[R, keys]`` for query positions ``rows [R]`` (int) and keys 0..keys-1
        (entries j > i are those of |i - j|: masked by the caller)."""
        c = self.c.to(dtype).abs()
        i = rows.to(dtype)
        j = torch.arange(keys, device=rows.device, dtype=dtype)
        near = torch.log1p(c * (i[:, None] - j[None, :]).abs())                    # psi(i - j)
        norm = torch.log1p(c * torch.maximum(i, self.threshold(dtype))) + FIRE_EPS  # psi(max(L, i))
        return near / norm[:, None]

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """f_theta(t) ``[h, *S]`` at ``t`` of any shape S."""
        return self.mlp(t[..., None]).movedim(-1, 0)

    def pieces(self, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """f_theta as the piecewise-linear function it is (one input, ReLU): ``(knots [w],
        slope [h, w + 1], offset [h, w + 1])``, f(t) = slope[:, m] t + offset[:, m] for
        knots[m - 1] < t <= knots[m]. The knots are the hidden units' kinks -b1_k / w1_k,
        sorted (inf for a unit with w1_k = 0, whose value is constant)."""
        w1, b1 = self.mlp[0].weight[:, 0].to(dtype), self.mlp[0].bias.to(dtype)
        w2, b2 = self.mlp[2].weight.to(dtype), self.mlp[2].bias.to(dtype)
        knots = torch.where(w1 != 0, -b1 / w1, torch.full_like(w1, math.inf)).sort().values
        knots = knots.detach()
        lo = torch.cat([knots.new_full((1,), -math.inf), knots])      # segment m: (lo, hi]
        hi = torch.cat([knots, knots.new_full((1,), math.inf)])
        inside = torch.where(torch.isfinite(lo) & torch.isfinite(hi), (lo + hi) / 2,
                             torch.where(torch.isfinite(hi), hi - 1,
                                         torch.where(torch.isfinite(lo), lo + 1, lo.new_zeros(()))))
        active = (w1 * inside[:, None] + b1 > 0).to(dtype)             # [w + 1, width]
        return knots, w2 @ (active * w1).T, w2 @ (active * b1).T + b2[:, None]

    def piecewise(self, t: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` from :meth:`pieces`, ``[h, *S]``: the same function (to rounding)
        at a search of 32 knots and one product per head and point instead of 32 hidden
        values per point; what :meth:`bias` uses without grad (evaluation)."""
        knots, slope, offset = self.pieces(t.dtype)
        flat = t.reshape(-1)
        rows = torch.stack([slope.T, offset.T], 1).index_select(0, torch.searchsorted(knots, flat))
        value = torch.addcmul(rows[:, 1], rows[:, 0], flat[:, None])         # [|S|, h]
        return value.reshape(*t.shape, -1).movedim(-1, 0)                    # a view, [h, *S]

    def bias(self, length: int, device, dtype) -> torch.Tensor:
        """The causal bias ``[h, T, T]``: b(i, j) for j <= i, -inf above the diagonal. Rows
        in chunks of about ``FIRE_CHUNK`` hidden values; with grad, one piece per chunk and
        the MLP itself, without (evaluation) its pieces (:meth:`piecewise`, 8 times faster
        at T = 5000 on a CPU)."""
        rows = torch.arange(length, device=device)
        step = max(1, FIRE_CHUNK // (self.mlp[0].out_features * length))
        grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        bias = None if grad else torch.empty(self.n_heads, length, length, device=device,
                                             dtype=dtype)
        pieces = []
        for start in range(0, length, step):
            r = rows[start:start + step]
            stop = start + len(r)                              # keys 0..stop-1 reach row stop-1
            t = self.positions(r, stop, dtype)                                         # [C, stop]
            future = r[:, None] < rows[None, :stop]                                    # j > i
            if grad:
                block = self(t).masked_fill(future, -math.inf)                         # [h, C, stop]
                pieces.append(F.pad(block, (0, length - stop), value=-math.inf))
            else:
                bias[:, start:stop, :stop] = self.piecewise(t)
                bias[:, start:stop, :stop].masked_fill_(future, -math.inf)
                bias[:, start:stop, stop:] = -math.inf
        return torch.cat(pieces, dim=1) if grad else bias

    def sobolev_penalty(self) -> torch.Tensor:
        return self.c.new_zeros(())

    def extra_repr(self) -> str:
        return f"L0={self.init_L}, train_length={self.train_length}"


class FireAttention(nn.Module):
    """Query-key attention with FIRE's bias (:class:`FireKernel`, under ``kernels``):
    ``x [B, T, D]`` -> ``[B, T, D]``, the bias ``[h, T, T]`` built once per solve."""

    def __init__(self, d_model: int, n_heads: int, train_length: int, dropout: float = 0.1,
                 dropout_in_dynamics: bool = False):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)
        self.kernels = FireKernel(n_heads, train_length)
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()

    def sobolev_penalty(self) -> torch.Tensor:
        return self.kernels.sobolev_penalty()

    def plan(self, length: int, device=None, dtype=None) -> ScoreBiasPlan:
        device, dtype = plan_target(self.qk, length, device, dtype)
        return ScoreBiasPlan(length, self.kernels.bias(length, device, dtype))

    def forward(self, x: torch.Tensor, plan: ScoreBiasPlan | None = None) -> torch.Tensor:
        if plan is None:
            plan = self.plan(x.shape[1], x.device, x.dtype)
        return self.drop(self.qk(x, plan.causal))
