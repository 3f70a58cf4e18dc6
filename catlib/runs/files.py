"""Atomic files: how every file of a run directory is written and read.

Every file is written atomically (temporary file beside it, fsync, ``os.replace``, fsync
of the directory, with the umask's mode): a crash at any moment leaves the previous
version or the new one, never a mix; a temporary file left by a killed writer is
recognised by :func:`_is_temporary` (and removed by :func:`catlib.runs.lock.run_lock`).
A write that fails (disk full, permissions) raises StorageError naming the file.
Checkpoints are read with ``torch.load(weights_only=True)``; an unreadable JSON file or
checkpoint raises RunError naming it.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import torch

from ..common.tensorfile import TensorFileError, load_tensors
from .errors import RunError, StorageError
from .faults import _fault_point


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(mask)
    return mask


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, rename over ``path`` and
    fsync the directory: a crash leaves the previous file or the new one, never a mix.
    OSError (disk full, permissions) becomes StorageError naming the file."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 whatever the umask
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            _fault_point(path.name, tear=lambda: f.truncate(len(data) // 2))
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)
    except OSError as e:
        raise StorageError(f"cannot write {path} ({e.strerror or e}); its previous version, "
                           "if any, is intact; free some space or fix the permissions, "
                           "then run the command again") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _is_temporary(p: Path) -> bool:
    """A temporary file of :func:`_atomic_write` (left behind if the writer was killed)."""
    return p.name.startswith(".") and p.name.endswith(".tmp")


def atomic_save(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file in the same directory, then rename over ``path``:
    an interrupted write leaves the previous file intact."""
    buf = io.BytesIO()  # serialised first: a failing write is then a plain OSError
    torch.save(obj, buf)
    _atomic_write(Path(path), buf.getvalue())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic_write(Path(path), text.encode("utf-8"))


def _write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _read_json(path: Path, what: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"{path} is missing: {what}") from None
    except (OSError, ValueError) as e:
        raise RunError(f"cannot read {path} ({e.__class__.__name__}: {e}); {what}") from None


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """``torch.load(path, weights_only=True)`` (:func:`catlib.common.tensorfile.load_tensors`):
    tensors and plain containers only, so a crafted pickle cannot run code; a RunError
    names an unreadable or refused file."""
    try:
        return load_tensors(path, map_location)
    except FileNotFoundError:
        raise RunError(f"checkpoint {path} is missing; train the run first") from None
    except TensorFileError as e:
        if e.refused:
            raise RunError(f"cannot load checkpoint {path}: refused, {e} (catlib reads "
                           "checkpoints with weights_only=True so that a file cannot run code); "
                           "restore the file from a trusted copy, or retrain with --retrain") from None
        raise RunError(f"cannot load checkpoint {path} ({e}); retrain with --retrain or restore "
                       "the file") from None
