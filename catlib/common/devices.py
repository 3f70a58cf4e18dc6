"""The device a run, an audit or a page computes on: one name in, one torch.device out.

``"auto"`` picks CUDA, then MPS, then the CPU; a device that is unknown or absent from this
machine raises :class:`DeviceError` with one line that names the fix. The command line,
the run directory code, the audit and the book runner all resolve devices here.
"""
from __future__ import annotations

import contextlib

import torch

DEVICES = ("auto", "cpu", "cuda", "mps")


class DeviceError(ValueError):
    """An unknown device, or one this machine does not have."""


def mps_available() -> bool:
    """Whether this torch has the MPS backend and this machine can use it."""
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def resolve_device(name: str = "auto") -> torch.device:
    """"auto" -> cuda, then mps, then cpu; "cpu", "cuda", "cuda:1", "mps" as they are.
    An unknown or unavailable device raises DeviceError."""
    mps = mps_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise DeviceError(f"unknown device {name!r}; use auto, cpu, cuda or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: CUDA is not available here; use --device cpu or auto")
    if dev.type == "mps" and not mps:
        raise DeviceError("--device mps: MPS is not available here; use --device cpu or auto")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"unsupported device {name!r}; use auto, cpu, cuda or mps")
    return dev


def check_jobs(jobs: int | None) -> None:
    """``--jobs``, the runs trained at once (None: the default): ValueError unless >= 1. The
    book's command and the scale study's check it here (one rule, one message)."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")


@contextlib.contextmanager
def one_thread():
    """Within: torch computes on one thread, as a run of the book's pool is trained and
    scored, so that a score computed in another process runs the same kernels and gives the
    same bits; one-window forwards (the context gain's) also run much faster on one thread
    of a busy machine than on two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
