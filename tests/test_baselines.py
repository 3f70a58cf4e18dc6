"""The RoPE and ALiBi baselines, QKAttention and the baseline_positions field."""
import dataclasses
import math

import pytest
import torch
import torch.nn as nn

import catlib
from catlib.nn import qk_attention
from catlib.nn.config import CATConfig
from catlib.nn.qk_attention import (CausalBias, QKAttention, alibi_bias, alibi_slopes,
                                 apply_rotary, prepare_bias, rotary_cos_sin)

SIZES = dict(vocab_size=65, d_model=32, n_heads=4, blocks=2, dropout=0.1)
QK = ("rope", "alibi")


def _baseline(positions, **kw):
    torch.manual_seed(0)
    return catlib.Baseline(CATConfig(**{**SIZES, **kw}, variant="causal",
                                     baseline_positions=positions))


# ------------------------------------------------------------------ config

def test_config_refuses_unknown_and_uncorrected():
    with pytest.raises(ValueError, match="baseline_positions must be one of"):
        CATConfig(baseline_positions="learned")
    # The published baseline has no mask and no positions: RoPE/ALiBi would mean nothing there.
    with pytest.raises(ValueError, match="variant='causal'"):
        CATConfig(baseline_positions="rope")
    with pytest.raises(ValueError, match="causal resolves to False"):
        CATConfig(variant="causal", causal=False, baseline_positions="alibi")
    with pytest.raises(ValueError, match="positional_encoding resolves to False"):
        CATConfig(variant="causal", positional_encoding=False, baseline_positions="alibi")
    with pytest.raises(ValueError, match="must be even"):
        CATConfig(variant="causal", d_model=12, n_heads=4, baseline_positions="rope")
    assert CATConfig().baseline_positions == "sinusoidal"
    cfg = CATConfig(variant="causal", baseline_positions="alibi")
    assert CATConfig.from_dict(cfg.to_dict()) == cfg


def test_sinusoidal_baseline_is_still_the_library_encoder():
    # Published and sinusoidal baselines keep nn.TransformerEncoder (the parity tests pin them).
    for variant in ("published", "causal"):
        base = catlib.Baseline(CATConfig(**SIZES, variant=variant))
        assert isinstance(base.enc, nn.TransformerEncoder) and not hasattr(base, "layers")


def test_parameter_counts_equal():
    counts = {p: sum(t.numel() for t in _baseline(p).parameters())
              for p in ("sinusoidal", "rope", "alibi")}
    assert len(set(counts.values())) == 1, counts


# ------------------------------------------------------------------ positions

def test_rope_rotate_half_convention():
    # d = 2: one pair, angle p at position p; position 0 leaves x unchanged.
    cos, sin = rotary_cos_sin(4, 2, dtype=torch.float64)
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64).expand(4, 2)
    out = apply_rotary(x, cos, sin)
    p = torch.arange(4, dtype=torch.float64)
    # float64 values of order 1: 1e-15 is 9 ulps
    assert torch.allclose(out, torch.stack([p.cos(), p.sin()], -1), atol=1e-15)


def test_rope_scores_depend_on_relative_position_only():
    torch.manual_seed(1)
    d, length = 16, 300
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    cos, sin = rotary_cos_sin(length, d, dtype=torch.float64)
    rq = apply_rotary(q.expand(length, d), cos, sin)                       # q at every position
    rk = apply_rotary(k.expand(length, d), cos, sin)
    scores = rq @ rk.T                                                      # [i, j]
    for shift in (1, 7, 150):   # float64 angles up to 300 rad: rounding ~1e-13 in a score
        assert torch.allclose(scores[shift:, shift:], scores[:-shift, :-shift], atol=1e-10)
    assert (scores[0, 1:] - scores[0, 0]).abs().max() > 1e-2               # not constant


def test_alibi_slopes():
    assert alibi_slopes(8) == [2.0 ** -i for i in range(1, 9)]
    # Not a power of two: the 4-head slopes, then every other 8-head slope.
    assert alibi_slopes(6) == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    assert alibi_slopes(12) == alibi_slopes(8) + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5,
                                                  2.0 ** -3.5]


def test_alibi_bias_values():
    bias = alibi_bias(4, 5, dtype=torch.float64)
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                want = -slopes[h] * (i - j) if j <= i else -math.inf
                assert bias[h, i, j].item() == want


# ------------------------------------------------------------------ QKAttention

