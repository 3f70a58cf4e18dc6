"""The run-directory lock: one process at a time holds a run.

``fcntl.flock`` on ``<run>/lock``, which names the holder (pid, host, start, command)
and is emptied when it lets go. The kernel drops the flock of a process that dies, so a
lock left by a killed process is taken over; where flock is not supported the holder's
pid is checked instead (same host).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from .errors import RunError
from .files import _is_temporary

_HELD: dict[str, int] = {}  # run directories this process holds -> depth (re-entrant)


def _holder(fd: int) -> dict | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        return json.loads(text) if text.strip() else None
    except ValueError:
        return {"pid": "?", "host": "?", "started": "?"}


def _alive(holder: dict) -> bool:
    """Whether the holder process still runs (only knowable on this host)."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except (ProcessLookupError, ValueError, KeyError, TypeError):
        return False
    except PermissionError:
        pass
    return True


@contextlib.contextmanager
def run_lock(path: Path, say: Callable[[str], None] | None = None):
    """Hold the run directory ``path`` for this process (``path/lock``, fcntl.flock).

    Another holder: RunError naming its pid, host and start time. The kernel drops the
    flock of a process that dies, so a lock file still naming a holder whose lock is gone
    was left by a killed process: it is taken over (and ``say`` tells). Taking the lock
    removes the temporary files of writes cut short by a crash. Re-entrant within a process. Where flock is not supported the holder's pid is checked instead (same host).
    """
    key = str(Path(path).resolve())
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    fd = _acquire(path, say or (lambda s: print(s, file=sys.stderr)))
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # empty: released cleanly (the file stays: no unlink race)
        os.close(fd)


def _acquire(path: Path, say: Callable[[str], None]) -> int:
    """Open ``path/lock`` and take it: the file descriptor that holds it. RunError if the
    file cannot be created or another live process holds it (the descriptor is closed)."""
    lock = Path(path) / "lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise RunError(f"cannot create {lock} ({e.strerror}); check the permissions of "
                       "the run directory") from None
    try:
        holder = _other_holder(fd)
        if holder is not None:
            raise RunError(f"{path} is in use by pid {holder.get('pid')} on {holder.get('host')} "
                           f"since {holder.get('started')}; wait for it to end (or stop it), "
                           "then run the command again")
        _claim(fd, path, say)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _other_holder(fd: int) -> dict | None:
    """flock the lock file ``fd`` without waiting: None if taken, else who holds it. Where
    flock is not supported, the holder named in the file if it still runs, else None."""
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder = None
    except BlockingIOError:
        holder = _holder(fd) or {"pid": "?", "host": "?", "started": "?"}
    except (ImportError, OSError):  # no flock here (some network file systems)
        holder = _holder(fd)
        holder = holder if holder and _alive(holder) else None
    return holder


def _claim(fd: int, path: Path, say: Callable[[str], None]) -> None:
    """Write this process into the lock file ``fd`` (telling of a previous holder, which
    has ended) and remove the temporary files of writes cut short by a crash."""
    previous = _holder(fd)
    if previous:
        say(f"note: taking over the lock of {path} left by pid {previous.get('pid')} on "
            f"{previous.get('host')} (started {previous.get('started')}), which has ended")
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:300]}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
    for tmp in filter(_is_temporary, Path(path).iterdir()):  # writes cut short by a crash
        tmp.unlink(missing_ok=True)
