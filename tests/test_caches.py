"""Cached state (attention geometry, penalty Gram matrices) is never stale and never poisoned.

ContinuousAttention keeps the basis values and interpolation stencils of each length;
the exact penalty keeps Gram matrices per (basis, n). Whatever the order of modes
(inference_mode, no_grad, eval, train), devices, dtypes and buffer loads, a model must
give what a freshly built model with the same weights gives.
"""

import copy

import pytest
import torch

import catlib
from catlib.measure.evaluate import cross_entropy
from catlib.nn.kernel import Kernel2D

# A cached model and a fresh copy with the same weights run the very same kernels on the
# same shapes: their outputs and gradients are compared bit for bit (rtol=0, torch.equal).
V = 65
SMALL = dict(vocab_size=V, d_model=32, n_heads=4, n_freq=8, quad_nodes=16, solver="rk4-classic")


def _cat(variant="causal", seed=0, **kw):
    torch.manual_seed(seed)
    return catlib.CAT(catlib.CATConfig(**{**SMALL, **kw}, variant=variant))


def _tokens(batch=2, length=24, seed=1):
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def _grads(model, tokens):
    """Parameter gradients of sum(logits) + penalty, by name (same dropout masks every call)."""
    torch.manual_seed(3)
    model.zero_grad()
    logits, pen = model(tokens)
    (logits.sum() + pen).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _fresh_copy(model):
    """Same weights and buffers, empty caches."""
    fresh = copy.deepcopy(model)
    for block in fresh.blocks:
        block.attn._cache.clear()
    return fresh


# ---- inference_mode must not poison the caches (issue "Reliability" item 1) -------------

@pytest.mark.parametrize("variant", ["causal", "published"])
def test_training_after_inference_mode_evaluation(variant):
    # The reported sequence: evaluate (under torch.inference_mode), then train. Catches a
    # geometry cache that keeps inference tensors built during the evaluation: the training
    # forward then fails with "Inference tensors cannot be saved for backward".
    cat = _cat(variant)
    reference = _grads(_fresh_copy(cat), _tokens(length=64))
    val = torch.randint(0, V, (5000,), generator=torch.Generator().manual_seed(2))
    cross_entropy(cat, val, 64, eval_windows=2)
    got = _grads(cat, _tokens(length=64))
    assert set(got) == set(reference)
    for name in reference:
        torch.testing.assert_close(got[name], reference[name], rtol=0, atol=0, msg=name)


def test_no_grad_and_grad_after_inference_mode():
    # inference_mode -> no_grad -> grad at one length, all served by one cache entry.
    cat = _cat().eval()
    tokens = _tokens()
    with torch.inference_mode():
        a, _ = cat(tokens)
    with torch.no_grad():
        b, _ = cat(tokens)
    c, pen = cat(tokens)
    (c.sum() + pen).backward()   # would fail if the entry held inference tensors
    assert torch.equal(a, b) and torch.equal(b, c.detach())


def test_exact_penalty_gram_cache_after_inference_mode():
    # Catches Gram matrices cached at module level while inference_mode is on: in float64
    # they are used as they are (no dtype copy), and a later training model with the same
    # (basis, n) fails with "Inference tensors cannot be saved for backward".
    from catlib.nn.kernel import basis_gram

    basis_gram.cache_clear()   # so that the first call below fills the cache
    with torch.inference_mode():
        Kernel2D(11, "cheb", penalty="exact").double().sobolev_penalty()
    kernel = Kernel2D(11, "cheb", penalty="exact").double()
    kernel.sobolev_penalty().backward()
    assert kernel.coeffs.grad is not None and bool(kernel.coeffs.grad.abs().sum() > 0)


def test_exact_penalty_model_trains_after_inference_mode():
    # The same through the model: evaluate a float64 exact-penalty CAT, train another one.
    from catlib.nn.kernel import basis_gram

    cfg = dict(n_freq=12, basis="cheb")
    basis_gram.cache_clear()
    with torch.inference_mode():
        _cat(**cfg).double()(_tokens())
    model = _cat(seed=1, **cfg).double()
    logits, pen = model(_tokens())
    (logits.sum() + pen).backward()
    assert model.blocks[0].attn.kernels[0].coeffs.grad is not None


# ---- a model built under inference_mode (item 3) -----------------------------------

@pytest.mark.parametrize("variant", ["causal", "published"])
def test_model_built_and_run_in_inference_mode(variant):
    # Catches a cache key that reads t_nodes._version: inference tensors have no version
    # counter ("Inference tensors do not track version counter").
    expected, _ = _cat(variant).eval()(_tokens())
    with torch.inference_mode():
        cat = _cat(variant).eval()
        got, _ = cat(_tokens())
        again, _ = cat(_tokens())   # second call: from the cache
    assert torch.equal(got, expected.detach()) and torch.equal(again, got)