def _reference_attention(attn, x, bias):
    """Explicit float64 softmax attention with the module's weights."""
    b, t, d = x.shape
    h, hd = attn.n_heads, attn.head_dim
    q, k, v = (p(x).view(b, t, h, hd).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    if attn.rotary:
        cos, sin = rotary_cos_sin(t, hd, dtype=x.dtype)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + (0 if bias is None else bias)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    return attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("bias_kind", [None, "alibi", "dense"])
@pytest.mark.parametrize("chunked", [False, True])
def test_qk_attention_matches_explicit_softmax(rotary, bias_kind, chunked, monkeypatch):
    if chunked:   # 3 queries per chunk (B * h * T = 160 scores a query): 7 chunks
        monkeypatch.setattr(qk_attention, "BIAS_CHUNK", 3 * 160)
    torch.manual_seed(2)
    attn = QKAttention(16, 4, rotary=rotary).double().eval()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    bias = {None: None, "alibi": alibi_bias(4, 20, dtype=torch.float64),
            # a general [B, h, T, T] bias, finite in the future too: the module masks it
            "dense": torch.randn(2, 4, 20, 20, dtype=torch.float64)}[bias_kind]
    with torch.no_grad():   # float64, outputs of order 1: 1e-12 is 5000 ulps
        assert torch.allclose(attn(x, bias), _reference_attention(attn, x, bias), atol=1e-12)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("shape", ["TT", "hTT", "BhTT"])
@pytest.mark.parametrize("chunked", [False, True])
def test_prepared_bias_matches_explicit_softmax(grad, shape, chunked, monkeypatch):
    # A CausalBias (masked once, read as views) gives the explicit softmax, with the fused
    # kernel (no grad) and with the explicit one (a bias that requires grad), chunked or not.
    if chunked:
        monkeypatch.setattr(qk_attention, "BIAS_CHUNK", 3 * 160)
    torch.manual_seed(6)
    attn = QKAttention(16, 4, rotary=True).double().eval()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    dims = {"TT": (20, 20), "hTT": (4, 20, 20), "BhTT": (2, 4, 20, 20)}[shape]
    bias = torch.randn(*dims, dtype=torch.float64, requires_grad=grad)
    prepared = prepare_bias(bias)
    assert prepared.masked.dim() == 4 and prepared.length == 20
    assert torch.isneginf(prepared.masked[..., torch.ones(20, 20, dtype=torch.bool).triu(1)]).all()
    with torch.set_grad_enabled(grad):   # float64 throughout, as above
        got = attn(x, prepared)
        want = _reference_attention(attn, x, bias)
        assert torch.allclose(got, want, atol=1e-12)
        assert torch.allclose(attn(x, prepared), attn(x, bias), atol=1e-12)   # tensor path
    if grad:   # and the same gradient reaches the original bias, below the diagonal only
        g_prepared, = torch.autograd.grad(got.square().sum(), bias)
        g_tensor, = torch.autograd.grad(attn(x, bias).square().sum(), bias)
        assert torch.allclose(g_prepared, g_tensor, atol=1e-10)
        assert (g_prepared[..., torch.ones(20, 20, dtype=torch.bool).triu(1)] == 0).all()


def test_prepared_bias_is_not_masked_again(monkeypatch):
    # The per-call cost of a prepared bias is the attention alone: no masked copy per call
    # (the tensor path masks every chunk), and in place preparation makes no copy at all.
    torch.manual_seed(7)
    attn = QKAttention(8, 2).eval()
    x = torch.randn(1, 12, 8)
    bias = torch.randn(2, 12, 12)
    expected = attn(x, bias).detach()
    prepared = prepare_bias(bias.clone(), inplace=True)
    monkeypatch.setattr(QKAttention, "_biased", None)            # would raise if called
    monkeypatch.setattr(torch.Tensor, "masked_fill", None)
    with torch.no_grad():   # float32 outputs below 1, other kernels: 1e-6 is 16 ulps
        assert torch.allclose(attn(x, prepared), expected, atol=1e-6)
    monkeypatch.undo()
    storage = bias.clone()
    assert prepare_bias(storage, inplace=True).masked.data_ptr() == storage.data_ptr()


def test_prepared_bias_errors():
    with pytest.raises(ValueError, match="causal bias is"):
        CausalBias(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="must end in"):
        prepare_bias(torch.zeros(5))
    attn = QKAttention(8, 2)
    with pytest.raises(ValueError, match="for T = 7"):
        attn(torch.randn(1, 6, 8), prepare_bias(torch.zeros(2, 7, 7)))


def test_qk_attention_bias_hook_can_force_the_weights():
    # A [T, T] bias of -inf off the diagonal: each token reads only itself.
    torch.manual_seed(3)
    attn = QKAttention(8, 2).eval()
    x = torch.randn(1, 10, 8)
    own = torch.full((10, 10), -math.inf).fill_diagonal_(0.0)
    with torch.no_grad():   # float32 outputs below 1 (measured: equal): 1e-6 is 16 ulps
        assert torch.allclose(attn(x, own), attn.out_proj(attn.v_proj(x)), atol=1e-6)


# ------------------------------------------------------------------ the models

@pytest.mark.parametrize("positions", QK)
def test_causal_exactly(positions):
    base = _baseline(positions).eval()
    g = torch.Generator().manual_seed(4)
    x = torch.randint(65, (2, 64), generator=g)
    with torch.no_grad():
        ref = base(x)[0]
        for i in torch.randint(63, (4,), generator=g).tolist():
            x2 = x.clone()
            x2[:, i + 1:] = (x[:, i + 1:] + torch.randint(1, 65, (2, 63 - i), generator=g)) % 65
            out = base(x2)[0]
            # Bit for bit: the same shapes, and later tokens enter only through exp(-inf) = 0.
            assert torch.equal(out[:, :i + 1], ref[:, :i + 1]), i
            assert not torch.equal(out[:, i + 1:], ref[:, i + 1:])    # the change was real


@pytest.mark.parametrize("positions", QK)
def test_trains(positions):
    base = _baseline(positions, dropout=0.0)
    opt = torch.optim.Adam(base.parameters(), lr=3e-3)
    seq = torch.arange(33) % 5                                            # 0 1 2 3 4 0 1 ...
    x, y = seq[None, :-1].repeat(4, 1), seq[None, 1:].repeat(4, 1)
    losses = []
    for _ in range(30):
        logits, penalty = base(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 65), y.reshape(-1)) + penalty
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert penalty.item() == 0.0
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("positions", QK)
def test_runs_at_5000(positions):
    cfg = CATConfig(vocab_size=65, d_model=16, n_heads=2, blocks=1, variant="causal",
                    baseline_positions=positions)
    base = catlib.Baseline(cfg).eval()
    with torch.inference_mode():
        logits, _ = base(torch.randint(65, (1, 5000)))
    assert logits.shape == (1, 5000, 65) and torch.isfinite(logits).all()


