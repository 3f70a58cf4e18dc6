"""Issue 62, item 2: the oracle (rows trained on windows of 512) is trained by the study
to 1x only, at its twin's swept rate, never by the sweep, and chapter 11 reads it apart
from the rivals: its context gain beyond 128, called above zero or not."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

from catlib.book import scale_oracle as so
from catlib.book import scale_readings as sr
from catlib.book.profiles import experiment
from catlib.experiment import scale as sc, scale_plan
from catlib.experiment.scale_plan import ALIBI_DEEP, EULER, ORACLE_ALIBI, ORACLE_EULER
from catlib.experiment.scale_records import assemble_rows

sys.path.insert(0, str(Path(__file__).parent))
from scale_new_schema import PLAN, new_study  # noqa: E402


def test_the_oracle_trains_on_windows_of_512_with_the_studys_characters_per_step():
    exp = experiment("cpu")
    for oracle, twin in scale_plan.ORACLES.items():
        model, train, steps = sc.scale_configs(oracle, exp, 0, (1,))
        t_model, t_train, _ = sc.scale_configs(twin, exp, 0, (1,))
        assert train.seq == scale_plan.ORACLE_TIMES * t_train.seq == 512
        # 1,280 characters a step at 128: two windows of 512 is the nearest batch
        assert train.batch == 2 and abs(train.batch * train.seq - t_train.batch * t_train.seq) <= train.seq / 2
        assert list(steps) == [1]
    alibi, _, _ = sc.scale_configs(ORACLE_ALIBI, exp, 0, (1,))
    euler, _, _ = sc.scale_configs(ORACLE_EULER, exp, 0, (1,))
    assert alibi.blocks == 4 and euler.train_length == 512


def test_the_oracle_is_planned_at_1x_only_and_never_swept():
    plan, extra = scale_plan.plan_for("cpu"), scale_plan.extra_seeds_for("cpu")
    for oracle in scale_plan.ORACLES:
        assert scale_plan.row_plan(plan, extra, oracle) == {1: (0, 1, 2)}
        assert oracle in scale_plan.SCALE_ROWS and oracle not in scale_plan.swept_rows()
    assert scale_plan.row_plan(plan, extra, ALIBI_DEEP) == {1: (0, 1, 2), 2: (0, 1, 2)}


def test_each_oracle_row_takes_its_twins_swept_rate():
    rates = {ALIBI_DEEP: 2e-3, EULER: 8e-3}
    got = scale_plan.with_oracle_rates(rates)
    assert got[ORACLE_ALIBI] == 2e-3 and got[ORACLE_EULER] == 8e-3
    assert scale_plan.with_oracle_rates(None) is None
    assert ORACLE_EULER not in scale_plan.with_oracle_rates({ALIBI_DEEP: 2e-3})


def _with_oracle(gain: float) -> dict:
    """The synthetic study with both oracle rows at 1x on seeds 0-2: the Euler CAT's
    records, each target read far ``gain`` nats better than read with 128 characters."""
    study = new_study()
    per_seed = dict(study["per_seed"])
    rng = np.random.default_rng(7)
    for oracle in scale_plan.ORACLES:
        per_seed[oracle] = {}
        for s in ("0", "1", "2"):
            rec = copy.deepcopy(study["per_seed"][EULER][s]["budgets"]["1"])
            g = gain + rng.normal(0, 0.002, len(rec["context_gain"]["full"]))
            rec["context_gain"]["sliding"] = (np.array(rec["context_gain"]["full"]) + g).tolist()
            rec["context_gain"]["gain"] = g.tolist()
            per_seed[oracle][s] = {"run": f"{oracle}-{s}", "budgets": {"1": rec}}
    plans = {row: scale_plan.row_plan(PLAN, study["extra_seeds"] and {
        r: {int(b): tuple(v) for b, v in e.items()} for r, e in study["extra_seeds"].items()}, row)
        for row in per_seed}
    study["per_seed"], study["rows"] = per_seed, assemble_rows(per_seed, plans, list(per_seed))
    return study


def test_chapter_11_reads_the_oracle_apart_from_the_rivals():
    study = sr.split_oracle(_with_oracle(0.05))
    assert not set(scale_plan.ORACLES) & set(study["rows"])
    assert not set(scale_plan.ORACLES) & set(study["per_seed"])
    assert set(study["oracle"]) == set(scale_plan.ORACLES)
    assert sr.split_oracle(new_study())["oracle"] == {}


@pytest.mark.parametrize("gain, uses", [(0.05, True), (0.0, False)])
def test_the_oracles_gain_is_called_above_zero_only_where_its_interval_is(gain, uses):
    study = sr.split_oracle(_with_oracle(gain))
    found = {f["row"]: f for f in so.oracle_rows(study)}
    assert list(found) == [ALIBI_DEEP, ORACLE_ALIBI, EULER, ORACLE_EULER]
    for oracle in scale_plan.ORACLES:
        assert found[oracle]["uses"] is uses
        assert found[oracle]["gain"][0] == pytest.approx(gain, abs=0.005)
    text = so.oracle_text(study)
    assert ("There is context to use beyond 128" in text) is uses
    assert ("does not get worse" in text) is not uses
    table = so.oracle_table(study)
    lines = table.splitlines()[2:]
    assert len(lines) == 4
    assert all(line.endswith("| yes |" if uses else "| no |") for line in lines[1::2])


def test_a_study_without_the_oracle_says_so():
    study = sr.split_oracle(new_study())
    assert so.oracle_table(study) == ""
    assert "holds no oracle" in so.oracle_text(study)


def test_an_oracle_behind_its_twins_does_not_say_there_is_nothing_to_read():
    """Seen on both corpora: trained on fewer, longer windows for the same FLOPs, both oracle
    rows read worse than their twins; their gain of zero then says that these models do not
    read beyond 128, not that there is nothing there (the earlier sentence overclaimed)."""
    study = sr.split_oracle(_with_oracle(0.0))
    for oracle in scale_plan.ORACLES:
        for p in study["oracle"][oracle]["points"]:
            p["ce"] = {L: [c + 0.5 for c in v] for L, v in p["ce"].items()}
    text = so.oracle_text(study)
    assert "both read worse than their twins trained at 128" in text
    assert "not that there is nothing there to read" in text
    assert "little or nothing to read" not in text
