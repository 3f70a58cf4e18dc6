"""Per-position CE, its artefacts, and the attention input-dependence probe."""
import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn as nn

import catlib
from catlib.nn.config import CATConfig
from catlib.measure.evaluate import cross_entropy
from catlib.experiment.artefacts import (read_extrapolation_json, read_position_csv,
                                         write_extrapolation_json, write_position_csv)
from catlib.measure.extrapolation import (attention_input_dependence, log_bins, mixing_weights,
                                          parameter_count, plot_position_curves, position_ce)
from catlib.nn.qk_attention import alibi_bias

V = 65
SMALL = dict(vocab_size=V, d_model=16, n_heads=2, n_freq=4, quad_nodes=8, blocks=1,
             solver="rk4-classic", solver_steps=2)


class Uniform(nn.Module):
    """Zero logits: CE = log V at every position."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        return torch.zeros(*tokens.shape, V) + 0 * self.w, None


class Bigram(nn.Module):
    """Logits = a fixed table's row for the current token."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(table)
        self.seen_training = []

    def forward(self, tokens):
        self.seen_training.append(self.training)
        return self.table[tokens], None


def _val(n=2000, seed=0):
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ position_ce

def test_uniform_model_gives_log_v_everywhere():
    ce = position_ce(Uniform(), _val(), length=100, n_windows=5)
    assert ce.dtype == torch.float64 and ce.shape == (100,)
    assert torch.allclose(ce, torch.full((100,), math.log(V), dtype=torch.float64), atol=1e-12)


def test_bigram_stub_known_value_and_mode_restored():
    torch.manual_seed(0)
    table = torch.randn(V, V)
    model, val, L, n = Bigram(table), _val(), 50, 7
    model.train()
    ce = position_ce(model, val, length=L, n_windows=n, batch=3)
    logp = table.double().log_softmax(-1)
    # Independent of catlib.measure.evaluate.windows: window k reads val[kL + p], predicts val[kL + p + 1].
    want = torch.tensor([-sum(logp[val[k * L + p], val[k * L + p + 1]].item() for k in range(n)) / n
                         for p in range(L)], dtype=torch.float64)
    assert torch.allclose(ce, want, atol=1e-12)
    assert model.seen_training == [False] * 3 and model.training   # eval inside, train after


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_mean_equals_published_cross_entropy(positions):
    torch.manual_seed(0)
    base = catlib.Baseline(CATConfig(**SMALL, variant="causal", baseline_positions=positions))
    val, L = _val(), 128
    ce = position_ce(base, val, length=L, n_windows=6)
    # batch_tokens = L: one window per forward pass, as position_ce's batch=1.
    ref = cross_entropy(base, val, L, eval_windows=6, batch_tokens=L)
    assert ref["windows"] == 6
    assert abs(ce.mean().item() - ref["ce"]) < 1e-9   # the same logits, float64 sums: ~1e-14


def test_too_short_validation_split_is_refused():
    with pytest.raises(ValueError, match="needs more than 200 validation tokens"):
        position_ce(Uniform(), _val(150), length=100)


# ------------------------------------------------------------------ log bins and plot

def test_log_bins_partition_positions():
    ce = np.linspace(3.0, 2.0, 5000)
    b = log_bins(ce, per_decade=16)
    assert b["start"][0] == 0 and b["stop"][-1] == 5000
    assert (b["start"][1:] == b["stop"][:-1]).all() and (b["stop"] > b["start"]).all()
    assert list(b["stop"][:3]) == [1, 2, 3]                  # short contexts: one bin each
    assert (np.diff(b["center"]) > 0).all()
    sizes = b["stop"] - b["start"]
    assert abs((b["ce"] * sizes).sum() / 5000 - ce.mean()) < 1e-12
    assert np.allclose(log_bins(np.full(300, 1.5))["ce"], 1.5)
    assert len(b["ce"]) < 80                                  # a summary, not 5000 points


def test_plot_position_curves():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    plot_position_curves(ax, {"a": np.full(600, 2.0), "b": torch.linspace(2, 3, 600)},
                         train_length=256)
    assert ax.get_xscale() == "log" and len(ax.lines) == 3    # two curves + training length
    plt.close(fig)


# ------------------------------------------------------------------ artefacts

def _mode_per_umask():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def test_position_csv_round_trip(tmp_path):
    curves = {"causal CAT": torch.rand(5000, dtype=torch.float64) + 2,
              "rope baseline": np.random.default_rng(0).random(4096)}
    path = tmp_path / "positions.csv"
    write_position_csv(path, curves)
    assert path.read_text().splitlines()[0] == "model,position,ce"
    back = read_position_csv(path)
    assert set(back) == set(curves)
    for name, ce in curves.items():
        assert np.array_equal(back[name], np.asarray(ce))     # exact: repr round-trips
    assert (path.stat().st_mode & 0o777) == _mode_per_umask()
    assert os.listdir(tmp_path) == ["positions.csv"]            # no temporary file left


