"""CATConfig.baseline_block: the RoPE/ALiBi baseline's layer, post-norm ReLU (the default,
the published layer) or pre-norm GELU with a final LayerNorm (nanoGPT's; issue 47)."""
import dataclasses
import json

import pytest
import torch
import torch.nn as nn

import catlib
from catlib.nn.baselines import QKEncoderLayer
from catlib.nn.bias import alibi_values, toeplitz_bias
from catlib.nn.config import BASELINE_BLOCKS, CATConfig

SIZES = dict(vocab_size=65, d_model=32, n_heads=4, blocks=2, dropout=0.1)
QK = ("rope", "alibi")
PRE = "pre-ln-gelu"


def _cfg(positions="alibi", **kw):
    return CATConfig(**{**SIZES, **kw}, variant="causal", baseline_positions=positions)


def _baseline(positions="alibi", **kw):
    torch.manual_seed(0)
    return catlib.Baseline(_cfg(positions, **kw))


def _tokens(length=12):
    return torch.randint(0, 65, (2, length), generator=torch.Generator().manual_seed(1))


def _bias(model, h):
    """The ALiBi score bias for embeddings ``h [B, T, D]`` (None for RoPE), as the model's."""
    if model.config.baseline_positions != "alibi":
        return None
    return toeplitz_bias(alibi_values(model.config.n_heads, h.shape[1], h.device, h.dtype))


# ------------------------------------------------------------------ the default, unchanged

# The parameters of today's two-layer RoPE/ALiBi baseline (no final norm).
_LAYER = ("ff.0.bias", "ff.0.weight", "ff.3.bias", "ff.3.weight", "norm1.bias", "norm1.weight",
          "norm2.bias", "norm2.weight", *(f"self_attn.{p}_proj.{w}" for p in ("k", "out", "q", "v")
                                          for w in ("bias", "weight")))
DEFAULT_NAMES = sorted(["embed.weight", "proj.bias", "proj.weight",
                        *(f"layers.{i}.{n}" for i in range(2) for n in _LAYER)])
# Logits [0, -1, :4] of the baseline above (eval, seed 0, _tokens()), recorded from the code
# before baseline_block existed: they fail if the default layer changes (pre-norm or GELU
# move them by far more than the tolerance, which is for another machine's BLAS).
STORED = {"rope": [-0.573814, 0.398913, -0.175777, 0.182365],
          "alibi": [-0.508239, 0.384986, -0.161772, 0.244467]}


@pytest.mark.parametrize("positions", QK)
def test_default_block_is_todays_layer(positions):
    model = _baseline(positions)
    assert CATConfig().baseline_block == "post-ln-relu" == BASELINE_BLOCKS[0]
    assert sorted(n for n, _ in model.named_parameters()) == DEFAULT_NAMES
    assert sorted(model.state_dict()) == DEFAULT_NAMES and not hasattr(model, "ln_f")
    named = _baseline(positions, baseline_block="post-ln-relu")
    assert named.config == model.config
    model.eval(), named.eval()
    x = _tokens()
    with torch.no_grad():
        got = model(x)[0]
        assert torch.equal(named(x)[0], got)
        # Direct construction from the layers' modules: x = norm1(x + attn(x)); x = norm2(x + ff(x)).
        h = model.embed(x)
        bias = _bias(model, h)
        for layer in model.layers:
            assert isinstance(layer.ff[1], nn.ReLU)
            h = layer.norm1(h + layer.self_attn(h, bias))
            h = layer.norm2(h + layer.ff(h))
        assert torch.equal(got, model.proj(h))                              # bitwise
    torch.testing.assert_close(got[0, -1, :4], torch.tensor(STORED[positions]),
                               rtol=0, atol=1e-5)


# ------------------------------------------------------------------ pre-LN GELU

