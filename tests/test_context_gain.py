"""The context gain beyond the training length (issue 61, item 2): the sliding plan's bounds,
the gain of models that do and do not read far, the full reading against the book's
per-position scoring, and the gain's paired interval."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import catlib
from catlib.common.verdicts import t_quantile
from catlib.measure.context_gain import (context_gain, gain_interval, sliding_plan,
                                         uses_context_beyond)
from catlib.measure.evaluate import text_span
from catlib.measure.extrapolation import position_ce
from catlib.nn.config import CATConfig

V = 65
EPS32, EPS64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps


class LastK(nn.Module):
    """Logits at t = the sum of k tables read at ids t, t − 1, ..., t − k + 1 (those in the
    input): reads the last k ids only."""

    def __init__(self, k: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.tables = nn.Parameter(torch.randn(k, V, V, generator=g))

    def forward(self, tokens):                                     # [B, T] -> [B, T, V]
        out = torch.zeros(*tokens.shape, V)
        for j, table in enumerate(self.tables):
            out[:, j:] += table[tokens[:, :tokens.shape[1] - j]]
        return out, None


class FarBack(nn.Module):
    """Logits at t = ``scale`` on the id ``back`` positions earlier (0 where there is none):
    on text of period back + 1 that id is the target."""

    def __init__(self, back: int, scale: float = 8.0):
        super().__init__()
        self.back, self.scale = back, nn.Parameter(torch.tensor(scale))

    def forward(self, tokens):
        out = torch.zeros(*tokens.shape, V)
        if tokens.shape[1] > self.back:
            out[:, self.back:] = self.scale * nn.functional.one_hot(
                tokens[:, :-self.back], V).float()
        return out, None


def _val(n, seed=0):
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ the sliding plan

@pytest.mark.parametrize("length,train_length", [(5000, 128), (1024, 128), (512, 64),
                                                 (300, 128), (129, 128), (250, 100), (140, 7)])
def test_sliding_plan_scores_every_target_once_within_the_bounds(length, train_length):
    plan = sliding_plan(length, train_length)
    stride = max(1, train_length // 8)
    assert plan.stride == stride
    # Every target at T..L−1 exactly once, in order.
    assert torch.equal(plan.positions[plan.scored], torch.arange(train_length, length))
    # Chunks lie in the window; each reads at most T ids.
    assert int(plan.starts.min()) >= 0 and int(plan.starts.max()) + train_length <= length
    assert plan.positions.shape == plan.reads.shape == (len(plan.starts), train_length)
    reads = plan.reads[plan.scored]
    assert int(reads.max()) <= train_length
    assert int(reads.min()) >= train_length - stride + 1 >= 7 * train_length / 8
    # Each target is read by the chunk of the plan that gives it the most context
    # within T ids: no other chunk holding it starts earlier.
    for p, r in zip(plan.positions[plan.scored].tolist(), reads.tolist()):
        holding = [a for a in plan.starts.tolist() if a <= p < a + train_length]
        assert p - min(holding) + 1 == r


@pytest.mark.parametrize("args,match", [((128, 128), "must exceed"), ((100, 0), "train_length"),
                                        ((300, 128, 0), "stride"), ((300, 128, 129), "stride")])
def test_sliding_plan_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        sliding_plan(*args)


# ------------------------------------------------------------------ the gain

def test_a_model_reading_the_last_k_ids_gains_nothing():
    k, T, L = 5, 64, 300                      # k < 7/8·T: every reading holds the k ids
    model, val = LastK(k), _val(4 * L)
    r = context_gain(model, val, length=L, train_length=T)
    assert r["windows"] == text_span(len(val), L) // L and r["targets"] == L - T
    assert r["gain"].dtype == torch.float64 and r["gain"].shape == (r["windows"],)
    # Logits are sums of k float32 terms, equal in both readings up to their rounding; a
    # target's CE moves by at most twice its largest logit change.
    tol = 2 * k * EPS32 * float(model.tables.detach().abs().max())
    assert float(r["gain"].abs().max()) <= tol
    assert float((r["sliding_positions"] - r["full_positions"]).abs().max()) <= tol
    assert not uses_context_beyond(r["gain"][None].repeat(3, 1).numpy())


def test_a_model_reading_beyond_the_training_length_gains():
    back, T, L = 80, 64, 256                  # the id it reads lies more than T back
    base = _val(back + 1, seed=1)
    val = base.repeat(40)                     # period back + 1: that id is the target
    model = FarBack(back)
    r = context_gain(model, val, length=L, train_length=T)
    # Sliding: no chunk reaches back, every target reads uniform logits.
    assert torch.allclose(r["sliding"], torch.full_like(r["sliding"], math.log(V)),
                          rtol=0, atol=64 * EPS64)
    # Full: targets at positions >= back are predicted with the scale's softmax.
    hit = math.log(1 + (V - 1) * math.exp(-8.0))
    share = (L - back) / (L - T)
    expected = share * (math.log(V) - hit)
    assert torch.allclose(r["gain"], torch.full_like(r["gain"], expected), rtol=0,
                          atol=64 * EPS64 * math.log(V))
    assert float(r["gain"].min()) > 0


def _small_cat():
    torch.manual_seed(0)
    return catlib.CAT(CATConfig(vocab_size=V, d_model=16, n_heads=2, n_freq=4, quad_nodes=8,
                                blocks=1, solver="rk4-classic", solver_steps=1,
                                variant="causal", dropout=0.0))


def test_full_reading_is_the_books_per_position_scoring():
    model, val, T, L = _small_cat(), _val(1500), 32, 300
    r = context_gain(model, val, length=L, train_length=T)
    curve = position_ce(model, val, length=L, n_windows=r["windows"], span_length=L)
    # The same float32 forward of each window; only the float64 sums' order differs.
    tol = 16 * L * EPS64 * float(curve.max())
    assert torch.allclose(r["full_positions"], curve[T:], rtol=0, atol=tol)
    assert abs(float(r["full"].mean()) - float(curve[T:].mean())) <= tol


def test_sliding_reading_is_each_targets_own_chunk_scored_alone():
    model, val, T, L = _small_cat(), _val(700), 32, 300
    r = context_gain(model, val, length=L, train_length=T, eval_windows=1)
    plan, window = sliding_plan(L, T), val[:L + 1]
    ces = []
    with torch.inference_mode():
        for a, scored in zip(plan.starts.tolist(), plan.scored):
            logits = model.eval()(window[None, a:a + T])[0][0].double()     # [T, V]
            ce = nn.functional.cross_entropy(logits, window[a + 1:a + T + 1], reduction="none")
            ces.append(ce[scored])
    ces = torch.cat(ces)
    # One chunk alone against all chunks in one batch: float32 forwards that may round
    # differently by batch size; logits of a few units move by a few hundred float32 ulps.
    tol = 1e3 * EPS32
    assert torch.allclose(r["sliding_positions"], ces, rtol=0, atol=tol)


# ------------------------------------------------------------------ its interval

def test_gain_interval_combines_the_seeds_spread_and_the_windows_error():
    rng = np.random.default_rng(0)
    gains = 0.01 + rng.normal(0, 0.004, (3, 1))  + rng.normal(0, 0.02, (1, 21)) \
        + rng.normal(0, 0.001, (3, 21))
    mean, half = gain_interval(gains)
    seeds = gains.mean(1)
    seeds_half = 4.303 * seeds.std(ddof=1) / math.sqrt(3)              # t(0.975, 2)
    window = gains.mean(0).std(ddof=1) / math.sqrt(21)
    assert mean == pytest.approx(gains.mean(), abs=1e-15)
    assert half == pytest.approx(math.hypot(seeds_half, t_quantile(20) * window), rel=1e-12)
    assert uses_context_beyond(gains) == (mean - half > 0)
    # One seed: no interval, never called.
    assert math.isnan(gain_interval(gains[:1])[1]) and not uses_context_beyond(gains[:1])
    # A clear gain on every seed and window is called; its negative is not.
    clear = 0.05 + rng.normal(0, 0.001, (3, 21))
    assert uses_context_beyond(clear) and not uses_context_beyond(-clear)
    with pytest.raises(ValueError, match="seeds, windows"):
        gain_interval(gains[0])
