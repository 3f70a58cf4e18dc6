"""A run's identity: the config hash that names it and the digest of the weights scored.

The config hash covers the model config, the training settings that change the weights,
the corpus and the code fingerprint (:func:`catlib.common.provenance.code_fingerprint`), so a
change to the model, training, data or evaluation code gives a new run instead of reusing
one trained by other code. The weights digest ties a stored evaluation to the very
weights on disk (:func:`catlib.runs.evaluation._stored_eval`).
"""
from __future__ import annotations

import hashlib
import json

import torch

from ..nn.config import CATConfig
from ..common.provenance import code_fingerprint
from ..training.config import TrainConfig


def config_hash(model_config: CATConfig, train_config: TrainConfig, data_sha256: str,
                code: str | None = None) -> str:
    """SHA-256 (16 hex digits) of everything that determines the trained weights and their
    evaluation: model config, training identity, corpus and code fingerprint (default: this
    code's, :func:`catlib.common.provenance.code_fingerprint`)."""
    ident = {"model": model_config.resolved().to_dict(), "train": train_config.identity(),
             "data": data_sha256, "code": code or code_fingerprint()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def run_dir_name(model_config: CATConfig, config_hash_: str) -> str:
    """The directory a run is given when none is named: ``<variant>-<config hash[:8]>``
    (``model_config`` resolved for its device)."""
    return f"{model_config.variant}-{config_hash_[:8]}"


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
