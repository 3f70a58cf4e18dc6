"""Host synchronisations of one training step (what makes a small model slow on a GPU).

Every read of a tensor's value by the host (``item``, ``tolist``, ``bool``, ``float``,
``int``) is counted over one :meth:`SideBySide.train_step` of CAT and its baseline at tiny
sizes, on the CPU (the calls are the same on every device). The optimisers' step counters
are left out: torch keeps them on the host on every device (AdamW without ``capturable``),
so reading them waits for nothing.
"""
import contextlib

import pytest
import torch

from catlib.nn.config import CATConfig
from catlib.training.loop import SideBySide, TrainConfig

TINY = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=2)
READS = ("item", "tolist", "__bool__", "__float__", "__int__")
MAX_SYNCS = 2  # per training step: the step's losses in one read (and one to spare)


@contextlib.contextmanager
def count_reads(trainer: SideBySide):
    """``{"model": n, "loop": n}``: host reads inside the models (forward passes and
    ``loss.backward``) and outside them (the training loop), counted while the block runs."""
    counts = {"model": 0, "loop": 0}
    inside = [0]
    host_counters = {id(s["step"]) for opt in (trainer.opt_cat, trainer.opt_base)
                     if opt is not None for s in opt.state.values()}
    originals = {name: getattr(torch.Tensor, name) for name in READS}
    original_backward = torch.Tensor.backward

    def counting(name):
        def read(self, *args, **kwargs):
            if id(self) not in host_counters:
                counts["model" if inside[0] else "loop"] += 1
            return originals[name](self, *args, **kwargs)
        return read

    def backward(self, *args, **kwargs):
        inside[0] += 1
        try:
            return original_backward(self, *args, **kwargs)
        finally:
            inside[0] -= 1

    def enter(module, args):
        inside[0] += 1

    def leave(module, args, output):
        inside[0] -= 1

    hooks = [h for m in (trainer.cat, trainer.base) if m is not None
             for h in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))]
    for name in READS:
        setattr(torch.Tensor, name, counting(name))
    torch.Tensor.backward = backward
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        torch.Tensor.backward = original_backward
        for h in hooks:
            h.remove()


def _step_counts(corpus, variant: str) -> dict:
    t = SideBySide(CATConfig(variant=variant, **TINY),
                   TrainConfig(train_steps=3, batch=2, seq=16), corpus.train)
    t.train_step()           # the first step creates the optimisers' state
    with count_reads(t) as counts:
        t.train_step()
    return counts


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_training_loop_reads_the_host_once_per_step(corpus, variant):
    counts = _step_counts(corpus, variant)
    assert counts["loop"] == 1, counts  # the losses of both models and their verdict: one read


@pytest.mark.parametrize("variant", ["causal", "published"])
def test_a_training_step_makes_at_most_two_host_synchronisations(corpus, variant):
    counts = _step_counts(corpus, variant)
    assert counts["model"] + counts["loop"] <= MAX_SYNCS, counts


def test_the_counter_sees_a_read(corpus):
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=3, batch=2, seq=16), corpus.train)
    with count_reads(t) as counts:
        float(torch.ones(()))
        bool(torch.ones(()))
    assert counts == {"model": 0, "loop": 2}
