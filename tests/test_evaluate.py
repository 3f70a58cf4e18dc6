"""The published evaluation protocol, the bigram floor and the leak score."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from catlib.baselines import Baseline
from catlib.config import CATConfig
from catlib.evaluate import (TABLE_HEADER, bigram_ce, context_table, cross_entropy,
                             format_table, leak_score, n_windows, windows)
from catlib.model import CAT

TINY = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", steps=1)


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
    # the published loop, written out: batch 1, summed CE / (n * L)
    with torch.no_grad():
        model.eval()
        total = sum(F.cross_entropy(model(corpus.val[k * 32:k * 32 + 32][None])[0][0],
                                    corpus.val[k * 32 + 1:k * 32 + 33], reduction="sum").item()
                    for k in range(5))
    assert one["ce"] == pytest.approx(total / 160, rel=1e-6)
    assert many["ce"] == pytest.approx(one["ce"], rel=1e-6)


def test_bigram_floor(corpus):
    ce = bigram_ce(corpus.train, corpus.val, 128, 256, vocab_size=65)
    assert 2.3 < ce < 2.5  # ALGORITHM.md: about 2.44


def test_table_format(corpus):
    torch.manual_seed(0)
    cfg = CATConfig(**TINY)
    rows = context_table(CAT(cfg), Baseline(cfg), corpus.val[:600], lengths=(16, 400),
                         eval_windows=2, train=corpus.train)
    assert rows[0]["dce"] == pytest.approx(rows[0]["base_ce"] - rows[0]["cat_ce"])
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
    assert max(scores["causal"]) < 1e-7
    assert scores["published"][0] > 1e-6 and scores["published"][1] > 1e-3
