"""Issue 53's protocol: every causal length reads the same text, spread over the whole span
that the longest length's windows tile; the published rows keep the published windows."""
import pytest
import torch

from catlib.book.profiles import experiment
from catlib.common.verdicts import prose_problems, window_error
from catlib.experiment.grid import span_of
from catlib.data import DEV_CHARS
from catlib.measure.evaluate import cross_entropy, n_windows, text_span, window_starts, windows

N_VAL = 111_540          # the 90/10 split's validation characters


def _targets(length, cap, span_length, n_val=N_VAL):
    """The positions of the validation split scored at ``length`` (targets w[1:])."""
    n = n_windows(n_val, length, cap, span_length)
    starts = window_starts(n_val, length, n, span_length)
    return starts, (starts[:, None] + torch.arange(1, length + 1)).reshape(-1)


def test_the_cpu_profile_reads_the_same_characters_at_128_and_5000():
    # Fails on the first-windows protocol: 128 windows of 128 cover characters 1-16,384,
    # 21 windows of 5000 cover 1-105,000.
    ev = experiment("cpu").evaluation
    assert ev.span_length == 5000
    _, short = _targets(128, ev.eval_windows, ev.span_length)
    _, long = _targets(5000, ev.curve_windows or ev.eval_windows, ev.span_length)
    assert abs(int(short.min()) - int(long.min())) < 5000
    assert abs(int(short.max()) - int(long.max())) < 5000
    assert len(set(short.tolist())) == len(short)          # non-overlapping windows


def test_every_length_tiles_the_span_of_the_longest():
    span = text_span(N_VAL, 5000)
    assert span == 105_000
    assert [n_windows(N_VAL, L, 10**6, 5000) for L in (128, 512, 1024, 5000)] == [820, 205, 102, 21]


def test_a_capped_length_spreads_its_windows_over_the_span_not_its_beginning():
    span = text_span(N_VAL, 5000)
    for cap in (2, 7, 128, 819):
        starts, _ = _targets(128, cap, 5000)
        assert len(starts) == cap == len(set(starts.tolist()))
        assert int(starts[0]) == 0 and int(starts[-1]) == (span // 128 - 1) * 128
        gaps = starts.diff()
        assert int(gaps.max()) - int(gaps.min()) <= 128          # evenly spread


def test_the_published_protocol_keeps_the_first_windows():
    starts, _ = _targets(128, 4, None)
    assert starts.tolist() == [0, 128, 256, 384]
    assert n_windows(N_VAL, 5000, 10**6) == 21


def test_published_split_rows_keep_the_published_protocol():
    assert span_of("published CAT", 5000) is None
    assert span_of("ALiBi baseline", 5000) == 5000


def test_cross_entropy_reads_the_windows_it_says():
    # A "model" that bets the next id repeats the current one: its CE depends on which
    # windows are read, so reading other windows than window_starts gives another number.
    val = torch.randint(0, 5, (4000,), generator=torch.Generator().manual_seed(0))

    class Repeat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))   # a device for cross_entropy

        def forward(self, x):                               # [B, L] -> ([B, L, 5], None)
            return 2.0 * torch.nn.functional.one_hot(x, 5).float(), None

    model = Repeat()
    got = cross_entropy(model, val, 50, eval_windows=6, span_length=500)
    x, y = windows(val, 50, 6, 500)
    want = torch.nn.functional.cross_entropy(model(x)[0].reshape(-1, 5).double(), y.reshape(-1))
    first = cross_entropy(model, val, 50, eval_windows=6)
    assert got["windows"] == 6
    assert abs(got["ce"] - float(want)) < 1e-9
    assert abs(first["ce"] - got["ce"]) > 1e-6      # the published windows are others


def test_window_error_says_paired_only_within_one_split():
    one = window_error({"90/10": {"windows": {128: 820, 5000: 21}, "span": 105_000}},
                       {128: [0.01, 0.012], 5000: [0.02]})
    assert "same 105,000 characters" in one and "are paired" in one
    two = window_error({"published": {"windows": {128: 128, 5000: 1}, "span": None},
                        "90/10": {"windows": {128: 820, 5000: 21}, "span": 105_000}},
                       {128: [0.01], 5000: [0.0, 0.02]})
    assert "paired only within a split" in two and "so the differences between rows are paired" not in two
    assert "first windows" in two and "128 windows at 128" in two and "820 windows at 128" in two
    assert "one window: no standard error" in two and "0.000" not in two
    assert not prose_problems(one + " " + two, [])


