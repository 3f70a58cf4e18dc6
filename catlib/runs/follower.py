"""The other ranks under torchrun (:mod:`catlib.training.distributed`): rank 0 prepares the run
directory and tells them to train beside it, from its checkpoint, or the error to raise.
They write nothing to the run directory and do not evaluate."""
from __future__ import annotations

from pathlib import Path

import torch

from ..training import distributed
from ..data import DataError, load_corpus
from ..common.devices import resolve_device
from ..nn.config import CATConfig
from ..training.config import TrainConfig
from ..training.loop import NonFiniteLoss, SideBySide, train_loop
from .errors import RunError, RunInterrupted, StorageError, TrainingFailed
from .files import load_checkpoint

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
