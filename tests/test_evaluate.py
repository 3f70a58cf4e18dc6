"""The published evaluation protocol, the bigram floor and the leak score."""
import math
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from catlib.nn.baselines import Baseline
from catlib.nn.config import CATConfig
from catlib.measure.evaluate import (TABLE_HEADER, bigram_ce, context_table, cross_entropy,
                             format_table, leak_score, n_windows, windows)
from catlib.nn.model import CAT

TINY = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=1)


class Uniform(nn.Module):
    """Zero logits (CE = log V); records the mode it was called in."""

    def __init__(self, V=65):
        super().__init__()
        self.V, self.w, self.modes = V, nn.Parameter(torch.zeros(())), []

    def forward(self, tokens):
        self.modes.append(self.training)
        return torch.zeros(*tokens.shape, self.V) + 0 * self.w, torch.zeros(())


def test_protocol_windows():
    val = torch.arange(1000)
    assert n_windows(1000, 128, 256) == (1000 - 129) // 128 == 6
    assert n_windows(1000, 10, 5) == 5
    x, y = windows(val, 128, 6)
    assert x.shape == y.shape == (6, 128)
    assert x[:, 0].tolist() == [k * 128 for k in range(6)]
    assert torch.equal(y, x + 1)


def test_uniform_model_and_modes():
    m = Uniform()
    m.train()
    r = cross_entropy(m, torch.randint(65, (2000,)), 100, eval_windows=7, batch_tokens=300)
    assert r["windows"] == 7 and r["tokens"] == 700
    assert r["ce"] == pytest.approx(math.log(65)) and r["ppl"] == pytest.approx(65)
    assert m.modes == [False] * 3 and m.training  # eval mode, batches of 3, mode restored
    m.modes.clear()
    cross_entropy(m, torch.randint(65, (2000,)), 100, eval_windows=2, dropout_in_eval=True)
    assert m.modes == [True]


def test_skips_lengths_longer_than_the_split():
    r = cross_entropy(Uniform(), torch.randint(65, (300,)), 200)
    assert r["len"] == 200 and "validation tokens" in r["skipped"]
    assert bigram_ce(torch.randint(65, (300,)), torch.randint(65, (300,)), 200) is None


def test_batched_equals_published_batch_of_one(corpus):
    torch.manual_seed(0)
    model = CAT(CATConfig(**TINY))
    one = cross_entropy(model, corpus.val, 32, eval_windows=5, batch_tokens=1)
    many = cross_entropy(model, corpus.val, 32, eval_windows=5)
    # the published loop, written out: batch 1, summed CE / (n * L), from the same float32
    # logits (same shapes) in float64, as the library sums them: equal to float64 rounding.
    with torch.no_grad():
        model.eval()
        total = sum(F.cross_entropy(model(corpus.val[k * 32:k * 32 + 32][None])[0][0].double(),
                                    corpus.val[k * 32 + 1:k * 32 + 33], reduction="sum").item()
                    for k in range(5))
    assert one["ce"] == pytest.approx(total / 160, rel=1e-12)
    # [5, 32] against [1, 32] products: float32 logits an ulp apart, CE moved by at most
    # ~2 ulps of the largest logit; 8 ulps relative of a CE of ~4 (measured: 4e-11).
    assert many["ce"] == pytest.approx(one["ce"], rel=8 * torch.finfo(torch.float32).eps)


