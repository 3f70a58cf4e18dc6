"""Depth solvers: order of accuracy, tolerances, NFE counting."""

import math

import pytest
import torch
import torch.nn as nn

import catlib
from catlib.nn.solvers import SOLVERS, integrate


class Growth(nn.Module):
    """dy/dt = rate * y, y(t) = y0 exp(rate t); counts its own calls."""

    def __init__(self, rate=1.0):
        super().__init__()
        self.rate = nn.Parameter(torch.tensor(rate, dtype=torch.float64))
        self.calls = 0

    def forward(self, t, y):
        self.calls += 1
        return self.rate * y


def _error(solver, steps, **kw):
    y0 = torch.ones(3, dtype=torch.float64)
    with torch.no_grad():
        y1, _ = integrate(Growth(), y0, solver=solver, steps=steps, adjoint=False, **kw)
    return float((y1.detach() - math.e).abs().max())


def test_registry():
    assert {"dopri5", "rk4-classic", "midpoint", "euler"} <= set(SOLVERS)


@pytest.mark.parametrize("steps", [4, 8, 16, 32])
def test_rk4_classic_fourth_order(steps):
    # Error ratio when halving the step: 2^4 = 16 asymptotically (14.4 at 4 -> 8 steps).
    ratio = _error("rk4-classic", steps) / _error("rk4-classic", 2 * steps)
    assert 14.0 < ratio < 17.0, ratio


def test_rk4_classic_one_step_is_the_taylor_polynomial():
    # One classical RK4 step on y' = y gives exactly 1 + h + h^2/2 + h^3/6 + h^4/24.
    h = 0.25
    y1, _ = integrate(Growth(), torch.ones(1, dtype=torch.float64), solver="rk4-classic",
                      t1=h, steps=1, adjoint=False)
    assert float(y1.detach()) == pytest.approx(1 + h + h ** 2 / 2 + h ** 3 / 6 + h ** 4 / 24, rel=1e-15)


def test_rk4_classic_is_not_the_three_eighths_rule():
    # On y' = t^4 one classical RK4 step is Simpson's rule: (0 + 4 (1/2)^4 + 1) / 6 = 5/24.
    # torchdiffeq's "rk4" (the 3/8 rule) would give 11/54 instead.
    f = lambda t, y: torch.as_tensor(t, dtype=torch.float64) ** 4 * torch.ones_like(y)  # noqa: E731
    y1, _ = integrate(f, torch.zeros(1, dtype=torch.float64), solver="rk4-classic", steps=1,
                      adjoint=False)
    assert float(y1.detach()) == pytest.approx(5 / 24, rel=1e-14)


def test_rk4_classic_uses_time_correctly():
    # Non-autonomous: y' = cos(t) y on [0.5, 2], y = y0 exp(sin t - sin 0.5).
    f = lambda t, y: math.cos(float(t)) * y  # noqa: E731
    y0 = torch.full((2,), 1.5, dtype=torch.float64)
    exact = 1.5 * math.exp(math.sin(2.0) - math.sin(0.5))
    errs = [float((integrate(f, y0, solver="rk4-classic", t0=0.5, t1=2.0, steps=s,
                             adjoint=False)[0] - exact).abs().max()) for s in (16, 32)]
    assert errs[0] < 1e-6 and 15 < errs[0] / errs[1] < 18


@pytest.mark.parametrize("steps", [4, 16])
def test_midpoint_second_order(steps):
    # Error ratio when halving the step: 2^2 = 4 asymptotically.
    ratio = _error("midpoint", steps) / _error("midpoint", 2 * steps)
    assert 3.6 < ratio < 4.3, ratio
    # One midpoint step on y' = y is the second-order Taylor polynomial, 1 + h + h^2/2.
    h = 0.25
    y1, _ = integrate(Growth(), torch.ones(1, dtype=torch.float64), solver="midpoint",
                      t1=h, steps=1, adjoint=False)
    assert float(y1.detach()) == pytest.approx(1 + h + h ** 2 / 2, rel=1e-15)


