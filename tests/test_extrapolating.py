"""Length-invariant continuous kernels (catlib.nn.relative, catlib.nn.content): the relative and
content-aware CAT attentions.

What each group catches:
- leak: any read of a token after the query (exactly 0 required), on the dense
  path, the graded prefix-sum path and the progressive normalisation beyond D;
- length invariance: a kernel that still depends on T (the published defect);
- cost: a plan that grows like T^2 at long lengths;
- penalty: wrong Gram matrix, a penalty that does not vanish on constants;
- gradients: a plan whose grad_tensors() misses the kernel (adjoint), wrong
  autograd through the graded mix (finite differences in float64);
- content-aware: a bias that is not zero when the coefficients are, or that
  enters anywhere but the scores;
- training and configuration.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import catlib
from catlib.nn.attention import ContinuousAttention
from catlib.nn.bases import basis
from catlib.nn.content import ContentAttention
from catlib.nn.distance_map import graded_bins
from catlib.nn.relative import RelativeAttention
from catlib.nn.kernel import SpectralKernel1D
from catlib.nn.model import make_attention
from catlib.nn.quadrature import gauss_legendre

V = 13
TINY = dict(vocab_size=V, d_model=16, n_heads=2, n_freq=6, quad_nodes=16, variant="causal",
            solver="rk4-classic")
KERNELS = ["relative", "content"]


def _cat(kernel, dtype=torch.float32, seed=0, random_kernel=True, **kw):
    torch.manual_seed(seed)
    model = catlib.CAT(catlib.CATConfig(**{**TINY, **kw}, kernel=kernel)).to(dtype).eval()
    if random_kernel:   # kernels far from flat, so that positions matter
        with torch.no_grad():
            for block in model.blocks:
                block.attn.kernels.coeffs.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    return model


def _leak(model, length, positions, seed=0):
    """Largest change of the logits at positions <= p when the tokens after p change."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, V, (1, length), generator=g)
    worst = 0.0
    with torch.no_grad():
        ref, _ = model(base)
        for p in positions:
            other = base.clone()
            other[0, p + 1:] = (other[0, p + 1:] + torch.randint(1, V, (length - p - 1,),
                                                                 generator=g)) % V
            logits, _ = model(other)
            worst = max(worst, float((logits[0, :p + 1] - ref[0, :p + 1]).abs().max()))
    return worst


# ---------------------------------------------------------------------- leak

@pytest.mark.parametrize("kernel", KERNELS)
def test_no_leak_short(kernel):
    assert _leak(_cat(kernel), 64, range(63)) == 0.0


@pytest.mark.parametrize("dense", [True, False])
def test_relative_no_leak_graded_far_nodes(dense):
    # Q = 64 bins up to D = 256: at T = 600 every bin is in use, the open one included.
    model = _cat("relative", quad_nodes=64, kernel_horizon=256.0)
    if not dense:
        model.blocks[0].attn.dense_max = 0          # the prefix-sum path of long sequences
    positions = [0, 1, 20, 21, 150, 255, 256, 400, 598]
    assert _leak(model, 600, positions) == 0.0


def test_content_no_leak_beyond_horizon():
    # Rows i > D are normalised by psi(i): the progressive part of the map.
    model = _cat("content", kernel_horizon=64.0)
    assert _leak(model, 300, [0, 5, 63, 64, 65, 200, 298]) == 0.0


def test_relative_dense_and_graded_paths_agree():
    torch.manual_seed(0)
    attn = RelativeAttention(16, 2, 6, quad_nodes=64, kernel_horizon=256.0).double()
    with torch.no_grad():
        attn.kernels.coeffs.normal_()
    x = torch.randn(2, 600, 16, dtype=torch.float64)
    with torch.no_grad():
        dense = attn(x, attn.plan(600))
        attn.dense_max = 0
        plan = attn.plan(600)
        assert plan.mixing is None
        assert float((attn(x, plan) - dense).abs().max()) < 1e-12
        for i in (0, 7, 299, 599):
            w = plan.token_weights(i)
            assert w.shape == (2, i + 1)
            assert torch.allclose(w.sum(-1), torch.ones(2, dtype=torch.float64), atol=1e-12)


# ---------------------------------------------------------------------- length invariance

