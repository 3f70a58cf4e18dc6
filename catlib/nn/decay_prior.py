"""Decay-anchored kernels: a decaying prior defined at every distance, plus CAT's
spectral residual, read only at the distances seen in training.

The score bias of query-key attention inside a CAT block, for d = i - j >= 0:

    b_h(d) = prior_h(d) + r_h(u_T(d)),   u_T(d) = min(1, psi(d) / psi(T_train - 1)),

psi(d) = log(1 + d / c) (c = ``kernel_scale``), T_train = ``train_length``. Priors:

- ``"alibi"``: -m_h d, ALiBi's fixed slopes m_h;
- ``"kerple"``: -r1_h log(1 + r2_h d), KERPLE's logarithmic bias, r1_h = 1 + softplus(.)
  > 1 and r2_h = softplus(.) > 0 learned, r1 initialised over a range across the heads.

The residual is CAT's 1-D spectral kernel on half-range cosines, anchored at u = 1:
r_h(u) = s_h / sqrt(n) sum_k a_hk [cos(pi k u) - (-1)^k], so r(1) = 0 and r'(1) = 0, and
it is set to exactly 0 wherever u_T = 1 (d >= T_train - 1). Its coefficients start at 0:
every model starts as its prior, and beyond the training length its bias is the prior's
exactly, which is defined there without extrapolating anything learned. The penalty is
the exact Sobolev seminorm of the expansion (a constant shift has no curvature).

Far heads (``far_heads`` = n_f > 0, the last n_f heads): no prior (prior_h = 0, the
causal mask alone), the residual as above, so that beyond the training length their bias
is exactly flat and a match is reachable at any distance; and their content scores
q_i . k_j are multiplied by g(i) = max(1, log(i + 1) / log(T_train)), 1 within the
training length, so that a match stays as sharp among the i + 1 keys of a longer input
as among the T_train keys it was trained on (scalable softmax's log-length factor,
arXiv 2501.19399, applied beyond the training length only).

The bias is a function of distance alone and g of the query's position, so the logits of
a prefix do not change when the sequence grows. ``kernel_residual=False`` keeps the prior
only (no spectral parameters): with the ALiBi prior, ALiBi inside the CAT block.
``residual_kind="buckets"`` (``kernel="alibi-buckets"``) replaces the spectral residual by
piecewise-constant values on log-spaced buckets of d with the same support
(:class:`~catlib.nn.learned_bias.BucketResidual`): a learned residual without the basis.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .bias import alibi_slopes, toeplitz_bias
from .kernel import SpectralKernel1D
from .learned_bias import BucketResidual
from .plan import GeometryCache, ScoreBiasPlan, basis_cache_enabled, cache_key, plan_target
from .qk_attention import QKAttention

PRIORS = ("alibi", "kerple")
# The residual on d < T_train: CAT's spectral expansion, or learned buckets.
RESIDUALS = ("spectral", "buckets")
# KERPLE's r1 at initialisation, from the most local head to the flattest (log-spaced),
# and r2: a spread of decay rates as ALiBi's slopes give.
KERPLE_R1 = (8.0, 1.25)
KERPLE_R2 = 1.0


def _inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    return y + torch.log(-torch.expm1(-y))


class DecayPriorKernel(nn.Module):
    """All heads' biases b_h(d) ``[h, L]`` at distances ``d [L]`` (see the module docstring).

    Parameters: KERPLE's ``r1_raw``, ``r2_raw [h - far_heads]`` (prior "kerple"); the
    residual's ``residual.coeffs [h, n]`` (init 0) and ``residual.log_scale [h, 1]``, absent
    with ``residual=False``. ALiBi's slopes are a buffer, not trained. The last
    ``far_heads`` heads have no prior. ``residual_kind="buckets"``: the residual is
    :class:`~catlib.nn.learned_bias.BucketResidual` (``residual.values [h, n]``, init 0,
    no penalty) instead of the spectral expansion.
    """

    def __init__(self, n_heads: int, n_freq: int, prior: str, train_length: int,
                 scale: float = 4.0, residual: bool = True, penalty: str = "exact",
                 far_heads: int = 0, residual_kind: str = "spectral"):
        super().__init__()
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {list(PRIORS)}, got {prior!r}")
        if residual_kind not in RESIDUALS:
            raise ValueError(f"residual_kind must be one of {list(RESIDUALS)}, got {residual_kind!r}")
        self.residual_kind = residual_kind
        if not (isinstance(train_length, int) and train_length >= 2):
            raise ValueError(f"train_length must be an integer >= 2, got {train_length!r}")
        self.prior_name, self.train_length, self.scale = prior, train_length, float(scale)
        if isinstance(far_heads, bool) or not isinstance(far_heads, int) \
                or not 0 <= far_heads <= n_heads:
            raise ValueError(f"far_heads must be an integer from 0 to n_heads = {n_heads}, "
                             f"got {far_heads!r}")
        self.n_heads, self.far_heads = n_heads, far_heads
        # The factor's slope beyond T_train (1: as defined; see far_head_slope). Only
        # evaluation changes it: within T_train, where training reads g, g = 1 at any slope.
        self.far_slope = 1.0
        decaying = n_heads - far_heads   # the first heads, with the prior
        # ALiBi's slopes (a buffer: moves with the model, not trained); KERPLE's are learned.
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)[:decaying]),
                             persistent=False)
        if prior == "kerple":
            r1 = torch.logspace(math.log10(KERPLE_R1[0]), math.log10(KERPLE_R1[1]), n_heads)
            self.r1_raw = nn.Parameter(_inverse_softplus(r1[:decaying] - 1.0))
            self.r2_raw = nn.Parameter(_inverse_softplus(torch.full((decaying,), KERPLE_R2)))
        self.residual = None
        if residual and residual_kind == "buckets":
            self.residual = BucketResidual(n_heads, n_freq, train_length, self.scale)
        elif residual:
            self.residual = SpectralKernel1D(n_heads, n_freq, "cosine", penalty)
            with torch.no_grad():
                self.residual.coeffs.zero_()
        # What :meth:`at_distances` reads that no parameter changes: d, u_T(d), its mask and
        # the residual's basis at u_T(d) and at 1, per (T, device, dtype, scale, T_train).
        self._cache = GeometryCache()

    def u(self, d: torch.Tensor) -> torch.Tensor:
        """u_T(d) in [0, 1], 1 from d = T_train - 1 on; ``d`` float, any shape."""
        c = self.scale
        return (torch.log1p(d / c) / math.log1p((self.train_length - 1) / c)).clamp(max=1.0)

    def prior(self, d: torch.Tensor) -> torch.Tensor:
        """The prior ``[h, L]`` at distances ``d [L]`` (float); 0 for the far heads."""
        if self.prior_name == "alibi":
            decay = -self.slopes.to(d.dtype)[:, None] * d[None, :]
        else:
            r1 = 1.0 + F.softplus(self.r1_raw.to(d.dtype))
            r2 = F.softplus(self.r2_raw.to(d.dtype))
            decay = -r1[:, None] * torch.log1p(r2[:, None] * d[None, :])
        return F.pad(decay, (0, 0, 0, self.far_heads))                 # far heads: 0

    def query_scale(self, length: int, device=None, dtype=None) -> torch.Tensor | None:
        """g ``[h, T]``: 1 for the decaying heads, max(1, log(i + 1) / log(T_train)) for the
        far heads; None without far heads."""
        if not self.far_heads:
            return None
        # Float64 on the device, or on the CPU and then moved (MPS holds no float64).
        home = "cpu" if device is not None and torch.device(device).type == "mps" else device
        i = torch.arange(length, device=home, dtype=torch.float64)
        far = (torch.log1p(i) / math.log(self.train_length)).clamp(min=1.0)
        # 1 itself within the training length: log1p(T - 1) / log(T) may round to 1 + ulp.
        far = far.masked_fill(i < self.train_length, 1.0)
        if self.far_slope != 1.0:          # an evaluation of the factor's strength
            far = 1.0 + self.far_slope * (far - 1.0)
        g = torch.ones(self.n_heads, length, device=home, dtype=torch.float64)
        g[self.n_heads - self.far_heads:] = far
        return g.to(dtype).to(device)

    def anchored(self, u: torch.Tensor) -> torch.Tensor:
        """The residual r_h(u) ``[h, L]`` at ``u [L]``: the expansion minus its value at 1
        (cos(pi k) = (-1)^k), so r(1) = 0; r'(1) = 0 holds for every half-range cosine."""
        return self.residual(u) - self.residual(u.new_ones(1))

    def residual_at(self, d: torch.Tensor) -> torch.Tensor:
        """r_h(u_T(d)) ``[h, L]``: exactly 0 for d >= T_train - 1 (and without a residual)."""
        if self.residual is None:
            return d.new_zeros(self.n_heads, d.numel())
        if self.residual_kind == "buckets":
            return self.residual(d)                          # 0 itself beyond, masked there
        u = self.u(d)
        return self.anchored(u).masked_fill(u >= 1.0, 0.0)   # 0 itself, not a rounded 0

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        return self.prior(d) + self.residual_at(d)

    def at_distances(self, length: int, device, dtype) -> torch.Tensor:
        """``self(d)`` at d = 0..T-1, ``[h, T]`` (``d`` made as ``arange(T).to(dtype)``), with
        what depends on no parameter kept in the geometry cache: d, u_T(d), where u_T(d) = 1,
        and the residual's basis at u_T(d) and at 1. The parameters' operations are those of
        :meth:`forward`, so the numbers are its own bit for bit. Under
        ``basis_cache(False)``: :meth:`forward` itself, everything evaluated every time."""
        if not basis_cache_enabled():
            return self(torch.arange(length, device=device).to(dtype))
        if self.residual_kind == "buckets" and self.residual is not None:
            d = torch.arange(length, device=device).to(dtype)
            return self.prior(d) + self.residual.at_distances(length, device, dtype)
        key = cache_key(length, device, dtype, self.scale, self.train_length,
                        None if self.residual is None else (self.residual.basis,
                                                            self.residual.n_freq))
        geo = self._cache.get(key, lambda: self._distance_geometry(length, device, dtype))
        d = geo["d"]
        if self.residual is None:
            return self.prior(d) + d.new_zeros(self.n_heads, d.numel())
        r = self.residual
        anchored = r.from_basis(geo["phi_u"], d.shape) - r.from_basis(geo["phi_one"], (1,))
        return self.prior(d) + anchored.masked_fill(geo["beyond"], 0.0)

    def _distance_geometry(self, length: int, device, dtype) -> dict:
        """The parameter-free entry of :meth:`at_distances` (built by the cache: no grad)."""
        d = torch.arange(length, device=device).to(dtype)
        geo = {"d": d}
        if self.residual is not None:
            u = self.u(d)
            geo.update(beyond=u >= 1.0, phi_u=self.residual.basis_values(u),
                       phi_one=self.residual.basis_values(u.new_ones(1)))
        return geo

    def sobolev_penalty(self) -> torch.Tensor:
        if self.residual is None:
            return self.slopes.new_zeros(())
        return self.residual.sobolev_penalty()

    def extra_repr(self) -> str:
        kind = f", residual_kind={self.residual_kind!r}" if self.residual_kind != "spectral" else ""
        return (f"prior={self.prior_name!r}, train_length={self.train_length}, scale={self.scale}, "
                f"residual={self.residual is not None}, far_heads={self.far_heads}{kind}")


