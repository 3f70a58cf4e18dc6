"""DDP's consistent dropout on the CPU (:func:`catlib.training.distributed.consistent_dropout`),
checked in one process with the ranks simulated: each rank's masks are its rows of the
masks one process draws for the global batch, and nothing of torch is replaced."""
import threading

import pytest
import torch
import torch.nn.functional as F

from catlib.training import distributed

WORLD = 2


@pytest.fixture
def as_rank(monkeypatch):
    """Simulate rank ``r`` of a group of WORLD processes (no process group)."""
    def enter(r):
        monkeypatch.setattr(distributed, "active", lambda: True)
        monkeypatch.setattr(distributed, "world_size", lambda: WORLD)
        monkeypatch.setattr(distributed, "rank", lambda: r)
    return enter


def _per_rank(as_rank, fn, global_input):
    """fn(this rank's rows) for each rank, every rank from the same RNG state."""
    rows = global_input.shape[0] // WORLD
    outs = []
    for r in range(WORLD):
        as_rank(r)
        torch.manual_seed(0)
        with distributed.consistent_dropout(torch.device("cpu")):
            outs.append(fn(global_input[r * rows:(r + 1) * rows]))
    return torch.cat(outs)


def test_dropout_masks_are_the_rows_of_the_global_one(as_rank):
    x = torch.randn(4, 6, 8)
    torch.manual_seed(0)
    one = F.dropout(x, 0.3)
    assert torch.equal(_per_rank(as_rank, lambda t: F.dropout(t, 0.3), x), one)
    drop = torch.nn.Dropout(0.3)
    assert torch.equal(_per_rank(as_rank, drop, x), one)


def test_transposed_inputs_and_attention_dropout(as_rank):
    xt = torch.randn(6, 4, 8).transpose(0, 1)           # [B, T, D] behind a [T, B, D] layout
    torch.manual_seed(0)
    one = F.dropout(xt, 0.3)
    assert torch.equal(_per_rank(as_rank, lambda t: F.dropout(t, 0.3), xt), one)

    q = torch.randn(4, 2, 5, 8)                           # [B, H, T, Dh]
    sdpa = lambda t: F.scaled_dot_product_attention(t, t, t, dropout_p=0.5)  # noqa: E731
    torch.manual_seed(0)
    one = sdpa(q)
    assert torch.allclose(_per_rank(as_rank, sdpa, q), one, atol=1e-6)

    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = torch.randn(4, 5, 8)
    for need_weights in (False, True):
        f = lambda t: mha(t, t, t, need_weights=need_weights)[0]  # noqa: E731
        torch.manual_seed(0)
        one = f(x)
        assert torch.allclose(_per_rank(as_rank, f, x), one, atol=1e-6)


def test_nothing_of_torch_is_replaced_and_other_threads_are_untouched(as_rank):
    as_rank(1)
    before = (F.dropout, F.scaled_dot_product_attention, torch.Tensor.bernoulli_)
    seen = {}

    def other_thread():
        torch.manual_seed(0)
        seen["other"] = F.dropout(torch.ones(2, 3), 0.5)

    with distributed.consistent_dropout(torch.device("cpu")):
        assert (F.dropout, F.scaled_dot_product_attention, torch.Tensor.bernoulli_) == before
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    torch.manual_seed(0)
    assert torch.equal(seen["other"], F.dropout(torch.ones(2, 3), 0.5))  # its own mask
