"""Rates by a rule that resists ties (issue 61, item 5): the sweep trains every row at every
rate on seeds 0 and 1, a row keeps 4e-3 unless another rate leads it by a called margin on
both seeds, the study refuses a sweep scored on another dev slice, and seed 1's sweep runs
are the study's 1x branches of seed 1 as seed 0's are of seed 0.

The rule's tests run the sweep itself with a job that trains nothing (:func:`_scored`:
each run's dev CE from a table, per-window CEs with noise of their own); the last trains
smoke-sized runs of 4 steps: seconds."""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catlib.book import profiles
from catlib.book.scale import main as scale_main
from catlib.book.sweep import summary
from catlib.experiment import scale, scale_plan, sweep
from catlib.experiment.scale_plan import ALIBI
from catlib.runs import open_run

WINDOWS, NOISE = 100, 0.05     # a lead of 0.05 is called (margin about 0.014), 0.004 is not
CE: dict = {}                  # {(rate, seed): dev CE} the fake job reads; 1.9 elsewhere


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _small(steps=4, batch=2):
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=batch))


def _scored(spec: dict, steps=None, stored: bool = False) -> dict:
    """A sweep job that trains nothing: the run of ``spec`` (its rate and seed) scored
    ``CE[rate, seed]`` on the dev slice, over :data:`WINDOWS` windows whose difficulty is
    shared by every run of the seed (it cancels in a paired difference) plus noise of
    :data:`NOISE` of the run's own."""
    rate, seed = spec["train"]["lr"], spec["train"]["seed"]
    ce = CE.get((round(rate, 9), seed), 1.9)
    hard = np.random.default_rng(seed).normal(0, 0.3, WINDOWS)
    w = hard + NOISE * np.random.default_rng([seed, round(rate * 1e6)]).normal(0, 1, WINDOWS)
    w = ce + w - w.mean()
    return {"name": f"run-{rate:g}-{seed}", "reused": stored, "ce": ce,
            "se": float(w.std(ddof=1) / np.sqrt(WINDOWS)), "windows": WINDOWS,
            "window_ce": w.tolist(), "seconds": 1.0}


def _sweep_with(monkeypatch, table: dict, **kw) -> dict:
    """The sweep of ALiBi with runs scored by ``table`` (``{(rate, seed): CE}``)."""
    monkeypatch.setattr(sweep, "_sweep_job", _scored)
    monkeypatch.setattr(sys.modules[__name__], "CE", {(round(r, 9), s): v for (r, s), v in table.items()})
    return sweep.run_sweep(_small(), root="unused", device="cpu", rows=[ALIBI], jobs=1,
                           echo=None, **kw)


def _both(ce: dict, seed_1: dict) -> dict:
    """``{(rate, seed): CE}``: ``ce`` on seed 0, ``ce`` updated by ``seed_1`` on seed 1."""
    return {**{(r, 0): v for r, v in ce.items()}, **{(r, 1): v for r, v in {**ce, **seed_1}.items()}}


def test_a_rate_that_wins_by_a_called_margin_on_seed_0_only_keeps_4e3(data, monkeypatch):
    """8e-3 leads 4e-3 by 0.05 on seed 0 (called: the margin is about 0.014) and by 0.004
    on seed 1 (a tie): the row keeps 4e-3, and the grid does not extend beyond 8e-3. A sweep
    on seed 0 alone took 8e-3."""
    grid = {2e-3: 1.80, 4e-3: 1.70, 8e-3: 1.65, 16e-3: 1.75}
    row = _sweep_with(monkeypatch, _both(grid, {8e-3: 1.696}))["rows"][ALIBI]
    assert row["rate"] == 4e-3 and row["done"] and not row["edge"]
    assert row["dev_ce"].keys() == {"0.002", "0.004", "0.008"}            # no extension
    assert row["called"]["0.008"] is False
    lead, margin = row["lead"]["0.008"], row["dev_margin"]["0.008"]
    assert lead["0"] == pytest.approx(0.05) and lead["0"] > margin["0"]   # called on seed 0
    assert lead["1"] == pytest.approx(0.004) and lead["1"] < margin["1"]  # a tie on seed 1


def test_a_rate_that_wins_by_a_called_margin_on_both_seeds_is_chosen(data, monkeypatch):
    """8e-3 leads 4e-3 by 0.05 on both seeds: chosen. It is the grid's edge, so 16e-3 is
    tried on both seeds; 16e-3 leads by more on seed 0 but ties on seed 1, so 8e-3 stays
    (a sweep on seed 0 alone took 16e-3). The page's table gives the rate, the dev CE per
    seed and 8e-3's lead and margin per seed."""
    grid = {2e-3: 1.80, 4e-3: 1.70, 8e-3: 1.65, 16e-3: 1.62, 32e-3: 1.9}
    table = _sweep_with(monkeypatch, _both(grid, {16e-3: 1.698}))
    row = table["rows"][ALIBI]
    assert row["rate"] == 8e-3 and row["done"] and not row["edge"]
    assert row["dev_ce"]["0.016"] == {"0": 1.62, "1": 1.698}               # tried on both
    assert "0.032" not in row["dev_ce"]
    assert row["called"] == {"0.002": False, "0.008": True, "0.016": False}
    assert row["mean_dev_ce"]["0.008"] == pytest.approx(1.65)
    lead, margin = row["lead"]["0.008"], row["dev_margin"]["0.008"]
    assert all(lead[s] == pytest.approx(0.05) and lead[s] > margin[s] for s in "01")
    text = summary(table)
    assert f"0.008: +0.0500 ({margin['0']:.4f}); +0.0500 ({margin['1']:.4f})" in text
    assert "1.6500 / 1.6500" in text and "seed 0 / seed 1" in text


