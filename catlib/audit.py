"""The audit: measure the ten defects of the published CAT on any CAT model.

Each defect of ALGORITHM.md has one function here that takes a :class:`catlib.CAT`
(any size, Fourier or Chebyshev basis, published or corrected) and returns a
:class:`Finding`: whether the model shows the defect and the number that says so.
:func:`audit_model` runs them all; :func:`format_audit` prints a text (or Markdown)
table, :func:`audit_to_json` a JSON document. The measurements are small: tiny
forward passes with classical RK4 (4 steps), except defect 6, which is about the
adaptive solver and runs dopri5 with a step cap and a time cap.

The model is never changed: every measurement works on a copy (its solver, mode
and dtype switched as needed) with torch's random state forked.

Inputs (:func:`load_for_audit`): a file written by ``torch.save(model.state_dict(),
PATH)`` from the published script's CAT module (read with ``weights_only=True``; the
basis is not recorded in such a file and comes from ``basis=``), or a catlib run
directory. Anything else raises :class:`AuditError` with one line naming the problem
and the fix. Command line::

    python -m catlib.audit PATH [--basis fourier|cheb] [--json] [--device auto|cpu|cuda|mps]

(and ``python -m catlib audit`` once :func:`add_parser` is wired into ``catlib.cli``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .devices import DEVICES, DeviceError, resolve_device
from .nn.baselines import Baseline
from .nn.bases import basis
from .nn.config import BASES, CATConfig
from .evaluate import leak_score, seeded
from .nn.kernel import kernel_logits, sobolev_penalty
from .nn.model import CAT
from .nn.quadrature import neighbours
from .tensorfile import TensorFileError, load_tensors
from .train import penalty_weight

# The defects of ALGORITHM.md, by number, as the audit names them.
DEFECTS = {
    1: "not causal",
    2: "baseline without positions",
    3: "penalty weight applied twice",
    4: "attention rows do not sum to 1",
    5: "mirror-symmetric kernel",
    6: "dropout inside the dynamics",
    7: "scores depend on dropout",
    8: "T = 1 out of range",
    9: "penalty charges flat kernels",
    10: "few tokens read at long T",
}
# The CATConfig corrections (catlib.nn.config.CORRECTIONS) and the defects each one removes
# on its own. ``causal`` also masks the baseline, and the mask alone already makes it see
# order (defect 2). logit_dropout is a baseline setting, not one of the ten.
CORRECTED_BY = {
    "causal": (1, 2, 8, 10),
    "normalised_integral": (4,),
    "dropout_in_dynamics": (6,),
    "penalty": (9,),
    "half_range_cosine": (5,),
    "penalty_once": (3,),
    "positional_encoding": (2,),
    "logit_dropout": (),
}
# Defect 7 is a property of the evaluation protocol (dropout left on), not of a model:
# catlib evaluates in eval mode; the audit measures how much dropout would move the score.
PROTOCOL_DEFECTS = (7,)
LONG_LENGTH = 5000   # the published longest context, for defect 10
SOLVE = dict(solver="rk4-classic", solver_steps=4)   # the measurements' solver (published MPS path)


class AuditError(ValueError):
    """Bad input to the audit; the message is one line naming the problem and the fix."""


@dataclass
class Finding:
    """The audit of one defect.

    ``shows``: the model shows the defect; ``value``: the number that says so (NaN when
    the measurement itself fails, e.g. defect 8), in ``unit``; ``detail``: this model's
    numbers in words; ``data``: secondary numbers (JSON-ready).
    """

    defect: int
    name: str
    shows: bool
    value: float
    unit: str
    detail: str = ""
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["value"] = _json_number(self.value)
        d["data"] = {k: _json_number(v) for k, v in self.data.items()}
        return d


def _json_number(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None            # JSON has no NaN
    return v


# ------------------------------------------------------------------ helpers

def _check_model(model) -> None:
    if not isinstance(model, CAT):
        raise AuditError(f"the audit measures a catlib.CAT, got {type(model).__name__}; "
                         f"load a checkpoint with catlib.audit.load_for_audit or catlib.load_published")
    if model.config.kernel != "absolute":
        raise AuditError(f"the audit measures CAT's published kernel on [0, 1] (kernel='absolute'), "
                         f"this model has kernel={model.config.kernel!r}")


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _copy(model: torch.nn.Module, **config) -> torch.nn.Module:
    """A fresh copy of a CAT or Baseline with its weights, device and dtype, and ``config``
    fields replaced (a CAT's default: the measurement solver). Built anew rather than
    deep-copied: a trained model holds non-leaf tensors of its last solve."""
    param = next(model.parameters())
    changes = (config or SOLVE) if isinstance(model, CAT) else config
    with torch.random.fork_rng(devices=[]):      # initialising the copy draws random numbers
        work = type(model)(dataclasses.replace(model.config, **changes))
    work.load_state_dict(model.state_dict())
    return work.to(device=param.device, dtype=param.dtype).train(model.training)


def _tokens(vocab: int, batch: int, length: int, seed: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (batch, length), generator=g).to(device)


def _attentions(model: CAT):
    return [block.attn for block in model.blocks]


# ------------------------------------------------------------------ the ten defects

def causality(model: CAT, length: int = 64, seed: int = 0, baseline=None, tol: float = 1e-6) -> Finding:
    """Defect 1: the leak score (:func:`catlib.evaluate.leak_score`) of the CAT, eval mode.

    About 0 for a model that reads only the past; the baseline's score is in ``data``
    when a baseline is given.
    """
    _check_model(model)
    leak = leak_score(_copy(model), model.config.vocab_size, length, seed=seed)
    data = {"leak_cat": leak, "length": length}
    detail = f"CAT at T = {length}"
    if baseline is not None:
        data["leak_baseline"] = leak_score(baseline, model.config.vocab_size, length, seed=seed)
        detail += f"; the baseline: {data['leak_baseline']:.2g}"
    return Finding(1, DEFECTS[1], leak > tol, leak, "leak score (0: reads only the past)",
                   detail, data)


def permutation_gap(baseline: torch.nn.Module, length: int = 32, seed: int = 0) -> float:
    """max |f(P x) − P f(x)| of ``baseline``'s logits in float64 (eval mode) for a random
    permutation P of the positions: 0 to rounding for a model that cannot see order."""
    base = _copy(baseline).cpu().double().eval()
    x = _tokens(base.config.vocab_size, 2, length, seed, "cpu")
    perm = torch.randperm(length, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        return (base(x)[0][:, perm] - base(x[:, perm])[0]).abs().max().item()


def baseline_positions(model: CAT, baseline=None, length: int = 32, seed: int = 0,
                       tol: float = 1e-9) -> Finding:
    """Defect 2: the baseline is permutation-equivariant (no positions, no mask).

    Without a ``baseline`` one is built from the CAT's configuration (seeded random
    weights): the property belongs to the architecture, whatever the weights.
    """
    _check_model(model)
    built = baseline is None
    if built:
        with seeded(seed, torch.device("cpu")):
            baseline = Baseline(model.config)
    gap = permutation_gap(baseline, length, seed)
    where = "a baseline built from the CAT's config" if built else "the baseline given"
    return Finding(2, DEFECTS[2], gap < tol, gap, "max |f(Px) − P f(x)| of the baseline",
                   f"{where}; float64, 0: order is invisible", {"built_from_config": built})


def penalty_weight_applied(model: CAT, seed: int = 0) -> Finding:
    """Defect 3: the weight the training loop puts on the Sobolev penalty P at step 0.

    The model returns λ·P; the published loop multiplies it by λ·schedule again, so
    the weight on P is λ² (corrected: λ). Measured from one forward pass.
    """
    _check_model(model)
    work = _copy(model).eval()
    lam = model.config.sob_lambda
    with torch.no_grad():
        returned = work(_tokens(model.config.vocab_size, 1, 2, seed, _device(work)), penalty=True)[1]
        p = work.sobolev_penalty()
    loop = penalty_weight(0, 1, lam, model.config.penalty_once)
    weight = loop * returned.item() / p.item() if p.item() > 0 else loop * lam
    twice = not math.isclose(weight, lam, rel_tol=1e-4, abs_tol=0.0) and lam not in (0.0, 1.0)
    return Finding(3, DEFECTS[3], twice, weight, f"weight on P at step 0 (λ = {lam:g})",
                   f"= λ{'²' if twice else ''}", {"sob_lambda": lam})


def attention_row_sums(model: CAT, length: int = 64) -> torch.Tensor:
    """Row sums of the attention coefficients, ``[blocks, heads, T]`` (float64, CPU)."""
    _check_model(model)
    sums = []
    with torch.no_grad():
        for attn in _attentions(model):
            plan = attn.plan(length)
            w = plan.mixing if plan.mixing is not None else plan.weights
            sums.append(w.sum(-1).cpu().double())
    return torch.stack(sums)


def row_sums(model: CAT, length: int = 64, tol: float = 1e-3) -> Finding:
    """Defect 4: each query's attention coefficients should sum to 1 (published: ~1/Q)."""
    s = attention_row_sums(model, length)
    worst = (s - 1).abs().max().item()
    q = model.config.quad_nodes
    return Finding(4, DEFECTS[4], worst > tol, s.mean().item(),
                   f"mean attention row sum (1/Q = {1 / q:.4f})",
                   f"from {s.min().item():.4f} to {s.max().item():.4f} at T = {length}",
                   {"min": s.min().item(), "max": s.max().item(), "length": length})


