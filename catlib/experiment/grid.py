"""The book's context-length experiment: which models, trained how, scored where.

A :class:`Row` is one row of the results tables: one model (CAT or a baseline) of a
training run, the run defined by the variant, the corpus split and a few ``CATConfig``
options on top of sizes shared by every row. Rows that come from the same run (the
causal CAT and its sinusoidal baseline) are trained once. Every run of a seed sees the
same batches (same sampler seed, same split), so rows differ only by their model.

``ROWS`` lists the rows of the book; notebooks 05, 06, 07 and 08 pick from it, so a row
has one name everywhere: tables, figures and the artefacts in ``results/``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from ..nn.config import PRIOR_KERNELS, CATConfig
from ..data import Corpus, load_corpus
from ..measure.config import EvalConfig
from ..measure.evaluate import context_table, n_windows
from .config import ExperimentConfig
from .copy_runs import run_copy_gain  # noqa: F401 (chapter 9's copy test, run in the pool)
from .frontier import frontier_scoring
from ..measure.extrapolation import position_ce
from .pool import default_jobs, run_jobs, worker_devices  # noqa: F401 (default_jobs: its earlier home)
from .progress import reporter
from ..common.provenance import code_fingerprint
from ..measure.refinement import FINER, finer_solvers, refinement
from ..runs import (NotStored, Run, atomic_write_text, check_split, stored_only, stored_with_run,
                    train_run, weights_digest)
from ..training.loop import TrainConfig


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
# as more steps or as more layers; RoPE given them as steps (one seed: its frontier); and
# the CAT kernel at a baseline's cost per step (ALiBi's prior, one Euler step: one block
# evaluation) given them as steps. Every frontier row keeps its weights on the way
# (TrainConfig.checkpoints) at shares of the experiment's steps: the baselines' points are
# then exactly the shorter runs (constant learning rate, no schedule); a CAT's points are
# its run stopped early, its Sobolev penalty weight still on the run's schedule (the
# chapter states the difference to a run of that many steps, measured).
MATCHED = "KERPLE-prior CAT"
EULER_CAT = "ALiBi-prior CAT, Euler x1, CAT's compute as steps"
AS_STEPS, AS_LAYERS = "ALiBi baseline, CAT's compute as steps", "ALiBi baseline, CAT's compute as layers"
ROPE_LADDER = "RoPE baseline, CAT's compute as steps"
LADDER = (0.25, 0.5, 1.0, 2.0)
CAT_LADDER = (0.125, 0.25, 0.5)
ROWS.update({a.label: a for a in (
    Row(EULER_CAT, "causal", "cat", "90/10",
        (("kernel", "alibi-prior"), ("solver", "euler"), ("solver_steps", 1)), ("cat",),
        compute_as=("steps", MATCHED), ladder=LADDER),
    Row(AS_STEPS, "causal", "base", "90/10", (("baseline_positions", "alibi"),), ("base",),
        compute_as=("steps", MATCHED), ladder=LADDER),
    Row(AS_LAYERS, "causal", "base", "90/10", (("baseline_positions", "alibi"),), ("base",),
        compute_as=("layers", MATCHED)),
    Row(ROPE_LADDER, "causal", "base", "90/10", (("baseline_positions", "rope"),), ("base",),
        compute_as=("steps", MATCHED), ladder=LADDER),
)})
# The RK4 CATs of the frontier keep their weights at 1/8, 1/4 and 1/2 of their steps
# (their runs are chapter 8's).
FRONTIER_CATS = (MATCHED, "KERPLE-prior CAT, ODE-consistent")
ROWS.update({label: dataclasses.replace(ROWS[label], ladder=CAT_LADDER) for label in FRONTIER_CATS})
COMPUTE_MATCHED = (AS_STEPS, AS_LAYERS)
# The CAT that is to win at equal compute (issue 31's moonshot): three seeds, in the
# compute-matched table and on the frontier.
EXTRA_EQUAL_COMPUTE: tuple = (EULER_CAT,)
# What stopping a CAT early costs against a run of that many steps (the penalty schedule):
# the headline CAT trained for half the steps, one seed, beside its checkpoint there.
SCHEDULE_CHECK = f"{MATCHED}, 1/2 steps"
ROWS[SCHEDULE_CHECK] = dataclasses.replace(ROWS[MATCHED], label=SCHEDULE_CHECK, steps_share=0.5,
                                           ladder=())
# Rows of chapter 10 with one seed (a frontier away from the headline point; the check).
FRONTIER_ONE_SEED = (ROPE_LADDER, SCHEDULE_CHECK)
# The rows on chapter 10's frontier: the pool scores their ladder points beside training
# (every kept step of a row's first seed, the last step of every seed).
FRONTIER_ROWS = (AS_STEPS, ROPE_LADDER, *FRONTIER_CATS, *EXTRA_EQUAL_COMPUTE, AS_LAYERS)
CHAPTER_ROWS["10_equal_compute"] = (
    "ALiBi baseline", "RoPE baseline", *FRONTIER_CATS, *COMPUTE_MATCHED, *EXTRA_EQUAL_COMPUTE,
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
        return list(params["seeds"][:1])                           # 10's frontier points
    if chapter == "06_context_length" and ROWS[label].variant == "published":
        return list(params["published_seeds"])
    return list(params["seeds"])


def window_cap(length: int, longest: int, eval_windows: int, curve_windows: int | None) -> int:
    """The cap on evaluation windows at ``length``: ``curve_windows`` at the ``longest``
    length (scored per position, :func:`position_curve`), else ``eval_windows``."""
    return (curve_windows or eval_windows) if length == longest else eval_windows


def row_configs(row: Row, experiment: ExperimentConfig, seed: int) -> tuple[CATConfig, TrainConfig]:
    """The model and training configuration of ``row``'s run for ``seed``: the
    experiment's shared model and training settings with the row's variant, options,
    split and models (a prior kernel's ``train_length`` follows ``seq``)."""
    options, batches = dict(row.options), {}
    if row.published_dropout:
        options["dropout"] = CATConfig.dropout      # the published rate, CATConfig's default
    if options.get("kernel") in PRIOR_KERNELS:
        options.setdefault("train_length", experiment.train.seq)  # the residual lives below it
    if row.study:
        study = experiment.study
        options["blocks"] = study.study_blocks
        if row.is_cat:
            options.setdefault("solver", study.study_solver)
        batches = dict(repeat_share=study.study_share, repeat_periods=tuple(study.study_periods))
        if study.study_batch:
            batches["batch"] = study.study_batch
    model = dataclasses.replace(experiment.model, variant=row.variant, **options)
    train = dataclasses.replace(experiment.train, seed=seed, split=row.split,
                                models=row.trains, **batches)
    if row.steps_share != 1.0 or row.compute_as or row.ladder:   # chapter 10's budgets
        from .frontier import budget_configs
        return budget_configs(row, experiment, model, train)
    return model, train


def configs(row: Row, sizes: dict, train: dict, seed: int) -> tuple[CATConfig, TrainConfig]:
    """:func:`row_configs` from plain dicts: ``sizes`` (CATConfig fields shared by every
    row) and ``train`` (TrainConfig fields)."""
    return row_configs(row, ExperimentConfig(CATConfig(**sizes), TrainConfig(**train)), seed)


def train_grid(rows: Iterable[str], experiment: ExperimentConfig, *, root, device,
               seeds=None, curve: bool = True, dropout_on: list | None = None,
               jobs: int | None = None, devices=None,
               echo: Callable[[str], None] | None = print,
               progress_every: float = 30.0,
               copy: tuple | None = None) -> dict[tuple[str, int], Run]:
    """Train (or reuse) the run of every row and seed of a grid, and score each.

    ``experiment``: the sizes, training and evaluation the rows share; ``seeds``: a list
    of seeds, or a function of the row's label giving its seeds (default: the
    experiment's ``seeds``). Each run is evaluated at the experiment's lengths but the
    last, which, with ``curve``, is scored per position instead
    (:func:`position_curve`, on at most ``curve_windows`` windows, default
    ``eval_windows``); without ``curve``, at every length; the rows of the repeated-passage
    study (``Row.study``) at their training length only. With ``dropout_on``
    (lengths), the runs of rows that keep the published dropout are also scored by the
    published protocol, dropout on, at those lengths (:func:`dropout_on_rows`). With
    ``copy`` = (distances, passages), each model's copy gains too (:func:`run_copy_gain`).

    The runs are independent: on the CPU they train in parallel processes, ``jobs`` at a
    time, each on one thread, so that the numbers do not depend on ``jobs``; on CUDA with
    several ``devices``, one process per device takes every n-th run
    (:func:`worker_devices`). The costliest jobs start first. While they run, ``echo``
    shows one progress line (:class:`~catlib.experiment.progress.PoolProgress`): runs done, steps done
    across the workers, time left; in place on a terminal, else a line every
    ``progress_every`` seconds (0: none), so that a log file shows it too. Returns
    ``{(label, seed): Run}``; rows that share a run share the Run object, whose ``reused``
    says whether this call found it finished (False: it trained it).
    """
    device = torch.device(device)
    slots = worker_devices(device, jobs, devices)
    seeds_of = _seeds_of(experiment.seeds if seeds is None else seeds)
    ev = experiment.evaluation
    lengths = experiment.table_lengths if curve else ev.lengths
    curve_length = experiment.curve_length if curve else None
    specs, owners = {}, {}
    for label in rows:
        for seed in seeds_of(label):
            row = ROWS[label]
            model, tc = row_configs(row, experiment, seed)
            key = (json.dumps(model.resolved().to_dict(), sort_keys=True), json.dumps(tc.identity()))
            if key not in specs:
                # The study's rows are scored on plain text at their training length only.
                specs[key] = dict(model=model.to_dict(), train=tc.to_dict(), root=str(root),
                                  lengths=[tc.seq] if row.study else list(lengths),
                                  eval_windows=ev.eval_windows,
                                  curve_length=None if row.study else curve_length,
                                  curve_windows=ev.curve_windows or ev.eval_windows,
                                  dropout_on=list(dropout_on or []) if row.published_dropout else [],
                                  copy=[list(copy[0]), copy[1]]
                                  if copy and label not in NO_COPY_TEST else None,
                                  # the study's rows: also on random characters (chapter 9)
                                  copy_random=bool(copy) and row.study)
            if label in FRONTIER_ROWS and curve:
                first = seed == seeds_of(label)[0]
                steps = sorted({*tc.checkpoints, tc.train_steps}) if first else [tc.train_steps]
                f_lengths, f_caps = frontier_scoring(ev.lengths, ev.eval_windows, ev.curve_windows)
                ladder = specs[key].setdefault("ladder", dict(steps=[], lengths=f_lengths,
                                                              caps=f_caps, model=row.model))
                ladder["steps"] = sorted({*ladder["steps"], *steps})
            owners.setdefault(key, []).append((label, seed))
    done = run_jobs(specs, owners, _train_job, slots, echo, progress_every)
    out = {}
    for key, spec in specs.items():   # finished now: open each run with its stored evaluation
        evaluation = EvalConfig(lengths=tuple(spec["lengths"]), eval_windows=ev.eval_windows)
        run = train_run(CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"]),
                        root=root, device=device, evaluation=evaluation, progress=False,
                        echo=None)
        run.reused = done[key]["reused"]
        out.update({owner: run for owner in owners[key]})
    return out


def runs_summary(runs: dict) -> str:
    """One line about the runs of :func:`train_grid` (``{(label, seed): Run}``) for a
    chapter's page: rows, row-seed pairs, runs, and how many of them this call trained
    and reused (the line per run goes to the build log: :func:`catlib.book.page.build_log`)."""
    unique = list({id(run): run for run in runs.values()}.values())
    trained = sum(not run.reused for run in unique)
    return (f"{len({label for label, _ in runs})} rows, {len(runs)} row-seed pairs, "
            f"{len(unique)} runs: {trained} trained here, {len(unique) - trained} reused")


def train_rows(rows: Iterable[str], seeds, sizes: dict, train: dict, *,
               root, device, lengths, eval_windows: int, curve_length: int | None = None,
               curve_windows: int | None = None, dropout_on: list | None = None,
               jobs: int | None = None, devices=None,
               echo: Callable[[str], None] | None = print,
               progress_every: float = 30.0) -> dict[tuple[str, int], Run]:
    """:func:`train_grid` from plain parameters (the name and signature of earlier
    versions): ``sizes`` and ``train`` as CATConfig and TrainConfig fields, evaluation at
    ``lengths``, and with ``curve_length`` the per-position curve at that length."""
    curve = curve_length is not None
    evaluation = EvalConfig(lengths=(*lengths, curve_length) if curve else tuple(lengths),
                            eval_windows=eval_windows, curve_windows=curve_windows)
    experiment = ExperimentConfig(CATConfig(**sizes), TrainConfig(**train), evaluation)
    return train_grid(rows, experiment, root=root, device=device, seeds=seeds, curve=curve,
                      dropout_on=dropout_on, jobs=jobs, devices=devices, echo=echo,
                      progress_every=progress_every)


def _seeds_of(seeds) -> Callable[[str], list]:
    """``seeds`` as a function of the row's label: itself if callable, else the same list."""
    return seeds if callable(seeds) else (lambda label, fixed=list(seeds): fixed)


def _train_job(spec: dict, steps=None, stored: bool = False) -> dict | None:
    """Train, evaluate and score one run (a worker process, or in-process on one thread);
    its steps go to the progress array (``steps``, or the worker's own, see
    :func:`catlib.experiment.progress.attach`). With ``stored``: only if the run and every
    score asked for are stored already (then nothing is computed or written); else None."""
    if stored:
        try:
            with stored_only():
                return _train_job(spec, steps)
        except NotStored:
            return None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # a run's numbers do not depend on how many run beside it
    try:
        tc = TrainConfig(**spec["train"])
        run = train_run(CATConfig.from_dict(spec["model"]), tc, root=spec["root"],
                        device=spec["device"], lengths=spec["lengths"],
                        eval_windows=spec["eval_windows"], progress=False, echo=None,
                        on_step=reporter(spec["index"], steps) if "index" in spec else None)
        needs_corpus = spec["curve_length"] or spec["dropout_on"] or spec.get("copy")
        corpus = load_corpus(split=tc.split) if needs_corpus else None
        if spec["curve_length"]:
            n = n_windows(len(corpus.val), spec["curve_length"], spec["curve_windows"])
            for model_key in tc.models:
                position_curve(run, model_key, corpus, spec["curve_length"], n, spec["device"])
        if spec["dropout_on"]:
            dropout_on_rows(run, corpus, spec["dropout_on"], spec["eval_windows"], spec["device"],
                            curve_length=spec["curve_length"], curve_windows=spec["curve_windows"])
        if spec.get("copy"):
            for model_key in tc.models:
                run_copy_gain(run, model_key, corpus, *spec["copy"], spec["device"])
                if spec.get("copy_random"):
                    run_copy_gain(run, model_key, corpus, *spec["copy"], spec["device"],
                                  random_seed=RANDOM_PASSAGES_SEED)
        if spec.get("ladder"):          # chapter 10's frontier points, scored in the pool
            from .frontier import ladder_ce
            lad = spec["ladder"]
            held = corpus if corpus is not None else load_corpus(split=tc.split)
            for step in lad["steps"]:
                ladder_ce(run, lad["model"], step, held, lad["lengths"], lad["caps"], spec["device"])
        return {"name": run.path.name, "reused": run.reused}
    finally:
        torch.set_num_threads(threads)


def scores(runs: dict, label: str, seeds: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(ce [seeds, lengths], leak [seeds])`` of one row from its runs' stored evaluations."""
    model = ROWS[label].model
    ce = np.array([[row[f"{model}_ce"] if row.get(f"{model}_ce") is not None else np.nan
                    for row in runs[label, s].result["rows"]] for s in seeds], dtype=float)
    leak = np.array([runs[label, s].result["leak"][model] for s in seeds], dtype=float)
    return ce, leak


def position_curve(run: Run, model_key: str, corpus: Corpus, length: int, n_windows: int,
                   device=None) -> np.ndarray:
    """Per-position CE ``[length]`` of one model of a run (see :func:`position_ce`).

    Stored in the run directory beside its evaluation, valid for the weights and the
    code that computed it, so that the chapters that draw it and a rebuild reuse it.
    """
    check_split(run, corpus)
    models, _ = run.load_weights(device or "cpu")
    model = models[model_key]
    if model is None:
        raise ValueError(f"{run.path.name} did not train {model_key!r}")
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("measure.extrapolation",)),
             "length": length, "windows": n_windows}
    ce = stored_with_run(run, f"positions-{model_key}-{length}x{n_windows}.json", ident,
                          lambda: position_ce(model, corpus.val, length, n_windows,
                                              device=device).tolist())
    return np.array(ce, dtype=float)


