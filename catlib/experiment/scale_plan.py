"""The scale study's plan: the rows it trains, at which budgets, on which seeds.

Chapter 10 compares the rows at one budget, the training FLOPs of the KERPLE-prior CAT
(RK4 x1) at the experiment's steps. The scale study (:mod:`catlib.experiment.scale`, which
trains the plan) repeats that comparison at multiples of it: 1x and 2x on the CPU (Tiny
Shakespeare carries no more), to 16x on a GPU, in training FLOPs. Every row has the
experiment's sizes and batches (the ``cpu`` profile's: its 1x point is chapter 10's run
where a row trains at chapter 10's rate and steps; :mod:`catlib.book.scale_point` names the
rows that do not) and spends its budget its own way (:data:`SCALE_ROWS`): as more steps of
a cheap model, as more layers (:data:`BLOCKS_AS`, :data:`SAME_BLOCKS`), or as a costlier
block (an ODE solver's evaluations); the literature's learned biases and FoX
(:data:`BIAS_KERNELS`) take the Euler CAT's block and budget, as steps. The oracle's rows
(:data:`ORACLES`) read windows :data:`ORACLE_TIMES` as long as the others', at 1x only.
On Tiny Shakespeare the study trains every row, on the code corpus the rows
:data:`CORPUS_ROWS` names (:func:`study_rows`); the learning-rate sweep tunes the study's
rows but the oracle's (:func:`swept_rows`), which take the rates of the rows they stand
beside (:func:`with_oracle_rates`).

The plan (:data:`PLANS`, :data:`CORPUS_PLANS`, :func:`plan_for`) gives every row its
budgets and seeds; the rows of the kernel question (:data:`KERNEL_QUESTION_ROWS`) take
seeds 3-9 as well at 1x on the CPU (:data:`EXTRA_SEEDS`, :func:`extra_seeds_for`,
:func:`row_plan`), trained to 1x only. Seed ``s`` draws the same batches in every row (the
sampler is seeded by the run's seed alone), so the rows' differences are paired. Each row
and seed is one run trained to its largest budget (:func:`seed_budgets`). The study's
artefact keeps the plan as text (:func:`plan_text`) and says which study it belongs to
with :func:`study_identity`.
"""
from __future__ import annotations

import dataclasses

import torch

from .rows import MATCHED, ROWS, TODAY, Row

