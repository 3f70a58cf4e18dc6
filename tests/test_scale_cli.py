"""``python -m catlib.book.scale``: every argument checked before anything trains (one
line, exit 2, no file, no run directory), and a study whose plan has no 1x point of seed 0
skips its schedule check with a note instead of crashing after the training."""
from __future__ import annotations

import dataclasses

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


def test_a_plan_without_seed_0_at_1x_skips_the_schedule_check(tiny_path, monkeypatch, tmp_path):
    """The review's repro, ``--budgets 1 --seeds 1``: a KeyError after all the training
    before; now the artefact says why the check is missing, and no extra run trains."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    e = profiles.experiment("smoke")
    e = dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=2, batch=2))
    out = scale.run_study(e, root=tmp_path, device="cpu", plan={1: (1,)}, rows=[scale.KERPLE],
                          jobs=1, echo=None)
    assert out["schedule_check"] == {"skipped": "the plan has no 1x point of seed 0"}
    assert len(list(tmp_path.iterdir())) == 1                        # the one run of the plan
    assert scale.schedule_check_skipped({(scale.ALIBI, 0): None}, {1: (0,)}).startswith(
        "the KERPLE-prior CAT is not among")
    assert scale.schedule_check_skipped({(scale.KERPLE, 0): None}, {2: (0,)}) == (
        "the plan has no 1x point of seed 0")