def test_the_paired_window_error_cancels_what_makes_a_window_hard_for_both(monkeypatch):
    # Two rows whose windows share a large difficulty term: each row's own error is large,
    # the error of their paired difference is that of the small independent part only.
    import numpy as np

    from catlib.common.verdicts import unpaired_error_bound
    from catlib.experiment import grid

    rng = np.random.default_rng(0)
    hard = {L: rng.normal(0, 0.3, n) for L, n in ((128, 820), (5000, 21))}
    own = {(label, s, L): hard[L] + rng.normal(0, 0.01, len(hard[L]))
           for label in ("ALiBi baseline", "RoPE baseline") for s in (0, 1) for L in hard}

    class FakeRun:
        def __init__(self, label, s):
            model = grid.ROWS[label].model
            self.result = {"rows": [{"len": 128, "windows": 820,
                                     f"{model}_window_ce": own[label, s, 128].tolist()}]}
            self.key = (label, s)

    runs = {(label, s): FakeRun(label, s) for label in ("ALiBi baseline", "RoPE baseline")
            for s in (0, 1)}
    monkeypatch.setattr(grid, "_stored_curve", lambda run, model, corpus, length, n, device, span:
                        {"windows": own[(*run.key, 5000)].tolist()})

    class Split:
        val = torch.zeros(N_VAL, dtype=torch.long)

    w = grid.table_paired_window_errors(runs, "ALiBi baseline", "RoPE baseline", [0, 1],
                                        {"90/10": Split()}, 5000, 820, curve_windows=21)
    for i, L in enumerate((128, 5000)):
        d = np.mean([own["ALiBi baseline", s, L] - own["RoPE baseline", s, L] for s in (0, 1)], 0)
        assert w.window[i] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)), rel=1e-12)
        own_se = [[own[label, s, L].std(ddof=1) / np.sqrt(len(d)) for s in (0, 1)]
                  for label in ("ALiBi baseline", "RoPE baseline")]
        assert w.window[i] < unpaired_error_bound(*own_se) / 10    # the bound is far looser
    assert list(w.window_df) == [819, 20]                           # windows − 1 per length
    with pytest.raises(ValueError, match="different splits"):
        grid.table_paired_window_errors(runs, "ALiBi baseline", "published CAT", [0, 1],
                                        {"90/10": Split()}, 5000, 820)


def _stretch(part, ids) -> tuple[int, int]:
    """Where ``part`` (int64 ids) lies in the corpus ``ids``: ``(first, end)``, found by
    content (a copy is found as a view is); the whole of it must be one stretch, once."""
    import numpy as np

    text = ids.numpy().astype(np.uint8).tobytes()          # 65 ids: one byte each
    piece = part.numpy().astype(np.uint8).tobytes()
    first = text.find(piece)
    assert first >= 0, "the trainer's data is not one stretch of the corpus"
    assert text.find(piece, first + 1) < 0, "the trainer's data is found twice in the corpus"
    return first, first + len(piece)


def test_no_run_trains_on_the_dev_slice_and_no_reported_ce_reads_it(tiny_path, tmp_path,
                                                                    sampler_spy):
    # Issue 60, item 4: reads what train_run hands the trainer. Every batch of a run is drawn
    # by its sampler from the ids it is given, so each id it can draw lies in that stretch
    # of the corpus, which must miss the dev slice and the validation split. (A test of
    # BatchSampler(corpus.train) alone passed with train_run training on every id before
    # the validation split, the dev slice included.)
    from catlib.data import load_corpus
    from catlib.nn.config import CATConfig
    from catlib.runs import train_run
    from catlib.training.loop import TrainConfig

    handed, drawn = sampler_spy
    model = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, solver="euler",
                      solver_steps=1, dropout=0.0)
    train_run(model, TrainConfig(train_steps=2, batch=2, seq=16, split="90/10", models=("cat",),
                                 repeat_share=0.5, repeat_periods=(2, 8)),
              root=tmp_path, device="cpu", data=tiny_path, evaluate=False, progress=False,
              echo=None)
    assert len(handed) == 1 and len(drawn) == 2          # the sampler the two steps drew from
    c = load_corpus(tiny_path, split="90/10")
    first, end = _stretch(handed[0], c.ids)
    dev, val = _stretch(c.dev, c.ids), _stretch(c.val, c.ids)
    assert val == (len(c.ids) - len(c.val), len(c.ids)) and dev[1] - dev[0] == DEV_CHARS
    for name, (lo, hi) in (("dev slice", dev), ("validation split", val)):
        assert end <= lo or first >= hi, f"the run trains on the {name}: {first}-{end}"
    assert all(int(s.max()) + 16 + 1 <= len(handed[0]) for s in drawn)
    # Every reported CE reads the validation split's windows, within its span.
    span = text_span(len(c.val), 5000)
    for L in (128, 5000):
        starts = window_starts(len(c.val), L, n_windows(len(c.val), L, 10**6, 5000), 5000)
        assert int(starts.min()) >= 0 and int(starts.max()) + L + 1 <= span + 1  # inside val
