"""Shorter runs branched from a longer one (``TrainConfig.branches``).

On the "wsd" recipe a run of n steps shares its steps before its decay
(:func:`~catlib.training.schedule.decay_start`) with every longer run of the same model and
recipe. The longer run (the trunk) keeps its training state there (``branch-<n>.pt``,
:func:`save_branch`); the run of n steps then starts from it (:func:`branch_state`) and is
the run of n steps trained alone, bit for bit on the CPU (tests/test_recipe.py).

The branches train after the trunk, only from a finished trunk, within what is left of the
trunk's time budget (:func:`branch_configs`).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Iterator

from ..nn.config import CATConfig
from ..training.config import TrainConfig
from ..training.loop import SideBySide
from .errors import RunError
from .files import atomic_save, load_checkpoint
from .run import Run


def branch_name(trunk: str, steps: int) -> str:
    """The directory name of the run of ``steps`` branched from the run named ``trunk``."""
    return f"{trunk}-to-{steps}"


def branch_file(train_steps: int) -> str:
    """The file of the state a run of ``train_steps`` branches from (``TrainConfig.branches``)."""
    return f"branch-{train_steps}.pt"


def save_branch(run: Run, trainer: SideBySide, train_steps: int) -> None:
    """The training state after ``trainer.step`` steps and the metrics of those steps: where
    a run of ``train_steps`` with this recipe starts its decay (:func:`train_run`'s
    ``start_from``)."""
    kept = [m for m in run.metrics() if m.get("step", -1) < trainer.step]
    atomic_save({"config_hash": run.hash, "step": trainer.step, "train_steps": train_steps,
                 "model": run.config["model"], "recipe": recipe(trainer.tc),
                 "trainer": trainer.state_dict(), "metrics": kept},
                run.path / branch_file(train_steps))


def recipe(tc: TrainConfig) -> dict:
    """What a run and the run it branches from must share: every field of the training's
    identity but its length and the files it keeps."""
    return {k: v for k, v in tc.identity().items()
            if k not in ("train_steps", "checkpoints", "branches")}


def branch_state(start_from, model_config: CATConfig, train_config: TrainConfig) -> dict:
    """The branch file ``start_from`` (:func:`save_branch`), checked to be the start of a
    run of ``model_config`` and ``train_config``: RunError naming what differs."""
    path = Path(start_from)
    if not path.is_file():
        raise RunError(f"{path} does not exist: train the longer run first (its "
                       f"TrainConfig.branches must list {train_config.train_steps})")
    state = load_checkpoint(path)
    if not isinstance(state, dict) or "trainer" not in state:
        raise RunError(f"{path} is not a branch file")
    if state.get("train_steps") != train_config.train_steps:
        raise RunError(f"{path} starts a run of {state.get('train_steps')} steps, not "
                       f"{train_config.train_steps}")
    if state.get("model") != model_config.to_dict() or state.get("recipe") != recipe(train_config):
        raise RunError(f"{path} was written by a run of another model or recipe; a run branches "
                       "only from a longer run of its own model and recipe")
    return state


def branch_configs(trunk: Run, train_config: TrainConfig, started: float,
                   say: Callable[[str], None]) -> Iterator[TrainConfig]:
    """The training configs of the trunk's branches, one at a time, as each is to train.

    Nothing where the trunk ``trunk`` (of ``train_config``) has not finished: its budget
    stopped it, maybe before a branch's file exists; the next session goes on. Under a time
    budget, each branch gets what is left of it (``time.monotonic()`` since ``started``,
    when the trunk's session began), read when the branch is about to train, so that the
    trunk and its branches share the one budget; none once it is spent. The budget is not
    part of a run's identity: a branch's config hash is the same with any budget. ``say``
    tells why branches are not trained.
    """
    if trunk.status["status"] != "finished":
        say(f"{trunk.path} stopped before its end (budget): its branches "
            f"{list(train_config.branches)} train once it has finished; run the same "
            "command again to continue")
        return
    for i, steps in enumerate(train_config.branches):
        budget = train_config.budget
        if budget is not None:
            budget -= time.monotonic() - started
            if budget <= 0:
                say(f"budget of {train_config.budget:g} s spent: the branches "
                    f"{list(train_config.branches[i:])} of {trunk.path} are not trained yet; "
                    "run the same command again to train them")
                return
        yield dataclasses.replace(train_config, train_steps=steps, branches=(), checkpoints=(),
                                  budget=budget)
