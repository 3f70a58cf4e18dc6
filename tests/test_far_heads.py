"""Far heads of the prior kernels (CATConfig.far_heads, catlib.nn.decay_prior).

What each test catches:
- a far head that reads the future, or prefix logits that change when the input grows
  beyond the training length (the query scale depends on the query's position only);
- a far head with a prior, a decaying head whose prior moved, a far-head bias that is
  not exactly flat (0) from the training length on;
- a query scale that is not exactly 1 within the training length (at every T_train, also
  in float64), not log(i + 1) / log(T_train) beyond it, or that reaches the bias;
- far_heads = 0 changing the logits, the parameters or the config (run hashes) of
  earlier runs; far_heads lost in a config's round trip;
- settings accepted that the model cannot honour.
"""
import math

import pytest
import torch

import catlib
from catlib.nn.config import CATConfig
from catlib.nn.decay_prior import DecayPriorAttention, DecayPriorKernel

V = 13
T_TRAIN = 16
SMALL = dict(vocab_size=V, variant="causal", train_length=T_TRAIN, d_model=32, n_heads=4,
             n_freq=8, blocks=2, solver="rk4-classic", solver_steps=1, dropout=0.0)
PRIORS = ["alibi-prior", "kerple-prior"]
EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps


def _perturbed(kernel, far_heads=2, dtype=torch.float32, **kw):
    """A small CAT with every parameter moved off its initialisation (the residual's
    coefficients start at 0, KERPLE's at its init)."""
    torch.manual_seed(0)
    model = catlib.CAT(CATConfig(**{**SMALL, **kw}, kernel=kernel, far_heads=far_heads))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(dtype).eval()