class DecayPriorAttention(nn.Module):
    """Query-key attention with a decay-anchored score bias: score(i, j) = q_i . k_j /
    sqrt(d) + b_h(i - j), causal softmax. ``x [B, T, D]`` -> ``[B, T, D]``.

    The bias ``[h, T, T]`` is built once per solve (``plan``), -inf above the diagonal,
    as :class:`~catlib.nn.content.ContentAttention`'s (a :class:`~catlib.nn.plan.ScoreBiasPlan`); kernel parameters live under
    ``kernels`` so that the adjoint reaches them through the plan only.
    """

    def __init__(self, d_model: int, n_heads: int, n_freq: int, prior: str, train_length: int,
                 kernel_scale: float = 4.0, residual: bool = True, penalty: str = "exact",
                 dropout: float = 0.1, dropout_in_dynamics: bool = False, far_heads: int = 0,
                 residual_kind: str = "spectral"):
        super().__init__()
        self.qk = QKAttention(d_model, n_heads, dropout=0.0)   # no random right-hand side
        self.kernels = DecayPriorKernel(n_heads, n_freq, prior, train_length, kernel_scale,
                                        residual, penalty, far_heads, residual_kind)
        self.drop = nn.Dropout(dropout) if dropout_in_dynamics else nn.Identity()

    def sobolev_penalty(self) -> torch.Tensor:
        return self.kernels.sobolev_penalty()

    def plan(self, length: int, device=None, dtype=None) -> ScoreBiasPlan:
        """The bias for sequences of ``length`` T: one Toeplitz ``[h, T, T]``, causal."""
        device, dtype = plan_target(self.qk, length, device, dtype)
        bias = toeplitz_bias(self.kernels.at_distances(length, device, dtype))  # b_h(i - j)
        return ScoreBiasPlan(length, bias.masked, self.kernels.query_scale(length, device, dtype),
                             bias.keys_reversed)

    def forward(self, x: torch.Tensor, plan: ScoreBiasPlan | None = None) -> torch.Tensor:
        if plan is None:
            plan = self.plan(x.shape[1], x.device, x.dtype)
        return self.drop(self.qk(x, plan.causal, plan.query_scale))


@contextlib.contextmanager
def far_head_slope(model: nn.Module, slope: float):
    """Evaluate ``model`` with its far heads' log-length factor scaled: g = 1 + slope *
    (log(i + 1) / log(T_train) - 1) beyond the training length (1: as defined, 0: no
    factor, 2: twice as steep); restored on exit. Within the training length g = 1 at
    every slope, so the trained model is the same model."""
    kernels = [m for m in model.modules() if isinstance(m, DecayPriorKernel)]
    saved = [k.far_slope for k in kernels]
    try:
        for k in kernels:
            k.far_slope = float(slope)
        yield model
    finally:
        for k, v in zip(kernels, saved):
            k.far_slope = v
