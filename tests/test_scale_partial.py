"""benchmarks/scale_partial.py: the finished runs of a cut scale study written as its
artefact, where seeds reach different budgets (as on the CPU's plan: seeds 1 and 2 stop at
4x, seed 0 goes on to 8x), atomically, with the commit in its provenance.

The study here is tiny: the smoke profile's sizes, 4 steps at 1x, one row (ALiBi) trained,
seed 0 to 2x and seed 1 to 1x; the study's other rows are left unfinished."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from catlib.book import profiles
from catlib.experiment import scale, scale_plan
from catlib.experiment.scale_plan import ALIBI, KERPLE, ROPE
from catlib import runs
from catlib.runs import StorageError
from catlib.experiment.grid import _train_job

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import scale_partial  # noqa: E402

PLAN = {1: (0, 1), 2: (0,)}          # seed 1 stops at 1x, seed 0 goes on to 2x


def _small():
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=4, batch=2))


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory, tiny_path):
    """A folder whose ``runs/scale-cpu-cpu`` holds the ALiBi row's runs of :data:`PLAN`,
    finished (trained and every budget scored, as the study's pool leaves them)."""
    folder = tmp_path_factory.mktemp("scale_partial")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        specs, _, _ = scale.job_specs(_small(), PLAN, folder / "runs" / "scale-cpu-cpu",
                                      [ALIBI])
        for spec in specs.values():
            _train_job(dict(spec, device="cpu"))
    return folder


@pytest.fixture
def cut_study(study_dir, tiny_path, monkeypatch):
    """``scale_partial.main``'s surroundings: the study's folder as the working directory,
    the small experiment as the study's profile, :data:`PLAN` as the CPU's plan."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    monkeypatch.delenv("CATLIB_COMMIT", raising=False)
    monkeypatch.chdir(study_dir)
    monkeypatch.setattr(scale_partial, "experiment", lambda profile: _small())
    monkeypatch.setitem(scale_plan.PLANS, "cpu", PLAN)
    return study_dir


@pytest.mark.slow("trains two tiny runs of the scale study (module fixture)")
def test_seeds_count_only_at_the_budgets_they_reached(cut_study):
    """No KeyError for seed 1 at 2x: the ALiBi row has seeds 0 and 1 at 1x, seed 0 alone
    at 2x; the unfinished rows are absent; the commit is this checkout's, as git reports it
    (``git rev-parse HEAD``), and none where this is no checkout (CATLIB_COMMIT unset)."""
    out = cut_study / "results" / "scale_cpu.json"
    out.parent.mkdir(exist_ok=True)
    scale_partial.main("cpu", str(out))
    study = json.loads(out.read_text())
    assert set(study["rows"]) == {ALIBI}
    points = {p["budget"]: p for p in study["rows"][ALIBI]["points"]}
    assert sorted(points) == [1, 2]
    assert points[1]["seeds"] == [0, 1] and points[2]["seeds"] == [0]
    assert all(len(ce) == 2 for ce in points[1]["ce"].values())
    assert all(len(ce) == 1 for ce in points[2]["ce"].values())
    assert points[2]["steps"] > points[1]["steps"]
    assert study["plan"] == {"1": [0, 1], "2": [0]} and study["partial"] is True
    assert sorted(map(tuple, study["finished_runs"])) == [(ALIBI, 0), (ALIBI, 1)]
    prov = study["provenance"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if (ROOT / ".git").exists() and head.returncode == 0:
        assert (prov["git"]["commit"], prov["git"]["source"]) == (head.stdout.strip(), "git")
    else:
        assert (prov["git"]["commit"], prov["git"]["source"]) == (None, None)
    assert prov["device"]["type"] == "cpu" and prov["profile"] == "cpu"
    assert prov["written_by"].startswith("python -m benchmarks.scale_partial cpu")
    assert {"date", "code", "versions"} <= set(prov)
    assert [p.name for p in out.parent.iterdir()] == ["scale_cpu.json"]   # no temporary left


@pytest.mark.slow("trains two tiny runs of the scale study (module fixture)")
def test_a_failed_write_leaves_the_previous_artefact(cut_study, monkeypatch):
    """The artefact is written atomically: a disk that fills up in the middle of the write
    (the fault hook tears the write in half, then raises ENOSPC) leaves the previous file
    whole and no temporary behind. A writer that truncates the file first fails this (the
    file is half written), and so does one that never reaches the hook (the file is
    replaced: no error)."""
    out = cut_study / "previous.json"
    out.write_text('{"rows": "the previous study"}\n')
    monkeypatch.setenv("CATLIB_FAULT", "enospc:previous.json:1")
    runs._FAULT_COUNTS.clear()                    # the first write of that name from here
    with pytest.raises(StorageError, match="previous version, if any, is intact"):
        scale_partial.main("cpu", str(out))
    assert out.read_text() == '{"rows": "the previous study"}\n'
    assert sorted(p.name for p in cut_study.iterdir() if p.name.endswith(".tmp")) == []


def test_reached_keeps_each_seed_to_its_own_budgets():
    """On a plan where seeds 1 and 2 stop at 4x and seed 0 goes on to 8x (the CPU's plan
    before issue 47): a finished seed counts at the budgets its run reached, a budget no
    finished seed reached is left out, and so is a row with no finished run."""
    plan = {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2), 8: (0,)}
    steps = {(label, s): {b: 10 * b for b in budgets} for label in scale_plan.SCALE_ROWS
             for s, budgets in scale_plan.seed_budgets(plan).items()}
    got = scale.reached([(ALIBI, 0), (ALIBI, 1), (ROPE, 2),
                                 (KERPLE, 1)], steps, plan)
    assert got == {ALIBI: {1: (0, 1), 2: (0, 1), 4: (0, 1), 8: (0,)},
                   ROPE: {1: (2,), 2: (2,), 4: (2,)},
                   KERPLE: {1: (1,), 2: (1,), 4: (1,)}}