@pytest.mark.parametrize("positions", QK)
def test_pre_ln_block_is_the_formula(positions):
    model = _baseline(positions, baseline_block=PRE)
    model.eval()
    names = sorted(n for n, _ in model.named_parameters())
    assert names == sorted(DEFAULT_NAMES + ["ln_f.weight", "ln_f.bias"])   # + nanoGPT's ln_f
    x = _tokens()
    with torch.no_grad():
        h = model.embed(x)
        bias = _bias(model, h)
        for layer in model.layers:
            h = h + layer.self_attn(layer.norm1(h), bias)
            h = h + layer.ff[3](torch.nn.functional.gelu(layer.ff[0](layer.norm2(h))))
        want = model.proj(model.ln_f(h))
        torch.testing.assert_close(model(x)[0], want)
        # ... and not today's layer on the same weights.
        post = _baseline(positions)
        post.load_state_dict({k: v for k, v in model.state_dict().items() if "ln_f" not in k})
        post.eval()
        assert not torch.allclose(post(x)[0], want, atol=1e-3)


def test_pre_ln_draws_the_same_initial_weights():
    # ln_f has no random init: for one seed the two blocks start from the same weights.
    pre, post = _baseline(baseline_block=PRE).state_dict(), _baseline().state_dict()
    assert all(torch.equal(pre[k], v) for k, v in post.items())


def test_pre_ln_uses_gelu_not_relu():
    model = _baseline(baseline_block=PRE)
    for layer in model.layers:
        act = layer.ff[1]
        assert isinstance(act, nn.GELU) and act.approximate == "none"    # nanoGPT's exact GELU
        assert not isinstance(act, nn.ReLU)
    model.eval()
    x = _tokens()
    with torch.no_grad():
        want = model(x)[0]
        for layer in model.layers:
            layer.ff[1] = nn.ReLU()
        assert not torch.allclose(model(x)[0], want, atol=1e-4)    # the activation matters


@pytest.mark.parametrize("positions", QK)
@pytest.mark.parametrize("block", BASELINE_BLOCKS)
def test_block_is_causal(positions, block):
    model = _baseline(positions, baseline_block=block)
    model.eval()
    x = _tokens(16)
    y = x.clone()
    y[:, 10] = (y[:, 10] + 7) % 65                  # a different token at position 10
    with torch.no_grad():
        a, b = model(x)[0], model(y)[0]
    torch.testing.assert_close(a[:, :10], b[:, :10], rtol=0, atol=1e-6)
    assert (a[:, 10:] - b[:, 10:]).abs().amax(-1).min() > 1e-4   # every later position moves


# ------------------------------------------------------------------ loops

def test_pre_ln_loop():
    """Looped, the pre-norm layer is forward Euler on depth: h <- h + u(h) / n per sublayer,
    nothing normalising the state between steps; a loop of one is the layer bitwise."""
    n = 4
    model = _baseline(baseline_block=PRE, dropout=0.0, baseline_loops=n, baseline_loop_scale=True)
    model.eval()
    x = _tokens()
    with torch.no_grad():
        h = model.embed(x)
        bias = _bias(model, h)
        for layer in model.layers:
            for _ in range(n):
                h = h + layer.self_attn(layer.norm1(h), bias) / n
                h = h + layer.ff(layer.norm2(h)) / n
        assert torch.equal(model(x)[0], model.proj(model.ln_f(h)))      # 1/4: exact, same bits
        unscaled = _baseline(baseline_block=PRE, dropout=0.0, baseline_loops=n)
        unscaled.load_state_dict(model.state_dict())
        unscaled.eval()
        assert not torch.allclose(unscaled(x)[0], model(x)[0], atol=1e-3)
    one, plain = _baseline(baseline_block=PRE, baseline_loops=1, baseline_loop_scale=True), \
        _baseline(baseline_block=PRE)
    one.train(), plain.train()
    torch.manual_seed(3)
    want = plain(x)[0]
    torch.manual_seed(3)
    assert torch.equal(one(x)[0], want)


