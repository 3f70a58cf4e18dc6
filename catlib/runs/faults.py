"""Fault injection for the fault suite (tests/test_faults.py, benchmarks/faults.py): a
write of a run file torn in half, then a crash (SIGKILL) or a full disk (ENOSPC).

Every write of a run file passes :func:`_fault_point` (the atomic writes of
:mod:`catlib.runs.files` and the metrics log of :mod:`catlib.runs.training`); without
``CATLIB_FAULT`` (always, outside tests) it does nothing.
"""
from __future__ import annotations

import collections
import errno
import os
import signal
from typing import Callable

_FAULT_COUNTS: collections.Counter = collections.Counter()


def _fault_point(name: str, tear: Callable[[], None] | None = None) -> None:
    """Fault injection for the fault suite (tests/test_faults.py, benchmarks/faults.py).

    With ``CATLIB_FAULT="<action>:<file name>:<n>"`` the n-th write of that file in this
    process is torn (``tear()``: half of it written) and then fails: action "kill" sends
    SIGKILL to this process (a crash), "enospc" raises OSError(ENOSPC) (a full disk).
    Without the variable (always, outside tests) it does nothing.
    """
    spec = os.environ.get("CATLIB_FAULT")
    if not spec:
        return
    action, target, n = spec.rsplit(":", 2)
    if target != name:
        return
    _FAULT_COUNTS[name] += 1
    if _FAULT_COUNTS[name] != int(n):
        return
    if tear:
        tear()
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