def _other_rule(model):
    """A state dict whose quadrature buffers hold another (valid) rule of the same size."""
    state = model.state_dict()
    q = model.config.quad_nodes
    nodes, weights = catlib.gauss_legendre(q, 0.0, 0.5)  # the rule on [0, 1/2]
    for key in state:
        if key.endswith("t_nodes"):
            state[key] = nodes.float()
        elif key.endswith("t_w"):
            state[key] = (2 * weights).float()
    return state


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_load_state_dict_invalidates_geometry(variant):
    # Catches a geometry cache whose key ignores the buffers: after loading other nodes the
    # model would keep mixing with the old ones.
    cat = _cat(variant).eval()
    tokens = _tokens()
    with torch.no_grad():
        before, _ = cat(tokens)
        state = _other_rule(cat)
        cat.load_state_dict(state)
        after, _ = cat(tokens)
        expected, _ = _fresh_copy(cat)(tokens)
    assert not torch.equal(after, before)
    assert torch.equal(after, expected)


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_load_state_dict_inside_inference_mode_invalidates_geometry(variant):
    # The same for a model built under inference_mode, whose buffers have no version counter.
    with torch.inference_mode():
        cat = _cat(variant).eval()
        before, _ = cat(_tokens())
        cat.load_state_dict(_other_rule(cat))
        after, _ = cat(_tokens())
        expected, _ = _fresh_copy(cat)(_tokens())
    assert not torch.equal(after, before)
    assert torch.equal(after, expected)


def test_in_place_change_of_weights_buffer_invalidates_geometry():
    # Catches a key that watches t_nodes only: the quadrature weights t_w are cached too
    # (as log weights) and can change on their own.
    attn = catlib.ContinuousAttention(16, 2, 5, quad_nodes=8, dropout=0.0, causal=True)
    before = attn.plan(9).mixing.detach()
    with torch.no_grad():
        attn.t_w.mul_(2.0)
    after = attn.plan(9).mixing.detach()
    # exp(log(2 s w)) against 2 exp(log(s w)) in float32: exp turns the rounding of a log
    # of magnitude up to 4.4 into 2-3 ulps (measured 1.5); a stale cache is off by 2x.
    torch.testing.assert_close(after, 2 * before, rtol=8 * torch.finfo(torch.float32).eps, atol=0)


def test_rounded_buffers_invalidate_geometry():
    # .half().float() gives new float32 buffers, rounded through float16, whose version
    # counters start again at 0. Catches a key made of (length, device, dtype, _version)
    # only, which takes the new buffers for the old ones.
    attn = catlib.ContinuousAttention(16, 2, 5, quad_nodes=8, dropout=0.0, causal=True)
    attn.plan(9)
    attn.half().float()
    fresh = copy.deepcopy(attn)
    fresh._cache.clear()
    assert torch.equal(attn.plan(9).mixing, fresh.plan(9).mixing)


# ---- modes, dtypes and devices -----------------------------------------------------

def test_eval_train_eval():
    # Nothing cached may depend on the mode: eval -> train -> eval gives the eval output
    # again, and the train-mode gradient after an eval pass is a fresh model's.
    cat = _cat(dropout=0.0)
    tokens = _tokens()
    with torch.no_grad():
        first, _ = cat.eval()(tokens)
    cat.train()
    reference = _grads(_fresh_copy(cat), tokens)
    got = _grads(cat, tokens)
    for name in reference:
        torch.testing.assert_close(got[name], reference[name], rtol=0, atol=0, msg=name)
    with torch.no_grad():
        last, _ = cat.eval()(tokens)
    assert torch.equal(first, last)


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_double_after_float_forward(variant):
    # Catches geometry cached without its dtype: after .double() the float32 basis values
    # would be mixed into a float64 model (a dtype error, or float32-accurate results).
    cat = _cat(variant).eval()
    tokens = _tokens()
    with torch.no_grad():
        cat(tokens)
        got, _ = cat.double()(tokens)
        expected, _ = _fresh_copy(cat)(tokens)
    assert got.dtype == torch.float64 and torch.equal(got, expected)
    plan = cat.blocks[0].attn.plan(24)
    assert all(t.dtype == torch.float64 for t in (plan.mixing, plan.weights) if t is not None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("variant", ["causal", "published"])
def test_device_change_after_forward(variant):
    # Catches geometry cached without its device: after .to("cuda") the CPU basis values
    # would be used (a device error). And back on the CPU, the CPU entry must still be right.
    cat = _cat(variant).eval()
    tokens = _tokens()
    with torch.no_grad():
        cpu, _ = cat(tokens)
        gpu, _ = cat.to("cuda")(tokens.cuda())
        back, _ = cat.to("cpu")(tokens)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-5)   # other kernels, float32
    assert torch.equal(back, cpu)
    logits, pen = cat.to("cuda")(tokens.cuda())
    (logits.sum() + pen).backward()


# ---- the length-invariant kernels (catlib.nn.relative, catlib.nn.content) -----------------------
# RelativeAttention caches its bin geometry per (length, device, dtype); the exact 1-D
# penalty caches its Gram matrix per (basis, n). The same rules hold for them.

EXTRAPOLATING = ["relative", "content"]


def _kernel_cat(kernel, seed=0):
    torch.manual_seed(seed)
    return catlib.CAT(catlib.CATConfig(variant="causal", kernel=kernel, solver="rk4-classic",
                                       d_model=32, n_heads=4, n_freq=8))


