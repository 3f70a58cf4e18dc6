"""ExperimentConfig: the book's experiment as one typed value (a profile's experiment).

What every row of :mod:`catlib.experiment` shares: the model's sizes (a
:class:`~catlib.nn.config.CATConfig`, whose ``variant`` and kernel options each row sets),
the training settings (a :class:`~catlib.train.TrainConfig`, whose ``seed``, ``split``
and ``models`` each row and seed set), the evaluation (an
:class:`~catlib.eval_config.EvalConfig`; the longest length is scored per position) and
the seeds. A notebook receives it as plain papermill parameters, one per field;
:meth:`ExperimentConfig.from_parameters` reads them back by the fields' names, so no list
of keys is kept by hand.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .eval_config import EvalConfig
from .nn.config import CATConfig
from .train import TrainConfig

# The parts of an ExperimentConfig: attribute -> its dataclass.
PARTS = {"model": CATConfig, "train": TrainConfig, "evaluation": EvalConfig}
# TrainConfig fields that a row and seed set (Row.split, Row.trains, the seed).
ROW_TRAIN_FIELDS = ("seed", "split", "models")


@dataclass(frozen=True)
class ExperimentConfig:
    """The sizes, training, evaluation and seeds shared by the experiment's rows."""

    model: CATConfig = field(default_factory=CATConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    seeds: tuple = (0,)
    published_seeds: tuple = (0,)

    @classmethod
    def from_parameters(cls, params: dict) -> "ExperimentConfig":
        """The experiment of a notebook's (or profile's) parameters: each parameter that
        names a field of CATConfig, TrainConfig or EvalConfig goes to that part, ``seeds``
        and ``published_seeds`` to the seeds (a single ``seed``: both); others are ignored
        (a notebook's own settings, e.g. ``check_windows``)."""
        parts = {}
        for name, config in PARTS.items():
            names = {f.name for f in dataclasses.fields(config)}
            parts[name] = config(**{k: _plain(v) for k, v in params.items() if k in names})
        seeds = tuple(params.get("seeds", (params.get("seed", 0),)))
        return cls(**parts, seeds=seeds, published_seeds=tuple(params.get("published_seeds",
                                                                          seeds[:1])))

    def shared(self) -> tuple:
        """What two chapters must agree on to share their runs: the model, the training
        settings that change the weights but are not set per row, and the evaluation."""
        ident = {k: v for k, v in self.train.identity().items() if k not in ROW_TRAIN_FIELDS}
        return self.model, ident, self.evaluation

    @property
    def curve_length(self) -> int:
        """The longest length, scored per position (the others by the run's evaluation)."""
        return self.evaluation.lengths[-1]

    @property
    def table_lengths(self) -> tuple:
        """The lengths the run's own evaluation scores: all but the last."""
        return tuple(self.evaluation.lengths[:-1])


def _plain(value):
    """A parameter as a config field takes it: lists (papermill, JSON) as tuples."""
    return tuple(value) if isinstance(value, list) else value
