"""Chapter 11's reading of the scale study: leads over the best baseline on a common seed
set, the one rule that calls a margin, crossings, the moonshot and what is missing, on small artefacts
written here (the chapter never trains)."""
from __future__ import annotations

import json
import math

import matplotlib
import pytest

from catlib.book import scale_study as ss
from catlib.common.verdicts import prose_problems, sentences
from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BASELINE_ROWS, CONTROL, EULER,
                                          EULER_DEEP, KERPLE, ROPE, SCALE_ROWS, swept_rows)

matplotlib.use("Agg")
LABELS = [ss.name(r) for r in SCALE_ROWS] + list(SCALE_ROWS)


def _study(ce: dict, plan=None) -> dict:
    """``ce``: {row: {budget: [CE per seed]}}, the same CE at both lengths; a row's seeds at
    a budget are the plan's first ones. Every point reads 100 windows per length with no
    window-sampling error (standard error 0: the rule's seed term alone decides)."""
    plan = plan or {1: [0, 1], 4: [0, 1]}
    rows = {}
    for row, by_budget in ce.items():
        rows[row] = {"points": [{"budget": b, "steps": 10 * b, "seeds": plan[b][:len(v)],
                                 "train_flops": 1e12 * b, "seconds": 1.0,
                                 "ce": {"128": list(v), "5000": list(v)},
                                 **_no_window_error(["128", "5000"], len(v))}
                                for b, v in by_budget.items()]}
    return {"plan": {str(b): s for b, s in plan.items()}, "rows": rows}


def _no_window_error(lengths, seeds: int) -> dict:
    """A point's window record with no sampling error: 100 windows and a standard error of
    0 per seed at each length."""
    return {"se": {L: [0.0] * seeds for L in lengths}, "windows": {L: 100 for L in lengths}}


def _baselines(at1=(2.00, 2.01), at4=(1.70, 1.71), plan=None, **rows) -> dict:
    """Every baseline row (ALiBi lowest), plus ``rows``."""
    ce = {ALIBI: {1: list(at1), 4: list(at4)},
          ALIBI_DEEP: {1: [a + 0.05 for a in at1], 4: [a + 0.1 for a in at4]},
          ROPE: {1: [a + 0.3 for a in at1], 4: [a + 0.3 for a in at4]}}
    return _study({**ce, **rows}, plan)


# The CAT trails at 1x by 0.02 and leads at 4x by 0.06 (in both seeds): the lead changes
# sign a quarter of the way in log FLOPs from 1x to 4x: 4 ** 0.25.
CROSSING = _baselines(**{KERPLE: {1: [2.02, 2.03], 4: [1.64, 1.65]}})


def test_the_lead_is_taken_against_the_best_baseline_and_crosses_in_log_flops():
    assert ss.leads(CROSSING, KERPLE, "128") == pytest.approx({1: -0.02, 4: 0.06})
    assert ss.lead_at(CROSSING, KERPLE, 4)["best"] == [ALIBI, ALIBI]
    cross = ss.crossing(CROSSING, KERPLE, "128")
    assert cross["at"] == pytest.approx(4 ** 0.25)
    assert cross["seeds"] == pytest.approx([4 ** 0.25, 4 ** 0.25])
    text = ss.lead_verdict(CROSSING, KERPLE)
    assert "trails the ALiBi baseline by 0.020 at 1×, then leads it by 0.060 at 4×" in text
    assert "crosses near 1.4× (2 of 2 seeds cross" in text


def test_no_crossing_gives_no_line_and_no_crossing_words():
    behind = _baselines(**{KERPLE: {1: [2.10, 2.11], 4: [1.75, 1.76]}})
    assert ss.crossing(behind, KERPLE, "128") is None
    text = ss.lead_verdict(behind, KERPLE) + ss.answer(behind)
    assert "cross" not in text
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2)
    assert ss.draw(behind, axes) is False
    assert ss.draw(CROSSING, axes) is True
    plt.close(fig)


