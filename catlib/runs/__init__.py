"""Run directories: one side-by-side training run and its evaluation, reusable and resumable.

- :mod:`.errors`     RunError, TrainingFailed, RunInterrupted, StorageError;
- :mod:`.faults`     fault injection for the fault suite (``CATLIB_FAULT``);
- :mod:`.files`      atomic writes, JSON files, checkpoint loading (``weights_only``);
- :mod:`.lock`       the run-directory lock (``fcntl.flock``, taken over from a dead holder);
- :mod:`.identity`   the config hash and the weights digest;
- :mod:`.run`        the directory layout, :class:`Run`, :func:`open_run`, loading weights;
- :mod:`.evaluation` :func:`evaluate_run`, eval.json and eval.csv, reuse of a stored one;
- :mod:`.stored`     :func:`stored_with_run`: a value computed once for a run's weights and code;
                     :func:`stored_only`: read what is stored, compute nothing (:class:`NotStored`);
- :mod:`.training`   :func:`train_run`: reuse, resume or start afresh, train, checkpoint;
- :mod:`.branches`   shorter runs branched from a longer one before its decay;
- :mod:`.follower`   the other ranks under torchrun, training beside rank 0.
"""
from .errors import RunError, RunInterrupted, StorageError, TrainingFailed
from .evaluation import eval_settings, evaluate_run
from .faults import _FAULT_COUNTS as _FAULT_COUNTS  # tests reset it
from .faults import _fault_point as _fault_point  # benchmarks/faults.py names it
from .files import atomic_save, atomic_write_text, load_checkpoint
from .identity import config_hash, weights_digest
from .lock import run_lock
from .run import RESULT_FILES, RUN_PACKAGES, WEIGHT_FILES, Run, open_run
from .stored import NotStored, check_split, stored_only, stored_with_run
from .training import train_run

__all__ = ["NotStored", "RESULT_FILES", "RUN_PACKAGES", "WEIGHT_FILES", "Run", "RunError", "RunInterrupted",
           "StorageError", "TrainingFailed", "atomic_save", "atomic_write_text", "config_hash",
           "check_split", "eval_settings", "evaluate_run", "load_checkpoint", "open_run", "run_lock",
           "stored_only", "stored_with_run", "train_run", "weights_digest"]
