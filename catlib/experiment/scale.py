"""The scale study: chapter 10's equal-compute comparison repeated at several budgets.

What the study trains, its rows and the budgets and seeds of each, is its plan
(:mod:`catlib.experiment.scale_plan`); this module trains it. Every row trains on the
book's recipe (warm-up, a constant rate, a linear decay to zero;
:func:`catlib.experiment.rows.with_recipe`), at its own rate where given (chosen on the dev
slice by :mod:`catlib.experiment.sweep`), for the steps that give it each budget
(:func:`scale_configs`; a deeper row's blocks: :func:`nearest_blocks`). Each row and seed is
one run trained to its largest budget; each smaller budget's point is a run of that budget
branched from it where its own decay starts (``TrainConfig.branches``), so that a point
*is* the run trained alone to that budget with the recipe, bit for bit
(tests/test_recipe.py), its decay's steps counted in its FLOPs.

Every point is scored on every window of the validation span at each length, on as many
windows of the training part at the shortest length (where a row overfits), and with the
context gain beyond the training length at the longest; it records the passes its row made
over the training part. Each run's scores at each budget form a *record*
(:mod:`catlib.experiment.scale_records`), kept in the artefact per row, seed and budget,
and the points are assembled from the records.

Runs train in the experiment's pool (:func:`catlib.experiment.pool.run_jobs`): on the CPU
one run per core, on one GPU several runs at once (:func:`catlib.experiment.pool.default_jobs`);
each is scored in its worker as it finishes (:func:`_scale_job`). A run killed or cut
resumes from its checkpoint and a finished one is reused, so the study can be stopped and
started again; a run whose records an earlier artefact of the study holds is read from
there and not trained again (:func:`recorded_runs`), so a study resumes in a later session
where its run directories are gone. After each run trained, the study hands its artefact
so far to its caller, which writes it, so that a study killed later keeps what it trained.
A run the learning-rate sweep trained already (its 1x run at the rate it chose: the
study's 1x branch of that row's run, the same configuration and so the same config hash)
is copied from the sweep's folder instead of trained again (:func:`borrow_runs`).
``python -m catlib.book.scale`` (``make scale``, :mod:`catlib.book.scale`) writes
``results/scale_<device>.json``.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from ..measure.config import EvalConfig
from ..nn.config import CATConfig
from ..runs.branches import branch_name
from ..runs.errors import RunError
from ..runs.identity import config_hash, run_dir_name
from ..runs.stored import NotStored, stored_only
from ..runs.training import train_run
from ..training.config import TrainConfig
from ..training.schedule import decay_start
from . import scale_plan
from .compute import expected_step_flops, matched_budget
from .grid import _train_job
from .pool import run_jobs, worker_devices
from .rows import MATCHED, ROWS, row_configs, with_points
from .scale_plan import BLOCKS_AS, SAME_BLOCKS, SPAN_TILES, row_plan, seed_budgets, study_identity
from .scale_records import (assemble_rows, complete, run_records, score_run, scoring_of,
                            span_corpus)

# The study's rows are read as ``scale_plan.SCALE_ROWS`` when a function runs, not bound
# here at import, so that a test that trains two of them (patching the plan's module) has
# every function of this one see the same two.

def reference_flops(experiment) -> float:
    """Training FLOPs of the 1x budget: the KERPLE-prior CAT at the experiment's steps."""
    m, t = row_configs(ROWS[MATCHED], experiment, 0)
    return expected_step_flops(m, "cat", t.batch, t.seq) * t.train_steps


