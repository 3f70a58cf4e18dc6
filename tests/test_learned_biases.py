"""The learned biases of the literature inside the CAT block (catlib.nn.learned_bias,
catlib.nn.forgetting): ``kernel=`` "alibi-buckets", "kerple-log", "fire", "fox".

What each test catches:
- a bias that differs from its paper's formula at chosen distances or positions (each
  against a hand computation in float64: buckets, KERPLE-log, FIRE with the query's
  normaliser, FoX's sums of log forget gates);
- buckets placed other than by the stated rule, or a bucket residual that is not exactly 0
  from T_train - 1 on (the bias there would not be ALiBi's);
- an initialisation other than the stated one (buckets 0; KERPLE's U(0, 2), U(0, 1); FIRE's
  c = 0.1, L = T_train / 4 below the training length; FoX's N(0, 0.02^2) gate, bias 0);
- a parameter count other than the stated one;
- logits of a prefix that change when the input grows, a read of the future, an adjoint
  that misses a bias's parameters;
- a bad option accepted, or an existing config whose dict (and so its hash) or state_dict
  keys changed with the new options; one bias under two hashes for options it ignores.
"""
import hashlib
import json
import math

import pytest
import torch

import catlib
from leak_check import assert_no_future
from catlib.nn.kernel_choice import KERNELS, LEARNED_BIASES
from catlib.nn.decay_prior import DecayPriorKernel
from catlib.nn.forgetting import ForgetGateAttention
from catlib.nn.learned_bias import (FIRE_L_SHARE, FireKernel, KerpleLogKernel, bucket_starts)
from catlib.nn.qk_attention import alibi_bias, alibi_slopes

V = 13
T_TRAIN = 24
H, N = 4, 6
TINY = dict(vocab_size=V, d_model=16, n_heads=H, n_freq=N, variant="causal", solver="euler",
            solver_steps=1, dropout=0.0)
EPS32, EPS64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps


def _cat(kernel, dtype=torch.float32, randomise=True, scale=1.0, **kw):
    """A tiny CAT with ``kernel``; ``randomise``: its bias's parameters moved far from
    their start (buckets N(0, scale^2), FoX's gate with weights of 0.3 scale), so that a
    test sees them."""
    torch.manual_seed(0)
    cfg = catlib.CATConfig(**{**TINY, **kw}, kernel=kernel, train_length=T_TRAIN)
    model = catlib.CAT(cfg).to(dtype).eval()
    attn = model.blocks[0].attn
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if randomise and kernel == "alibi-buckets":
            attn.kernels.residual.values.copy_(scale * torch.randn(H, N, generator=g))
        if randomise and kernel == "fox":
            attn.fgate.weight.copy_(0.3 * scale * torch.randn(attn.fgate.weight.shape, generator=g))
            attn.fgate.bias.copy_(scale * torch.randn(H, generator=g))
    return model


# ------------------------------------------------------------------ buckets

def _graded_starts_by_hand(n, c, t_train):
    """The rule of bucket_starts, written out: u^{-1}(k / n) = c ((1 + (T - 1) / c)^(k/n) - 1),
    a_k = max(a_{k-1} + w_{k-1}, floor(u^{-1}(k / n))), w the previous width (w_{-1} = 1)."""
    starts, width = [0], 1
    for k in range(1, n):
        target = c * ((1 + (t_train - 1) / c) ** (k / n) - 1)
        starts.append(max(starts[-1] + width, math.floor(target)))
        width = starts[-1] - starts[-2]
    return tuple(starts)


def test_buckets_are_exact_near_and_log_spaced_far():
    # The book's sizes: c = 4, T_train = 128, n_freq = 16.
    assert bucket_starts(16, 4.0, 128) == (0, 1, 2, 3, 5, 7, 10, 14, 18, 24, 31, 40, 50, 64,
                                           80, 101)
    for n, t in ((6, 24), (8, 24), (32, 128), (16, 512)):
        assert bucket_starts(n, 4.0, t) == _graded_starts_by_hand(n, 4.0, t), (n, t)