def test_the_direction_is_said_in_words_with_the_row_compared_and_every_budget():
    """The lead sentences of the review: a CAT *behind* reads "trails", names the baseline
    it trails, and gives every budget's value where the path is not monotone."""
    plan = {1: [0, 1], 2: [0, 1], 4: [0, 1], 8: [0, 1]}
    base = {ALIBI: {b: [2.0 - 0.05 * k] * 2 for k, b in enumerate(plan)},
            ALIBI_DEEP: {b: [2.5] * 2 for b in plan}, ROPE: {b: [2.5] * 2 for b in plan}}
    deficit = {1: 0.187, 2: 0.129, 4: 0.098, 8: 0.124}       # shrinks, then grows
    cat = {b: [base[ALIBI][b][0] + d] * 2 for b, d in deficit.items()}
    study = _study({**base, KERPLE: cat}, plan)
    text = ss.lead_verdict(study, KERPLE)
    assert ("the KERPLE-prior CAT trails the ALiBi baseline by 0.187 at 1×, 0.129 at 2×, "
            "0.098 at 4× and 0.124 at 8×") in text
    assert "leads" not in text and "shrinks" not in text
    # the answer says which row is lowest over the budgets: here the ALiBi baseline, by the
    # CAT's deficit (it is the next row at every budget), at 128 and beyond apart
    assert ss.answer(study) == ("At 1×, 2×, 4× and 8× (2 seeds), the ALiBi baseline is lowest at "
                                "every length, by 0.098-0.187 nats at 128 and 0.098-0.187 at 5000, "
                                "over the KERPLE-prior CAT (called).")
    assert not prose_problems(text, LABELS)


def _seeded(diffs, se=None) -> dict:
    """Three seeds, budgets 1 and 4: the Euler CAT's lead over the ALiBi baseline is
    ``diffs[budget]`` per seed at both lengths; every point stores ``se`` where given."""
    plan = {1: [0, 1, 2], 4: [0, 1, 2]}
    alibi = {b: [2.0 / b ** 0.1] * 3 for b in plan}
    study = _study({ALIBI: alibi, ALIBI_DEEP: {b: [3.0] * 3 for b in plan},
                    ROPE: {b: [3.0] * 3 for b in plan},
                    EULER: {b: [a - d for a, d in zip(alibi[b], diffs[b])] for b in plan}}, plan)
    for t in study["rows"].values():
        for p in t["points"]:
            if se is not None:
                p["se"] = {L: [se] * 3 for L in p["ce"]}
    return study


def test_one_rule_calls_every_scale_verdict_and_a_crossing_with_an_uncalled_side_is_not_drawn():
    """Issue 53: per-seed margins +0.017, +0.002, +0.017 were "beyond the spread" (mean 0.012
    over a seed SD of 0.009) and their sign change drawn as a crossing; by the paired 95 %
    interval they are not called, so the order between 1× and 4× is not resolved, and
    nothing is drawn. A margin called on its seeds is undone by a wide window error."""
    import matplotlib.pyplot as plt
    wide = _seeded({1: [0.017, 0.002, 0.017], 4: [-0.05, -0.06, -0.055]})
    assert ss.crossings(wide, EULER, "128") == [{"between": (1, 4), "at": None, "seeds": [None] * 3}]
    assert ss.crossing(wide, EULER, "128") is None
    text = ss.lead_verdict(wide, EULER)
    assert "leads the ALiBi baseline by 0.012 at 1× (not called), then trails it by 0.055 at 4×" in text
    assert "between 1× and 4× the order is not resolved" in text and "cross" not in text
    wide["rows"][KERPLE] = wide["rows"].pop(EULER)       # the figure draws the KERPLE-prior CAT's
    fig, axes = plt.subplots(1, 2)
    assert ss.draw(wide, axes) is False
    clear = _seeded({1: [0.016, 0.014, 0.015], 4: [-0.05, -0.06, -0.055]})
    clear["rows"][KERPLE] = clear["rows"].pop(EULER)
    assert ss.draw(clear, axes) is True
    plt.close(fig)
    # the window term: the same seeds with each row's standard error 0.01 at every point
    assert ss.lead_at(_seeded({1: [0.016, 0.014, 0.015], 4: [0.05] * 3}), EULER, 1)["called"].all()
    blurred = ss.lead_at(_seeded({1: [0.016, 0.014, 0.015], 4: [0.05] * 3}, se=0.01), EULER, 1)
    assert blurred["window"] == pytest.approx([2 ** 0.5 * 0.01] * 2) and not blurred["called"].any()
    # one seed: never called
    one = _baselines(at1=(2.00,), at4=(1.70,), plan={1: [0], 4: [0]}, **{EULER: {1: [1.90], 4: [1.60]}})
    assert ss.budget_verdict(one, 1).endswith("(not called: one seed).")


