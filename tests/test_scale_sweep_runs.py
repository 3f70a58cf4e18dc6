"""The study reuses the learning-rate sweep's run (issue 60, item 7): the sweep's 1x run of
seed 0 at a row's chosen rate has the configuration, so the config hash, of the study's 1x
point of that row's seed 0 (its 1x branch, or its run where the plan stops at 1x), and was
trained twice. Now the study copies it from the sweep's folder and trains nothing for it.

Smoke sizes, 4 steps at 1x, one row: seconds."""
from __future__ import annotations

import dataclasses
import json

import pytest

from catlib.book import profiles
from catlib.book.scale import main
from catlib.experiment import scale, scale_plan, sweep
from catlib.experiment.scale_plan import ALIBI
from catlib.runs import open_run

RATE = 8e-3     # the rate the sweep chose for the row: not the recipe's


def _small():
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=4, batch=2))


def sweep_run(root):
    """The sweep's run of ALiBi at :data:`RATE` under ``root``, trained and scored as
    ``make sweep`` trains it (:func:`catlib.experiment.sweep._sweep_job`)."""
    spec = sweep.sweep_spec(ALIBI, _small(), RATE, root)
    found = sweep._sweep_job(dict(spec, device="cpu"))
    return root / found["name"]


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def test_the_study_takes_the_sweeps_run_as_its_1x_branch_of_seed_0(data, tmp_path):
    """At 1x and 2x, seed 0: the study trains its 2x run and takes its 1x branch from the
    sweep (the same files, not a run trained again: its log is the sweep run's, timings
    included); the 1x point reads that run's weights."""
    swept = sweep_run(tmp_path / "lr-sweep")
    out = scale.run_study(_small(), root=tmp_path / "study", device="cpu", plan={1: (0,), 2: (0,)},
                          rows=[ALIBI], jobs=1, echo=None, rates={ALIBI: RATE},
                          runs_from=[tmp_path / "lr-sweep"])
    (branch,) = [p for p in (tmp_path / "study").iterdir() if "-to-" in p.name]
    assert out["borrowed_runs"] == [branch.name]
    assert open_run(branch).hash == open_run(swept).hash
    assert (branch / "metrics.jsonl").read_bytes() == (swept / "metrics.jsonl").read_bytes()
    assert not list((tmp_path / "study").glob(".*"))                # no copy left half-made


def test_make_scale_trains_nothing_that_the_sweep_trained(data, tmp_path, monkeypatch):
    """``make scale`` at 1x, seed 0 (``--budgets 1 --seeds 0``) with the sweep's run of the
    row at its chosen rate in ``runs/lr-sweep-<profile>-<device>``: the study's one run is
    that run, found finished (trained before: once more)."""
    monkeypatch.chdir(tmp_path)
    one = {ALIBI: scale_plan.SCALE_ROWS[ALIBI]}
    monkeypatch.setattr("catlib.experiment.scale_plan.SCALE_ROWS", one)
    monkeypatch.setattr("catlib.book.scale.profile_experiment", lambda profile: _small())
    sweep_run(tmp_path / "runs" / "lr-sweep-smoke-cpu")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "lr_sweep_smoke_cpu.json").write_text(json.dumps({
        "provenance": {"profile": "smoke"}, "rule": getattr(sweep, "RULE", None),
        "rows": {ALIBI: {"rate": RATE, "done": True}}}))
    assert main(["--profile", "smoke", "--root", "runs", "--budgets", "1", "--seeds", "0",
                 "--jobs", "1"]) == 0
    (written,) = (tmp_path / "results").glob("scale_smoke_cpu*.json")
    study = json.loads(written.read_text())
    assert study["trained"] == [] and study["reused_runs"] == 1
    assert study["rows"][ALIBI]["rate"] == RATE
