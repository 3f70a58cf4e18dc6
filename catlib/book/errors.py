"""The runner's errors: bad input or a failed build, and a notebook that raised."""
from __future__ import annotations

from pathlib import Path


class BookError(RuntimeError):
    """Bad input to the runner (profile, parameter, device, notebook name) or a failed build."""


class NotebookFailed(BookError):
    """A notebook raised: which one, which cell, why, and where the failed execution is."""

    def __init__(self, name: str, cell: str, cause: str, saved: Path | None):
        self.name, self.cell, self.cause, self.saved = name, cell, cause, saved
        where = f"; the failed execution is saved as {saved}" if saved else ""
        super().__init__(f"notebook {name} failed in {cell}: {cause}{where}")
