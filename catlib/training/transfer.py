"""Host -> device copies of the training batches (:class:`DeviceInputs`).

On CUDA each step's inputs x, y [B, seq] go through pinned host buffers and into device
buffers, both made once and reused from step to step, the host -> device copy issued
without blocking the host (``non_blocking=True``): the host goes on to launch the forward
pass while the copy runs. Elsewhere (the CPU, MPS) the tensors are moved with
``.to(device)`` as they always were; on the CPU that returns the tensor itself.

The values are the batch's own either way: only where they are staged changes.
"""
from __future__ import annotations

from typing import Iterable

import torch


class StagedCopy:
    """The reused buffers of one input: ``host`` (pinned where ``pin``) and ``on_device``,
    of ``like``'s shape and dtype. :meth:`copy` writes a tensor of that shape and dtype
    into ``host``, then copies ``host`` to ``on_device`` without blocking the host, and
    returns ``on_device`` (the same tensor at every call: each call overwrites the last
    one's values, in stream order on CUDA, after the kernels that read them).

    On CUDA an event recorded after each copy is waited on before the next one writes
    ``host``, so that the host never overwrites a buffer that a copy still reads.
    """

    def __init__(self, like: torch.Tensor, device: torch.device, pin: bool):
        self.device = device
        self.host = torch.empty(like.shape, dtype=like.dtype, pin_memory=pin)
        self.on_device = torch.empty(like.shape, dtype=like.dtype, device=device)
        self.done = torch.cuda.Event() if device.type == "cuda" else None

    def fits(self, t: torch.Tensor) -> bool:
        return t.shape == self.host.shape and t.dtype == self.host.dtype

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        if self.done is not None:
            self.done.synchronize()      # the previous copy out of ``host`` has finished
        self.host.copy_(t)
        self.on_device.copy_(self.host, non_blocking=True)
        if self.done is not None:
            self.done.record(torch.cuda.current_stream(self.device))
        return self.on_device


class DeviceInputs:
    """``inputs(tensors)``: the host tensors ``tensors`` on ``device``, as a tuple.

    ``staged`` (default: ``device`` is CUDA): through :class:`StagedCopy` buffers, one per
    position in ``tensors``, remade when a tensor's shape or dtype changes; pinned host
    buffers where ``pin`` (default: ``staged`` on CUDA). Otherwise ``t.to(device)`` for
    each tensor, the plain move (a no-op on the CPU). ``staged=True, pin=False`` on the
    CPU runs the staging itself without CUDA (the tests do).

    A staged result is a reused buffer: it holds its values until the next call only.
    """

    def __init__(self, device, staged: bool | None = None, pin: bool | None = None):
        self.device = torch.device(device)
        is_cuda = self.device.type == "cuda"
        self.staged = is_cuda if staged is None else bool(staged)
        self.pin = (self.staged and is_cuda) if pin is None else bool(pin)
        self.buffers: list[StagedCopy] = []

    def __call__(self, tensors: Iterable[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        if not self.staged:
            return tuple(t.to(self.device) for t in tensors)
        out = []
        for i, t in enumerate(tensors):
            if i == len(self.buffers):
                self.buffers.append(StagedCopy(t, self.device, self.pin))
            elif not self.buffers[i].fits(t):
                self.buffers[i] = StagedCopy(t, self.device, self.pin)
            out.append(self.buffers[i].copy(t))
        return tuple(out)
