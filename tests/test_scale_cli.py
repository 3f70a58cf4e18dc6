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
from catlib.experiment import scale


@pytest.mark.parametrize("args, says", [
    (["--budgets", "-1", "1"], "must be at least 1"),
    (["--budgets", "0"], "must be at least 1"),
    (["--budgets", "-2"], "must be at least 1"),
    (["--jobs", "-1"], "--jobs must be >= 1"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--device", "foo"], "unknown device 'foo'"),
    (["--profile", "nope"], "--profile 'nope' is not a profile"),
    (["--seeds", "0", "1"], "give both"),
    (["--budgets", "1", "--seeds", "-1"], "seeds are >= 0"),
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

    from catlib.book.scale import ScaleArgsError, check_args, check_writable

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(profile="smoke", budgets=[1, 2], seeds=None, jobs=None,
                              device="cpu", out="a/b", root="c", sweep=None, recipe_rate=True)
    assert check_args(args)[3] == Path("a/b/scale_smoke_cpu.json")
    assert list(tmp_path.iterdir()) == []

    def refused(**kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("catlib.book.scale.tempfile.mkdtemp", refused)
    with pytest.raises(ScaleArgsError, match=r"^--root c/d: cannot write in .* \(Permission denied\)"):
        check_writable("--root", Path("c/d"))


def test_a_plan_without_seed_0_at_1x_trains_only_its_runs(tiny_path, monkeypatch, tmp_path):
    """The review's repro, ``--budgets 1 --seeds 1``: a KeyError after all the training
    before (the schedule check wanted seed 0's 1x point); now the study trains the plan's
    one run and writes its recipe (a point *is* the run trained to its budget: nothing left
    to check, tests/test_recipe.py)."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    e = profiles.experiment("smoke")
    e = dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=2, batch=2))
    out = scale.run_study(e, root=tmp_path, device="cpu", plan={1: (1,)}, rows=[scale.KERPLE],
                          jobs=1, echo=None)
    assert "schedule_check" not in out and out["recipe"]["points"] == "branched"
    assert len(list(tmp_path.iterdir())) == 1                        # the one run of the plan
    assert out["rows"][scale.KERPLE]["points"][0]["seeds"] == [1]


def test_a_resumed_study_keeps_the_time_of_the_invocations_whose_runs_it_reused(
        monkeypatch, tmp_path):
    """A study resumed in a later session (rows added, the stored runs reused) records
    every earlier invocation's time and rows beside its own, so that the artefact says
    what the whole study cost; a study that reused nothing carries none."""
    import json

    from catlib.book.scale import earlier_invocations

    monkeypatch.chdir(tmp_path)
    path = Path("results/scale_smoke_cpu.json")
    assert earlier_invocations(path, "smoke") == []                  # no artefact yet
    path.parent.mkdir()
    first = {"wall_seconds": 6000.0, "rows": {"a": {}, "b": {}},     # before "trained" existed
             "provenance": {"profile": "smoke", "date": "d1", "git": {"commit": "c" * 40}}}
    path.write_text(json.dumps(first))
    assert earlier_invocations(path, "cpu") == []                    # another profile's
    assert earlier_invocations(path, "smoke") == [
        {"wall_seconds": 6000.0, "trained": ["a", "b"], "date": "d1", "commit": "c" * 12}]

    written = {}
    monkeypatch.setattr("catlib.book.scale.atomic_write_text",
                        lambda p, text: written.update(table=json.loads(text)))
    for reused, carried in ((33, 1), (0, 0)):
        monkeypatch.setattr("catlib.book.scale.run_study", lambda *a, reused=reused, **k: {
            "wall_seconds": 1500.0, "trained": ["c"], "reused_runs": reused, "rows": {}})
        assert main(["--profile", "smoke", "--root", "runs", "--recipe_rate"]) == 0
        assert len(written["table"]["earlier"]) == carried
    # the second session's artefact, resumed once more, carries both before its own
    second = {**first, "wall_seconds": 1500.0, "trained": ["c"],
              "earlier": earlier_invocations(path, "smoke")}
    path.write_text(json.dumps(second))
    assert [e["wall_seconds"] for e in earlier_invocations(path, "smoke")] == [6000.0, 1500.0]
    assert earlier_invocations(path, "smoke")[1]["trained"] == ["c"]
