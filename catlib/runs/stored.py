"""Values stored with a run: computed once for the run's weights, code and settings,
then read back (a chapter and a rebuild reuse them)."""
from __future__ import annotations

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


def stored_with_run(run: Run, name: str, ident: dict, compute: Callable[[], object]):
    """The value stored as ``name`` in the run directory if it was computed for ``ident``
    (weights, code, settings); else ``compute()``, stored atomically, then returned."""
    path = run.path / name
    if path.exists():
        try:
            stored = json.loads(path.read_text())
            if stored.get("ident") == ident:
                return stored["value"]
        except ValueError:
            pass                                     # unreadable: computed again below
    value = compute()
    with run_lock(run.path):
        atomic_write_text(path, json.dumps({"ident": ident, "value": value}))
    return value
