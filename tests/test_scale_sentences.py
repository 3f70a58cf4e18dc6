"""Chapter 11's sentences against the numbers they stand on (issue 60, items 8 to 10), read
from the committed artefacts in ``results/`` and from small studies whose answers are known:
"lowest" joins budgets only where the same row leads at each length; a comparison that is
not called is never said to be "the same"; and the page says where its 1× point is not
chapter 10's, and why. What the committed study should say is worked out here from its
points; the schema before issue 61 is tests/scale_new_schema.py's ``old_study``."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import catlib
from catlib.book import scale_study as ss
from catlib.common.verdicts import prose_problems
from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, EULER, EULER_DEEP, KERPLE_LOG,
                                          KERPLE_ODE, KERNEL_QUESTION_ROWS, ORACLES, ROPE,
                                          SCALE_ROWS)
from catlib.experiment.scale_records import WINDOW_DIGITS

sys.path.insert(0, str(Path(__file__).parent))
from scale_new_schema import old_study  # noqa: E402

# The checkout whose code runs (its results/ and notebooks/ go with it).
ROOT = Path(catlib.__file__).resolve().parents[1]
LABELS = [ss.name(r) for r in SCALE_ROWS] + list(SCALE_ROWS)
BUDGET = re.compile(r"At ((?:\d+×(?:, | and )?)+)")


@pytest.fixture(scope="module")
def committed() -> dict:
    """The committed CPU study (``results/scale_cpu.json``)."""
    study = ss.load_studies(ROOT).get("cpu")
    if study is None:
        pytest.skip("results/scale_cpu.json is not in this checkout")
    return study


def _points(study: dict, budget: int) -> dict:
    """``{row: its point at budget}``, the oracle's rows left out (they are no rivals)."""
    return {r: p for r, t in study["rows"].items() if r not in ORACLES
            for p in t["points"] if p["budget"] == budget}


def _ce(p: dict, length: str, seeds) -> np.ndarray:
    return np.array([p["ce"][length][p["seeds"].index(s)] for s in seeds])


def _lowest_by_hand(raw: dict, budget: int) -> tuple[list[int], list[str]]:
    """The seeds every row shares at ``budget`` and the row of least mean CE over them at
    each length, from the artefact as written."""
    points = _points(raw, budget)
    seeds = sorted(set.intersection(*(set(p["seeds"]) for p in points.values())))
    ls = sorted(next(iter(points.values()))["ce"], key=int)
    return seeds, [min(points, key=lambda r: _ce(points[r], L, seeds).mean()) for L in ls]


def _study(ce: dict, plan: dict, lengths=("128", "512", "5000")) -> dict:
    """``ce``: {row: {budget: (CE per length)}}; seed s adds 0.001·s, every point reads 100
    windows per length with no window-sampling error (the seeds alone decide)."""
    rows = {r: {"points": [{"budget": b, "steps": b, "seeds": plan[b], "train_flops": 1e12 * b,
                            "seconds": 1.0,
                            "ce": {L: [v + 0.001 * s for s in plan[b]] for L, v in zip(lengths, vs)},
                            "se": {L: [0.0] * len(plan[b]) for L in lengths},
                            "windows": {L: 100 for L in lengths}}
                           for b, vs in by.items()]}
            for r, by in ce.items()}
    return {"plan": {str(b): s for b, s in plan.items()}, "rows": rows}


def _grouped_budgets(text: str) -> list[list[int]]:
    """The budgets each sentence of :func:`~catlib.book.scale_study.lowest_over_budgets`
    names together."""
    return [[int(b) for b in re.findall(r"(\d+)×", m.group(1))] for m in BUDGET.finditer(text)
            if m.start() == 0 or text[m.start() - 2] == "."]


# Item 8: "lowest" groups budgets by the rows that lead.

