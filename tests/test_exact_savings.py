"""Issue 48, part 1: the exact savings keep every number bit for bit.

- The parameter-free basis of the 1-D spectral kernels (relative, content, ALiBi- and
  KERPLE-prior) kept in each operator's geometry cache (``catlib.nn.plan.kernel_at``,
  ``DecayPriorKernel.at_distances``): training with and without it (``basis_cache(False)``
  evaluates it in every plan, as before) gives the same losses, logits, gradients and
  weights, compared with torch.equal (the very same kernels run on the very same values).
  The cache is hit for a repeated length, a new length or dtype gets its own entry, and
  the cached basis stays a constant (no grad, never written into).
- ``train()`` called by a training step only when a model is not in training mode.
- The batch moved to the device through reused (pinned, on CUDA) buffers: the staging runs
  on the CPU here too (``staged=True, pin=False``); the pinned path where CUDA is present.

What each test catches: a cached basis that changes any number (a different evaluation, a
stale entry after an update of the parameters, of ``kernel_scale`` or of a load), a
basis that drops the gradient of the coefficients, a cache key missing the length or the
dtype, a cache that is not hit, a ``train()`` per step, a step after ``eval()`` left in
evaluation mode, staged copies with other values or new buffers at every step.
"""
import copy

import pytest
import torch

import catlib.nn.kernel as kernel_module
from catlib.nn.bases import basis_recurrence
from catlib.nn.config import CATConfig
from catlib.nn.model import CAT
from catlib.nn.plan import basis_cache, basis_cache_enabled
from catlib.training.loop import SideBySide, TrainConfig
from catlib.training.transfer import DeviceInputs

V = 65
TINY = dict(vocab_size=V, d_model=16, n_heads=2, n_freq=8, solver="rk4-classic",
            variant="causal")
SEQ, BATCH, STEPS = 16, 2, 4
# Every kernel whose plan evaluates the 1-D spectral basis, at settings that reach each
# of its paths at T = 16: the prior kernels' residual cut at T_train = 8 (u = 1 beyond),
# far heads, the prior alone (no basis at all); the content kernel's rows beyond a
# horizon of 8 tokens (read from the grid, then point by point).
KERNELS = {
    "relative": dict(kernel="relative"),
    "content": dict(kernel="content"),
    "content-grid": dict(kernel="content", kernel_horizon=8.0),
    "alibi-prior": dict(kernel="alibi-prior", train_length=8),
    "kerple-prior": dict(kernel="kerple-prior", train_length=8),
    "kerple-prior-far": dict(kernel="kerple-prior", train_length=8, far_heads=1),
    "alibi-prior-alone": dict(kernel="alibi-prior", train_length=8, kernel_residual=False),
}
WITH_BASIS = [k for k in KERNELS if k != "alibi-prior-alone"]


def _config(name: str) -> CATConfig:
    return CATConfig(**TINY, **KERNELS[name])


def _tokens(length=SEQ, batch=BATCH, seed=1):
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def _trainer(name: str, models=("cat",)) -> SideBySide:
    tc = TrainConfig(train_steps=STEPS, lr=1e-2, batch=BATCH, seq=SEQ, models=models)
    return SideBySide(_config(name), tc, torch.arange(3000) % V)


def _run(name: str, cached: bool, steps: int = STEPS):
    """Losses of ``steps`` training steps and the final weights, cache on or off."""
    with basis_cache(cached):
        trainer = _trainer(name)
        losses = [trainer.train_step() for _ in range(steps)]
    keys = ("ce", "loss", "penalty")
    return [[m[k] for k in keys] for m in losses], trainer.cat.state_dict()


@pytest.mark.parametrize("name", list(KERNELS))
def test_training_is_the_same_with_and_without_the_cache(name):
    losses_on, weights_on = _run(name, True)
    losses_off, weights_off = _run(name, False)
    assert losses_on == losses_off                      # Python floats: bit for bit
    assert weights_on.keys() == weights_off.keys()
    for key in weights_on:
        assert torch.equal(weights_on[key], weights_off[key]), key
    # the weights moved: a cache that froze the kernel would still compare equal above
    # only if the uncached path froze it too
    first = CAT(_config(name)).state_dict()
    assert any(not torch.equal(first[k], weights_on[k]) for k in first if ".kernels." in k) \
        or name == "alibi-prior-alone"


def _logits_and_grads(model, tokens):
    torch.manual_seed(3)
    model.zero_grad(set_to_none=True)
    logits, pen = model(tokens)
    (logits.square().mean() + pen).backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()
                             if p.grad is not None}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", WITH_BASIS)
