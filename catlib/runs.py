"""Run directories: one side-by-side training run and its evaluation, reusable and resumable.

``runs/<name>/`` holds

- ``config.json``   model config (resolved), training and evaluation settings, config hash;
- ``env.json``      package versions, python, platform, device, git commit (latest session);
- ``status.json``   running | interrupted | stopped (budget) | failed (NaN/inf) | finished;
- ``metrics.jsonl`` one JSON object per training step (and per validation);
- ``checkpoint.pt`` the full training state at the last checkpoint (resume);
- ``cat.pt``, ``baseline.pt`` the final weights of both models;
- ``eval.json``, ``eval.csv`` the context-length table, bigram floor and leak scores.

Files are written atomically (temporary file, then ``os.replace``); checkpoints are read
with ``torch.load(weights_only=True)``. A finished run whose config hash matches is reused
instead of retrained; an unfinished one is resumed from its checkpoint.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .baselines import Baseline
from .config import CATConfig
from .data import Corpus, load_corpus
from .evaluate import PUBLISHED_LENGTHS, context_table, leak_score
from .model import CAT
from .provenance import git_state, package_versions
from .train import NonFiniteLoss, SideBySide, TrainConfig, train_loop


class RunError(RuntimeError):
    """Bad input about a run (its directory, config or checkpoint); one-line message."""


class TrainingFailed(RuntimeError):
    """Training stopped on a NaN or infinite loss; the last good checkpoint is kept."""


class RunInterrupted(RuntimeError):
    """Ctrl-C during training; a checkpoint of the last step boundary was saved."""


# ---------------------------------------------------------------- atomic files

def _atomic_write(path: Path, write: Callable) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_save(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file in the same directory, then rename over ``path``:
    an interrupted write leaves the previous file intact."""
    _atomic_write(Path(path), lambda f: torch.save(obj, f))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic_write(Path(path), lambda f: f.write(text.encode("utf-8")))


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
    """``torch.load(path, weights_only=True)``; a RunError names an unreadable file."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise RunError(f"checkpoint {path} is missing; train the run first") from None
    except Exception as e:  # corrupt or foreign file: one line, no traceback
        raise RunError(f"cannot load checkpoint {path} ({e.__class__.__name__}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''}); "
                       "retrain with --retrain or restore the file") from None


# ---------------------------------------------------------------- provenance

def config_hash(model_config: CATConfig, train_config: TrainConfig, data_sha256: str) -> str:
    """SHA-256 (16 hex digits) of everything that determines the trained weights."""
    ident = {"model": model_config.resolved().to_dict(), "train": train_config.identity(),
             "data": data_sha256}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def resolve_device(name: str = "auto") -> torch.device:
    """"auto" -> cuda, then mps, then cpu. An unavailable device raises RunError."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise RunError(f"unknown device {name!r}; use auto, cpu, cuda or mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RunError("--device cuda: CUDA is not available here; use --device cpu or auto")
    if dev.type == "mps" and not mps:
        raise RunError("--device mps: MPS is not available here; use --device cpu or auto")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise RunError(f"unsupported device {name!r}; use auto, cpu, cuda or mps")
    return dev