def test_relative_weights_do_not_depend_on_length():
    torch.manual_seed(0)
    attn = RelativeAttention(16, 2, 6, quad_nodes=64).double()
    with torch.no_grad():
        attn.kernels.coeffs.normal_()
    short, long = attn.plan(128), attn.plan(5000)
    assert short.mixing is not None and long.mixing is None     # both paths
    for i in (0, 3, 50, 127):
        assert torch.allclose(short.token_weights(i), long.token_weights(i), atol=1e-14, rtol=0)
    # The kernel means the same at every query: on the last n_exact tokens (one bin
    # each) the weights of a query at 100 and at 4000 differ by the normaliser Z_i only.
    n = attn.n_exact
    assert n == 21
    near = [long.token_weights(i)[:, -n:] for i in (100, 4000)]
    ratios = [w / w[:, -1:] for w in near]
    assert torch.allclose(ratios[0], ratios[1], rtol=1e-12)
    assert not torch.allclose(near[0], near[1], rtol=1e-3)     # Z_i does differ


def test_absolute_kernel_is_stretched_with_length():
    # The defect the relative kernel removes: the causal absolute kernel's weights
    # on the last tokens before query 100 change with T.
    torch.manual_seed(0)
    attn = ContinuousAttention(16, 2, 6, "fourier", 16, causal=True, normalised_integral=True,
                               half_range_cosine=True, penalty="exact").double()
    with torch.no_grad():
        for kernel in attn.kernels:
            kernel.coeffs.normal_()
        w = [attn.plan(t).mixing[:, 100, 95:101] for t in (128, 1024)]
    assert float((w[0] - w[1]).abs().max()) > 1e-3


def test_content_positions():
    attn = ContentAttention(16, 2, 6, kernel_horizon=64.0, kernel_scale=4.0)
    rows = torch.arange(300)
    t = attn.positions(rows, 300, torch.float64)
    causal = rows[:, None] >= rows[None, :]
    assert float(t[causal].min()) == 0.0 and float(t[causal].max()) <= 1.0
    assert torch.all(t.diagonal() == 0)
    # Up to D a function of i - j alone, the same at any T; beyond D, psi(d) / psi(i).
    short = attn.positions(rows[:60], 60, torch.float64)
    assert torch.equal(short, t[:60, :60])
    d = torch.arange(40, dtype=torch.float64)
    assert torch.allclose(t[50, 50 - d.long()], torch.log1p(d / 4) / math.log1p(64 / 4))
    assert torch.allclose(t[200, 200 - d.long()], torch.log1p(d / 4) / math.log1p(200 / 4))


@torch.no_grad()
def test_content_bias_is_the_kernel_at_t():
    # The plan's Toeplitz rows (i <= D) and point-by-point rows (i > D, the reference
    # path bias_grid = None) against k(t_ij) evaluated from the basis definition; the
    # default grid path: rows i <= D identical, rows beyond within its stated bound.
    torch.manual_seed(0)
    attn = ContentAttention(16, 2, 6, kernel_horizon=40.0).double()
    attn.kernels.coeffs.normal_()
    rows = torch.arange(100)
    t = attn.positions(rows, 100, torch.float64)
    scale = F.softplus(attn.kernels.log_scale)[:, :, None]
    direct = scale * torch.einsum("hk,kij->hij", attn.kernels.coeffs, basis("cosine", t, 6))
    direct = direct.masked_fill(rows[:, None] < rows[None, :], -math.inf)   # causal as built
    grid = attn.plan(100).bias
    bound = attn.grid_error_bound()
    attn.bias_grid = None
    assert attn.grid_error_bound() == 0.0
    exact = attn.plan(100).bias
    assert torch.allclose(exact, direct, atol=1e-12, rtol=0)
    assert torch.allclose(attn.plan(30).bias, direct[:, :30, :30], atol=1e-12, rtol=0)
    assert torch.equal(grid[:, :41], exact[:, :41])
    assert torch.equal(torch.isneginf(grid), torch.isneginf(exact))
    error = (grid - exact)[torch.isfinite(exact)].abs().max()
    assert 0 < float(error) <= bound + 1e-12 and bound < 1e-6


