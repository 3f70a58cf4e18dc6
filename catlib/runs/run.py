"""A run directory and its files: the ``Run`` class, opening a run, loading its weights.

``runs/<name>/`` holds

- ``config.json``   model config (resolved), training and evaluation settings, the code
                    fingerprint (:func:`catlib.common.provenance.code_fingerprint`), config hash;
- ``env.json``      package versions, python, platform, device, git commit (latest session);
- ``status.json``   starting | running | interrupted | stopped (budget) | failed (NaN/inf) | finished;
- ``metrics.jsonl`` one JSON object per training step (and per validation);
- ``checkpoint.pt`` the full training state at the last checkpoint (resume);
- ``cat.pt``, ``baseline.pt`` the final weights of the models trained;
- ``eval.json``, ``eval.csv`` the context-length table, bigram floor and leak scores, with
                    the step, a digest of the weights and the code fingerprint they belong to;
- ``lock``          who holds the run (pid, host, start); empty when nobody does.

A damaged directory (unreadable or missing file, a checkpoint of another config, a metrics
log with a hole) is refused with a RunError naming the file, and nothing is overwritten.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..nn.baselines import Baseline
from ..nn.config import CATConfig
from ..nn.model import CAT
from ..training.config import TrainConfig
from .errors import RunError
from .files import _read_json, _write_json, load_checkpoint

WEIGHT_FILES = {"cat": "cat.pt", "base": "baseline.pt"}
RESULT_FILES = ("cat.pt", "baseline.pt", "eval.json", "eval.csv")

# The packages whose versions env.json records.
RUN_PACKAGES = ("catlib", "torch", "torchdiffeq", "numpy", "tqdm")


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
