"""EvalConfig: the evaluation settings of a run, with their only defaults.

The context-length evaluation (:mod:`catlib.measure.evaluate`), a run's evaluation
(:mod:`catlib.runs.evaluation`), training a run and the command line take their
defaults from this dataclass; the help of its ``train``/``eval`` flags is in
:mod:`catlib.cli.flags`, beside every other flag's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

PUBLISHED_LENGTHS = (128, 512, 1024, 5000)


@dataclass(frozen=True)
class EvalConfig:
    """How a run is evaluated (defaults: the published protocol, batched).

    ``lengths``: context lengths L; ``eval_windows``: the cap on windows per length;
    ``batch_tokens``: tokens per forward pass (1: the published batch of one window);
    ``leak_length``: the sequence length of the leak score; ``dropout_in_eval``: dropout
    on, as the published script evaluates; ``curve_windows``: the cap on windows at the
    longest length when it is scored per position (None: ``eval_windows``);
    ``span_length``: every length reads the same text, the span the windows of this length
    tile, windows spread evenly over it (:mod:`catlib.measure.evaluate`; None: the published
    protocol, the first windows at each length).
    """

    lengths: tuple = PUBLISHED_LENGTHS
    eval_windows: int = 256
    batch_tokens: int = 32768
    leak_length: int = 64
    dropout_in_eval: bool = False
    curve_windows: int | None = None
    span_length: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lengths, (list, int)):  # from JSON, or a single length
            lengths = (self.lengths,) if isinstance(self.lengths, int) else tuple(self.lengths)
            object.__setattr__(self, "lengths", lengths)

    def replace(self, **changes) -> "EvalConfig":
        """A copy with the ``changes`` that are not None (a caller's unset keywords)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["lengths"] = list(self.lengths)
        return d


DEFAULTS = EvalConfig()