def scale_configs(label: str, experiment, seed: int, budgets, rate: float | None = None) -> tuple:
    """The model and training configuration of ``label``'s run for ``seed``, trained to
    the largest of ``budgets`` at the learning rate ``rate`` (default: the recipe's,
    ``experiment.train.lr``), and ``{budget: steps}``: the steps that give the row each
    budget (its counted FLOPs per step, the mean over drawn step counts; at least 1)."""
    row = scale_plan.SCALE_ROWS[label]
    model, train = row_configs(row, experiment, seed)
    if rate is not None:
        train = dataclasses.replace(train, lr=float(rate))
    if label in BLOCKS_AS:
        of = scale_plan.SCALE_ROWS[BLOCKS_AS[label]]
        of_m, of_t = row_configs(of, experiment, seed)
        per_step = expected_step_flops(of_m, of.model, of_t.batch, of_t.seq)
        model = nearest_blocks(model, row.model, per_step, train.batch, train.seq)
    if label in SAME_BLOCKS:
        twin, _, _ = scale_configs(SAME_BLOCKS[label], experiment, seed, budgets)
        model = dataclasses.replace(model, blocks=twin.blocks)
    per_step = expected_step_flops(model, row.model, train.batch, train.seq)
    unit = reference_flops(experiment)
    least = fewest_steps(train)
    steps = {b: max(least, round(b * unit / per_step)) for b in sorted(budgets)}
    longest = steps[max(budgets)]
    train = with_points(dataclasses.replace(train, train_steps=longest),
                        {n for n in steps.values() if n < longest})
    return model, train, steps


def fewest_steps(train: TrainConfig) -> int:
    """The fewest steps ``train``'s recipe allows: 1, or for "wsd" the fewest whose decay
    starts after the warm-up (a tiny test profile's costly row would otherwise get one)."""
    n = 1
    while train.schedule == "wsd" and decay_start(n, train.decay_share) < train.warmup:
        n += 1
    return n


def nearest_blocks(model, key: str, per_step: float, batch: int, seq: int):
    """``model`` with the number of blocks whose FLOPs per step come nearest ``per_step``
    (the most within it, or one more where that is nearer: four Euler blocks of the
    ALiBi-prior CAT cost 1.0001 of the RK4 x1 KERPLE-prior CAT's step, three 0.75)."""
    k = matched_budget(per_step, model, batch, seq, 1, "layers", key)
    cost = lambda n: expected_step_flops(dataclasses.replace(model, blocks=n), key, batch, seq)  # noqa: E731
    if abs(cost(k + 1) - per_step) < abs(cost(k) - per_step):
        k += 1
    return dataclasses.replace(model, blocks=k)


# Every window of the span the longest length tiles (n_windows caps it; the same text at
# every length): 820 at 128, 21 at 5000 characters; a point costs seconds to score, and a
# corner of the split can read easier than the whole.
ALL_WINDOWS = 10**9


def scoring(experiment) -> tuple[list, list]:
    """The lengths of every point and the windows each is scored on: every window of the
    common span at every length (:data:`ALL_WINDOWS`, :func:`span_length`)."""
    lengths = list(experiment.evaluation.lengths)
    return lengths, [ALL_WINDOWS] * len(lengths)


def span_length(experiment) -> int:
    """The length whose windows tile the text every length of the study reads."""
    return experiment.evaluation.span_length or max(experiment.evaluation.lengths)


def study_scoring(experiment) -> dict:
    """What each of the study's records is scored on (:func:`scoring_of`): every window of
    the span at each length, the training CE at the shortest, and the context gain beyond
    the rows' training length (``experiment.train.seq``, 128 at ``cpu`` sizes) at the
    longest."""
    lengths, caps = scoring(experiment)
    return scoring_of(lengths, caps, span_length(experiment), experiment.train.seq,
                      SPAN_TILES.get(experiment.corpus))


def _job_spec(model, train, root, experiment, ladder_steps, model_key: str) -> dict:
    """The pool's job for one run (:func:`_scale_job`): trained, scored at its training
    length, and its weights after each of ``ladder_steps`` scored as a record reads them
    (:func:`study_scoring`)."""
    lengths, caps = scoring(experiment)
    return dict(model=model.to_dict(), train=train.to_dict(), root=str(root), lengths=[train.seq],
                eval_windows=experiment.evaluation.eval_windows, curve_length=None,
                curve_windows=None, dropout_on=[], copy=None, span_length=span_length(experiment),
                ladder=dict(steps=sorted(ladder_steps), lengths=lengths, caps=caps, model=model_key,
                            span_tiles=SPAN_TILES.get(experiment.corpus)),
                scoring=study_scoring(experiment))


