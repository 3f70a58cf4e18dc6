"""What the scale study cost, as its artefact keeps it (issue 60, item 2): the runs of
``make scale`` that trained something, each once; a killed one kept up to its last
finished run; nothing borrowed from an artefact of another study.

The command (:func:`catlib.book.scale.main`) runs here either around a stand-in for the
study that returns what a study returns, or, for the killed study, around the real one at
the smoke sizes with two rows and a few steps (seconds)."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from catlib.book import profiles
from catlib.book import scale_study as ss
from catlib.book.scale import main
from catlib.experiment import scale, scale_plan, sweep
from catlib.experiment.scale_plan import ALIBI, EULER, FOX, KERPLE, KERPLE_ODE

PLAN = {"1": [0, 1, 2], "2": [0, 1, 2], "4": [0, 1, 2]}      # the CPU's plan
ELEVEN = [r for r in scale_plan.swept_rows() if r not in (KERPLE, KERPLE_ODE)]


def committed_artefact() -> dict:
    """The study as committed at 364f0a7 (its cost fields): 113 minutes for eleven rows,
    then 23 for the two RK4 CATs beside the stored runs."""
    return {"plan": PLAN, "rows": {r: {"points": []} for r in scale_plan.SCALE_ROWS},
            "earlier": [{"wall_seconds": 6793.877915748999, "trained": ELEVEN,
                         "date": "2026-12-06 21:10:10 +0000", "commit": "d1b730fd0de9"}],
            "wall_seconds": 1406.5965901050004, "trained": [KERPLE, KERPLE_ODE],
            "reused_runs": 33, "provenance": {"profile": "cpu", "cpus": 2,
                                              "device": {"name": "cpu", "type": "cpu"},
                                              "date": "2026-12-06 22:59:38 +0000"}}


def finished(trained: dict, reused: list) -> list[dict]:
    """``finished_runs`` of a study: ``trained`` ``{run: row}`` here, ``reused`` found."""
    return ([{"row": row, "seed": 0, "run": run, "trained": True} for run, row in trained.items()]
            + [{"row": "ALiBi baseline", "seed": 0, "run": run, "trained": False} for run in reused])


def study_returning(trained: dict, reused: list, seconds: float, **identity):
    """A stand-in for :func:`~catlib.experiment.scale.run_study`: the artefact of a study
    that trained ``trained`` (``{run: row}``) and found ``reused`` finished, in
    ``seconds``, of the CPU's plan and every row (``identity`` overrides)."""
    def run_study(*args, **kwargs):
        return {"plan": PLAN, "rows": {}, "wall_seconds": seconds,
                "trained": sorted(set(trained.values())), "reused_runs": len(reused),
                "finished_runs": finished(trained, reused), "partial": False,
                "identity": {"plan": PLAN, "rows": list(scale_plan.SCALE_ROWS), "corpus": "c0",
                             **identity}}
    return run_study


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A working directory with the sweep's artefact for the smoke profile (every row at
    4e-3) and the folder of the book's artefacts."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    (results / "lr_sweep_smoke_cpu.json").write_text(json.dumps({
        "provenance": {"profile": "smoke"}, "rule": getattr(sweep, "RULE", None),
        "rows": {r: {"rate": 4e-3, "done": True} for r in scale_plan.SCALE_ROWS}}))
    return results


def smoke(artefact: dict) -> dict:
    """``artefact`` as made at the smoke profile (the tests' command line)."""
    return {**artefact, "provenance": {**artefact["provenance"], "profile": "smoke"}}


def test_reruns_that_train_nothing_do_not_add_to_the_cost(book, monkeypatch):
    """The review's repro: the committed artefact reads "made in 137 minutes ... in 2"
    runs; two reruns that train nothing (every run found finished, 3 minutes each) made it
    "143 minutes ... in 4 sessions (..., then 3 for 0 rows, then 3 for 0 rows)"."""
    path = book / "scale_smoke_cpu.json"
    path.write_text(json.dumps(smoke(committed_artefact())))
    before = ss.cost_text(json.loads(path.read_text()))
    assert "made in 137 minutes" in before
    runs = [f"causal-{i:08x}" for i in range(39)]
    monkeypatch.setattr("catlib.book.scale.run_study", study_returning({}, runs, 180.0))
    for _ in range(2):
        assert main(["--profile", "smoke", "--root", "runs"]) == 0
    after = json.loads(path.read_text())
    assert "made in 137 minutes" in ss.cost_text(after), ss.cost_text(after)
    assert ss.cost_text(after).endswith("in 2 runs of `make scale` (113 for 11 rows, "
                                        "then 23 for 2 rows)")
    assert [len(i["trained"]) for i in after["invocations"]] == [11, 2]


def test_a_rerun_that_trains_adds_itself_once_and_keeps_only_runs_still_held(book, monkeypatch):
    """A rerun that trains one row beside the stored runs adds its minutes, rows and runs;
    one after a change that leaves none of the earlier runs (the code's fingerprint is in
    every run's name) keeps only its own."""
    path = book / "scale_smoke_cpu.json"
    path.write_text(json.dumps(smoke(committed_artefact())))
    monkeypatch.setattr("catlib.book.scale.run_study", study_returning(
        {"causal-0000000a": FOX}, ["causal-00000001"], 600.0))
    assert main(["--profile", "smoke", "--root", "runs"]) == 0
    first = json.loads(path.read_text())
    assert [round(i["wall_seconds"]) for i in first.get("invocations", [])] == [6794, 1407, 600]
    assert first["invocations"][-1]["runs"] == ["causal-0000000a"]
    assert first["invocations"][-1]["finished"] is True
    monkeypatch.setattr("catlib.book.scale.run_study", study_returning(
        {"causal-0000000b": FOX}, ["causal-00000002"], 60.0))
    assert main(["--profile", "smoke", "--root", "runs"]) == 0
    second = json.loads(path.read_text())
    assert [i["runs"] for i in second["invocations"]] == [["causal-0000000b"]]
    assert ss.cost_text(second).startswith(", made in 1 minute on")