def test_a_budget_with_fewer_seeds_is_off_the_path_and_said_so():
    """The CPU plan: 8x on seed 0 only. Means, leads and crossings are taken on the seeds
    of the smallest budget; 8x is named apart, and its column says it holds one seed."""
    plan = {1: [0, 1, 2], 4: [0, 1, 2], 8: [0]}
    study = _study({ALIBI: {1: [2.0] * 3, 4: [1.7] * 3, 8: [1.50]},
                    ALIBI_DEEP: {1: [2.1] * 3, 4: [1.8] * 3, 8: [1.60]},
                    ROPE: {1: [2.2] * 3, 4: [1.9] * 3, 8: [1.70]},
                    EULER: {1: [1.95] * 3, 4: [1.65] * 3, 8: [1.60]}}, plan)
    assert ss.lead_path(study, EULER) == ([0, 1, 2], [1, 4])
    assert ss.crossing(study, EULER, "128") is None        # the 8x sign change is one seed
    assert "8× (seed 0 only)" in ss.lead_table(study, "128")
    assert "Not on this path, for want of seeds: 8×." in ss.lead_verdict(study, EULER)
    assert ss.budget_verdict(study, 8).startswith("At 8× (seed 0 only), the ALiBi baseline")
    assert ss.answer(study) == (
        "At 1× and 4× (3 seeds), the Euler CAT is lowest at every length, by 0.050 nats at 128 "
        "and 0.050 at 5000, over the ALiBi baseline (called). At 8× (seed 0 only), the ALiBi "
        "baseline is lowest at every length, by 0.10 nats at 128 and 0.10 at 5000, over the deep "
        "ALiBi baseline (not called: one seed).")


def test_the_lead_at_the_training_length_and_beyond_it_are_said_apart_with_their_rows():
    """Issue 53: "by 0.007-0.069" mixed a lead over RoPE at 128 with one over ALiBi beyond."""
    plan = {1: [0, 1, 2], 2: [0, 1, 2]}
    ls = ("128", "512", "5000")
    ce = {ALIBI: (2.00, 1.95, 1.90), ALIBI_DEEP: (2.10, 2.05, 2.00), ROPE: (1.96, 2.5, 3.0),
          EULER: (1.95, 1.88, 1.83)}
    rows = {r: {"points": [{"budget": b, "steps": b, "seeds": plan[b], "train_flops": 1e12 * b,
                            "seconds": 1.0, "ce": {L: [v - 0.01 * b + 0.001 * s for s in plan[b]]
                                                   for L, v in zip(ls, vs)},
                            **_no_window_error(ls, len(plan[b]))} for b in plan]}
            for r, vs in ce.items()}
    study = {"plan": {str(b): s for b, s in plan.items()}, "rows": rows}
    text = ss.answer(study)
    assert text == ("At 1× and 2× (3 seeds), the Euler CAT is lowest at every length, by 0.010 "
                    "nats at 128 over the RoPE baseline and 0.070 beyond 128 over the ALiBi "
                    "baseline (both called).")
    assert not prose_problems(text, LABELS)


