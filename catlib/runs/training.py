"""Training a run: reuse a finished run, resume an unfinished one, or start afresh; then
train, checkpoint, write the final weights and evaluate (:func:`train_run`).

Identity. A finished run whose config hash (:mod:`catlib.runs.identity`) matches is
reused; its stored evaluation only if it was made by this code, with the same settings,
of the very weights on disk. A directory holding a run of other code with the same
settings is retrained only with ``retrain``.

Robustness. Every input is checked before anything is written. A session writes
``status.json`` "starting" before it changes anything, so a crash at any moment leaves a
directory the next session resumes or restarts exactly; a damaged directory (unreadable
or missing file, a checkpoint of another config, a metrics log with a hole) is refused
with a RunError naming the file, and nothing is overwritten.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import time
from pathlib import Path
from typing import Callable

import torch

from ..training import distributed
from ..data import Corpus, corpus_of, load_corpus
from ..common.devices import resolve_device
from ..measure.config import EvalConfig
from ..measure.evaluate import check_settings
from ..nn.config import CATConfig
from ..common.provenance import code_fingerprint, environment, fingerprint_files
from ..training.config import TrainConfig
from ..training.loop import NonFiniteLoss, SideBySide, train_loop
from ..training.schedule import decay_start
from .branches import branch_configs, branch_file, branch_name, branch_state, save_branch
from .errors import RunError, RunInterrupted, StorageError, TrainingFailed
from .evaluation import _stored_eval, eval_settings, evaluate_run
from .faults import _fault_point
from .files import _is_temporary, _write_json, atomic_save, atomic_write_text, load_checkpoint
from .follower import _follow
from .identity import config_hash, run_dir_name
from .lock import run_lock
from .run import RESULT_FILES, RUN_PACKAGES, WEIGHT_FILES, Run, _status_of, open_run
from .stored import require_stored


def train_run(model_config: CATConfig, train_config: TrainConfig, *, root="runs",
              name: str | None = None, device="auto", data=None, retrain: bool = False,
              evaluation: EvalConfig | None = None, lengths=None, eval_windows: int | None = None,
              dropout_in_eval: bool | None = None, batch_tokens: int | None = None,
              evaluate: bool = True, progress: bool = True,
              echo: Callable[[str], None] | None = print,
              on_step: Callable[[dict], None] | None = None,
              start_from=None) -> Run | None:
    """Train (or reuse, or resume) a side-by-side run in ``root/name`` and evaluate it.

    ``root``, ``name``: the run directory (``name`` defaults to ``<variant>-<config
    hash>``); ``device``: "auto", "cpu", "cuda", "mps" or a torch.device; ``data``: the
    corpus path (default: :func:`catlib.data.corpus_path`); ``retrain``: start afresh even
    where a finished run exists. The evaluation after training: ``evaluation``
    (:class:`~catlib.measure.config.EvalConfig`, default its defaults), with any of
    ``lengths``, ``eval_windows``, ``dropout_in_eval``, ``batch_tokens`` given replacing
    its field; ``evaluate=False`` skips it. ``progress`` draws a progress bar,
    ``echo`` prints the published progress line, ``on_step(metrics)`` is called after
    every step. ``start_from``: a branch file of a longer run of the same model and recipe
    (``TrainConfig.branches``): a new run starts from its state instead of from step 0 (the
    very state this run would reach by itself: its steps before its decay are the longer
    run's), its metrics included; an existing run resumes or is reused as ever. Errors: see
    :func:`_train_run`. ``train_config.branches``: once this run has finished, each shorter
    run (``<name>-to-<steps>``) from its branch file, within what is left of the time budget
    (:func:`catlib.runs.branches.branch_configs`).

    Under torchrun (:mod:`catlib.training.distributed`) rank 0 does all of :func:`_train_run` and
    tells the other ranks, once the run directory is ready, to train beside it (from its
    checkpoint), or the error to raise; they return None, without evaluating.
    """
    started = time.monotonic()   # the branches train within what the trunk left of the budget
    evaluation = (evaluation or EvalConfig()).replace(
        lengths=lengths, eval_windows=eval_windows, dropout_in_eval=dropout_in_eval,
        batch_tokens=batch_tokens)
    options = dict(root=root, name=name, device=device, data=data, retrain=retrain,
                   evaluation=evaluation, evaluate=evaluate, progress=progress, echo=echo,
                   on_step=on_step, start_from=start_from)
    try:
        distributed.check_batch(train_config.batch)
    except ValueError as e:
        raise RunError(str(e)) from None
    if train_config.branches and distributed.active():
        raise RunError("a run with branches (TrainConfig.branches) trains in one process; "
                       "run it without torchrun")
    if not distributed.is_main():
        return _follow(model_config, train_config, **options)
    gate = distributed.Gate()
    try:
        run = _train_run(model_config, train_config, ready=gate.open, **options)
    except BaseException as e:
        gate.refuse(e)  # before training only: then the other ranks raise it too
        raise
    gate.open({"action": "done"})
    # Each shorter run, from this one's state, once this run has finished (catlib.runs.branches).
    # ``on_step`` follows this run's steps only: a branch's steps start again below its end
    # (a pool's progress line would run backwards).
    for short in branch_configs(run, train_config, started, echo or (lambda s: None)):
        steps = short.train_steps
        train_run(model_config, short, root=run.path.parent, name=branch_name(run.path.name, steps),
                  device=device, data=data, retrain=retrain, evaluate=False, progress=progress,
                  echo=echo, start_from=run.path / branch_file(steps))
    return run


def _train_run(model_config: CATConfig, train_config: TrainConfig, *, root, name: str | None,
               device, data, retrain: bool, evaluation: EvalConfig, evaluate: bool,
               progress: bool,
               echo: Callable[[str], None] | None, on_step: Callable[[dict], None] | None,
               start_from=None, ready: Callable[[dict], None] = lambda info: None) -> Run:
    """Train (or reuse, or resume) a side-by-side run in ``root/name`` and evaluate it; the
    options and their defaults are :func:`train_run`'s, which passes every one.

    ``name`` None means ``<variant>-<config hash>``. Every input (training and evaluation
    settings, corpus, device, an existing directory) is checked before anything is
    written: RunError (bad input) or DataError (corpus).
    During training, Ctrl-C saves a checkpoint and raises RunInterrupted; a NaN or
    infinite loss raises TrainingFailed, keeping the last good checkpoint; a file that
    cannot be written (disk full) raises StorageError, keeping the last checkpoint.
    ``ready(info)`` is called once the directory is ready: to reuse it, or to train from
    its checkpoint (torchrun's other ranks then start, see :func:`train_run`).
    """
    say = echo or (lambda s: None)
    # 1. Inputs, before anything is read from or written to the run directory.
    corpus, dev = _check_inputs(model_config.resolved(), train_config, data, device, evaluation)
    model_config = model_config.resolved(dev)       # solver None: the device's default
    code = code_fingerprint()
    h = config_hash(model_config, train_config, corpus.sha256, code)
    path = Path(root) / (name or run_dir_name(model_config, h))
    ev = evaluation
    settings = eval_settings(ev.lengths, ev.eval_windows, ev.dropout_in_eval, ev.leak_length,
                             span_length=ev.span_length)
    config = {"hash": h, "model": model_config.to_dict(), "train": train_config.to_dict(),
              "eval": settings, "data_sha256": corpus.sha256,
              "code": {"fingerprint": code, "files": fingerprint_files()}}
    score = functools.partial(evaluate_run, lengths=ev.lengths, eval_windows=ev.eval_windows,
                              dropout_in_eval=ev.dropout_in_eval, batch_tokens=ev.batch_tokens,
                              leak_length=ev.leak_length, device=dev, corpus=corpus,
                              span_length=ev.span_length)
    # 2. An existing directory: read only, so that a damaged one is left as it is.
    existing = _check_existing(path, model_config, train_config, corpus.sha256, h, code, retrain)
    if not existing or retrain:
        require_stored(f"the run {path}")           # under stored_only(): nothing to reuse
    _make_directory(path)

    # 3. Under the lock: reuse, or decide between resuming and starting afresh.
    with run_lock(path, say):
        run = Run(path, config)
        status = _status_of(run)["status"] if existing and not retrain else "new"
        if status == "finished" and not retrain:
            return _reuse(run, settings, score if evaluate else None, ready, say)
        require_stored(f"the finished run {path}")  # before a byte of it is written
        resume = not retrain and status not in ("new", "starting")
        trainer = SideBySide(model_config, train_config, corpus.train, dev)
        kept = _resume_state(run, trainer, status) if resume else None
        branch = (branch_state(start_from, model_config, train_config)
                  if start_from is not None and not resume else None)
        if branch is not None:   # a new run from the longer run's state, its metrics included
            trainer.load_state_dict(branch["trainer"])
            kept = branch["metrics"]
        # 4. Writing starts (see _start_session); then the training session.
        _start_session(run, trainer, kept, dev, say, branched=branch is not None)
        last_good = trainer.step
        run.set_status("running", trainer.step)
        ready({"action": "train", "path": str(path)})  # checkpoint.pt holds trainer's state
        _train(run, trainer, corpus, last_good, echo, progress, on_step)
        if evaluate:
            score(run)
    return run


def _check_inputs(model_config: CATConfig, train_config: TrainConfig, data, device,
                  evaluation: EvalConfig) -> tuple[Corpus, torch.device]:
    """Step 1 of :func:`_train_run`: check the training and evaluation settings, load the
    corpus (DataError) and check the config against it, resolve the device; bad input
    raises RunError. Returns ``(corpus, device)``."""
    try:
        train_config.validate(causal=model_config.causal)
        check_settings(evaluation.lengths, evaluation.eval_windows, evaluation.batch_tokens,
                       model_config.causal, evaluation.leak_length)
    except ValueError as e:
        raise RunError(str(e)) from None
    corpus = load_corpus(data, split=train_config.split)
    if model_config.vocab_size != len(corpus.vocab):
        name = corpus_of(corpus.split)
        raise RunError(f"vocab_size must be {len(corpus.vocab)} for the {name} corpus (split "
                       f"{corpus.split!r}), got {model_config.vocab_size}; set "
                       f"CATConfig(vocab_size=catlib.data.vocab_size({name!r}))")
    try:
        train_config.validate(len(corpus.train))
    except ValueError as e:
        raise RunError(str(e)) from None
    dev = resolve_device(device) if isinstance(device, str) else torch.device(device)
    return corpus, dev


def _same_settings(run: Run, model_config: CATConfig, train_config: TrainConfig, sha: str) -> bool:
    return (run.model_config.resolved().to_dict() == model_config.to_dict()
            and run.train_config.identity() == train_config.identity()
            and run.config.get("data_sha256") == sha)


def _check_existing(path: Path, model_config: CATConfig, train_config: TrainConfig, sha: str,
                    h: str, code: str, retrain: bool) -> bool:
    """Step 2 of :func:`_train_run`: whether ``path`` holds a run (more than a lock and
    temporary files). Such a run is only read, so that a damaged one is left as it is: it
    must be this config's (config hash ``h``; a run of other code ``code`` with the same
    settings only with ``retrain``) and, unless ``retrain``, undamaged (RunError)."""
    existing = path.exists() and (not path.is_dir() or any(
        p.name != "lock" and not _is_temporary(p) for p in path.iterdir()))
    if existing:
        run = open_run(path)
        if run.hash != h:
            if run.code != code and _same_settings(run, model_config, train_config, sha):
                if not retrain:
                    raise RunError(f"{path} was trained by other catlib code (code fingerprint "
                                   f"{run.code or 'not recorded'}, this code {code}); pass --retrain "
                                   "to train it again with this code, or choose another --name")
            else:
                raise RunError(f"{path} holds a run with another config (hash {run.hash}, this one "
                               f"{h}); choose another --name or --run-dir")
        if not retrain:
            _status_of(run)
    return existing


def _make_directory(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot create the run directory {path} ({e.strerror}); "
                       "choose another --run-dir") from None


def _reuse(run: Run, settings: dict, score: Callable[[Run], dict] | None,
           ready: Callable[[dict], None], say: Callable[[str], None]) -> Run:
    """A finished run of this config, reused as it is (under its lock): its stored
    evaluation if it scored these weights with these ``settings`` by this code, else
    ``score(run)`` (a new evaluation); ``score`` None: no evaluation."""
    say(f"reusing finished run {run.path} (config hash {run.hash}); pass --retrain to train again")
    run.reused = True
    ready({"action": "reuse"})
    if score is not None:
        stored = _stored_eval(run, settings)
        if stored is None:
            require_stored(f"the evaluation of {run.path}")
        run.result = stored or score(run)
    return run


def _resume_state(run: Run, trainer: SideBySide, status: str) -> list[dict]:
    """Load the run's checkpoint into ``trainer`` to resume the run (its ``status``:
    running, interrupted, stopped or failed); return the metrics of the steps it holds.
    RunError if the checkpoint is missing, of another config or does not fit, or if the
    metrics log does not hold every one of its steps (nothing is written yet)."""
    path = run.path
    if not (path / "checkpoint.pt").exists():
        raise RunError(f"{path / 'checkpoint.pt'} is missing, but the run is {status}; "
                       "restore it, or pass --retrain to train the run afresh")
    state = load_checkpoint(path / "checkpoint.pt")
    if not isinstance(state, dict) or state.get("config_hash") != run.hash:
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
    return kept


def _start_session(run: Run, trainer: SideBySide, kept: list[dict] | None, dev: torch.device,
                   say: Callable[[str], None], branched: bool = False) -> None:
    """Step 4 of :func:`_train_run`, where writing starts: config.json and env.json, then
    the metrics ``kept`` of the trainer's steps (None: none), the results of earlier weights
    removed. A resumed run goes on from its checkpoint; a run started afresh (``kept``
    None) or from a longer run's branch file (``branched``, ``kept`` its metrics) gets a
    checkpoint of ``trainer``, "starting" written before anything else changes: a crash from
    there to that checkpoint leaves a run the next session starts afresh (nothing trained is
    lost). In a new directory config.json comes first, so that a crash before "starting"
    leaves a directory that is still new (a status.json without config.json would be damage)."""
    path, resume = run.path, kept is not None and not branched
    starting = not resume and (path / "status.json").exists()
    if starting:  # before the old results go
        run.set_status("starting", 0)
    _write_json(path / "config.json", run.config)
    _write_json(path / "env.json", {
        **environment(RUN_PACKAGES, dev), "code_fingerprint": code_fingerprint(),
        "world_size": distributed.world_size(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    if not resume and not starting:
        run.set_status("starting", 0)
    if kept is not None:
        atomic_write_text(path / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in kept))
    else:
        (path / "metrics.jsonl").unlink(missing_ok=True)
    for f in RESULT_FILES:  # an evaluation of earlier weights is stale now
        (path / f).unlink(missing_ok=True)
    if resume:
        say(f"resuming {path} from step {trainer.step} of {trainer.tc.train_steps}")
    else:
        _save_checkpoint(run, trainer)


def _save_checkpoint(run: Run, trainer: SideBySide) -> int:
    atomic_save({"config_hash": run.hash, "trainer": trainer.state_dict()}, run.path / "checkpoint.pt")
    return trainer.step


class _MetricsLog:
    """``metrics.jsonl`` open for appending during a training session: one unbuffered
    write per record; a failing write or fsync raises StorageError naming the file."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "ab", buffering=0)  # one os.write per record, no stale buffer

    def write(self, m: dict) -> None:
        """Append the metrics record ``m`` as one JSON line."""
        line = (json.dumps(m) + "\n").encode()
        try:
            _fault_point("metrics.jsonl", tear=lambda: self.file.write(line[:len(line) // 2]))
            if self.file.write(line) != len(line):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            raise StorageError(f"cannot write {self.path} ({e.strerror or e})") from None

    def sync(self) -> None:
        """fsync: the records written so far are on disk."""
        try:
            os.fsync(self.file.fileno())
        except OSError as e:
            raise StorageError(f"cannot write {self.path} ({e.strerror or e})") from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


def _train(run: Run, trainer: SideBySide, corpus: Corpus, last_good: int, echo, progress,
           on_step) -> None:
    """The training session of :func:`train_run`: metrics, checkpoints, final weights, status."""
    path, tc = run.path, trainer.tc
    log = _MetricsLog(path / "metrics.jsonl")
    ladder_at = None  # the step whose ladder and branch files this session has written
    branch_at: dict[int, list[int]] = {}   # step -> the shorter runs branching there (two
    for n in tc.branches:                  # lengths can start their decay at one step)
        branch_at.setdefault(decay_start(n, tc.decay_share), []).append(n)

    def kept_after(step: int) -> list[Path]:
        """The files the run keeps after ``step`` steps: its models' ladder weights and the
        states the shorter runs branch from."""
        return ([path / ladder_file(step, m) for m in tc.models] if step in tc.checkpoints
                else []) + [path / branch_file(n) for n in branch_at.get(step, ())]

    def ladder() -> None:
        """At a ladder point, the weights after this step; where shorter runs branch, the
        training state after this step (:func:`save_branch`); once per step."""
        nonlocal ladder_at
        if trainer.step == ladder_at:
            return
        if trainer.step in tc.checkpoints:
            _save_ladder(run, trainer)
        if trainer.step in branch_at:
            log.sync()
            for n in branch_at[trainer.step]:
                save_branch(run, trainer, n)
        ladder_at = trainer.step

    def checkpoint() -> None:
        nonlocal last_good
        # The ladder files first: a checkpoint at a ladder step implies them, since a run
        # resumed from it never trains that step again (a kill or Ctrl-C between the two
        # writes would lose them for good).
        ladder()
        log.sync()  # the metrics of every checkpointed step are on disk
        last_good = _save_checkpoint(run, trainer)

    def step_done(m: dict) -> None:
        ladder()  # the ladder points that are not checkpointed (written once per step)
        if on_step:
            on_step(m)

    try:
        # A run resumed from a ladder step's checkpoint that older code wrote before the
        # step's ladder files, then was cut: the weights just restored are that step's.
        if not all(f.exists() for f in kept_after(trainer.step)):
            ladder()
        reason = train_loop(trainer, val_ids=corpus.val, log=log.write, checkpoint=checkpoint,
                            echo=echo, progress=progress, on_step=step_done)
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
        log.close()
    _finish(run, trainer, reason)


def ladder_file(step: int, model: str) -> str:
    """The file of a ladder point (``TrainConfig.checkpoints``) in the run directory."""
    return f"ladder-{step}-{model}.pt"


def _save_ladder(run: Run, trainer: SideBySide) -> None:
    """The weights of each trained model after ``trainer.step`` steps, as :func:`_finish`
    writes the final ones."""
    for m in trainer.tc.models:
        model = trainer.cat if m == "cat" else trainer.base
        atomic_save({"config_hash": run.hash, "config": run.config["model"], "step": trainer.step,
                     "state_dict": model.state_dict()}, run.path / ladder_file(trainer.step, m))


def _finish(run: Run, trainer: SideBySide, reason: str) -> None:
    """After training ended by itself: the final weights and "finished" (``reason``
    "finished"), or "stopped" (the time budget was reached; the run continues next time)."""
    if reason == "finished":
        for m in trainer.tc.models:
            model = trainer.cat if m == "cat" else trainer.base
            atomic_save({"config_hash": run.hash, "config": run.config["model"], "step": trainer.step,
                         "state_dict": model.state_dict()}, run.path / WEIGHT_FILES[m])
        run.set_status("finished", trainer.step)
    else:
        run.set_status("stopped", trainer.step, f"budget reached after {trainer.step} steps; "
                       "run the same command again to continue")
