"""Scoring that costs what its FLOPs cost (issue 61 item 3): evaluation's plans built once
per length (catlib.nn.reused_plans), the sinusoidal baseline's evaluation without a [T, T]
mask, passes sized for the CPU's cache, and every window at every length in the cpu profile.

What each test catches:
- a plan (a CAT's kernel, a learned bias) built again for every forward pass of one length
  in an evaluation (the windows of a length go in several passes);
- a kept plan handed back after the weights or a setting changed (an in-place edit, an
  optimiser step, load_state_dict, a cast, a far head's slope), or kept beyond its scope;
- a training step that differs in any bit after an evaluation, or inside a scope;
- an evaluation whose CEs differ from those of plans built per pass (bit for bit) or from
  the passes of 32,768 tokens (beyond float32 rounding);
- the sinusoidal baseline's evaluation writing its causal [T, T] mask per pass, or reading
  the placeholder that replaces it;
- passes on the CPU other than CPU_BATCH_TOKENS tokens or CPU_MIN_WINDOWS windows;
- a cpu profile that scores fewer than every window of the span at some length.
"""
import copy
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import catlib
from catlib.measure import evaluate
from catlib.measure.evaluate import cross_entropy, leak_score, n_windows, text_span
from catlib.measure.extrapolation import position_ce
from catlib.nn.decay_prior import far_head_slope

V = 13
T_TRAIN = 16
TINY = dict(vocab_size=V, d_model=16, n_heads=2, n_freq=4, variant="causal",
            solver="rk4-classic", solver_steps=1, dropout=0.0, train_length=T_TRAIN)
KERNELS = [dict(kernel="absolute"), dict(kernel="kerple-prior"), dict(kernel="fire"),
           dict(kernel="alibi-prior", far_heads=1), dict(kernel="kerple-log"),
           dict(kernel="alibi-buckets"), dict(kernel="content"), dict(kernel="relative")]
EPS32 = torch.finfo(torch.float32).eps


def reuse():
    """The names of catlib.nn.reused_plans, imported where a test uses them (so that the
    tests that do not can run against the code before it, and fail there on an assertion)."""
    from catlib.nn.reused_plans import evaluation_plans, plan_for, plan_reuse
    return evaluation_plans, plan_for, plan_reuse


def tiny_cat(seed: int = 0, **options) -> catlib.CAT:
    torch.manual_seed(seed)
    model = catlib.CAT(catlib.CATConfig(**{**TINY, **options}))
    with torch.no_grad():      # kernels away from their zero initialisation
        for name, p in model.named_parameters():
            if "kernels" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("options", KERNELS, ids=lambda o: o["kernel"])
def test_an_evaluation_builds_each_plan_once_per_length(options, count_plans):
    model = tiny_cat(**options, blocks=2)
    calls = count_plans(model)
    val = torch.randint(V, (2000,))
    r = cross_entropy(model, val, 20, eval_windows=40, batch_tokens=100)   # 8 passes
    assert r["windows"] == 40
    assert calls == [20, 20], calls                  # one plan per block, not one per pass
    calls.clear()
    position_ce(model, val, 50, n_windows=6)         # one window a pass
    assert calls == [50, 50], calls
    calls.clear()
    leak_score(model, V, length=24)                  # five passes at one length
    assert calls == [24, 24], calls


@pytest.mark.parametrize("options", KERNELS, ids=lambda o: o["kernel"])
def test_kept_plans_give_the_numbers_of_plans_built_per_pass(options):
    _, _, plan_reuse = reuse()
    model = tiny_cat(**options)
    val = torch.randint(V, (3000,))
    for length in (8, 40):
        with plan_reuse(False):
            built = cross_entropy(model, val, length, eval_windows=30, batch_tokens=3 * length)
        kept = cross_entropy(model, val, length, eval_windows=30, batch_tokens=3 * length)
        assert kept["window_ce"] == built["window_ce"] and kept["ce"] == built["ce"]


def test_a_kept_plan_is_rebuilt_when_the_weights_or_settings_change():
    evaluation_plans, plan_for, plan_reuse = reuse()
    model = tiny_cat(kernel="alibi-prior", far_heads=1).eval()
    attn = model.blocks[0].attn
    x = torch.randint(V, (2, 40))

    def fresh():
        with plan_reuse(False), torch.no_grad():
            return model(x)[0]
    with torch.no_grad(), evaluation_plans():
        first = plan_for(attn, 40, x.device, x.dtype)
        assert plan_for(attn, 40, x.device, x.dtype) is first            # kept
        assert plan_for(attn, 41, x.device, x.dtype) is not first        # another length
        coeffs = attn.kernels.residual.coeffs
        coeffs.add_(0.5)                                                 # in place
        assert torch.equal(model(x)[0], fresh())
        with far_head_slope(model, 0.0):                                 # a setting
            assert torch.equal(model(x)[0], fresh())
        assert torch.equal(model(x)[0], fresh())
        model.load_state_dict(tiny_cat(seed=1, kernel="alibi-prior", far_heads=1).state_dict())
        assert torch.equal(model(x)[0], fresh())
        model.double().float()                                           # new tensors
        assert torch.equal(model(x)[0], fresh())
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    with evaluation_plans():
        with torch.no_grad():
            model(x)
        loss = model(x)[0].square().mean()                               # with grad: built
        loss.backward()
        opt.step()                                                       # an optimiser step
        with torch.no_grad():
            assert torch.equal(model(x)[0], fresh())


