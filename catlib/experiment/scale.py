"""The scale study: chapter 10's equal-compute comparison repeated at several budgets.

Chapter 10 compares the rows at one budget, the training FLOPs of the KERPLE-prior CAT
(RK4 x1) at the experiment's steps. Here the budget is a multiple of that: 1x, 2x, 4x, 8x
(and 16x on a GPU) in training FLOPs. Every row has the experiment's sizes and batches
(the ``cpu`` profile's: its 1x point is chapter 10's point) and spends its budget its own
way (:data:`SCALE_ROWS`): as more steps of a cheap model, as more layers, or as a costlier
block (an ODE solver's evaluations). Each row and seed is one run trained to its largest
budget that keeps its weights at the steps of each smaller one (``TrainConfig.checkpoints``),
so a budget costs no training of its own:

- a baseline's point *is* the shorter run (constant learning rate, no schedule);
- a CAT's Sobolev penalty weight decays over the run's steps
  (:func:`catlib.training.loop.penalty_weight`), so a CAT's point is its long run stopped
  early, its penalty still on the long run's schedule. The penalty is tiny at these sizes;
  the study's artefact holds, for the first seed, the 1x point of chapter 10's own 1x run
  beside the checkpoint (``schedule_check``), so that the difference is measured, not assumed.

Runs train in the experiment's pool (:func:`catlib.experiment.pool.run_jobs`): on the CPU
one run per core, on one GPU several runs at once (:func:`catlib.experiment.pool.default_jobs`);
a run killed or cut resumes from its checkpoint and a finished one is reused, so the
study can be stopped and started again. ``python -m catlib.book.scale`` (``make
scale``, :mod:`catlib.book.scale`) writes ``results/scale_<device>.json``.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from ..measure.config import EvalConfig
from ..nn.config import CATConfig
from ..runs import train_run
from ..training.loop import TrainConfig
from .compute import expected_step_flops, matched_budget
from .grid import _train_job, window_cap
from .ladder import ladder_ce, ladder_point
from .pool import run_jobs, worker_devices
from .rows import MATCHED, ROWS, Row, row_configs

# The rows: chapter 10's rows that decide the equal-compute verdict, each spending the
# budget its own way, and the CAT kernel with discrete depth of its own (as many Euler
# blocks as give it the RK4 CAT's FLOPs per step), the row that answers the deep ALiBi.
# ``blocks_as`` rows get as many blocks as fit the FLOPs per step of the row named.
ALIBI, ALIBI_DEEP, ROPE = "ALiBi baseline", "ALiBi baseline, layers", "RoPE baseline"
KERPLE, KERPLE_ODE = "KERPLE-prior CAT", "KERPLE-prior CAT, ODE-consistent"
EULER, EULER_DEEP = "ALiBi-prior CAT, Euler x1", "ALiBi-prior CAT, Euler blocks"
_EULER_OPTIONS = (("kernel", "alibi-prior"), ("solver", "euler"), ("solver_steps", 1))
SCALE_ROWS: dict[str, Row] = {r.label: r for r in (
    dataclasses.replace(ROWS["ALiBi baseline"], label=ALIBI),
    dataclasses.replace(ROWS["ALiBi baseline"], label=ALIBI_DEEP),
    dataclasses.replace(ROWS["RoPE baseline"], label=ROPE),
    dataclasses.replace(ROWS[MATCHED], label=KERPLE, ladder=()),
    dataclasses.replace(ROWS["KERPLE-prior CAT, ODE-consistent"], label=KERPLE_ODE, ladder=()),
    Row(EULER, "causal", "cat", "90/10", _EULER_OPTIONS, ("cat",)),
    Row(EULER_DEEP, "causal", "cat", "90/10", _EULER_OPTIONS, ("cat",)),
)}
BLOCKS_AS = {ALIBI_DEEP: KERPLE, EULER_DEEP: KERPLE}
BASELINE_ROWS = (ALIBI, ALIBI_DEEP, ROPE)

# Budgets (multiples of the KERPLE-prior CAT's training FLOPs at the experiment's steps)
# and the seeds trained to each, per device type: on the CPU the last budget on the first
# seed only (the study must fit about 100 minutes on two cores), on a GPU every seed.
PLANS = {"cpu": {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2), 8: (0,)},
         "cuda": {1: (0, 1, 2), 2: (0, 1, 2), 4: (0, 1, 2), 8: (0, 1, 2), 16: (0, 1, 2)}}


def plan_for(device) -> dict[int, tuple]:
    """``{budget: seeds}`` of a device (``PLANS``; MPS and others take the CPU's)."""
    return PLANS.get(torch.device(device).type, PLANS["cpu"])


def seed_budgets(plan: dict) -> dict[int, list]:
    """``{seed: [budgets]}``: the budgets each seed is trained to (its run's ladder)."""
    out: dict[int, list] = {}
    for budget, seeds in sorted(plan.items()):
        for s in seeds:
            out.setdefault(s, []).append(budget)
    return out


def reference_flops(experiment) -> float:
    """Training FLOPs of the 1x budget: the KERPLE-prior CAT at the experiment's steps."""
    m, t = row_configs(ROWS[MATCHED], experiment, 0)
    return expected_step_flops(m, "cat", t.batch, t.seq) * t.train_steps


def scale_configs(label: str, experiment, seed: int, budgets) -> tuple:
    """The model and training configuration of ``label``'s run for ``seed``, trained to
    the largest of ``budgets``, and ``{budget: steps}``: the steps that give the row each
    budget (its counted FLOPs per step, the mean over drawn step counts; at least 1)."""
    row = SCALE_ROWS[label]
    model, train = row_configs(row, experiment, seed)
    if label in BLOCKS_AS:
        of_m, of_t = row_configs(SCALE_ROWS[BLOCKS_AS[label]], experiment, seed)
        per_step = expected_step_flops(of_m, SCALE_ROWS[BLOCKS_AS[label]].model, of_t.batch, of_t.seq)
        model = nearest_blocks(model, row.model, per_step, train.batch, train.seq)
    per_step = expected_step_flops(model, row.model, train.batch, train.seq)
    unit = reference_flops(experiment)
    steps = {b: max(1, round(b * unit / per_step)) for b in sorted(budgets)}
    longest = steps[max(budgets)]
    train = dataclasses.replace(train, train_steps=longest, checkpoints=tuple(
        sorted({n for n in steps.values() if n < longest})))
    return model, train, steps


def nearest_blocks(model, key: str, per_step: float, batch: int, seq: int):
    """``model`` with the number of blocks whose FLOPs per step come nearest ``per_step``
    (the most within it, or one more where that is nearer: four Euler blocks of the
    ALiBi-prior CAT cost 1.0001 of the RK4 x1 KERPLE-prior CAT's step, three 0.75)."""
    k = matched_budget(per_step, model, batch, seq, 1, "layers", key)
    cost = lambda n: expected_step_flops(dataclasses.replace(model, blocks=n), key, batch, seq)  # noqa: E731
    if abs(cost(k + 1) - per_step) < abs(cost(k) - per_step):
        k += 1
    return dataclasses.replace(model, blocks=k)


def scoring(experiment) -> tuple[list, list]:
    """The lengths of every point and the windows each is scored on: the experiment's
    ``eval_windows`` at the shorter lengths, ``curve_windows`` at the longest
    (:func:`~catlib.experiment.grid.window_cap`)."""
    ev = experiment.evaluation
    longest = max(ev.lengths)
    return list(ev.lengths), [window_cap(L, longest, ev.eval_windows, ev.curve_windows)
                              for L in ev.lengths]


def _job_spec(model, train, root, experiment, ladder_steps, model_key: str) -> dict:
    """The pool's job for one run (:func:`catlib.experiment.grid._train_job`): trained,
    scored at its training length, and its weights after each of ``ladder_steps`` scored
    at the study's lengths."""
    lengths, caps = scoring(experiment)
    return dict(model=model.to_dict(), train=train.to_dict(), root=str(root), lengths=[train.seq],
                eval_windows=experiment.evaluation.eval_windows, curve_length=None,
                curve_windows=None, dropout_on=[], copy=None,
                ladder=dict(steps=sorted(ladder_steps), lengths=lengths, caps=caps, model=model_key))


def job_specs(experiment, plan: dict, root, rows=None) -> tuple[dict, dict, dict]:
    """The pool's jobs (:func:`catlib.experiment.pool.run_jobs`): ``(specs, owners,
    steps)``, one spec per row and seed, scoring its every budget's weights
    (``ladder``); ``steps[label, seed]``: ``{budget: steps}``."""
    specs, owners, steps = {}, {}, {}
    for label in rows or SCALE_ROWS:
        for seed, budgets in seed_budgets(plan).items():
            model, tc, steps[label, seed] = scale_configs(label, experiment, seed, budgets)
            key = (label, seed)
            specs[key] = _job_spec(model, tc, root, experiment, steps[key].values(),
                                   SCALE_ROWS[label].model)
            owners[key] = [key]
    return specs, owners, steps


def open_runs(specs: dict, experiment, device) -> dict:
    """The finished run of every spec, ``{(label, seed): Run}`` (reused: nothing trains)."""
    ev = EvalConfig(lengths=(experiment.train.seq,), eval_windows=experiment.evaluation.eval_windows)
    return {key: train_run(CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"]),
                           root=spec["root"], device=device, evaluation=ev, progress=False,
                           echo=None) for key, spec in specs.items()}


def scale_table(runs: dict, steps: dict, plan: dict, corpus, lengths, caps, device=None) -> dict:
    """``{row: {"points": [{"budget", "steps", "seeds", "train_flops", "seconds",
    "ce": {"<length>": [CE per seed]}}]}}``: every row at every budget of ``plan``, CE
    read from the scores stored with the runs, training FLOPs and seconds counted from each
    run's log up to the point (mean over its seeds)."""
    out = {}
    for label in sorted({label for label, _ in runs}, key=list(SCALE_ROWS).index):
        key, pts = SCALE_ROWS[label].model, []
        for budget, seeds in sorted(plan.items()):
            n = [steps[label, s][budget] for s in seeds]
            pts.append({"budget": budget, "steps": int(n[0]), "seeds": list(seeds),
                        **ladder_point([(runs[label, s], k) for s, k in zip(seeds, n)], key,
                                       corpus, lengths, caps, device)})
        out[label] = {"points": pts}
    return out


def schedule_check(experiment, root, runs: dict, steps: dict, corpus, lengths, caps,
                   device, echo=print) -> dict:
    """The KERPLE-prior CAT's 1x point two ways, first seed: the long run's checkpoint (its
    penalty weight on the long schedule) and a run of exactly the 1x steps (chapter 10's
    run). ``{"checkpoint": {L: ce}, "own_run": {L: ce}}``."""
    model, tc, _ = scale_configs(KERPLE, experiment, 0, [1])
    spec = _job_spec(model, tc, root, experiment, [tc.train_steps], "cat")
    run_jobs({"check": spec}, {"check": [(f"{KERPLE}, 1x run", 0)]}, _train_job,
             worker_devices(device, 1), echo, 0)
    own = open_runs({"check": spec}, experiment, device)["check"]
    return {"steps": tc.train_steps,
            "checkpoint": ladder_ce(runs[KERPLE, 0], "cat", steps[KERPLE, 0][1], corpus,
                                    lengths, caps, device),
            "own_run": ladder_ce(own, "cat", tc.train_steps, corpus, lengths, caps, device)}


def schedule_check_skipped(runs: dict, plan: dict) -> str | None:
    """Why :func:`schedule_check` cannot run on this study (None where it can): it compares
    the KERPLE-prior CAT's 1x point of the first seed, so it needs that row, the 1x budget
    and seed 0 there."""
    if not any(label == KERPLE for label, _ in runs):
        return f"the {KERPLE} is not among the rows trained"
    if 0 not in plan.get(1, ()):
        return "the plan has no 1x point of seed 0"
    return None


def run_study(experiment, *, root, device, plan: dict, rows=None, jobs: int | None = None,
              echo=print, progress_every: float = 30.0, check_schedule: bool = True) -> dict:
    """Train (or resume, or reuse) every run of the study and return its artefact:
    ``{"plan", "rows": scale_table(...), "schedule_check", "wall_seconds"}``."""
    from ..data import load_corpus

    start = time.perf_counter()
    specs, owners, steps = job_specs(experiment, plan, root, rows)
    run_jobs(specs, owners, _train_job, worker_devices(device, jobs), echo, progress_every)
    runs = open_runs(specs, experiment, device)
    corpus = load_corpus(split="90/10")
    lengths, caps = scoring(experiment)
    out = {"plan": {str(b): list(s) for b, s in sorted(plan.items())},
           "rows": scale_table(runs, steps, plan, corpus, lengths, caps, device)}
    if check_schedule:
        why_not = schedule_check_skipped(runs, plan)
        out["schedule_check"] = ({"skipped": why_not} if why_not else schedule_check(
            experiment, root, runs, steps, corpus, lengths, caps, device, echo))
    out["wall_seconds"] = time.perf_counter() - start
    return out