@pytest.mark.parametrize("kernel", PRIORS)
def test_no_leak(kernel):
    model = _perturbed(kernel)
    # Exactly 0: the future enters only through -inf scores, whose weights are 0.
    assert catlib.leak_score(model, V, length=48) == 0.0
    x = torch.randint(0, V, (1, 60), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(x)[0]
        for p in (3, T_TRAIN, 40):
            other = x.clone()
            other[0, p + 1:] = (other[0, p + 1:] + 1) % V
            assert torch.equal(model(other)[0][:, :p + 1], ref[:, :p + 1])


@pytest.mark.parametrize("kernel", PRIORS)
def test_logits_of_a_prefix_do_not_depend_on_the_length(kernel):
    model = _perturbed(kernel)
    x = torch.randint(0, V, (1, 100), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        short, long = model(x[:, :40])[0], model(x)[0][:, :40]
    # Other shapes, other GEMM blocking: float32 rounding, a few hundred ulps of |logits|.
    scale = float(short.abs().max())
    torch.testing.assert_close(long, short, rtol=0, atol=512 * EPS32 * max(1.0, scale))


@pytest.mark.parametrize("prior", ["alibi", "kerple"])
def test_far_heads_have_no_prior_the_others_keep_theirs(prior):
    d = torch.arange(0, 5 * T_TRAIN, dtype=torch.float64)
    plain = DecayPriorKernel(4, 8, prior, T_TRAIN).double()
    far = DecayPriorKernel(4, 8, prior, T_TRAIN, far_heads=2).double()
    with torch.no_grad():
        p_plain, p_far = plain.prior(d), far.prior(d)
    assert p_far.shape == (4, len(d))
    assert torch.equal(p_far[2:], torch.zeros(2, len(d)))
    # The same initial parameters, the same float64 formula on a slice of them.
    scale = float(p_plain.abs().max())
    torch.testing.assert_close(p_far[:2], p_plain[:2], rtol=0, atol=50 * EPS64 * scale)
    if prior == "kerple":
        assert far.r1_raw.shape == far.r2_raw.shape == (2,)
    else:
        assert far.slopes.shape == (2,)
    for all_far in (DecayPriorKernel(4, 8, prior, T_TRAIN, far_heads=4),):
        assert torch.equal(all_far.prior(d), torch.zeros(4, len(d)))


@pytest.mark.parametrize("prior", ["alibi", "kerple"])
def test_far_bias_is_exactly_flat_from_the_training_length_on(prior):
    kern = DecayPriorKernel(4, 8, prior, T_TRAIN, far_heads=2).double().requires_grad_(False)
    kern.residual.coeffs.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(4))
    d = torch.arange(0, 10 * T_TRAIN, dtype=torch.float64)
    bias = kern(d)
    beyond = d >= T_TRAIN - 1
    # Structural zeros (no prior, the residual masked), not rounded ones.
    assert torch.equal(bias[2:, beyond], torch.zeros(2, int(beyond.sum())))
    assert float(bias[2:, ~beyond].abs().max()) > 1e-3          # a real residual within
    torch.testing.assert_close(bias[2:], kern.residual_at(d)[2:], rtol=0, atol=0)
    assert (bias[:2, beyond] < 0).all()                         # the decaying heads decay


@pytest.mark.parametrize("train_length", [2, 3, 16, 100, 2535, 2615, 4096])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_query_scale(train_length, dtype):
    kern = DecayPriorKernel(4, 8, "alibi", train_length, far_heads=1)
    length = 3 * train_length
    g = kern.query_scale(length, dtype=dtype)
    assert g.shape == (4, length) and g.dtype == dtype
    # Exactly 1 within the training length (every head), and for the decaying heads.
    assert torch.equal(g[:, :train_length], torch.ones(4, train_length, dtype=dtype))
    assert torch.equal(g[:3], torch.ones(3, length, dtype=dtype))
    i = torch.arange(train_length, length, dtype=torch.float64)
    want = (torch.log(i + 1) / math.log(train_length)).to(dtype)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(g[3, train_length:], want, rtol=8 * eps, atol=0)
    assert (g[3, train_length:] > 1).all()


def test_query_scale_is_exactly_1_up_to_every_training_length():
    # log1p(T - 1) / log(T) rounds above 1 at some T (libm-dependent): sweep them all.
    kern = DecayPriorKernel(2, 4, "alibi", 2, residual=False, far_heads=1)
    for train_length in range(2, 4097):
        kern.train_length = train_length
        g = kern.query_scale(train_length + 1, dtype=torch.float64)[1]
        assert float(g[:train_length].max()) == 1.0 and float(g[-1]) > 1.0, train_length


def test_query_scale_is_none_without_far_heads():
    assert DecayPriorKernel(4, 8, "kerple", T_TRAIN).query_scale(40) is None
    model = _perturbed("kerple-prior", far_heads=0)
    assert model.blocks[0].attn.plan(40).query_scale is None
    plan = _perturbed("kerple-prior", far_heads=2).blocks[0].attn.plan(40)
    assert plan.query_scale.shape == (4, 40) and plan.query_scale.dtype == torch.float32


@pytest.mark.parametrize("prior", ["alibi", "kerple"])
def test_query_scale_multiplies_the_content_scores_not_the_bias(prior):
    torch.manual_seed(5)
    attn = DecayPriorAttention(16, 4, 6, prior, 8, dropout=0.0, far_heads=2).double().eval()
    with torch.no_grad():
        attn.kernels.residual.coeffs.normal_(0.0, 1.0)
        x = torch.randn(2, 30, 16, dtype=torch.float64)
        out = attn(x)
        # Written out: score = g_h(i) q_i . k_j / sqrt(d) + b_h(i - j), causal softmax.
        qk = attn.qk
        q, k, v = (p(x).view(2, 30, 4, 4).transpose(1, 2)
                   for p in (qk.q_proj, qk.k_proj, qk.v_proj))
        g = attn.kernels.query_scale(30, dtype=torch.float64)            # [h, T]
        i = torch.arange(30)
        dist = (i[:, None] - i[None, :]).clamp(min=0).double()
        bias = attn.kernels(dist.flatten()).view(4, 30, 30)
        scores = g[:, :, None] * (q @ k.transpose(-1, -2)) / 2.0 + bias
        scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
        want = qk.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 30, 16))
    assert float((g[2:, 8:] - 1).abs().min()) > 0.01                   # the scale is on
    torch.testing.assert_close(out, want, rtol=0, atol=100 * EPS64 * max(1.0, float(want.abs().max())))


