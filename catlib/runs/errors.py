"""The errors of run directories: each is one line that names the file or the cause and
says what to do next (the command line prints it and exits with its own code)."""
from __future__ import annotations


class RunError(RuntimeError):
    """Bad input about a run (its directory, config or checkpoint); one-line message."""


class TrainingFailed(RuntimeError):
    """Training stopped on a NaN or infinite loss; the last good checkpoint is kept."""


class RunInterrupted(RuntimeError):
    """Ctrl-C during training; a checkpoint of the last step boundary was saved."""


class StorageError(RuntimeError):
    """A run file could not be written (disk full, permissions); the previous version of
    the file is intact and the run resumes once the cause is fixed. One-line message."""
