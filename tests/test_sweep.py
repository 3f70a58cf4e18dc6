"""The learning-rate sweep (issue 54, item 2): the grid's extension rule, runs scored on the
dev slice only, a cut sweep resumed, the study trained at each row's best rate, and the
commands' bad arguments (one line, exit 2, nothing written)."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from catlib.book import profiles
from catlib.book.args import partial_path
from catlib.book.scale import check_args
from catlib.book.scale import main as scale_main
from catlib.book.sweep import main as sweep_main
from catlib.book.sweep import summary, writer
from catlib.common.verdicts import t_quantile
from catlib.data import DEV_CHARS, load_corpus
from catlib.experiment import scale, scale_plan, sweep
from catlib.experiment.scale_plan import ALIBI, FIRE, FOX, ROPE
from catlib.runs import open_run


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _small(steps=4, batch=2):
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=batch))


def _scores(ce: dict, sd: float = 0.0, windows: int = 100, seed: int = 0) -> dict:
    """``{rate: job result}`` of runs whose dev CE is ``ce[rate]`` (None: diverged), each
    window's CE a shared difficulty per window (cancels in a paired difference) plus noise
    of ``sd`` of its own, centred so that the windows' mean is the CE."""
    g = np.random.default_rng(seed)
    hard = g.normal(0, 0.3, windows)
    out = {}
    for rate, value in ce.items():
        if value is None:
            out[rate] = {"ce": None, "se": None, "windows": 0, "window_ce": None, "seconds": None}
            continue
        w = hard + sd * g.normal(0, 1, windows)
        w = value + w - w.mean()
        out[rate] = {"ce": value, "se": float(w.std(ddof=1) / np.sqrt(windows)),
                     "windows": windows, "window_ce": w.tolist(), "seconds": 1.0}
    return out


def _two(ce: dict, other: dict | None = None, sd: float = 0.0, windows: int = 100) -> dict:
    """``{rate: {seed: job result}}`` of a row's runs on seeds 0 and 1 (:func:`_scores`
    each): dev CE ``ce[rate]`` on seed 0 and ``other[rate]`` (default ``ce[rate]``) on
    seed 1, each seed with windows of its own."""
    first, second = _scores(ce, sd, windows, seed=0), _scores(other or ce, sd, windows, seed=1)
    return {rate: {0: first[rate], 1: second[rate]} for rate in first}


def test_the_grid_extends_by_2_beyond_a_winning_edge_until_interior_or_capped():
    assert sweep.DEFAULT_RATE == 4e-3 == profiles.experiment("cpu").train.lr
    assert sweep.DEFAULT_RATE in sweep.RATES and sweep.SWEEP_SEEDS == (0, 1)
    ce = _two({2e-3: 3.0, 4e-3: 2.9, 8e-3: 3.1})
    assert sweep.next_rate(ce) is None and sweep.chosen_rate(ce) == 4e-3      # interior
    high = {2e-3: 3.0, 4e-3: 2.9, 8e-3: 2.8}
    assert sweep.next_rate(_two(high)) == pytest.approx(16e-3)
    assert sweep.next_rate(_two({**high, 16e-3: 2.7})) == pytest.approx(32e-3)
    assert sweep.next_rate(_two({**high, 16e-3: 2.7, 32e-3: 2.6})) is None  # the cap: 2
    assert sweep.next_rate(_two({**high, 16e-3: 2.9})) is None              # interior now
    low = {2e-3: 2.8, 4e-3: 2.9, 8e-3: 3.0}
    assert sweep.next_rate(_two(low)) == pytest.approx(1e-3)
    assert sweep.next_rate(_two({**low, 1e-3: 2.7})) == pytest.approx(5e-4)
    assert sweep.next_rate(_two({**low, 1e-3: 2.7, 5e-4: 2.6})) is None
    assert sweep.next_rate(_two(high), cap=0) is None
    # an edge that wins on one seed only is no winner: the grid does not extend
    assert sweep.next_rate(_two(high, {**high, 8e-3: 3.0})) is None
    # a diverged run (None or NaN, on either seed) is never chosen; where the recipe's rate
    # diverged, the lowest mean CE of the rest
    assert sweep.chosen_rate(_two({2e-3: 3.0, 4e-3: 2.9, 8e-3: None})) == 4e-3
    assert sweep.chosen_rate(_two(high, {**high, 8e-3: None})) == 4e-3
    nan = _two({2e-3: 3.0, 4e-3: 2.9, 8e-3: 2.8})
    nan[8e-3][1] = {"ce": float("nan"), "se": None}
    assert sweep.next_rate(nan) is None and sweep.chosen_rate(nan) == 4e-3
    assert sweep.chosen_rate(_two({2e-3: 3.0, 4e-3: None, 8e-3: 2.95})) == 8e-3
    # the grid first (every rate on both seeds), then its extension on both, then nothing
    assert sweep.runs_to_do(_two({4e-3: 2.9})) == [(2e-3, 0), (2e-3, 1), (8e-3, 0), (8e-3, 1)]
    assert sweep.runs_to_do(_two(high)) == [(pytest.approx(16e-3), 0), (pytest.approx(16e-3), 1)]
    one_seed = {r: {0: by[0]} for r, by in _two(high).items()}
    assert sweep.runs_to_do(one_seed) == [(2e-3, 1), (4e-3, 1), (8e-3, 1)]
    assert sweep.runs_to_do(ce) == []
    with pytest.raises(ValueError, match="not measured on seeds"):
        sweep.next_rate(_two({4e-3: 2.9}))


