"""The ten measurements: one function per defect, each taking a :class:`catlib.CAT` (any
size, Fourier or Chebyshev basis, published or corrected) and returning a
:class:`~catlib.audit.findings.Finding`; :func:`audit_model` runs them all.

The measurements are small: tiny forward passes with classical RK4 (4 steps), except
defect 6, which is about the adaptive solver and runs dopri5 with a step cap and a time
cap. The model is never changed: every measurement works on a copy (its solver, mode and
dtype switched as needed) with torch's random state forked. What each number means is the
book's chapter "7. Audit: the ten defects, measured" (``book/notebooks/07_audit``).
"""
from __future__ import annotations

import dataclasses
import math
import time

import torch
import torch.nn.functional as F

from ..measure.evaluate import leak_score, seeded
from ..nn.baselines import Baseline
from ..nn.bases import basis
from ..nn.kernel import kernel_logits, sobolev_penalty
from ..nn.model import CAT
from ..nn.quadrature import neighbours
from ..training.schedule import penalty_weight
from .findings import DEFECTS, LONG_LENGTH, SOLVE, AuditError, Finding


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
    """Defect 1: the leak score (:func:`catlib.measure.evaluate.leak_score`) of the CAT, eval mode.

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
    work = _copy(baseline).cpu().double().eval()
    x = _tokens(work.config.vocab_size, 2, length, seed, "cpu")
    perm = torch.randperm(length, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        return (work(x)[0][:, perm] - work(x[:, perm])[0]).abs().max().item()


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
    name, formula, n = attn.basis_name, attn.kernels[0].penalty, attn.n_freq   # penalty kind
    unit = torch.eye(n * n, dtype=torch.float64).view(n * n, n, n)
    charged = torch.stack([sobolev_penalty(c[None], name, formula) for c in unit])
    exact = torch.stack([sobolev_penalty(c[None], name, "exact") for c in unit])
    flat = exact <= 1e-9 * exact.max()
    own = [a.stacked()[0].detach().cpu().double() for a in _attentions(model)]   # [h, n, n]
    own_model = sum(sobolev_penalty(c, name, formula).item() for c in own)
    own_exact = sum(sobolev_penalty(c, name, "exact").item() for c in own)
    return {"zero_curvature": charged[flat].max().item(),
            "linear": charged[n].item() if n > 1 else 0.0,
            "ratio": own_model / own_exact if own_exact > 0 else None,
            "basis": name, "penalty": formula}


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