# ------------------------------------------------------------------ config

def test_bad_values_raise_a_clear_error():
    with pytest.raises(ValueError, match=r"baseline_block must be one of \['post-ln-relu', "
                                         r"'pre-ln-gelu'\], got 'pre-ln-relu'"):
        _cfg(baseline_block="pre-ln-relu")
    with pytest.raises(ValueError, match="baseline_block must be one of"):
        _cfg(baseline_block=None)
    # The sinusoidal baseline is nn.TransformerEncoder: only its own (post-norm ReLU) layer.
    with pytest.raises(ValueError, match=r"baseline_block='pre-ln-gelu' is a layer of the "
                                         r"RoPE or ALiBi baseline.*baseline_positions="):
        CATConfig(variant="causal", baseline_block=PRE)
    with pytest.raises(ValueError, match="baseline_block='pre-ln-gelu'"):
        CATConfig(baseline_block=PRE)        # published: sinusoidal
    assert CATConfig(variant="causal", baseline_block="post-ln-relu").baseline_block
    with pytest.raises(ValueError, match="block must be one of"):
        QKEncoderLayer(32, 4, 0.0, False, "pre-ln")


def test_config_dict_and_hash():
    from catlib.runs.identity import config_hash
    from catlib.training.loop import TrainConfig

    default, pre = _cfg(), _cfg(baseline_block=PRE)
    # At its default the field is left out: earlier runs' configs write the dict they wrote.
    assert "baseline_block" not in default.to_dict()
    assert "baseline_block" not in CATConfig().to_dict()
    assert pre.to_dict()["baseline_block"] == PRE
    for cfg in (default, pre):
        assert CATConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    tc = TrainConfig(train_steps=2, batch=2, seq=16, models=("base",))
    h = [config_hash(c, tc, "sha", code="code") for c in (default, pre)]
    assert h[0] != h[1]
    assert h[0] == config_hash(_cfg(baseline_block="post-ln-relu"), tc, "sha", code="code")


def test_cli_flag():
    from catlib.cli.commands import configs_from_args
    from catlib.cli.commands import build_parser

    args = build_parser().parse_args(["train", "--variant", "causal", "--baseline_positions",
                                      "rope", "--baseline_block", PRE])
    assert configs_from_args(args)[0].baseline_block == PRE
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--baseline_block", "pre-ln-relu"])


def test_flops_are_counted_for_the_pre_ln_block():
    """The counting rule (matrix products and attention) sees the same products in both
    blocks: the norms and activations are elementwise, counted in neither."""
    from catlib.experiment import compute

    cfg = _cfg(blocks=1, dropout=0.0)
    post = compute.step_flops(cfg, "base", 2, 16)
    pre = compute.step_flops(dataclasses.replace(cfg, baseline_block=PRE), "base", 2, 16)
    assert post[0] > 0 and pre == post


# ------------------------------------------------------------------ training

@pytest.mark.parametrize("positions", QK)
def test_short_training_run_learns(positions, tiny_path, monkeypatch, tmp_path):
    from catlib.runs import train_run
    from catlib.training.loop import TrainConfig

    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    cfg = CATConfig(vocab_size=65, d_model=32, n_heads=4, blocks=1, dropout=0.0,
                    variant="causal", baseline_positions=positions, baseline_block=PRE)
    tc = TrainConfig(train_steps=30, lr=4e-3, batch=8, seq=32, split="90/10", models=("base",),
                     checkpoint_every=30)
    run = train_run(cfg, tc, root=tmp_path, device="cpu", evaluate=False, progress=False,
                    echo=None)
    losses = [m["base_loss"] for m in run.metrics() if m["kind"] == "train"]
    assert len(losses) == 30 and all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # From about log(65) = 4.17 at the start: a model that learns nothing stays above 3.9.
    assert last < first - 0.5 and last < 3.6, (first, last)
    assert run.load_weights()[0]["base"].config.baseline_block == PRE