def kernel_grid(attn, grid: int = 65) -> torch.Tensor:
    """The kernel logits W(s, t) of every head on a uniform grid of [0, 1]^2, float64,
    ``[h, grid, grid]`` (rows s, columns t)."""
    coeffs, log_scale = (t.detach().cpu().double() for t in attn.stacked())
    u = torch.linspace(0, 1, grid, dtype=torch.float64)
    phi = basis(attn.basis_name, u, attn.n_freq)
    return kernel_logits(coeffs, log_scale, phi, phi)


def mirror_symmetry(model: CAT, grid: int = 65, tol: float = 1e-6) -> Finding:
    """Defect 5: W(s, t) = W(s, 1 − t) (and W(1 − s, t)) for the Fourier basis cos(2πkt).

    Measured on the model's own kernels in float64, relative to max |W|: 0 to rounding
    means tokens p and T−1−p are always read with the same weight.
    """
    _check_model(model)
    gap_t = gap_s = 0.0
    for attn in _attentions(model):
        w = kernel_grid(attn, grid)
        scale = w.abs().max().item()
        if scale > 0:
            gap_t = max(gap_t, (w - w.flip(-1)).abs().max().item() / scale)
            gap_s = max(gap_s, (w - w.flip(-2)).abs().max().item() / scale)
    basis_name = _attentions(model)[0].basis_name
    return Finding(5, DEFECTS[5], gap_t < tol, gap_t,
                   "max |W(s,t) − W(s,1−t)| / max |W|",
                   f"{basis_name} basis, float64; W(1−s,t): {gap_s:.1e}",
                   {"gap_s": gap_s, "basis": basis_name})


