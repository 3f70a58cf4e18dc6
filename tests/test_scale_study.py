"""Chapter 11's reading of the scale study: leads, the crossing, the moonshot and what is
missing, on small artefacts written here (the chapter never trains)."""
from __future__ import annotations

import json
import math

import pytest

from catlib.book import scale_study as ss
from catlib.common.verdicts import prose_problems
from catlib.experiment.scale import ALIBI, ALIBI_DEEP, EULER_DEEP, KERPLE, ROPE, SCALE_ROWS


def _study(ce: dict, plan=None) -> dict:
    """``ce``: {row: {budget: [CE per seed]}}, the same CE at both lengths."""
    plan = plan or {1: [0, 1], 4: [0, 1]}
    rows = {}
    for row, by_budget in ce.items():
        rows[row] = {"points": [{"budget": b, "steps": 10 * b, "seeds": plan[b][:len(v)],
                                 "train_flops": 1e12 * b, "seconds": 1.0,
                                 "ce": {"128": list(v), "5000": list(v)}}
                                for b, v in by_budget.items()]}
    return {"plan": {str(b): s for b, s in plan.items()}, "rows": rows}


# The CAT trails at 1x by 0.02 and leads at 4x by 0.06: the lead changes sign at a quarter
# of the way in log FLOPs from 1x to 4x: 4 ** 0.25.
CROSSING = _study({ALIBI: {1: [2.00, 2.00], 4: [1.70, 1.70]},
                   ALIBI_DEEP: {1: [2.05, 2.05], 4: [1.80, 1.80]},
                   KERPLE: {1: [2.02, 2.02], 4: [1.64, 1.64]}})


def test_the_lead_is_taken_against_the_best_baseline_and_crosses_in_log_flops():
    assert ss.leads(CROSSING, KERPLE, "128") == pytest.approx({1: -0.02, 4: 0.06})
    assert ss.best_baseline(CROSSING, 4, "128")[0] == ALIBI
    assert ss.crossing(CROSSING, KERPLE, "128") == pytest.approx(4 ** 0.25)
    assert ss.crossing(_study({ALIBI: {1: [2.0], 4: [1.7]}, KERPLE: {1: [1.9], 4: [1.6]}},
                              {1: [0], 4: [0]}), KERPLE, "128") is None


def test_the_moonshot_reads_every_seed_and_every_budget():
    met = _study({ALIBI: {1: [2.0, 2.1], 4: [1.7, 1.8]}, EULER_DEEP: {1: [1.9, 2.0], 4: [1.6, 1.7]}})
    assert ss.moonshot(met, EULER_DEEP) == {"met": True, "smallest": pytest.approx(0.1),
                                            "untested": []}
    # one seed short of the 0.05 lead at one budget: missed, with that lead
    one_short = _study({ALIBI: {1: [2.0, 2.1], 4: [1.7, 1.8]}, EULER_DEEP: {1: [1.9, 2.07], 4: [1.6, 1.7]}})
    got = ss.moonshot(one_short, EULER_DEEP)
    assert not got["met"] and got["smallest"] == pytest.approx(0.03)
    # a seed missing is untested, never met
    partial = _study({ALIBI: {1: [2.0], 4: [1.7]}, EULER_DEEP: {1: [1.0], 4: [1.0]}})
    assert ss.moonshot(partial, EULER_DEEP) == {"met": False, "smallest": None, "untested": [1, 4]}


def test_missing_names_rows_and_short_seeds():
    partial = _study({ALIBI: {1: [2.0], 4: [1.7]}, KERPLE: {1: [2.0, 2.0], 4: [1.6, 1.6]}})
    text = ss.missing(partial)
    absent = [ss.name(r) for r in SCALE_ROWS if r not in (ALIBI, KERPLE)]
    assert all(name in text for name in absent) and "On seed 0 only: the ALiBi baseline." in text
    assert ss.missing(_study({r: {1: [2.0, 2.0], 4: [1.6, 1.6]} for r in SCALE_ROWS})) == ""


def test_the_verdicts_read_like_sentences():
    labels = [ss.name(r) for r in SCALE_ROWS] + list(SCALE_ROWS)
    texts = [ss.answer(CROSSING), ss.lead_verdict(CROSSING, KERPLE),
             *[ss.budget_verdict(CROSSING, b) for b in ss.budgets(CROSSING)]]
    for text in texts:
        assert not prose_problems(text, labels), text
    assert "crossing near 1.4×" in ss.lead_verdict(CROSSING, KERPLE)
    # the abstract includes the answer: at most 180 words with its 105 of fixed text
    assert len(ss.answer_file_text({"cpu": CROSSING}, "cpu").split()) <= 75
    assert ss.budget_verdict(CROSSING, 4).startswith("At 4×, the KERPLE-prior CAT is lowest")


def test_load_studies_reads_the_artefacts_present(tmp_path):
    (tmp_path / "results").mkdir()
    assert ss.load_studies(tmp_path) == {}
    (tmp_path / "results" / "scale_cuda.json").write_text(json.dumps(CROSSING))
    assert list(ss.load_studies(tmp_path)) == ["cuda"]
    assert ss.lengths(CROSSING) == ["128", "5000"] and ss.budgets(CROSSING) == [1, 4]
    assert math.isclose(ss._unit_flops(CROSSING), 1e12)
    assert ROPE not in CROSSING["rows"]
