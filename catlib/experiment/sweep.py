"""Each row of the scale study at its own learning rate, chosen on the dev slice.

The sweep trains every row of :data:`catlib.experiment.scale.SCALE_ROWS` at the 1x budget
on seed 0 (:data:`SEED`, :data:`BUDGET`; the study's configurations,
:func:`~catlib.experiment.scale.scale_configs`) at each rate of :data:`RATES`, the book's
recipe otherwise unchanged (its warm-up and decay shares are shares of the steps, so they
do not move with the rate). Where a row's best rate is the grid's lowest or highest, the
grid is extended on that side by :data:`FACTOR`, up to :data:`MAX_EXTENSIONS` times
(:func:`next_rate`); the row's rate is then the one with the lowest dev CE
(:func:`best_rate`).

Each run is scored on the dev slice only (``Corpus.dev``: the training part's last
characters, trained on by no run and read by no reported CE): every non-overlapping
window of the training length (:func:`dev_ce`, stored with the run). The validation split
is never read: the runs are trained without their usual evaluation.

The runs train in the experiment's pool (:func:`catlib.experiment.pool.run_jobs`), the
grid's rates of every row at once, then each extension; a finished run and its dev score
are reused, so a cut sweep resumes where it stopped. ``python -m catlib.book.sweep``
(``make sweep``) writes ``results/lr_sweep_<device>.json``; the study reads each row's rate
from it (:func:`chosen_rates`).
"""
from __future__ import annotations

import time

import torch

from ..nn.config import CATConfig
from ..runs import (NotStored, TrainingFailed, stored_only, stored_with_run, train_run,
                    weights_digest)
from ..training.loop import TrainConfig
from .pool import run_jobs, worker_devices
from .progress import reporter
from .scale import SCALE_ROWS, scale_configs

# The grid (the recipe probe's: ALiBi was best at its edge, 8e-3), its extension beyond an
# edge that wins, and the run each rate is tried on: 1x, seed 0.
RATES = (2e-3, 4e-3, 8e-3)
FACTOR = 2.0
MAX_EXTENSIONS = 2
SEED, BUDGET = 0, 1


class SweepError(ValueError):
    """The sweep's artefact cannot give the study a row's rate: one line naming the fix."""


def rate_key(rate: float) -> str:
    """A rate as the artefact's key: ``"0.004"``."""
    return f"{rate:g}"


def best_rate(ce: dict) -> float:
    """The rate of the lowest CE in ``ce`` (``{rate: CE}``); a NaN or None CE (a run that
    diverged) is never best; ties go to the lower rate."""
    def loss(rate):
        value = ce[rate]
        return float("inf") if value is None or value != value else value
    return min(sorted(ce), key=loss)


def next_rate(ce: dict, grid=RATES, factor: float = FACTOR,
              cap: int = MAX_EXTENSIONS) -> float | None:
    """The rate to try next for a row whose dev CE per rate is ``ce`` (``{rate: CE}``, every
    rate of ``grid`` measured): the lowest rate over ``factor`` where it is the best, the
    highest times ``factor`` where that is, each side at most ``cap`` times beyond the grid;
    None where the best rate is interior or the cap is reached."""
    missing = [r for r in grid if r not in ce]
    if missing:
        raise ValueError(f"rates {missing} of the grid are not measured yet")
    best, low, high = best_rate(ce), min(ce), max(ce)
    if best == low and sum(r < min(grid) for r in ce) < cap:
        return low / factor
    if best == high and sum(r > max(grid) for r in ce) < cap:
        return high * factor
    return None


def rates_to_run(ce: dict, grid=RATES, factor: float = FACTOR, cap: int = MAX_EXTENSIONS) -> list:
    """The rates a row still needs: the grid's unmeasured ones, else its next extension
    (:func:`next_rate`), else none (the row is done)."""
    missing = [r for r in grid if r not in ce]
    if missing:
        return missing
    nxt = next_rate(ce, grid, factor, cap)
    return [] if nxt is None else [nxt]