def _scale_job(spec: dict, steps=None, stored: bool = False) -> dict | None:
    """The pool's job for one run of the study: :func:`catlib.experiment.grid._train_job`
    (trained, and each budget's weights scored on the validation split), then each
    budget's training CE and context gain scored and stored with the run
    (:func:`~catlib.experiment.scale_records.score_run`, on one thread as the run was
    trained), so that the study's own process reads its records and computes nothing. With
    ``stored``: only if all of it is stored already (nothing computed), else None."""
    found = _train_job(spec, steps, stored=stored)
    if found is None:
        return None
    from ..data import load_corpus
    from ..runs.run import open_run

    run = open_run(Path(spec["root"]) / found["name"])
    corpus = span_corpus(load_corpus(split=run.train_config.split), spec["span_length"],
                         spec["scoring"].get("span_tiles"))
    lad = spec["ladder"]
    if stored:
        try:
            with stored_only():
                score_run(run, lad["model"], lad["steps"], corpus, spec["scoring"], spec["device"])
        except NotStored:
            return None
        return found
    score_run(run, lad["model"], lad["steps"], corpus, spec["scoring"], spec["device"])
    return found


def job_specs(experiment, plan: dict, root, rows=None, rates: dict | None = None,
              extra: dict | None = None) -> tuple[dict, dict, dict]:
    """The pool's jobs (:func:`catlib.experiment.pool.run_jobs`): ``(specs, owners,
    steps)``, one spec per row and seed of the row's plan
    (:func:`~catlib.experiment.scale_plan.row_plan`: ``plan`` and the row's ``extra``
    seeds), scoring its every budget's weights (``ladder``), each row at its rate
    ``rates[label]`` (default: the recipe's); ``steps[label, seed]``: ``{budget: steps}``."""
    specs, owners, steps = {}, {}, {}
    for label in rows or scale_plan.SCALE_ROWS:
        for seed, budgets in seed_budgets(row_plan(plan, extra, label)).items():
            model, tc, steps[label, seed] = scale_configs(label, experiment, seed, budgets,
                                                          (rates or {}).get(label))
            key = (label, seed)
            specs[key] = _job_spec(model, tc, root, experiment, steps[key].values(),
                                   scale_plan.SCALE_ROWS[label].model)
            owners[key] = [key]
    return specs, owners, steps


def open_runs(specs: dict, experiment, device) -> dict:
    """The finished run of every spec, ``{(label, seed): Run}`` (reused: nothing trains)."""
    ev = EvalConfig(lengths=(experiment.train.seq,), eval_windows=experiment.evaluation.eval_windows,
                    span_length=span_length(experiment))
    return {key: train_run(CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"]),
                           root=spec["root"], device=device, evaluation=ev, progress=False,
                           echo=None) for key, spec in specs.items()}


def scale_table(runs: dict, steps: dict, plan: dict, corpus, lengths, caps, device=None,
                span: int | None = None) -> dict:
    """``{row: {"points": [...]}}`` of the finished ``runs`` (``{(row, seed): Run}``) at
    every budget of ``plan`` (``{budget: seeds}``, the same for every row), each seed at
    the budgets its run reached (``steps[row, seed]``: ``{budget: steps}``): the points
    assembled from the runs' records
    (:func:`~catlib.experiment.scale_records.run_records`, scored at ``lengths`` on
    ``caps`` windows, the context gain beyond the runs' training length)."""
    seq = next(iter(runs.values())).train_config.seq
    scored_as = scoring_of(lengths, caps, span, seq)
    per_seed: dict = {}
    for (label, seed), run in runs.items():
        per_seed.setdefault(label, {})[str(seed)] = {"run": run.path.name, "budgets": run_records(
            run, scale_plan.SCALE_ROWS[label].model, steps[label, seed], corpus, scored_as,
            device)}
    return assemble_rows(per_seed, {label: plan for label in per_seed}, scale_plan.SCALE_ROWS)