class _OutOfTime(RuntimeError):
    pass


def dopri5_nfe(model: CAT, tokens: torch.Tensor, train: bool, *, rtol: float = 1e-5,
               atol: float = 1e-7, max_steps: int = 40, seconds: float = 20.0) -> dict:
    """One forward solve with dopri5 (no gradients), capped at ``max_steps`` steps and
    ``seconds``: ``{"nfe", "finished", "seconds"}``, the dynamics evaluations of all blocks,
    counted even when a cap stops the solve. ``train`` sets the mode (dropout on or off)."""
    _check_model(model)
    work = _copy(model, solver="dopri5", rtol=rtol, atol=atol, max_steps=max_steps,
                 adjoint=False).train(train)
    start = time.perf_counter()

    def deadline(*_):
        if time.perf_counter() - start > seconds:
            raise _OutOfTime
    hooks = [block.ff.register_forward_pre_hook(deadline) for block in work.blocks]
    finished = True
    try:
        with torch.no_grad(), seeded(0, tokens.device):
            work(tokens, penalty=False)
    except _OutOfTime:
        finished = False
    except RuntimeError as err:
        if "max_steps" not in str(err):
            raise
        finished = False
    finally:
        for h in hooks:
            h.remove()
    return {"nfe": work.nfe["forward"], "finished": finished,
            "seconds": time.perf_counter() - start}


def rhs_gap(model: CAT, length: int = 32, seed: int = 0) -> float:
    """max |f(h) − f(h)| of two evaluations of the first block's dynamics at one state,
    training mode: 0 unless the dynamics draw random numbers (dropout inside)."""
    work = _copy(model).train()
    x = _tokens(model.config.vocab_size, 2, length, seed, _device(work))
    with torch.no_grad(), seeded(seed, x.device):
        h = work.embed(x)
        return (work.blocks[0].rhs(h) - work.blocks[0].rhs(h)).abs().max().item()


