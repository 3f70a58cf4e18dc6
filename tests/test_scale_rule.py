"""The book's rule on the scale study's artefact (issue 60 item 3): a margin whose window
error is not known is not called, however clearly its seeds agree (the rule never gets
looser where less is known), and the window term takes Student's t on the windows' degrees
of freedom, not the normal quantile."""
from __future__ import annotations

import numpy as np
import pytest

from catlib.book import scale_readings as sr
from catlib.book.scale_study import rule_text
from catlib.common.verdicts import interval, t_quantile
from catlib.experiment.scale_plan import ALIBI, ALIBI_DEEP, EULER, ROPE

SEEDS = [0, 1, 2]


def _study(lead: float, spread=(0.0, 0.002, -0.002), se=None, windows=None) -> dict:
    """The baselines and the Euler CAT at 1×, three seeds, lengths 128 and 5000; the Euler
    CAT below the ALiBi baseline by ``lead`` (plus ``spread`` per seed). ``se``: {length:
    each point's standard error} where stored; ``windows``: {length: n} where recorded."""
    base = {ALIBI: 2.0, ALIBI_DEEP: 2.1, ROPE: 2.2, EULER: 2.0 - lead}
    rows = {}
    for row, ce in base.items():
        p = {"budget": 1, "steps": 10, "seeds": SEEDS, "train_flops": 1e12, "seconds": 1.0,
             "ce": {L: [ce + (d if row == EULER else 0.0) for d in spread] for L in ("128", "5000")}}
        if se is not None:
            p["se"] = {L: [v] * len(SEEDS) for L, v in se.items()}
        if windows is not None:
            p["windows"] = dict(windows)
        rows[row] = {"points": [p]}
    return {"plan": {"1": SEEDS}, "rows": rows}


def test_a_margin_without_a_window_error_is_not_called_on_its_seeds_alone():
    """On 364f0a7 ``difference`` gave ``window=None`` for an artefact without standard
    errors and the seeds alone called a lead of 0.05 over a seed SD of 0.002."""
    bare = _study(0.05)
    seeds_only = sr.row_leads(bare, EULER, ALIBI)[1]
    assert seeds_only["diff"].mean(0) == pytest.approx([0.05, 0.05])
    assert not seeds_only["called"].any()
    assert np.isnan(seeds_only["window"]).all()
    assert not sr.lead_at(bare, EULER, 1)["called"].any()
    assert not sr.lowest(bare, 1)["called"].any()
    # not called is not "the same" either
    from catlib.common.verdicts import NOT_RESOLVED, reading     # (new in issue 61)

    assert reading(seeds_only["diff"], seeds_only["window"],
                   window_df=seeds_only["window_df"]) == [NOT_RESOLVED] * 2
    # standard errors at one length only: that length is judged, the other is not called,
    # the same way as an artefact with none
    half = _study(0.05, se={"128": 0.001}, windows={"128": 820, "5000": 21})
    assert sr.row_leads(half, EULER, ALIBI)[1]["called"].tolist() == [True, False]
    assert sr.lead_at(half, EULER, 1)["called"].tolist() == [True, False]
    # the moonshot is not met on seeds alone
    assert not sr.moonshot(_study(0.5), EULER)["met"]


def test_the_window_term_takes_t_on_the_windows_degrees_of_freedom():
    """21 windows at 5000: t(0.975, 20) = 2.086, not 1.96. The seeds agree exactly, so the
    half-width is the window term alone; a lead of 0.0285 over a window error of
    sqrt(2) · 0.01 = 0.01414 is called by 1.96 (0.0277) and not by 2.086 (0.0295)."""
    study = _study(0.0285, spread=(0.0, 0.0, 0.0), se={"128": 0.01, "5000": 0.01},
                   windows={"128": 820, "5000": 21})
    g = sr.row_leads(study, EULER, ALIBI)[1]
    w = 2 ** 0.5 * 0.01
    assert g["window"] == pytest.approx([w, w])
    assert g["called"].tolist() == [True, False]
    assert g["window_df"].tolist() == [819, 20]
    _, half = interval(g["diff"], g["window"], g["window_df"])
    assert half[1] == pytest.approx(2.086 * w, rel=1e-6)
    assert half[0] == pytest.approx(t_quantile(819) * w, rel=1e-6)


def test_paired_windows_give_their_own_degrees_of_freedom_and_an_unrecorded_count_the_fewest():
    study = _study(0.0285, spread=(0.0, 0.0, 0.0), se={"128": 0.01, "5000": 0.01})
    # no number of windows recorded: one degree of freedom, the widest a standard error allows
    g = sr.row_leads(study, EULER, ALIBI)[1]
    assert not g["called"].any() and g["window_df"].tolist() == [1, 1]
    assert interval(g["diff"], g["window"], g["window_df"])[1] == pytest.approx(
        [12.706 * 2 ** 0.5 * 0.01] * 2, rel=1e-6)
    # each window's CE kept: the paired error, on windows − 1 degrees of freedom
    rng = np.random.default_rng(0)
    hard = {L: rng.normal(2.0, 0.3, n) for L, n in (("128", 40), ("5000", 21))}
    for row in (EULER, ALIBI):
        p = sr.point(study, row, 1)
        p["window_ce"] = {L: (h + rng.normal(0, 0.01, len(h))).tolist() for L, h in hard.items()}
    g = sr.row_leads(study, EULER, ALIBI)[1]
    assert g["window_df"].tolist() == [39, 20]
    a, b = (sr.point(study, r, 1)["window_ce"]["5000"] for r in (ALIBI, EULER))
    assert g["window"][1] == pytest.approx(np.std(np.subtract(a, b), ddof=1) / 21 ** 0.5)


def test_the_rule_says_a_margin_without_a_window_error_is_not_called():
    text = rule_text(None)
    assert "t(0.975, windows − 1)" in text and "1.96" not in text
    assert "not called, whatever the seeds say" in text
    bare = rule_text(None, errors=False)
    assert "keep no standard error, so no margin is called" in bare
    assert "bounded from each row's own standard error" not in bare
