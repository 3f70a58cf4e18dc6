"""The refinement test: a CAT that is an ODE converges under finer solvers; one whose
blocks act as one large discrete step reports a drift."""

import pytest
import torch

from catlib import CAT, CATConfig
from catlib.book.depth import depth_markdown, depth_table
from catlib.measure.refinement import refinement, solved_with, solver_label


def _cat(scale: float, solver: str = "rk4-classic", steps: int = 1) -> CAT:
    torch.manual_seed(0)
    cfg = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=6, quad_nodes=16,
                    dropout=0.0, solver=solver, solver_steps=steps)
    model = CAT(cfg).double()
    with torch.no_grad():  # stiffer dynamics: the feed-forward's output scaled
        model.blocks[0].ff[2].weight.mul_(scale)
    return model


def _val(n: int = 400) -> torch.Tensor:
    return torch.randint(0, 65, (n,), generator=torch.Generator().manual_seed(1))


def test_labels_say_method_and_steps():
    assert solver_label("rk4-classic", 4) == "rk4-classic x4"
    assert solver_label("euler", 16) == "euler x16"
    assert solver_label("dopri5", rtol=1e-5) == "dopri5 rtol 1e-05"


def test_a_smooth_ode_converges_at_fourth_order():
    model, val = _cat(scale=6.0), _val()
    steps = (1, 2, 4, 8)
    r = refinement(model, val, 32, 4, finer=[("rk4-classic", s) for s in steps[1:]])
    ce = [r["ce_by_solver"][f"rk4-classic x{s}"] for s in steps]
    gaps = [abs(a - b) for a, b in zip(ce, ce[1:])]
    # RK4's error shrinks ~16x per halving of the step; ask for a clear contraction only.
    assert gaps[0] > 0 and gaps[1] < gaps[0] / 4 and gaps[2] < gaps[1] / 4, gaps
    assert r["trained_solver"] == "rk4-classic x1"
    assert r["drift"] == pytest.approx(ce[-1] - ce[0], abs=1e-12)


def test_one_large_step_reports_a_drift_and_the_solver_is_restored():
    model, val = _cat(scale=6.0, solver="euler", steps=1), _val()
    before = model.config
    r = refinement(model, val, 32, 4)
    # Euler x1 against RK4 x4 and Euler x16: well beyond float64 rounding.
    assert abs(r["drift"]) > 1e-3, r
    assert abs(r["ce_by_solver"]["rk4-classic x4"] - r["ce_by_solver"]["euler x16"]) < abs(r["drift"])
    assert model.config is before


def test_solver_restored_after_an_error():
    model = _cat(scale=1.0)
    with pytest.raises(RuntimeError):
        with solved_with(model, "euler", 3):
            assert model.config.solver_steps == 3
            raise RuntimeError("boom")
    assert model.config.solver == "rk4-classic" and model.config.solver_steps == 1


def test_a_baseline_is_refused():
    from catlib import Baseline
    with pytest.raises(TypeError, match="CAT model"):
        refinement(Baseline(CATConfig(variant="causal", d_model=16, n_heads=2)), _val(), 32, 2)


def test_depth_table_lists_every_seed_and_refuses_mixed_solvers():
    a = {"trained_solver": "rk4-classic x1", "reference": "rk4-classic x4",
         "ce_by_solver": {"rk4-classic x1": 2.0, "rk4-classic x4": 2.1}, "drift": 0.1}
    b = dict(a, ce_by_solver={"rk4-classic x1": 2.2, "rk4-classic x4": 2.2}, drift=0.0)
    table = depth_table({"row": [a, b]})
    assert table == {"row": {"trained_solver": "rk4-classic x1", "reference": "rk4-classic x4",
                             "drift": [0.1, 0.0],
                             "ce_by_solver": {"rk4-classic x1": [2.0, 2.2], "rk4-classic x4": [2.1, 2.2]}}}
    with pytest.raises(ValueError, match="different solvers"):
        depth_table({"row": [a, dict(b, trained_solver="rk4-classic x2")]})


