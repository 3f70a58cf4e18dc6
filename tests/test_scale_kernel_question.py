"""Issue 61 items 1-3 on chapter 11's reading: paired window terms on any seeds the
artefact's records hold, the kernel question in the book's three words, passes and
overfitting per budget. On a synthetic artefact of the new schema (tests/scale_new_schema.py)
and on the committed old one (results/scale_cpu.json)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from catlib.book import scale_readings as sr
from catlib.common.verdicts import paired_window_error
from catlib.experiment.scale import BUCKETS, EULER
from catlib.experiment.scale_records import seed_window_ce

sys.path.insert(0, str(Path(__file__).parent))
from scale_new_schema import new_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study():
    return new_study()


@pytest.fixture(scope="module")
def old():
    return json.loads((ROOT / "results" / "scale_cpu.json").read_text())


def test_window_term_pairs_seeds_zero_to_two_of_rows_with_ten(study):
    """Item 1: at 1x the Euler CAT and the buckets hold seeds 0-9; compared on seeds 0-2,
    the window term is paired from the per-seed records, not the loose unpaired bound."""
    window, df = sr.window_term(study, 1, [0, 1, 2], BUCKETS, EULER)
    a, b = (seed_window_ce(study, r, 1, [0, 1, 2]) for r in (BUCKETS, EULER))
    expected = [paired_window_error(a[L], b[L]) for L in sr.lengths(study)]
    assert np.allclose(window, expected)
    assert list(df) == [len(a[L]) - 1 for L in sr.lengths(study)]


def test_window_term_on_a_points_own_seeds_is_unchanged(study, old):
    """Item 1: on the old artefact (no records) a point's own window_ce still pairs."""
    window, df = sr.window_term(old, 1, [0, 1, 2], BUCKETS, EULER)
    pa, pb = (sr.point(old, r, 1) for r in (BUCKETS, EULER))
    assert np.allclose(window, [paired_window_error(pa["window_ce"][L], pb["window_ce"][L])
                                for L in sr.lengths(old)])


def test_the_kernel_question_reads_the_three_words_on_ten_seeds(study):
    """Item 2: at 1x on seeds 0-9, each row against the Euler CAT in the book's words."""
    from catlib.book import scale_answer as sa
    from catlib.experiment.scale import ALIBI, CONTROL, FOX, KERPLE_LOG
    assert sa.question_seeds(study) == list(range(10))
    found = {f["row"]: f for f in sa.kernel_question(study)}
    assert found[BUCKETS]["words"] == ["the same within 0.02"] * 2
    assert found[KERPLE_LOG]["words"] == ["ahead"] * 2
    assert found[FOX]["words"] == ["not resolved"] * 2
    assert found[CONTROL]["words"] == found[ALIBI]["words"] == ["ahead"] * 2
    assert found[EULER]["gain"][0] > found[EULER]["gain"][1] > 0


def test_the_answer_is_a_table_and_three_sentences_on_both_artefacts(study, old):
    """Item 2: the answer (chapter 11, the abstract) is a table and at most three sentences;
    the old artefact says the gain is not measured and what it lacks."""
    from catlib.book import scale_answer as sa
    from catlib.book import scale_study as ss
    from catlib.common.verdicts import prose_problems, sentences
    labels = list(sr.NAMES.values())
    for s in (study, old):
        text = sa.answer_text(s)
        assert text.startswith("| row |") and len(sentences(text)) <= 3, text
        assert not prose_problems(text, labels), prose_problems(text, labels)
        assert sa.answer_table(s) in ss.answer_file_text({"cpu": s}, "cpu")
        assert sa.answer_sentences(s) in ss.chapter_texts({"cpu": s}, "cpu")["answer"]
    assert "not measured" not in sa.answer_table(study)
    assert sa.answer_table(old).count("not measured") == len(sa.question_rows(old))
    assert "predates the ten seeds" in sa.answer_sentences(old)
    assert "uses context beyond its training length" in sa.answer_sentences(study)


def test_each_budget_says_its_passes_and_who_overfit(study, old):
    """Item 3: passes per row per budget; a row whose validation CE rises while its
    training CE falls is called overfit there, beside the budget's verdicts."""
    from catlib.book import scale_answer as sa
    from catlib.book import scale_study as ss
    from catlib.experiment.scale import KERPLE_LOG
    assert sa.overfit_rows(study, 2) == [KERPLE_LOG] and sa.overfit_rows(study, 1) == []
    assert sa.passes_of(study, 2)[EULER] == pytest.approx(2.6)
    verdicts = ss.chapter_texts({"cpu": study}, "cpu")["budget_verdicts"]
    assert "2.6 passes over the training part" in verdicts
    assert "overfit here (validation CE up from 1×, training CE down): the KERPLE-log bias" in verdicts
    assert "passes not recorded in this artefact" in sa.budget_note(old, 1)
