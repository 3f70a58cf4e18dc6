"""The training's settings (:class:`TrainConfig`): what a run trains, for how long and
with which recipe, checked (:meth:`TrainConfig.validate`) and named (:meth:`TrainConfig.identity`,
the part of a run's config hash that decides its weights)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..data import ALL_SPLITS, check_repeats
from ..nn.config import check_finite
from .optim import DECAY_ON
from .schedule import SCHEDULES, decay_start


MODELS = ("cat", "base")  # the two models of a side-by-side run
SEED_MAX = 2**32 - 1      # numpy's global seed is a 32-bit unsigned integer


@dataclass
class TrainConfig:
    """Settings of the training loop (defaults: the published script).

    Only ``train_steps, lr, batch, seq, seed, split, models, weight_decay_on`` and the
    repeated passages (``repeat_share``, ``repeat_periods``: :class:`~catlib.data.BatchSampler`)
    change the trained weights (:meth:`identity`); the others control logging, checkpoints
    and time. ``checkpoints``: steps after which the run also keeps the weights of its
    models (``ladder-<step>-<model>.pt``: a ladder of shorter runs, the learning rate being
    constant); it enters the identity only when not empty.
    ``weight_decay_on``: the tensors AdamW decays, "all" or "matrices"; None follows the
    model's variant (published "all", causal "matrices"; :mod:`catlib.training.optim`). ``split`` is the
    corpus split, which names the corpus (:data:`catlib.data.CORPORA`: Tiny Shakespeare's
    "published" and "90/10", the code corpus's "files"); ``models`` the models trained: both, as
    published, or only ``("cat",)`` or ``("base",)``. ``deterministic``: only kernels that
    give the same bits on every run (:func:`~.loop.make_deterministic`); on the CPU the numbers
    are the same either way, on CUDA it decides whether a rerun repeats them bit for bit.
    """

    train_steps: int = 800
    lr: float = 3e-4
    batch: int = 32
    seq: int = 256
    seed: int = 0
    val_every: int = 0          # validate every N steps (0: never)
    val_windows: int = 8        # windows of length ``seq`` per validation
    checkpoint_every: int = 100
    log_every: int = 100        # the published progress line
    budget: float | None = None  # wall-clock seconds for this session's training
    split: str = "published"
    models: tuple = MODELS
    deterministic: bool = False  # deterministic kernels (see make_deterministic)
    weight_decay_on: str | None = None  # "all", "matrices"; None: by variant (catlib.training.optim)
    repeat_share: float = 0.0   # share of each batch made of a repeated passage (BatchSampler)
    repeat_periods: tuple[int, int] | None = None  # (lo, hi): the passage lengths drawn
    checkpoints: tuple[int, ...] = ()   # steps after which the weights are also kept (a ladder)
    # The learning-rate recipe (:func:`~.schedule.learning_rate`): "constant" (the published loop) or
    # "wsd": linear warm-up over ``warmup`` steps, the constant rate, then a linear decay
    # to zero over the last ``decay_share`` of the run.
    schedule: str = "constant"
    warmup: int = 0
    decay_share: float = 0.0
    # The Sobolev weight's schedule runs over this many steps (:func:`~.schedule.penalty_weight`);
    # None: the run's own ``train_steps`` (published), so that a run's first n steps depend
    # on its length; a number puts it on absolute steps, the same for every length.
    penalty_horizon: int | None = None
    # Shorter runs branched from this one (``branch-<steps>.pt``): the training state where
    # a run of that many steps starts its decay (:func:`~.schedule.decay_start`). With the
    # CAT, only on a Sobolev weight on absolute steps (``penalty_horizon``; see validate).
    branches: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.models, (list, str)):  # from JSON, or a single name
            self.models = (self.models,) if isinstance(self.models, str) else tuple(self.models)
        if isinstance(self.repeat_periods, list):  # from JSON
            self.repeat_periods = tuple(self.repeat_periods)
        if isinstance(self.checkpoints, list):  # from JSON
            self.checkpoints = tuple(self.checkpoints)
        if isinstance(self.branches, list):  # from JSON
            self.branches = tuple(self.branches)

    def validate(self, n_train: int | None = None, causal: bool | None = None) -> None:
        """Raise ValueError naming the field, the bad value and what is allowed.

        ``n_train``: training tokens of the split (bounds ``seq``); ``causal=False``: CAT is
        the published non-causal operator, undefined at T = 1, so ``seq`` must be >= 2.
        """
        check_finite(self)   # a NaN or inf float field
        for name in ("train_steps", "batch", "seq", "val_windows", "checkpoint_every", "log_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not isinstance(self.val_every, int) or self.val_every < 0:
            raise ValueError(f"val_every must be an integer >= 0, got {self.val_every!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) \
                or not 0 <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be an integer from 0 to {SEED_MAX} (numpy's seed range), "
                             f"got {self.seed!r}")
        if self.split not in ALL_SPLITS:
            raise ValueError(f"split must be one of {list(ALL_SPLITS)}, got {self.split!r}")
        if not self.models or len(set(self.models)) != len(self.models) \
                or not set(self.models) <= set(MODELS):
            raise ValueError(f"models must be one or both of {list(MODELS)}, without repeats, "
                             f"got {list(self.models)!r}")
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic must be True or False, got {self.deterministic!r}")
        if self.weight_decay_on not in (None, *DECAY_ON):
            raise ValueError(f"weight_decay_on must be one of {list(DECAY_ON)} or None (follows "
                             f"the variant), got {self.weight_decay_on!r}")
        check_repeats(self.repeat_share, self.repeat_periods, self.seq, self.batch)
        if any(not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.train_steps
               for n in self.checkpoints):
            raise ValueError(f"checkpoints must be steps from 1 to train_steps "
                             f"({self.train_steps}), got {list(self.checkpoints)!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if not isinstance(self.warmup, int) or isinstance(self.warmup, bool) or self.warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0 (steps), got {self.warmup!r}")
        if not (isinstance(self.decay_share, (int, float)) and 0 <= self.decay_share <= 1):
            raise ValueError(f"decay_share must be a number from 0 to 1, got {self.decay_share!r}")
        if self.schedule == "constant" and (self.warmup or self.decay_share):
            raise ValueError("warmup and decay_share belong to schedule='wsd'; the constant "
                             "schedule has neither (set schedule='wsd', or leave them 0)")
        if self.schedule == "wsd" and self.warmup > decay_start(self.train_steps, self.decay_share):
            raise ValueError(f"warmup ({self.warmup} steps) must end before the decay starts "
                             f"(step {decay_start(self.train_steps, self.decay_share)} of "
                             f"{self.train_steps}); use fewer warm-up steps or a smaller decay_share")
        if self.penalty_horizon is not None and (
                not isinstance(self.penalty_horizon, int) or isinstance(self.penalty_horizon, bool)
                or self.penalty_horizon < 1):
            raise ValueError(f"penalty_horizon must be a positive integer (steps) or None, "
                             f"got {self.penalty_horizon!r}")
        bad = [n for n in self.branches if not isinstance(n, int) or isinstance(n, bool)
               or not 1 <= n < self.train_steps]
        if bad or (self.branches and self.schedule != "wsd"):
            raise ValueError(f"branches must be run lengths from 1 to train_steps - 1 "
                             f"({self.train_steps - 1}) of a schedule='wsd' run, got "
                             f"{list(self.branches)!r}")
        late = [n for n in self.branches
                if not max(1, self.warmup) <= decay_start(n, self.decay_share)
                <= decay_start(self.train_steps, self.decay_share)]
        if late:
            raise ValueError(f"branches {late}: a branch must start its decay after the warm-up "
                             f"({self.warmup} steps) and before this run's own decay")
        # A CAT's Sobolev weight over the run's own length makes a run's first steps depend
        # on that length: a branch would differ from the run trained alone, under its hash.
        if self.branches and "cat" in self.models and self.penalty_horizon is None:
            raise ValueError(f"branches need the CAT's Sobolev weight on absolute steps: set "
                             f"penalty_horizon (e.g. to train_steps, {self.train_steps})")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be a positive number of seconds, got {self.budget!r}")
        if causal is False and "cat" in self.models and self.seq < 2:
            raise ValueError("seq must be >= 2 for the published (non-causal) CAT, whose "
                             f"operator is undefined at T = 1, got {self.seq}")
        if n_train is not None and self.seq > n_train - 2:
            raise ValueError(f"seq must be at most {n_train - 2} for the {n_train} training "
                             f"tokens, got {self.seq}")

    def identity(self) -> dict:
        """The fields that determine the trained weights (used in the run's config hash).

        ``weight_decay_on`` enters only when named: None (by the variant) writes the
        identity written before the option existed, though for a causal run None now
        decays the matrices where it decayed every tensor then; that change is in the code
        fingerprint (``optim``), which the config hash also holds. None and the variant's
        value named give two identities for one training.
        """
        ident = {k: getattr(self, k) for k in ("train_steps", "lr", "batch", "seq", "seed", "split")}
        ident["models"] = [m for m in MODELS if m in self.models]  # order does not matter
        if self.weight_decay_on is not None:   # None (by variant): left out, see above
            ident["weight_decay_on"] = self.weight_decay_on
        if self.repeat_share:                   # plain text keeps earlier runs' identity
            ident["repeat"] = [self.repeat_share, list(self.repeat_periods)]
        if self.checkpoints:                    # none kept: earlier runs' identity
            ident["checkpoints"] = sorted(self.checkpoints)
        if self.schedule != "constant":         # constant: earlier runs' identity
            ident.update(schedule=self.schedule, warmup=self.warmup, decay_share=self.decay_share)
        if self.penalty_horizon is not None:
            ident["penalty_horizon"] = self.penalty_horizon
        if self.branches:
            ident["branches"] = sorted(self.branches)
        return ident

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