def test_a_row_whose_every_rate_diverged_has_no_rate_and_no_extension():
    """Issue 60, item 1: every run of a row diverged. The row has no rate (the table says
    why), the grid does not extend below it, the study is given no rate for it, and
    :func:`unrated_rows` names it for the scale command to refuse."""
    every = {r: None for r in (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)}
    table = sweep.sweep_table({FOX: _two(every), ALIBI: _two(
        {2e-3: 3.0, 4e-3: 2.9, 8e-3: 3.1})}, {FOX: 10, ALIBI: 10})
    fox = table[FOX]
    assert fox["rate"] is None and fox["edge"] is False
    assert fox["all_diverged"] is True and fox["done"] is True
    assert sweep.runs_to_do(_two({r: None for r in sweep.RATES})) == []    # no extension
    artefact = {"rule": sweep.RULE, "rows": table}
    assert sweep.chosen_rates(artefact, [FOX, ALIBI]) == {ALIBI: 4e-3}
    assert sweep.unrated_rows(artefact) == [FOX]
    assert sweep.sweep_complete(artefact)
    assert "none: every rate diverged" in summary(artefact)


def test_a_rate_ahead_of_4e3_by_less_than_its_margin_is_not_chosen():
    """Issue 61 ("a rate chosen on a tie"): 8e-3 lower than 4e-3 by less than the called
    margin of the paired difference over the dev windows keeps 4e-3; lower by much more on
    both seeds, it is chosen. The margin is t(0.975, n-1) x sd(per-window difference) /
    sqrt(n), on each seed."""
    near = _two({2e-3: 1.80, 4e-3: 1.700, 8e-3: 1.696, 16e-3: 1.75}, sd=0.05)
    table = sweep.sweep_table({ALIBI: near}, {ALIBI: 10})[ALIBI]
    assert table["rate"] == 4e-3 and table["done"] and table["called"]["0.008"] is False
    for seed in (0, 1):
        d = np.subtract(near[8e-3][seed]["window_ce"], near[4e-3][seed]["window_ce"])
        m = sweep.margin(near[4e-3][seed], near[8e-3][seed])
        assert m == pytest.approx(t_quantile(99) * d.std(ddof=1) / np.sqrt(100))
        assert 0.004 < m                                   # 8e-3 wins by 0.004: a tie
        assert table["dev_margin"]["0.008"][str(seed)] == pytest.approx(m)
        assert table["lead"]["0.008"][str(seed)] == pytest.approx(0.004)
    m0, m1 = (table["dev_margin"]["0.008"][s] for s in "01")
    assert f"0.008: +0.0040 ({m0:.4f}); +0.0040 ({m1:.4f})" in summary(
        {"seeds": [0, 1], "rows": {ALIBI: table}})
    far = _two({2e-3: 1.80, 4e-3: 1.700, 8e-3: 1.650, 16e-3: 1.75}, sd=0.05)
    assert all(1.700 - 1.650 > sweep.margin(far[4e-3][s], far[8e-3][s]) for s in (0, 1))
    assert sweep.sweep_table({ALIBI: far}, {ALIBI: 10})[ALIBI]["rate"] == 8e-3
    # without per-window CEs (a score kept before them), the bound t x (se + se): wider
    no_windows = {r: {s: {k: v for k, v in score.items() if k != "window_ce"}
                      for s, score in by.items()} for r, by in near.items()}
    bound = sweep.margin(no_windows[4e-3][0], no_windows[8e-3][0])
    assert bound == pytest.approx(t_quantile(99) * (near[4e-3][0]["se"] + near[8e-3][0]["se"]))
    assert bound > sweep.margin(near[4e-3][0], near[8e-3][0])
    assert sweep.chosen_rate(no_windows) == 4e-3