def recipe_of(specs: dict) -> dict:
    """The training recipe of the study's runs (the same for every causal row), as the
    artefact records it: ``{"schedule", "warmup", "decay_share", "lr", "penalty_horizon",
    "points"}``, ``points`` saying how a smaller budget's point was made; ``lr``: the first
    run's rate (:func:`run_study` records the recipe's own rate there, and each row's rate
    as the row's ``rate``)."""
    tc = TrainConfig(**next(iter(specs.values()))["train"])
    return {"schedule": tc.schedule, "warmup": tc.warmup, "decay_share": tc.decay_share,
            "lr": tc.lr, "penalty_horizon": tc.penalty_horizon,
            "points": "branched" if tc.schedule == "wsd" else "checkpoints"}


def reached(finished, steps: dict, plan: dict) -> dict[str, dict[int, tuple]]:
    """``{row: {budget: seeds}}``: at each budget of ``plan``, the seeds of ``finished``
    (``(row, seed)`` keys) whose run was trained to it (``steps[row, seed]`` holds the
    budget). A seed counts only at the budgets it reached (a plan may train seed 0 further
    than the others); budgets no finished seed reached, and rows with no finished run, are
    left out."""
    out: dict[str, dict[int, tuple]] = {}
    for label in scale_plan.SCALE_ROWS:
        seeds = sorted(s for (lab, s) in finished if lab == label)
        per_budget = {b: tuple(s for s in seeds if b in steps[label, s]) for b in sorted(plan)}
        if any(per_budget.values()):
            out[label] = {b: s for b, s in per_budget.items() if s}
    return out


def run_name(model: CATConfig, train: TrainConfig, device) -> str:
    """The directory :func:`catlib.runs.train_run` gives a run of ``model`` and ``train``
    on ``device`` when no name is given: ``<variant>-<config hash[:8]>``."""
    from ..data import load_corpus

    resolved = model.resolved(torch.device(device))
    h = config_hash(resolved, train, load_corpus(split=train.split).sha256)
    return run_dir_name(resolved, h)


def finished_run(model: CATConfig, train: TrainConfig, folder, device) -> Path | None:
    """The directory of the finished run of ``model`` and ``train`` in ``folder``, if one
    is there (read only: nothing trains or is scored); else None."""
    try:
        with stored_only():
            run = train_run(model, train, root=folder, device=device, evaluate=False,
                            progress=False, echo=None)
    except (NotStored, RunError):
        return None
    return run.path


def borrow_runs(specs: dict, device, folders) -> list[str]:
    """Copy into the study's root each finished run of ``folders`` (the learning-rate
    sweep's run folder) that the study would otherwise train again: one with the
    configuration of a spec's run or of one of its branches (``TrainConfig.branches``,
    :func:`catlib.runs.branches.branch_configs`), named as the study names it. The
    sweep's run of a row at seed 0 and the 1x budget is the study's 1x branch of that
    row's seed-0 run (the trunk's own run where the plan's largest budget is 1x). A run
    already in the study's root is left as it is. Returns the names of the runs copied."""
    copied = []
    for spec in specs.values():
        model, train = CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"])
        trunk = run_name(model, train, device)
        wanted = {trunk: train, **{branch_name(trunk, n): dataclasses.replace(
            train, train_steps=n, branches=(), checkpoints=()) for n in train.branches}}
        for name, config in wanted.items():
            target = Path(spec["root"]) / name
            found = None if target.exists() else next(
                (p for p in (finished_run(model, config, f, device) for f in folders) if p), None)
            if found is not None:
                copy_run(found, target)
                copied.append(name)
    return copied