def test_midpoint_reads_time_at_the_half_step():
    # On y' = t^2 one midpoint step from 0 to 1 gives f(1/2) = 1/4 (the exact integral is 1/3):
    # it evaluates the midpoint, not the ends.
    f = lambda t, y: torch.as_tensor(t, dtype=torch.float64) ** 2 * torch.ones_like(y)  # noqa: E731
    y1, _ = integrate(f, torch.zeros(1, dtype=torch.float64), solver="midpoint", steps=1,
                      adjoint=False)
    assert float(y1.detach()) == pytest.approx(1 / 4, rel=1e-15)


@pytest.mark.parametrize("steps", [4, 16])
def test_euler_first_order(steps):
    ratio = _error("euler", steps) / _error("euler", 2 * steps)
    assert 1.8 < ratio < 2.1, ratio
    # Euler's value is (1 + 1/N)^N exactly.
    y1, _ = integrate(Growth(), torch.ones(1, dtype=torch.float64), solver="euler",
                      steps=steps, adjoint=False)
    assert float(y1.detach()) == pytest.approx((1 + 1 / steps) ** steps, rel=1e-14)


@pytest.mark.parametrize("adjoint", [False, True])
def test_dopri5_meets_tolerance(adjoint):
    y0 = torch.ones(3, dtype=torch.float64)
    y1, counter = integrate(Growth(), y0, solver="dopri5", rtol=1e-7, atol=1e-9, adjoint=adjoint)
    assert float((y1.detach() - math.e).abs().max()) < 1e-6
    tight, _ = integrate(Growth(), y0, solver="dopri5", rtol=1e-11, atol=1e-13, adjoint=adjoint)
    assert float((tight.detach() - math.e).abs().max()) < 1e-9
    # Forward evaluations must not be booked as backward ones, and the backward count must
    # move only when a backward pass really calls the dynamics (the adjoint does; direct
    # backpropagation replays the graph). Catches a counter that never switches to
    # "backward", or one that counts the forward solve there too.
    assert counter.nfe_forward > 0 and counter.nfe_backward == 0
    nfe_forward = counter.nfe_forward
    y1.sum().backward()
    assert counter.nfe_forward == nfe_forward
    assert (counter.nfe_backward > 0) if adjoint else (counter.nfe_backward == 0)


@pytest.mark.parametrize("adjoint", [False, True])
def test_dopri5_gradient(adjoint):
    func = Growth(1.0)
    y1, counter = integrate(func, torch.ones(1, dtype=torch.float64), solver="dopri5",
                            rtol=1e-10, atol=1e-12, adjoint=adjoint)
    forward_calls = func.calls
    assert counter.nfe_forward == forward_calls
    y1.sum().backward()
    # d/d rate of exp(rate) at rate = 1 is e.
    assert float(func.rate.grad) == pytest.approx(math.e, rel=1e-7)
    if adjoint:
        assert counter.nfe_backward == func.calls - forward_calls > 0
    else:
        assert counter.nfe_backward == 0 and func.calls == forward_calls


@pytest.mark.parametrize("solver,steps,expected", [
    ("rk4-classic", 4, 16), ("rk4-classic", 1, 4), ("rk4-classic", 7, 28),
    ("euler", 1, 1), ("euler", 4, 4), ("euler", 13, 13),
    ("midpoint", 1, 2), ("midpoint", 3, 6),
])
def test_fixed_step_nfe_exact(solver, steps, expected):
    func = Growth()
    y1, counter = integrate(func, torch.ones(2, dtype=torch.float64), solver=solver,
                            steps=steps, adjoint=False)
    assert counter.nfe_forward == expected == func.calls
    y1.sum().backward()  # direct backpropagation calls nothing more
    assert counter.nfe_backward == 0 and func.calls == expected