def dropout_on_rows(run: Run, corpus: Corpus, lengths, eval_windows: int,
                    device=None, curve_length: int | None = None,
                    curve_windows: int | None = None) -> list[dict]:
    """The published protocol's table of a run: :func:`~catlib.measure.evaluate.context_table` of
    both its models with dropout on (the published script never calls ``eval()``), the
    masks seeded by the run's seed. Stored in the run directory like :func:`position_curve`.

    At ``curve_length`` the windows are capped by ``curve_windows`` (the windows of the
    per-position curve, whose mean is the evaluation-mode CE there), elsewhere by
    ``eval_windows``.
    """
    check_split(run, corpus)
    models, _ = run.load_weights(device or "cpu")
    seed = run.train_config.seed
    cap = {L: window_cap(L, curve_length, eval_windows, curve_windows) for L in lengths}
    ident = {"weights": weights_digest(models), "code": code_fingerprint(),
             "lengths": list(lengths), "windows": eval_windows, "seed": seed}
    if set(cap.values()) != {eval_windows}:
        ident["windows_at"] = {str(L): n for L, n in cap.items()}

    def table():
        return [row for L in lengths for row in context_table(
            models["cat"], models["base"], corpus.val, [L], cap[L],
            dropout_in_eval=True, device=device, seed=seed)]
    return stored_with_run(run, "eval-dropout-on.json", ident, table)


