"""The context gain beyond the training length in the book: computed by the pool and stored
with each causal run, read back by the chapters without being computed again, and said in
words ("uses context beyond its training length") only where the gain is called."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

import catlib
from catlib import book
from catlib.data import load_corpus
from catlib.experiment import grid as ex
from catlib.common.devices import one_thread

ROOT = Path(catlib.__file__).resolve().parents[1]      # the checkout whose catlib is imported
SIZES = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
             dropout=0.0)
SHARED = dict(SIZES, train_steps=3, lr=4e-3, batch=2, seq=16, lengths=[16, 32], eval_windows=2,
              profile="t")
GAIN_WINDOWS = 2

@pytest.fixture(scope="module")
def book_pool(tmp_path_factory, tiny_path):
    """The book's first stage for chapter 6 at tiny sizes, its chapters' ``gain_windows``
    given: seeds 0 and 1 of the causal rows, the published run on seed 0 (7 runs)."""
    root = tmp_path_factory.mktemp("gain-pool")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        mp.setenv("CATLIB_JOBS", "1")          # in this process: runs of 3 steps
        params = {"06_context_length": dict(SHARED, seeds=[0, 1], published_seeds=[0],
                                            published_protocol=False, gain_windows=GAIN_WINDOWS)}
        done = book.train_runs_first(params, root, "cpu", log=lambda *a, **k: None)
    return root / "runs" / "book-t", done


def _config(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def test_the_pool_stores_each_causal_runs_context_gain(book_pool):
    # Catches a pool that leaves the gain to the chapters (each would score it again) or
    # scores a published run, whose models read later characters.
    runs_dir, done = book_pool
    assert done == {"trained": 7, "reused": 0}
    stored = {d.name: sorted(p.name for p in d.glob("context-gain-*.json"))
              for d in runs_dir.iterdir() if (d / "config.json").is_file()}
    for name, files in stored.items():
        config = _config(runs_dir / name)
        if config["model"]["variant"] == "published":
            assert files == [], name
        else:
            want = [f"context-gain-{m}-32x{GAIN_WINDOWS}.json" for m in sorted(config["train"]["models"])]
            assert files == want, (name, files)


def test_a_chapter_reads_the_stored_gain_and_never_computes_it_again(book_pool, tiny_path,
                                                                     monkeypatch):
    # Catches a chapter that scores the gain again (minutes per run at the cpu sizes), a
    # stored gain that is not what context_gain computes, and one reused for other weights.
    from catlib.experiment import gain_runs
    from catlib.measure.context_gain import context_gain

    runs_dir, _ = book_pool
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    seeds = lambda label: [0] if "published" in label else [0, 1]          # noqa: E731
    runs = ex.train_rows(ex.HEADLINE, seeds, SIZES, dict(train_steps=3, lr=4e-3, batch=2, seq=16),
                         root=runs_dir, device="cpu", lengths=[16], eval_windows=2,
                         curve_length=32, echo=None, jobs=1, gain_windows=GAIN_WINDOWS)
    assert all(run.reused for run in runs.values())
    corpus = {s: load_corpus(tiny_path, split=s) for s in ("published", "90/10")}
    calls = []
    monkeypatch.setattr(gain_runs, "context_gain", lambda *a, **k: calls.append(1))
    row = gain_runs.row_context_gain(runs, "ALiBi baseline", [0, 1], corpus, 32, GAIN_WINDOWS)
    assert not calls and row.gain.shape == (2, GAIN_WINDOWS) and row.train_length == 16
    assert row.full_positions.shape == (2, 32 - 16) and row.windows == GAIN_WINDOWS
    model = runs["ALiBi baseline", 1].load_models()[1]
    with one_thread():                      # as the job scored it: the same kernels, bits
        again = context_gain(model, corpus["90/10"].val, 32, 16, eval_windows=GAIN_WINDOWS,
                             span_length=32)
    np.testing.assert_array_equal(row.gain[1], again["gain"].numpy())
    np.testing.assert_array_equal(row.sliding_positions[1], again["sliding_positions"].numpy())
    # Stored for other weights: computed again (reaches the patched context_gain).
    path = runs["ALiBi baseline", 0].path / f"context-gain-base-32x{GAIN_WINDOWS}.json"
    data = json.loads(path.read_text())
    data["ident"]["weights"] = "0" * 16
    path.write_text(json.dumps(data))
    with pytest.raises((TypeError, AttributeError)):
        gain_runs.row_context_gain(runs, "ALiBi baseline", [0], corpus, 32, GAIN_WINDOWS)
    assert calls
    with pytest.raises(ValueError, match="not causal"):
        gain_runs.row_context_gain(runs, "published CAT", [0], corpus, 32, GAIN_WINDOWS)


def _row_gain(mean: float, sd: float, seeds: int = 3, windows: int = 7, seed: int = 0):
    """A RowGain whose gains [seeds, windows] have this mean and spread (the rest filler)."""
    from catlib.experiment.gain_runs import RowGain

    rng = np.random.default_rng(seed)
    gain = rng.normal(0, 1, (seeds, windows))
    gain = mean + sd * (gain - gain.mean()) / gain.std()
    full = np.full((seeds, windows), 1.9)
    positions = np.full((seeds, 32), 1.9)
    return RowGain(gain, full, full + gain, positions, positions, 128, 5000, 16, windows, 21)


def test_the_words_say_uses_context_beyond_only_where_the_gain_is_called():
    # Catches a sentence that reads use of context from anything but a called gain.
    from catlib.book.context_gain_table import (COSTS, USES, gain_reading, gain_sentence,
                                                gain_table, gain_words)
    from catlib.measure.context_gain import uses_context_beyond

    rows = {"A": _row_gain(0.03, 0.005), "B": _row_gain(0.002, 0.02, seed=1),
            "C": _row_gain(-0.03, 0.005, seed=2), "D": _row_gain(0.03, 0.005, seeds=1)}
    called = {label: uses_context_beyond(g.gain) for label, g in rows.items()}
    assert called == {"A": True, "B": False, "C": False, "D": False}
    for label, g in rows.items():
        assert (gain_reading(g.gain) == USES) == called[label]
        assert (USES in gain_words(label, g.gain)) == called[label], gain_words(label, g.gain)
    assert gain_reading(rows["C"].gain) == COSTS
    assert "one seed" in gain_reading(rows["D"].gain)
    table = gain_table(rows)
    lines = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert [label for label in rows if USES in lines[label]] == ["A"]
    assert "7 of the 21 windows" in table and "3 × 7" in lines["A"]
    sentence = gain_sentence(rows)
    users = sentence.split(":", 1)[1].split(";")[0]
    assert "*A* (" in users and not re.search(r"\b[BCD]\b", users), sentence
    assert "C" in sentence.split("called below zero")[1].split(";")[0]
    none = gain_sentence({"B": rows["B"]})
    assert "use context beyond" not in none and "not resolved: *B*" in none, none


CHAPTERS = ("06_context_length", "08_beyond", "09_using_context", "10_equal_compute")


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_chapter_reads_use_of_context_from_ce_falling_with_length(name):
    """364f0a7's chapters 6 and 8 said a CE that falls with length means "the model turns
    more context into better predictions" and glued the rows whose CE fell as such models.
    Each chapter now reads the context gain from its runs and glues its words."""
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    text = {kind: "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind)
            for kind in ("markdown", "code")}
    for claim in (r"turns?\s+more\s+context[^.]*into\s+better\s+predictions",
                  r"what the model does with\s+more\s+context"):
        assert not re.search(claim, text["markdown"]), (name, claim)
    assert "row_context_gain(" in text["code"] and "gain_windows=gain_windows" in text["code"]
    assert re.search(r"gain_(sentence|words|table)\(", text["code"]), name