def dropout_in_dynamics(model: CAT, length: int = 32, seed: int = 0, nfe: bool = True,
                        **dopri5) -> Finding:
    """Defect 6: dropout inside the ODE right-hand side makes it random in training mode.

    The number: two evaluations of f at the same state differ. With ``nfe``, also the
    dopri5 evaluations in training vs eval mode (:func:`dopri5_nfe`, capped; its
    keyword arguments pass through): random dynamics make the adaptive solver shrink
    its steps.
    """
    _check_model(model)
    gap = rhs_gap(model, length, seed)
    data, detail = {"rhs_gap": gap}, "same state, same weights"
    if nfe:
        x = _tokens(model.config.vocab_size, 1, length, seed, _device(model))
        tr, ev = dopri5_nfe(model, x, True, **dopri5), dopri5_nfe(model, x, False, **dopri5)
        data.update(nfe_train=tr["nfe"], nfe_eval=ev["nfe"], nfe_train_finished=tr["finished"])
        detail = (f"dopri5: {tr['nfe']} evaluations in train mode"
                   f"{'' if tr['finished'] else ' (stopped at the cap)'}, {ev['nfe']} in eval mode")
    return Finding(6, DEFECTS[6], gap > 0, gap, "max |f(h) − f(h)|, training mode", detail, data)


def dropout_ce_shift(model: torch.nn.Module, tokens: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """(CE with dropout on − CE in eval mode, |difference of two eval-mode CEs|) of
    next-token prediction on ``tokens [B, T]``; the second is the noise floor (0 on a CPU)."""
    work = _copy(model)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def ce(train: bool) -> float:
        work.train(train)
        with torch.no_grad():
            logits = work(x)[0].cpu().double()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).cpu()).item()
    with seeded(seed, tokens.device):
        on, off, again = ce(True), ce(False), ce(False)
    return on - off, abs(off - again)


def dropout_in_evaluation(model: CAT, length: int = 64, batch: int = 4, seed: int = 0) -> Finding:
    """Defect 7 (protocol): the published evaluation keeps dropout on. The number: how
    much that moves this model's cross-entropy on random text (catlib evaluates in eval
    mode, so its own scores do not move)."""
    _check_model(model)
    x = _tokens(model.config.vocab_size, batch, length + 1, seed, _device(model))
    shift, noise = dropout_ce_shift(model, x, seed)
    return Finding(7, DEFECTS[7], abs(shift) > noise, shift,
                   "CE with dropout on − CE in eval mode",
                   "random text; a protocol defect: catlib evaluates in eval mode",
                   {"noise": noise})


def length_one(model: CAT, longer: int = 8, seed: int = 0, tol: float = 1e-4) -> Finding:
    """Defect 8: a sequence of one token. Published: the interpolation reads token 1,
    which does not exist (catlib refuses T = 1 with a ValueError). Corrected: the output
    at T = 1 equals position 0 of a longer sequence."""
    _check_model(model)
    work = _copy(model).eval()
    x = _tokens(model.config.vocab_size, 1, longer, seed, _device(work))
    try:
        with torch.no_grad():
            gap = (work(x[:, :1])[0][:, 0] - work(x)[0][:, 0]).abs().max().item()
    except (ValueError, IndexError) as err:
        return Finding(8, DEFECTS[8], True, float("nan"),
                       f"max |logits(T=1) − logits(T={longer})[0]|",
                       f"T = 1 fails: {type(err).__name__}", {"error": type(err).__name__})
    return Finding(8, DEFECTS[8], gap > tol, gap, f"max |logits(T=1) − logits(T={longer})[0]|",
                   "T = 1 works")


def penalty_charges(model: CAT) -> dict:
    """The model's Sobolev penalty against the exact squared H² seminorm (float64).

    ``zero_curvature``: the largest penalty the model charges a single basis kernel
    φ_k(s) φ_l(t) whose exact seminorm is 0 (a flat kernel: constant, linear, bilinear);
    ``linear``: the charge of φ_1(s) (C_10 = 1); ``ratio``: model penalty / exact
    seminorm of the model's own kernels (None when their seminorm is 0).
    """
    attn = _attentions(model)[0]
    name, kind, n = attn.basis_name, attn.kernels[0].penalty, attn.n_freq
    unit = torch.eye(n * n, dtype=torch.float64).view(n * n, n, n)
    charged = torch.stack([sobolev_penalty(c[None], name, kind) for c in unit])
    exact = torch.stack([sobolev_penalty(c[None], name, "exact") for c in unit])
    flat = exact <= 1e-9 * exact.max()
    own = [a.stacked()[0].detach().cpu().double() for a in _attentions(model)]   # [h, n, n]
    own_model = sum(sobolev_penalty(c, name, kind).item() for c in own)
    own_exact = sum(sobolev_penalty(c, name, "exact").item() for c in own)
    return {"zero_curvature": charged[flat].max().item(),
            "linear": charged[n].item() if n > 1 else 0.0,
            "ratio": own_model / own_exact if own_exact > 0 else None,
            "basis": name, "penalty": kind}


