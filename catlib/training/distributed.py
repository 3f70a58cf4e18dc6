"""Data-parallel training under torchrun: process group, ranks, batch slicing, loss means.

``torchrun --nproc_per_node N -m catlib train ...`` sets ``WORLD_SIZE`` (and ``RANK``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); :func:`setup` then starts the process
group (NCCL on CUDA, device ``cuda:LOCAL_RANK``; gloo on the CPU) with a timeout of
``CATLIB_DDP_TIMEOUT`` seconds (default 120), so that a rank that dies stops the others.

``--batch`` is the global batch: every rank draws the same batch from the same sampler
state and trains on its contiguous slice of rows (:func:`shard`); DistributedDataParallel
averages the gradients, and the reported losses are the global-batch means (:func:`mean`).
CAT's Sobolev penalty is a parameter term, the same on every rank, so the average over the
ranks counts it once. On the CPU the dropout masks of the forward pass are those one
process draws for the global batch (:func:`consistent_dropout`), so that, with a
fixed-step solver (rk4-classic, midpoint, euler: no adjoint, the backward pass reuses the forward's
masks), the per-step losses do not depend on N, within float rounding. With dopri5 they
do: its adaptive steps follow each process's slice, and with the adjoint and dropout
inside the dynamics (the published CAT) its backward solve draws new masks outside that
mode; nor is the mode active on CUDA or MPS, where dropout draws per process.

Without ``WORLD_SIZE > 1`` nothing here does anything: no process group, the same numbers.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

TIMEOUT_ENV = "CATLIB_DDP_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
_device: torch.device | None = None  # this rank's device (collectives of NCCL live on it)


def launched_size() -> int:
    """The world size torchrun announced (``WORLD_SIZE``; 1 without torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def active() -> bool:
    """Whether a process group of more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Rank 0, the only one that writes the run directory and prints."""
    return rank() == 0


def timeout() -> float:
    """Seconds a collective waits for the other ranks (``CATLIB_DDP_TIMEOUT``, default 120)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {text!r}")
    return value


def check_batch(batch: int) -> None:
    """ValueError unless the global ``batch`` splits evenly over the processes."""
    n = world_size() if active() else launched_size()
    if n > 1 and batch % n:
        raise ValueError(f"batch must be divisible by the {n} processes of torchrun (it is "
                         f"the global batch, split over them), got {batch}")


def setup(device: torch.device) -> torch.device:
    """Start the process group when torchrun launched this process; return its device.

    CUDA: ``cuda:LOCAL_RANK`` and NCCL; CPU: gloo. Without torchrun: ``device`` unchanged.
    """
    global _device
    if launched_size() == 1:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ValueError(f"torchrun needs --device cuda or cpu, got {device.type}")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=timeout()))
    _device = device
    return device


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard(t: torch.Tensor) -> torch.Tensor:
    """This rank's contiguous slice of the rows of the global batch ``t`` [B, ...]."""
    if not active():
        return t
    rows = t.shape[0] // world_size()
    return t[rank() * rows:(rank() + 1) * rows]


def mean(*values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Global-batch means of per-rank means (equal rows on every rank): the all-reduced
    average, detached; without a process group the values themselves."""
    if not active():
        return values
    buf = torch.stack([v.detach().double() for v in values])
    dist.all_reduce(buf)
    buf /= world_size()
    return tuple(b.to(v.dtype) for b, v in zip(buf, values))


def any_rank(flag: bool) -> bool:
    """True on every rank if ``flag`` is true on any (e.g. the budget is spent)."""
    if not active():
        return flag
    t = torch.tensor([int(flag)], device=_device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` in DistributedDataParallel (gradients averaged over the ranks)."""
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


# ---------------------------------------------------------------- rank 0 decides

def announce(decision: dict) -> None:
    """Rank 0: tell the other ranks whether (and where) to train, or the error to raise."""
    if active():
        dist.broadcast_object_list([decision], src=0)


def decision() -> dict:
    """The other ranks: wait for rank 0's :func:`announce`."""
    box = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class Gate:
    """Rank 0's one go/no-go: :meth:`open` (go, with what to do) or :meth:`refuse` (the
    error, re-raised by every rank); the first call counts, the others do nothing."""

    def __init__(self):
        self.sent = not active() or not is_main()

    def open(self, info: dict) -> None:
        if not self.sent:
            self.sent = True
            announce(info)

    def refuse(self, err: BaseException) -> None:
        self.open({"action": "error", "kind": type(err).__name__, "message": str(err)})


# ---------------------------------------------------------------- dropout of one process

def _global_rows_bernoulli_(noise: torch.Tensor, p: float = 0.5, **kwargs) -> torch.Tensor:
    """``noise.bernoulli_(p)`` with this rank's rows of the mask one process draws for the
    global batch: rows [rank * B_r, (rank + 1) * B_r) of a [B_r * world_size, ...] draw.

    The mask is drawn in memory order (dropout's ``empty_like`` keeps the input's strides),
    so the global one is drawn in the memory layout of ``noise`` (e.g. [T, B, D] behind a
    transposed [B, T, D]), and its slice is exactly what one process would have used.
    """
    if noise.dim() == 0 or kwargs.get("generator") is not None:
        return noise.bernoulli_(p, **kwargs)
    rows = noise.shape[0]
    order = sorted(range(noise.dim()), key=lambda d: -noise.stride(d))  # outermost first
    shape = [rows * world_size() if d == 0 else noise.shape[d] for d in order]
    full = torch.empty(shape, dtype=noise.dtype, device=noise.device).bernoulli_(p)
    full = full.permute([order.index(d) for d in range(noise.dim())])
    return noise.copy_(full[rank() * rows:(rank() + 1) * rows])


class _GlobalBatchMasks(TorchDispatchMode):
    """Every dropout mask drawn while the mode is on is this rank's slice of the global one.

    Dropout on the CPU, whichever way it is reached (``nn.Dropout``, ``F.dropout``, the
    attention weights of ``nn.MultiheadAttention`` and of ``scaled_dot_product_attention``),
    draws its mask with one ``aten.bernoulli_.float`` on a tensor shaped like its input,
    rows first; the mode intercepts that one operation. A dispatch mode lives on this
    thread's stack while the ``with`` block runs: nothing of torch is replaced, and other
    threads and other models are not affected.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.bernoulli_.float:
            return _global_rows_bernoulli_(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def consistent_dropout(device: torch.device):
    """During a training forward on the CPU under torchrun: every dropout mask is the slice
    of rows of the mask one process would draw for the global batch (the RNG is in the same
    state on every rank), so the losses match one process. Elsewhere: nothing changes."""
    if not active() or device.type != "cpu":
        yield
        return
    with _GlobalBatchMasks():
        yield


def fault_point(step: int) -> None:
    """Fault injection for tests: ``CATLIB_FAULT_RANK="<rank>:<step>"`` sends SIGKILL to
    that rank (not 0) after that 0-based step. Without the variable: nothing."""
    spec = os.environ.get("CATLIB_FAULT_RANK")
    if spec and spec == f"{rank()}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)
