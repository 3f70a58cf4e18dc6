"""catlib's published mode against the loop-by-loop reference of ALGORITHM.md.

Most checks run in eval mode (dropout off). In train mode, under classical RK4, both
draw the same dropout masks from the same seed, so train-mode parity is tested too.
Run with ``-s`` to see the measured differences.
"""

import math

import pytest
import torch

import catlib
import reference_published as ref

V = 65
SMALL = dict(d_model=32, n_heads=4, n_freq=8)
SOLVERS = ["dopri5", "rk4-classic"]
BASES = ["fourier", "cheb"]
EPS32 = torch.finfo(torch.float32).eps


def _logit_bound(ref_logits, nfe):
    """Two float32 implementations of one algorithm (hoisted kernels against loops) round
    differently at each function evaluation; under dopri5 at rtol 1e-7, below float32
    resolution, the steps follow that rounding too. Bound: an ulp of the largest logit per
    evaluation (measured: at most a fifth of it)."""
    return nfe * EPS32 * float(ref_logits.abs().max())


def _penalty_rtol(model):
    """Both penalties are float32 sums of the same positive terms, per head in Python or
    stacked in one reduction: each within log2(terms) ulps (pairwise/cascade sums)."""
    c = model.config
    return math.log2(c.blocks * c.n_heads * c.n_freq ** 2) * EPS32


def _build(basis, solver, seed=0, blocks=2, **sizes):
    sizes = {**SMALL, **sizes}
    torch.manual_seed(seed)
    reference = ref.CAT(V, sizes["d_model"], sizes["n_heads"], sizes["n_freq"], blocks=blocks,
                        basis=basis, solver=solver).eval()
    model = catlib.load_published(reference.state_dict(), basis=basis, solver=solver).eval()
    return reference, model


def _tokens(batch, length, seed=1):
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def _report(name, value):
    print(f"\n[parity] {name}: {value:.3e}")


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("basis", BASES)
def test_logits_and_penalty(basis, solver):
    reference, model = _build(basis, solver)
    assert model.config.variant == "published" and model.config.basis == basis
    assert model.config.solver == solver and model.config.blocks == 2
    tokens = _tokens(3, 16)
    with torch.no_grad():
        ref_logits, ref_pen = reference(tokens)
        logits, pen = model(tokens)
    diff = float((logits - ref_logits).abs().max())
    _report(f"{basis}/{solver} logits max|diff| (B=3, T=16, 2 blocks)", diff)
    assert logits.shape == ref_logits.shape == (3, 16, V)
    nfe = max(model.nfe["forward"], sum(b.nfe for b in reference.blocks))
    assert diff < _logit_bound(ref_logits, nfe)
    torch.testing.assert_close(pen, ref_pen, rtol=_penalty_rtol(model), atol=0)
    _report(f"{basis}/{solver} penalty rel diff", float(((pen - ref_pen) / ref_pen).abs()))
    if solver == "rk4-classic":
        assert model.nfe["forward"] == sum(b.nfe for b in reference.blocks) == 2 * 16
    else:
        print(f"[parity] {basis}/dopri5 NFE catlib {model.nfe['forward']}, "
              f"reference {sum(b.nfe for b in reference.blocks)}")


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("basis", BASES)
def test_logits_float64(basis, solver):
    # In float64 the two implementations agree to rounding: the same algorithm, not
    # merely a close one (dopri5 takes the same steps in both).
    reference, model = _build(basis, solver)
    reference, model = reference.double(), model.double()
    tokens = _tokens(3, 16)
    with torch.no_grad():
        ref_logits, ref_pen = reference(tokens)
        logits, pen = model(tokens)
    diff = float((logits - ref_logits).abs().max())
    _report(f"{basis}/{solver} float64 logits max|diff|", diff)
    # float64: an ulp of the logits per evaluation (76) is 4e-14; 1e-12 is 25 times that.
    assert logits.dtype == torch.float64 and diff < 1e-12
    torch.testing.assert_close(pen, ref_pen, rtol=1e-14, atol=0)    # 9 ulps of 512 terms: 2e-15
    assert model.nfe["forward"] == sum(b.nfe for b in reference.blocks)


@pytest.mark.parametrize("basis", BASES)
def test_penalty_off(basis):
    reference, model = _build(basis, "rk4-classic", blocks=1)
    with torch.no_grad():
        logits, pen = model(_tokens(1, 5), penalty=False)
        ref_logits, _ = reference(_tokens(1, 5), penalty=False)
    assert float(pen) == 0.0
    assert float((logits - ref_logits).abs().max()) < _logit_bound(ref_logits, model.nfe["forward"])


@pytest.mark.parametrize("basis,solver", [("fourier", "dopri5"), ("cheb", "rk4-classic"),
                                          ("cheb", "dopri5"), ("fourier", "rk4-classic")])
def test_published_length_128(basis, solver):
    # T = 128 with Q = 64: every node falls into its own token interval, the regime of the
    # published training windows.
    reference, model = _build(basis, solver, seed=2, blocks=1, d_model=64, n_heads=8, n_freq=16)
    tokens = _tokens(2, 128, seed=3)
    with torch.no_grad():
        ref_logits, ref_pen = reference(tokens)
        logits, pen = model(tokens)
    diff = float((logits - ref_logits).abs().max())
    _report(f"{basis}/{solver} logits max|diff| (D=64, h=8, n=16, T=128)", diff)
    assert diff < _logit_bound(ref_logits, max(model.nfe["forward"], reference.blocks[0].nfe))
    torch.testing.assert_close(pen, ref_pen, rtol=_penalty_rtol(model), atol=0)