def penalty_formula(model: CAT, tol: float = 1e-9) -> Finding:
    """Defect 9: the published penalty uses the Fourier weights (2π)⁴(k² + l²)² in every
    basis. For Chebyshev polynomials it charges kernels without curvature (the linear
    kernel T_1 pays (2π)⁴ ≈ 1559); the exact seminorm charges them nothing."""
    _check_model(model)
    with torch.no_grad():
        p = penalty_charges(model)
    ratio = "" if p["ratio"] is None else f"; own kernels: {p['ratio']:.3g} × exact"
    return Finding(9, DEFECTS[9], p["zero_curvature"] > tol, p["zero_curvature"],
                   "largest penalty on a flat basis kernel",
                   f"{p['penalty']} penalty, {p['basis']} basis{ratio}",
                   {k: p[k] for k in ("linear", "ratio")})


def tokens_read(model: CAT, length: int = LONG_LENGTH) -> int:
    """Distinct token positions the quadrature reads at sequence length ``length``.

    Published: the Q shared nodes t_q, each interpolated from two neighbours (at most 2Q
    tokens). Causal: the nodes s_i t_q of every query i. Counted from the nodes and the
    interpolation stencils (:func:`catlib.nn.quadrature.neighbours`), with no [T, T] matrix.
    """
    attn = _attentions(model)[0]
    dtype = attn.stacked()[0].dtype
    nodes = attn.t_nodes.detach().cpu().to(dtype)
    if attn.causal:
        s = torch.linspace(0, 1, length, dtype=dtype)
        nodes = s[:, None] * nodes[None, :]
    index, weight = neighbours(nodes, length)
    return int(torch.unique(index[weight != 0]).numel())


def long_context(model: CAT, length: int = LONG_LENGTH, short: int = 64) -> Finding:
    """Defect 10: the published quadrature reads at most 2Q tokens, whatever T is."""
    _check_model(model)
    read, read_short = tokens_read(model, length), tokens_read(model, short)
    return Finding(10, DEFECTS[10], read < length - 1, float(read),
                   f"distinct tokens read at T = {length}",
                   f"{1 - read / length:.1%} never read; at T = {short}: {read_short}",
                   {"length": length, "unread": 1 - read / length, "read_short": read_short,
                    "short": short})


# ------------------------------------------------------------------ the audit

def audit_model(model: CAT, baseline=None, *, only=None, length: int = 64,
                long_length: int = LONG_LENGTH, nfe: bool = True, seed: int = 0,
                **dopri5) -> list[Finding]:
    """Measure the ten defects (or the numbers in ``only``) on ``model``.

    ``baseline``: the baseline trained beside it, if any (defects 1 and 2; without it,
    defect 2 is measured on a baseline built from the CAT's configuration). ``length``:
    the sequence length of the measurements; ``long_length``: the T of defect 10;
    ``nfe``: also count dopri5 evaluations for defect 6 (keyword arguments of
    :func:`dopri5_nfe` pass through). The model is not changed.
    """
    _check_model(model)
    wanted = set(DEFECTS) if only is None else set(only)
    unknown = sorted(wanted - set(DEFECTS))
    if unknown:
        raise AuditError(f"unknown defect number(s) {unknown}; the defects are 1 to {len(DEFECTS)}")
    checks = {
        1: lambda: causality(model, length, seed, baseline),
        2: lambda: baseline_positions(model, baseline, min(length, 32), seed),
        3: lambda: penalty_weight_applied(model, seed),
        4: lambda: row_sums(model, length),
        5: lambda: mirror_symmetry(model),
        6: lambda: dropout_in_dynamics(model, min(length, 32), seed, nfe, **dopri5),
        7: lambda: dropout_in_evaluation(model, length, seed=seed),
        8: lambda: length_one(model, seed=seed),
        9: lambda: penalty_formula(model),
        10: lambda: long_context(model, long_length, length),
    }
    return [checks[d]() for d in sorted(wanted)]


def build_cat(config: CATConfig, seed: int = 0, device=None) -> CAT:
    """A fresh CAT with the initial weights of ``seed``: configurations that differ only
    in corrections get identical weights (the global RNG is left as it was)."""
    with seeded(seed, torch.device("cpu")):
        model = CAT(config)
    return model.to(device) if device is not None else model