def test_verdicts_on_edge_cases_say_why_in_words():
    """Issue 52's edge cases: a budget where no seed is shared by every row, NaN CEs, a row
    missing a length (KeyError '5000'), a kernel control measured at one budget only."""
    study = _baselines(**{EULER: {1: [1.90, 1.91], 4: [1.60, 1.61]},
                          CONTROL: {1: [1.95, 1.96]}})
    # the control at 1x only: its clause names that budget, not "every budget"
    clause = ss.kernel_clause(study)
    assert "at every length at 1× (its control's only budget)" in clause and "every budget" not in clause
    # no seed shared at 4x: said so, and the next budget's sentence has its verb
    plan = {1: [0, 1], 2: [0, 1], 4: [0, 1]}
    gap = _study({r: {1: [v, v + 0.01], 2: [v - 0.1], 4: [v - 0.3, v - 0.29]}
                  for r, v in ((ALIBI, 2.0), (ALIBI_DEEP, 2.05), (ROPE, 2.3), (EULER, 1.9))}, plan)
    ss.point(gap, EULER, 2)["seeds"] = [1]          # at 2x the Euler CAT has seed 1, the rest seed 0
    text = ss.answer(gap)
    assert "At 2×, no seed was trained for every row. At 4×, the Euler CAT is lowest" in text, text
    assert "no row is lowest" not in text
    # a NaN CE and a row without 5000: "not measured", never "nan" nor a KeyError
    holes = _baselines(**{EULER: {1: [1.90, 1.91], 4: [1.60, 1.61]}})
    holes["rows"][ROPE]["points"][1]["ce"]["5000"] = [float("nan")] * 2
    del holes["rows"][EULER]["points"][0]["ce"]["5000"]
    text = ss.answer(holes) + ss.lead_verdict(holes, EULER) + ss.chapter_texts({"cpu": holes}, "cpu")["budget_verdicts"]
    assert "At 1× (2 seeds), not measured: the Euler CAT at 5000." in text
    assert "not measured: the RoPE baseline at 5000" in text
    assert "nan" not in text.lower().replace("nats", "")
    assert "was not measured at 1×" in ss.lead_verdict(holes, EULER)
    # NaN ranks last, never first
    assert ss.lowest(holes, 4)["nexts"][0] != ROPE


def test_a_study_without_a_1x_budget_is_read():
    """Issue 52: `within_budget` raised StopIteration when the budgets lacked 1."""
    study = _study({r: {2: [2.0, 2.0], 4: [1.8, 1.8]} for r in (*BASELINE_ROWS, KERPLE)},
                   {2: [0, 1], 4: [0, 1]})
    assert ss.within_budget(study) is True and ss.unit_flops(study) == pytest.approx(1e12)
    ss.point(study, ALIBI, 4)["train_flops"] *= 1.2
    assert ss.within_budget(study) is False
    with pytest.raises(ValueError, match="holds no point"):
        ss.unit_flops({"plan": {}, "rows": {}})


