"""The models' forward and backward passes read nothing back from the device.

A host synchronisation (``.item()``, ``bool(tensor)``, ``float(tensor)``, ``int(tensor)``,
``.tolist()``, a Python ``if`` on a tensor) stalls a GPU until its queue drains; invisible
on a CPU, it is what makes a small model slow on one. Counted here by wrapping those
methods of ``torch.Tensor`` for a forward + backward of each model family, with the
fixed-step solvers (dopri5's adaptive stepping reads its error estimate back by design:
torchdiffeq decides every step on the host, so it is not counted here).
"""
import contextlib

import pytest
import torch
import torch.nn.functional as F

import catlib
from catlib.nn.config import CATConfig

SIZES = dict(vocab_size=65, d_model=16, n_heads=2, n_freq=4, quad_nodes=8, blocks=2)
READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def counted_reads():
    """Count the calls of the Tensor methods that read a value back to the host."""
    calls = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(name, method):
        def counted(self, *args, **kwargs):
            calls.append(name)
            return method(self, *args, **kwargs)
        return counted

    for name, method in originals.items():
        setattr(torch.Tensor, name, wrap(name, method))
    try:
        yield calls
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


def _step(model, length=12):
    tokens = torch.randint(0, 65, (2, length + 1), generator=torch.Generator().manual_seed(0))
    logits, penalty = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 65), tokens[:, 1:].reshape(-1)) + penalty
    loss.backward()


CAT_CASES = [
    dict(variant="published", solver="rk4-classic", solver_steps=1),
    dict(variant="published", solver="euler", solver_steps=2),
    dict(variant="causal", kernel="absolute", solver="rk4-classic", solver_steps=1),
    dict(variant="causal", kernel="relative", solver="rk4-classic", solver_steps=1),
    dict(variant="causal", kernel="content", solver="rk4-classic", solver_steps=1,
         kernel_horizon=6.0),     # rows beyond the horizon too
    dict(variant="causal", kernel="alibi-prior", train_length=8, solver="rk4-classic",
         solver_steps=1),
    dict(variant="causal", kernel="kerple-prior", train_length=8, solver="euler",
         solver_steps=1),
]
BASE_CASES = [
    dict(variant="published"),
    dict(variant="causal"),
    dict(variant="causal", baseline_positions="rope"),
    dict(variant="causal", baseline_positions="alibi"),
    dict(variant="causal", baseline_positions="alibi", baseline_loops=2),
]


@pytest.mark.parametrize("kw", CAT_CASES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_cat_step_makes_no_host_sync(kw):
    torch.manual_seed(0)
    model = catlib.CAT(CATConfig(**SIZES, **kw))
    _step(model)   # the first pass fills the plan caches: counted too, below, for a new length
    for length in (12, 9):
        with counted_reads() as calls:
            _step(model, length)
        assert calls == [], (length, calls)


@pytest.mark.parametrize("kw", BASE_CASES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_baseline_step_makes_no_host_sync(kw):
    torch.manual_seed(0)
    model = catlib.Baseline(CATConfig(**SIZES, **kw))
    with counted_reads() as calls:
        _step(model)
    assert calls == []


def test_the_counter_counts():
    with counted_reads() as calls:
        x = torch.ones(2)
        x.sum().item(), bool(x[0]), float(x[0]), int(x[0]), x.tolist()
    assert calls == ["item", "__bool__", "__float__", "__int__", "tolist"]