def test_the_committed_study_says_apart_budgets_whose_rows_lead_apart(committed):
    """364f0a7 read "At 1× and 2× (3 seeds) ... the Euler CAT at 512, 1024 and 5000" where
    the rows that lead differed. In the committed study (worked out from its points on the
    seeds all rows share) one row is lowest at every length at 1×, and at 2× another row is
    lowest at 128 than beyond: the two budgets are said apart, each with its own rows."""
    raw = json.loads((ROOT / "results" / "scale_cpu.json").read_text())
    (seeds1, first1), (seeds2, first2) = (_lowest_by_hand(raw, b) for b in (1, 2))
    assert seeds1 == seeds2 == [0, 1, 2]
    assert len(set(first1)) == 1 and first2[0] != first2[1] and len(set(first2[1:])) == 1
    text = ss.lowest_over_budgets(committed)
    for study, said in ((committed, text), (old_study(), ss.lowest_over_budgets(old_study()))):
        for group in _grouped_budgets(said):
            firsts = {tuple(ss.lowest(study, b)["firsts"]) for b in group}
            assert len(firsts) == 1, (group, firsts, said)
    assert "At 1× and 2×" not in text
    assert text.startswith(f"At 1× (3 seeds), the {ss.name(first1[0])} is lowest at every length")
    at2 = text[text.index("At 2×"):]
    assert at2.startswith(f"At 2×, no row is lowest at every length: the {ss.name(first2[0])} "
                          f"at 128; the {ss.name(first2[1])} at 512, 1024 and 5000")
    assert not prose_problems(text, LABELS)


def test_budgets_are_joined_only_where_the_same_row_is_lowest_at_each_length():
    plan = {1: [0, 1, 2], 2: [0, 1, 2], 4: [0, 1, 2]}
    # RoPE lowest at 128 at every budget; beyond, the Euler CAT at 1× and 2×, the deep one at 4×
    study = _study({ROPE: {b: (1.80, 2.5, 3.0) for b in plan},
                    ALIBI: {b: (1.90, 1.95, 1.95) for b in plan},
                    ALIBI_DEEP: {b: (1.95, 2.0, 2.0) for b in plan},
                    EULER: {1: (1.85, 1.85, 1.85), 2: (1.85, 1.85, 1.85), 4: (1.85, 1.90, 1.90)},
                    EULER_DEEP: {1: (1.87, 1.88, 1.88), 2: (1.87, 1.88, 1.88), 4: (1.86, 1.80, 1.80)}},
                   plan)
    text = ss.lowest_over_budgets(study)
    assert _grouped_budgets(text) == [[1, 2], [4]]
    assert text.startswith("At 1× and 2× (3 seeds), no row is lowest at every length: the RoPE "
                           "baseline at 128; the Euler CAT at 512 and 5000")
    assert "At 4×, no row is lowest at every length: the RoPE baseline at 128; the deep Euler " \
           "CAT at 512 and 5000" in text


# Item 9: "not called" is never "the same".

SAME_AS = re.compile(r"\bthe same (\w+)")
# what "the same" may qualify besides a margin: the compute, blocks or text two rows share
SHARED = {"compute", "blocks", "block", "windows", "seeds", "text", "rate"}
TIE_WORDS = ("not separated", "indistinguishable", "is level", "level with", "matches", "match ")


def _kernel_texts(study: dict) -> list[str]:
    from catlib.book.scale_rivals import at_one_budget_text, rival_verdicts, rivals_short

    return [ss.answer(study), ss.kernel_clause(study), rivals_short(study),
            at_one_budget_text({"cpu": study}), *rival_verdicts(study), *ss.kernel_verdicts(study)]


def _said_alike_with_a_margin(text: str) -> None:
    for word in TIE_WORDS:
        assert word not in text, (word, text)
    for m in SAME_AS.finditer(text):
        assert m.group(1) in SHARED | {"within"}, text[m.start():m.start() + 80]
    assert set(re.findall(r"the same within (\d+(?:\.\d+)?)", text)) <= {"0.02"}


def _hand_interval(diff: np.ndarray, a: np.ndarray, b: np.ndarray, level: float):
    """Mean and half-width of ``diff`` [seeds] at ``level``: the seeds' t interval and the
    windows' (``a``, ``b``: each window's CE, the mean over those seeds), combined."""
    n, w = len(diff), np.asarray(a) - np.asarray(b)
    q = lambda df: stats.t.ppf(0.5 + level / 2, df)  # noqa: E731
    return diff.mean(), np.hypot(q(n - 1) * diff.std(ddof=1) / np.sqrt(n),
                                 q(len(w) - 1) * w.std(ddof=1) / np.sqrt(len(w)))