def test_logits_and_gradients_are_the_same(name, dtype):
    torch.manual_seed(0)
    model = CAT(_config(name)).to(dtype)
    with torch.no_grad():                     # coefficients away from their zero init
        for n, p in model.named_parameters():
            if ".kernels." in n:
                p.add_(0.1 * torch.randn_like(p))
    twin = copy.deepcopy(model)
    with basis_cache(False):
        expected, expected_grads = _logits_and_grads(twin, _tokens())
    for _ in range(2):                        # the second call reads the cache
        got, grads = _logits_and_grads(model, _tokens())
        assert torch.equal(got, expected)
        assert grads.keys() == expected_grads.keys()
        assert any(".kernels." in n for n in grads)   # the coefficients still get gradients
        for n in grads:
            assert torch.equal(grads[n], expected_grads[n]), n


def _counted(monkeypatch) -> list:
    calls = []

    def counting(*args, **kwargs):
        calls.append(args[1].numel())
        return basis_recurrence(*args, **kwargs)

    monkeypatch.setattr(kernel_module, "basis_recurrence", counting)
    return calls


# Basis evaluations of one plan at T = 16 without the cache: the decay priors evaluate
# the residual at u_T(d) and at 1, the others their points once.
PER_PLAN = {"relative": 1, "content": 1, "alibi-prior": 2, "kerple-prior": 2,
            "kerple-prior-far": 2}


@pytest.mark.parametrize("name", [n for n in WITH_BASIS if n != "content-grid"])
def test_the_cache_is_hit_and_keyed_by_length_and_dtype(name, monkeypatch):
    calls = _counted(monkeypatch)
    torch.manual_seed(0)
    attn = CAT(_config(name)).blocks[0].attn
    attn.plan(SEQ)
    assert len(calls) == PER_PLAN[name]
    n = len(calls)
    attn.plan(SEQ)
    attn.plan(SEQ, dtype=torch.float32, device="cpu")     # the same key, spelled out
    assert len(calls) == n, "a repeated length evaluates the basis again"
    attn.plan(SEQ - 4)
    # the relative kernel's basis is read at its Q fixed nodes, the same at every length
    new_length = 0 if name == "relative" else PER_PLAN[name]
    assert len(calls) == n + new_length
    n = len(calls)
    attn.double().plan(SEQ)                               # float64 by default now
    assert len(calls) == n + PER_PLAN[name], "a new dtype needs its own entry"
    n = len(calls)
    attn.plan(SEQ)
    assert len(calls) == n
    n = len(calls)
    with basis_cache(False):
        attn.plan(SEQ)
        attn.plan(SEQ)
    assert len(calls) == n + 2 * PER_PLAN[name], "basis_cache(False) evaluates every time"


def test_the_grid_basis_of_the_content_kernel_is_cached(monkeypatch):
    # Beyond the horizon the content kernel reads k from a grid of G points: its basis is
    # cached too (the Toeplitz rows' entry serves every length beyond the horizon).
    calls = _counted(monkeypatch)
    torch.manual_seed(0)
    attn = CAT(_config("content-grid")).blocks[0].attn
    attn.plan(SEQ)
    assert sorted(calls) == sorted([9, attn.bias_grid])    # rows 0..D, and the grid
    attn.plan(SEQ)
    attn.plan(SEQ + 5)
    assert len(calls) == 2


def _cached_bases(attn) -> list[torch.Tensor]:
    caches = [m._cache for m in attn.modules() if hasattr(m, "_cache")]
    return [value for cache in caches for entry in cache._entries.values()
            for key, value in entry.items() if key.startswith("phi")]


@pytest.mark.parametrize("name", WITH_BASIS)
def test_the_cached_basis_is_a_constant_never_written(name):
    trainer = _trainer(name)
    trainer.train_step()
    attn = trainer.cat.blocks[0].attn
    held = _cached_bases(attn)
    assert held
    versions = [phi._version for phi in held]
    values = [phi.clone() for phi in held]
    for _ in range(2):
        trainer.train_step()
    after = _cached_bases(attn)
    assert all(a is b for a, b in zip(after, held))   # the same entries served every step
    for phi, version, value in zip(held, versions, values):
        assert not phi.requires_grad and phi.grad_fn is None and not phi.is_inference()
        assert phi._version == version and torch.equal(phi, value)


@pytest.mark.parametrize("name", ["content", "kerple-prior", "alibi-prior"])
def test_attributes_the_points_read_are_part_of_the_key(name):
    # kernel_scale (content) and scale (priors) move the points the basis is read at.
    torch.manual_seed(0)
    attn = CAT(_config(name)).blocks[0].attn
    with torch.no_grad():
        for n, p in attn.named_parameters():
            if "kernels" in n:
                p.add_(0.1 * torch.randn_like(p))
    attn.plan(SEQ)
    if name == "content":
        attn.kernel_scale = 2.0
    else:
        attn.kernels.scale = 2.0
    got = attn.plan(SEQ).bias
    with basis_cache(False):
        expected = attn.plan(SEQ).bias
    assert torch.equal(got, expected)


