"""The RoPE and ALiBi baselines, QKAttention and the baseline_positions field."""
import dataclasses
import math

import pytest
import torch
import torch.nn as nn

import catlib
from catlib.nn import qk_attention
from catlib.nn.config import CATConfig
from catlib.nn.bias import alibi_values, causal_toeplitz, toeplitz_bias
from catlib.nn.qk_attention import (CausalBias, QKAttention, alibi_bias, alibi_slopes,
                                    apply_rotary, rotary_cos_sin)

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


def _future(t):
    return torch.ones(t, t, dtype=torch.bool).triu(1)


def _causal(bias):
    """A general bias made causal by the test (-inf above the diagonal), as a CausalBias."""
    return CausalBias(bias.masked_fill(_future(bias.shape[-1]), -math.inf))


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("bias_kind", [None, "alibi", "TT", "hTT", "BhTT"])
@pytest.mark.parametrize("chunked", [False, True])
def test_qk_attention_matches_explicit_softmax(rotary, bias_kind, chunked, monkeypatch):
    if chunked:   # 3 queries per chunk (B * h * T = 160 scores a query): 7 chunks
        monkeypatch.setattr(qk_attention, "SCORE_CHUNK", 3 * 160)
    torch.manual_seed(2)
    attn = QKAttention(16, 4, rotary=rotary).double().eval()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    dims = {"TT": (20, 20), "hTT": (4, 20, 20), "BhTT": (2, 4, 20, 20)}
    bias = (None if bias_kind is None else alibi_bias(4, 20, dtype=torch.float64)
            if bias_kind == "alibi" else torch.randn(*dims[bias_kind], dtype=torch.float64))
    causal = None if bias is None else _causal(bias)
    if causal is not None:
        assert causal.masked.dim() == 4 and causal.length == 20
    with torch.no_grad():   # float64, outputs of order 1: 1e-12 is 5000 ulps
        assert torch.allclose(attn(x, causal), _reference_attention(attn, x, bias), atol=1e-12)


@pytest.mark.parametrize("chunked", [False, True])
def test_gradient_reaches_the_bias_below_the_diagonal_only(chunked, monkeypatch):
    # A learned bias (e.g. a kernel W(s_i, t_j)) trains through the CausalBias, chunked or not,
    # with the explicit softmax's gradient.
    if chunked:
        monkeypatch.setattr(qk_attention, "SCORE_CHUNK", 3 * 160)
    torch.manual_seed(6)
    attn = QKAttention(16, 4, rotary=True).double()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    bias = torch.randn(4, 20, 20, dtype=torch.float64, requires_grad=True)
    got, = torch.autograd.grad(attn(x, _causal(bias)).square().sum(), bias)
    want, = torch.autograd.grad(_reference_attention(attn, x, bias).square().sum(), bias)
    assert torch.allclose(got, want, atol=1e-10)
    lower = torch.ones(20, 20, dtype=torch.bool).tril(-1)   # row 0 reads one key: no gradient
    assert (got[:, _future(20)] == 0).all() and (got[:, lower] != 0).all()


def test_causal_bias_is_read_as_it_is(monkeypatch):
    # The per-call cost of a causal bias is the attention alone: no masked copy per call.
    torch.manual_seed(7)
    attn = QKAttention(8, 2).eval()
    x = torch.randn(1, 12, 8)
    causal = _causal(torch.randn(2, 12, 12))
    expected = _reference_attention(attn, x, causal.masked[0]).detach()
    monkeypatch.setattr(torch.Tensor, "masked_fill", None)       # would raise if called
    monkeypatch.setattr(torch.Tensor, "masked_fill_", None)
    with torch.no_grad():   # float32 outputs below 1, other kernels: 1e-6 is 16 ulps
        assert torch.allclose(attn(x, causal), expected, atol=1e-6)


def test_bias_errors():
    with pytest.raises(ValueError, match="causal bias is"):
        CausalBias(torch.zeros(2, 3, 4))
    attn = QKAttention(8, 2)
    with pytest.raises(ValueError, match="for T = 7"):
        attn(torch.randn(1, 6, 8), _causal(torch.zeros(2, 7, 7)))
    with pytest.raises(TypeError, match="CausalBias"):   # a raw tensor is not masked for you
        attn(torch.randn(1, 6, 8), torch.zeros(2, 6, 6))