def _protocol_targets(val, length, eval_windows):
    """(input, target) pairs of the published windows, written out with plain loops."""
    n = min((len(val) - length - 1) // length, eval_windows)
    return [(val[k * length + i], val[k * length + i + 1]) for k in range(n) for i in range(length)]


def test_bigram_floor_on_known_data():
    """Counts written out by hand: add-one smoothing, fitted on train, scored on the val
    windows. Would catch counts taken from the validation split, a wrong smoothing, or
    scoring other positions than the protocol's targets."""
    train = torch.tensor([0, 1, 0, 1, 0, 2])          # pairs 01 x2, 10 x2, 02 x1
    val = torch.tensor([0, 1, 0, 2, 2, 1, 1, 0, 0])
    p = {0: {0: 1 / 6, 1: 3 / 6, 2: 2 / 6}, 1: {0: 3 / 5, 1: 1 / 5, 2: 1 / 5},
         2: {0: 1 / 3, 1: 1 / 3, 2: 1 / 3}}          # (count + 1) / (row total + V)
    # L = 2: n = (9 - 3) // 2 = 3 windows, targets val[1:3], val[3:5], val[5:7]
    expected = -sum(math.log(p[a][b]) for a, b in [(0, 1), (1, 0), (0, 2), (2, 2), (2, 1), (1, 1)]) / 6
    assert bigram_ce(train, val, 2, 256, vocab_size=3) == pytest.approx(expected, abs=1e-12)
    assert bigram_ce(val, val, 2, 256, vocab_size=3) != pytest.approx(expected, abs=1e-3)


def test_bigram_floor(corpus):
    """The floor on the real split, against an independent count with Counter (the band
    alone would pass a model fitted on the validation split)."""
    ce = bigram_ce(corpus.train, corpus.val, 128, 256, vocab_size=65)
    assert 2.3 < ce < 2.5  # ALGORITHM.md: about 2.44
    train, val = corpus.train.tolist(), corpus.val.tolist()
    pairs, rows = Counter(zip(train, train[1:])), Counter(train[:-1])
    targets = _protocol_targets(val, 128, 256)
    expected = -sum(math.log((pairs[a, b] + 1) / (rows[a] + 65)) for a, b in targets) / len(targets)
    assert ce == pytest.approx(expected, rel=1e-12)
    # fitted on the validation split it also lands in the band: only the count tells
    fitted_on_val = bigram_ce(corpus.val, corpus.val, 128, 256, vocab_size=65)
    assert 2.3 < fitted_on_val < 2.5 and fitted_on_val != pytest.approx(expected, rel=1e-4)


class Unigram(nn.Module):
    """The same log-probabilities log p at every position, whatever the input."""

    def __init__(self, logp):
        super().__init__()
        self.logp = nn.Parameter(logp)

    def forward(self, tokens):
        return self.logp.expand(*tokens.shape, -1), torch.zeros(())


def test_table_against_models_of_known_ce(corpus):
    """Two models whose CE is known in closed form: uniform (log 65) as "CAT", a fixed
    unigram as "baseline"; their columns and dce = base - CAT match sums over the protocol's
    targets written out here. Would catch swapped columns, a wrong sign or normalisation."""
    logp = torch.log_softmax(torch.linspace(-2, 2, 65, dtype=torch.float64), 0).float()
    val = corpus.val[:2000]
    rows = context_table(Uniform(), Unigram(logp), val, lengths=(16, 100), eval_windows=5)
    for row, L in zip(rows, (16, 100)):
        targets = _protocol_targets(val.tolist(), L, 5)
        base = -sum(logp[b].item() for _, b in targets) / len(targets)
        # Zero logits: log 65 to float64 rounding. logp rounded to float32 sums to 1 within
        # a few float32 ulps, so the library's log_softmax moves it by ~1e-7: rel 1e-6.
        assert row["cat_ce"] == pytest.approx(math.log(65), rel=1e-6)
        assert row["base_ce"] == pytest.approx(base, rel=1e-6)
        assert row["dce"] == pytest.approx(base - math.log(65), rel=1e-6)
        assert row["windows"] == 5 and row["base_ppl"] == pytest.approx(math.exp(base), rel=1e-6)


def test_table_format(corpus):
    torch.manual_seed(0)
    cfg = CATConfig(**TINY)
    rows = context_table(CAT(cfg), Baseline(cfg), corpus.val[:600], lengths=(16, 400),
                         eval_windows=2, train=corpus.train)
    assert "skipped" in rows[1]
    lines = format_table(rows).splitlines()
    assert lines[0] == TABLE_HEADER == "len | CAT CE | PPL | Bas CE | PPL | dCE"
    assert lines[1].startswith("16 | ") and len(lines[1].split(" | ")) == 6
    assert lines[2].startswith("400 | skipped") and lines[3].startswith("bigram floor CE")


def test_leak_score_causal_vs_published():
    scores = {}
    for variant in ("published", "causal"):
        torch.manual_seed(0)
        cfg = CATConfig(variant=variant, **TINY)
        scores[variant] = (leak_score(CAT(cfg), 65, 32), leak_score(Baseline(cfg), 65, 32))
    assert max(scores["causal"]) < 1e-7   # same shapes, later tokens through exact zeros: 0
    assert scores["published"][0] > 1e-6 and scores["published"][1] > 1e-3


def test_non_finite_values_are_marked_not_printed():
    """Would catch a table printing "nan" (or a NaN CE passed on as a number)."""
    class NaNModel(Uniform):
        def forward(self, tokens):
            return super().forward(tokens)[0] * float("nan"), torch.zeros(())
    rows = context_table(NaNModel(), Uniform(), torch.randint(65, (200,)), lengths=(16,),
                         eval_windows=2)
    assert rows[0]["cat_ce"] is None and rows[0]["dce"] is None and rows[0]["nonfinite"] == ["cat"]
    text = format_table(rows + [{"len": 32, "cat_ce": float("inf"), "cat_ppl": float("inf"),
                                 "base_ce": None, "base_ppl": None, "dce": float("nan")}])
    assert "nan" not in text.lower() and "inf" not in text.lower()
    assert text.splitlines()[1] == "16 | non-finite | non-finite | 4.1744 | 65.00 | non-finite"
    assert text.splitlines()[2] == "32 | non-finite | non-finite | - | - | non-finite"


def test_seeded_dropout_is_reproducible_and_restores_the_rng():
    """Would catch masks from the unseeded global RNG, or a seed left in the global RNG."""
    torch.manual_seed(0)
    model = Baseline(CATConfig(**TINY))   # published: dropout on the logits too
    val = torch.randint(65, (400,))
    torch.manual_seed(5)
    state = torch.get_rng_state()
    a = cross_entropy(model, val, 16, eval_windows=4, dropout_in_eval=True, seed=0)
    assert torch.equal(torch.get_rng_state(), state)
    b = cross_entropy(model, val, 16, eval_windows=4, dropout_in_eval=True, seed=0)
    c = cross_entropy(model, val, 16, eval_windows=4, dropout_in_eval=True, seed=1)
    plain = cross_entropy(model, val, 16, eval_windows=4)
    assert a["ce"] == b["ce"] != c["ce"] and plain["ce"] != a["ce"]   # a, b: a replay, exact


class FakeMPS(torch.Tensor):
    """A CPU tensor that reports device "mps" and, like MPS, has no float64."""

    @property
    def device(self):
        return torch.device("mps")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        f64 = torch.float64 in args[1:] or kwargs.get("dtype") is torch.float64
        if func is torch.Tensor.double or (func in (torch.Tensor.to, torch.Tensor.type) and f64):
            raise TypeError("Cannot convert a MPS Tensor to float64 dtype")
        if func is torch.Tensor.cpu:
            with torch._C.DisableTorchFunctionSubclass():
                return args[0].as_subclass(torch.Tensor)
        return super().__torch_function__(func, types, args, kwargs)


class OnMPS(Uniform):
    def forward(self, tokens):
        logits = torch.randn(*tokens.shape, self.V, generator=torch.Generator().manual_seed(0))
        return (logits + tokens[..., None] * 1e-3).as_subclass(FakeMPS), torch.zeros(())


def test_mps_logits_are_never_made_float64_on_the_device():
    """Logits on MPS (faked: a tensor that says "mps" and refuses float64) are summed in
    float64 on the CPU, with the same numbers as CPU logits. Would catch `.double()` on
    device logits, which MPS rejects."""
    val = torch.randint(65, (400,))
    on_mps = cross_entropy(OnMPS(), val, 16, eval_windows=4, device="cpu")
    with pytest.raises(TypeError, match="float64"):
        OnMPS()(val[None, :16])[0].double()   # the fake does refuse
    class OnCPU(OnMPS):
        def forward(self, tokens):
            return super().forward(tokens)[0].as_subclass(torch.Tensor), torch.zeros(())
    # Exact: the same logits, summed by the same code.
    assert on_mps["ce"] == cross_entropy(OnCPU(), val, 16, eval_windows=4)["ce"]
    assert leak_score(OnMPS(), 65, 16, device="cpu") == leak_score(OnCPU(), 65, 16, device="cpu")


def test_settings_checked_before_evaluation():
    """Would catch a published run evaluated at T = 1 (undefined operator) found only after
    training."""
    from catlib.measure.evaluate import check_settings
    check_settings((1, 16), causal=True)
    for bad, message in ((dict(lengths=(1, 16), causal=False), "lengths must be >= 2"),
                         (dict(lengths=()), "at least one"), (dict(lengths=(0,)), "lengths must be"),
                         (dict(lengths=(16,), eval_windows=0), "eval_windows"),
                         (dict(lengths=(16,), batch_tokens=-1), "batch_tokens"),
                         (dict(lengths=(16,), leak_length=1), "leak_length")):
        with pytest.raises(ValueError, match=message):
            check_settings(**bad)