def test_the_sweep_scores_on_the_dev_slice_only(data, tmp_path, monkeypatch):
    """Every text a CE is computed on during the sweep is the dev slice (the validation
    split is never read: the runs skip their evaluation), and its windows lie inside it."""
    import catlib.measure.evaluate as ev

    read, real = [], ev.windows

    def windows(text, length, n, span_length=None):
        read.append((text, length, n, span_length))
        return real(text, length, n, span_length)
    monkeypatch.setattr(ev, "windows", windows)
    out = sweep.run_sweep(_small(), root=tmp_path, device="cpu", rows=[ALIBI], jobs=1,
                          echo=None, cap=0)
    corpus = load_corpus(split="90/10")
    dev = out["dev"]
    assert len(read) == 6 and out["rows"][ALIBI]["dev_ce"].keys() == {"0.002", "0.004", "0.008"}
    assert all(by.keys() == {"0", "1"} for by in out["rows"][ALIBI]["dev_ce"].values())
    assert (dev["start"], dev["chars"]) == (0, DEV_CHARS)          # the corpus' opening
    assert dev["start"] + dev["chars"] <= len(corpus.ids) - len(corpus.train) - len(corpus.val)
    for text, length, n, span in read:
        assert text.storage_offset() == dev["start"] and len(text) == DEV_CHARS
        assert torch.equal(text, corpus.dev) and span is None
        assert (length, n) == (dev["length"], dev["windows"]) == (32, (DEV_CHARS - 33) // 32)
        # the last window and the id after it end inside the slice
        assert (n - 1) * length + length + 1 <= DEV_CHARS


def _runs(dev_ce: dict) -> int:
    """The runs an artefact row's ``dev_ce`` (``{rate: {seed: CE}}``) holds."""
    return sum(len(by_seed) for by_seed in dev_ce.values())


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
        sweep.run_sweep(_small(), root=tmp_path / "runs", device="cpu", rows=[ALIBI],
                        jobs=1, echo=None, on_change=write, cap=0)
    kept = json.loads(partial_path(path).read_text())
    first = kept["rows"][ALIBI]["dev_ce"]
    assert _runs(first) == 2 and kept["rows"][ALIBI]["rate"] is None
    assert kept["complete"] is False and not path.exists()
    # its table beside it, saying it is not finished
    assert "; not finished._" in partial_path(path).with_suffix(".md").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    monkeypatch.setattr(sweep, "_sweep_job", real)
    said = []
    out = sweep.run_sweep(_small(), root=tmp_path / "runs", device="cpu", rows=[ALIBI],
                          jobs=1, echo=said.append, on_change=write, cap=0)
    done = [line for line in said if " at lr " in line]
    assert sum("reused run" in line for line in done) == 2
    assert sum("trained run" in line for line in done) == 4
    assert {line.split(": ")[0][-8:] for line in done} == {"(seed 0)", "(seed 1)"}
    again = out["rows"][ALIBI]["dev_ce"]
    assert all(again[r][s] == ce for r, by in first.items() for s, ce in by.items())
    assert _runs(again) == 6
    assert json.loads(path.read_text())["complete"] is True
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lr_sweep")) == [
        path.name, path.with_suffix(".md").name]         # the sweep in progress is gone


def test_a_rerun_keeps_the_complete_artefact_until_the_new_one_is_complete(data, tmp_path,
                                                                         monkeypatch):
    """Issue 60, item 7: a sweep rerun where nothing can be reused (as after a change to the
    code fingerprint: here a new root) and cut after its first run leaves the complete
    artefact as it was, the sweep in progress beside it; finishing replaces it."""
    path = tmp_path / "results" / "lr_sweep_smoke_cpu.json"
    sweep.run_sweep(_small(), root=tmp_path / "old", device="cpu", rows=[ALIBI], jobs=1,
                    echo=None, on_change=writer(path, {"profile": "smoke", "code": "old"}), cap=0)
    before = path.read_bytes(), path.with_suffix(".md").read_bytes()
    assert json.loads(before[0])["complete"] is True

    real, trained = sweep._sweep_job, []

    def cut_after_one(spec, steps=None, stored=False):
        if not stored:
            if len(trained) == 1:
                raise KeyboardInterrupt
            trained.append(spec["train"]["lr"])
        return real(spec, steps, stored)
    monkeypatch.setattr(sweep, "_sweep_job", cut_after_one)
    write = writer(path, {"profile": "smoke", "code": "new"})
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(_small(), root=tmp_path / "new", device="cpu", rows=[ALIBI],
                        jobs=1, echo=None, on_change=write, cap=0)
    assert (path.read_bytes(), path.with_suffix(".md").read_bytes()) == before
    progress = json.loads(partial_path(path).read_text())
    assert progress["complete"] is False and _runs(progress["rows"][ALIBI]["dev_ce"]) == 1

    monkeypatch.setattr(sweep, "_sweep_job", real)
    sweep.run_sweep(_small(), root=tmp_path / "new", device="cpu", rows=[ALIBI],
                    jobs=1, echo=None, on_change=write, cap=0)
    after = json.loads(path.read_text())
    assert after["complete"] is True and after["provenance"]["code"] == "new"
    assert _runs(after["rows"][ALIBI]["dev_ce"]) == 6 and not partial_path(path).exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.with_suffix(".md").name]


