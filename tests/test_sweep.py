"""The learning-rate sweep (issue 54, item 2): the grid's extension rule, runs scored on the
dev slice only, a cut sweep resumed, the study trained at each row's best rate, and the
commands' bad arguments (one line, exit 2, nothing written)."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from catlib.book import profiles
from catlib.book.scale import check_args
from catlib.book.scale import main as scale_main
from catlib.book.sweep import main as sweep_main
from catlib.book.sweep import writer
from catlib.data import DEV_CHARS, load_corpus
from catlib.experiment import scale, sweep
from catlib.runs import open_run


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _small(steps=4, batch=2):
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=batch))


def test_the_grid_extends_by_2_beyond_a_winning_edge_until_interior_or_capped():
    ce = {2e-3: 3.0, 4e-3: 2.9, 8e-3: 3.1}
    assert sweep.next_rate(ce) is None and sweep.best_rate(ce) == 4e-3         # interior
    high = {2e-3: 3.0, 4e-3: 2.9, 8e-3: 2.8}
    assert sweep.next_rate(high) == pytest.approx(16e-3)
    assert sweep.next_rate({**high, 16e-3: 2.7}) == pytest.approx(32e-3)
    assert sweep.next_rate({**high, 16e-3: 2.7, 32e-3: 2.6}) is None           # the cap: 2
    assert sweep.next_rate({**high, 16e-3: 2.9}) is None                       # interior now
    low = {2e-3: 2.8, 4e-3: 2.9, 8e-3: 3.0}
    assert sweep.next_rate(low) == pytest.approx(1e-3)
    assert sweep.next_rate({**low, 1e-3: 2.7}) == pytest.approx(5e-4)
    assert sweep.next_rate({**low, 1e-3: 2.7, 5e-4: 2.6}) is None
    assert sweep.next_rate(high, cap=0) is None
    # a diverged run (None or NaN) is never best; ties go to the lower rate
    assert sweep.best_rate({2e-3: 3.0, 4e-3: 2.9, 8e-3: None}) == 4e-3
    assert sweep.next_rate({2e-3: 3.0, 4e-3: 2.9, 8e-3: float("nan")}) is None
    assert sweep.best_rate({2e-3: 2.9, 4e-3: 2.9, 8e-3: 3.0}) == 2e-3
    # the grid first, then its extension, then nothing
    assert sweep.rates_to_run({4e-3: 2.9}) == [2e-3, 8e-3]
    assert sweep.rates_to_run(high) == [pytest.approx(16e-3)]
    assert sweep.rates_to_run(ce) == []
    with pytest.raises(ValueError, match="not measured yet"):
        sweep.next_rate({4e-3: 2.9})


def test_the_sweep_scores_on_the_dev_slice_only(data, tmp_path, monkeypatch):
    """Every text a CE is computed on during the sweep is the dev slice (the validation
    split is never read: the runs skip their evaluation), and its windows lie inside it."""
    import catlib.measure.evaluate as ev

    read, real = [], ev.windows

    def windows(text, length, n, span_length=None):
        read.append((text, length, n, span_length))
        return real(text, length, n, span_length)
    monkeypatch.setattr(ev, "windows", windows)
    out = sweep.run_sweep(_small(), root=tmp_path, device="cpu", rows=[scale.ALIBI], jobs=1,
                          echo=None, cap=0)
    corpus = load_corpus(split="90/10")
    dev = out["dev"]
    assert len(read) == 3 and set(out["rows"][scale.ALIBI]["dev_ce"]) == {"0.002", "0.004", "0.008"}
    assert (dev["start"], dev["chars"]) == (len(corpus.train), DEV_CHARS)
    assert dev["start"] + dev["chars"] <= len(corpus.ids) - len(corpus.val)   # before val
    for text, length, n, span in read:
        assert text.storage_offset() == dev["start"] and len(text) == DEV_CHARS
        assert torch.equal(text, corpus.dev) and span is None
        assert (length, n) == (dev["length"], dev["windows"]) == (32, (DEV_CHARS - 33) // 32)
        # the last window and the id after it end inside the slice
        assert (n - 1) * length + length + 1 <= DEV_CHARS


def test_a_cut_sweep_keeps_what_it_measured_and_resumes(data, tmp_path, monkeypatch):
    """Cut after two runs: the artefact (written after each finished run) holds their CEs,
    atomically; the next sweep reuses those two and trains only the rest."""
    real, trained = sweep._sweep_job, []

    def cut_after_two(spec, steps=None, stored=False):
        if not stored:
            if len(trained) == 2:
                raise KeyboardInterrupt
            trained.append(spec["train"]["lr"])
        return real(spec, steps, stored)
    monkeypatch.setattr(sweep, "_sweep_job", cut_after_two)
    path = tmp_path / "lr_sweep_smoke_cpu.json"
    write = writer(path, {"profile": "smoke"})
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(_small(), root=tmp_path / "runs", device="cpu", rows=[scale.ALIBI],
                        jobs=1, echo=None, on_change=write, cap=0)
    kept = json.loads(path.read_text())
    first = kept["rows"][scale.ALIBI]["dev_ce"]
    assert len(first) == 2 and kept["rows"][scale.ALIBI]["rate"] is None
    assert kept["complete"] is False
    # its table beside it, for the reproducibility page, saying it is not finished
    assert "; not finished._" in path.with_suffix(".md").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    monkeypatch.setattr(sweep, "_sweep_job", real)
    said = []
    out = sweep.run_sweep(_small(), root=tmp_path / "runs", device="cpu", rows=[scale.ALIBI],
                          jobs=1, echo=said.append, on_change=write, cap=0)
    done = [line for line in said if " at lr " in line]
    assert sum("reused run" in line for line in done) == 2
    assert sum("trained run" in line for line in done) == 1
    again = out["rows"][scale.ALIBI]["dev_ce"]
    assert {k: again[k] for k in first} == first and len(again) == 3
    assert json.loads(path.read_text())["complete"] is True


def test_the_study_trains_each_row_at_the_sweeps_best_rate(data, tmp_path):
    """The sweep's artefact gives the study each row's rate (here the best of a tiny sweep,
    not the recipe's 4e-3); the study's artefact records it with the dev slice, and its run
    trained at it."""
    e = _small()
    path = tmp_path / "results" / "lr_sweep_smoke_cpu.json"
    write = writer(path, {"profile": "smoke", "git": {"commit": "abc"}})
    table = sweep.run_sweep(e, root=tmp_path / "sweep", device="cpu", rows=[scale.ALIBI], jobs=1,
                            echo=None)
    ce = {float(r): v for r, v in table["rows"][scale.ALIBI]["dev_ce"].items()}
    best = min(ce, key=ce.get)
    assert table["rows"][scale.ALIBI]["rate"] == best != e.train.lr
    others = {label: {"rate": 8e-3} for label in scale.SCALE_ROWS if label != scale.ALIBI}
    write({**table, "rows": {**table["rows"], **others}})

    args = argparse.Namespace(profile="smoke", budgets=[1], seeds=[0], jobs=1, device="cpu",
                              out=str(tmp_path / "results"), root=str(tmp_path), sweep=None,
                              recipe_rate=False)
    *_, rates, source = check_args(args)
    assert rates[scale.ALIBI] == best and rates[scale.FIRE] == 8e-3
    assert source["dev"] == table["dev"] and source["commit"] == "abc"
    out = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0,)},
                          rows=[scale.ALIBI], jobs=1, echo=None, rates=rates, rate_source=source)
    assert out["rows"][scale.ALIBI]["rate"] == best and out["rates"]["dev"] == table["dev"]
    (run,) = (open_run(p) for p in (tmp_path / "study").iterdir() if p.is_dir())
    assert run.train_config.lr == best
    recipe = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0,)},
                             rows=[scale.ALIBI], jobs=1, echo=None)
    assert recipe["rows"][scale.ALIBI]["rate"] == e.train.lr and recipe["rates"] == {"from": "recipe"}


@pytest.mark.parametrize("args, says", [
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--device", "foo"], "unknown device 'foo'"),
    (["--profile", "nope"], "--profile 'nope' is not a profile"),
    (["--out", "FILE"], "is a file; give the folder that is to hold lr_sweep_<device>.json"),
    (["--out", "/proc/nope"], "--out /proc/nope: cannot write in /proc"),
    (["--root", "FILE/runs"], "--root FILE/runs: "),
])
def test_bad_sweep_arguments_stop_before_anything_trains(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("keep me")

    def never(*a, **k):
        raise AssertionError("the sweep started")
    monkeypatch.setattr("catlib.book.sweep.run_sweep", never)
    code = sweep_main(["--profile", "smoke", "--root", "runs", *args] if "--profile" not in args
                      else ["--root", "runs", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]   # nothing written


@pytest.mark.parametrize("artefact, says", [
    (None, "lr_sweep_smoke_cpu.json is missing (each row's learning rate); run `make sweep`"),
    ("{", "cannot be read"),
    ([1], "is not a sweep's artefact"),
    ({"provenance": {"profile": "cpu"}, "rows": {}}, "made for the profile 'cpu', not 'smoke'"),
    ({"provenance": {"profile": "smoke"}, "rows": {}}, f"has no row {scale.ALIBI!r}: run `make sweep`"),
    ({"provenance": {"profile": "smoke"}, "rows": {scale.ALIBI: {"rate": None}}},
     f"is not finished for row {scale.ALIBI!r}"),
])
def test_the_study_without_the_sweeps_rates_stops_naming_make_sweep(tmp_path, capsys, monkeypatch,
                                                                    artefact, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    path = Path("results/lr_sweep_smoke_cpu.json")
    if artefact is not None:
        path.write_text(artefact if isinstance(artefact, str) else json.dumps(artefact))

    def never(*a, **k):
        raise AssertionError("the study started")
    monkeypatch.setattr("catlib.book.scale.run_study", never)
    code = scale_main(["--profile", "smoke", "--root", "runs"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert [p.name for p in (tmp_path / "results").iterdir()] == ([path.name] if artefact else [])
    # --recipe_rate: the recipe's single rate, no artefact read
    monkeypatch.setattr("catlib.book.scale.run_study", lambda *a, **k: {"wall_seconds": 0.0, "reused_runs": 0})
    monkeypatch.setattr("catlib.book.scale.atomic_write_text", lambda p, t: None)
    assert scale_main(["--profile", "smoke", "--root", "runs", "--recipe_rate"]) == 0