def test_bucket_bias_at_chosen_distances_is_alibi_plus_the_bucket_value():
    kern = DecayPriorKernel(H, N, "alibi", T_TRAIN, residual_kind="buckets").double()
    values = torch.randn(H, N, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        kern.residual.values.copy_(values)
    starts = bucket_starts(N, 4.0, T_TRAIN)                       # (0, 1, 3, 6, 10, 15)
    chosen = [0, 1, 2, 3, 5, 6, 9, 10, 14, 15, 21, 22, 23, 24, 40, 500]
    got = kern.at_distances(600, "cpu", torch.float64).detach()
    slopes = alibi_slopes(H)
    for d in chosen:
        k = max(i for i, a in enumerate(starts) if a <= d)
        for h in range(H):
            want = -slopes[h] * d + (float(values[h, k]) if d < T_TRAIN - 1 else 0.0)
            # One product and one sum in float64.
            assert abs(float(got[h, d]) - want) <= 4 * EPS64 * max(1.0, abs(want)), (d, h)


def test_bucket_residual_is_exactly_zero_from_the_training_length_on():
    model = _cat("alibi-buckets")
    kern = model.blocks[0].attn.kernels
    d = torch.arange(0, 5 * T_TRAIN, dtype=torch.float32)
    r = kern.residual_at(d).detach()
    beyond = d >= T_TRAIN - 1
    assert torch.equal(r[:, beyond], torch.zeros_like(r[:, beyond]))
    assert float(r[:, ~beyond].abs().min()) > 0                      # a value in every bucket
    with torch.no_grad():                                            # the plan: ALiBi's bias there
        length = 3 * T_TRAIN
        bias = model.blocks[0].attn.plan(length).causal.ordered()[0]
        i = torch.arange(length)
        far = (i[:, None] - i[None, :]) >= T_TRAIN - 1
        assert torch.equal(bias[:, far], alibi_bias(H, length)[:, far])
        assert not torch.equal(bias[:, ~far], alibi_bias(H, length)[:, ~far])


def test_buckets_start_at_zero_with_as_many_numbers_as_the_residual():
    model = _cat("alibi-buckets", randomise=False)
    params = {n: p for n, p in model.named_parameters() if ".kernels." in n}
    assert list(params) == ["blocks.0.attn.kernels.residual.values"]
    values = params["blocks.0.attn.kernels.residual.values"]
    assert values.shape == (H, N) and torch.equal(values, torch.zeros(H, N))
    spectral = _cat("alibi-prior", randomise=False).blocks[0].attn.kernels.residual.coeffs
    assert values.numel() == spectral.numel() == H * N
    assert float(model.sobolev_penalty()) == 0.0


# ------------------------------------------------------------------ KERPLE-log

def test_kerple_log_bias_at_chosen_distances():
    kern = KerpleLogKernel(3).double()
    with torch.no_grad():
        kern.r1.copy_(torch.tensor([0.7, 1.9, -0.5], dtype=torch.float64))   # the last: 0.01
        kern.r2.copy_(torch.tensor([0.3, 0.005, 2.0], dtype=torch.float64))  # the middle: 0.01
    got = kern.at_distances(5001, "cpu", torch.float64).detach()
    r1, r2 = (0.7, 1.9, 0.01), (0.3, 0.01, 2.0)
    for d in (0, 1, 2, 7, 127, 128, 1000, 5000):
        for h in range(3):
            want = -r1[h] * math.log1p(r2[h] * d)
            assert abs(float(got[h, d]) - want) <= 4 * EPS64 * max(1.0, abs(want)), (d, h)


def test_kerple_log_starts_as_kerple_draws_it_and_keeps_a_gradient_below_its_floor():
    torch.manual_seed(3)
    kern = KerpleLogKernel(4000)
    r1, r2 = kern.r1.detach(), kern.r2.detach()
    floor = torch.tensor(0.01)                                     # 0.01 in float32
    assert r1.min() >= floor and float(r1.max()) <= 2.0
    assert r2.min() >= floor and float(r2.max()) <= 1.0
    # U(0, 2) and U(0, 1): means 1 and 1/2, standard errors 0.009 and 0.005 at 4000 heads.
    assert abs(float(r1.mean()) - 1.0) < 0.05 and abs(float(r2.mean()) - 0.5) < 0.025
    small = KerpleLogKernel(2)
    with torch.no_grad():
        small.r1.fill_(-1.0)                                           # below the floor 0.01
    bias = small(torch.tensor([5.0]))
    r2v = max(float(small.r2[0].detach()), 0.01)
    assert float(bias[0, 0].detach()) == pytest.approx(-0.01 * math.log1p(5 * r2v), rel=1e-6)
    bias.sum().backward()
    assert (small.r1.grad != 0).all()            # the projection does not freeze it
    model = _cat("kerple-log")
    names = {n: p.numel() for n, p in model.named_parameters() if ".kernels." in n}
    assert names == {"blocks.0.attn.kernels.r1": H, "blocks.0.attn.kernels.r2": H}


# ------------------------------------------------------------------ FIRE

def _fire_by_hand(kern, i, j):
    """f_theta(psi(i - j) / (psi(max(L, i)) + 1e-6)), psi(x) = log(|c| x + 1), in Python floats."""
    c = abs(float(kern.c.detach()))
    L = abs(float(kern.L_multiplier.detach())) * kern.init_L
    t = math.log(c * (i - j) + 1) / (math.log(c * max(L, i) + 1) + 1e-6)
    w1, b1 = kern.mlp[0].weight[:, 0].tolist(), kern.mlp[0].bias.tolist()
    w2, b2 = kern.mlp[2].weight.tolist(), kern.mlp[2].bias.tolist()
    hidden = [max(0.0, w * t + b) for w, b in zip(w1, b1)]
    return [sum(a * x for a, x in zip(row, hidden)) + b for row, b in zip(w2, b2)]


def test_fire_bias_at_chosen_positions_uses_the_querys_normaliser():
    torch.manual_seed(4)
    kern = FireKernel(3, T_TRAIN).double()
    with torch.no_grad():
        kern.c.fill_(-0.3)                        # |c| is read
        kern.L_multiplier.fill_(1.5)              # L = 1.5 * 6 = 9
    length = 40
    bias = kern.bias(length, "cpu", torch.float64).detach()      # with grad: the MLP itself
    with torch.no_grad():
        pieces = kern.bias(length, "cpu", torch.float64)          # without: its linear pieces
    for i, j in ((0, 0), (5, 0), (5, 5), (8, 3), (9, 1), (10, 0), (10, 9), (23, 0), (39, 17)):
        want = _fire_by_hand(kern, i, j)
        for h in range(3):
            for got in (bias, pieces):
                assert abs(float(got[h, i, j]) - want[h]) <= 64 * EPS64 * max(1.0, abs(want[h])), (i, j)
    assert torch.isinf(bias[:, 3, 4]).all() and (bias[:, 3, 4] < 0).all()   # j > i: -inf
    # Rows i <= L read one vector of i - j (Toeplitz); a row beyond, psi(i) instead of psi(L).
    assert torch.allclose(bias[:, 7, 2], bias[:, 9, 4], rtol=0, atol=1e-12)      # d = 5, i <= L
    assert not torch.allclose(bias[:, 20, 15], bias[:, 9, 4], rtol=0, atol=1e-6)  # d = 5, i > L
    # The same row at any length T (the normaliser is the query's, not T's).
    longer = kern.bias(3 * length, "cpu", torch.float64).detach()
    torch.testing.assert_close(longer[:, :length, :length], bias, rtol=0, atol=64 * EPS64)


def test_fire_pieces_are_its_mlp_at_every_point_and_at_the_knots():
    torch.manual_seed(9)
    kern = FireKernel(5, T_TRAIN).double()
    knots = kern.pieces(torch.float64)[0]
    t = torch.cat([torch.linspace(-0.5, 1.5, 4001, dtype=torch.float64), knots[knots.isfinite()]])
    with torch.no_grad():
        torch.testing.assert_close(kern.piecewise(t), kern(t), rtol=0, atol=64 * EPS64)


def test_fire_starts_as_its_paper_with_L_below_the_training_length():
    model = _cat("fire")
    kern = model.blocks[0].attn.kernels
    assert float(kern.c.detach()) == pytest.approx(0.1) and float(kern.L_multiplier.detach()) == 1.0
    L = float(kern.threshold().detach())
    assert L == FIRE_L_SHARE * T_TRAIN == 6.0 and L < T_TRAIN - 1    # rows i > L in training
    assert [type(m).__name__ for m in kern.mlp] == ["Linear", "ReLU", "Linear"]
    assert (kern.mlp[0].in_features, kern.mlp[0].out_features, kern.mlp[2].out_features) == (1, 32, H)
    counts = {n.rsplit("kernels.", 1)[1]: p.numel() for n, p in model.named_parameters()
              if ".kernels." in n}
    assert counts == {"mlp.0.weight": 32, "mlp.0.bias": 32, "mlp.2.weight": 32 * H,
                      "mlp.2.bias": H, "c": 1, "L_multiplier": 1}
    assert sum(counts.values()) == 66 + 33 * H


# ------------------------------------------------------------------ FoX

def test_fox_bias_is_the_sum_of_log_forget_gates():
    torch.manual_seed(5)
    attn = ForgetGateAttention(8, 2).double()
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        attn.fgate.weight.copy_(torch.randn(2, 8, generator=g, dtype=torch.float64))
        attn.fgate.bias.copy_(torch.tensor([1.0, -0.5], dtype=torch.float64))
    x = torch.randn(2, 12, 8, generator=g, dtype=torch.float64)
    bias = attn.bias(x).masked.detach()                                       # [B, h, T, T]
    w, b = attn.fgate.weight.tolist(), attn.fgate.bias.tolist()

    def log_f(batch, h, t):
        z = sum(wk * float(xk) for wk, xk in zip(w[h], x[batch, t])) + b[h]
        return -math.log1p(math.exp(-z))                                      # log sigmoid(z)

    for batch in range(2):
        for h in range(2):
            for i, j in ((0, 0), (4, 4), (4, 3), (7, 0), (11, 2), (11, 10)):
                want = sum(log_f(batch, h, t) for t in range(j + 1, i + 1))
                # c_i - c_j of cumulative sums of 12 float64 terms.
                assert abs(float(bias[batch, h, i, j]) - want) <= 64 * EPS64 * (1 + abs(want))
            assert float(bias[batch, h, 5, 5]) == 0.0                           # exactly, c_i - c_i
            assert torch.isinf(bias[batch, h, 2, 3]) and float(bias[batch, h, 2, 3]) < 0


def test_fox_gate_starts_as_foxs_and_is_the_only_position_information():
    torch.manual_seed(7)
    attn = ForgetGateAttention(256, 8)
    w = attn.fgate.weight.detach()
    assert torch.equal(attn.fgate.bias.detach(), torch.zeros(8))
    assert abs(float(w.std()) - 0.02) < 0.002 and abs(float(w.mean())) < 0.002   # 2048 draws
    zero = torch.zeros(1, 3, 256)
    torch.testing.assert_close(attn.log_forget(zero), torch.full((1, 8, 3), math.log(0.5)))
    model = _cat("fox", randomise=False)
    a = model.blocks[0].attn
    assert not a.qk.rotary and not hasattr(a, "kernels")
    own = {n: p.numel() for n, p in a.named_parameters() if not n.startswith("qk.")}
    d = TINY["d_model"]
    assert own == {"fgate.weight": d * H, "fgate.bias": H}


# ------------------------------------------------------------------ every bias in a model

@pytest.mark.parametrize("kernel", LEARNED_BIASES)
def test_logits_of_a_prefix_do_not_depend_on_the_length(kernel):
    model = _cat(kernel)
    x = torch.randint(0, V, (1, 6 * T_TRAIN), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(x)[0]
        for prefix in (T_TRAIN, 2 * T_TRAIN):            # within and beyond T_train
            short = model(x[:, :prefix])[0]
            # Other shapes, other GEMM blocking: float32 rounding, a few hundred ulps.
            scale = float(short.abs().max())
            torch.testing.assert_close(full[:, :prefix], short, rtol=0,
                                       atol=512 * EPS32 * max(1.0, scale))


@pytest.mark.parametrize("kernel", LEARNED_BIASES)
def test_no_leak(kernel):
    model = _cat(kernel)
    base = torch.randint(0, V, (1, 60), generator=torch.Generator().manual_seed(0))
    assert_no_future(model, base, (0, 10, T_TRAIN, 50), V)


@pytest.mark.parametrize("kernel", LEARNED_BIASES)
def test_adjoint_reaches_every_bias_parameter(kernel):
    grads = []
    for adjoint in (True, False):
        # Parameters moved a little (scale 0.3): dynamics that dopri5 solves in few steps.
        model = _cat(kernel, torch.float64, scale=0.3, solver="dopri5", rtol=1e-8, atol=1e-10,
                     adjoint=adjoint).train()
        # FIRE's output bias shifts a whole row of scores by a constant: softmax ignores
        # it, its gradient is 0 in exact arithmetic (kept, as in its paper's MLP).
        params = [p for n, p in model.named_parameters()
                  if (".kernels." in n or ".fgate." in n) and not n.endswith("mlp.2.bias")]
        tokens = torch.randint(0, V, (1, 16), generator=torch.Generator().manual_seed(3))
        logits, pen = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        grads.append(torch.autograd.grad(loss + pen, params))
    assert grads[0]
    for adj, direct in zip(*grads):
        assert float(direct.abs().max()) > 1e-8
        # Solves at rtol 1e-8 (measured: the two agree to 4e-6 relative, 5e-11 absolute);
        # a parameter the adjoint missed would get a gradient of 0.
        torch.testing.assert_close(adj, direct, rtol=1e-4, atol=1e-9)


def test_a_training_step_moves_every_bias_parameter():
    for kernel in LEARNED_BIASES:
        model = _cat(kernel, randomise=False).train()
        tokens = torch.randint(0, V, (2, 33), generator=torch.Generator().manual_seed(8))
        logits, pen = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
        (loss + pen).backward()
        for name, p in model.named_parameters():
            if (".kernels." in name or ".fgate." in name) and not name.endswith("mlp.2.bias"):
                assert p.grad is not None and float(p.grad.abs().max()) > 0, (kernel, name)


# ------------------------------------------------------------------ the options

def test_bad_options_are_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match=r"kernel must be one of .*'alibi-buckets'.*'fire', 'fox'"):
        catlib.CATConfig(**TINY, kernel="t5-buckets")
    with pytest.raises(ValueError, match="train_length"):
        catlib.CATConfig(**TINY, kernel="fire")
    with pytest.raises(ValueError, match="train_length"):
        catlib.CATConfig(**TINY, kernel="alibi-buckets")
    with pytest.raises(ValueError, match="alibi-prior"):
        catlib.CATConfig(**TINY, kernel="alibi-buckets", train_length=T_TRAIN,
                         kernel_residual=False)
    with pytest.raises(ValueError, match="causal"):
        catlib.CATConfig(**{**TINY, "variant": "published"}, kernel="fox")
    with pytest.raises(ValueError, match="far_heads"):
        catlib.CATConfig(**TINY, kernel="fire", train_length=T_TRAIN, far_heads=1)
    with pytest.raises(ValueError, match="residual_kind must be one of"):
        DecayPriorKernel(H, N, "alibi", T_TRAIN, residual_kind="t5")
    assert set(LEARNED_BIASES) <= set(KERNELS)
    for kernel in ("kerple-log", "fox"):                  # no training length needed
        catlib.CATConfig(**TINY, kernel=kernel)
    cfg = catlib.CATConfig(**TINY, kernel="fire", train_length=T_TRAIN)
    assert catlib.CATConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize("kernel", ["fox", "kerple-log", "fire"])
def test_a_learned_bias_has_one_identity_whatever_the_options_it_ignores(kernel):
    # Issue 60, item 6. Fails on 364f0a7: FoX with n_freq=5, kernel_scale=2,
    # kernel_horizon=64 and kernel_residual=False built the default FoX's weights under
    # another config hash, so in another run directory.
    from catlib.runs.identity import config_hash
    from catlib.training.loop import TrainConfig

    ignored = dict(n_freq=5, kernel_scale=2.0, kernel_horizon=64.0, kernel_residual=False)
    if kernel != "fire":                                  # FIRE's threshold reads it
        ignored["train_length"] = 40
    plain = catlib.CATConfig(**TINY, kernel=kernel,
                             train_length=T_TRAIN if kernel == "fire" else None)
    other = catlib.CATConfig(**{**TINY, "kernel": kernel,
                                "train_length": T_TRAIN if kernel == "fire" else None, **ignored})
    hashes = [config_hash(c, TrainConfig(), "sha", code="code") for c in (plain, other)]
    assert hashes[0] == hashes[1]
    assert other.resolved() == plain.resolved()
    torch.manual_seed(0)
    a = catlib.CAT(plain).state_dict()
    torch.manual_seed(0)
    b = catlib.CAT(other).state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)   # one model