def test_the_committed_study_never_says_a_comparison_not_called_is_the_same(committed):
    """364f0a7: "by the book's rule it is not separated from the bucket bias and the
    KERPLE-log bias", of comparisons that are neither called nor equivalent on 3 seeds.
    The committed study has the bucket bias against the Euler CAT at 5000 on ten seeds at 1×
    (its 90 % interval, worked out here, inside ±0.02: the same within 0.02) and on three at
    2× (too wide to be the same, not called: not resolved); the answer says each so."""
    for study in (committed, old_study()):
        for text in _kernel_texts(study):
            _said_alike_with_a_margin(text)
            assert not prose_problems(text, LABELS), prose_problems(text, LABELS)
    raw = json.loads((ROOT / "results" / "scale_cpu.json").read_text())
    lead = {}
    for b in (1, 2):
        euler, buckets = (_points(raw, b)[r] for r in (EULER, BUCKETS))
        seeds = sorted(set(euler["seeds"]) & set(buckets["seeds"]))
        assert seeds == (list(range(10)) if b == 1 else [0, 1, 2])
        lead[b] = {L: _ce(buckets, L, seeds) - _ce(euler, L, seeds) for L in ("128", "5000")}
    euler, buckets = (_points(raw, 1)[r] for r in (EULER, BUCKETS))
    mean, half = _hand_interval(lead[1]["5000"], buckets["window_ce"]["5000"],
                                euler["window_ce"]["5000"], 0.90)
    assert -0.02 < mean - half and mean + half < 0.02
    d = lead[2]["5000"]       # the seeds' spread alone already rules out both words
    assert stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3) > abs(d.mean())
    assert abs(d.mean()) + stats.t.ppf(0.95, 2) * d.std(ddof=1) / np.sqrt(3) > 0.02
    lo, hi = sorted(lead[b]["5000"].mean() for b in (1, 2))
    answer = ss.answer(committed)
    assert (f"{lo:+.3f} to {hi:+.3f} at 5000 (the same within 0.02 at 1×; not resolved at 2×)"
            in answer), answer
    assert "Against the bucket bias in its block" in answer


def test_a_tight_equivalence_reads_the_same_within_the_margin_and_a_loose_one_not_resolved():
    from catlib.book.scale_rivals import rivals_answer

    plan = {1: [0, 1, 2], 4: [0, 1, 2]}
    at = {1: 1.9, 4: 1.7}           # the Euler CAT's CE and its rivals' centre, per budget
    rows = {ALIBI: 0.1, ALIBI_DEEP: 0.2, ROPE: 0.3, EULER: 0.0, BUCKETS: 0.0, KERPLE_LOG: 0.0}
    study = _study({r: {b: (at[b] + up,) * 2 for b in plan} for r, up in rows.items()}, plan,
                   ("128", "5000"))
    # per seed: the Euler CAT ±0.004, the buckets ±0.003 (its lead 0, ±0.001: within 0.02),
    # the KERPLE-log bias ±0.03 (neither called nor within 0.02 on three seeds)
    for row, spread in ((EULER, (0.0, 0.004, -0.004)), (BUCKETS, (0.0, 0.003, -0.003)),
                        (KERPLE_LOG, (0.0, 0.03, -0.03))):
        for p in study["rows"][row]["points"]:
            p["ce"] = {L: [at[p["budget"]] + d for d in spread] for L in p["ce"]}
    text = rivals_answer(study)
    assert ("Against the bucket bias in its block at the same compute (every row at one rate), the "
            "Euler CAT's lead is 0.000 nats at 128 and 0.000 at 5000 (the same within 0.02, at "
            "both lengths).") in text
    # the KERPLE-log bias's seeds disagree by ±0.03: neither called nor within 0.02
    assert "(not resolved, at both lengths)" in text
    assert text.endswith("So the kernel's gain over ALiBi is a learned bias's gain: by the book's "
                         "rule it is the same within 0.02 as the bucket bias and not resolved "
                         "against the KERPLE-log bias.")
    _said_alike_with_a_margin(text)


# Item 10: chapter 11's 1× point against chapter 10's.

def test_the_page_says_which_rows_1x_point_is_not_chapter_10s_and_why():
    """364f0a7's chapter 11 said "its 1× point is chapter 10's point"; the study trains the
    ALiBi baseline at the sweep's 8e-3 (chapter 10 at 4e-3) and gives the ODE-consistent CAT
    the 1× budget (chapter 10 its 500 steps)."""
    nb = json.loads((ROOT / "notebooks" / "11_scale.ipynb").read_text(encoding="utf-8"))
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "1× point is chapter 10's point" not in prose
    assert "{glue:md}`point`" in prose and 'glue("point"' in code


