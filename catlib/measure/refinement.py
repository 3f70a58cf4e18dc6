"""The refinement test: is a trained CAT an ODE, or a fixed discrete computation?

A model whose blocks learned the right-hand side of an ODE gives (nearly) the same
output when the same weights are integrated with a finer solver; a model that learned
to exploit one discretisation does not (Ott et al., ICLR 2021). :func:`refinement`
evaluates one CAT under its trained solver and under finer ones and reports the CE of
each and the drift CE(reference) - CE(trained). The reference, the ladder's last and most
accurate solver, is always strictly finer than the trained one: RK4 with more steps than
the trained solver takes (:func:`finer_solvers`), so that a discrete model can fail.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..nn.model import solved_with
from .evaluate import cross_entropy

# The finer solvers of the book's test as (method, fixed step count), ordered by accuracy,
# the last the reference: Euler x16 (first order, step 1/16) is the cheap independent
# check, RK4 x4 (fourth order, step 1/4) the most accurate. dopri5 is left out: at the
# cpu profile's sizes it costs tens of evaluations per window where these agree already.
# This is the ladder of a model trained with fewer than 4 steps; :func:`finer_solvers`
# doubles its step counts until the reference takes more steps than the trained solver.
FINER = (("euler", 16), ("rk4-classic", 2), ("rk4-classic", 4))
# The order of accuracy of each fixed-step method: the reference must have at least the
# trained method's order (and more steps) to be finer.
ORDER = {"euler": 1, "midpoint": 2, "rk4-classic": 4}
# The book's rule (chapters 8 and 9): a CAT whose mean drift is within this many nats of
# its reference is an ODE (its output does not depend on the discretisation beyond that).
ODE_DRIFT = 0.01


def is_ode(drift: float) -> bool:
    """Whether a (mean) refinement drift is within :data:`ODE_DRIFT` of 0."""
    return abs(drift) <= ODE_DRIFT


def solver_label(solver: str, steps: int | None = None, rtol: float | None = None) -> str:
    """A label that says the method and its step count, or dopri5's tolerance:
    "rk4-classic x4", "dopri5 rtol 1e-05" (``rtol`` is read for dopri5 only)."""
    if solver == "dopri5":
        return f"dopri5 rtol {rtol:g}" if rtol is not None else "dopri5"
    return f"{solver} x{steps}"


def accuracy_key(label: str) -> tuple:
    """Sort key of a :func:`solver_label` ("rk4-classic x4"), from the coarsest solver to
    the finest: by the method's order of accuracy (:data:`ORDER`), then its step count; a
    label of no fixed-step method ("dopri5 rtol 1e-05") last."""
    method, _, steps = label.partition(" x")
    return (0, ORDER[method], int(steps)) if method in ORDER and steps.isdigit() else (1, 0, 0)


def finer_solvers(solver: str, steps: int, finer: Sequence[tuple[str, int]] = FINER) -> list[tuple[str, int]]:
    """The ladder of a model trained with ``solver`` at ``steps`` steps: ``finer`` ((method,
    steps) pairs, the last the reference) with every step count multiplied by the smallest
    power of two that gives the reference more steps than the trained solver, so that the
    reference is strictly finer (e.g. RK4 x1 and x2: ``FINER`` as it is; RK4 x4: Euler x32,
    RK4 x4 and RK4 x8)."""
    if solver not in ORDER:
        raise ValueError(f"the refinement test compares fixed-step solvers {sorted(ORDER)}, but the "
                         f"model is solved with {solver!r}; evaluate it with solved_with(model, "
                         f"'rk4-classic', steps) and test that")
    if not finer:
        raise ValueError("the refinement test needs at least one finer solver (the reference, last)")
    reference = finer[-1][0]
    if ORDER.get(reference, 0) < ORDER[solver]:
        raise ValueError(f"the reference {reference!r} (the last of finer) is of lower order than the "
                         f"trained {solver!r}, so it is not finer; end finer with ('rk4-classic', steps)")
    scale = 1
    while finer[-1][1] * scale <= steps:
        scale *= 2
    return [(method, n * scale) for method, n in finer]


def refinement(model: torch.nn.Module, val: torch.Tensor, length: int, eval_windows: int,
               finer: Sequence[tuple[str, int]] = FINER, **evaluation) -> dict:
    """CE of ``model`` on ``eval_windows`` windows of ``length`` tokens of ``val [N]`` under
    its trained solver and each of the ladder :func:`finer_solvers` makes of ``finer``
    ((method, steps) pairs, the last the most accurate: the reference, strictly finer than
    the trained solver).

    Returns ``{"trained_solver": label, "reference": label, "ce_by_solver": {label: CE},
    "drift": CE(reference) - CE(trained)}``; ``evaluation`` goes to
    :func:`catlib.measure.evaluate.cross_entropy` (``batch_tokens``, ``device``). A solver of the
    ladder that the model was trained with is evaluated once.
    """
    cfg = model.config
    if not hasattr(cfg, "solver") or not hasattr(model, "blocks"):
        raise TypeError("refinement needs a CAT model (catlib.CAT); a baseline has no depth solver")
    ladder = finer_solvers(cfg.solver, cfg.solver_steps, finer)
    trained = solver_label(cfg.solver, cfg.solver_steps, cfg.rtol)
    ce = {trained: _ce(model, val, length, eval_windows, evaluation)}
    for solver, steps in ladder:
        label = solver_label(solver, steps)
        if label not in ce:
            with solved_with(model, solver, steps):
                ce[label] = _ce(model, val, length, eval_windows, evaluation)
    reference = solver_label(*ladder[-1])
    return {"trained_solver": trained, "reference": reference, "ce_by_solver": ce,
            "drift": ce[reference] - ce[trained]}


def _ce(model, val, length: int, eval_windows: int, evaluation: dict) -> float:
    result = cross_entropy(model, val, length, eval_windows=eval_windows, **evaluation)
    if "skipped" in result:
        raise ValueError(f"refinement at length {length}: {result['skipped']}; "
                         f"choose a shorter length")
    return result["ce"]