@torch.no_grad()
def test_content_grid_error_at_trained_scale():
    # The bias beyond D read from the grid, in float32 as evaluated, against the exact
    # point-by-point kernel in float64: coefficients of the size of trained ones
    # (N(0, 0.1), n = 32), T = 3000 with D = 256 (every row i > D, both heads). The
    # float64 grid (interpolation alone) stays within Delta^2 / 8 max |k''|; float32
    # adds its rounding. Tolerance: 1e-4 nats.
    torch.manual_seed(0)
    attn = ContentAttention(16, 2, 32, kernel_horizon=256.0)
    attn.kernels.coeffs.normal_(0.0, 0.1)
    attn.kernels.log_scale.normal_(0.0, 0.5)
    length, n0 = 3000, 257
    bias32 = attn.plan(length).bias
    attn.double()
    bias64 = attn.plan(length).bias
    bound = attn.grid_error_bound()
    assert 1e-7 < bound < 1e-5
    err32 = err64 = 0.0
    for rows in torch.arange(n0, length).split(300):
        exact = attn.kernels(attn.positions(rows, length, torch.float64))       # [h, C, T]
        causal = rows[:, None] >= torch.arange(length)[None, :]
        for bias in (bias32, bias64):
            assert torch.isneginf(bias[:, rows][:, ~causal]).all()
        err32 = max(err32, float((bias32[:, rows].double() - exact)[:, causal].abs().max()))
        err64 = max(err64, float((bias64[:, rows] - exact)[:, causal].abs().max()))
    assert err64 <= bound
    assert err32 < 1e-4


def test_content_grid_unused_up_to_horizon(monkeypatch):
    # At T <= D + 1 the bias is the exact Toeplitz one (the grid path is never entered),
    # bit for bit the reference; beyond, its rows i <= D still are.
    torch.manual_seed(0)
    attn = ContentAttention(16, 2, 32, kernel_horizon=64.0)
    with torch.no_grad():
        attn.kernels.coeffs.normal_(0.0, 0.1)
    reference = {}
    attn.bias_grid = None
    for length in (1, 30, 64, 65, 90):
        reference[length] = attn.plan(length).bias
    attn.bias_grid = 8193

    def refuse(*args, **kwargs):
        raise AssertionError("grid path used at T <= D + 1")

    with monkeypatch.context() as m:
        m.setattr(ContentAttention, "_rows_grid", refuse)
        for length in (1, 30, 64, 65):
            assert torch.equal(attn.plan(length).bias, reference[length])
    bias = attn.plan(90).bias
    assert torch.equal(bias[:, :65], reference[90][:, :65])
    assert not torch.equal(bias, reference[90])


@pytest.mark.parametrize("name", ["cosine", "fourier", "cheb"])
@torch.no_grad()
def test_kernel_recurrence_matches_basis(name):
    kernel = SpectralKernel1D(3, 9, name).double()
    kernel.coeffs.normal_()
    u = torch.rand(5, 7, dtype=torch.float64)
    direct = torch.einsum("hk,kab->hab", kernel.coeffs, basis(name, u, 9))
    assert torch.allclose(kernel(u), F.softplus(kernel.log_scale)[:, :, None] * direct,
                          atol=1e-12, rtol=0)


# ---------------------------------------------------------------------- cost

def test_relative_plan_is_linear_in_length():
    attn = RelativeAttention(32, 4, 8, quad_nodes=64)
    t, q = 5000, 64
    plan = attn.plan(t)
    numel = sum(x.numel() for x in (plan.weights, plan.mixing) if x is not None)
    assert plan.mixing is None and numel <= 4 * t * q        # h * T * Q, no [T, T] anywhere
    out = attn(torch.randn(1, t, 32), plan)
    assert out.shape == (1, t, 32) and torch.isfinite(out).all()


def test_graded_bins():
    starts, stops, nodes = graded_bins(64, 4.0, 1024.0)
    widths = [b - a for a, b in zip(starts[:-1], stops[:-1])]
    assert len(starts) == 64 and starts[0] == 0 and stops[-1] is None
    assert starts[-1] == 1024                                # the open bin is u = 1
    assert widths[:21] == [1] * 21 and widths[21] > 1       # every token for d = 0..20
    assert all(a <= b for a, b in zip(widths, widths[1:]))   # graded: never narrower
    assert all(0 <= u <= 1 for u in nodes) and list(nodes) == sorted(nodes) and nodes[-1] == 1.0
    assert graded_bins(16, 4.0, 1024.0)[1][0] == 1          # the query's own token alone


# ---------------------------------------------------------------------- Sobolev penalty

