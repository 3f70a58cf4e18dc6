"""A run's ladder: the weights it kept on its way (``TrainConfig.checkpoints``), each a
point of a frontier, scored and counted: CE at the frontier's lengths
(:func:`ladder_ce`, stored with the run) and the training FLOPs and seconds up to it
(:func:`step_train_flops`). Chapter 10's frontier and the scale study read them.
"""
from __future__ import annotations

import numpy as np
import torch

from .compute import run_compute


# The longest length of the frontier is scored on at most this many windows (the table's
# curve uses more): the frontier's points are many, and each is a forward pass per window.
FRONTIER_LONG_WINDOWS = 4


def frontier_scoring(lengths, eval_windows: int, curve_windows: int | None) -> tuple[list, list]:
    """The lengths of the frontier (the shortest and the longest of ``lengths``) and the
    windows each is scored on: ``eval_windows`` at the shortest, at most
    :data:`FRONTIER_LONG_WINDOWS` at the longest."""
    longest = max(lengths)
    return ([min(lengths), longest],
            [eval_windows, min(FRONTIER_LONG_WINDOWS, curve_windows or eval_windows)])


def ladder_model(run, step: int, model_key: str, device="cpu"):
    """The model ``model_key`` of ``run`` with the weights it kept after ``step`` steps
    (``TrainConfig.checkpoints``); the final weights when ``step`` is the run's last."""
    from ..nn.baselines import Baseline
    from ..nn.model import CAT
    from ..runs import RunError
    from ..runs.files import load_checkpoint
    from ..runs.training import ladder_file

    if step == run.train_config.train_steps:
        return run.load_weights(device)[0][model_key]
    path = run.path / ladder_file(step, model_key)
    if not path.exists():
        raise RunError(f"{path} is missing: the run kept no weights after {step} steps "
                       f"(its checkpoints: {list(run.train_config.checkpoints)})")
    ck = load_checkpoint(path, "cpu")
    if not isinstance(ck, dict) or ck.get("config_hash") != run.hash:
        raise RunError(f"{path} was written for another config; retrain the run")
    with torch.random.fork_rng(devices=[]):
        net = (CAT if model_key == "cat" else Baseline)(run.model_config)
    net.load_state_dict(ck["state_dict"])
    return net.to(device)


def ladder_points(run, model_key: str) -> list[int]:
    """The steps of the run's ladder: its kept checkpoints and its last step."""
    tc = run.train_config
    return sorted({*tc.checkpoints, tc.train_steps})


def ladder_ce(run, model_key: str, step: int, corpus, lengths, caps, device=None) -> dict:
    """CE ``{length: ce}`` of the weights ``run`` kept after ``step`` steps at each of
    ``lengths`` on at most ``caps[i]`` windows (:func:`catlib.measure.evaluate.cross_entropy`),
    stored with the run (valid for the weights, the code and the settings)."""
    from ..measure.evaluate import cross_entropy
    from ..common.provenance import code_fingerprint
    from ..runs import stored_with_run, weights_digest

    model = ladder_model(run, step, model_key, device or "cpu")
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("experiment.ladder",)),
             "step": step, "lengths": list(lengths), "windows": list(caps)}
    return stored_with_run(run, f"ladder-ce-{step}-{model_key}.json", ident, lambda: {
        str(L): cross_entropy(model, corpus.val, L, eval_windows=n, device=device)["ce"]
        for L, n in zip(lengths, caps)})


def step_train_flops(run, model_key: str, step: int) -> tuple[float, float]:
    """``(train FLOPs, seconds)`` of the first ``step`` steps of ``run``'s model (a ladder
    point: its share of the run's counted FLOPs and logged seconds)."""
    full = run_compute(run)[model_key]
    per = {int(n): f for n, f in full["flops_per_step"].items()}
    train = [m for m in run.metrics() if m.get("kind") == "train" and m["step"] < step]
    nfe = [int(m["nfe_forward"]) if model_key == "cat" else 0 for m in train]
    return float(sum(per[n] for n in nfe)), float(sum(m["seconds"] for m in train))


def ladder_point(at: list, model_key: str, corpus, lengths, caps, device=None) -> dict:
    """One point of a frontier from the weights of several seeds' runs: ``at`` lists
    ``(run, step)``, one per seed. ``{"train_flops", "seconds"}`` (the mean over the seeds of
    :func:`step_train_flops`) and ``"ce": {"<length>": [CE per seed]}`` (:func:`ladder_ce`).
    Chapter 10's frontier and the scale study build their points here."""
    counted = [step_train_flops(run, model_key, step) for run, step in at]
    ce = [ladder_ce(run, model_key, step, corpus, lengths, caps, device) for run, step in at]
    return {"train_flops": float(np.mean([c[0] for c in counted])),
            "seconds": float(np.mean([c[1] for c in counted])),
            "ce": {str(L): [c[str(L)] for c in ce] for L in lengths}}
