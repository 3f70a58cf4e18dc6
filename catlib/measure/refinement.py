"""The refinement test: is a trained CAT an ODE, or a fixed discrete computation?

A model whose blocks learned the right-hand side of an ODE gives (nearly) the same
output when the same weights are integrated with a finer solver; a model that learned
to exploit one discretisation does not (Ott et al., ICLR 2021). :func:`refinement`
evaluates one CAT under its trained solver and under finer ones and reports the CE of
each and the drift CE(reference) - CE(trained), the reference RK4 with four steps.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .evaluate import cross_entropy
from ..nn.model import solved_with

# The finer solvers of the book's test as (method, fixed step count), ordered by accuracy,
# the last the reference: Euler x16 (first order, step 1/16) is the cheap independent
# check, RK4 x4 (fourth order, step 1/4) the most accurate. dopri5 is left out: at the
# cpu profile's sizes it costs tens of evaluations per window where these agree already.
FINER = (("euler", 16), ("rk4-classic", 2), ("rk4-classic", 4))


def solver_label(solver: str, steps: int | None = None, rtol: float | None = None) -> str:
    """A label that says the method and its step count, or dopri5's tolerance:
    "rk4-classic x4", "dopri5 rtol 1e-05" (``rtol`` is read for dopri5 only)."""
    if solver == "dopri5":
        return f"dopri5 rtol {rtol:g}" if rtol is not None else "dopri5"
    return f"{solver} x{steps}"


def refinement(model: torch.nn.Module, val: torch.Tensor, length: int, eval_windows: int,
               finer: Sequence[tuple[str, int]] = FINER, **evaluation) -> dict:
    """CE of ``model`` on ``eval_windows`` windows of ``length`` tokens of ``val [N]`` under
    its trained solver and each of ``finer`` ((method, steps) pairs, the last the most
    accurate: the reference).

    Returns ``{"trained_solver": label, "ce_by_solver": {label: CE}, "drift": CE(reference)
    - CE(trained)}``; ``evaluation`` goes to :func:`catlib.measure.evaluate.cross_entropy`
    (``batch_tokens``, ``device``). A solver the model was trained with is evaluated once.
    """
    cfg = model.config
    if not hasattr(cfg, "solver") or not hasattr(model, "blocks"):
        raise TypeError("refinement needs a CAT model (catlib.CAT); a baseline has no depth solver")
    trained = solver_label(cfg.solver, cfg.solver_steps, cfg.rtol)
    ce = {trained: _ce(model, val, length, eval_windows, evaluation)}
    for solver, steps in finer:
        label = solver_label(solver, steps)
        if label not in ce:
            with solved_with(model, solver, steps):
                ce[label] = _ce(model, val, length, eval_windows, evaluation)
    finest = solver_label(*finer[-1]) if finer else trained
    return {"trained_solver": trained, "ce_by_solver": ce, "drift": ce[finest] - ce[trained]}


def _ce(model, val, length: int, eval_windows: int, evaluation: dict) -> float:
    result = cross_entropy(model, val, length, eval_windows=eval_windows, **evaluation)
    if "skipped" in result:
        raise ValueError(f"refinement at length {length}: {result['skipped']}; "
                         f"choose a shorter length")
    return result["ce"]