def run_refinement(run, corpus, length: int, eval_windows: int, finer=FINER, device=None) -> dict:
    """:func:`~catlib.measure.refinement.refinement` of a run's CAT on ``corpus.val``, stored in the run directory
    beside its evaluation (valid for the weights, the code and the settings), so that a
    chapter and a rebuild reuse it. ``run``: a :class:`~catlib.runs.Run` that trained "cat"."""
    check_split(run, corpus)
    models, _ = run.load_weights(device or "cpu")
    cat = models.get("cat")
    if cat is None:
        raise ValueError(f"{run.path.name} did not train a CAT; the refinement test needs one")
    finer = finer_solvers(cat.config.solver, cat.config.solver_steps, [tuple(f) for f in finer])
    ident = {"weights": weights_digest({"cat": cat}),
             "code": code_fingerprint() + code_fingerprint(("measure.refinement",)),
             "length": length, "windows": eval_windows, "finer": [list(f) for f in finer]}
    return stored_with_run(run, f"refinement-{length}x{eval_windows}.json", ident,
                            lambda: refinement(cat, corpus.val, length, eval_windows, finer,
                                               device=device))


def table_scores(runs: dict, labels: Iterable[str], seeds, corpus: dict, longest: int,
                 eval_windows: int, device=None,
                 curve_windows: int | None = None) -> tuple[dict, dict, dict]:
    """Everything a results table needs, per row: ``(ce, leak, curves)``.

    ``ce[label]`` is ``[seeds, lengths]``: the stored evaluation at the shorter lengths and,
    last, the mean of the per-position curve at ``longest`` (the same windows, so the same
    number as the published protocol); ``leak[label]`` is ``[seeds]``; ``curves[label]`` is
    ``[seeds, longest]``, on at most ``curve_windows`` windows (default ``eval_windows``).
    ``seeds``: a list or a function of the label; ``corpus``: ``{split: Corpus}``.
    """
    seeds_of = _seeds_of(seeds)
    ce, leak, curves = {}, {}, {}
    for label in labels:
        row, split_corpus = ROWS[label], corpus[ROWS[label].split]
        n = n_windows(len(split_corpus.val), longest, curve_windows or eval_windows)
        curves[label] = np.array([position_curve(runs[label, s], row.model, split_corpus, longest,
                                                 n, device) for s in seeds_of(label)])
        short, leak[label] = scores(runs, label, seeds_of(label))
        ce[label] = np.concatenate([short, curves[label].mean(1, keepdims=True)], axis=1)
    return ce, leak, curves