def copy_run(source: Path, target: Path) -> None:
    """Copy the run directory ``source`` to ``target`` (which must not exist), its lock and
    temporary files left out; made under a temporary name and renamed, so that a copy cut
    short is never taken for a run."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", suffix=".copying", dir=target.parent))
    try:
        shutil.copytree(source, staging / "run", ignore=lambda d, names: [
            n for n in names if n == "lock" or (n.startswith(".") and n.endswith(".tmp"))])
        os.rename(staging / "run", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def recorded_runs(specs: dict, steps: dict, study: dict | None, scored_as: dict, device) -> dict:
    """The runs of ``specs`` whose records the artefact ``study`` (an earlier artefact of
    the same study: the command checks it) holds, read instead of trained: ``{(row, seed):
    {"run", "budgets"}}``, each where the record names the run the spec would train (its
    directory's name, which holds the config hash: the same row, seed, rate, budgets,
    corpus and model code) and holds a finished record
    (:func:`~catlib.experiment.scale_records.complete`) at each of its budgets. None read
    where ``study`` was scored otherwise than ``scored_as`` (:func:`study_scoring`)."""
    if not study or study.get("scoring") != scored_as:
        return {}
    held, out = study.get("per_seed") or {}, {}
    for (label, seed), spec in specs.items():
        entry = (held.get(label) or {}).get(str(seed)) or {}
        budgets = steps[label, seed]
        if entry.get("run") and complete(entry, budgets) and entry["run"] == run_name(
                CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"]), device):
            out[label, seed] = {"run": entry["run"],
                                "budgets": {str(b): entry["budgets"][str(b)] for b in budgets}}
    return out


def run_study(experiment, *, root, device, plan: dict, rows=None, jobs: int | None = None,
              echo=print, progress_every: float = 30.0, rates: dict | None = None,
              rate_source: dict | None = None, on_change=None, runs_from=(),
              extra: dict | None = None, recorded: dict | None = None) -> dict:
    """Train (or resume, or reuse, or read from ``recorded``) every run of the study and
    return its artefact: ``{"plan", "extra_seeds", "rows", "per_seed", "scoring", "recipe",
    "rates", "identity", "trained", "reused_runs", "recorded_runs", "finished_runs",
    "borrowed_runs", "partial", "wall_seconds"}``.

    The plan: every row at the budgets and seeds of ``plan`` (``{budget: seeds}``), and
    the rows of ``extra`` (``{row: {budget: seeds}}``,
    :func:`~catlib.experiment.scale_plan.extra_seeds_for`) on their own seeds as well
    (:func:`~catlib.experiment.scale_plan.row_plan`); ``"plan"``, ``"extra_seeds"``: both as
    the artefact keeps them (:func:`~catlib.experiment.scale_plan.plan_text`). Each row at
    its rate ``rates[label]`` (default: the recipe's single rate), recorded as the row's
    ``rate`` (``recipe["lr"]``: the recipe's own rate); ``"rates"``: where the rates come from
    (``rate_source``, e.g. the sweep's artefact and its dev slice; default ``{"from":
    "recipe"}``).

    ``per_seed``: ``{row: {"<seed>": {"run", "budgets": {"<budget>": record}}}}``, each
    finished run's records (:func:`~catlib.experiment.scale_records.run_records`), and
    ``rows``: ``{row: {"points": [...], "rate"}}``, the points assembled from them
    (:func:`~catlib.experiment.scale_records.assemble_rows`), each row at the budgets its
    finished seeds reached; ``scoring``: what the records were scored on
    (:func:`study_scoring`). ``recorded``: an earlier artefact of this study (None: none);
    a run whose records it holds (:func:`recorded_runs`) is neither trained nor opened:
    its records are taken as they are, so that a study resumed where its run directories
    are gone trains only what it has not recorded.

    ``identity``: what makes two artefacts one study's (``{"plan", "extra_seeds", "rows",
    "corpus"}``: the plan, every row planned, the corpus' SHA-256); ``trained``: the rows
    with a run trained here; ``reused_runs``: how many runs were found finished in
    ``root``, ``recorded_runs``: how many were read from ``recorded``;
    ``finished_runs``: ``[{"row", "seed", "run", "trained"}]`` (``"recorded": True`` for
    one read from ``recorded``); ``borrowed_runs``: the runs copied from ``runs_from``
    (:func:`borrow_runs`) instead of trained; ``partial``: some run has not finished;
    ``wall_seconds``: this call's time so far.

    ``on_change(artefact)`` is called after each run trained here (not after one found
    finished or read), with the artefact of the runs finished so far, so that a study
    killed later keeps what it trained (the command writes it)."""
    from ..data import causal_split, load_corpus
    from ..runs.run import open_run

    start = time.perf_counter()
    specs, owners, steps = job_specs(experiment, plan, root, rows, rates, extra)
    scored_as = study_scoring(experiment)
    taken = recorded_runs(specs, steps, recorded, scored_as, device)
    todo = {key: spec for key, spec in specs.items() if key not in taken}
    borrowed = borrow_runs(todo, device, runs_from)
    corpus = span_corpus(load_corpus(split=causal_split(experiment.corpus)),
                         span_length(experiment), scored_as.get("span_tiles"))
    planned = list(dict.fromkeys(label for label, _ in specs))
    plans = {label: row_plan(plan, extra, label) for label in planned}
    rate = {label: spec["train"]["lr"] for (label, _), spec in specs.items()}
    per_seed: dict = {}    # row -> {"<seed>": {"run", "budgets": {"<budget>": record}}}
    finished: dict = {}    # (label, seed) -> {"name", "reused"} (and "recorded")
    for (label, seed), entry in taken.items():
        per_seed.setdefault(label, {})[str(seed)] = entry
        finished[label, seed] = {"name": entry["run"], "reused": True, "recorded": True}

    def finish(key, result: dict) -> None:
        """Run ``key`` has finished: read its records (scored and stored by its job)."""
        finished[key] = result
        run = open_run(Path(specs[key]["root"]) / result["name"])
        per_seed.setdefault(key[0], {})[str(key[1])] = {"run": result["name"], "budgets": run_records(
            run, scale_plan.SCALE_ROWS[key[0]].model, steps[key], corpus, scored_as, device)}

    def artefact() -> dict:
        done = {k: finished[k] for k in specs if k in finished}
        table = assemble_rows(per_seed, plans, scale_plan.SCALE_ROWS)
        identity = study_identity(plan, extra, planned, corpus.sha256)
        return {"plan": identity["plan"], "extra_seeds": identity["extra_seeds"],
                "rows": {label: {**t, "rate": rate[label]} for label, t in table.items()},
                "per_seed": {label: dict(sorted(per_seed[label].items(), key=lambda i: int(i[0])))
                             for label in scale_plan.SCALE_ROWS if label in per_seed},
                "scoring": scored_as,
                "recipe": {**recipe_of(specs), "lr": experiment.train.lr, "rate_per_row": bool(rates)},
                "rates": rate_source or {"from": "recipe"},
                "identity": identity,
                "trained": [r for r in scale_plan.SCALE_ROWS
                            if any(not d["reused"] for k, d in done.items() if k[0] == r)],
                "reused_runs": sum(bool(d["reused"]) and not d.get("recorded") for d in done.values()),
                "recorded_runs": sum(bool(d.get("recorded")) for d in done.values()),
                "finished_runs": [{"row": k[0], "seed": k[1], "run": d["name"],
                                   "trained": not d["reused"],
                                   **({"recorded": True} if d.get("recorded") else {})}
                                  for k, d in done.items()],
                "borrowed_runs": borrowed, "partial": len(done) < len(specs),
                "wall_seconds": time.perf_counter() - start}

    if taken and echo:
        echo(f"{len(taken)} of {len(specs)} runs read from the study's artefact (their records): "
             "not trained again")
    # The pool says "<row> (seed <s>): trained run <name>" (or "reused run") as each run ends.
    prefixes = {f"{label} (seed {seed}): ": (label, seed) for label, seed in todo}

    def say(line: str) -> None:
        if echo:
            echo(line)
        prefix = next((p for p in prefixes if line.startswith(p)), None)
        if prefix is None:
            return
        state, _, name = line[len(prefix):].partition(" run ")
        finish(prefixes[prefix], {"name": name, "reused": state == "reused"})
        if on_change is not None and state != "reused":
            on_change(artefact())

    if todo:
        done = run_jobs(todo, {key: owners[key] for key in todo}, _scale_job,
                        worker_devices(device, jobs), say, progress_every)
        for key, result in done.items():
            if finished.get(key) != result:
                finish(key, result)
    return artefact()