def test_the_committed_studies_1x_point_is_compared_with_chapter_10s(committed):
    """Each row chapter 10 trains too is compared on chapter 10's seeds: a row of the kernel
    question, on seeds 0-9 here, on chapter 10's 0-2 from its per-seed records (averaged
    here by hand), so that it is never called apart for its extra seeds; a row apart is
    apart by its rate or its steps (the ODE-consistent CAT by its steps: the 1× budget, not
    chapter 10's 500), and the page says so. results/frontier_cpu.json may be an older
    build's than the study: the size of the CE gap is not asserted."""
    from catlib.book.profiles import experiment
    from catlib.book.scale_point import CHAPTER_10, compare, on_windows, point_paragraph

    frontier = json.loads((ROOT / "results" / "frontier_cpu.json").read_text())
    rate = experiment("cpu").train.lr
    found = {c["row"]: c for c in compare(committed, frontier, rate)}
    assert set(found) == {r for r, key in CHAPTER_10.items() if key in frontier} and found
    longest = ss.lengths(committed)[-1]
    for r, c in found.items():
        mine, theirs = ss.point(committed, r, 1), frontier[CHAPTER_10[r]]["points"][-1]
        seeds10 = sorted(theirs["seeds"])
        assert c["seeds"] == (seeds10, seeds10), (r, c["seeds"])
        assert c["steps"] == (mine["steps"], theirs["steps"])
        assert c["rate"] == (committed["rows"][r].get("rate", rate), rate)
        if r in KERNEL_QUESTION_ROWS:
            assert mine["seeds"] == list(range(10)) and seeds10 == [0, 1, 2]
            records = committed["per_seed"][r]
            own = {L: np.round(np.mean([records[str(s)]["budgets"]["1"]["window_ce"][L]
                                        for s in seeds10], 0), WINDOW_DIGITS).tolist()
                   for L in mine["window_ce"]}
            for L, (here, _) in c["ce"].items():
                assert here == pytest.approx(on_windows({**mine, "window_ce": own}, theirs, L, longest))
                assert here != pytest.approx(on_windows(mine, theirs, L, longest), abs=1e-6)
    apart = {r for r, c in found.items() if c["rate"][0] != c["rate"][1] or c["steps"][0] != c["steps"][1]}
    ode = found[KERPLE_ODE]
    assert KERPLE_ODE in apart and ode["steps"][0] != ode["steps"][1] == 500
    text = point_paragraph(ROOT, committed)
    assert (f"The ODE-consistent CAT trains for {ode['steps'][0]} steps, the 1× budget, where "
            f"chapter 10 trains it for 500") in text
    assert "has seeds" not in text
    for r in found:
        assert (f"The {ss.name(r)} trains" in text) == (r in apart), (r, text)
    same = [ss.name(r) for r in found if r not in apart]
    assert (f"for the {', the '.join(same[:-1])} and the {same[-1]}: the same rate, steps and "
            f"seeds") in text
    assert ss.chapter_texts({"cpu": committed}, "cpu", root=ROOT)["point"] == text


def test_chapter_10s_windows_are_found_among_the_studys_every_window():
    """The study reads every window of the span; chapter 10 reads n of them spread evenly
    (:func:`catlib.measure.evaluate.window_starts` on the real validation length)."""
    from catlib.book.scale_point import on_windows
    from catlib.measure.evaluate import text_span, window_starts

    n_val, longest = 111_396, 5000
    span = text_span(n_val, longest)
    per = {L: np.linspace(1.5, 2.5, span // L) ** 2 for L in (128, 5000)}
    study_point = {"window_ce": {str(L): v.tolist() for L, v in per.items()},
                   "windows": {str(L): len(v) for L, v in per.items()}}
    for L, n in ((128, 128), (5000, 4)):
        chapter = {"windows": {str(L): n}}
        idx = (window_starts(n_val, L, n, longest) // L).numpy()
        assert on_windows(study_point, chapter, str(L), str(longest)) == pytest.approx(per[L][idx].mean())
    # a study that did not read every window of the span: not compared
    short = {**study_point, "windows": {**study_point["windows"], "128": 400}}
    assert on_windows(short, {"windows": {"128": 128}}, "128", "5000") is None