def logits_zeroed(config: CATConfig, length: int = 32, seed: int = 0) -> Finding:
    """The published baseline's dropout on its logits (a setting of the published script,
    not one of the ten): the share of logits that are exactly 0 in training mode."""
    with seeded(seed, torch.device("cpu")):
        base = Baseline(config).train()
        x = _tokens(config.vocab_size, 2, length, seed, "cpu")
        with torch.no_grad():
            share = (base(x)[0] == 0).double().mean().item()
    return Finding(0, "dropout on the baseline's logits", share > 0, share,
                   "share of baseline logits zeroed, training mode", "")


def ablation(config: CATConfig, seed: int = 0, **audit) -> list[dict]:
    """One correction at a time, from the same initial weights.

    For each field of :data:`catlib.nn.config.CORRECTIONS`: the published variant of
    ``config``, the published variant with that field corrected alone, and the causal
    variant, audited on the defects the field corrects (:data:`CORRECTED_BY`; without the
    dopri5 count). ``config``'s corrections should be left at None. Defect 9 is measured
    in the Chebyshev basis (the published penalty is Fourier's own); ``logit_dropout`` by
    :func:`logits_zeroed`. Returns one dict per (field, defect): field, change, defect,
    and the findings ``published``, ``alone``, ``causal``.
    """
    from .nn.config import CORRECTIONS
    published = dataclasses.replace(config, variant="published")
    causal = dataclasses.replace(config, variant="causal")
    rows = []
    for name, (before, after) in CORRECTIONS.items():
        basis = "cheb" if name == "penalty" else config.basis
        configs = [dataclasses.replace(c, basis=basis) for c in
                   (published, dataclasses.replace(published, **{name: after}), causal)]
        if CORRECTED_BY[name]:
            audits = [audit_model(build_cat(c, seed), only=CORRECTED_BY[name], seed=seed,
                                  nfe=False, **audit) for c in configs]
        else:
            audits = [[logits_zeroed(c.resolved(), seed=seed)] for c in configs]
        for found in zip(*audits):
            rows.append(dict(field=name, change=f"{before} → {after}", defect=found[0].defect,
                             published=found[0], alone=found[1], causal=found[2]))
    return rows


def cell(finding: Finding) -> str:
    """A table cell for one finding: "**yes** value" where the model shows the defect, else
    "no value" (a non-breaking space keeps the two together)."""
    return f"{'**yes**' if finding.shows else 'no'}\u00a0{format_value(finding.value)}"


def format_ablation(rows: list[dict]) -> str:
    """The ablation as a Markdown table: correction, #, measured as, published, this
    correction alone, causal variant."""
    from .report import md_table
    return md_table(("correction", "#", "measured as", "published", "this correction alone",
                     "causal variant"),
                    [(f"`{r['field']}`", r["defect"] or "—", r["published"].unit, cell(r["published"]),
                      cell(r["alone"]), cell(r["causal"])) for r in rows], "lrlrrr")


def format_value(value: float) -> str:
    """A finding's value for a table: 3 significant digits, "—" for NaN."""
    from .report import number
    return "—" if value != value else number(value)


def format_audit(findings: list[Finding], markdown: bool = False) -> str:
    """The findings as a text table (or a Markdown table): #, defect, shows, value, measured
    as; the text table puts each finding's detail on a second line."""
    from .report import md_table
    header = ("#", "defect", "shows", "value", "measured as")
    rows = [(str(f.defect), f.name, "yes" if f.shows else "no", format_value(f.value), f.unit)
            for f in findings]
    if markdown:
        return md_table(header, rows, "rlcrl")
    w = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    indent = " " * (sum(w) + 8)
    lines = []
    for r, f in zip([header, *rows], [None, *findings]):
        lines.append(f"{r[0]:>{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:>{w[3]}}  {r[4]}")
        if f is not None and f.detail:
            lines.append(f"{indent}({f.detail})")
    return "\n".join(lines)


def details_table(audits: dict[str, list[Finding]]) -> str:
    """A Markdown table of the findings' details (what each number means for each model):
    #, defect, one column per model."""
    from .report import md_table
    by_defect = [{f.defect: f for f in audits[n]} for n in audits]
    numbers = sorted(set().union(*by_defect))
    rows = [(d, DEFECTS[d], *(found[d].detail if d in found else "" for found in by_defect))
            for d in numbers]
    return md_table(("#", "defect", *audits), rows, "rl" + "l" * len(audits))


def compare_audits(audits: dict[str, list[Finding]]) -> str:
    """A Markdown table of several models' audits side by side: #, defect, one column per
    model ("**yes** value" where the model shows the defect), measured as."""
    from .report import md_table
    names = list(audits)
    by_defect = [{f.defect: f for f in audits[n]} for n in names]
    numbers = sorted(set().union(*by_defect))
    rows = []
    for d in numbers:
        cells = [cell(found[d]) if d in found else "" for found in by_defect]
        unit = next(found[d].unit for found in by_defect if d in found)
        rows.append((d, DEFECTS[d], *cells, unit))
    return md_table(("#", "defect", *names, "measured as"), rows, "rl" + "r" * len(names) + "l")