# The tables a notebook writes as JSON parts, merged into results/<kind>_<profile>.json.
TABLE_PARTS = ("depth", "context_use", "frontier", "dial")


def write_part(folder: Path, name: str, rows: dict | None = None,
               curves: dict | None = None, depth: dict | None = None,
               context_use: dict | None = None, frontier: dict | None = None,
               dial: dict | None = None) -> None:
    """One notebook's share of the ``results/`` artefacts, merged by the book runner.

    ``rows`` go to ``<folder>/extrapolation/<name>.json``, ``curves`` ({label: [L]}) to
    ``<folder>/extrapolation/<name>.csv`` (columns model, position, ce), ``depth`` (the
    refinement table, :func:`catlib.book.depth.depth_table`) to ``<folder>/depth/<name>.json``,
    ``context_use`` (:func:`catlib.book.context_use.context_use_table`) to
    ``<folder>/context_use/<name>.json``; ``frontier`` and ``dial`` (chapter 10:
    :func:`catlib.experiment.frontier.frontier_table`, :func:`catlib.experiment.frontier.dial_table`) likewise.
    """
    from .artefacts import write_extrapolation_json, write_position_csv

    part = Path(folder) / "extrapolation"
    part.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        write_extrapolation_json(part / f"{name}.json", rows)
    if curves is not None:
        write_position_csv(part / f"{name}.csv", curves)
    for kind, table in zip(TABLE_PARTS, (depth, context_use, frontier, dial)):
        if table is not None:
            (Path(folder) / kind).mkdir(exist_ok=True)
            atomic_write_text(Path(folder) / kind / f"{name}.json",
                              json.dumps(table, indent=1, sort_keys=True) + "\n")


def training_costs(runs: dict, labels: Iterable[str], seeds) -> dict[str, dict]:
    """What training each row's runs cost, from their own logs: ``{label: {"seeds": n,
    "models": "cat + base", "step_seconds": median s per step (mean over seeds),
    "seconds": training s (mean over seeds)}}``. A run shared by two rows is listed
    under the first (its time is spent once)."""
    seeds_of = _seeds_of(seeds)
    seen, out = set(), {}
    for label in labels:
        per_step, totals, models = [], [], ""
        for s in seeds_of(label):
            run = runs[label, s]
            if id(run) in seen:
                continue
            seen.add(id(run))
            steps = [m["seconds"] for m in run.metrics() if m["kind"] == "train"]
            per_step.append(float(np.median(steps)))
            totals.append(float(np.sum(steps)))
            models = " + ".join(run.train_config.models)
        if totals:
            out[label] = {"seeds": len(totals), "models": models,
                          "step_seconds": float(np.mean(per_step)),
                          "seconds": float(np.mean(totals))}
    return out
