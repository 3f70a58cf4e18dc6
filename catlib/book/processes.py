"""Ctrl-C while a notebook runs, and the process tree of the runner (psutil or /proc).

The kernel runs in a session of its own, so a terminal's Ctrl-C never reaches it: the
runner kills the kernel and its workers itself (:func:`_stop_kernel_on_ctrl_c`).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path


@contextlib.contextmanager
def _stop_kernel_on_ctrl_c(interrupted: list):
    """Ctrl-C while a notebook runs: kill the kernel (and its workers) at once, then let the
    caller raise KeyboardInterrupt. The kernel runs in a session of its own, so a terminal's
    Ctrl-C never reaches it, and papermill would otherwise wait for the running cell."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(*_):
        interrupted.append(True)
        children = _descendants(os.getpid())
        if not children:
            raise KeyboardInterrupt
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _descendants(pid: int) -> list[int]:
    """Process ids of every descendant of ``pid``.

    From psutil (the book extra) on every OS; without it, from /proc, which macOS lacks.
    Where neither is there the list is empty, and Ctrl-C only raises KeyboardInterrupt
    in the runner instead of killing the kernel first.
    """
    try:
        import psutil   # imported here: the library itself does not need it
    except ImportError:
        return _descendants_from_proc(pid)
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:   # pid has exited
        return []


def _descendants_from_proc(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """:func:`_descendants` read from ``proc`` (Linux's /proc); empty where there is none."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