def test_qk_attention_bias_can_force_the_weights():
    # A [T, T] bias of -inf off the diagonal: each token reads only itself.
    torch.manual_seed(3)
    attn = QKAttention(8, 2).eval()
    x = torch.randn(1, 10, 8)
    own = CausalBias(torch.full((10, 10), -math.inf).fill_diagonal_(0.0))
    with torch.no_grad():   # float32 outputs below 1 (measured: equal): 1e-6 is 16 ulps
        assert torch.allclose(attn(x, own), attn.out_proj(attn.v_proj(x)), atol=1e-6)


def test_toeplitz_and_alibi_biases():
    values = torch.randn(3, 9)
    bias = causal_toeplitz(values)
    i, j = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    assert torch.equal(bias[:, i >= j], values[:, (i - j)[i >= j]])
    assert torch.isneginf(bias[:, i < j]).all()
    slopes = torch.tensor(alibi_slopes(3))
    want = (-slopes[:, None, None] * (i - j).float()).masked_fill(i < j, -math.inf)
    assert torch.equal(alibi_bias(3, 9), want)


@pytest.mark.parametrize("length", [1, 2, 9, 130])
def test_toeplitz_without_grad_copies_the_same_entries(length):
    # Catches the strided copy used in evaluation drifting from the gather used in training.
    values = torch.randn(4, length, requires_grad=True)
    with torch.no_grad():
        fast = causal_toeplitz(values)
    gathered = causal_toeplitz(values)
    assert gathered.requires_grad and not fast.requires_grad
    assert torch.equal(fast, gathered.detach()) and fast.is_contiguous()


@pytest.mark.parametrize("length", [1, 2, 9, 130])
def test_toeplitz_bias_without_grad_is_the_same_bias_with_keys_reversed(length):
    # The evaluation layout (a strided view, keys reversed) holds the training layout's
    # entries, column j' for key T - 1 - j'; nothing of size T x T is allocated for it.
    values = torch.randn(4, length, requires_grad=True)
    trained = toeplitz_bias(values)
    with torch.no_grad():
        fast = toeplitz_bias(values)
    assert not trained.keys_reversed and fast.keys_reversed
    assert torch.equal(fast.ordered(), trained.masked.detach())
    assert fast.masked.untyped_storage().nbytes() == 4 * (2 * length - 1) * 4


@pytest.mark.parametrize("length", [7, 300])
def test_attention_reads_a_reversed_bias_as_the_ordered_one(length, monkeypatch):
    # Same attention, keys summed in another order: float32 rounding only. At 300 the
    # queries go in chunks (SCORE_CHUNK shrunk), each reading its own keys' slice.
    import catlib.nn.qk_attention as qk
    monkeypatch.setattr(qk, "SCORE_CHUNK", 2 * 4 * 300 * 64)
    torch.manual_seed(0)
    attn = QKAttention(16, 4).eval()
    x = torch.randn(2, length, 16)
    values = -torch.rand(4, 1) * torch.arange(length)[None].float()
    with torch.no_grad():
        ordered = attn(x, CausalBias(causal_toeplitz(values)))
        reversed_keys = attn(x, toeplitz_bias(values))
    assert torch.allclose(reversed_keys, ordered, atol=1e-5, rtol=1e-5)   # ~100 ulps of O(1)


def test_written_out_attention_is_the_fused_one_on_a_bias_with_grad():
    # Training with a learned bias takes _attend; it must be sdpa's result and gradient.
    import torch.nn.functional as F
    from catlib.nn.qk_attention import _attend
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, requires_grad=True) for _ in range(3))
    bias = causal_toeplitz(torch.randn(4, 9, requires_grad=True))[None]
    ours, ref = _attend(q, k, v, bias), F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5)
    g_ours = torch.autograd.grad(ours.sum(), (q, k, v))
    g_ref = torch.autograd.grad(ref.sum(), (q, k, v))
    assert all(torch.allclose(a, b, atol=1e-5, rtol=1e-5) for a, b in zip(g_ours, g_ref))


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