def _rebuilt(model):
    """A new model of the same config with the same weights: nothing cached."""
    fresh = catlib.CAT(model.config).to(next(model.parameters()).dtype)
    fresh.load_state_dict(model.state_dict())
    return fresh.train(model.training)


@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_training_after_inference_mode_evaluation(kernel):
    # Evaluate under torch.inference_mode at T = 64, then train at T = 64. Catches a geometry
    # cache (or Gram matrix) filled with inference tensors during the evaluation: "Inference
    # tensors cannot be saved for backward".
    cat = _kernel_cat(kernel)
    reference = _grads(_rebuilt(cat), _tokens(length=64))
    val = torch.randint(0, V, (5000,), generator=torch.Generator().manual_seed(2))
    cross_entropy(cat, val, 64, eval_windows=2)
    got = _grads(cat, _tokens(length=64))
    assert set(got) == set(reference) and any(".kernels." in n for n in got)
    for name in reference:
        torch.testing.assert_close(got[name], reference[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_float64_trains_after_inference_mode(kernel):
    # In float64 the penalty's Gram matrix is used as cached (``.to`` makes no copy): one
    # filled under inference_mode poisons every later float64 training model.
    from catlib.nn.kernel import basis_gram

    basis_gram.cache_clear()
    with torch.inference_mode():
        _kernel_cat(kernel).double()(_tokens())
    model = _kernel_cat(kernel, seed=1).double()
    logits, pen = model(_tokens())
    (logits.sum() + pen).backward()
    assert model.blocks[0].attn.kernels.coeffs.grad is not None


@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_built_and_run_in_inference_mode(kernel):
    # Expected under no_grad: with grad on, the content kernel's bias requires grad and
    # QKAttention takes the explicit softmax instead of the fused kernel (equal to rounding).
    with torch.no_grad():
        expected, _ = _kernel_cat(kernel).eval()(_tokens())
    with torch.inference_mode():
        cat = _kernel_cat(kernel).eval()
        got, _ = cat(_tokens())
        again, _ = cat(_tokens())   # second call: from the cache
    assert torch.equal(got, expected.detach()) and torch.equal(again, got)
    # and the model so built still trains afterwards (its parameters are normal tensors
    # once cloned out of inference mode; the caches must not hold inference tensors)
    trained = _rebuilt(cat)
    with torch.inference_mode():
        trained(_tokens())
    logits, pen = trained.train()(_tokens())
    (logits.sum() + pen).backward()


@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_double_after_float_forward(kernel):
    cat = _kernel_cat(kernel).eval()
    tokens = _tokens()
    with torch.no_grad():
        cat(tokens)
        got, _ = cat.double()(tokens)
        expected, _ = _rebuilt(cat)(tokens)
    assert got.dtype == torch.float64 and torch.equal(got, expected)
    plan = cat.blocks[0].attn.plan(24)
    assert all(t.dtype == torch.float64 for t in plan.grad_tensors())
    logits, pen = cat.train()(tokens)   # and float64 training after a float32 evaluation
    (logits.sum() + pen).backward()


@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_load_state_dict_is_not_stale(kernel):
    cat = _kernel_cat(kernel).eval()
    tokens = _tokens()
    other = _kernel_cat(kernel, seed=5).state_dict()
    with torch.no_grad():
        before, _ = cat(tokens)
        cat.load_state_dict(other)
        after, _ = cat(tokens)
        expected, _ = _rebuilt(cat)(tokens)
    assert not torch.equal(after, before) and torch.equal(after, expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel", EXTRAPOLATING)
def test_extrapolating_device_change_after_forward(kernel):
    cat = _kernel_cat(kernel).eval()
    tokens = _tokens()
    with torch.inference_mode():
        cpu, _ = cat(tokens)
        gpu, _ = cat.to("cuda")(tokens.cuda())
        back, _ = cat.to("cpu")(tokens)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-5)
    assert torch.equal(back, cpu)
    logits, pen = cat.to("cuda").train()(tokens.cuda())
    (logits.sum() + pen).backward()


# ---- Gram matrices as buffers --------------------------------------------------------

def test_gram_buffers_follow_the_model_and_stay_out_of_the_state_dict():
    # The exact penalty's Gram matrices live on the model's device in its dtype (no host ->
    # device move per step), are recast from the float64 master on every move or cast (the
    # values a per-call cast gives), and are not part of state_dicts (checkpoints unchanged).
    from catlib.nn.kernel import GramTables, basis_gram
    cat = _cat("causal")
    tables = [m for m in cat.modules() if isinstance(m, GramTables)]
    assert tables and not any("gram_" in key for key in cat.state_dict())
    for dtype in (torch.float64, torch.float32, torch.float64):
        cat.to(dtype)
        for t in tables:
            for a, b in t.orders:
                held = getattr(t, f"gram_{a}_{b}")
                assert torch.equal(held, basis_gram(t.basis_name, t.n, a, b).to(dtype))
    cat.float()
    with torch.inference_mode():   # a move under inference mode (the grams recast in it)
        cat.to("cpu")
    cat(_tokens())[1].backward()   # still serves training: the penalty saves the grams