@pytest.mark.parametrize("name", ["cosine", "cheb"])
def test_penalty_exact(name):
    torch.manual_seed(0)
    kernel = SpectralKernel1D(3, 7, name, "exact").double()
    with torch.no_grad():
        kernel.coeffs.normal_()
    pen = kernel.sobolev_penalty()
    t, w = gauss_legendre(200)
    second = kernel.coeffs @ basis(name, t, 7, deriv=2)               # k''(u) without the scale
    assert torch.isfinite(pen) and float(pen.detach()) > 0
    assert torch.allclose(pen, (second ** 2 * w).sum(), rtol=1e-10)
    if name == "cosine":   # closed form: sum_k (pi k)^4 a_k^2 / (2 n)
        k = torch.arange(7, dtype=torch.float64)
        assert torch.allclose(pen, ((math.pi * k) ** 4 * kernel.coeffs ** 2).sum() / 14, rtol=1e-10)
    with torch.no_grad():
        kernel.coeffs.zero_()
        kernel.coeffs[:, 0] = 2.5                                        # a constant kernel
    assert abs(float(kernel.sobolev_penalty().detach())) < 1e-20


@pytest.mark.parametrize("kernel", KERNELS)
def test_model_penalty(kernel):
    model = _cat(kernel, random_kernel=False)
    _, pen = model(torch.randint(0, V, (1, 8)))
    direct = model.config.sob_lambda * model.blocks[0].attn.kernels.sobolev_penalty()
    assert torch.isfinite(pen) and float(pen.detach()) > 0 and torch.allclose(pen, direct)


# ---------------------------------------------------------------------- gradients

def _loss(model, tokens):
    logits, _ = model(tokens[:, :-1], penalty=False)
    return F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))


@pytest.mark.parametrize("kernel,dense", [("relative", True), ("relative", False),
                                          ("content", True)])
def test_kernel_gradient_finite_differences(kernel, dense):
    model = _cat(kernel, torch.float64, quad_nodes=8, kernel_horizon=8.0)
    if not dense:
        model.blocks[0].attn.dense_max = 0
    tokens = torch.randint(0, V, (2, 21), generator=torch.Generator().manual_seed(2))
    coeffs = model.blocks[0].attn.kernels.coeffs
    grad, = torch.autograd.grad(_loss(model, tokens), coeffs)
    assert float(grad.abs().max()) > 1e-6
    eps = 1e-6
    for h, k in [(0, 0), (0, 3), (1, 5)]:
        with torch.no_grad():
            coeffs[h, k] += eps
            up = float(_loss(model, tokens))
            coeffs[h, k] -= 2 * eps
            down = float(_loss(model, tokens))
            coeffs[h, k] += eps
        assert abs((up - down) / (2 * eps) - float(grad[h, k])) < 1e-7 + 1e-5 * abs(float(grad[h, k]))


@pytest.mark.parametrize("kernel", KERNELS)
def test_adjoint_reaches_kernel_through_plan(kernel):
    # dopri5 + adjoint: the kernel parameters are adjoint params only through
    # plan.grad_tensors(); the gradient must match direct backpropagation.
    grads = []
    for adjoint in (True, False):
        model = _cat(kernel, torch.float64, solver="dopri5", rtol=1e-10, atol=1e-12,
                     adjoint=adjoint)
        tokens = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(3))
        coeffs = model.blocks[0].attn.kernels.coeffs
        grads.append(torch.autograd.grad(_loss(model, tokens), coeffs)[0])
    assert float(grads[1].abs().max()) > 1e-6
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-9)


# ---------------------------------------------------------------------- content-aware

@torch.no_grad()
def test_content_with_zero_kernel_is_causal_softmax_attention():
    torch.manual_seed(0)
    attn = ContentAttention(16, 2, 6).double()
    x = torch.randn(3, 20, 16, dtype=torch.float64)
    with torch.no_grad():
        attn.kernels.coeffs.zero_()
    qk = attn.qk
    heads = lambda t: t.view(3, 20, 2, 8).transpose(1, 2)             # noqa: E731
    q, k, v = heads(qk.q_proj(x)), heads(qk.k_proj(x)), heads(qk.v_proj(x))
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(20, 20, dtype=torch.bool).triu(1), float("-inf"))
    direct = qk.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(3, 20, 16))
    assert float((attn(x) - direct).abs().max()) < 1e-12
    # and with a kernel, the bias is what changes the scores
    with torch.no_grad():
        attn.kernels.coeffs.normal_()
    plan = attn.plan(20)
    biased = (scores + plan.bias).softmax(-1) @ v
    direct = qk.out_proj(biased.transpose(1, 2).reshape(3, 20, 16))
    assert float((attn(x, plan) - direct).abs().max()) < 1e-12