def test_the_figure_reads_at_1280_px(tmp_path):
    """Issue 53: the legend of the intro's figure was about 6 px high. Saved as the book
    saves it and shown across the content column, every legend and tick label is at least
    a footnote's size, and the legend hides no data (it sits below the axes)."""
    import matplotlib.image as mpimg
    from catlib.book.locate import save_figure
    fig, _ = ss.frontier_figure(CROSSING, "title")
    path = save_figure(fig, "f.png", "figs", tmp_path)
    from catlib.book import scale_tables as st
    scale = st.COLUMN_PX / mpimg.imread(path).shape[1] * 150 / 72          # px per point
    texts = [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    texts += fig.legends[0].get_texts()
    assert min(t.get_fontsize() for t in texts) * scale >= st.FOOTNOTE_PX
    assert not any(ax.get_legend() for ax in fig.axes)


def test_the_moonshot_reads_every_seed_every_budget_and_every_baseline():
    met = _baselines(**{EULER_DEEP: {1: [1.9, 1.91], 4: [1.6, 1.61]}})
    assert ss.moonshot(met, EULER_DEEP) == {"met": True, "missed": False, "smallest": pytest.approx(0.1),
                                            "where": (4, "128", ALIBI), "untested": []}
    # a lead of 0.065 whose seeds disagree (0.10, 0.03): its interval spans 0.05, not resolved
    one_short = _baselines(**{EULER_DEEP: {1: [1.9, 1.98], 4: [1.6, 1.6]}})
    got = ss.moonshot(one_short, EULER_DEEP)
    assert not got["met"] and not got["missed"] and got["smallest"] == pytest.approx(0.065)
    assert "the deep Euler CAT: not resolved" in ss.chapter_texts({"cpu": one_short}, "cpu")["moon"]
    # the smallest lead names where it is and the row it is against (as chapter 10 does)
    assert "smallest mean lead +0.065 (at 1× and 128, against the ALiBi baseline)" in \
        ss.chapter_texts({"cpu": one_short}, "cpu")["moon"]
    # called below 0.05 somewhere: missed
    below = _baselines(**{EULER_DEEP: {1: [1.98, 1.99], 4: [1.6, 1.6]}})
    assert ss.moonshot(below, EULER_DEEP)["missed"]
    # a seed missing is untested, never met
    partial = _baselines(**{EULER_DEEP: {1: [1.0], 4: [1.0]}})
    assert ss.moonshot(partial, EULER_DEEP) == {"met": False, "missed": False, "smallest": None,
                                                "where": None, "untested": [1, 4]}
    # the review's repro: with two of the three baselines gone, the lead is untested
    gone = {k: v for k, v in met["rows"].items() if k not in (ALIBI, ROPE)}
    without = dict(met, rows=gone)
    assert ss.moonshot(without, EULER_DEEP) == {"met": False, "missed": False, "smallest": None,
                                                "where": None, "untested": [1, 4]}
    assert "the deep Euler CAT: untested" in ss.chapter_texts({"cpu": without}, "cpu")["moon"]
    assert ss.lead_at(without, EULER_DEEP, 1) is None and ss.leads(without, EULER_DEEP, "128") == {}


def test_missing_names_rows_and_short_seeds():
    partial = _study({ALIBI: {1: [2.0], 4: [1.7]}, KERPLE: {1: [2.0, 2.0], 4: [1.6, 1.6]}})
    text = ss.missing(partial)
    absent = [ss.name(r) for r in swept_rows() if r not in (ALIBI, KERPLE)]
    assert all(name in text for name in absent) and "On seed 0 only: the ALiBi baseline." in text
    assert ss.missing(_study({r: {1: [2.0, 2.0], 4: [1.6, 1.6]} for r in SCALE_ROWS})) == ""


def test_the_verdicts_read_like_sentences():
    texts = [ss.answer(CROSSING), ss.lead_verdict(CROSSING, KERPLE),
             *[ss.budget_verdict(CROSSING, b) for b in ss.budgets(CROSSING)]]
    for text in texts:
        assert not prose_problems(text, LABELS), text
    # the abstract includes the answer: at most 180 words with its 99 of fixed text (the
    # rendered citations included)
    with_control = _baselines(**{KERPLE: {1: [2.02, 2.03], 4: [1.64, 1.65]},
                                 EULER: {1: [1.90, 1.91], 4: [1.60, 1.61]},
                                 CONTROL: {1: [1.95, 1.96], 4: [1.65, 1.66]}})
    for study in (CROSSING, with_control):
        # the abstract's answer (issue 61 item 7): a table and at most three sentences
        text = ss.answer_file_text({"cpu": study}, "cpu")
        assert len(sentences(text)) <= 4 and not prose_problems(text, LABELS), text
    text = ss.answer(with_control)
    assert ("The Euler CAT's learned kernel leads ALiBi's bias in its block by 0.050 nats at "
            "every budget and length (ahead).") in text
    assert ss.budget_verdict(CROSSING, 4).startswith("At 4× (2 seeds), the KERPLE-prior CAT is lowest")


def test_the_method_follows_the_artefact_and_the_kernel_control_is_judged():
    """An artefact from before the recipe says so (and what its points were); one on the
    recipe says how its points were branched. The Euler CAT against its control: the
    kernel's share of the lead, judged by the spread rule."""
    old = dict(CROSSING, schedule_check={"skipped": "the plan has no 1x point of seed 0"})
    assert "before the book's recipe" in ss.chapter_texts({"cpu": old}, "cpu")["method"]
    new = dict(CROSSING, recipe={"schedule": "wsd", "warmup": 25, "decay_share": 0.2, "lr": 4e-3,
                                 "penalty_horizon": 500, "points": "branched"})
    assert "branched from the row's longest run" in ss.method_text(new)
    study = _baselines(**{EULER: {1: [1.90, 1.91], 4: [1.60, 1.61]},
                          CONTROL: {1: [1.95, 1.96], 4: [1.61, 1.615]}})
    said = ss.kernel_verdicts(study)
    assert said[0] == ("At 1× (2 seeds), the Euler CAT's lead over the kernel control: +0.050 "
                       "nats at every length (ahead).")
    # +0.010 and +0.005 on two seeds: neither ahead nor within 0.02 (t(1) is wide)
    assert said[1] == ("At 4× (2 seeds), the Euler CAT's lead over the kernel control: +0.007 "
                       "nats at every length (not resolved).")
    assert ss.chapter_texts({"cpu": CROSSING}, "cpu")["kernel"] == "- this artefact has no kernel control row"


def test_load_studies_reads_the_artefacts_present(tmp_path):
    (tmp_path / "results").mkdir()
    assert ss.load_studies(tmp_path) == {}
    (tmp_path / "results" / "scale_cuda.json").write_text(json.dumps(CROSSING))
    assert list(ss.load_studies(tmp_path)) == ["cuda"]
    assert ss.lengths(CROSSING) == ["128", "5000"] and ss.budgets(CROSSING) == [1, 4]
    assert math.isclose(ss.unit_flops(CROSSING), 1e12)
    assert set(BASELINE_ROWS) <= set(CROSSING["rows"])


def test_the_readme_reads_the_study_now_in_results(tmp_path):
    """After make scale, the README block's scale sentence is the artefact's answer, labelled
    with its commit; the build's tables around it are left as they are."""
    from catlib.book.publish import README_MARKERS, republish_scale_answer
    (tmp_path / "results").mkdir()
    study = dict(CROSSING, provenance={"git": {"commit": "c0c0fb99f53bfd82"}, "profile": "cpu"})
    (tmp_path / "results" / "scale_cpu.json").write_text(json.dumps(study))
    block = "_Written by the build._\n\nOver budgets (on a CPU, chapter 11): old words.\n\n| table |\n"
    (tmp_path / "results" / "headline_cpu.md").write_text(block)
    start, end = README_MARKERS
    (tmp_path / "README.md").write_text(f"intro\n{start}\n{block}{end}\nrest\n")
    republish_scale_answer(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "old words" not in readme and "| table |" in readme and readme.endswith("rest\n")
    assert ss.answer_file_text({"cpu": study}, "cpu").strip() in readme
    assert "_(From `results/scale_cpu.json`, commit c0c0fb99f53b.)_" in readme


def test_a_full_build_labels_the_scale_sentence_with_the_study_s_commit(tmp_path):
    """The build's label names the build's commit; the scale sentence it includes comes from
    an artefact trained apart, so it names that artefact and its commit (a review's defect:
    an artefact's number without its commit)."""
    from catlib import book
    (tmp_path / "results").mkdir()
    study = dict(CROSSING, provenance={"git": {"commit": "c0c0fb99f53bfd82"}, "profile": "cpu"})
    (tmp_path / "results" / "scale_cpu.json").write_text(json.dumps(study))
    generated = tmp_path / "book" / "_generated"
    generated.mkdir(parents=True)
    (generated / "headline_table.md").write_text("| a |\n|---|\n| 1 |\n")
    (generated / "scale_answer.md").write_text("Over budgets (on a CPU, chapter 11): words.\n")
    records = [book.Record("06_context_length", "cpu", "cpu", 1.0, "ok", "now")]
    text = book.publish_headline(tmp_path, "cpu", records).read_text()
    assert ("Over budgets (on a CPU, chapter 11): words. _(From `results/scale_cpu.json`, "
            "commit c0c0fb99f53b.)_") in text


def test_the_scale_sentence_is_placed_where_a_block_has_none(tmp_path):
    """Issue 52: republish_scale_answer raised a bare StopIteration on a headline block
    without an "Over budgets (" line (a build before chapter 11 ran); the sentence now goes
    where a build puts it, after the build's label."""
    from catlib.book.publish import README_MARKERS, republish_scale_answer
    (tmp_path / "results").mkdir()
    study = dict(CROSSING, provenance={"git": {"commit": "c0c0fb99f53bfd82"}, "profile": "cpu"})
    (tmp_path / "results" / "scale_cpu.json").write_text(json.dumps(study))
    (tmp_path / "results" / "headline_cpu.md").write_text("_Written by the build._\n\n| table |\n")
    start, end = README_MARKERS
    (tmp_path / "README.md").write_text(f"intro\n{start}\nold\n{end}\nrest\n")
    republish_scale_answer(tmp_path)
    block = (tmp_path / "results" / "headline_cpu.md").read_text()
    answer = ss.answer_file_text({"cpu": study}, "cpu").strip()
    assert block == (f"_Written by the build._\n\n{answer} _(From `results/scale_cpu.json`, "
                     "commit c0c0fb99f53b.)_\n\n| table |\n")
    assert answer in (tmp_path / "README.md").read_text()


def test_the_scale_answer_is_replaced_not_added_twice(tmp_path):
    from catlib.book.publish import README_MARKERS, republish_scale_answer
    (tmp_path / "results").mkdir()
    start, end = README_MARKERS
    (tmp_path / "README.md").write_text(f"intro\n{start}\nold\n{end}\nrest\n")
    study = dict(CROSSING, provenance={"git": {"commit": "c0c0fb99f53bfd82"}, "profile": "cpu"})
    (tmp_path / "results" / "scale_cpu.json").write_text(json.dumps(study))
    (tmp_path / "results" / "headline_cpu.md").write_text("_Written by the build._\n\n| table |\n")
    republish_scale_answer(tmp_path)
    block = (tmp_path / "results" / "headline_cpu.md").read_text()
    republish_scale_answer(tmp_path)                      # again: replaced, not added twice
    assert (tmp_path / "results" / "headline_cpu.md").read_text() == block


def test_a_margin_s_window_error_is_paired_where_the_points_keep_each_window():
    # Two rows whose windows share a large difficulty: the per-window pairing gives the
    # small error of the difference; a point scored on other seeds falls back to the bound.
    import numpy as np
    from catlib.book import scale_readings as sr
    from catlib.common.verdicts import unpaired_error_bound

    rng = np.random.default_rng(1)
    hard = rng.normal(1.8, 0.3, 50)
    study = _baselines(**{EULER: {1: [1.95, 1.96], 4: [1.60, 1.61]}})
    for row, shift in ((EULER, 0.0), (ALIBI, 0.05)):
        for p in study["rows"][row]["points"]:
            p["se"] = {L: [0.04, 0.04] for L in ("128", "5000")}
            p["window_ce"] = {L: (hard + shift + rng.normal(0, 0.01, 50)).tolist()
                              for L in ("128", "5000")}
    diff, window = sr.difference(study, 1, [0, 1], EULER, ALIBI)
    a, b = (sr.point(study, r, 1)["window_ce"]["128"] for r in (EULER, ALIBI))
    assert window[0] == pytest.approx(np.std(np.subtract(a, b), ddof=1) / np.sqrt(50))
    assert window[0] < unpaired_error_bound([[0.04]], [[0.04]])[0] / 5
    # seeds that are not the points' own: the bound from each row's standard error
    _, bound = sr.difference(study, 1, [0], EULER, ALIBI)
    assert bound[0] == pytest.approx(unpaired_error_bound([[0.04]], [[0.04]])[0])


def test_the_kernel_against_each_rival_bias_is_said_at_both_ends_and_an_absent_rival_named():
    # Catches a rival row that is read as a CAT row (the moonshot, the lowest CAT) or left
    # unsaid, and the two ends said in one clause.
    from catlib.experiment.scale_plan import CONTROL_DEEP, FIRE

    assert FIRE not in ss.CAT_ROWS and CONTROL_DEEP not in ss.CAT_ROWS
    study = _baselines(**{EULER: {1: [1.80, 1.81], 4: [1.60, 1.61]},
                          FIRE: {1: [1.90, 1.91], 4: [1.60, 1.62]}})
    lines = ss.rival_verdicts(study)
    assert lines[0] == ("At 1× (2 seeds), the Euler CAT's lead over the FIRE bias: +0.100 nats at 128 "
                        "(ahead); +0.100 nats at 5000 (ahead).")
    assert "+0.005 nats at 128 (not resolved)" in lines[1]
    assert lines[-1].startswith("Not in this artefact: the rows with deep kernel control, "
                                "bucket bias, KERPLE-log bias and FoX gate")
    assert not any(prose_problems(line, LABELS) for line in lines)


def test_the_legend_of_every_row_sits_below_the_axes_as_the_page_shows_it():
    """With the thirteen rows the legend takes four rows: laid out again by the page
    (:func:`catlib.book.page.show`), the figure keeps it below every axis's labels (it
    had been drawn over the budgets' axis label)."""
    import matplotlib
    matplotlib.use("Agg")
    from catlib.book.page import show
    # the rows in the artefact's order (its keys sorted), as the page reads them
    study = _study({r: {1: [2.0, 2.1], 4: [1.6, 1.7]} for r in sorted(SCALE_ROWS)})
    fig, _ = ss.frontier_figure(study, "title")
    show(fig)
    renderer = fig.canvas.get_renderer()
    legend_top = fig.legends[0].get_window_extent(renderer).y1
    lowest_label = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    assert len(fig.legends[0].get_texts()) == len(SCALE_ROWS)
    assert legend_top <= lowest_label, (legend_top, lowest_label)
    # no two rows drawn alike: each (line style, marker, colour) is one row's
    for ax in fig.axes:
        drawn = [(ln.get_linestyle(), ln.get_marker(), ln.get_color()) for ln in ax.get_lines()]
        assert len(set(drawn)) == len(drawn) == len(SCALE_ROWS)


def test_the_chapter_says_what_the_study_cost_over_its_runs_of_make_scale():
    """A study resumed by a later `make scale` (rows added beside the stored runs) is said
    with its whole time and each run's share, from what the artefact keeps; an artefact
    written before ``invocations`` were kept is read from ``earlier`` and itself."""
    study = _study({r: {1: [2.0, 2.1], 4: [1.6, 1.7]} for r in (ALIBI, EULER_DEEP)})
    assert ss.cost_text(study) == ""                                  # no time recorded
    one = dict(study, wall_seconds=600.0, provenance={"cpus": 2, "device": {"type": "cpu"}})
    assert ss.cost_text(one) == ", made in 10 minutes on 2 CPU cores"
    two = dict(one, trained=[EULER_DEEP],
               earlier=[{"wall_seconds": 6780.0, "trained": [ALIBI, EULER_DEEP, ROPE]}])
    assert ss.cost_text(two) == (", made in 123 minutes on 2 CPU cores, in 2 runs of "
                                 "`make scale` (113 for 3 rows, then 10 for 1 row)")
    assert ss.cost_text(two) in ss.chapter_texts({"cpu": two}, "cpu")["where"]
    # as the artefact keeps it now: only the runs of `make scale` that trained, one killed
    now = dict(one, wall_seconds=30.0, invocations=[
        {"wall_seconds": 2400.0, "trained": [ALIBI, ROPE, EULER_DEEP], "finished": False},
        {"wall_seconds": 1380.0, "trained": [EULER_DEEP], "finished": True}])
    assert ss.cost_text(now) == (", made in 63 minutes on 2 CPU cores, in 2 runs of `make scale` "
                                 "(40 for 3 rows before it was killed, then 23 for 1 row)")
    assert ss.cost_text(dict(now, invocations=[])) == ""             # nothing trained here


def test_the_missing_rows_count_a_rows_extra_seeds_and_say_the_unrated():
    """A row holding the plan's seeds and its extra seeds is not "on fewer seeds"; one the
    sweep left without a rate is said as such, not as a study cut short."""
    from catlib.book.scale_study import missing
    from catlib.experiment.scale_plan import ALIBI, FOX, ROPE

    def pt(seeds):
        return {"budget": 1, "steps": 10, "seeds": seeds, "train_flops": 1.0, "seconds": 1.0,
                "ce": {"128": [2.0] * len(seeds)}}
    study = {"plan": {"1": [0, 1, 2]}, "extra_seeds": {ALIBI: {"1": [3, 4]}},
             "rates": {"unrated": [FOX]},
             "rows": {ALIBI: {"points": [pt([0, 1, 2, 3, 4])]}, ROPE: {"points": [pt([0, 1])]}}}
    text = missing(study)
    assert not any(part.startswith("seeds") and "the ALiBi baseline" in part
                   for part in text.split("On ")[1:])
    assert "On seeds 0, 1 only: the RoPE baseline." in text
    assert "Not trained: the FoX gate" in text or "Not trained: FoX gate" in text
    assert "FoX gate" not in text.split("Not trained")[0]