def test_depth_columns_run_from_the_coarsest_solver_to_the_reference():
    # Catches columns in the order the rows happen to list them: a midpoint-trained row
    # after an RK4 one put "midpoint x2" after the reference "rk4-classic x4".
    rk4 = {"trained_solver": "euler x1", "reference": "rk4-classic x4", "drift": [0.1],
           "ce_by_solver": {"euler x1": [2.0], "euler x16": [2.1], "rk4-classic x4": [2.1]}}
    mid = {"trained_solver": "midpoint x2", "reference": "rk4-classic x4", "drift": [0.0],
           "ce_by_solver": {"midpoint x2": [1.9], "rk4-classic x2": [1.9], "rk4-classic x4": [1.9]}}
    header = depth_markdown({"a": rk4, "b": mid}).splitlines()[0]
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == ["row", "trained with", "euler x1", "euler x16", "midpoint x2",
                       "rk4-classic x2", "rk4-classic x4", "drift"], columns


def test_a_model_trained_with_one_step_reports_a_drift(corpus):
    # Catches a refinement test that cannot see a trained discretisation: a CAT trained
    # with one Euler step drifts when the same weights are solved finely, and the ODE row
    # it is compared with (trained with the step drawn from {1, 2}) has its own labels.
    from catlib.training.loop import SideBySide, TrainConfig, train_loop

    cfg = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, quad_nodes=16, dropout=0.0,
                    solver="euler", solver_steps=1)
    trainer = SideBySide(cfg, TrainConfig(train_steps=60, lr=1e-2, batch=4, seq=32, models=("cat",)),
                         corpus.train)
    train_loop(trainer, log=lambda m: None, echo=None, progress=False)
    r = refinement(trainer.cat, corpus.val, 32, 8)
    assert r["trained_solver"] == "euler x1"
    assert abs(r["drift"]) > 1e-3, r


def test_the_reference_is_finer_than_rk4_x4():
    # Catches a reference equal to the trained solver: a CAT trained with RK4 x4 (the paper
    # profile's solver) was compared with RK4 x4 itself, a drift of exactly 0.0 whatever
    # the weights. With its feed-forward scaled x50 the depth is stiff: a finer solver moves it.
    model, val = _cat(scale=50.0, steps=4), _val()
    r = refinement(model, val, 32, 4)
    assert r["trained_solver"] == "rk4-classic x4"
    assert abs(r["drift"]) > 1e-6, r
    assert r["reference"] == "rk4-classic x8"
    assert r["drift"] == r["ce_by_solver"]["rk4-classic x8"] - r["ce_by_solver"]["rk4-classic x4"]


@pytest.mark.parametrize("solver, steps, reference", [
    ("rk4-classic", 1, "rk4-classic x4"), ("rk4-classic", 2, "rk4-classic x4"),
    ("rk4-classic", 4, "rk4-classic x8"), ("rk4-classic", 8, "rk4-classic x16"),
    ("euler", 16, "rk4-classic x32"), ("midpoint", 2, "rk4-classic x4"),
    ("midpoint", 4, "rk4-classic x8")])
def test_the_ladder_starts_above_every_trained_solver(solver, steps, reference):
    from catlib.measure.refinement import finer_solvers
    ladder = finer_solvers(solver, steps)
    assert solver_label(*ladder[-1]) == reference
    assert ladder[-1][1] > steps


def test_an_adaptive_solver_is_refused():
    with pytest.raises(ValueError, match="fixed-step"):
        refinement(_cat(scale=1.0, solver="dopri5"), _val(), 32, 2)


def test_the_ode_rule_is_one_bound_for_both_chapters():
    # Catches chapter 9's moonshot reading another bound than chapter 8's rule.
    from catlib.book import context_use as cu
    from catlib.measure.refinement import ODE_DRIFT, is_ode
    assert is_ode(ODE_DRIFT) and is_ode(-ODE_DRIFT) and not is_ode(1.01 * ODE_DRIFT)
    assert cu.MOONSHOT_DRIFT == ODE_DRIFT