def test_sinusoidal_evaluation_skips_the_fast_path_without_switching_it(monkeypatch):
    # Catches an evaluation that changes the numbers when it takes the fused causal kernel
    # instead of nn.TransformerEncoder's fast path, or that switches the process's flag.
    base = _baseline("sinusoidal", dropout=0.0).eval()
    x = torch.randint(65, (2, 48), generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(torch.backends.mha, "set_fastpath_enabled", None)   # would raise
    with torch.inference_mode():
        fused = base(x)[0]
        base.config = dataclasses.replace(base.config, causal=False)   # the fast path, masked by hand
        mask = nn.Transformer.generate_square_subsequent_mask(48)
        h = base.enc(base.embed(x) + catlib.nn.baselines.sinusoidal_positions(48, 32), mask=mask)
        reference = base.proj(h)
    # float32 logits up to 2 through other kernels (measured: 3 ulps); 1e-5 is 40 ulps.
    assert torch.allclose(fused, reference, atol=1e-5), (fused - reference).abs().max()


@pytest.mark.parametrize("variant", ["published", "causal"])
@pytest.mark.parametrize("train", [False, True])
def test_explicit_encoder_is_the_library_path_off_the_fast_path(variant, train):
    # The layers written out give, bit for bit, what nn.TransformerEncoder gives with the
    # fast path switched off (the switch the baseline used to flip for the process).
    torch.manual_seed(0)
    base = catlib.Baseline(CATConfig(**SIZES, variant=variant)).train(train)
    x = torch.randint(65, (2, 24), generator=torch.Generator().manual_seed(4))
    causal = base.config.causal

    def run(explicit):
        torch.manual_seed(1)
        with torch.no_grad():
            if explicit:
                with catlib.nn.baselines.explicit_encoder():
                    return base(x)[0]
            h = base.embed(x)
            if base.config.positional_encoding:
                h = h + catlib.nn.baselines.sinusoidal_positions(24, 32)
            mask = nn.Transformer.generate_square_subsequent_mask(24) if causal else None
            previous = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                return base.drop(base.proj(base.enc(h, mask=mask, is_causal=causal)))
            finally:
                torch.backends.mha.set_fastpath_enabled(previous)

    assert torch.equal(run(True), run(False))


# ------------------------------------------------------------------ scaled loop

def _looped(loops, scale, dropout=0.0):
    return _baseline("alibi", dropout=dropout, baseline_loops=loops, baseline_loop_scale=scale)


def test_scaled_loop_has_the_alibi_baselines_parameters():
    plain, scaled = _baseline("alibi"), _looped(4, True, dropout=0.1)
    shapes = {n: p.shape for n, p in plain.named_parameters()}
    assert {n: p.shape for n, p in scaled.named_parameters()} == shapes
    assert sum(p.numel() for p in scaled.parameters()) == sum(p.numel() for p in plain.parameters())


@pytest.mark.parametrize("train", [False, True])
def test_scaled_loop_of_one_is_the_baseline_bitwise(train):
    plain, scaled = _baseline("alibi"), _looped(1, True, dropout=0.1)
    scaled.load_state_dict(plain.state_dict())
    plain.train(train), scaled.train(train)
    x = torch.randint(0, 65, (2, 12))
    torch.manual_seed(3)
    want = plain(x)[0]
    torch.manual_seed(3)
    assert torch.equal(scaled(x)[0], want)


def test_scaled_loop_is_n_euler_steps_of_the_layer():
    n = 4
    model = _looped(n, True)
    model.eval()
    x = torch.randint(0, 65, (2, 12))
    h = model.embed(x)
    with torch.no_grad():
        bias = toeplitz_bias(alibi_values(SIZES["n_heads"], 12, h.device, h.dtype))
        for layer in model.layers:
            for _ in range(n):   # h <- norm(h + update / n), for each sublayer
                h = layer.norm1(h + layer.self_attn(h, bias) / n)
                h = layer.norm2(h + layer.ff(h) / n)
        assert torch.equal(model(x)[0], model.proj(h))   # 1/4 is exact: the same bits
        # ... and not the unscaled loop's numbers.
        unscaled = _looped(n, False)
        unscaled.load_state_dict(model.state_dict())
        unscaled.eval()
        assert not torch.allclose(unscaled(x)[0], model(x)[0], atol=1e-3)


def test_scaled_loop_config():
    with pytest.raises(ValueError, match="baseline_loop_scale scales"):
        CATConfig(**SIZES, variant="causal", baseline_loop_scale=True)
    with pytest.raises(ValueError, match="baseline_loop_scale must be True or False"):
        CATConfig(**SIZES, variant="causal", baseline_positions="alibi", baseline_loop_scale=1)
    assert CATConfig().baseline_loop_scale is False
    from catlib.experiment.grid import ROWS
    from catlib.experiment.pool import BASELINE_STEP_WEIGHT as _BASELINE_STEP_WEIGHT, expected_cost as _expected_cost
    row = ROWS["looped ALiBi baseline, scaled"]
    assert dict(row.options) == {"baseline_positions": "alibi", "baseline_loops": 4,
                                 "baseline_loop_scale": True}
    # Its job weight: four evaluations of the baseline's layer per step, as the unscaled loop.
    spec = dict(model=dict(row.options), train=dict(train_steps=10, models=["base"]),
                dropout_on=[])
    assert _expected_cost(spec) == 10 * 4 * _BASELINE_STEP_WEIGHT
