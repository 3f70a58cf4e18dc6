"""ExperimentConfig: the book's experiment as one typed value (a profile's experiment).

What every row of :mod:`catlib.experiment.grid` shares: the model's sizes (a
:class:`~catlib.nn.config.CATConfig`, whose ``variant`` and kernel options each row sets),
the training settings (a :class:`~catlib.training.loop.TrainConfig`, whose ``seed``, ``split``
and ``models`` each row and seed set), the evaluation (an
:class:`~catlib.measure.config.EvalConfig`; the longest length is scored per position) and
the seeds; the corpus of its causal rows; and the settings of chapter 09's
repeated-passage study (:class:`StudyConfig`).
A notebook receives it as plain papermill parameters, one per field;
:meth:`ExperimentConfig.from_parameters` reads them back by the fields' names, so no list
of keys is kept by hand.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..data import check_corpus
from ..measure.config import EvalConfig
from ..nn.config import CATConfig
from ..training.config import TrainConfig


@dataclass(frozen=True)
class StudyConfig:
    """The repeated-passage study of chapter 09 (rows with ``Row.study``): its models'
    ``study_blocks``, its CATs' depth solver ``study_solver`` (one step of it per block,
    ``solver_steps`` of the experiment), and the share of each batch (``study_share``) made
    of a passage of r characters repeated to the training length, r drawn from
    ``study_periods`` (lo, hi) (:class:`~catlib.data.BatchSampler`), ``study_batch``
    sequences per step (None: the experiment's ``batch``). Names of their own,
    not those of CATConfig or TrainConfig, so that a notebook's parameters reach the
    study's rows only."""

    study_blocks: int = 2
    study_solver: str = "euler"
    study_share: float = 0.5
    study_periods: tuple = (8, 112)
    study_batch: int | None = None

    def label(self) -> str:
        """How the study's rows were trained, e.g. "repeat p=0.25, r=8-112"."""
        lo, hi = self.study_periods
        return f"repeat p={self.study_share:g}, r={lo}-{hi}"


# The parts of an ExperimentConfig: attribute -> its dataclass.
PARTS = {"model": CATConfig, "train": TrainConfig, "evaluation": EvalConfig,
         "study": StudyConfig}
# TrainConfig fields that a row and seed set (Row.split, Row.trains, the seed).
ROW_TRAIN_FIELDS = ("seed", "split", "models")


@dataclass(frozen=True)
class ExperimentConfig:
    """The sizes, training, evaluation and seeds shared by the experiment's rows."""

    model: CATConfig = field(default_factory=CATConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    study: StudyConfig = field(default_factory=StudyConfig)
    seeds: tuple = (0,)
    published_seeds: tuple = (0,)
    # The corpus the causal rows train on and are scored on (catlib.data.CORPORA): "tiny",
    # or "code" (issue 62); the published rows keep Tiny Shakespeare's published split.
    corpus: str = "tiny"

    def __post_init__(self):
        check_corpus(self.corpus)      # one line naming the corpora

    @classmethod
    def from_parameters(cls, params: dict) -> "ExperimentConfig":
        """The experiment of a notebook's (or profile's) parameters: each parameter that
        names a field of CATConfig, TrainConfig, EvalConfig or StudyConfig goes to that
        part, ``seeds`` and ``published_seeds`` to the seeds (a single ``seed``: both); others are ignored
        (a notebook's own settings, e.g. ``check_windows``). The evaluation's ``span_length``
        is the longest length unless given (every length reads the same text; the
        published split's rows keep the published protocol: ``grid.span_of``)."""
        parts = {}
        for name, config in PARTS.items():
            names = {f.name for f in dataclasses.fields(config)}
            parts[name] = config(**{k: _plain(v) for k, v in params.items() if k in names})
        if "span_length" not in params and "lengths" in params:
            # The book's protocol: every length reads the text its longest length tiles.
            parts["evaluation"] = parts["evaluation"].replace(
                span_length=max(parts["evaluation"].lengths))
        seeds = tuple(params.get("seeds", (params.get("seed", 0),)))
        return cls(**parts, seeds=seeds, published_seeds=tuple(params.get("published_seeds",
                                                                          seeds[:1])),
                   corpus=params.get("corpus", "tiny"))

    def shared(self) -> tuple:
        """What two chapters must agree on to share their runs: the model, the training
        settings that change the weights but are not set per row, and the evaluation (not
        the study, whose rows are chapter 09's only)."""
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
