"""Run directories: one side-by-side training run and its evaluation, reusable and resumable.

``runs/<name>/`` holds

- ``config.json``   model config (resolved), training and evaluation settings, the code
                    fingerprint (:func:`catlib.provenance.code_fingerprint`), config hash;
- ``env.json``      package versions, python, platform, device, git commit (latest session);
- ``status.json``   starting | running | interrupted | stopped (budget) | failed (NaN/inf) | finished;
- ``metrics.jsonl`` one JSON object per training step (and per validation);
- ``checkpoint.pt`` the full training state at the last checkpoint (resume);
- ``cat.pt``, ``baseline.pt`` the final weights of the models trained;
- ``eval.json``, ``eval.csv`` the context-length table, bigram floor and leak scores, with
                    the step, a digest of the weights and the code fingerprint they belong to;
- ``lock``          who holds the run (pid, host, start); empty when nobody does.

Identity. The config hash covers the model config, the training settings that change the
weights, the corpus and the code fingerprint, so a change to the model, training, data or
evaluation code gives a new run instead of reusing one trained by other code. A finished
run whose hash matches is reused; its stored evaluation only if it was made by this code,
with the same settings, of the very weights on disk. ``evaluate_run`` refuses a run trained
by other code unless ``allow_other_code`` (``eval --allow-other-code``) asks for it.

Robustness. Every file is written atomically (temporary file, fsync, ``os.replace``, with
the umask's mode); checkpoints are read with ``torch.load(weights_only=True)``. One process
at a time holds a run (``fcntl.flock`` on ``lock``; a lock left by a killed process is
taken over). A session writes ``status.json`` "starting" before it changes anything, so a
crash at any moment leaves a directory the next session resumes or restarts exactly;
a damaged directory (unreadable or missing file, a checkpoint of another config, a metrics
log with a hole) is refused with a RunError naming the file, and nothing is overwritten.
"""
from __future__ import annotations

import collections
import contextlib
import csv
import errno
import hashlib
import io
import json
import math
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from . import distributed
from .nn.baselines import Baseline
from .nn.config import CATConfig
from .data import Corpus, DataError, load_corpus
from .evaluate import PUBLISHED_LENGTHS, check_settings, context_table, leak_score
from .nn.model import CAT
from .devices import resolve_device
from .provenance import code_fingerprint, environment, fingerprint_files
from .tensorfile import TensorFileError, load_tensors
from .train import NonFiniteLoss, SideBySide, TrainConfig, train_loop


class RunError(RuntimeError):
    """Bad input about a run (its directory, config or checkpoint); one-line message."""


class TrainingFailed(RuntimeError):
    """Training stopped on a NaN or infinite loss; the last good checkpoint is kept."""


class RunInterrupted(RuntimeError):
    """Ctrl-C during training; a checkpoint of the last step boundary was saved."""


class StorageError(RuntimeError):
    """A run file could not be written (disk full, permissions); the previous version of
    the file is intact and the run resumes once the cause is fixed. One-line message."""


WEIGHT_FILES = {"cat": "cat.pt", "base": "baseline.pt"}
RESULT_FILES = ("cat.pt", "baseline.pt", "eval.json", "eval.csv")


# ---------------------------------------------------------------- fault injection

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


# ---------------------------------------------------------------- atomic files

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


