"""Issue 62, item 3: the scale study on the code corpus: its rows, plan (1x, 2x and 4x on
seeds 0-2, no row making a pass over the training files at 4x), runs on the code split
with its vocabulary, the span it scores (the same text at every length, spread over the
validation files), and ``make scale CORPUS=code``'s argument checks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from catlib import code_corpus as cc
from catlib.book import profiles
from catlib.book.scale import main, study_folder
from catlib.data import load_corpus, vocab_size
from catlib.experiment import scale, scale_plan
from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, CONTROL, EULER, EULER_DEEP,
                                          FOX, KERPLE_LOG, ROPE)
from catlib.experiment.scale_records import passes, span_corpus
from catlib.measure.evaluate import n_windows, windows

CODE_ROWS = {ALIBI, ALIBI_DEEP, ROPE, EULER, EULER_DEEP,
             CONTROL, BUCKETS, KERPLE_LOG, FOX}


@pytest.fixture(scope="module")
def code():
    return dataclasses.replace(profiles.experiment("cpu"), corpus="code")


def test_the_code_study_trains_the_issues_rows_and_the_oracle_to_4x_on_three_seeds():
    assert set(scale_plan.swept_rows("code")) == CODE_ROWS
    assert set(scale_plan.study_rows("code")) == CODE_ROWS | set(scale_plan.ORACLES)
    assert scale_plan.plan_for("cpu", "code") == {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2)}
    assert scale_plan.extra_seeds_for("cpu", "code") == {}
    # Tiny Shakespeare's plan and rows are as they were
    assert scale_plan.plan_for("cpu") == {1: (0, 1, 2), 2: (0, 1, 2)}
    assert len(scale_plan.swept_rows()) == 13


def test_every_code_run_reads_the_code_split_and_no_row_makes_a_pass_at_4x(code):
    train_chars = len(load_corpus(split="files").train)
    for label in scale_plan.study_rows("code"):
        budgets = scale_plan.row_plan(scale_plan.plan_for("cpu", "code"), {}, label)
        model, train, steps = scale.scale_configs(label, code, 0, budgets)
        assert train.split == "files" and model.vocab_size == vocab_size("code") == 131
        top = max(steps)
        assert passes(steps[top], train.batch, train.seq, train_chars) < 1.0, label


def test_the_code_span_is_21_stretches_spread_over_the_validation_files(code):
    corpus = load_corpus(split="files")
    scoring = scale.study_scoring(code)
    assert scoring["span_tiles"] == 21 and "span_tiles" not in scale.study_scoring(
        profiles.experiment("cpu"))
    span = span_corpus(corpus, 5000, scoring["span_tiles"])
    # every length tiles the same 105,000 characters: 820 at 128, 21 at 5000
    assert [n_windows(len(span.val), L, 10**9, 5000) for L in (128, 512, 1024, 5000)] == [
        820, 205, 102, 21]
    x, _ = windows(span.val, 5000, 21, 5000)
    text = corpus.val.numpy()
    starts = []
    for row in x.numpy():           # each stretch is a piece of the validation text
        starts.append(_find(text, row))
    assert all(s is not None for s in starts)
    assert starts == sorted(starts) and starts[-1] - starts[0] > 0.9 * len(text)
    assert span_corpus(corpus, 5000, None) is corpus


def _find(text: np.ndarray, piece: np.ndarray) -> int | None:
    """Where ``piece`` lies in ``text`` (the first place), or None."""
    first = np.flatnonzero(text[:len(text) - len(piece) + 1] == piece[0])
    return next((int(i) for i in first if np.array_equal(text[i:i + len(piece)], piece)), None)


@pytest.mark.parametrize("args, says", [
    (["--corpus", "nonsense"], "corpus 'nonsense' is not one of ['tiny', 'code']"),
])
def test_a_bad_corpus_stops_before_anything_trains(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)

    def never(*a, **k):
        raise AssertionError("the study started")
    monkeypatch.setattr("catlib.book.scale.run_study", never)
    assert main(["--profile", "smoke", "--root", "runs", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert list(tmp_path.iterdir()) == []


def test_another_sympy_stops_the_code_study_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cc, "SYMPY_VERSION", "1.13.3")
    cc._cached_text.cache_clear()
    cc._encoded.cache_clear()

    def never(*a, **k):
        raise AssertionError("the study started")
    monkeypatch.setattr("catlib.book.scale.run_study", never)
    try:
        assert main(["--profile", "smoke", "--root", "runs", "--corpus", "code",
                     "--recipe_rate"]) == 2
    finally:
        cc._cached_text.cache_clear()
        cc._encoded.cache_clear()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "SymPy 1.13.3" in err and cc.FIX in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_code_study_keeps_its_runs_and_artefact_apart_from_tiny_shakespeares():
    assert study_folder("cpu", "cpu") == "scale-cpu-cpu"
    assert study_folder("cpu", "cpu", "code") == "scale-code-cpu-cpu"
