"""The published split's rows read at most PUBLISHED_WINDOWS first windows per length (the
published protocol), while the causal rows read every window of the span the profile asks
for (issue 61 item 3): the cap reaches the stored evaluation, the per-position curve, the
dropout-on table and the windows a table states."""
import json

import pytest

from catlib.book import profiles
from catlib.data import load_corpus
from catlib.experiment import grid as ex

SIZES = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
             dropout=0.0)
TRAIN = dict(train_steps=3, lr=4e-3, batch=2, seq=16)


def test_the_cpu_profile_caps_the_published_rows_only():
    cpu = profiles.experiment("cpu").evaluation
    assert ex.PUBLISHED_WINDOWS == 128 and cpu.eval_windows > ex.PUBLISHED_WINDOWS
    assert ex.row_windows("published CAT", cpu.eval_windows) == 128
    assert ex.row_windows("published baseline", cpu.eval_windows) == 128
    assert ex.row_windows("causal CAT", cpu.eval_windows) == cpu.eval_windows
    assert ex.row_windows("published CAT", 21) == 21            # a smaller cap stands


def test_published_rows_read_at_most_the_cap_and_causal_rows_every_window(tmp_path, tiny_path,
                                                                           monkeypatch):
    monkeypatch.setattr(ex, "PUBLISHED_WINDOWS", 2, raising=False)
    labels = ("published CAT", "causal CAT")
    runs = ex.train_rows(labels, [0], SIZES, TRAIN, root=tmp_path, device="cpu", lengths=[16],
                         eval_windows=3, curve_length=32, curve_windows=3, dropout_on=[16, 32],
                         echo=None)
    published, causal = runs["published CAT", 0], runs["causal CAT", 0]
    assert [r["windows"] for r in published.result["rows"]] == [2]
    assert [r["windows"] for r in causal.result["rows"]] == [3]
    # The curve at the longest length: stored by the job on the capped windows.
    assert (published.path / "positions-cat-32x2.json").exists()
    assert (causal.path / "positions-cat-32x3.json").exists()
    corpora = {split: load_corpus(tiny_path, split=split) for split in ("published", "90/10")}
    reads, _ = ex.table_errors(runs, labels, [0], corpora, 32, eval_windows=3, curve_windows=3)
    assert reads["published"]["windows"] == {16: 2, 32: 2}
    assert reads["90/10"]["windows"] == {16: 3, 32: 3}
    ce, _, curves = ex.table_scores(runs, labels, [0], corpora, 32, 3, curve_windows=3)
    assert ce["published CAT"].shape == (1, 2)
    # The dropout-on table: the job's, read back as the chapter asks for it (uncapped).
    monkeypatch.setattr(ex, "context_table", None)                 # stored: never recomputed
    rows = ex.dropout_on_rows(published, corpora["published"], [16, 32], 3, curve_length=32,
                              curve_windows=3)
    assert [r["windows"] for r in rows] == [2, 2]
    assert list(json.loads((published.path / "eval-dropout-on.json").read_text())["value"]) == rows


@pytest.mark.parametrize("split, expected", [("published", 128), ("90/10", 820)])
def test_split_windows(split, expected):
    assert ex.split_windows(split, 820) == expected