def test_nothing_is_kept_outside_a_scope_or_with_grad():
    evaluation_plans, plan_for, _ = reuse()
    model = tiny_cat(kernel="kerple-prior")
    attn = model.blocks[0].attn
    with torch.no_grad():
        assert plan_for(attn, 12, "cpu", torch.float32) is not plan_for(attn, 12, "cpu", torch.float32)
    with evaluation_plans():
        assert plan_for(attn, 12, "cpu", torch.float32) is not plan_for(attn, 12, "cpu", torch.float32)
        with torch.no_grad():
            kept = plan_for(attn, 12, "cpu", torch.float32)
            assert plan_for(attn, 12, "cpu", torch.float32) is kept
    with torch.no_grad(), evaluation_plans():
        assert plan_for(attn, 12, "cpu", torch.float32) is not kept      # the scope's own


def _step(model, x, y):
    """One training step's loss and gradients (penalty included), the trainer's way."""
    model.train()
    logits, pen = model(x, penalty=True)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)) + 0.1 * pen
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("options", KERNELS[:4] + [dict(baseline="sinusoidal"),
                                                   dict(baseline="alibi")],
                         ids=lambda o: o.get("kernel", o.get("baseline")))
def test_a_training_step_is_the_same_bit_for_bit_after_an_evaluation(options):
    evaluation_plans, _, _ = reuse()
    if "baseline" in options:
        torch.manual_seed(0)
        cfg = catlib.CATConfig(**TINY, baseline_positions=options["baseline"])
        model = catlib.Baseline(cfg)
    else:
        model = tiny_cat(**options)
    twin = copy.deepcopy(model)
    x, y = torch.randint(V, (4, 24)), torch.randint(V, (4, 24))
    loss, grads = _step(model, x, y)
    cross_entropy(twin, torch.randint(V, (3000,)), 24, eval_windows=20, batch_tokens=48)
    with evaluation_plans():      # even inside a scope: with grad, nothing is kept
        twin_loss, twin_grads = _step(twin, x, y)
    assert torch.equal(loss, twin_loss)
    assert grads.keys() == twin_grads.keys()
    assert all(torch.equal(grads[n], twin_grads[n]) for n in grads)


def test_the_sinusoidal_baseline_writes_no_causal_mask_when_evaluating(corpus):
    torch.manual_seed(0)
    model = catlib.Baseline(catlib.CATConfig(**{**TINY, "vocab_size": len(corpus.vocab)}))
    built = []
    real = nn.Transformer.generate_square_subsequent_mask

    def counted(length, *args, **kwargs):
        built.append(length)
        return real(length, *args, **kwargs)
    with mock.patch.object(nn.Transformer, "generate_square_subsequent_mask", counted):
        r = cross_entropy(model, corpus.val, 300, eval_windows=4, batch_tokens=300)
        assert built == []                       # no [T, T] mask per pass
        x = corpus.val[:300][None]
        with torch.no_grad():
            evaluated = model.eval()(x)[0]
        trained = model(x)[0]                    # with grad: the mask it always built
        assert built == [300]
    assert torch.equal(evaluated, trained.detach()) and r["windows"] == 4


def test_passes_on_the_cpu_are_sized_for_its_cache():
    seen = []

    class Recorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            seen.append(tuple(tokens.shape))
            return torch.zeros(*tokens.shape, V) + 0 * self.w, torch.zeros(())
    for length, windows in ((128, 16), (512, 8), (1024, 8), (5000, 1)):
        seen.clear()
        r = cross_entropy(Recorder(), torch.randint(V, (120_000,)), length, eval_windows=820,
                          device="cpu")
        assert max(seen) == (windows, length), (length, max(seen))   # at 128: not 256
        assert sum(s[0] for s in seen) == r["windows"]
    assert evaluate.windows_per_batch(128, device="cuda") == 256   # elsewhere: batch_tokens
    assert evaluate.windows_per_batch(128, batch_tokens=1, device="cpu") == 1


@pytest.mark.parametrize("name", ["causal CAT", "KERPLE-prior CAT", "ALiBi baseline"])
def test_passes_sized_for_the_cpu_give_the_same_ce_within_float32(corpus, name):
    from catlib.book.profiles import experiment
    from catlib.experiment.rows import ROWS, row_configs

    ex = experiment("smoke")
    cfg, _ = row_configs(ROWS[name], ex, 0)
    torch.manual_seed(0)
    model = (catlib.CAT if ROWS[name].is_cat else catlib.Baseline)(cfg)
    val = corpus.val[:20_000]
    for length in (32, 256):
        small = cross_entropy(model, val, length, eval_windows=64, batch_tokens=32768)
        with mock.patch.object(evaluate, "CPU_BATCH_TOKENS", 10**9):
            large = cross_entropy(model, val, length, eval_windows=64, batch_tokens=32768)
        # float32 logits summed in float64: a few rounding steps of each logit at most
        tol = 64 * EPS32 * large["ce"]
        assert abs(small["ce"] - large["ce"]) <= tol
        assert max(abs(a - b) for a, b in zip(small["window_ce"], large["window_ce"])) <= tol


def test_the_cpu_profile_scores_every_window_of_the_span_at_every_length(tiny_path):
    from catlib.book.profiles import PROFILES, experiment
    from catlib.data import load_corpus

    ev = experiment("cpu").evaluation
    n_val = len(load_corpus(tiny_path, split="90/10").val)
    span = text_span(n_val, ev.span_length)
    for L in ev.lengths:
        cap = ev.curve_windows if L == max(ev.lengths) else ev.eval_windows
        assert n_windows(n_val, L, cap, ev.span_length) == span // L, L
    assert [span // L for L in ev.lengths] == [820, 205, 102, 21]
    for notebook in ("05_training", "06_context_length", "08_beyond", "09_using_context",
                     "10_equal_compute"):
        params = PROFILES["cpu"][notebook]
        assert params["eval_windows"] >= span // min(params["lengths"]), notebook