def test_position_csv_refuses_non_finite(tmp_path):
    with pytest.raises(ValueError, match="finite"):
        write_position_csv(tmp_path / "p.csv", {"m": [1.0, float("nan")]})
    assert not os.listdir(tmp_path)


ROWS = {"causal CAT": {"train_length": 256, "leak": 0.0,
                       "ce": {"128": 2.39, "512": 2.46, "1024": 2.5, "5000": 2.52}},
        "alibi baseline": {"train_length": 256, "leak": 1e-9,
                           "ce": {"128": 2.3, "512": 2.4, "1024": 2.45, "5000": 2.47}}}


def test_extrapolation_json_round_trip(tmp_path):
    path = tmp_path / "extrapolation.json"
    write_extrapolation_json(path, ROWS)
    assert read_extrapolation_json(path) == ROWS
    assert (path.stat().st_mode & 0o777) == _mode_per_umask()


@pytest.mark.parametrize("broken, message", [
    ({"m": {"leak": 0.0, "ce": ROWS["causal CAT"]["ce"]}}, r"lacks \['train_length'\]"),
    ({"m": {**ROWS["causal CAT"], "leak": float("nan")}}, "leak must be a finite number"),
    ({"m": {**ROWS["causal CAT"], "train_length": True}}, "train_length must be an integer"),
    ({"m": {**ROWS["causal CAT"], "ce": {"128": 2.0}}}, r"ce lacks lengths \['512'"),
    ({"m": {**ROWS["causal CAT"], "ce": {**ROWS["causal CAT"]["ce"], "5000": None}}},
     r"ce\['5000'\] must be a finite number"),
    ({}, "non-empty"),
])
def test_invalid_rows_refused(tmp_path, broken, message):
    with pytest.raises(ValueError, match=message):
        write_extrapolation_json(tmp_path / "x.json", broken)
    assert not os.listdir(tmp_path)
    # The same rows written by hand are refused on reading, naming the file.
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="hand.json is not an extrapolation table: .*" + message):
        read_extrapolation_json(path)


def test_malformed_json_refused(tmp_path):
    path = tmp_path / "extrapolation.json"
    path.write_text('{"causal CAT": {"train_length": 256,')
    with pytest.raises(ValueError, match="extrapolation.json is not valid JSON"):
        read_extrapolation_json(path)


# ------------------------------------------------------------------ input dependence

def _tokens(seed, length=24):
    return torch.randint(V, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_cat_attention_does_not_read_its_input(variant):
    torch.manual_seed(0)
    cat = catlib.CAT(CATConfig(**SMALL, variant=variant))
    assert attention_input_dependence(cat, _tokens(1), _tokens(2)) < 1e-12
    # The probe measures the weights forward applies: they are the plan's.
    weights = mixing_weights(cat, _tokens(1))
    with torch.no_grad():
        plan = cat.blocks[0].attn.plan(24)
    expected = plan.mixing if variant == "causal" else plan.weights
    assert torch.allclose(weights, expected.double(), atol=1e-6)   # float32 weights <= 1: 8 ulps


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_query_key_attention_reads_its_input(positions):
    torch.manual_seed(0)
    base = catlib.Baseline(CATConfig(**SMALL, variant="causal", baseline_positions=positions))
    assert attention_input_dependence(base, _tokens(1), _tokens(2)) > 1e-2
    # The probe recovers softmax(q.k / sqrt(d) + bias) at the first layer's input.
    attn, tokens = base.layers[0].self_attn, _tokens(1)
    with torch.no_grad():
        x = base.embed(tokens)
        q, k = (p(x).view(1, 24, 2, 8).transpose(1, 2) for p in (attn.q_proj, attn.k_proj))
        if attn.rotary:
            from catlib.nn.qk_attention import apply_rotary, rotary_cos_sin
            cos, sin = rotary_cos_sin(24, 8)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        bias = alibi_bias(2, 24) if positions == "alibi" else torch.zeros(24, 24)
        future = torch.ones(24, 24, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(8) + bias).masked_fill(future, -math.inf)
    # float32 scores recomputed here, other kernels: weights <= 1 agree to a few ulps.
    assert torch.allclose(mixing_weights(base, tokens), scores.softmax(-1)[0].double(), atol=1e-5)


def test_sinusoidal_baseline_cannot_be_probed():
    base = catlib.Baseline(CATConfig(**SMALL, variant="causal"))
    with pytest.raises(ValueError, match="nn.MultiheadAttention cannot be probed"):
        mixing_weights(base, _tokens(1))


def test_parameter_count():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert parameter_count(model) == 3 * 4 + 4 + 4 * 2 + 2