def audit_to_json(findings: list[Finding], **meta) -> str:
    """``{**meta, "findings": [...]}`` as JSON text (NaN as null)."""
    return json.dumps({**meta, "findings": [f.to_dict() for f in findings]}, indent=1,
                      ensure_ascii=False, allow_nan=False)


# ------------------------------------------------------------------ inputs

@dataclass
class AuditInput:
    """What :func:`load_for_audit` found: the CAT, the baseline (runs only), where they
    came from, and notes for the reader (e.g. that the basis was assumed)."""

    model: CAT
    baseline: Baseline | None
    source: str
    notes: list[str]

    def describe(self) -> dict:
        c = self.model.config
        return {"source": self.source, "basis": c.basis, "variant": c.variant,
                "sizes": {"vocab_size": c.vocab_size, "d_model": c.d_model, "n_heads": c.n_heads,
                          "n_freq": c.n_freq, "blocks": c.blocks, "quad_nodes": c.quad_nodes},
                "notes": self.notes}


STATE_DICT_FIX = "save the published CAT module with torch.save(model.state_dict(), PATH)"


def load_for_audit(path, basis: str | None = None, device="cpu") -> AuditInput:
    """Load a published-script state_dict file or a catlib run directory for the audit.

    ``basis`` ("fourier" or "cheb", default fourier) is the basis of a state_dict file,
    which does not record it; a run directory records its own. Raises AuditError (one
    line: the problem and the fix) for anything else.
    """
    if basis is not None and basis not in BASES:
        raise AuditError(f"unknown basis {basis!r}; choose one of {list(BASES)}")
    path = Path(path)
    if path.is_dir():
        result = _load_run(path, basis)
    elif path.is_file():
        result = _load_state_dict_file(path, basis or "fourier", basis is None)
    else:
        raise AuditError(f"{path} does not exist; pass a file written by torch.save(model.state_dict(), "
                         f"PATH) or a catlib run directory")
    result.model.to(device)
    if result.baseline is not None:
        result.baseline.to(device)
    return result


def _load_run(path: Path, basis: str | None) -> AuditInput:
    from .runs import RunError, open_run
    if not (path / "config.json").is_file():
        raise AuditError(f"{path} is a directory but not a catlib run (it has no config.json); pass a "
                         f"run directory, or a file written by torch.save(model.state_dict(), PATH)")
    try:
        run = open_run(path)
        cat, base = run.load_models()
    except RunError as err:
        raise AuditError(str(err).strip().splitlines()[0]) from None
    except (OSError, RuntimeError, ValueError, KeyError) as err:   # a damaged run: one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise AuditError(f"run {path} cannot be loaded ({type(err).__name__}: {first}); "
                         f"retrain it, or audit another run") from None
    if cat is None:
        raise AuditError(f"run {path} trained only the baseline; the audit needs a CAT: "
                         f"train one (--models cat base)")
    notes = [f"run directory; variant {run.model_config.variant}, basis {cat.config.basis} "
             f"(recorded in the run)"]
    if basis is not None and basis != cat.config.basis:
        notes.append(f"--basis {basis} ignored: the run records basis {cat.config.basis}")
    return AuditInput(cat, base, "run", notes)


def _read_torch_file(path: Path):
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):
        raise AuditError(f"{path} is not a PyTorch file (neither a torch.save zip nor a pickle); "
                         f"{STATE_DICT_FIX}")
    try:
        return load_tensors(path, "cpu")
    except TensorFileError as err:
        if err.refused:
            raise AuditError(f"{path} was refused by torch.load(weights_only=True): {err}; the "
                             f"audit loads tensors only, so {STATE_DICT_FIX}") from None
        raise AuditError(f"{path} cannot be read by torch.load ({err}); {STATE_DICT_FIX}") from None