@pytest.mark.parametrize("adjoint", [False, True])
def test_reused_counter_reports_each_solve_alone(adjoint):
    """integrate resets every count of a counter passed in: two RK4 x1 solves report 4 each."""
    from catlib.nn.solvers import CountedDynamics
    counter = CountedDynamics(Growth())
    reports = []
    for _ in range(2):
        y0 = torch.ones(2, dtype=torch.float64, requires_grad=True)
        y1, same = integrate(counter, y0, solver="rk4-classic", steps=1, adjoint=adjoint)
        assert same is counter
        y1.sum().backward()
        reports.append((counter.nfe_forward, counter.nfe_backward, counter.steps_forward,
                        counter.steps_backward))
    assert reports[0] == reports[1] == (4, 0, 0, 0)
    counter.nfe_backward, counter.steps_backward = 5, 3   # as an adjoint's backward leaves them
    integrate(counter, torch.ones(2, dtype=torch.float64), solver="euler", steps=2, adjoint=False)
    assert (counter.nfe_forward, counter.nfe_backward, counter.steps_backward) == (2, 0, 0)


def test_unknown_solver():
    with pytest.raises(ValueError, match="solver"):
        integrate(Growth(), torch.ones(1), solver="rk45")


# ---- NFE as exposed by the model --------------------------------------------------

def _small_cat(**kw):
    cfg = dict(vocab_size=11, d_model=16, n_heads=2, n_freq=4, quad_nodes=8)
    cfg.update(kw)
    return catlib.CAT(catlib.CATConfig(**cfg))


@pytest.mark.parametrize("solver,steps,per_block", [("rk4-classic", 4, 16), ("euler", 5, 5),
                                                    ("rk4-classic", 2, 8)])
@pytest.mark.parametrize("blocks", [1, 2])
def test_model_nfe_fixed_step(solver, steps, per_block, blocks):
    torch.manual_seed(0)
    model = _small_cat(solver=solver, solver_steps=steps, blocks=blocks)
    tokens = torch.randint(0, 11, (2, 6))
    logits, pen = model(tokens)
    assert model.nfe == {"forward": per_block * blocks, "backward": 0}
    (logits.sum() + pen).backward()
    assert model.nfe == {"forward": per_block * blocks, "backward": 0}
    # The next forward pass resets the counts instead of accumulating them.
    model(tokens)
    assert model.nfe["forward"] == per_block * blocks


def test_model_nfe_dopri5_adjoint():
    torch.manual_seed(0)
    model = _small_cat(solver="dopri5", adjoint=True).eval()
    tokens = torch.randint(0, 11, (1, 5))
    logits, pen = model(tokens)
    nfe = model.nfe
    assert nfe["forward"] >= 8 and (nfe["forward"] - 2) % 6 == 0 and nfe["backward"] == 0
    logits.sum().backward()
    assert model.nfe["forward"] == nfe["forward"] and model.nfe["backward"] > 0


# ---- the step cap, forward and backward -------------------------------------------

def _dopri5_steps(nfe):
    # torchdiffeq's dopri5: 2 evaluations choose the first step, then 6 per attempted step.
    assert (nfe - 2) % 6 == 0, nfe
    return (nfe - 2) // 6


@pytest.mark.parametrize("seminorm", [False, True])
def test_max_steps_caps_the_adjoint_backward_solve(seminorm):
    # y' = y, rtol 1e-7: the forward solve takes 7 steps, the adjoint's backward solve 13
    # (8 with the seminorm). With max_steps = 7 the forward finishes and the backward must
    # stop with the library's RuntimeError. Catches (a) a cap passed to the forward solve
    # only (with the seminorm the backward then runs on past it) and (b) torchdiffeq's raw
    # AssertionError escaping from loss.backward().
    _, free = integrate(Growth(), torch.ones(3, dtype=torch.float64), solver="dopri5",
                        adjoint_seminorm=seminorm)
    cap = _dopri5_steps(free.nfe_forward)
    assert cap == 7
    y1, counter = integrate(Growth(), torch.ones(3, dtype=torch.float64), solver="dopri5",
                            adjoint_seminorm=seminorm, max_steps=cap)
    assert counter.nfe_forward == free.nfe_forward  # a cap of exactly the steps taken is met
    with pytest.raises(RuntimeError, match=r"max_steps=7 steps in the backward \(adjoint\) solve"):
        y1.sum().backward()
    # The counts stay readable: the backward stopped before its 8th step.
    assert counter.nfe_backward == 2 + 6 * cap