def environment(device: torch.device) -> dict:
    """Versions, platform, device and git commit, for ``env.json``."""
    versions = package_versions(("catlib", "torch", "torchdiffeq", "numpy", "tqdm"))
    dev = {"type": device.type, "name": str(device)}
    if device.type == "cuda":
        dev["name"] = torch.cuda.get_device_name(device)
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "versions": versions, "device": dev, "git": git_state(),
            "torch_threads": torch.get_num_threads(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


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
    def status(self) -> dict:
        p = self.path / "status.json"
        return _read_json(p, "the run directory is damaged") if p.exists() else {"status": "new"}

    def set_status(self, status: str, step: int, message: str = "") -> None:
        _write_json(self.path / "status.json", {
            "status": status, "step": step, "train_steps": self.config["train"]["train_steps"],
            "message": message, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def metrics(self) -> list[dict]:
        """The metrics log as a list of dicts."""
        p = self.path / "metrics.jsonl"
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def _load_weights(self, file: str, map_location) -> dict:
        ck = load_checkpoint(self.path / file, map_location)
        if not isinstance(ck, dict) or ck.get("config_hash") != self.hash:
            raise RunError(f"{self.path / file} was written for another config (hash "
                           f"{ck.get('config_hash') if isinstance(ck, dict) else None}, the run's "
                           f"config.json has {self.hash}); retrain with --retrain or use its own run directory")
        return ck

    def load_models(self, device="cpu") -> tuple[CAT, Baseline]:
        """Both models with their latest weights (final if finished, else the checkpoint)."""
        cfg = self.model_config
        cat, base = CAT(cfg), Baseline(cfg)
        if (self.path / "cat.pt").exists() and (self.path / "baseline.pt").exists():
            sd_cat = self._load_weights("cat.pt", "cpu")["state_dict"]
            sd_base = self._load_weights("baseline.pt", "cpu")["state_dict"]
        else:
            ck = self._load_weights("checkpoint.pt", "cpu")
            sd_cat, sd_base = ck["trainer"]["cat"], ck["trainer"]["base"]
        for model, sd, file in ((cat, sd_cat, "cat.pt"), (base, sd_base, "baseline.pt")):
            try:
                model.load_state_dict(sd)
            except RuntimeError as e:
                raise RunError(f"the weights in {self.path} do not fit the run's config "
                               f"({str(e).splitlines()[0]}); retrain with --retrain") from None
        return cat.to(device), base.to(device)


def open_run(path: str | os.PathLike) -> Run:
    """Open an existing run directory (RunError if it is missing or unreadable)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunError(f"{path} is a file, not a run directory; pass a run directory")
    if not path.is_dir():
        raise RunError(f"run directory {path} does not exist; train it with `python -m catlib train`")
    if not os.access(path, os.R_OK | os.X_OK):
        raise RunError(f"run directory {path} is not readable; check its permissions")
    cfg = _read_json(path / "config.json", "this is not a catlib run directory (or it is damaged)")
    if not isinstance(cfg, dict) or not {"model", "train", "hash"} <= set(cfg):
        raise RunError(f"{path / 'config.json'} is not a catlib run config; pass a run directory")
    try:
        CATConfig.from_dict(cfg["model"])
        TrainConfig(**cfg["train"])
    except (TypeError, ValueError) as e:
        raise RunError(f"{path / 'config.json'} holds an invalid config ({e}); retrain the run") from None
    return Run(path, cfg)


def _save_checkpoint(run: Run, trainer: SideBySide) -> int:
    atomic_save({"config_hash": run.hash, "trainer": trainer.state_dict()}, run.path / "checkpoint.pt")
    return trainer.step


def _truncate_metrics(run: Run, steps_done: int) -> None:
    """Keep only the metrics of steps before ``steps_done`` (after a resume)."""
    lines = [m for m in run.metrics() if m.get("step", -1) < steps_done]
    atomic_write_text(run.path / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in lines))


def evaluate_run(run: Run, lengths=PUBLISHED_LENGTHS, eval_windows: int = 256,
                 dropout_in_eval: bool = False, batch_tokens: int = 32768, device="cpu",
                 corpus: Corpus | None = None, leak_length: int = 64, data=None) -> dict:
    """Evaluate a run's models and write ``eval.json`` and ``eval.csv``; return the result.

    Result: {"rows": context_table rows, "leak": {"cat", "base"}, "settings", "step"}.
    """
    device = torch.device(device)
    corpus = corpus or load_corpus(data)
    cat, base = run.load_models(device)
    rows = context_table(cat, base, corpus.val, lengths, eval_windows, dropout_in_eval,
                         batch_tokens, train=corpus.train, device=device)
    leak = {"cat": leak_score(cat, len(corpus.vocab), leak_length, device=device),
            "base": leak_score(base, len(corpus.vocab), leak_length, device=device)}
    result = {"rows": rows, "leak": leak, "step": run.status.get("step"),
              "settings": {"lengths": list(lengths), "eval_windows": eval_windows,
                           "dropout_in_eval": dropout_in_eval, "leak_length": leak_length},
              "device": str(device)}
    _write_json(run.path / "eval.json", result)
    cols = ["len", "cat_ce", "cat_ppl", "base_ce", "base_ppl", "dce", "bigram_ce", "windows", "skipped"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(run.path / "eval.csv", buf.getvalue())
    run.result = result
    return result


def _stored_eval(run: Run, settings: dict) -> dict | None:
    p = run.path / "eval.json"
    if not p.exists():
        return None
    try:
        stored = json.loads(p.read_text())
    except ValueError:
        return None
    return stored if stored.get("settings") == settings else None


def train_run(model_config: CATConfig, train_config: TrainConfig, *, root="runs",
              name: str | None = None, device="auto", data=None, retrain: bool = False,
              lengths=PUBLISHED_LENGTHS, eval_windows: int = 256, dropout_in_eval: bool = False,
              batch_tokens: int = 32768, evaluate: bool = True, progress: bool = True,
              echo: Callable[[str], None] | None = print,
              on_step: Callable[[dict], None] | None = None) -> Run:
    """Train (or reuse, or resume) a side-by-side run in ``root/name`` and evaluate it.

    ``name`` defaults to ``<variant>-<config hash>``. All inputs are checked before
    anything is written: RunError (bad input) or DataError (corpus).
    During training, Ctrl-C saves a checkpoint and raises RunInterrupted; a NaN or
    infinite loss raises TrainingFailed, keeping the last good checkpoint.
    """
    say = echo or (lambda s: None)
    model_config = model_config.resolved()
    corpus = load_corpus(data)
    if model_config.vocab_size != len(corpus.vocab):
        raise RunError(f"vocab_size must be {len(corpus.vocab)} for this corpus, "
                       f"got {model_config.vocab_size}")
    try:
        train_config.validate(len(corpus.train))
    except ValueError as e:
        raise RunError(str(e)) from None
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    h = config_hash(model_config, train_config, corpus.sha256)
    path = Path(root) / (name or f"{model_config.variant}-{h[:8]}")
    eval_settings = {"lengths": list(lengths), "eval_windows": eval_windows,
                     "dropout_in_eval": dropout_in_eval, "leak_length": 64}
    config = {"hash": h, "model": model_config.to_dict(), "train": train_config.to_dict(),
              "eval": eval_settings, "data_sha256": corpus.sha256}

    resume = False
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        run = open_run(path)
        if run.hash != h:
            raise RunError(f"{path} holds a run with another config (hash {run.hash}, this one {h}); "
                           "choose another --name or --run-dir")
        status = run.status.get("status")
        if status == "finished" and not retrain:
            say(f"reusing finished run {path} (config hash {h}); pass --retrain to train again")
            run.reused = True
            if evaluate:
                run.result = _stored_eval(run, eval_settings) or evaluate_run(
                    run, lengths, eval_windows, dropout_in_eval, batch_tokens, dev, corpus)
            return run
        resume = not retrain and (path / "checkpoint.pt").exists()
        if resume:
            state = load_checkpoint(path / "checkpoint.pt")
            if state.get("config_hash") != h:
                raise RunError(f"{path / 'checkpoint.pt'} was written for another config; "
                               "pass --retrain to start this run afresh")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot create the run directory {path} ({e.strerror}); "
                       "choose another --run-dir") from None
    run = Run(path, config)
    _write_json(path / "config.json", config)
    _write_json(path / "env.json", environment(dev))

    trainer = SideBySide(model_config, train_config, corpus.train, dev)
    if resume:
        try:
            trainer.load_state_dict(state["trainer"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise RunError(f"{path / 'checkpoint.pt'} does not fit this config ({e}); "
                           "pass --retrain to start this run afresh") from None
        _truncate_metrics(run, trainer.step)
        say(f"resuming {path} from step {trainer.step} of {train_config.train_steps}")
    else:
        for f in ("metrics.jsonl", "cat.pt", "baseline.pt", "eval.json", "eval.csv"):
            (path / f).unlink(missing_ok=True)
        _save_checkpoint(run, trainer)
    last_good = trainer.step
    run.set_status("running", trainer.step)

    log_file = open(path / "metrics.jsonl", "a", encoding="utf-8")

    def log(m: dict) -> None:
        log_file.write(json.dumps(m) + "\n")
        log_file.flush()

    def checkpoint() -> None:
        nonlocal last_good
        last_good = _save_checkpoint(run, trainer)

    try:
        reason = train_loop(trainer, val_ids=corpus.val, log=log, checkpoint=checkpoint, echo=echo,
                       progress=progress, on_step=on_step)
    except KeyboardInterrupt:
        checkpoint()
        msg = (f"interrupted after {trainer.step} of {train_config.train_steps} steps; checkpoint "
               f"saved in {path}; run the same command again to resume")
        run.set_status("interrupted", trainer.step, msg)
        raise RunInterrupted(msg) from None
    except NonFiniteLoss as e:
        msg = (f"training stopped: the {e.which} loss is {e.value} at step {e.step}; the last good "
               f"checkpoint (after {last_good} steps) is kept in {path / 'checkpoint.pt'}; "
               "try a smaller --lr or another --solver")
        run.set_status("failed", last_good, msg)
        raise TrainingFailed(msg) from None
    finally:
        log_file.close()

    if reason == "finished":
        for model, file in ((trainer.cat, "cat.pt"), (trainer.base, "baseline.pt")):
            atomic_save({"config_hash": h, "config": model_config.to_dict(),
                         "state_dict": model.state_dict()}, path / file)
        run.set_status("finished", trainer.step)
    else:
        run.set_status("stopped", trainer.step, f"budget reached after {trainer.step} steps; "
                       "run the same command again to continue")
    if evaluate:
        evaluate_run(run, lengths, eval_windows, dropout_in_eval, batch_tokens, dev, corpus)
    return run
