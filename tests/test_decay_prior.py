"""Decay-anchored kernels (catlib.nn.decay_prior), the looped baseline and the cost counter.

What each test catches:
- a residual that is not exactly 0, or not flat, from the training length on (the bias
  beyond it would not be the prior's);
- an ALiBi prior that differs from the ALiBi baseline's bias;
- a KERPLE prior outside r1 > 1, r2 > 0, or heads that all start alike;
- a read of the future (leak), or logits of a prefix that change when the sequence grows;
- an adjoint that misses the kernel parameters (they reach it through the plan only);
- a looped baseline with other parameters than ALiBi's, or that does not loop;
- FLOP counts that miss the attention or a block evaluation.
"""
import pytest
import torch

import catlib
from leak_check import assert_no_future
from catlib.measure.cost import forward_flops_per_token, parameter_count
from catlib.nn.decay_prior import DecayPriorKernel
from catlib.nn.qk_attention import alibi_bias

V = 13
T_TRAIN = 24
TINY = dict(vocab_size=V, d_model=16, n_heads=4, n_freq=6, variant="causal",
            solver="rk4-classic", solver_steps=1, dropout=0.0)
PRIORS = ["alibi-prior", "kerple-prior"]
EPS32 = torch.finfo(torch.float32).eps


def _cat(kernel, dtype=torch.float32, random_residual=True, **kw):
    torch.manual_seed(0)
    cfg = catlib.CATConfig(**{**TINY, **kw}, kernel=kernel, train_length=T_TRAIN)
    model = catlib.CAT(cfg).to(dtype).eval()
    residual = model.blocks[0].attn.kernels.residual
    if random_residual and residual is not None:   # far from its zero start
        with torch.no_grad():
            residual.coeffs.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    return model


@pytest.mark.parametrize("prior", ["alibi", "kerple"])
def test_residual_is_zero_and_flat_from_the_training_length_on(prior):
    kern = DecayPriorKernel(4, 8, prior, T_TRAIN).double().requires_grad_(False)
    kern.residual.coeffs.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(2))
    d = torch.arange(0, 5 * T_TRAIN, dtype=torch.float64)
    r = kern.residual_at(d)
    beyond = d >= T_TRAIN - 1
    # Structural zeros (masked, not computed): exact on any CPU.
    assert torch.equal(r[:, beyond], torch.zeros_like(r[:, beyond]))
    assert float(r[:, ~beyond].abs().max()) > 1e-3               # it is a real residual
    # Flat at u = 1: with r(1) = r'(1) = 0, |r(1 - delta)| <= max|r''| delta^2 / 2.
    # A slope s != 0 would give about |s| delta, far above the bound for delta = 1e-3.
    bound = kern.residual.curvature_bound()
    for delta in (1e-2, 1e-3):
        near = kern.anchored(torch.tensor([1.0 - delta], dtype=torch.float64))[:, 0]
        assert (near.abs() <= bound * delta ** 2 / 2 + 1e-12).all()
    assert torch.equal(kern.anchored(torch.ones(1, dtype=torch.float64)), torch.zeros(4, 1))


@torch.no_grad()
def test_alibi_prior_without_residual_is_the_alibi_bias():
    for residual in (False, True):      # True: at its zero initialisation
        model = _cat("alibi-prior", kernel_residual=residual, random_residual=False)
        attn = model.blocks[0].attn
        assert (attn.kernels.residual is None) == (not residual)
        for length in (T_TRAIN, 3 * T_TRAIN):
            bias = attn.plan(length).causal.ordered()[0]
            # Both are -slope * d, one float32 product per entry (-inf above the diagonal).
            torch.testing.assert_close(bias, alibi_bias(4, length), rtol=EPS32, atol=0)


def test_no_spectral_parameters_without_residual():
    names = [n for n, _ in _cat("alibi-prior", kernel_residual=False).named_parameters()]
    assert not [n for n in names if ".kernels." in n]
    kerple = [n for n, _ in _cat("kerple-prior", kernel_residual=False).named_parameters()
              if ".kernels." in n]
    assert sorted(n.rsplit(".", 1)[1] for n in kerple) == ["r1_raw", "r2_raw"]


