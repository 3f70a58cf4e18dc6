"""Depth solvers: integrate dh/dtau = f(h) from tau = t0 to t1, chosen by name.

``SOLVERS`` maps a name to a function ``solve(func, y0, t0, t1, options) -> y1``:

- ``dopri5``: torchdiffeq's adaptive Dormand-Prince, through the adjoint or by
  direct backpropagation (the published CPU/CUDA path);
- ``rk4-classic``: classical RK4 (weights 1/6, 1/3, 1/3, 1/6) with a fixed
  number of equal steps, the published MPS integrator. torchdiffeq's own
  ``rk4`` is the 3/8 rule and differs;
- ``midpoint``: the explicit midpoint rule (second order, two evaluations a step) with
  a fixed number of equal steps;
- ``euler``: forward Euler with a fixed number of steps.

Every solve counts its function evaluations (NFE), forward and backward.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Sequence

import torch
import torch.nn as nn

from .config import CATConfig

# The defaults of a solve are CATConfig's (the published script's), written once there.
_DEFAULT = {f.name: f.default for f in fields(CATConfig)}


@dataclass
class SolveOptions:
    """Settings of one solve. ``steps`` is for fixed-step solvers; ``max_steps`` caps dopri5."""

    rtol: float = _DEFAULT["rtol"]
    atol: float = _DEFAULT["atol"]
    adjoint: bool = _DEFAULT["adjoint"]
    adjoint_seminorm: bool = _DEFAULT["adjoint_seminorm"]
    steps: int = _DEFAULT["solver_steps"]
    max_steps: int | None = _DEFAULT["max_steps"]
    adjoint_params: Sequence[torch.Tensor] | None = None


class CountedDynamics(nn.Module):
    """Wraps dynamics ``func(t, y)``, counts its evaluations and dopri5's steps, enforces the cap.

    Calls made while the forward solve runs count as ``nfe_forward``; calls
    made afterwards (the adjoint's backward solve) count as ``nfe_backward``.
    Direct backpropagation replays the recorded graph and calls nothing.

    ``steps_forward`` / ``steps_backward`` count the steps dopri5 attempts (accepted or
    rejected) through torchdiffeq's step callbacks; the backward count restarts with every
    backward pass. More than ``max_steps`` in either solve raises a ``RuntimeError``. The
    cap is enforced here rather than by torchdiffeq's ``max_num_steps``: the backward solve
    runs inside ``loss.backward()``, where nothing of ours could turn torchdiffeq's bare
    AssertionError into a clear error, but these callbacks run in both solves.
    """

    def __init__(self, func: Callable, max_steps: int | None = None):
        super().__init__()
        self.func = func
        self.reset(max_steps)

    def reset(self, max_steps: int | None = None) -> None:
        """Zero every count (before a solve: a reused counter reports that solve alone)."""
        self.nfe_forward = self.nfe_backward = 0
        self.steps_forward = self.steps_backward = 0
        self.max_steps = max_steps
        self.in_forward_solve = True

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.in_forward_solve:
            self.nfe_forward += 1
        else:
            self.nfe_backward += 1
        return self.func(t, y)

    # torchdiffeq calls these before every attempted step of an adaptive solve.
    def callback_step(self, t0, y0, dt) -> None:
        self.steps_forward += 1
        self._check_cap(self.steps_forward, "forward solve", self.nfe_forward)

    def callback_step_adjoint(self, t0, y0, dt) -> None:
        self.steps_backward += 1
        self._check_cap(self.steps_backward, "backward (adjoint) solve", self.nfe_backward)

    def start_backward(self, grad: torch.Tensor | None = None) -> None:
        """Restart the backward step count (a hook on the solve's output calls it)."""
        self.steps_backward = 0

    def _check_cap(self, steps: int, which: str, nfe: int) -> None:
        if self.max_steps is not None and steps > self.max_steps:
            raise RuntimeError(
                f"dopri5 took more than max_steps={self.max_steps} steps in the {which} "
                f"({nfe} function evaluations); raise max_steps, loosen rtol/atol, or use a "
                f"fixed-step solver")


def __getattr__(name: str):
    """``odeint`` and ``odeint_adjoint``: torchdiffeq's, imported on first use."""
    if name in ("odeint", "odeint_adjoint"):
        return _torchdiffeq(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _torchdiffeq(name: str):
    """torchdiffeq's ``odeint`` or ``odeint_adjoint``, imported when an adaptive solve first
    needs it: torchdiffeq imports scipy.integrate, about 1 s in every process (a kernel, a
    worker, a command) that never solves adaptively. A replacement set on this module (a
    test's spy) is used as it is."""
    fn = globals().get(name)
    if fn is None:
        import torchdiffeq
        fn = globals()[name] = getattr(torchdiffeq, name)
    return fn


def _dopri5(func, y0, t0, t1, opt: SolveOptions):
    # max_steps is not passed to torchdiffeq: the counter enforces it in both solves.
    if not isinstance(func, CountedDynamics):   # integrate() passes one; direct callers may not
        func = CountedDynamics(func, opt.max_steps)
    times = torch.tensor([t0, t1], dtype=_time_dtype(y0), device=y0.device)
    options = {"dtype": _time_dtype(y0)}
    kwargs = dict(rtol=opt.rtol, atol=opt.atol, method="dopri5", options=options)
    if opt.adjoint:
        # Given adjoint_options, torchdiffeq uses them alone: repeat the time dtype (float32
        # on MPS) for the backward solve.
        adjoint_options = {**options, "norm": "seminorm"} if opt.adjoint_seminorm else None
        params = opt.adjoint_params
        odeint_adjoint = _torchdiffeq("odeint_adjoint")
        y1 = odeint_adjoint(func, y0, times, adjoint_options=adjoint_options,
                            adjoint_params=None if params is None else tuple(params), **kwargs)[-1]
        if y1.requires_grad:
            y1.register_hook(func.start_backward)   # runs just before each backward solve
        return y1
    return _torchdiffeq("odeint")(func, y0, times, **kwargs)[-1]


def _time_dtype(y0: torch.Tensor) -> torch.dtype:
    # torchdiffeq keeps time in float64, which MPS cannot hold.
    if y0.device.type == "mps":
        if y0.dtype == torch.float64:
            raise ValueError("float64 is not supported on MPS; use float32 (model.float()) or another device")
        return torch.float32
    return torch.float64


def _fixed_step(step: Callable):
    def solve(func, y0, t0, t1, opt: SolveOptions):
        dt = (t1 - t0) / opt.steps
        y = y0
        for i in range(opt.steps):
            y = step(func, t0 + i * dt, y, dt)
        return y
    return solve


def _rk4_classic_step(func, t, y, dt):
    k1 = func(t, y)
    k2 = func(t + dt / 2, y + dt / 2 * k1)
    k3 = func(t + dt / 2, y + dt / 2 * k2)
    k4 = func(t + dt, y + dt * k3)
    return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def _midpoint_step(func, t, y, dt):
    k1 = func(t, y)
    return y + dt * func(t + dt / 2, y + dt / 2 * k1)


def _euler_step(func, t, y, dt):
    return y + dt * func(t, y)


SOLVERS: dict[str, Callable] = {
    "dopri5": _dopri5,
    "rk4-classic": _fixed_step(_rk4_classic_step),
    "midpoint": _fixed_step(_midpoint_step),
    "euler": _fixed_step(_euler_step),
}


def integrate(func: Callable, y0: torch.Tensor, solver: str = "dopri5", t0: float = 0.0,
              t1: float = 1.0, **options) -> tuple[torch.Tensor, CountedDynamics]:
    """Integrate ``dy/dt = func(t, y)`` from ``t0`` to ``t1``; return ``(y(t1), counter)``.

    Args:
        func: dynamics ``(t [], y [...]) -> dy [...]``; an ``nn.Module`` (or give
            ``adjoint_params``) when the adjoint is used.
        y0: initial state, any shape.
        solver: a key of ``SOLVERS``.
        options: fields of :class:`SolveOptions` (rtol, atol, adjoint,
            adjoint_seminorm, steps, max_steps, adjoint_params).
    The counter's ``nfe_forward`` is final on return; ``nfe_backward`` grows
    while the adjoint runs during ``backward()``. A counter passed in is reset first:
    every count it reports is of this solve.
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {list(SOLVERS)}, got {solver!r}")
    opt = SolveOptions(**options)
    if opt.steps < 1:
        raise ValueError(f"steps must be >= 1, got {opt.steps!r}")
    # A caller that passes its own counter can read the count even if the solve fails.
    counter = func if isinstance(func, CountedDynamics) else CountedDynamics(func)
    counter.reset(opt.max_steps)
    if opt.adjoint_params is None and isinstance(counter.func, nn.Module):
        opt.adjoint_params = tuple(counter.func.parameters())
    y1 = SOLVERS[solver](counter, y0, t0, t1, opt)
    counter.in_forward_solve = False
    return y1, counter