@pytest.mark.parametrize("old", [
    {"plan": {"1": [0]}},                                         # another plan
    {"provenance": {"profile": "cpu", "device": {"type": "cpu"}}},  # another profile
    {"rows": {"a row this study has not": {"points": []}}},       # another row
    {"identity": {"profile": "smoke", "device": "cpu", "plan": PLAN,   # another corpus
                  "rows": list(scale_plan.SCALE_ROWS), "corpus": "c1"},
     "invocations": [{"wall_seconds": 6000.0, "trained": ELEVEN, "runs": ["causal-00000001"],
                      "date": "d", "commit": "c", "finished": True}]},
], ids=["plan", "profile", "rows", "corpus"])
def test_an_artefact_of_another_study_lends_it_no_cost(book, monkeypatch, old):
    """An artefact at the path made by another study (another plan, profile, rows or
    corpus) was attached to any study that reused a run; now it lends nothing, even where
    a run of this study is among its runs."""
    path = book / "scale_smoke_cpu.json"
    path.write_text(json.dumps({**smoke(committed_artefact()), **old}))
    monkeypatch.setattr("catlib.book.scale.run_study", study_returning(
        {"causal-0000000a": FOX}, ["causal-00000001"], 600.0))
    assert main(["--profile", "smoke", "--root", "runs"]) == 0
    text = ss.cost_text(json.loads(path.read_text()))
    assert text.startswith(", made in 10 minutes") and "runs of" not in text, text


def _small(steps: int = 4):
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=2))


def test_a_killed_study_keeps_its_finished_run_and_its_minutes(tiny_path, book, monkeypatch):
    """A study killed after its first finished run (here: the pool's next job raises) wrote
    nothing before (the artefact was written at the end only), so its minutes were lost.
    Now the study in progress, written after each run it trains, holds that run's row and
    the killed run of ``make scale`` with its minutes; the next one adds itself and writes
    the complete artefact, both counted."""
    from catlib.experiment import grid

    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    two = {r: scale_plan.SCALE_ROWS[r] for r in (ALIBI, EULER)}
    monkeypatch.setattr("catlib.experiment.scale_plan.SCALE_ROWS", two)
    monkeypatch.setattr("catlib.book.scale.profile_experiment", lambda profile: _small())
    trained = []

    def killed_after_one(spec, steps=None, stored=False):
        if not stored and trained:
            raise RuntimeError("killed")
        found = grid._train_job(spec, steps, stored)
        if found is not None and not stored:
            trained.append(found["name"])
        return found
    monkeypatch.setattr("catlib.experiment.scale._train_job", killed_after_one)
    command = ["--profile", "smoke", "--root", "runs", "--budgets", "1", "--seeds", "0",
               "--recipe_rate", "--jobs", "1"]
    with pytest.raises(RuntimeError, match="killed"):
        main(command)
    path, partial = book / "scale_smoke_cpu.test.json", book / "scale_smoke_cpu.test.partial.json"
    assert partial.exists() and not path.exists()           # the study in progress only
    cut = json.loads(partial.read_text())
    (first,) = cut["rows"]
    assert cut["partial"] is True and cut["invocations"][0]["finished"] is False
    assert cut["invocations"][0]["runs"] == trained and cut["invocations"][0]["trained"] == [first]
    assert cut["invocations"][0]["wall_seconds"] > 0
    monkeypatch.setattr("catlib.experiment.scale._train_job", grid._train_job)
    assert main(command) == 0
    whole = json.loads(path.read_text())
    assert not partial.exists() and set(whole["rows"]) == set(two)
    assert [i["finished"] for i in whole["invocations"]] == [False, True]
    assert whole["invocations"][0] == cut["invocations"][0]
    assert re.search(r"in 2 runs of `make scale` \(\d+ for 1 row before it was killed, then "
                     r"\d+ for 1 row\)$", ss.cost_text(whole)), ss.cost_text(whole)


def test_the_command_writes_after_each_run_it_trains_not_after_a_run_found(tiny_path, tmp_path,
                                                                          monkeypatch):
    """:func:`~catlib.experiment.scale.run_study` hands its artefact so far after each run
    it trains (the row of that run in it), and not after a run it found finished."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    handed = []
    first = scale.run_study(_small(), root=tmp_path, device="cpu", plan={1: (0,)},
                            rows=[ALIBI], jobs=1, echo=None, on_change=handed.append)
    assert [list(a["rows"]) for a in handed] == [[ALIBI]]
    assert handed[0]["partial"] is False and first["finished_runs"] == handed[0]["finished_runs"]
    handed.clear()
    again = scale.run_study(_small(), root=tmp_path, device="cpu", plan={1: (0,)},
                            rows=[ALIBI, EULER], jobs=1, echo=None,
                            on_change=handed.append)
    assert [list(a["rows"]) for a in handed] == [[ALIBI, EULER]]
    assert sorted((r["row"], r["trained"]) for r in again["finished_runs"]) == [
        (ALIBI, False), (EULER, True)]