def dev_definition(corpus, length: int) -> dict:
    """The dev slice as the artefacts record it: its split, where it starts among the
    corpus' ids, its characters, and the windows a run is scored on (every non-overlapping
    window of ``length``, each with the id after it, as the published protocol)."""
    if corpus.dev is None:
        raise ValueError(f"the {corpus.split!r} split has no dev slice; use the 90/10 split")
    n = (len(corpus.dev) - length - 1) // length
    return {"split": corpus.split, "start": len(corpus.train), "chars": len(corpus.dev),
            "length": length, "windows": n,
            "what": "the training part's last characters: trained on by no run, read by no "
                    "reported CE"}


def dev_ce(run, model_key: str, corpus, length: int, device=None) -> dict:
    """``{"ce", "se", "windows"}`` of the run's final model ``model_key`` on every
    non-overlapping window of ``length`` of the dev slice (``corpus.dev``, int64 [N_dev];
    :func:`catlib.measure.evaluate.cross_entropy`), stored with the run (valid for its
    weights, the code and the slice)."""
    from ..common.provenance import code_fingerprint
    from ..measure.evaluate import cross_entropy

    where = dev_definition(corpus, length)
    model = run.load_weights(device or "cpu")[0][model_key]
    ident = {"weights": weights_digest({model_key: model}), "code": code_fingerprint(),
             **{k: where[k] for k in ("split", "start", "chars", "length", "windows")}}

    def score():
        found = cross_entropy(model, corpus.dev, length, eval_windows=where["windows"],
                              device=device)
        return {k: found[k] for k in ("ce", "se", "windows")}
    return stored_with_run(run, f"dev-ce-{model_key}.json", ident, score)


def sweep_spec(label: str, experiment, rate: float, root) -> dict:
    """The pool's job for ``label`` at ``rate``: its 1x run of seed 0 (:data:`BUDGET`,
    :data:`SEED`), scored on the dev slice."""
    model, train, steps = scale_configs(label, experiment, SEED, [BUDGET], rate)
    return dict(model=model.to_dict(), train=train.to_dict(), root=str(root),
                model_key=SCALE_ROWS[label].model, dropout_on=[], steps=steps[BUDGET])


def _sweep_job(spec: dict, steps=None, stored: bool = False) -> dict | None:
    """Train (or reuse) one run of the sweep without its usual evaluation (the validation
    split is not read) and score it on the dev slice: ``{"name", "reused", "ce", "se",
    "windows", "seconds"}``. With ``stored``: only if both are stored (nothing computed);
    else None. A worker process, or this one (:func:`catlib.experiment.pool.run_jobs`)."""
    if stored:
        try:
            with stored_only():
                return _train_and_score(spec, steps)
        except NotStored:
            return None
    return _train_and_score(spec, steps)


def _train_and_score(spec: dict, steps=None) -> dict:
    """:func:`_sweep_job`'s work: train (or reuse) the run, score it on the dev slice."""
    from ..data import load_corpus

    threads = torch.get_num_threads()
    torch.set_num_threads(1)     # a run's numbers do not depend on how many run beside it
    try:
        tc = TrainConfig(**spec["train"])
        try:
            run = train_run(CATConfig.from_dict(spec["model"]), tc, root=spec["root"],
                            device=spec["device"], evaluate=False, progress=False, echo=None,
                            on_step=reporter(spec["index"], steps) if "index" in spec else None)
        except TrainingFailed as e:   # diverged at this rate: never the best (resumed by
            # a later sweep, it fails again within the steps since its last checkpoint)
            return {"name": "that diverged", "reused": False, "ce": None, "se": None,
                    "windows": 0, "seconds": None, "failed": str(e)}
        found = dev_ce(run, spec["model_key"], load_corpus(split=tc.split), tc.seq,
                       spec["device"])
        seconds = sum(m["seconds"] for m in run.metrics() if m.get("kind") == "train")
        return {"name": run.path.name, "reused": run.reused, **found, "seconds": seconds}
    finally:
        torch.set_num_threads(threads)