def test_a_sweep_is_complete_only_when_every_row_is_done(tmp_path):
    """Issue 60, item 7: one row done while another has no finished run yet is a sweep in
    progress (the table names every row of the sweep), never written over the complete
    artefact."""
    table = sweep.sweep_table({ALIBI: _two({2e-3: 3.0, 4e-3: 2.9, 8e-3: 3.1}),
                               ROPE: {}}, {ALIBI: 10, ROPE: 10})
    path = tmp_path / "lr_sweep_smoke_cpu.json"
    writer(path, {"profile": "smoke"})({"rows": table})
    assert not path.exists()
    assert json.loads(partial_path(path).read_text())["complete"] is False
    assert table[ROPE]["done"] is False and table[ROPE]["rate"] is None


def test_the_sweep_command_shares_its_argument_checks_without_the_scale_command():
    """Issue 60, item 12: ``book/sweep.py`` checks its arguments with the shared checkers of
    ``book/args.py``, not the scale command's; ``experiment/sweep.py`` takes ``TrainConfig``
    from its home."""
    import ast
    import catlib.book.sweep as command

    def imported(module) -> set:
        tree = ast.parse(Path(module.__file__).read_text())
        return {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names}
    assert not {m for m, _ in imported(command)} & {"scale", "catlib.book.scale"}
    assert ("args", "ArgsError") in imported(command)
    assert ("training.config", "TrainConfig") in imported(sweep)
    assert ("training.loop", "TrainConfig") not in imported(sweep)


def test_the_study_trains_each_row_at_the_sweeps_best_rate(data, tmp_path):
    """The sweep's artefact gives the study each row's rate (here the best of a tiny sweep,
    not the recipe's 4e-3); the study's artefact records it with the dev slice, and its run
    trained at it."""
    e = _small()
    path = tmp_path / "results" / "lr_sweep_smoke_cpu.json"
    write = writer(path, {"profile": "smoke", "git": {"commit": "abc"}})
    table = sweep.run_sweep(e, root=tmp_path / "sweep", device="cpu", rows=[ALIBI], jobs=1,
                            echo=None)
    best = table["rows"][ALIBI]["rate"]
    row = table["rows"][ALIBI]
    lead, margin = (row[k][sweep.rate_key(best)] for k in ("lead", "dev_margin"))
    assert best != e.train.lr and row["called"][sweep.rate_key(best)]
    assert all(lead[s] > margin[s] for s in ("0", "1"))                 # called on both
    others = {label: {"rate": 8e-3} for label in scale_plan.SCALE_ROWS if label != ALIBI}
    write({**table, "rows": {**table["rows"], **others}})

    args = argparse.Namespace(profile="smoke", corpus="tiny", budgets=[1], seeds=[0], jobs=1, device="cpu",
                              out=str(tmp_path / "results"), root=str(tmp_path), sweep=None,
                              recipe_rate=False)
    *_, rates, source = check_args(args)
    assert rates[ALIBI] == best and rates[FIRE] == 8e-3
    assert source["dev"] == table["dev"] and source["commit"] == "abc"
    out = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0,)},
                          rows=[ALIBI], jobs=1, echo=None, rates=rates, rate_source=source)
    assert out["rows"][ALIBI]["rate"] == best and out["rates"]["dev"] == table["dev"]
    (run,) = (open_run(p) for p in (tmp_path / "study").iterdir() if p.is_dir())
    assert run.train_config.lr == best
    recipe = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0,)},
                             rows=[ALIBI], jobs=1, echo=None)
    assert recipe["rows"][ALIBI]["rate"] == e.train.lr and recipe["rates"] == {"from": "recipe"}


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
    ({"provenance": {"profile": "smoke"}, "rows": {}, "rule": True},      # True: the sweep's
     f"has no row {ALIBI!r}: run `make sweep`"),
    ({"provenance": {"profile": "smoke"}, "rows": {ALIBI: {"rate": None}}, "rule": True},
     f"is not finished for row {ALIBI!r}"),
    # chosen by the lowest dev CE (the artefacts before issue 61): read by no study
    ({"provenance": {"profile": "smoke"},
      "rows": {label: {"rate": 8e-3} for label in scale_plan.SCALE_ROWS}},
     "was not made by the sweep's rule (keep 0.004 unless"),
])
def test_the_study_without_the_sweeps_rates_stops_naming_make_sweep(tmp_path, capsys, monkeypatch,
                                                                    artefact, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    path = Path("results/lr_sweep_smoke_cpu.json")
    if isinstance(artefact, dict) and artefact.get("rule") is True:
        artefact = {**artefact, "rule": sweep.RULE}
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