# The rows: chapter 10's rows that decide the equal-compute verdict, each spending the
# budget its own way, and the CAT kernel with discrete depth of its own (as many Euler
# blocks as give it the RK4 CAT's FLOPs per step), the row that answers the deep ALiBi.
ALIBI, ALIBI_DEEP, ROPE = "ALiBi baseline", "ALiBi baseline, layers", "RoPE baseline"
KERPLE, KERPLE_ODE = "KERPLE-prior CAT", "KERPLE-prior CAT, ODE-consistent"
EULER, EULER_DEEP = "ALiBi-prior CAT, Euler x1", "ALiBi-prior CAT, Euler blocks"
CONTROL = "ALiBi inside the Euler CAT block"
BUCKETS = "ALiBi + learned buckets inside the Euler CAT block"
KERPLE_LOG, FIRE = "KERPLE-log inside the Euler CAT block", "FIRE inside the Euler CAT block"
FOX = "FoX inside the Euler CAT block"
CONTROL_DEEP = "ALiBi inside the deep Euler CAT's blocks"
# The oracle's windows, as a multiple of the rows' training length (512 at ``cpu`` sizes).
ORACLE_TIMES = 4
ORACLE_ALIBI = "ALiBi baseline, 4 layers, long windows"
ORACLE_EULER = "ALiBi-prior CAT, Euler x1, long windows"
# Each oracle row and the row whose swept rate it takes (the sweep tunes the rows at 128).
ORACLES = {ORACLE_ALIBI: ALIBI_DEEP, ORACLE_EULER: EULER}
# The oracle is trained to 1x only, on the plan's seeds.
ORACLE_BUDGETS = (1,)
# Each learned bias's row and its CATConfig kernel (catlib/nn/learned_bias.py, forgetting.py).
BIAS_KERNELS = {BUCKETS: "alibi-buckets", KERPLE_LOG: "kerple-log", FIRE: "fire", FOX: "fox"}
_EULER_OPTIONS = (("kernel", "alibi-prior"), ("solver", "euler"), ("solver_steps", 1))
SCALE_ROWS: dict[str, Row] = {r.label: r for r in (
    # the baselines in today's block (pre-LN, GELU), as chapter 10's compute-matched ones
    dataclasses.replace(ROWS["ALiBi baseline"], label=ALIBI,
                        options=(*ROWS["ALiBi baseline"].options, *TODAY)),
    dataclasses.replace(ROWS["ALiBi baseline"], label=ALIBI_DEEP,
                        options=(*ROWS["ALiBi baseline"].options, *TODAY)),
    dataclasses.replace(ROWS["RoPE baseline"], label=ROPE,
                        options=(*ROWS["RoPE baseline"].options, *TODAY)),
    dataclasses.replace(ROWS[MATCHED], label=KERPLE, ladder=()),
    dataclasses.replace(ROWS["KERPLE-prior CAT, ODE-consistent"], label=KERPLE_ODE, ladder=()),
    Row(EULER, "causal", "cat", "90/10", _EULER_OPTIONS, ("cat",)),
    Row(EULER_DEEP, "causal", "cat", "90/10", _EULER_OPTIONS, ("cat",)),
    # The kernel's control: the Euler CAT's block with ALiBi's fixed bias and the learned
    # kernel off (chapter 8's "ALiBi inside the CAT block"): is the Euler CAT's lead its
    # kernel's, or its block's?
    Row(CONTROL, "causal", "cat", "90/10", (*_EULER_OPTIONS, ("kernel_residual", False)), ("cat",)),
    # The literature's learned biases in place of CAT's kernel, in the same block (one Euler
    # step) and at the same budget as steps (issue 54): is the kernel's lead over ALiBi the
    # spectral function's, or any learned bias's? And the kernel's control at depth: the
    # deep Euler CAT's blocks with the residual off.
    *(Row(label, "causal", "cat", "90/10", (("kernel", kernel), *_EULER_OPTIONS[1:]), ("cat",))
      for label, kernel in BIAS_KERNELS.items()),
    Row(CONTROL_DEEP, "causal", "cat", "90/10", (*_EULER_OPTIONS, ("kernel_residual", False)),
        ("cat",)),
    # The oracle (issue 62, item 2): what context beyond 128 characters is worth at the
    # book's sizes. Copying a name from far back takes two layers (one marks what came
    # before each character, one looks it up), and reading far takes training on long
    # windows: four ALiBi layers, and the Euler CAT for the kernel's side, both trained on
    # windows ORACLE_TIMES as long as the rows'. Not rivals of the rows trained at 128: chapter 11 shows
    # their context gain apart (catlib.book.scale_readings.split_oracle).
    Row(ORACLE_ALIBI, "causal", "base", "90/10",
        (*ROWS["ALiBi baseline"].options, *TODAY, ("blocks", 4)), ("base",),
        window_times=ORACLE_TIMES),
    Row(ORACLE_EULER, "causal", "cat", "90/10", _EULER_OPTIONS, ("cat",),
        window_times=ORACLE_TIMES),
)}
# ``blocks_as`` rows get as many blocks as fit the FLOPs per step of the row named;
# ``SAME_BLOCKS`` rows take the blocks of the row named (a control keeps its twin's depth).
BLOCKS_AS = {ALIBI_DEEP: KERPLE, EULER_DEEP: KERPLE}
SAME_BLOCKS = {CONTROL_DEEP: EULER_DEEP}
BASELINE_ROWS = (ALIBI, ALIBI_DEEP, ROPE)
# The rows each corpus's study trains where not every row (issue 62): on code, the
# baselines, the Euler CAT (one block and deep), the kernel's control and the learned
# biases of the kernel question, and the oracle.
CORPUS_ROWS = {"code": (ALIBI, ALIBI_DEEP, ROPE, EULER, EULER_DEEP, CONTROL, BUCKETS,
                        KERPLE_LOG, FOX, *ORACLES)}


# Budgets (multiples of the KERPLE-prior CAT's training FLOPs at the experiment's steps)
# and the seeds trained to each, per device type: the plan every row follows. On the CPU
# 1x and 2x only: Tiny Shakespeare's training part carries no more (at 4x a one-layer row
# makes 10 passes over it, and rows overfit: issue 61, item 6; the budgets beyond move to a
# larger corpus); on a GPU to 16x.
# On the code corpus (issue 62: 15 times the text) the CPU goes to 4x, where no row makes
# a pass over its training files.
PLANS = {"cpu": {1: (0, 1, 2), 2: (0, 1, 2)},
         "cuda": {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2), 8: (0, 1, 2), 16: (0, 1, 2)}}
