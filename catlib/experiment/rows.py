"""The book's rows: which models, trained how.

A :class:`Row` is one row of the results tables: one model (CAT or a baseline) of a
training run, the run defined by the variant, the corpus split and a few ``CATConfig``
options on top of sizes shared by every row. Rows that come from the same run (the
causal CAT and its sinusoidal baseline) are trained once. Every run of a seed sees the
same batches (same sampler seed, same split), so rows differ only by their model.

``ROWS`` lists the rows of the book; the chapters pick from it, so a row has one name
everywhere: tables, figures and the artefacts in ``results/``. :func:`row_configs` gives a
row's model and training configuration (chapter 10's budgets set by counted compute,
:func:`budget_configs`); :mod:`catlib.experiment.grid` trains and scores them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..data import causal_split, vocab_size
from ..nn.config import FIXED_STEP_SOLVERS, CATConfig
from ..nn.kernel_choice import TRAIN_LENGTH_KERNELS
from ..training.config import TrainConfig
from ..training.schedule import decay_start
from .compute import expected_step_flops, matched_budget
from .config import ExperimentConfig


@dataclass(frozen=True)
class Row:
    """One row: ``model`` ("cat" or "base") of the run of ``variant`` on ``split``.

    ``options``: CATConfig fields of this row beyond the shared sizes, as (name, value)
    pairs; ``trains``: the models its run trains; ``published_dropout``: keep the
    published dropout rate (the published algorithm) instead of the profile's; ``study``:
    a row of the repeated-passage study (the experiment's :class:`StudyConfig`: its
    blocks and batches).
    """

    label: str
    variant: str
    model: str
    split: str
    options: tuple = ()
    trains: tuple = ("cat", "base")
    published_dropout: bool = False
    study: bool = False
    # Chapter 10 (equal compute): the run's steps as a share of the experiment's
    # (``steps_share``), or its steps or layers set so that its training FLOPs are those
    # of another row (``compute_as`` = ("steps" | "layers", row label)); ``ladder``: shares
    # of the experiment's steps at which the run also keeps its weights
    # (TrainConfig.checkpoints). See :func:`catlib.experiment.frontier.budget_configs`.
    steps_share: float = 1.0
    compute_as: tuple = ()
    ladder: tuple = ()
    # Trained on windows ``window_times`` the experiment's ``seq``, the batch keeping the
    # characters per step nearest the experiment's: the oracle of the scale study (issue
    # 62), which reads long context in training.
    window_times: int = 1

    @property
    def is_cat(self) -> bool:
        return self.model == "cat"

    @property
    def causal(self) -> bool:
        return self.variant == "causal"


ROWS: dict[str, Row] = {a.label: a for a in (
    Row("published CAT", "published", "cat", "published", published_dropout=True),
    Row("published baseline", "published", "base", "published", published_dropout=True),
    Row("causal CAT", "causal", "cat", "90/10"),
    Row("sinusoidal baseline", "causal", "base", "90/10"),
    Row("RoPE baseline", "causal", "base", "90/10", (("baseline_positions", "rope"),), ("base",)),
    Row("ALiBi baseline", "causal", "base", "90/10", (("baseline_positions", "alibi"),), ("base",)),
    Row("relative CAT", "causal", "cat", "90/10", (("kernel", "relative"),), ("cat",)),
    Row("content-aware CAT", "causal", "cat", "90/10", (("kernel", "content"),), ("cat",)),
    Row("content-aware CAT, horizon 128", "causal", "cat", "90/10",
        (("kernel", "content"), ("kernel_horizon", 128.0)), ("cat",)),
    Row("ALiBi-prior CAT", "causal", "cat", "90/10", (("kernel", "alibi-prior"),), ("cat",)),
    Row("KERPLE-prior CAT", "causal", "cat", "90/10", (("kernel", "kerple-prior"),), ("cat",)),
    Row("ALiBi inside the CAT block", "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("kernel_residual", False)), ("cat",)),
    Row("looped ALiBi baseline", "causal", "base", "90/10",
        (("baseline_positions", "alibi"), ("baseline_loops", 4)), ("base",)),
    # Trained with RK4 x1 or x2, drawn per step; validated and evaluated with RK4 x2.
    Row("KERPLE-prior CAT, ODE-consistent", "causal", "cat", "90/10",
        (("kernel", "kerple-prior"), ("solver", "rk4-classic"), ("solver_steps", 2),
         ("train_solver_steps", (1, 2))), ("cat",)),
    Row("looped ALiBi baseline, scaled", "causal", "base", "90/10",
        (("baseline_positions", "alibi"), ("baseline_loops", 4), ("baseline_loop_scale", True)),
        ("base",)),
    # Chapter 09's repeated-passage study: several blocks, batches partly a passage
    # repeated. Its CATs add the attention's output to the dynamics (attention_residual).
    Row("ALiBi baseline, repeat", "causal", "base", "90/10", (("baseline_positions", "alibi"),),
        ("base",), study=True),
    Row("RoPE baseline, repeat", "causal", "base", "90/10", (("baseline_positions", "rope"),),
        ("base",), study=True),
    Row("KERPLE-prior CAT, repeat", "causal", "cat", "90/10",
        (("kernel", "kerple-prior"), ("attention_residual", True)), ("cat",), study=True),
    Row("ALiBi-prior CAT, repeat", "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("attention_residual", True)), ("cat",), study=True),
    # The kernel designed to copy far: ALiBi's prior on six heads, two heads without a
    # prior whose scores are log-length scaled beyond the training length.
    Row("far-head ALiBi CAT, repeat", "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("far_heads", 2), ("attention_residual", True)), ("cat",),
        study=True),
    # The same kernel trained so that its depth is an ODE, as chapter 8's ODE-consistent
    # row but with the midpoint rule (two evaluations a step, RK4's four): one or two steps
    # drawn per training step, evaluated with two. Measured on one seed (the
    # reproducibility page), it copies as far as with RK4 at half the training.
    Row("far-head ALiBi CAT, ODE-consistent, repeat", "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("far_heads", 2), ("attention_residual", True),
         ("solver", "midpoint"), ("solver_steps", 2), ("train_solver_steps", (1, 2))),
        ("cat",), study=True),
    # A diagnostic (one seed): the designed kernel in the published block (attention
    # reaches the state only through the feed-forward network).
    Row("far-head ALiBi CAT, published block, repeat", "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("far_heads", 2)), ("cat",), study=True),
)}
HEADLINE = ("published CAT", "published baseline", "causal CAT", "sinusoidal baseline",
            "RoPE baseline", "ALiBi baseline")
# Chapter 08: the kernels on token distances, the decay-anchored kernels and their controls.
DISTANCE_KERNELS = ("relative CAT", "content-aware CAT", "content-aware CAT, horizon 128")
DECAY_ANCHORED = ("ALiBi-prior CAT", "KERPLE-prior CAT")
# The KERPLE-prior CAT trained so that its depth is an ODE (the refinement test).
ODE_CONSISTENT = ("KERPLE-prior CAT, ODE-consistent",)
# Kernel without the residual at the CAT's depth; the depth controls at its parameters and
# block evaluations: the scaled loop (the fair one) and the unscaled loop (a finding).
CONTROLS = ("ALiBi inside the CAT block", "looped ALiBi baseline, scaled", "looped ALiBi baseline")
BEYOND = DISTANCE_KERNELS + DECAY_ANCHORED + ODE_CONSISTENT + CONTROLS
# Rows that no verdict reads across seeds (earlier kernels, a diagnostic, the unscaled
# loop whose failure is a finding): one seed each, the first of the chapter's seeds, so
# that the book's training fits its time.
DIAGNOSTIC = DISTANCE_KERNELS + ("looped ALiBi baseline",)
STUDY_DIAGNOSTIC = ("far-head ALiBi CAT, published block, repeat",)
# The study's kernel designed to copy far (with the study's solver), and the same kernel
# trained ODE-consistent (issue 32: the row whose copying the chapter's targets read).
FAR_COPY = "far-head ALiBi CAT, repeat"
FAR_ODE = "far-head ALiBi CAT, ODE-consistent, repeat"
# Rows trained only where a chapter's ``extra_rows`` is True (smoke, paper; not cpu, whose
# build must fit 45 minutes with chapter 10): the diagnostics, and the second kernel of
# chapter 8's decay-anchored pair and of the study's CATs, which a verdict reads only
# beside the first (the best of the pair; the study's best CAT).
EXTRA = DIAGNOSTIC + STUDY_DIAGNOSTIC + ("ALiBi-prior CAT", "KERPLE-prior CAT, repeat")
# Rows trained over the seeds only where ``extra_rows`` is True, else on the first seed:
# the study's ALiBi-prior CAT and RoPE baseline, which are read beside the rows of every
# seed, to make room for the three seeds of its ODE-consistent far-head row (measured: with
# RK4 those took a fresh-clone cpu build past 45 minutes; the reproducibility page has the
# numbers).
SEEDS_WITH_EXTRA = ("ALiBi-prior CAT, repeat", "RoPE baseline, repeat")
BASELINES = ("sinusoidal baseline", "RoPE baseline", "ALiBi baseline")
STUDY = tuple(label for label, row in ROWS.items() if row.study)
# The rows each experiment chapter trains (05: one seed of each variant's CAT and baseline;
# 09: every row of 06 and 08, for the copy test, and the study).
_BOOK_ROWS = {"06_context_length": HEADLINE, "08_beyond": BEYOND + ("causal CAT",) + BASELINES}
CHAPTER_ROWS = {"05_training": ("published CAT", "causal CAT"), **_BOOK_ROWS,
                "09_using_context": tuple(dict.fromkeys(sum(_BOOK_ROWS.values(), ()))) + STUDY}

# Chapter 10 (equal compute). The row whose training FLOPs the compute-matched rows get
# (the headline CAT, RK4 x1); the one-layer ALiBi baseline given that CAT's training FLOPs
# as more steps or as more layers; RoPE given them as steps; and the CAT kernel at a
# baseline's cost per step (ALiBi's prior, one Euler step: one block evaluation) given them
# as steps. Every frontier row's run on the experiment's first seed keeps a point at shares
# of the experiment's steps (``ladder``, :func:`with_points`): on the book's recipe a run of
# that many steps branched from the row's run where its decay starts, the shorter run
# exactly; the other seeds train no branches (the chapter scores their last step only).
MATCHED = "KERPLE-prior CAT"
EULER_CAT = "ALiBi-prior CAT, Euler x1, CAT's compute as steps"
AS_STEPS, AS_LAYERS = "ALiBi baseline, CAT's compute as steps", "ALiBi baseline, CAT's compute as layers"
ROPE_LADDER = "RoPE baseline, CAT's compute as steps"
LADDER = (0.25, 0.5, 1.0, 2.0)
CAT_LADDER = (0.125, 0.25, 0.5)
# The block of the compute-matched baselines: pre-LN with GELU (nanoGPT's), the block a
# reader would train today. Probed against the prototype's post-norm ReLU layer
# (benchmarks/block_probe.py, results/block_probe_cpu.md: ALiBi given the CAT's compute as
# steps, the recipe, every validation window): lower at 1x in all three seeds (by
# 0.008-0.029 at 128) and at 4x on seed 0 (by 0.006, within a window's standard error);
# the rows at equal steps (chapter 6) keep the prototype's block.
TODAY = (("baseline_block", "pre-ln-gelu"),)
# The kernel's control at equal compute: the Euler CAT's block with ALiBi's fixed bias and
# the learned kernel off (chapter 8's "ALiBi inside the CAT block"), as steps.
EULER_CONTROL = "ALiBi inside the Euler CAT block, CAT's compute as steps"
ROWS.update({a.label: a for a in (
    Row(EULER_CAT, "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("solver", "euler"), ("solver_steps", 1)), ("cat",),
        compute_as=("steps", MATCHED), ladder=LADDER),
    Row(EULER_CONTROL, "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("kernel_residual", False), ("solver", "euler"),
         ("solver_steps", 1)), ("cat",), compute_as=("steps", MATCHED)),
    Row(AS_STEPS, "causal", "base", "90/10", (("baseline_positions", "alibi"), *TODAY), ("base",),
        compute_as=("steps", MATCHED), ladder=LADDER),
    Row(AS_LAYERS, "causal", "base", "90/10", (("baseline_positions", "alibi"), *TODAY), ("base",),
        compute_as=("layers", MATCHED)),
    Row(ROPE_LADDER, "causal", "base", "90/10", (("baseline_positions", "rope"), *TODAY), ("base",),
        compute_as=("steps", MATCHED), ladder=LADDER),
)})
# The RK4 CATs of the frontier keep their weights at 1/8, 1/4 and 1/2 of their steps
# (their runs are chapter 8's).
FRONTIER_CATS = (MATCHED, "KERPLE-prior CAT, ODE-consistent")
ROWS.update({label: dataclasses.replace(ROWS[label], ladder=CAT_LADDER) for label in FRONTIER_CATS})
COMPUTE_MATCHED = (AS_STEPS, AS_LAYERS)
# Every baseline given the CAT's compute, on the same seeds: the Euler CAT's target reads
# them all (:func:`catlib.experiment.frontier.equal_compute_target`).
MATCHED_BASELINES = (*COMPUTE_MATCHED, ROPE_LADDER)
# The CAT that is to win at equal compute (issue 31's moonshot): three seeds, in the
# compute-matched table and on the frontier.
EXTRA_EQUAL_COMPUTE: tuple = (EULER_CAT, EULER_CONTROL)
# What stopping a CAT early costs against a run of that many steps (the penalty schedule):
# the headline CAT trained for half the steps, one seed, beside its checkpoint there.
SCHEDULE_CHECK = f"{MATCHED}, 1/2 steps"
ROWS[SCHEDULE_CHECK] = dataclasses.replace(ROWS[MATCHED], label=SCHEDULE_CHECK, steps_share=0.5,
                                           ladder=())
# Rows of chapter 10 with one seed (the check).
FRONTIER_ONE_SEED = (SCHEDULE_CHECK,)
# The rows on chapter 10's frontier: the pool scores their ladder points beside training
# (every kept step of a row's first seed, the last step of every seed).
FRONTIER_ROWS = (AS_STEPS, ROPE_LADDER, *FRONTIER_CATS, *EXTRA_EQUAL_COMPUTE, AS_LAYERS)
CHAPTER_ROWS["10_equal_compute"] = (
    "ALiBi baseline", "RoPE baseline", *FRONTIER_CATS, *MATCHED_BASELINES, *EXTRA_EQUAL_COMPUTE,
    *FRONTIER_ONE_SEED)
# The seed of the random-character passages of the study's copy test (the same for every model).
RANDOM_PASSAGES_SEED = 0
# Chapter 10's own rows: not copy-tested (no chapter reads their copy gains).
NO_COPY_TEST = tuple(label for label in CHAPTER_ROWS["10_equal_compute"]
                     if label not in CHAPTER_ROWS["09_using_context"])


def chapter_seeds(chapter: str, label: str, params: dict) -> list[int]:
    """The seeds of row ``label`` in ``chapter``, from the chapter's parameters: 05 its one
    ``seed``; 06 ``published_seeds`` for the published rows; 08 the first seed for the
    :data:`DIAGNOSTIC` rows; 09 the seeds 06 and 08 give the row (the study's: ``seeds``,
    the first for :data:`STUDY_DIAGNOSTIC`); else ``seeds``. None for the :data:`EXTRA`
    rows when ``params["extra_rows"]`` is False, the first seed for
    :data:`SEEDS_WITH_EXTRA`."""
    if not params.get("extra_rows", True):
        if label in EXTRA:
            return []
        if label in SEEDS_WITH_EXTRA:
            return list(params["seeds"][:1])
    if chapter == "05_training":
        return [params["seed"]]
    if chapter == "09_using_context" and not ROWS[label].study:
        owner = next(name for name, rows in _BOOK_ROWS.items() if label in rows)
        return chapter_seeds(owner, label, params)
    if label in DIAGNOSTIC + STUDY_DIAGNOSTIC + FRONTIER_ONE_SEED:  # 08's and 09's diagnostics,
        return list(params["seeds"][:1])                           # 10's check
    if chapter == "06_context_length" and ROWS[label].variant == "published":
        return list(params["published_seeds"])
    return list(params["seeds"])


def row_configs(row: Row, experiment: ExperimentConfig, seed: int) -> tuple[CATConfig, TrainConfig]:
    """The model and training configuration of ``row``'s run for ``seed``: the
    experiment's shared model and training settings with the row's variant, options,
    split and models (a causal row's split and vocabulary: the experiment's corpus's,
    :func:`catlib.data.causal_split`; ``train_length`` follows ``seq`` for the kernels laid out from it:
    a prior kernel's residual, FIRE's threshold)."""
    options, batches = dict(row.options), {}
    if row.published_dropout:
        options["dropout"] = CATConfig.dropout      # the published rate, CATConfig's default
    seq = row.window_times * experiment.train.seq
    if options.get("kernel") in TRAIN_LENGTH_KERNELS:
        options.setdefault("train_length", seq)  # the residual lives below it
    if row.study:
        study = experiment.study
        options["blocks"] = study.study_blocks
        if row.is_cat:
            options.setdefault("solver", study.study_solver)
        batches = dict(repeat_share=study.study_share, repeat_periods=tuple(study.study_periods))
        if study.study_batch:
            batches["batch"] = study.study_batch
    split = row.split
    if row.causal:          # on the experiment's corpus, with its vocabulary
        split = causal_split(experiment.corpus)
        options.setdefault("vocab_size", vocab_size(experiment.corpus))
    model = dataclasses.replace(experiment.model, variant=row.variant, **options)
    if row.window_times != 1:
        batches.update(seq=seq, batch=max(1, round(experiment.train.batch / row.window_times)))
    train = dataclasses.replace(experiment.train, seed=seed, split=split,
                                models=row.trains, **batches)
    if row.causal:
        train = with_recipe(train, experiment.train.train_steps)
    if row.steps_share != 1.0 or row.compute_as or row.ladder:   # chapter 10's budgets
        return budget_configs(row, experiment, model, train)
    return model, train


# The book's training recipe for every causal row (issue 47; the published rows keep the
# published constant rate): a linear warm-up over WARMUP_SHARE of the experiment's steps,
# the constant rate, and a linear decay to zero over the last DECAY_SHARE of each run
# (:func:`catlib.training.loop.learning_rate`); the CAT's Sobolev weight on the
# experiment's steps, so that a run's first steps do not depend on its length. Chosen by
# the probe of benchmarks/recipe_probe.py (results/recipe_probe_cpu.json).
WARMUP_SHARE = 0.05
DECAY_SHARE = 0.2


def with_recipe(train: TrainConfig, experiment_steps: int) -> TrainConfig:
    """``train`` with the book's recipe (see :data:`WARMUP_SHARE`), its warm-up and the
    Sobolev weight's horizon set in steps of the experiment (``experiment_steps``)."""
    return dataclasses.replace(train, schedule="wsd", decay_share=DECAY_SHARE,
                               warmup=max(1, round(WARMUP_SHARE * experiment_steps)),
                               penalty_horizon=experiment_steps)