def _load_state_dict_file(path: Path, basis: str, assumed: bool) -> AuditInput:
    from .nn.compat import load_published
    sd = _read_torch_file(path)
    if not isinstance(sd, dict):
        raise AuditError(f"{path} holds a {type(sd).__name__}, not a state_dict; {STATE_DICT_FIX}")
    if "trainer" in sd or ("state_dict" in sd and "config_hash" in sd):
        raise AuditError(f"{path} is a catlib run file; pass its run directory ({path.parent}) instead")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise AuditError(f"{path} is a dict but not a state_dict (entry {bad[0]!r} is a "
                         f"{type(sd[bad[0]]).__name__}, not a tensor); {STATE_DICT_FIX}")
    if any(k.startswith("enc.layers.") for k in sd):
        raise AuditError(f"{path} is a checkpoint of the published baseline (enc.layers.* keys), "
                         f"not of CAT; pass the CAT module's state_dict")
    try:
        model = load_published(sd, basis=basis)
    except RuntimeError as err:     # load_state_dict: missing, unexpected or mis-shaped tensors
        raise AuditError(f"{path} does not match a published CAT: {_key_problems(str(err))}; "
                         f"{STATE_DICT_FIX}") from None
    except (ValueError, KeyError, IndexError) as err:
        msg = str(err).strip("'\"").splitlines()[0]
        raise AuditError(f"{path}: {msg}; {STATE_DICT_FIX}") from None
    note = (f"basis {basis}: assumed, the basis is not recorded in a state_dict (pass --basis cheb "
            f"for a Chebyshev model)" if assumed else
            f"basis {basis}: as given; the basis is not recorded in a state_dict")
    return AuditInput(model, None, "state_dict",
                      [note, "audited as the published architecture (variant published)"])


def _key_problems(message: str) -> str:
    """One line out of load_state_dict's multi-line error."""
    parts = []
    for label, pattern in (("missing", r"Missing key\(s\) in state_dict: (.*?)\.\s*$"),
                           ("unexpected", r"Unexpected key\(s\) in state_dict: (.*?)\.\s*$")):
        m = re.search(pattern, message, re.M)
        if m:
            keys = re.findall(r'"([^"]+)"', m.group(1))
            more = f" (+{len(keys) - 3} more)" if len(keys) > 3 else ""
            parts.append(f"{label} keys {', '.join(keys[:3])}{more}")
    sizes = re.findall(r"size mismatch for ([^:]+):", message)
    if sizes:
        parts.append(f"wrong shapes for {', '.join(sizes[:3])}")
    return "; ".join(parts) or message.strip().splitlines()[0][:160]


# ------------------------------------------------------------------ command line

PROG = "python -m catlib audit"
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("path", metavar="PATH",
                        help="a state_dict file of the published CAT (torch.save(model.state_dict(), "
                             "PATH)) or a catlib run directory")
    parser.add_argument("--basis", choices=BASES, default=None,
                        help="basis of a state_dict file, which does not record it (default: fourier)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--device", choices=DEVICES, default="auto",
                        help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    parser.add_argument("--no-nfe", action="store_true",
                        help="skip the dopri5 evaluation count of defect 6 (the slowest measurement)")
    return parser


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``audit`` command to ``catlib.cli``'s subparsers; it sets ``func`` to
    :func:`run_command`, which prints its own errors and returns the exit status."""
    p = subparsers.add_parser("audit", help="measure the ten published defects on a CAT checkpoint",
                              description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=run_command)
    return p


DESCRIPTION = ("Measure the ten defects of the published CAT (ALGORITHM.md) on a model: a "
               "state_dict saved from the published script, or a catlib run directory. Prints "
               "one row per defect: whether the model shows it and the measured number.")


def run_command(args, prog: str = PROG) -> int:
    """Run the audit for parsed arguments; 0 on success, 2 (one line on stderr) for bad input."""
    try:
        device = resolve_device(args.device)
        loaded = load_for_audit(args.path, args.basis, device)
        findings = audit_model(loaded.model, loaded.baseline, nfe=not args.no_nfe)
    except (AuditError, DeviceError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(audit_to_json(findings, **loaded.describe()))
        return 0
    c = loaded.model.config
    print(f"CAT audit of {args.path}: D {c.d_model}, {c.n_heads} heads, n_freq {c.n_freq}, "
          f"{c.blocks} block{'s' * (c.blocks > 1)}, Q {c.quad_nodes}, V {c.vocab_size}")
    for note in loaded.notes:
        print(f"note: {note}")
    print(format_audit(findings))
    shown = [f.defect for f in findings if f.shows]
    print(f"shows {len(shown)} of {len(findings)}: {', '.join(map(str, shown)) or 'none'} "
          f"(7 is the evaluation protocol's: catlib evaluates in eval mode)")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m catlib.audit PATH [--basis ...] [--json] [--device ...]``."""
    parser = add_arguments(_Parser(prog="python -m catlib.audit", description=DESCRIPTION))
    args = parser.parse_args(argv)
    return run_command(args, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
