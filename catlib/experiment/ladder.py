"""A run's ladder: the weights it kept on its way (``TrainConfig.checkpoints``), or the
shorter runs branched from it before their decay (``TrainConfig.branches``), each a
point of a frontier, scored and counted: CE at the frontier's lengths
(:func:`ladder_ce`, stored with the run) and the training FLOPs and seconds up to it
(:func:`step_train_flops`). Chapter 10's frontier and the scale study read them.
"""
from __future__ import annotations

import hashlib

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
    from ..runs.errors import RunError
    from ..runs.files import load_checkpoint
    from ..runs.training import ladder_file

    if step == run.train_config.train_steps or step in run.train_config.branches:
        return point_run(run, step).load_weights(device)[0][model_key]   # a run's last weights
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
    """The steps of the run's ladder (:func:`point_steps` of its training)."""
    return point_steps(run.train_config)


def point_steps(tc) -> list[int]:
    """The steps a run of ``tc`` has a point at: its kept checkpoints, its branches and its
    last step."""
    return sorted({*tc.checkpoints, *tc.branches, tc.train_steps})


def point_run(run, step: int):
    """The run whose final weights are ``run``'s point after ``step`` steps: the run of
    ``step`` steps branched from it (``TrainConfig.branches``), or ``run`` itself (its last
    step, or a checkpoint of a constant-rate run)."""
    from ..runs.branches import branch_name
    from ..runs.run import open_run

    if step in run.train_config.branches:
        return open_run(run.path.parent / branch_name(run.path.name, step))
    return run


def ladder_ce(run, model_key: str, step: int, corpus, lengths, caps, device=None,
              span_length: int | None = None) -> dict:
    """CE ``{length: ce}`` of the weights ``run`` kept after ``step`` steps at each of
    ``lengths`` on at most ``caps[i]`` windows (:func:`ladder_scores`)."""
    return {L: s["ce"] for L, s in ladder_scores(run, model_key, step, corpus, lengths, caps,
                                                 device, span_length=span_length).items()}


def text_digest(ids: torch.Tensor) -> str:
    """SHA-256 (16 hex digits) of the ids ``ids`` (int64 ``[N]``): which text a stored score
    read (a study may score a span of the validation part, not all of it)."""
    return hashlib.sha256(ids.contiguous().numpy().tobytes()).hexdigest()[:16]


def ladder_scores(run, model_key: str, step: int, corpus, lengths, caps, device=None,
                  split: str = "val", span_length: int | None = None) -> dict:
    """``{length: {"ce", "se", "windows"}}`` of the weights ``run`` kept after ``step`` steps
    at each of ``lengths`` on at most ``caps[i]`` windows of the corpus' ``split`` ("val";
    "train": the first characters of the training split, as many as the validation split
    holds, so that both read the same number of windows)
    (:func:`catlib.measure.evaluate.cross_entropy`; ``se``: the standard error from window
    sampling), stored with the run (valid for the weights, the code and the settings).
    ``span_length``: every length reads the same text (:mod:`catlib.measure.evaluate`)."""
    from ..measure.evaluate import cross_entropy
    from ..common.provenance import code_fingerprint
    from ..runs.identity import weights_digest
    from ..runs.stored import stored_with_run

    model = ladder_model(run, step, model_key, device or "cpu")
    text = corpus.val if split == "val" else corpus.train[:len(corpus.val)]
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("experiment.ladder",)),
             "step": step, "lengths": list(lengths), "windows": list(caps),
             "text": text_digest(text)}
    if span_length is not None:
        ident["span_length"] = span_length
    name = f"ladder-ce-{step}-{model_key}.json" if split == "val" else \
        f"ladder-{split}-ce-{step}-{model_key}.json"

    def score():
        out = {}
        for L, n in zip(lengths, caps):
            found = cross_entropy(model, text, L, eval_windows=n, device=device,
                                  span_length=span_length)
            out[str(L)] = {k: found[k] for k in ("ce", "se", "windows", "window_ce")}
        return out
    return stored_with_run(run, name, ident, score)


def step_train_flops(run, model_key: str, step: int) -> tuple[float, float]:
    """``(train FLOPs, seconds)`` of the first ``step`` steps of ``run``'s model (a ladder
    point: its share of the run's counted FLOPs and logged seconds)."""
    run = point_run(run, step)       # a branch: the trunk's steps before it and its decay
    full = run_compute(run)[model_key]
    per = {int(n): f for n, f in full["flops_per_step"].items()}
    train = [m for m in run.metrics() if m.get("kind") == "train" and m["step"] < step]
    nfe = [int(m["nfe_forward"]) if model_key == "cat" else 0 for m in train]
    return float(sum(per[n] for n in nfe)), float(sum(m["seconds"] for m in train))


def ladder_point(at: list, model_key: str, corpus, lengths, caps, device=None,
                 train_length: int | None = None, span_length: int | None = None) -> dict:
    """One point of a frontier from the weights of several seeds' runs: ``at`` lists
    ``(run, step)``, one per seed. ``{"train_flops", "seconds"}`` (the mean over the seeds of
    :func:`step_train_flops`), ``"ce": {"<length>": [CE per seed]}``, ``"se"`` (the same,
    each CE's standard error from window sampling), ``"windows": {"<length>": n}`` and
    ``"window_ce": {"<length>": [n]}`` (each window's CE, the mean over the seeds)
    (:func:`ladder_scores`); with ``train_length``, ``"train_ce": {"<length>": [...]}``: CE
    on as many windows of the training split at that length (where a row overfits).
    Chapter 10's frontier and the scale study build their points here."""
    counted = [step_train_flops(run, model_key, step) for run, step in at]
    scores = [ladder_scores(run, model_key, step, corpus, lengths, caps, device,
                            span_length=span_length) for run, step in at]
    point = {"train_flops": float(np.mean([c[0] for c in counted])),
             "seconds": float(np.mean([c[1] for c in counted])),
             "ce": {str(L): [s[str(L)]["ce"] for s in scores] for L in lengths},
             "se": {str(L): [s[str(L)]["se"] for s in scores] for L in lengths},
             "windows": {str(L): scores[0][str(L)]["windows"] for L in lengths},
             # each window's CE, the mean over the seeds: the paired error of a difference
             # between two points of the same seeds (the mean of differences is linear)
             "window_ce": {str(L): np.round(np.mean([s[str(L)]["window_ce"] for s in scores], 0),
                                            6).tolist() for L in lengths}}
    if train_length is not None:
        cap = caps[list(lengths).index(train_length)]
        seen = [ladder_scores(run, model_key, step, corpus, [train_length], [cap], device,
                              split="train", span_length=span_length) for run, step in at]
        point["train_ce"] = {str(train_length): [s[str(train_length)]["ce"] for s in seen]}
    return point