def test_published_default_size():
    # The published defaults (D=128, h=8, n=32, Q=64), one window of 128, MPS path.
    torch.manual_seed(4)
    reference = ref.CAT(V, 128, 8, 32, blocks=1, basis="fourier", solver="rk4-classic").eval()
    model = catlib.load_published(reference.state_dict(), basis="fourier",
                                  solver="rk4-classic").eval()
    cfg = model.config
    assert (cfg.d_model, cfg.n_heads, cfg.n_freq, cfg.quad_nodes, cfg.vocab_size) == (128, 8, 32, 64, V)
    tokens = _tokens(1, 128, seed=5)
    with torch.no_grad():
        ref_logits, ref_pen = reference(tokens)
        logits, pen = model(tokens)
    diff = float((logits - ref_logits).abs().max())
    _report("fourier/rk4-classic logits max|diff| (published default size, T=128)", diff)
    assert diff < _logit_bound(ref_logits, model.nfe["forward"])
    torch.testing.assert_close(pen, ref_pen, rtol=_penalty_rtol(model), atol=0)


def _loss_grads(model, tokens, targets):
    logits, pen = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)) + pen
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("basis", BASES)
def test_gradients(basis, solver):
    # Eval mode (no dropout), float64. catlib's adjoint differentiates through hoisted
    # kernel weights, the reference through the coefficients directly: the gradients still
    # agree to rounding (measured: 5e-16 relative for RK4, 7e-14 for dopri5). A tolerance of
    # 1e-10 catches any real difference in the backward pass (a missing term, a wrong
    # adjoint parameter set, a stale plan), which 1e-3 in float32 would let through.
    reference, model = _build(basis, solver, blocks=1)
    reference, model = reference.double(), model.double()
    tokens, targets = _tokens(2, 12), _tokens(2, 12, seed=7)
    g_ref, g = _loss_grads(reference, tokens, targets), _loss_grads(model, tokens, targets)
    assert set(g) == set(g_ref)
    worst = 0.0
    for name in g_ref:
        scale = float(g_ref[name].abs().max())
        assert scale > 0, name   # every parameter really receives a gradient
        worst = max(worst, float((g[name] - g_ref[name]).abs().max()) / scale)
        torch.testing.assert_close(g[name], g_ref[name], rtol=1e-10, atol=1e-10 * scale, msg=name)
    _report(f"{basis}/{solver} float64 gradients max relative diff", worst)


def test_baseline():
    torch.manual_seed(0)
    reference = ref.Baseline(V, 32, 4, blocks=2).eval()
    model = catlib.load_published_baseline(reference.state_dict(), n_heads=4).eval()
    assert model.config.blocks == 2 and model.config.n_heads == 4
    tokens = _tokens(3, 20)
    with torch.no_grad():
        ref_logits = reference(tokens)
        logits, pen = model(tokens)
    diff = float((logits - ref_logits).abs().max())
    _report("baseline logits max|diff|", diff)
    # The same torch modules (measured: 0); a few ulps allowed for the rest of the path.
    assert diff < 8 * EPS32 * float(ref_logits.abs().max()) and float(pen) == 0.0


def test_baseline_train_mode_drops_logits():
    # The published baseline applies dropout to its logits: in train mode some are exactly 0.
    torch.manual_seed(0)
    model = catlib.load_published_baseline(ref.Baseline(V, 32, 4, blocks=1).state_dict(),
                                           n_heads=4).train()
    logits, _ = model(_tokens(4, 32))
    frac = float((logits == 0).float().mean())
    assert 0.05 < frac < 0.15


def test_state_dict_round_trip():
    reference, model = _build("cheb", "rk4-classic")
    assert set(model.state_dict()) >= set(reference.state_dict())
    for name, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name


@pytest.mark.parametrize("basis", BASES)
def test_train_mode_parity(basis):
    # Train mode, dropout inside the dynamics (published), classical RK4: both models draw
    # one dropout mask of shape [B, T, D] per function evaluation, in the same order, so
    # from the same seed they draw the same masks. Logits and gradients then agree to
    # rounding in float64. Catches dropout applied at another place or another number of
    # times than the published code (e.g. once per block instead of once per evaluation).
    reference, model = _build(basis, "rk4-classic")
    reference, model = reference.double().train(), model.double().train()
    tokens, targets = _tokens(3, 16), _tokens(3, 16, seed=7)
    outputs = {}
    for name, m in (("reference", reference), ("catlib", model)):
        torch.manual_seed(11)
        logits, _ = m(tokens)
        torch.manual_seed(11)
        outputs[name] = (logits.detach(), _loss_grads(m, tokens, targets))
    (ref_logits, g_ref), (logits, g) = outputs["reference"], outputs["catlib"]
    diff = float((logits - ref_logits).abs().max())
    _report(f"{basis}/rk4-classic train-mode float64 logits max|diff|", diff)
    assert diff < 1e-12                                   # float64, as test_logits_float64
    for name in g_ref:
        scale = float(g_ref[name].abs().max())
        torch.testing.assert_close(g[name], g_ref[name], rtol=1e-10, atol=1e-10 * scale, msg=name)
    # Dropout is really on: another seed gives other logits.
    torch.manual_seed(12)
    assert float((model(tokens)[0].detach() - logits).abs().max()) > 1e-6