def test_max_steps_caps_the_forward_solve():
    # One step fewer than the solve needs: the forward stops with the clear error.
    counter = catlib.nn.solvers.CountedDynamics(Growth())
    with pytest.raises(RuntimeError, match=r"max_steps=6 steps in the forward solve"):
        integrate(counter, torch.ones(3, dtype=torch.float64), solver="dopri5", max_steps=6)
    assert counter.nfe_forward == 2 + 6 * 6


def test_model_max_steps_caps_backward_and_keeps_nfe():
    # A small causal CAT under dopri5 (rtol 1e-4): the forward takes 3 steps, the adjoint
    # backward (no seminorm) 5. Capped at 3, loss.backward() must raise the library's
    # RuntimeError, and cat.nfe must still report both passes.
    torch.manual_seed(0)
    model = _small_cat(variant="causal", solver="dopri5", rtol=1e-4, atol=1e-6).eval()
    tokens = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    logits, _ = model(tokens)
    cap = _dopri5_steps(model.nfe["forward"])
    logits.square().sum().backward()
    assert _dopri5_steps(model.nfe["backward"]) > cap == 3
    model.zero_grad()
    model.config.max_steps = cap
    logits, _ = model(tokens)
    with pytest.raises(RuntimeError, match="max_steps=3 steps in the backward"):
        logits.square().sum().backward()
    assert model.nfe == {"forward": 2 + 6 * cap, "backward": 2 + 6 * cap}


def test_max_steps_applies_to_each_backward_pass():
    # y' = y with the seminorm: 7 forward steps, 8 backward ones. A cap of 8 allows every
    # backward pass. Catches a backward step count that accumulates over passes (the
    # second loss.backward(retain_graph=True) would then stop at "16 > 8").
    y1, counter = integrate(Growth(), torch.ones(3, dtype=torch.float64), solver="dopri5",
                            adjoint_seminorm=True, max_steps=8)
    for _ in range(2):
        y1.sum().backward(retain_graph=True)
        assert counter.steps_forward == 7 and counter.steps_backward == 8


def test_seminorm_backward_keeps_the_time_dtype(monkeypatch):
    # With the seminorm, torchdiffeq takes adjoint_options alone for the backward solve.
    # Catches adjoint_options that carry only the norm: the backward then keeps time in
    # float64, which MPS cannot hold (the forward's float32 time is there for MPS).
    import catlib.nn.solvers as solvers

    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return solvers.odeint_adjoint.__wrapped__(*args, **kwargs)

    spy.__wrapped__ = solvers.odeint_adjoint
    monkeypatch.setattr(solvers, "odeint_adjoint", spy)
    integrate(Growth(), torch.ones(1, dtype=torch.float64), solver="dopri5",
              adjoint_seminorm=True, max_steps=50)
    assert seen["adjoint_options"]["norm"] == "seminorm"
    assert seen["adjoint_options"]["dtype"] == seen["options"]["dtype"]


def test_the_default_solver_is_resolved_with_the_device():
    # Catches an MPS default that only the command line applies (the API got dopri5 there).
    from catlib.nn.config import CATConfig, default_solver
    assert CATConfig().solver is None
    assert CATConfig().resolved().solver == "dopri5"
    assert CATConfig().resolved("mps").solver == "rk4-classic"
    assert CATConfig().resolved(torch.device("cpu")).solver == "dopri5"
    assert CATConfig(solver="euler").resolved("mps").solver == "euler"   # a given one stays
    assert default_solver("cuda:0") == "dopri5"


def test_torchdiffeq_is_imported_by_the_first_adaptive_solve_only():
    # Catches an import of torchdiffeq (and with it scipy.integrate, about 1 s) in every
    # process that imports catlib: kernels, workers and commands that never use dopri5.
    import subprocess
    import sys
    code = ("import sys, torch, catlib; from catlib.nn import solvers; "
            "before = 'torchdiffeq' in sys.modules; "
            "solvers.integrate(lambda t, y: -y, torch.ones(2), 'dopri5'); "
            "print(before, 'torchdiffeq' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stdout + out.stderr
