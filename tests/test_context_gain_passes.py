"""The context gain's scoring costs what its FLOPs cost (issue 61 item 3): the sliding
reading's chunks go through the model in passes sized like any evaluation's batches, and a
plan that depends on positions alone is built once per length, with the numbers of one
batch of every chunk within float32 rounding."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import catlib
from catlib.measure.context_gain import context_gain, sliding_plan
from catlib.measure.evaluate import windows_per_batch
from catlib.nn.config import CATConfig

V = 11
EPS32 = torch.finfo(torch.float32).eps


def _cat(blocks: int = 1) -> catlib.CAT:
    torch.manual_seed(0)
    return catlib.CAT(CATConfig(vocab_size=V, d_model=16, n_heads=2, n_freq=4, quad_nodes=8,
                                blocks=blocks, solver="rk4-classic", solver_steps=1,
                                variant="causal", dropout=0.0))


def _val(n: int) -> torch.Tensor:
    return torch.randint(V, (n,), generator=torch.Generator().manual_seed(1))


def _record_batches(model) -> list:
    """Wraps ``model.forward``; returns the list of the batch sizes it was called with."""
    sizes, forward = [], model.forward

    def counted(tokens, *args, **kwargs):
        sizes.append(tuple(tokens.shape))
        return forward(tokens, *args, **kwargs)
    model.forward = counted
    return sizes


def test_the_sliding_chunks_go_in_passes_of_windows_per_batch():
    model, val, T, L = _cat(), _val(1300), 32, 600
    chunks = len(sliding_plan(L, T).starts)
    per_pass = windows_per_batch(T, device="cpu")
    assert chunks > per_pass                         # else one batch is one pass
    sizes = _record_batches(model)
    context_gain(model, val, length=L, train_length=T, eval_windows=1, device="cpu")
    sliding = [s for s in sizes if s[1] == T]
    assert max(b for b, _ in sliding) <= per_pass, sizes
    assert sum(b for b, _ in sliding) == chunks
    assert sizes.count((1, L)) == 1                  # the full reading: one window, one pass


def test_each_plan_is_built_once_per_length(count_plans):
    model, val, T, L = _cat(blocks=2), _val(2000), 32, 600
    calls = count_plans(model)
    r = context_gain(model, val, length=L, train_length=T, eval_windows=2, device="cpu")
    assert r["windows"] == 2
    # Each block's plan at L once and at T once: not once per window nor once per pass.
    assert calls == [L, L, T, T], calls


def test_passes_give_the_numbers_of_one_batch_within_float32():
    model, val, T, L = _cat(), _val(1300), 32, 600
    r = context_gain(model, val, length=L, train_length=T, eval_windows=1, device="cpu")
    plan, window = sliding_plan(L, T), val[:L + 1]
    with torch.inference_mode():
        logits = model.eval()(window[:-1][plan.positions])[0].double()          # [C, T, V]
        ce = F.cross_entropy(logits[plan.scored], window[1:][plan.positions][plan.scored],
                             reduction="none")
    assert torch.allclose(r["sliding_positions"], ce, rtol=0, atol=1e3 * EPS32)