@torch.no_grad()
def test_kerple_prior_starts_decaying_with_a_range_of_heads():
    kern = DecayPriorKernel(8, 4, "kerple", T_TRAIN)
    d = torch.arange(0, 200, dtype=torch.float32)
    prior = kern.prior(d)
    r1 = 1 + torch.nn.functional.softplus(kern.r1_raw)
    assert (r1 > 1).all() and float(r1.max() / r1.min()) > 4
    assert (torch.nn.functional.softplus(kern.r2_raw) > 0).all()
    assert torch.equal(prior[:, 0], torch.zeros(8))                # log(1 + 0) = 0
    assert (prior[:, 1:] < prior[:, :-1]).all()                    # strictly decaying


@pytest.mark.parametrize("kernel", PRIORS)
def test_no_leak(kernel):
    model = _cat(kernel)
    g = torch.Generator().manual_seed(0)
    assert_no_future(model, torch.randint(0, V, (1, 80), generator=g), (0, 10, T_TRAIN, 50), V)
    assert catlib.leak_score(model, V, length=48) == 0.0


@pytest.mark.parametrize("kernel", PRIORS)
def test_logits_of_a_prefix_do_not_depend_on_the_length(kernel):
    model = _cat(kernel)
    x = torch.randint(0, V, (1, 6 * T_TRAIN), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        short, long = model(x[:, :T_TRAIN])[0], model(x)[0][:, :T_TRAIN]
    # Other shapes, other GEMM blocking: float32 rounding, a few hundred ulps of |logits|.
    scale = float(short.abs().max())
    torch.testing.assert_close(long, short, rtol=0, atol=512 * EPS32 * max(1.0, scale))


@pytest.mark.parametrize("kernel", PRIORS)
def test_adjoint_reaches_prior_and_residual_through_plan(kernel):
    grads = []
    for adjoint in (True, False):
        model = _cat(kernel, torch.float64, solver="dopri5", rtol=1e-10, atol=1e-12,
                     adjoint=adjoint).train()
        params = [p for n, p in model.named_parameters() if ".kernels." in n]
        tokens = torch.randint(0, V, (2, 30), generator=torch.Generator().manual_seed(3))
        logits, pen = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        grads.append(torch.autograd.grad(loss + pen, params))
    for adj, direct in zip(*grads):
        assert float(direct.abs().max()) > 1e-8
        # float64, solves at rtol 1e-10: the two gradients agree far above float64 noise.
        torch.testing.assert_close(adj, direct, rtol=1e-6, atol=1e-10)


def test_prior_kernels_need_the_training_length():
    with pytest.raises(ValueError, match="train_length"):
        catlib.CATConfig(**TINY, kernel="alibi-prior")
    with pytest.raises(ValueError, match="causal"):
        catlib.CATConfig(**{**TINY, "variant": "published"}, kernel="kerple-prior",
                         train_length=T_TRAIN)
    with pytest.raises(ValueError, match="baseline_positions"):
        catlib.CATConfig(**TINY, baseline_loops=4)
    with pytest.raises(ValueError, match="baseline_loops"):
        catlib.CATConfig(**TINY, baseline_positions="alibi", baseline_loops=0)


def test_looped_baseline_has_alibis_parameters_and_loops_its_layer():
    cfg = dict(TINY, baseline_positions="alibi")
    once = catlib.Baseline(catlib.CATConfig(**cfg))
    looped = catlib.Baseline(catlib.CATConfig(**cfg, baseline_loops=4))
    assert parameter_count(looped) == parameter_count(once)
    calls = []
    looped.layers[0].register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        looped(torch.randint(0, V, (2, 10)))
    assert len(calls) == 4
    # Counted FLOPs: three more evaluations of the layer (all but the vocabulary projection).
    length, d = 32, TINY["d_model"]
    f1, f4 = (forward_flops_per_token(m, length) for m in (once, looped))
    projection = 2 * d * V
    assert f4 - f1 == pytest.approx(3 * (f1 - projection), rel=1e-12)


def test_flops_count_attention_and_every_solver_evaluation():
    base = catlib.Baseline(catlib.CATConfig(**TINY, baseline_positions="alibi"))
    short, long = (forward_flops_per_token(base, t) for t in (16, 64))
    # Attention grows with T per token (4 h T d_head per layer), the rest does not.
    assert long - short == pytest.approx(4 * (64 - 16) * TINY["d_model"], rel=1e-12)
    one, four = (forward_flops_per_token(_cat("alibi-prior", kernel_residual=False, solver_steps=s), 16)
                 for s in (1, 4))
    projection = 2 * TINY["d_model"] * V
    assert four - projection == pytest.approx(4 * (one - projection), rel=1e-12)