CORPUS_PLANS = {"code": {"cpu": {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2)}, "cuda": PLANS["cuda"]}}
# The kernel question (issue 61, item 4): is the Euler CAT's kernel ahead of, or the same
# as, the learned biases in its block, its control and the baselines? Three seeds give an
# interval of 0.05-0.10 nats; these rows take seeds 3-9 as well at 1x, trained to 1x only.
KERNEL_QUESTION_ROWS = (EULER, BUCKETS, KERPLE_LOG, FOX, CONTROL, ALIBI, ROPE)
KERNEL_QUESTION_SEEDS = tuple(range(3, 10))
# The seeds some rows take beyond the plan, per device type: ``{row: {budget: seeds}}``.
EXTRA_SEEDS = {"cpu": {row: {1: KERNEL_QUESTION_SEEDS} for row in KERNEL_QUESTION_ROWS},
               "cuda": {}}
# The span the study on the code corpus scores (catlib.experiment.scale_records.span_corpus):
# 21 stretches of the longest length spread over its validation files, as many as Tiny
# Shakespeare's validation text holds (its 1.7 million characters whole would cost 16
# times the scoring); Tiny Shakespeare's study scores all of its validation text.
SPAN_TILES = {"code": 21}


def plan_for(device, corpus: str = "tiny") -> dict[int, tuple]:
    """``{budget: seeds}`` every row of a device follows on ``corpus`` (:data:`PLANS`,
    :data:`CORPUS_PLANS`; MPS and others take the CPU's); :func:`extra_seeds_for` adds
    some rows' own seeds."""
    plans = CORPUS_PLANS.get(corpus, PLANS)
    return plans.get(torch.device(device).type, plans["cpu"])


def extra_seeds_for(device, corpus: str = "tiny") -> dict[str, dict[int, tuple]]:
    """``{row: {budget: seeds}}``: the seeds a device's rows take beyond its plan
    (:data:`EXTRA_SEEDS`; MPS and others take the CPU's): on Tiny Shakespeare only."""
    if corpus != "tiny":
        return {}
    return EXTRA_SEEDS.get(torch.device(device).type, EXTRA_SEEDS["cpu"])


def row_plan(plan: dict, extra: dict | None, label: str) -> dict[int, tuple]:
    """``{budget: seeds}`` of the row ``label``: the seeds of ``plan`` at each budget and
    the row's own (``extra[label]``, :func:`extra_seeds_for`), smallest first."""
    own = (extra or {}).get(label, {})
    budgets = sorted({*plan, *own})
    if label in ORACLES:
        budgets = [b for b in budgets if b in ORACLE_BUDGETS]
    return {b: tuple(sorted({*plan.get(b, ()), *own.get(b, ())})) for b in budgets}


def study_rows(corpus: str = "tiny") -> list[str]:
    """The rows of the study on ``corpus`` (:data:`CORPUS_ROWS`; every row of
    :data:`SCALE_ROWS` where the corpus names none), in :data:`SCALE_ROWS`' order."""
    keep = CORPUS_ROWS.get(corpus)
    return [r for r in SCALE_ROWS if keep is None or r in keep]


def swept_rows(corpus: str = "tiny") -> list[str]:
    """The rows the learning-rate sweep tunes on ``corpus``: the study's rows there
    (:func:`study_rows`) but the oracle's."""
    return [r for r in study_rows(corpus) if r not in ORACLES]


def with_oracle_rates(rates: dict | None) -> dict | None:
    """``rates`` (``{row: rate}``, from the sweep, or None: the recipe's) with each oracle
    row at the rate of the row it stands beside (:data:`ORACLES`), where that one has a
    rate."""
    if rates is None:
        return None
    return {**rates, **{o: rates[twin] for o, twin in ORACLES.items() if twin in rates}}


def plan_text(plan: dict) -> dict[str, list]:
    """``plan`` (``{budget: seeds}``) as the artefact keeps it: ``{"<budget>": [seeds]}``."""
    return {str(b): [int(s) for s in seeds] for b, seeds in sorted(plan.items())}


def study_identity(plan: dict, extra: dict | None, rows, corpus_sha256: str) -> dict:
    """What makes two artefacts one study's (the command adds the profile and the device):
    ``{"plan", "extra_seeds", "rows", "corpus"}``, the plan and the rows' own seeds as the
    artefact keeps them (:func:`plan_text`), every row planned, the corpus' SHA-256."""
    return {"plan": plan_text(plan),
            "extra_seeds": {label: plan_text(s) for label, s in sorted((extra or {}).items())},
            "rows": list(rows), "corpus": corpus_sha256}


def seed_budgets(plan: dict) -> dict[int, list]:
    """``{seed: [budgets]}``: the budgets each seed is trained to (its run's ladder)."""
    out: dict[int, list] = {}
    for budget, seeds in sorted(plan.items()):
        for s in seeds:
            out.setdefault(s, []).append(budget)
    return out