def test_gradient_reaches_the_bias_below_the_diagonal_only(monkeypatch):
    # A learned bias (e.g. a kernel W(s_i, t_j)) trains through the hook, chunked or not.
    monkeypatch.setattr(qk_attention, "BIAS_CHUNK", 2 * 12)
    torch.manual_seed(5)
    attn = QKAttention(8, 2)
    bias = torch.zeros(2, 12, 12, requires_grad=True)
    attn(torch.randn(1, 12, 8), bias).square().sum().backward()
    lower = torch.ones(12, 12, dtype=torch.bool).tril(-1)
    assert (bias.grad[:, lower] != 0).all()
    assert (bias.grad[:, torch.ones(12, 12, dtype=torch.bool).triu(1)] == 0).all()


def test_sinusoidal_evaluation_skips_the_fast_path_and_restores_it():
    # Catches an evaluation that changes the numbers when it takes the fused causal kernel
    # instead of nn.TransformerEncoder's fast path, or that leaves the global switch off.
    base = _baseline("sinusoidal", dropout=0.0).eval()
    x = torch.randint(65, (2, 48), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        fused = base(x)[0]
        assert torch.backends.mha.get_fastpath_enabled()
        base.config = dataclasses.replace(base.config, causal=False)   # the fast path, masked by hand
        mask = nn.Transformer.generate_square_subsequent_mask(48)
        h = base.enc(base.embed(x) + catlib.nn.baselines.sinusoidal_positions(48, 32), mask=mask)
        reference = base.proj(h)
    # float32 logits up to 2 through other kernels (measured: 3 ulps); 1e-5 is 40 ulps.
    assert torch.allclose(fused, reference, atol=1e-5), (fused - reference).abs().max()


def test_alibi_prepared_once_matches_the_masked_bias(monkeypatch):
    # Catches the prepared ALiBi bias differing from masking the bias on every call.
    base = _baseline("alibi", dropout=0.0).eval()
    x = torch.randint(65, (2, 40), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        prepared = base(x)[0]
        monkeypatch.setattr(catlib.nn.baselines, "CausalBias", lambda bias: bias)   # plain tensor
        masked_per_call = base(x)[0]
    assert torch.allclose(prepared, masked_per_call, atol=1e-5)   # as above (measured: 2.5 ulps)