# The dicts of existing configs, whose hash names a run (with the code fingerprint): the
# SHA-256 of their JSON as the code before the learned biases wrote them (0699d42).
EXISTING = {
    "default": (dict(), "febd57197ec3152d"),
    "causal": (dict(variant="causal"), "532c4ed894cc3dcd"),
    "euler CAT": (dict(variant="causal", kernel="alibi-prior", train_length=128, solver="euler",
                       solver_steps=1), "8fc30bdef39d21dd"),
    "kerple prior": (dict(variant="causal", kernel="kerple-prior", train_length=128,
                          kernel_residual=False), "a8fefa58edd0ccf9"),
}


@pytest.mark.parametrize("name", list(EXISTING))
def test_existing_configs_write_the_dict_they_wrote_before(name):
    fields, digest = EXISTING[name]
    data = catlib.CATConfig(**fields).resolved().to_dict()
    got = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert got == digest, data


def test_existing_kernels_keep_their_state_dict_keys():
    # The keys the code before the learned biases gave these models (0699d42), in order.
    qk = [f"blocks.0.attn.qk.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")]
    rest = ["blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.ff.0.weight", "blocks.0.ff.0.bias",
            "blocks.0.ff.2.weight", "blocks.0.ff.2.bias", "proj.weight", "proj.bias"]
    spectral = ["blocks.0.attn.kernels.residual.coeffs", "blocks.0.attn.kernels.residual.log_scale"]
    kerple = ["blocks.0.attn.kernels.r1_raw", "blocks.0.attn.kernels.r2_raw"]
    for kernel, residual, keys in (("alibi-prior", True, spectral), ("alibi-prior", False, []),
                                   ("kerple-prior", True, kerple + spectral),
                                   ("kerple-prior", False, kerple)):
        model = _cat(kernel, randomise=False, kernel_residual=residual)
        assert list(model.state_dict()) == ["embed.weight", *qk, *keys, *rest], (kernel, residual)
