"""``python -m catlib.book.scale``: every argument checked before anything trains (one
line, exit 2, no file, no run directory; the folders of ``--out`` and ``--root`` writable,
the budgets holding the 1x unit), and a study whose plan has no 1x point of seed 0
skips its schedule check with a note instead of crashing after the training."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from catlib.book import profiles
from catlib.book.scale import main
from catlib.experiment import scale, scale_plan
from catlib.experiment.scale_plan import FOX, KERPLE


@pytest.mark.parametrize("args, says", [
    (["--budgets", "-1", "1"], "must be at least 1"),
    (["--budgets", "0"], "must be at least 1"),
    (["--budgets", "-2"], "must be at least 1"),
    (["--jobs", "-1"], "--jobs must be >= 1"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--device", "foo"], "unknown device 'foo'"),
    (["--profile", "nope"], "--profile 'nope' is not a profile"),
    (["--seeds", "0", "1"], "give both"),
    (["--budgets", "1", "--seeds", "-1"], "a seed is an integer from 0 to 4294967295"),
    # issue 60: a seed numpy cannot take passed the checks and failed after the first
    # run had started (a traceback, exit 1); --recipe_rate ignored --sweep
    (["--budgets", "1", "--seeds", "4294967296", "--recipe_rate"],
     "--seeds 4294967296: a seed is an integer from 0 to 4294967295 (numpy's seed range)"),
    (["--recipe_rate", "--sweep", "s.json"], "drop --sweep s.json or --recipe_rate"),
    (["--out", "FILE"], "is a file"),
    # issue 52: each of these passed the checks and failed after the training, or later
    (["--out", "/proc/nope"], "--out /proc/nope: cannot write in /proc"),
    (["--root", "/proc/nope"], "--root /proc/nope: cannot write in /proc"),
    (["--root", "FILE/runs"], "--root FILE/runs: "),
    (["--budgets", "2", "4"], "include 1 (e.g. --budgets 1 2 4)"),
])
def test_bad_arguments_stop_before_anything_trains(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("keep me")

    def never(*a, **k):
        raise AssertionError("the study started")
    monkeypatch.setattr("catlib.book.scale.run_study", never)
    code = main(["--profile", "smoke", "--root", "runs", *args] if "--profile" not in args
                else ["--root", "runs", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]   # nothing written
    assert (tmp_path / "FILE").read_text() == "keep me"


def test_the_write_check_leaves_nothing_behind(tmp_path, monkeypatch):
    """Folders that do not exist yet pass the check (they are made after the training) and
    the check leaves no trace, neither those folders nor its temporary one; a folder where
    nothing can be made is named with the reason."""
    import argparse

    from catlib.book.args import ArgsError, check_writable
    from catlib.book.scale import check_args

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(profile="smoke", corpus="tiny", budgets=[1, 2], seeds=None, jobs=None,
                              device="cpu", out="a/b", root="c", sweep=None, recipe_rate=True)
    assert check_args(args)[3] == Path("a/b/scale_smoke_cpu.test.json")   # a test's
    assert list(tmp_path.iterdir()) == []

    def refused(**kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("catlib.book.args.tempfile.mkdtemp", refused)
    with pytest.raises(ArgsError, match=r"^--root c/d: cannot write in .* \(Permission denied\)"):
        check_writable("--root", Path("c/d"))


def test_a_plan_without_seed_0_at_1x_trains_only_its_runs(tiny_path, monkeypatch, tmp_path):
    """The review's repro, ``--budgets 1 --seeds 1``: a KeyError after all the training
    before (the schedule check wanted seed 0's 1x point); now the study trains the plan's
    one run and writes its recipe (a point *is* the run trained to its budget: nothing left
    to check, tests/test_recipe.py)."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    e = profiles.experiment("smoke")
    e = dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=2, batch=2))
    out = scale.run_study(e, root=tmp_path, device="cpu", plan={1: (1,)}, rows=[KERPLE],
                          jobs=1, echo=None)
    assert "schedule_check" not in out and out["recipe"]["points"] == "branched"
    assert len(list(tmp_path.iterdir())) == 1                        # the one run of the plan
    assert out["rows"][KERPLE]["points"][0]["seeds"] == [1]


@pytest.mark.parametrize("options", [["--budgets", "1", "--seeds", "0"], ["--recipe_rate"],
                                     ["--budgets", "1", "2", "--recipe_rate"]])
def test_the_test_options_write_beside_the_book_s_artefact(tmp_path, monkeypatch, options):
    """Issue 60: ``--budgets``, ``--seeds`` and ``--recipe_rate`` (the help's test options)
    wrote ``results/scale_<device>.json``, the artefact the book reads; now
    ``scale_<device>.test.json`` beside it, the book's left as it was."""
    import json

    from catlib.experiment import sweep

    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    (results / "scale_smoke_cpu.json").write_text('{"the": "book\'s study"}\n')
    (results / "lr_sweep_smoke_cpu.json").write_text(json.dumps({
        "provenance": {"profile": "smoke"}, "rule": getattr(sweep, "RULE", None),
        "rows": {r: {"rate": 4e-3, "done": True} for r in scale_plan.SCALE_ROWS}}))
    monkeypatch.setattr("catlib.book.scale.run_study", lambda *a, **k: {
        "wall_seconds": 1.0, "trained": [], "reused_runs": 0, "rows": {}, "plan": {}})
    assert main(["--profile", "smoke", "--root", "runs", *options]) == 0
    assert (results / "scale_smoke_cpu.json").read_text() == '{"the": "book\'s study"}\n'
    assert json.loads((results / "scale_smoke_cpu.test.json").read_text())["wall_seconds"] == 1.0


def test_a_row_whose_every_sweep_rate_diverged_is_named_and_refused(tmp_path, capsys, monkeypatch):
    """Issue 60: a row whose every rate diverged had the lowest rate tried, which the study
    then trained. Now the sweep gives it no rate; the command names it in one line, trains
    the other rows and records it in the artefact's ``rates``."""
    import json

    from catlib.experiment import sweep

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    rows = {r: {"rate": 4e-3, "done": True} for r in scale_plan.SCALE_ROWS}
    rows[FOX] = {"rate": None, "done": True, "all_diverged": True,
                       "dev_ce": {"0.002": None, "0.004": None, "0.008": None}}
    (tmp_path / "results" / "lr_sweep_smoke_cpu.json").write_text(json.dumps({
        "provenance": {"profile": "smoke"}, "rule": getattr(sweep, "RULE", None), "rows": rows}))
    asked = {}

    def study(*a, rows=None, rate_source=None, **k):
        asked.update(rows=rows)
        return {"wall_seconds": 1.0, "trained": [], "reused_runs": 0, "rows": {}, "plan": {},
                "rates": rate_source}
    monkeypatch.setattr("catlib.book.scale.run_study", study)
    assert main(["--profile", "smoke", "--root", "runs"]) == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"refused: {FOX!r} has no rate" in err, err
    assert asked["rows"] == [r for r in scale_plan.SCALE_ROWS if r != FOX]
    written = json.loads((tmp_path / "results" / "scale_smoke_cpu.json").read_text())
    assert written["rates"]["unrated"] == [FOX]
