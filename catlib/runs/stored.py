"""Values stored with a run: computed once for the run's weights, code and settings,
then read back (a chapter and a rebuild reuse them)."""
from __future__ import annotations

import contextlib
import contextvars
import json
from typing import Callable

from .files import atomic_write_text
from .lock import run_lock
from .run import Run


def check_split(run: Run, corpus) -> None:
    """Refuse a corpus of another split than the run was trained on."""
    if corpus.split != run.train_config.split:
        raise ValueError(f"the corpus split {corpus.split!r} is not the run's "
                         f"({run.train_config.split!r}); load_corpus(split=...) to match")


_STORED_ONLY = contextvars.ContextVar("stored_only", default=False)


class NotStored(LookupError):
    """Under :func:`stored_only`: a run or a value of it that would have to be computed."""


@contextlib.contextmanager
def stored_only():
    """Within: read runs and their stored values only; :func:`stored_with_run` (and
    :func:`catlib.runs.train_run`) raise :class:`NotStored` instead of computing what is
    missing, before writing anything. A pool uses it to reuse finished runs in its own
    process, without starting a worker for them."""
    token = _STORED_ONLY.set(True)
    try:
        yield
    finally:
        _STORED_ONLY.reset(token)


def require_stored(what: str) -> None:
    """Raise :class:`NotStored` naming ``what`` when called under :func:`stored_only`."""
    if _STORED_ONLY.get():
        raise NotStored(what)


def stored_with_run(run: Run, name: str, ident: dict, compute: Callable[[], object]):
    """The value stored as ``name`` in the run directory if it was computed for ``ident``
    (weights, code, settings); else ``compute()``, stored atomically, then returned (under
    :func:`stored_only`: :class:`NotStored`)."""
    path = run.path / name
    if path.exists():
        try:
            stored = json.loads(path.read_text())
            if stored.get("ident") == ident:
                return stored["value"]
        except ValueError:
            pass                                     # unreadable: computed again below
    require_stored(f"{path}")
    value = compute()
    with run_lock(run.path):
        atomic_write_text(path, json.dumps({"ident": ident, "value": value}))
    return value