def configs(row: Row, sizes: dict, train: dict, seed: int) -> tuple[CATConfig, TrainConfig]:
    """:func:`row_configs` from plain dicts: ``sizes`` (CATConfig fields shared by every
    row) and ``train`` (TrainConfig fields)."""
    return row_configs(row, ExperimentConfig(CATConfig(**sizes), TrainConfig(**train)), seed)


def budget_configs(row, experiment, model, train):
    """The model and training configuration of a chapter-10 row (see
    :class:`catlib.experiment.Row`): ``model`` and ``train`` are the row's plain ones.

    ``steps_share`` s: ``round(s * train_steps)`` steps. ``compute_as`` ("steps", R): as
    many steps as give the row the training FLOPs of row R at the experiment's steps (R's
    expected FLOPs per step, counted, times its steps, over the row's own FLOPs per step);
    ("layers", R): the most layers whose FLOPs per step stay within R's, then as many
    steps as give it R's training FLOPs (layers come in whole numbers: at the ``cpu``
    profile's sizes 4 ALiBi layers cost 1.00 of the RK4 x1 CAT's FLOPs per step, so they
    train the experiment's steps). ``ladder``: on the experiment's first seed (the seed whose
    points chapter 10 scores), the weights are also kept after ``round(f * train_steps)``
    steps for each share f, those below the run's own steps; the other seeds keep none.
    """
    steps = experiment.train.train_steps
    if row.steps_share != 1.0:
        train = dataclasses.replace(train, train_steps=max(1, round(row.steps_share * steps)))
    if row.compute_as:
        how, of = row.compute_as
        m_of, t_of = row_configs(ROWS[of], experiment, train.seed)
        if ROWS[of].is_cat and m_of.resolved().solver not in FIXED_STEP_SOLVERS:
            raise ValueError(f"{row.label}: matching the compute of {of!r} needs its FLOPs per "
                             f"step, which its adaptive solver {m_of.resolved().solver!r} does "
                             f"not fix in advance; use a fixed-step solver {FIXED_STEP_SOLVERS}")
        target = expected_step_flops(m_of, ROWS[of].model, t_of.batch, t_of.seq) * t_of.train_steps
        n = matched_budget(target, model, train.batch, train.seq, steps, how, row.model)
        if how == "layers":       # whole layers, then the FLOPs they leave as steps
            model = dataclasses.replace(model, blocks=n)
            n = matched_budget(target, model, train.batch, train.seq, steps, "steps", row.model)
        train = dataclasses.replace(train, train_steps=n)
    if row.ladder and train.seed == experiment.seeds[0]:
        keep = tuple(n for n in sorted({round(f * steps) for f in row.ladder} - {0})
                     if n < train.train_steps and trainable(train, n))
        train = with_points(train, keep)
    return model, train


def trainable(train: TrainConfig, steps: int) -> bool:
    """Whether a run of ``steps`` can be trained with ``train``'s recipe: on "wsd", its
    decay must start after the warm-up (a frontier at tiny sizes leaves such points out)."""
    return train.schedule != "wsd" or decay_start(steps, train.decay_share) >= max(1, train.warmup)


def with_points(train: TrainConfig, steps) -> TrainConfig:
    """``train`` keeping a point after each of ``steps`` (a frontier's shorter budgets): on
    the book's recipe a run of that many steps branched from this one before its decay
    (``TrainConfig.branches``: the point *is* the shorter run), on the constant rate the
    weights after that step (``checkpoints``: the shorter run there too)."""
    steps = tuple(sorted(steps))
    if train.schedule == "wsd":
        return dataclasses.replace(train, branches=steps)
    return dataclasses.replace(train, checkpoints=steps)