def sweep_table(measured: dict, steps: dict, grid=RATES, factor: float = FACTOR,
                cap: int = MAX_EXTENSIONS) -> dict:
    """``{row: {"dev_ce": {rate: CE}, "dev_se", "seconds", "steps", "rate", "edge"}}``
    from ``measured[row][rate]`` (a job's result): rates as :func:`rate_key`, lowest first;
    ``rate``: the best rate once the row needs none more (:func:`rates_to_run`), else None;
    ``edge``: that best rate is still an edge of what was tried (the cap was reached)."""
    out = {}
    for label, found in measured.items():
        if not found:
            continue
        rates = sorted(found)
        ce = {r: found[r]["ce"] for r in rates}
        done = not rates_to_run(ce, grid, factor, cap)
        best = best_rate(ce) if done else None
        out[label] = {"dev_ce": {rate_key(r): ce[r] for r in rates},
                      "dev_se": {rate_key(r): found[r]["se"] for r in rates},
                      "seconds": {rate_key(r): found[r]["seconds"] for r in rates},
                      "steps": steps[label], "rate": best,
                      "edge": bool(done and best in (rates[0], rates[-1]))}
    return out


def run_sweep(experiment, *, root, device, rows=None, jobs: int | None = None, echo=print,
              progress_every: float = 30.0, on_change=None, grid=RATES,
              factor: float = FACTOR, cap: int = MAX_EXTENSIONS) -> dict:
    """Train (or resume, or reuse) every run of the sweep and return its artefact:
    ``{"grid", "factor", "max_extensions", "seed", "budget", "recipe", "dev", "rows":
    sweep_table(...), "wall_seconds"}``. ``on_change(artefact)`` is called after each
    finished run, so that a cut sweep keeps what it measured (the command writes it)."""
    from ..data import load_corpus

    start = time.perf_counter()
    rows = list(rows or SCALE_ROWS)
    measured: dict = {label: {} for label in rows}
    steps = {label: sweep_spec(label, experiment, grid[0], root)["steps"] for label in rows}
    _, tc, _ = scale_configs(rows[0], experiment, SEED, [BUDGET])
    head = {"grid": list(grid), "factor": factor, "max_extensions": cap, "seed": SEED,
            "budget": BUDGET, "recipe": {"schedule": tc.schedule, "warmup": tc.warmup,
                                         "decay_share": tc.decay_share,
                                         "penalty_horizon": tc.penalty_horizon},
            "dev": dev_definition(load_corpus(split=tc.split), tc.seq)}

    def artefact() -> dict:
        return {**head, "rows": sweep_table(measured, steps, grid, factor, cap),
                "wall_seconds": time.perf_counter() - start}

    while True:
        specs, owners, names = {}, {}, {}
        for label in rows:
            for rate in rates_to_run({r: v["ce"] for r, v in measured[label].items()},
                                     grid, factor, cap):
                specs[label, rate] = sweep_spec(label, experiment, rate, root)
                owners[label, rate] = [(f"{label} at lr {rate_key(rate)}", SEED)]
                names[f"{owners[label, rate][0][0]} (seed {SEED}):"] = (label, rate)
        if not specs:
            return artefact()

        def say(line: str) -> None:
            """The pool's line; a finished run's ("<owner> (seed 0): trained run ...")
            also takes its stored score and calls ``on_change``."""
            if echo:
                echo(line)
            key = next((k for prefix, k in names.items() if line.startswith(prefix)), None)
            found = _sweep_job(specs[key], stored=True) if key and on_change else None
            if found is not None:
                measured[key[0]][key[1]] = found
                on_change(artefact())
        done = run_jobs(specs, owners, _sweep_job, worker_devices(device, jobs), say,
                        progress_every)
        for (label, rate), result in done.items():
            measured[label][rate] = result


def chosen_rates(sweep: dict, rows, where: str = "the sweep's artefact") -> dict:
    """``{row: rate}`` for each of ``rows`` from a sweep's artefact (:func:`run_sweep`);
    :class:`SweepError` naming ``make sweep`` where a row has no chosen rate."""
    found = sweep.get("rows", {})
    for label in rows:
        if (found.get(label) or {}).get("rate") is None:
            state = "is not finished for" if label in found else "has no"
            raise SweepError(f"{where} {state} row {label!r}: run `make sweep` (it resumes), "
                             "or train at the recipe's single rate with --recipe_rate")
    return {label: float(found[label]["rate"]) for label in rows}
