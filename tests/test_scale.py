"""The scale study (issue 40): budgets that get the FLOPs they claim, the deep Euler CAT's
cost, runs trained beside others equal to runs trained alone, a cut study resumed."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from catlib.book import profiles
from catlib.experiment import compute, scale
from catlib.experiment.scale_plan import ALIBI, ALIBI_DEEP, EULER, EULER_DEEP, KERPLE
from catlib.experiment.grid import _train_job
from catlib.runs import RunInterrupted, open_run, train_run


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _small(profile="smoke", steps=4, batch=2):
    e = profiles.experiment(profile)
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=batch))


def test_every_budget_gets_the_flops_it_claims(data, tmp_path):
    """The FLOPs that trained runs logged (each step's counted FLOPs at its logged solver
    count, :func:`~catlib.experiment.ladder.step_train_flops`), not the counter that chose
    the steps: every point within 5 % of its budget times the FLOPs that chapter 10's own
    KERPLE-prior CAT run logged at the experiment's steps; and the study's 1x run of that
    row is chapter 10's run (smoke sizes, batch 2)."""
    from catlib.experiment.ladder import step_train_flops
    from catlib.experiment.rows import MATCHED, ROWS, row_configs

    e = _small(steps=8)
    model, train = row_configs(ROWS[MATCHED], e, 0)
    chapter10 = train_run(model, train, root=tmp_path / "ch10", device="cpu", evaluate=False,
                          progress=False, echo=None)
    unit = step_train_flops(chapter10, "cat", train.train_steps)[0]
    m1, t1, steps = scale.scale_configs(KERPLE, e, 0, [1])
    alone = lambda t: dataclasses.replace(t, checkpoints=(), branches=())  # noqa: E731
    assert m1 == model and alone(t1) == alone(train) and steps == {1: train.train_steps}
    out = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0,), 4: (0,)},
                          rows=[ALIBI, ALIBI_DEEP, EULER_DEEP], jobs=1,
                          echo=None)
    for label, table in out["rows"].items():
        for point in table["points"]:
            assert abs(point["train_flops"] / (point["budget"] * unit) - 1) < 0.05, (label, point)


def test_deep_euler_cat_costs_the_rk4_cat_per_step():
    """The CAT kernel with discrete depth: as many Euler blocks as the RK4 x1 CAT's four
    evaluations, its FLOPs per step within 10 % of that CAT's (cpu sizes)."""
    e = _small("cpu", steps=500)
    deep, t, _ = scale.scale_configs(EULER_DEEP, e, 0, [1])
    rk4, t4, _ = scale.scale_configs(KERPLE, e, 0, [1])
    assert deep.blocks == 4 and deep.solver == "euler"
    ratio = (compute.expected_step_flops(deep, "cat", t.batch, t.seq)
             / compute.expected_step_flops(rk4, "cat", t4.batch, t4.seq))
    assert abs(ratio - 1) < 0.10, ratio


def _study(root, jobs, rows=(ALIBI, EULER_DEEP)):
    """The study's rows, less the seconds (timings differ from run to run)."""
    out = scale.run_study(_small(), root=root, device="cpu", plan={1: (0,), 2: (0,)},
                          rows=list(rows), jobs=jobs, echo=None)
    for table in out["rows"].values():
        for point in table["points"]:
            assert point.pop("seconds") > 0
    return out


def test_runs_beside_others_equal_runs_alone(data, tmp_path):
    """The pool's shared-device path (two worker processes on one device) gives every run
    the numbers it has trained alone in this process: the same kernels, bit for bit."""
    alone, beside = _study(tmp_path / "a", 1), _study(tmp_path / "b", 2)
    assert alone["rows"] == beside["rows"]
    (point,) = [p for p in alone["rows"][ALIBI]["points"] if p["budget"] == 2]
    assert set(point) == {"budget", "steps", "seeds", "train_flops", "ce", "se", "windows",
                          "train_ce", "window_ce", "passes", "context_gain"}
    assert set(point["ce"]) == {"16", "32", "64"} and len(point["ce"]["16"]) == 1
    # every window of the span that the longest length's windows tile, at every length
    from catlib.data import load_corpus
    from catlib.measure.evaluate import text_span
    span = text_span(len(load_corpus(split="90/10").val), 64)
    assert point["windows"] == {str(L): span // L for L in (16, 32, 64)}
    assert {L: len(v) for L, v in point["window_ce"].items()} == point["windows"]
    assert all(0 < se < 0.1 for se in point["se"]["16"])


def test_a_study_says_which_rows_it_trained_and_how_many_runs_it_reused(data, tmp_path):
    """A row added to a finished study trains its runs alone; the artefact names the rows
    trained in this invocation and counts the runs found finished."""
    first = scale.run_study(_small(), root=tmp_path, device="cpu", plan={1: (0,)},
                            rows=[ALIBI], jobs=1, echo=None)
    assert first["trained"] == [ALIBI] and first["reused_runs"] == 0
    again = scale.run_study(_small(), root=tmp_path, device="cpu", plan={1: (0,)},
                            rows=[ALIBI, EULER], jobs=1, echo=None)
    assert again["trained"] == [EULER] and again["reused_runs"] == 1
    assert again["rows"][ALIBI] == first["rows"][ALIBI]    # read, not retrained


def test_a_cut_study_resumes_to_the_same_losses(data, tmp_path):
    """A run killed mid-way (here interrupted after 3 of its steps) resumes from its
    checkpoint when the study is started again, and ends with the losses of a run never
    stopped (bitwise: the same kernels twice)."""
    specs, _, _ = scale.job_specs(_small(), {1: (0,), 2: (0,)}, tmp_path / "cut", [ALIBI])
    spec = dict(specs[ALIBI, 0], device="cpu")

    def cut(metrics):
        if metrics["step"] == 2:
            raise KeyboardInterrupt
    threads = torch.get_num_threads()
    torch.set_num_threads(1)           # as the pool trains: the same kernels as the straight run
    try:
        with pytest.raises(RunInterrupted):
            train_run(scale.CATConfig.from_dict(spec["model"]), scale.TrainConfig(**spec["train"]),
                      root=spec["root"], device="cpu", evaluate=False, progress=False,
                      echo=None, on_step=cut)
    finally:
        torch.set_num_threads(threads)
    resumed = _study(tmp_path / "cut", 1, rows=[ALIBI])
    straight = _study(tmp_path / "straight", 1, rows=[ALIBI])
    assert resumed["rows"] == straight["rows"]
    assert _train_job(dict(spec, root=str(tmp_path / "cut")))["reused"]   # nothing trains again
    trunk = lambda root: next(p for p in root.iterdir() if "-to-" not in p.name)  # noqa: E731
    losses = lambda root: [m["base_loss"] for m in open_run(trunk(root)).metrics()  # noqa: E731
                           if m["kind"] == "train"]
    assert len(losses(tmp_path / "cut")) == spec["train"]["train_steps"]
    assert losses(tmp_path / "cut") == losses(tmp_path / "straight")