OLD_DEV = {"split": "90/10", "start": 953854, "chars": 50000, "length": 128, "windows": 389}


def test_a_sweep_of_the_old_dev_slice_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """A sweep artefact whose dev slice starts at 953,854 (the training part's end, before
    issue 61 moved it to the corpus' opening) gives the study no rate: one line naming the
    slice and `make sweep`, from ``chosen_rates`` and from ``make scale`` (exit 2, nothing
    written)."""
    rows = {label: {"rate": 4e-3, "done": True} for label in scale_plan.swept_rows()}
    stale = {"rule": sweep.RULE, "dev": OLD_DEV, "rows": rows}
    with pytest.raises(sweep.SweepError) as e:
        sweep.chosen_rates(stale, list(scale_plan.swept_rows()))
    said = str(e.value)
    assert len(said.splitlines()) == 1 and "953854" in said and "run `make sweep`" in said
    # today's slice is read; windows of another length are refused where the study says
    today = {**stale, "dev": {**OLD_DEV, "start": 0}}
    assert sweep.chosen_rates(today, [ALIBI], length=128) == {ALIBI: 4e-3}
    with pytest.raises(sweep.SweepError, match="length 128, now 256"):
        sweep.chosen_rates(today, [ALIBI], length=256)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    path = Path("results/lr_sweep_smoke_cpu.json")
    path.write_text(json.dumps({**stale, "provenance": {"profile": "smoke"}}))

    def never(*a, **k):
        raise AssertionError("the study started")
    monkeypatch.setattr("catlib.book.scale.run_study", never)
    code = scale_main(["--profile", "smoke", "--root", "runs"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "953854" in err and "make sweep" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_the_sweeps_plan_holds_seeds_0_and_1_for_every_row_and_rate(data, monkeypatch):
    """The sweep's first round is every row of the study at every rate of the grid on
    seeds 0 and 1, each run the study's configuration of that seed; its progress line
    counts all of them and gives the time left."""
    planned, said = [], []

    def slow_job(spec, steps=None, stored=False):
        if stored:
            return None                     # nothing stored: every run goes through the pool
        planned.append((spec["train"]["lr"], spec["train"]["seed"], (spec["model"], spec["train"])))
        time.sleep(0.01)
        return {**_scored(spec), "ce": 1.9, "window_ce": [1.9] * WINDOWS, "se": 0.0}
    monkeypatch.setattr(sweep, "_sweep_job", slow_job)
    e = _small()
    out = sweep.run_sweep(e, root="unused", device="cpu", jobs=1, echo=said.append,
                          progress_every=0.05)
    n = len(scale_plan.swept_rows()) * len(sweep.RATES) * 2
    assert sorted((lr, seed) for lr, seed, _ in planned) == sorted(
        (r, s) for r in sweep.RATES for s in (0, 1) for _ in scale_plan.swept_rows())
    assert len(planned) == n == 78                                 # ties: no extension
    for label in scale_plan.swept_rows():
        for rate, seed in itertools.product(sweep.RATES, (0, 1)):
            model, train, _ = scale.scale_configs(label, e, seed, [1], rate)
            assert (rate, seed, (model.to_dict(), train.to_dict())) in planned, (label, rate, seed)
    assert out["seeds"] == [0, 1] and all(row["rate"] == 4e-3 for row in out["rows"].values())
    assert any(line.startswith(f"training: {n}/{n} runs done") for line in said), said[-3:]
    assert any(f"/{n} runs done" in line and "left" in line for line in said)
    assert sum(line.endswith(f"(seed 1): trained run run-{r:g}-1") for line in said
               for r in sweep.RATES) == n // 2


def test_the_study_takes_seed_1s_sweep_run_as_its_1x_branch_too(data, tmp_path):
    """The sweep's runs of seed 1 lie in the same folder as seed 0's, named as any run
    (``<variant>-<config hash[:8]>``): the study at 1x and 2x on seeds 0 and 1 takes both
    1x branches from the sweep's folder (the same configuration hash) and trains only its
    2x runs."""
    e = _small()
    table = sweep.run_sweep(e, root=tmp_path / "lr-sweep", device="cpu", rows=[ALIBI],
                            jobs=1, echo=None, cap=0)
    rate = table["rows"][ALIBI]["rate"]
    swept = {open_run(p).hash: p for p in (tmp_path / "lr-sweep").iterdir() if p.is_dir()}
    assert len(swept) == 6                                         # 3 rates x 2 seeds
    out = scale.run_study(e, root=tmp_path / "study", device="cpu", plan={1: (0, 1), 2: (0, 1)},
                          rows=[ALIBI], jobs=1, echo=None, rates={ALIBI: rate},
                          runs_from=[tmp_path / "lr-sweep"])
    branches = sorted(p for p in (tmp_path / "study").iterdir() if "-to-" in p.name)
    assert sorted(out["borrowed_runs"]) == [p.name for p in branches] and len(branches) == 2
    seeds = set()
    for branch in branches:
        run = open_run(branch)
        assert run.hash in swept and run.train_config.lr == rate
        seeds.add(run.train_config.seed)
    assert seeds == {0, 1}