@pytest.mark.parametrize("name", ["kerple-prior", "alibi-prior"])
def test_prior_plan_made_in_inference_mode_serves_training(name):
    # The decay priors' entry made under torch.inference_mode (an evaluation) must still
    # serve a training pass: inference tensors cannot be saved for backward.
    torch.manual_seed(0)
    model = CAT(_config(name))
    twin = copy.deepcopy(model)
    with torch.inference_mode():
        model.eval()(_tokens())
    got, grads = _logits_and_grads(model.train(), _tokens())
    with basis_cache(False):
        expected, expected_grads = _logits_and_grads(twin, _tokens())
    assert torch.equal(got, expected)
    for n in expected_grads:
        assert torch.equal(grads[n], expected_grads[n]), n


def test_the_switch_restores_itself():
    assert basis_cache_enabled()
    with basis_cache(False):
        assert not basis_cache_enabled()
        with basis_cache(True):
            assert basis_cache_enabled()
        assert not basis_cache_enabled()
    assert basis_cache_enabled()


# ---- train() only when the mode changes ---------------------------------------------

def _count_train_calls(model) -> list:
    calls = []
    original = model.train

    def counting(mode=True):
        calls.append(mode)
        return original(mode)

    model.train = counting   # the instance attribute shadows Module.train
    return calls


def test_train_is_called_only_when_the_mode_changes():
    trainer = _trainer("kerple-prior", models=("cat", "base"))
    cat_calls, base_calls = (_count_train_calls(m) for m in (trainer.cat, trainer.base))
    for _ in range(3):
        trainer.train_step()
    assert cat_calls == [] and base_calls == []       # built in training mode: no call
    trainer.cat.eval()
    trainer.base.eval()
    cat_calls.clear()                                  # eval() is train(False)
    base_calls.clear()
    trainer.train_step()
    assert cat_calls == [True] and base_calls == [True]
    for model in (trainer.cat, trainer.base):
        assert all(m.training for m in model.modules())
    trainer.train_step()
    assert cat_calls == [True] and base_calls == [True]


def test_validation_between_steps_leaves_training_mode():
    trainer = _trainer("kerple-prior", models=("cat", "base"))
    trainer.train_step()
    trainer.validate(torch.arange(500) % V)
    trainer.train_step()
    for model in (trainer.cat, trainer.base):
        assert all(m.training for m in model.modules())


# ---- the batch on the device -----------------------------------------------------------

def _batch(seed=0, batch=3, seq=8):
    w = torch.randint(0, V, (batch, seq + 1), generator=torch.Generator().manual_seed(seed))
    return w[:, :-1], w[:, 1:]          # views, as the sampler's: not contiguous


def test_cpu_inputs_are_moved_as_before():
    inputs = DeviceInputs("cpu")
    assert not inputs.staged and not inputs.pin
    x, y = _batch()
    got = inputs(t for t in (x, y))
    assert got[0] is x and got[1] is y                # .to("cpu"): the tensors themselves
    trainer = _trainer("kerple-prior")
    trainer.train_step()
    assert not trainer._inputs.staged


def test_staged_copies_reuse_their_buffers():
    # The staging of the CUDA path, run on the CPU (no pinned memory, no events).
    inputs = DeviceInputs("cpu", staged=True, pin=False)
    x, y = _batch(0)
    gx, gy = inputs((x, y))
    assert torch.equal(gx, x) and torch.equal(gy, y) and gx is not x
    assert gx.is_contiguous() and gx.dtype == x.dtype
    pointers = [t.data_ptr() for t in (gx, gy)]
    x2, y2 = _batch(1)
    hx, hy = inputs((x2, y2))
    assert torch.equal(hx, x2) and torch.equal(hy, y2)
    assert [t.data_ptr() for t in (hx, hy)] == pointers    # reused, not reallocated
    assert torch.equal(x, _batch(0)[0])                       # the inputs are untouched
    x3, y3 = _batch(2, batch=2)                                # another shape: new buffers
    kx, ky = inputs((x3, y3))
    assert torch.equal(kx, x3) and torch.equal(ky, y3) and kx.shape == (2, 8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_inputs_are_pinned_and_reused():
    inputs = DeviceInputs("cuda")
    assert inputs.staged and inputs.pin
    pointers = None
    for seed in range(3):
        x, y = _batch(seed)
        gx, gy = inputs((x, y))
        assert gx.is_cuda and torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)
        assert all(b.host.is_pinned() for b in inputs.buffers)
        now = [t.data_ptr() for t in (gx, gy)]
        assert pointers is None or now == pointers
        pointers = now


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_is_the_same_with_staged_inputs():
    # The same steps with the plain move (staged=False) and the staged one: same numbers.
    results = []
    was_deterministic = torch.are_deterministic_algorithms_enabled()   # process-wide
    try:
        for staged in (False, True):
            tc = TrainConfig(train_steps=STEPS, lr=1e-2, batch=BATCH, seq=SEQ,
                             models=("cat",), deterministic=True)
            trainer = SideBySide(_config("kerple-prior"), tc, torch.arange(3000) % V, "cuda")
            trainer._inputs = DeviceInputs("cuda", staged=staged)
            results.append([trainer.train_step()["loss"] for _ in range(STEPS)])
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
    assert results[0] == results[1]