@pytest.mark.parametrize("kernel", PRIORS)
def test_far_heads_zero_is_the_model_as_before(kernel):
    base = {**SMALL, "kernel": kernel}
    torch.manual_seed(6)
    before = catlib.CAT(CATConfig(**base))
    torch.manual_seed(6)
    now = catlib.CAT(CATConfig(**base, far_heads=0))
    shapes = [(n, p.shape) for n, p in before.named_parameters()]
    assert shapes == [(n, p.shape) for n, p in now.named_parameters()]
    x = torch.randint(0, V, (2, 40), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert torch.equal(before(x)[0], now(x)[0])        # the same kernels, twice
    # The config (and so the run hash) of earlier runs is unchanged.
    assert "far_heads" not in CATConfig().to_dict()
    assert "far_heads" not in CATConfig(**base).to_dict()


def test_far_heads_round_trip_through_the_config():
    cfg = CATConfig(**SMALL, kernel="alibi-prior", far_heads=2)
    data = cfg.to_dict()
    assert data["far_heads"] == 2
    assert CATConfig.from_dict(data) == cfg
    assert CATConfig.from_dict(CATConfig(**SMALL, kernel="alibi-prior").to_dict()).far_heads == 0
    model = catlib.CAT(cfg)
    assert all(b.attn.kernels.far_heads == 2 for b in model.blocks)


@pytest.mark.parametrize("far_heads", [-1, 5, True, 1.0, "2", None])
def test_far_heads_out_of_range_is_refused(far_heads):
    with pytest.raises(ValueError, match="far_heads"):
        CATConfig(**SMALL, kernel="kerple-prior", far_heads=far_heads)


@pytest.mark.parametrize("far_heads", [-1, 5, True, 1.0])
def test_the_kernel_refuses_far_heads_out_of_range(far_heads):
    with pytest.raises(ValueError, match="far_heads"):
        DecayPriorKernel(4, 8, "kerple", T_TRAIN, far_heads=far_heads)


@pytest.mark.parametrize("kernel", ["absolute", "relative", "content"])
def test_far_heads_need_a_prior_kernel(kernel):
    kw = {k: v for k, v in SMALL.items() if k != "train_length"}
    with pytest.raises(ValueError, match="far_heads.*kerple-prior"):
        CATConfig(**kw, kernel=kernel, far_heads=1)
    CATConfig(**kw, kernel=kernel, far_heads=0)        # the default stays valid


@pytest.mark.parametrize("far_heads", [0, 1, 4])
def test_far_heads_from_0_to_n_heads_are_accepted(far_heads):
    CATConfig(**SMALL, kernel="alibi-prior", far_heads=far_heads)


@pytest.mark.skipif(not torch.backends.mps.is_available(), reason="needs an MPS device")
def test_query_scale_on_mps():
    # MPS holds no float64: the scale is computed on the CPU and moved.
    kern = DecayPriorKernel(4, 8, "alibi", T_TRAIN, far_heads=2)
    g = kern.query_scale(40, device="mps", dtype=torch.float32)
    assert g.device.type == "mps"
    assert torch.equal(g.cpu(), kern.query_scale(40, dtype=torch.float32))


def test_far_head_slope_changes_only_positions_beyond_the_training_length():
    # Catches an evaluation of the factor's strength that changes the trained model
    # (positions within T_train) or is not restored.
    from catlib.nn.decay_prior import far_head_slope

    torch.manual_seed(0)
    cfg = CATConfig(variant="causal", kernel="alibi-prior", train_length=16, far_heads=2,
                    d_model=32, n_heads=4, n_freq=8, blocks=2, solver="euler", solver_steps=1,
                    dropout=0.0, attention_residual=True)
    model = catlib.CAT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    x = torch.randint(0, 65, (1, 60))
    with torch.no_grad():
        base = model(x)[0]
        with far_head_slope(model, 3.0):
            steep = model(x)[0]
        again = model(x)[0]
    assert torch.equal(base, again)                                     # restored
    assert torch.equal(base[:, :16], steep[:, :16])                     # within T_train: the same
    assert not torch.allclose(base[:, 20:], steep[:, 20:])              # beyond: changed
