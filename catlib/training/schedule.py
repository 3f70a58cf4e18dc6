"""What a training step's number decides: the learning rate (:func:`learning_rate`, the
recipe "constant" or "wsd" and where its decay starts), the Sobolev penalty's weight
(:func:`penalty_weight`) and, for ODE-consistent training, the solver's step count
(:func:`drawn_solver_steps`). Each is a function of the 0-based step and the settings only,
so that a resumed run, every rank and a run branched from a longer one see the same values.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

SCHEDULES = ("constant", "wsd")


class Recipe(Protocol):
    """What :func:`learning_rate` reads of a run's settings (a
    :class:`~catlib.training.config.TrainConfig`, which imports this module for
    :data:`SCHEDULES` and :func:`decay_start`; this module imports nothing of it)."""

    lr: float
    schedule: str
    warmup: int
    train_steps: int
    decay_share: float


def penalty_weight(step: int, train_steps: int, sob_lambda: float, once: bool) -> float:
    """Weight of the returned penalty at 0-based ``step`` (see :mod:`catlib.training.loop`);
    ``train_steps``: the steps its schedule runs over (``TrainConfig.penalty_horizon``, or
    the run's length)."""
    schedule = max(0.2, 1.0 - step / train_steps)
    return schedule if once else sob_lambda * schedule


def decay_start(train_steps: int, decay_share: float) -> int:
    """The first step (0-based) of a "wsd" run's decay: its last ``decay_share`` of
    ``train_steps`` decays (at least one step where the share is not 0). The steps before
    it are those a run of ``train_steps`` shares with any longer run of the same recipe, so
    a shorter run branched from a longer one (``TrainConfig.branches``) starts from the
    longer run's state after this many steps."""
    n = round(decay_share * train_steps)
    return train_steps - (max(1, n) if decay_share else 0)


def learning_rate(step: int, tc: Recipe) -> float:
    """The learning rate of 0-based ``step``: ``tc.lr`` (constant), or for "wsd" ``lr (step +
    1) / warmup`` during the warm-up, ``lr`` until :func:`decay_start`, then ``lr (n -
    step) / d`` over the last d steps of n, down to lr / d at the last step (the rate a
    step would take after the run is 0). The warm-up and the constant part do not depend
    on the run's length, so a shorter run is a longer one's prefix up to its decay."""
    if tc.schedule == "constant":
        return tc.lr
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    start = decay_start(tc.train_steps, tc.decay_share)
    if step < start:
        return tc.lr
    return tc.lr * (tc.train_steps - step) / (tc.train_steps - start)


def drawn_solver_steps(counts: tuple[int, ...], seed: int, step: int) -> int:
    """The fixed-step solver's step count of training step ``step`` (0-based), drawn
    uniformly from ``counts`` by a generator of its own, seeded from ``(seed, step)``: the
    same on every rank and after a resume, and the global RNGs (batches, dropout) untouched."""
    key = int(np.random.SeedSequence([seed, step]).generate_state(1, np.uint64)[0])
    g = torch.Generator().manual_seed(key)
    return counts[int(torch.randint(len(counts), (), generator=g))]