# The packages whose versions env.json records.
RUN_PACKAGES = ("catlib", "torch", "torchdiffeq", "numpy", "tqdm")


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """``torch.load(path, weights_only=True)`` (:func:`catlib.tensorfile.load_tensors`):
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


# ---------------------------------------------------------------- lock

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
    say = say or (lambda s: print(s, file=sys.stderr))
    lock = Path(path) / "lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise RunError(f"cannot create {lock} ({e.strerror}); check the permissions of "
                       "the run directory") from None
    try:
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder = None
        except BlockingIOError:
            holder = _holder(fd) or {"pid": "?", "host": "?", "started": "?"}
        except (ImportError, OSError):  # no flock here (some network file systems)
            holder = _holder(fd)
            holder = holder if holder and _alive(holder) else None
        if holder is not None:
            raise RunError(f"{path} is in use by pid {holder.get('pid')} on {holder.get('host')} "
                           f"since {holder.get('started')}; wait for it to end (or stop it), "
                           "then run the command again")
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
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = 1
    try:
        yield
    finally:
        del _HELD[key]
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # empty: released cleanly (the file stays: no unlink race)
        os.close(fd)


# ---------------------------------------------------------------- provenance

def config_hash(model_config: CATConfig, train_config: TrainConfig, data_sha256: str,
                code: str | None = None) -> str:
    """SHA-256 (16 hex digits) of everything that determines the trained weights and their
    evaluation: model config, training identity, corpus and code fingerprint (default: this
    code's, :func:`catlib.provenance.code_fingerprint`)."""
    ident = {"model": model_config.resolved().to_dict(), "train": train_config.identity(),
             "data": data_sha256, "code": code or code_fingerprint()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def weights_digest(models: dict) -> str:
    """SHA-256 (16 hex digits) of the names, dtypes, shapes and bytes of the models'
    state dicts (``{"cat": module or None, "base": ...}``): which weights an evaluation scored."""
    h = hashlib.sha256()
    for name in sorted(models):
        if models[name] is None:
            continue
        for key, t in sorted(models[name].state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}.{key}:{t.dtype}:{tuple(t.shape)}\0".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- runs

@dataclass
class Run:
    """A run directory. ``config`` is the parsed config.json."""
    path: Path
    config: dict
    reused: bool = False
    result: dict | None = field(default=None, repr=False)  # the evaluation (eval.json)

    @property
    def hash(self) -> str:
        return self.config["hash"]

    @property
    def model_config(self) -> CATConfig:
        return CATConfig.from_dict(self.config["model"])

    @property
    def train_config(self) -> TrainConfig:
        return TrainConfig(**self.config["train"])

    @property
    def code(self) -> str | None:
        """The fingerprint of the code that trained the run (None: recorded before fingerprints)."""
        return (self.config.get("code") or {}).get("fingerprint")

    @property
    def status(self) -> dict:
        p = self.path / "status.json"
        if not p.exists():
            return {"status": "new"}
        st = _read_json(p, "the run directory is damaged; restore the file, or pass --retrain")
        if not isinstance(st, dict) or "status" not in st:
            raise RunError(f"{p} is not a run status; restore it, or pass --retrain")
        return st

    def set_status(self, status: str, step: int, message: str = "") -> None:
        _write_json(self.path / "status.json", {
            "status": status, "step": step, "train_steps": self.config["train"]["train_steps"],
            "message": message, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def metrics(self) -> list[dict]:
        """The metrics log as a list of dicts.

        An unfinished last line (a write cut short by a crash: no newline) is dropped; that
        step is redone on resume. A damaged line elsewhere raises RunError.
        """
        p = self.path / "metrics.jsonl"
        if not p.exists():
            return []
        lines = p.read_bytes().decode("utf-8", "replace").split("\n")
        records = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if isinstance(rec, dict):
                records.append(rec)
            elif i < len(lines) - 1:  # a complete line (newline-terminated) that is damaged
                raise RunError(f"{p} line {i + 1} is damaged ({line[:60]!r}); restore the file, "
                               "or pass --retrain to train the run afresh")
        return records

    def _load_weights(self, file: str, map_location) -> dict:
        if not (self.path / file).exists():
            raise RunError(f"{self.path / file} is missing (the run is {self.status['status']}); "
                           "restore it, or train the run again with --retrain")
        ck = load_checkpoint(self.path / file, map_location)
        if not isinstance(ck, dict) or ck.get("config_hash") != self.hash:
            raise RunError(f"{self.path / file} was written for another config (hash "
                           f"{ck.get('config_hash') if isinstance(ck, dict) else None}, the run's "
                           f"config.json has {self.hash}); retrain with --retrain or use its own run directory")
        return ck

    def load_weights(self, device="cpu") -> tuple[dict, int]:
        """``({"cat": CAT or None, "base": Baseline or None}, step)``: the models the run
        trained, with their final weights if it finished, else those of its checkpoint."""
        cfg, models = self.model_config, self.train_config.models
        if self.status.get("status") == "finished":
            cks = {m: self._load_weights(WEIGHT_FILES[m], "cpu") for m in models}
            sds = {m: ck["state_dict"] for m, ck in cks.items()}
            step = next(iter(cks.values())).get("step", self.config["train"]["train_steps"])
        else:
            ck = self._load_weights("checkpoint.pt", "cpu")
            sds, step = {m: ck["trainer"][m] for m in models}, ck["trainer"]["step"]
        out = {"cat": None, "base": None}
        for m, sd in sds.items():
            with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten:
                model = (CAT if m == "cat" else Baseline)(cfg)  # leave the caller's RNG alone
            try:
                model.load_state_dict(sd)
            except (RuntimeError, TypeError, AttributeError) as e:
                raise RunError(f"the weights in {self.path} do not fit the run's config "
                               f"({str(e).splitlines()[0]}); retrain with --retrain") from None
            out[m] = model.to(device)
        return out, int(step)

    def load_models(self, device="cpu") -> tuple[CAT | None, Baseline | None]:
        """Both models with their latest weights (final if finished, else the checkpoint);
        None for a model the run did not train."""
        models, _ = self.load_weights(device)
        return models["cat"], models["base"]


def open_run(path: str | os.PathLike) -> Run:
    """Open an existing run directory (RunError if it is missing or unreadable)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunError(f"{path} is a file, not a run directory; pass a run directory")
    if not path.is_dir():
        raise RunError(f"run directory {path} does not exist; train it with `python -m catlib train`")
    if not os.access(path, os.R_OK | os.X_OK):
        raise RunError(f"run directory {path} is not readable; check its permissions")
    cfg = _read_json(path / "config.json", "this is not a catlib run directory (or it is damaged: "
                     "restore the file, or delete the directory to train the run afresh)")
    if not isinstance(cfg, dict) or not {"model", "train", "hash"} <= set(cfg):
        raise RunError(f"{path / 'config.json'} is not a catlib run config; pass a run directory")
    try:
        CATConfig.from_dict(cfg["model"])
        TrainConfig(**cfg["train"]).validate()
    except (TypeError, ValueError) as e:
        raise RunError(f"{path / 'config.json'} holds an invalid config ({e}); retrain the run") from None
    return Run(path, cfg)


def _save_checkpoint(run: Run, trainer: SideBySide) -> int:
    atomic_save({"config_hash": run.hash, "trainer": trainer.state_dict()}, run.path / "checkpoint.pt")
    return trainer.step


def _check_code(run: Run, allow_other_code: bool) -> None:
    if run.code != code_fingerprint() and not allow_other_code:
        raise RunError(f"{run.path} was trained by other catlib code (code fingerprint "
                       f"{run.code or 'not recorded'}, this code {code_fingerprint()}); train it "
                       "again with this code (the train command with --retrain), or pass "
                       "--allow-other-code to evaluate it as it is")


def eval_settings(lengths, eval_windows: int, dropout_in_eval: bool, leak_length: int = 64,
                  dropout_seed: int = 0) -> dict:
    """The evaluation settings recorded in eval.json (a stored evaluation is reused only
    for the same settings)."""
    return {"lengths": list(lengths), "eval_windows": eval_windows,
            "dropout_in_eval": dropout_in_eval, "leak_length": leak_length,
            "dropout_seed": dropout_seed if dropout_in_eval else None}


def evaluate_run(run: Run, lengths=PUBLISHED_LENGTHS, eval_windows: int = 256,
                 dropout_in_eval: bool = False, batch_tokens: int = 32768, device="cpu",
                 corpus: Corpus | None = None, leak_length: int = 64, data=None,
                 allow_other_code: bool = False, dropout_seed: int = 0) -> dict:
    """Evaluate a run's models and write ``eval.json`` and ``eval.csv``; return the result.

    Result: {"rows": context_table rows, "leak": {"cat", "base"} (None: not trained or
    non-finite), "settings", "step" and "weights" (the step and digest of the weights
    scored), "code" (fingerprint of the evaluating code), "device", "nonfinite"}.
    With ``dropout_in_eval`` the dropout masks are seeded by ``dropout_seed`` (recorded),
    so that two evaluations agree; the global RNG state is restored afterwards.
    Refuses (RunError) a run trained by other code unless ``allow_other_code``, bad
    settings, and an unreadable eval.json (never overwritten).
    """
    _check_code(run, allow_other_code)
    try:
        check_settings(lengths, eval_windows, batch_tokens, run.model_config.resolved().causal,
                       leak_length)
    except ValueError as e:
        raise RunError(str(e)) from None
    device = torch.device(device)
    corpus = corpus or load_corpus(data, split=run.train_config.split)
    with run_lock(run.path):
        if (run.path / "eval.json").exists():
            _read_json(run.path / "eval.json", "delete it to evaluate the run again")
        models, step = run.load_weights(device)
        rows = context_table(models["cat"], models["base"], corpus.val, lengths, eval_windows,
                             dropout_in_eval, batch_tokens, train=corpus.train, device=device,
                             seed=dropout_seed if dropout_in_eval else None)
        leak, nonfinite = {}, [f"{m}_ce@{r['len']}" for r in rows for m in r.get("nonfinite", ())]
        for m, model in models.items():
            leak[m] = leak_score(model, len(corpus.vocab), leak_length, device=device) \
                if model is not None else None
            if leak[m] is not None and not math.isfinite(leak[m]):
                leak[m] = None
                nonfinite.append(f"leak_{m}")
        result = {"rows": rows, "leak": leak, "step": step, "weights": weights_digest(models),
                  "code": code_fingerprint(), "nonfinite": nonfinite,
                  "settings": eval_settings(lengths, eval_windows, dropout_in_eval, leak_length,
                                            dropout_seed),
                  "device": str(device)}
        _write_json(run.path / "eval.json", result)
        cols = ["len", "cat_ce", "cat_ppl", "base_ce", "base_ppl", "dce", "bigram_ce", "windows",
                "skipped", "nonfinite"]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows({**r, "nonfinite": " ".join(r.get("nonfinite", ()))} for r in rows)
        atomic_write_text(run.path / "eval.csv", buf.getvalue())
    run.result = result
    return result


def _stored_eval(run: Run, settings: dict) -> dict | None:
    """eval.json if it scored the weights now on disk, with these settings, by this code;
    else None. An unreadable eval.json raises RunError (it is never overwritten)."""
    p = run.path / "eval.json"
    if not p.exists():
        return None
    stored = _read_json(p, "delete it to evaluate the run again")
    if not isinstance(stored, dict) or stored.get("settings") != settings \
            or stored.get("code") != code_fingerprint():
        return None
    models, step = run.load_weights()
    if stored.get("step") != step or stored.get("weights") != weights_digest(models):
        return None
    return stored


def _is_temporary(p: Path) -> bool:
    """A temporary file of :func:`_atomic_write` (left behind if the writer was killed)."""
    return p.name.startswith(".") and p.name.endswith(".tmp")


def _status_of(run: Run) -> dict:
    """The run's status; "new" for a directory holding no trained state (no status.json,
    no metrics, no weights). A status.json missing beside trained files is damage."""
    st = run.status
    if st["status"] == "new":
        trained = [f for f in ("metrics.jsonl", *RESULT_FILES) if (run.path / f).exists()]
        if trained:
            raise RunError(f"{run.path / 'status.json'} is missing, but the run holds {trained[0]}; "
                           "restore it, or pass --retrain to train the run afresh")
    return st


def _same_settings(run: Run, model_config: CATConfig, train_config: TrainConfig, sha: str) -> bool:
    return (run.model_config.resolved().to_dict() == model_config.to_dict()
            and run.train_config.identity() == train_config.identity()
            and run.config.get("data_sha256") == sha)


def train_run(model_config: CATConfig, train_config: TrainConfig, **options) -> Run | None:
    """Train (or reuse, or resume) a side-by-side run in ``root/name`` and evaluate it.

    Options (keywords): root, name, device, data, retrain, lengths, eval_windows,
    dropout_in_eval, batch_tokens, evaluate, progress, echo, on_step; see :func:`_train_run`.
    Under torchrun (:mod:`catlib.distributed`) rank 0 does all of :func:`_train_run` and
    tells the other ranks, once the run directory is ready, to train beside it (from its
    checkpoint), or the error to raise; they return None, without evaluating.
    """
    try:
        distributed.check_batch(train_config.batch)
    except ValueError as e:
        raise RunError(str(e)) from None
    if not distributed.is_main():
        return _follow(model_config, train_config, **options)
    gate = distributed.Gate()
    try:
        run = _train_run(model_config, train_config, ready=gate.open, **options)
    except BaseException as e:
        gate.refuse(e)  # before training only: then the other ranks raise it too
        raise
    gate.open({"action": "done"})
    return run


_ERRORS = {"RunError": RunError, "DataError": DataError, "StorageError": StorageError,
           "KeyboardInterrupt": RunInterrupted}


def _follow(model_config: CATConfig, train_config: TrainConfig, *, device="auto", data=None,
            **_) -> None:
    """A rank other than 0 under torchrun: wait for rank 0's go, then train beside it."""
    info = distributed.decision()
    if info["action"] == "error":
        raise _ERRORS.get(info["kind"], TrainingFailed)(
            info["message"] if info["kind"] in _ERRORS
            else f"rank 0 stopped ({info['kind']}: {info['message']})")
    if info["action"] != "train":
        return None
    corpus = load_corpus(data, split=train_config.split)
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    trainer = SideBySide(model_config.resolved(), train_config, corpus.train, dev)
    trainer.load_state_dict(load_checkpoint(Path(info["path"]) / "checkpoint.pt")["trainer"])
    try:
        train_loop(trainer, echo=None, progress=False,
                   on_step=lambda m: distributed.fault_point(m["step"]))
    except KeyboardInterrupt:
        raise RunInterrupted(f"rank {distributed.rank()} interrupted") from None
    except NonFiniteLoss as e:
        raise TrainingFailed(f"training stopped: {e}") from None
    return None


def _train_run(model_config: CATConfig, train_config: TrainConfig, *, root="runs",
               name: str | None = None, device="auto", data=None, retrain: bool = False,
               lengths=PUBLISHED_LENGTHS, eval_windows: int = 256, dropout_in_eval: bool = False,
               batch_tokens: int = 32768, evaluate: bool = True, progress: bool = True,
               echo: Callable[[str], None] | None = print,
               on_step: Callable[[dict], None] | None = None,
               ready: Callable[[dict], None] = lambda info: None) -> Run:
    """Train (or reuse, or resume) a side-by-side run in ``root/name`` and evaluate it.

    ``name`` defaults to ``<variant>-<config hash>``. Every input (training and evaluation
    settings, corpus, device, an existing directory) is checked before anything is
    written: RunError (bad input) or DataError (corpus).
    During training, Ctrl-C saves a checkpoint and raises RunInterrupted; a NaN or
    infinite loss raises TrainingFailed, keeping the last good checkpoint; a file that
    cannot be written (disk full) raises StorageError, keeping the last checkpoint.
    ``ready(info)`` is called once the directory is ready: to reuse it, or to train from
    its checkpoint (torchrun's other ranks then start, see :func:`train_run`).
    """
    say = echo or (lambda s: None)
    model_config = model_config.resolved()
    # 1. Inputs, before anything is read from or written to the run directory.
    try:
        train_config.validate(causal=model_config.causal)
        check_settings(lengths, eval_windows, batch_tokens, model_config.causal)
    except ValueError as e:
        raise RunError(str(e)) from None
    corpus = load_corpus(data, split=train_config.split)
    if model_config.vocab_size != len(corpus.vocab):
        raise RunError(f"vocab_size must be {len(corpus.vocab)} for this corpus, "
                       f"got {model_config.vocab_size}")
    try:
        train_config.validate(len(corpus.train))
    except ValueError as e:
        raise RunError(str(e)) from None
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    code = code_fingerprint()
    h = config_hash(model_config, train_config, corpus.sha256, code)
    path = Path(root) / (name or f"{model_config.variant}-{h[:8]}")
    settings = eval_settings(lengths, eval_windows, dropout_in_eval)
    config = {"hash": h, "model": model_config.to_dict(), "train": train_config.to_dict(),
              "eval": settings, "data_sha256": corpus.sha256,
              "code": {"fingerprint": code, "files": fingerprint_files()}}

    # 2. An existing directory: read only, so that a damaged one is left as it is.
    existing = path.exists() and (not path.is_dir() or any(
        p.name != "lock" and not _is_temporary(p) for p in path.iterdir()))
    if existing:
        run = open_run(path)
        if run.hash != h:
            if run.code != code and _same_settings(run, model_config, train_config, corpus.sha256):
                if not retrain:
                    raise RunError(f"{path} was trained by other catlib code (code fingerprint "
                                   f"{run.code or 'not recorded'}, this code {code}); pass --retrain "
                                   "to train it again with this code, or choose another --name")
            else:
                raise RunError(f"{path} holds a run with another config (hash {run.hash}, this one "
                               f"{h}); choose another --name or --run-dir")
        if not retrain:
            _status_of(run)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot create the run directory {path} ({e.strerror}); "
                       "choose another --run-dir") from None

    # 3. Under the lock: reuse, or decide between resuming and starting afresh.
    with run_lock(path, say):
        run = Run(path, config)
        status = _status_of(run)["status"] if existing and not retrain else "new"
        if status == "finished" and not retrain:
            say(f"reusing finished run {path} (config hash {h}); pass --retrain to train again")
            run.reused = True
            ready({"action": "reuse"})
            if evaluate:
                run.result = _stored_eval(run, settings) or evaluate_run(
                    run, lengths, eval_windows, dropout_in_eval, batch_tokens, dev, corpus)
            return run
        resume = not retrain and status not in ("new", "starting")
        trainer = SideBySide(model_config, train_config, corpus.train, dev)
        if resume:
            if not (path / "checkpoint.pt").exists():
                raise RunError(f"{path / 'checkpoint.pt'} is missing, but the run is {status}; "
                               "restore it, or pass --retrain to train the run afresh")
            state = load_checkpoint(path / "checkpoint.pt")
            if not isinstance(state, dict) or state.get("config_hash") != h:
                raise RunError(f"{path / 'checkpoint.pt'} was written for another config; "
                               "pass --retrain to start this run afresh")
            try:
                trainer.load_state_dict(state["trainer"])
            except (KeyError, RuntimeError, ValueError, TypeError) as e:
                raise RunError(f"{path / 'checkpoint.pt'} does not fit this config ({e}); "
                               "pass --retrain to start this run afresh") from None
            kept = [m for m in run.metrics() if m.get("step", -1) < trainer.step]
            if [m["step"] for m in kept if m.get("kind") == "train"] != list(range(trainer.step)):
                raise RunError(f"{path / 'metrics.jsonl'} does not hold the metrics of the "
                               f"{trainer.step} steps of the checkpoint; restore it, or pass "
                               "--retrain to train the run afresh")

        # 4. Writing starts. "starting" first: a crash from here to the first checkpoint
        # leaves a run that the next session starts afresh (nothing trained is lost).
        starting = not resume and (path / "status.json").exists()
        if starting:  # before the old results go (a new directory gets config.json first)
            run.set_status("starting", 0)
        _write_json(path / "config.json", config)
        _write_json(path / "env.json", {
            **environment(RUN_PACKAGES, dev), "code_fingerprint": code_fingerprint(),
            "world_size": distributed.world_size(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        if resume:
            atomic_write_text(path / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in kept))
            for f in RESULT_FILES:  # an evaluation of earlier weights is stale now
                (path / f).unlink(missing_ok=True)
            say(f"resuming {path} from step {trainer.step} of {train_config.train_steps}")
        else:
            if not starting:
                run.set_status("starting", 0)
            for f in ("metrics.jsonl", *RESULT_FILES):
                (path / f).unlink(missing_ok=True)
            _save_checkpoint(run, trainer)
        last_good = trainer.step
        run.set_status("running", trainer.step)
        ready({"action": "train", "path": str(path)})  # checkpoint.pt holds trainer's state
        _train(run, trainer, corpus, last_good, echo, progress, on_step)
        if evaluate:
            evaluate_run(run, lengths, eval_windows, dropout_in_eval, batch_tokens, dev, corpus)
    return run


def _train(run: Run, trainer: SideBySide, corpus: Corpus, last_good: int, echo, progress,
           on_step) -> None:
    """The training session of :func:`train_run`: metrics, checkpoints, final weights, status."""
    path, tc = run.path, trainer.tc
    log_path = path / "metrics.jsonl"
    log_file = open(log_path, "ab", buffering=0)  # one os.write per record, no stale buffer

    def log(m: dict) -> None:
        line = (json.dumps(m) + "\n").encode()
        try:
            _fault_point("metrics.jsonl", tear=lambda: log_file.write(line[:len(line) // 2]))
            if log_file.write(line) != len(line):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            raise StorageError(f"cannot write {log_path} ({e.strerror or e})") from None

    def checkpoint() -> None:
        nonlocal last_good
        try:
            os.fsync(log_file.fileno())  # the metrics of every checkpointed step are on disk
        except OSError as e:
            raise StorageError(f"cannot write {log_path} ({e.strerror or e})") from None
        last_good = _save_checkpoint(run, trainer)

    try:
        reason = train_loop(trainer, val_ids=corpus.val, log=log, checkpoint=checkpoint, echo=echo,
                            progress=progress, on_step=on_step)
    except KeyboardInterrupt:
        checkpoint()
        msg = (f"interrupted after {trainer.step} of {tc.train_steps} steps; checkpoint "
               f"saved in {path}; run the same command again to resume")
        run.set_status("interrupted", trainer.step, msg)
        raise RunInterrupted(msg) from None
    except NonFiniteLoss as e:
        msg = (f"training stopped: the {e.which} loss is {e.value} at step {e.step}; the last good "
               f"checkpoint (after {last_good} steps) is kept in {path / 'checkpoint.pt'}; "
               "try a smaller --lr or another --solver")
        run.set_status("failed", last_good, msg)
        raise TrainingFailed(msg) from None
    except StorageError as e:
        msg = (f"{e}; training stopped after {trainer.step} steps, the last checkpoint (after "
               f"{last_good} steps) is intact; free some space and run the same command again "
               "to resume")
        with contextlib.suppress(StorageError):
            run.set_status("interrupted", last_good, msg)
        raise StorageError(msg) from None
    finally:
        with contextlib.suppress(OSError):
            log_file.close()

    if reason == "finished":
        for m in tc.models:
            model = trainer.cat if m == "cat" else trainer.base
            atomic_save({"config_hash": run.hash, "config": run.config["model"], "step": trainer.step,
                         "state_dict": model.state_dict()}, path / WEIGHT_FILES[m])
        run.set_status("finished", trainer.step)
    else:
        run.set_status("stopped", trainer.step, f"budget reached after {trainer.step} steps; "
                       "run the same command again to continue")