@pytest.mark.parametrize("grad", [False, True])
def test_content_reads_its_bias_as_prepared(grad, monkeypatch):
    # The plan's bias is causal as built (-inf above the diagonal, beyond D too) and every
    # call reads it as it is: no per-call masked copy (no masked_fill in the call),
    # in chunks, equal to the explicit softmax with the fused kernel (no grad) and the
    # explicit one (grad), and the gradient reaches the coefficients through plan.bias.
    from catlib.nn import qk_attention
    monkeypatch.setattr(qk_attention, "SCORE_CHUNK", 3 * 2 * 70)   # 3 queries a chunk
    torch.manual_seed(0)
    attn = ContentAttention(16, 2, 6, kernel_horizon=30.0).double()
    with torch.no_grad():
        attn.kernels.coeffs.normal_()
    x = torch.randn(1, 70, 16, dtype=torch.float64)
    upper = torch.ones(70, 70, dtype=torch.bool).triu(1)
    with torch.set_grad_enabled(grad):
        plan = attn.plan(70)
        assert torch.isneginf(plan.bias[:, upper]).all()
        assert torch.isfinite(plan.bias[:, ~upper]).all()
        assert plan.grad_tensors() == ((plan.bias,) if grad else ())
        qk = attn.qk
        heads = lambda t: t.view(1, 70, 2, 8).transpose(1, 2)             # noqa: E731
        q, k, v = heads(qk.q_proj(x)), heads(qk.k_proj(x)), heads(qk.v_proj(x))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(8) + plan.bias).softmax(-1)
        direct = qk.out_proj((scores @ v).transpose(1, 2).reshape(1, 70, 16))
        with monkeypatch.context() as patched:
            patched.setattr(torch.Tensor, "masked_fill", None)          # would raise if called
            patched.setattr(torch.Tensor, "masked_fill_", None)
            out = attn(x, plan)
        assert float((out - direct).detach().abs().max()) < 1e-12
    if grad:
        g_plan, g_coeffs = torch.autograd.grad(out.square().sum(),
                                               (plan.bias, attn.kernels.coeffs), retain_graph=True)
        via_plan, = torch.autograd.grad(plan.bias, attn.kernels.coeffs,
                                        g_plan.masked_fill(upper, 0))
        assert float(g_coeffs.abs().max()) > 0 and torch.allclose(g_coeffs, via_plan, rtol=1e-10)


# ---------------------------------------------------------------------- training

@pytest.mark.parametrize("kernel", KERNELS)
def test_trains_on_repetitive_sequence(kernel):
    # The next token after 0 depends on the token before it: attention is needed.
    pattern = torch.tensor([0, 1, 0, 2, 0, 3, 4, 5])
    data = pattern.repeat(40)
    model = _cat(kernel, random_kernel=False, d_model=32, n_heads=4, sob_lambda=1e-6).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(30):
        starts = torch.randint(0, len(data) - 33, (8,), generator=g)
        batch = torch.stack([data[s:s + 33] for s in starts])
        logits, pen = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        (loss + pen).backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:3]) / 3


# ---------------------------------------------------------------------- configuration

def test_config_validation():
    for kernel in KERNELS:
        with pytest.raises(ValueError, match="variant='causal' or set causal=True"):
            catlib.CATConfig(kernel=kernel)                       # published: not causal
        with pytest.raises(ValueError, match="causal resolves to False"):
            catlib.CATConfig(kernel=kernel, variant="causal", causal=False)
        catlib.CATConfig(kernel=kernel, causal=True)              # an ablation on published
    with pytest.raises(ValueError, match="kernel must be one of"):
        catlib.CATConfig(kernel="rope", variant="causal")
    for name in ("kernel_scale", "kernel_horizon"):
        for bad in (0, -1.0, "8", True):
            with pytest.raises(ValueError, match=name):
                catlib.CATConfig(variant="causal", kernel="relative", **{name: bad})
    cfg = catlib.CATConfig(variant="causal", kernel="relative", kernel_scale=2, kernel_horizon=256)
    assert catlib.CATConfig.from_dict(cfg.to_dict()) == cfg


def test_make_attention_classes():
    expected = {"absolute": ContinuousAttention, "relative": RelativeAttention,
                "content": ContentAttention}
    for kernel, cls in expected.items():
        cfg = catlib.CATConfig(**TINY, kernel=kernel)
        assert type(make_attention(cfg)) is cls
        assert type(catlib.CAT(cfg).blocks[0].attn) is cls
    # The absolute path is the published module, parameter names included.
    names = set(catlib.CAT(catlib.CATConfig(**{**TINY, "variant": "published"})).state_dict())
    assert {"blocks.0.attn.t_nodes", "blocks.0.attn.kernels.1.coeffs",
            "blocks.0.attn.v_proj.weight"} <= names
