"""Each row of the scale study at its own learning rate, chosen on the dev slice.

The sweep trains every row of :func:`catlib.experiment.scale_plan.swept_rows` on the
experiment's corpus (``experiment.corpus``: Tiny Shakespeare's rows on "tiny", the nine
rows of issue 62 on "code") at the 1x budget
(:data:`BUDGET`) on each seed of :data:`SWEEP_SEEDS` (0 and 1; the study's configurations,
:func:`~catlib.experiment.scale.scale_configs`) at each rate of :data:`RATES`, the book's
recipe otherwise unchanged (its warm-up and decay shares are shares of the steps, so they
do not move with the rate).

A row keeps the recipe's rate (:data:`DEFAULT_RATE`, 4e-3) unless another rate's dev CE is
lower than the default's by more than a called margin on every seed (:func:`chosen_rate`);
of the rates that are, it takes the one of lowest mean dev CE over the seeds. On one seed,
a rate that wins by less than what another sample of windows could move the difference by
is a tie, and the windows' margin holds nothing of what another seed moves a run by, so a
rate that wins on one seed and not on the other is a tie too (issue 61: by its lowest dev
CE on seed 0 alone, the sweep took 8e-3 for ALiBi by 0.0011 nats, where a seed moves that
CE by about 0.005, and on validation 8e-3 cost ALiBi 0.024). A tie keeps the recipe. The
margin on a seed (:func:`margin`) is the half-width of the 95 % interval of the difference
of the two runs' dev CEs over the dev windows, which both runs read: ``t(0.975, n−1) ·
sd(d) / sqrt(n)`` over the ``n`` per-window differences ``d``. Where the chosen rate is the lowest or highest
of those tried (an edge that wins by this rule), the grid is extended on that side by
:data:`FACTOR`, up to :data:`MAX_EXTENSIONS` times (:func:`next_rate`). A rate that
diverged on a seed is never chosen; a row whose every rate did has no rate and extends
nothing (:func:`unrated_rows`: the study names it and refuses it).

Each run is scored on the dev slice only (``corpus.dev``: trained on by no run and read by
no reported CE; on Tiny Shakespeare the corpus' first 50,000 characters, on the code corpus
its dev files, whole source files held out of the training part): every non-overlapping
window of the training length (:func:`dev_ce`, stored with the run). The validation split
is never read: the runs are trained without their usual evaluation. The artefact records
its corpus and the slice (:func:`dev_definition`), and the study reads no artefact whose
slice is not today's (:func:`check_dev`): its rates were chosen on other characters, which
may now be trained on.

The runs train in the experiment's pool (:func:`catlib.experiment.pool.run_jobs`, whose
progress line counts the round's runs and gives the time left), the grid's rates of every
row on both seeds at once, then each extension on both seeds; a finished run and its dev
score are reused, so a cut sweep resumes where it stopped. Each run has the configuration,
so the config hash, of the study's run of its row at its seed and the 1x budget at that rate
(the study's 1x branch of that seed's run); every seed's runs are kept under the sweep's
one root, named ``<variant>-<config hash[:8]>`` as any run (:func:`sweep_spec` opens it),
where the study finds them (:func:`catlib.experiment.scale.borrow_runs`).
``python -m catlib.book.sweep`` (``make sweep``) writes ``results/lr_sweep_<device>.json``
(``make sweep CORPUS=code``: ``results/lr_sweep_code_<device>.json``); the study reads each
row's rate from it (:func:`chosen_rates`).
"""
from __future__ import annotations

import math
import time

import torch

from ..common.verdicts import t_quantile
from ..data import ALL_SPLITS, CORPUS_CHARS, SPLITS, corpus_of, split_parts
from ..measure.evaluate import window_se
from ..nn.config import CATConfig
from ..runs import (NotStored, TrainingFailed, stored_only, stored_with_run, train_run,
                    weights_digest)
from ..training.config import TrainConfig
from .pool import run_jobs, worker_devices
from .progress import reporter
from .scale import scale_configs
from .scale_plan import SCALE_ROWS, swept_rows

# The recipe's rate (chapter 10's, every profile's ``lr`` at the book's sizes): a row keeps
# it unless another rate is better by a called margin on every seed.
DEFAULT_RATE = 4e-3
# The grid around it (the recipe probe's: ALiBi was best at its edge, 8e-3), its extension
# beyond an edge that wins, and the runs each rate is tried on: 1x, seeds 0 and 1.
RATES = (2e-3, DEFAULT_RATE, 8e-3)
FACTOR = 2.0
MAX_EXTENSIONS = 2
SWEEP_SEEDS = (0, 1)
BUDGET = 1
# The rule, as the artefact records it: a sweep's rates are read only if chosen by it.
RULE = (f"keep {DEFAULT_RATE:g} unless another rate's dev CE is lower by a called margin, "
        "t(0.975, windows-1) x the paired window error, on every seed of "
        f"{', '.join(map(str, SWEEP_SEEDS))}; of those, the lowest mean dev CE")


class SweepError(ValueError):
    """The sweep's artefact cannot give the study a row's rate: one line naming the fix."""


def rate_key(rate: float) -> str:
    """A rate as the artefact's key: ``"0.004"``."""
    return f"{rate:g}"


def diverged(score: dict) -> bool:
    """Whether the run behind ``score`` (a job's result, ``{"ce", "se", ...}``) diverged:
    its CE is None or NaN."""
    ce = score.get("ce")
    return ce is None or math.isnan(ce)


def margin(default: dict, other: dict) -> float | None:
    """How far ``other``'s dev CE must lie below ``default``'s to be called lower, on one
    seed: the half-width of the 95 % interval of CE(other) − CE(default), ``t(0.975, n−1) ·
    window_se(d)`` over the ``n`` per-window differences ``d`` (``"window_ce"``, [n] each;
    both runs read the same windows, so what makes a window hard for both cancels). Where a
    score has no per-window CEs (one stored before they were kept), the bound
    ``t(0.975, n−1) · (se_default + se_other)``, which holds whatever the two runs' windows'
    correlation. None where no margin can be formed (a run diverged, one window, no error)."""
    if diverged(default) or diverged(other):
        return None
    a, b = default.get("window_ce"), other.get("window_ce")
    if a is not None and b is not None and len(a) == len(b) > 1:
        return t_quantile(len(a) - 1) * window_se([y - x for x, y in zip(a, b)])
    n = min(default.get("windows") or 0, other.get("windows") or 0)
    if n < 2 or default.get("se") is None or other.get("se") is None:
        return None
    return t_quantile(n - 1) * (default["se"] + other["se"])


def called(default: dict, other: dict) -> bool:
    """Whether ``other``'s dev CE lies below ``default``'s by more than their
    :func:`margin` (one seed's two runs); never where no margin can be formed."""
    m = margin(default, other)
    return m is not None and default["ce"] - other["ce"] > m


def measured_rates(found: dict, seeds=SWEEP_SEEDS) -> list[float]:
    """The rates of ``found`` (``{rate: {seed: job result}}``, a row's runs) measured on
    every seed of ``seeds``, lowest first."""
    return sorted(r for r, by_seed in found.items() if all(s in by_seed for s in seeds))


def mean_ce(by_seed: dict, seeds=SWEEP_SEEDS) -> float | None:
    """The mean dev CE over ``seeds`` of one rate's runs (``{seed: job result}``); None
    where one is missing or diverged."""
    if any(s not in by_seed or diverged(by_seed[s]) for s in seeds):
        return None
    return sum(by_seed[s]["ce"] for s in seeds) / len(seeds)


def chosen_rate(found: dict, default: float = DEFAULT_RATE, seeds=SWEEP_SEEDS) -> float | None:
    """The rate of a row whose runs scored ``found`` (``{rate: {seed: job result}}``):
    ``default`` unless other rates' dev CEs are lower than its by more than their
    :func:`margin` on every seed of ``seeds`` (:func:`called`), then the one of those with
    the lowest mean dev CE; where ``default`` diverged on a seed, the lowest mean dev CE of
    the rest. Only rates measured on every seed and diverged on none count; None where no
    rate is left (every rate diverged: the row has no rate)."""
    alive = {r: mean_ce(found[r], seeds) for r in measured_rates(found, seeds)}
    alive = {r: ce for r, ce in alive.items() if ce is not None}
    if not alive:
        return None
    if default not in alive:
        return min(alive, key=alive.get)
    ahead = {r: ce for r, ce in alive.items() if r != default
             and all(called(found[default][s], found[r][s]) for s in seeds)}
    return min(ahead, key=ahead.get) if ahead else default


def next_rate(found: dict, grid=RATES, factor: float = FACTOR, cap: int = MAX_EXTENSIONS,
              seeds=SWEEP_SEEDS) -> float | None:
    """The rate to try next for a row whose runs scored ``found`` (``{rate: {seed: job
    result}}``, every rate of ``grid`` measured on every seed): the lowest rate over
    ``factor`` where it is the chosen one (:func:`chosen_rate`), the highest times
    ``factor`` where that is, each side at most ``cap`` times beyond the grid; None where the
    chosen rate is interior, the cap is reached, or every rate diverged."""
    done = measured_rates(found, seeds)
    missing = [r for r in grid if r not in done]
    if missing:
        raise ValueError(f"rates {missing} of the grid are not measured on seeds "
                         f"{list(seeds)} yet")
    chosen, low, high = chosen_rate(found, seeds=seeds), done[0], done[-1]
    if chosen is None:
        return None
    if chosen == low and sum(r < min(grid) for r in done) < cap:
        return low / factor
    if chosen == high and sum(r > max(grid) for r in done) < cap:
        return high * factor
    return None


def runs_to_do(found: dict, grid=RATES, factor: float = FACTOR, cap: int = MAX_EXTENSIONS,
               seeds=SWEEP_SEEDS) -> list[tuple[float, int]]:
    """The ``(rate, seed)`` runs a row whose runs scored ``found`` (``{rate: {seed: job
    result}}``) still needs: the grid's unmeasured ones on every seed, else its next
    extension's (:func:`next_rate`) on every seed, else none (the row is done)."""
    missing = [(r, s) for r in grid for s in seeds if s not in found.get(r, {})]
    if missing:
        return missing
    nxt = next_rate(found, grid, factor, cap, seeds)
    return [] if nxt is None else [(nxt, s) for s in seeds if s not in found.get(nxt, {})]


def sweep_command(corpus: str = "tiny") -> str:
    """The command that makes the sweep's artefact on ``corpus``: ``make sweep``, or
    ``make sweep CORPUS=code``."""
    return "make sweep" if corpus == "tiny" else f"make sweep CORPUS={corpus}"


def current_dev(split: str = "90/10", length: int | None = None) -> dict:
    """Today's dev slice of ``split`` as :func:`dev_definition` records it, and
    ``"length"`` where given. Tiny Shakespeare's without loading the corpus (its length is
    fixed by its checksum, :data:`~catlib.data.CORPUS_CHARS`): ``{"split", "start",
    "chars"}``; the code corpus's ("files") from the corpus, read once per process:
    ``{"split", "files", "chars"}``. :class:`SweepError` where ``split`` has no dev slice
    or the corpus cannot be read (another SymPy: its one line, naming the fix)."""
    if split in ALL_SPLITS and corpus_of(split) == "code":
        from ..data import DataError, load_corpus

        try:
            corpus = load_corpus(split=split)
        except DataError as e:
            raise SweepError(str(e)) from None
        return {**_files_dev(corpus), **({} if length is None else {"length": length})}
    parts = split_parts(CORPUS_CHARS, split) if split in SPLITS else {}
    if parts.get("dev") is None:
        raise SweepError(f"the split {split!r} has no dev slice (the sweep's is 90/10's); "
                         "run `make sweep`")
    start, stop = parts["dev"]
    return {"split": split, "start": start, "chars": stop - start,
            **({} if length is None else {"length": length})}


def check_dev(sweep: dict, where: str = "the sweep's artefact", length: int | None = None) -> None:
    """:class:`SweepError`, one line naming ``make sweep``, where the dev slice a sweep's
    artefact records (``sweep["dev"]``, :func:`dev_definition`) is not today's
    (:func:`current_dev`): another split, start, files or size, or, where ``length`` is
    given, windows of another length. Its rates were chosen on other characters (the slice moved
    from the training part's end to the corpus' opening in issue 61), which the study's runs
    may now train on. An artefact that records no slice (none that :func:`run_sweep`
    writes) is not checked."""
    recorded = sweep.get("dev")
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise SweepError(f"{where} records no readable dev slice ({recorded!r}); run "
                         f"`{sweep_command(swept_corpus(sweep))}`")
    now = current_dev(recorded.get("split", "90/10"), length)
    moved = [f"{k} {recorded.get(k)!r}, now {v!r}" for k, v in now.items() if recorded.get(k) != v]
    if moved:
        raise SweepError(f"{where} was swept on another dev slice ({'; '.join(moved)}): its "
                         "rates were chosen on other characters; run "
                         f"`{sweep_command(swept_corpus(sweep))}`")


def swept_corpus(sweep: dict) -> str:
    """The corpus a sweep's artefact was swept on: the one it records (``"corpus"``), else
    its dev slice's split's (an artefact made before the code corpus: "tiny")."""
    if sweep.get("corpus"):
        return sweep["corpus"]
    dev = sweep.get("dev")
    split = dev.get("split") if isinstance(dev, dict) else None
    return corpus_of(split) if split in ALL_SPLITS else "tiny"


def check_corpus_of(sweep: dict, corpus: str, where: str = "the sweep's artefact") -> None:
    """:class:`SweepError`, one line naming the command, where a sweep's artefact was swept
    on another corpus than ``corpus`` (:func:`swept_corpus`): its rates are another text's."""
    found = swept_corpus(sweep)
    if found != corpus:
        raise SweepError(f"{where} was swept on the corpus {found!r}, not {corpus!r}: its "
                         f"rates are another text's; run `{sweep_command(corpus)}`")


def _files_dev(corpus) -> dict:
    """The code corpus's dev slice (a :class:`~catlib.code_corpus.CodeCorpus`): its split,
    its dev files' paths in the text's order and their characters (``len(corpus.dev)``)."""
    return {"split": corpus.split, "files": [f.path for f in corpus.files["dev"]],
            "chars": len(corpus.dev)}


def dev_definition(corpus, length: int) -> dict:
    """The dev slice as the artefacts record it: its split, where it lies (Tiny
    Shakespeare's: where it starts among the corpus' ids; the code corpus's: its dev
    files' paths), its characters, and the windows a run is scored on (every
    non-overlapping window of ``length`` of ``corpus.dev``, each with the id after it, as
    the published protocol)."""
    if corpus.dev is None:
        raise ValueError(f"the {corpus.split!r} split has no dev slice; use the 90/10 split")
    n = (len(corpus.dev) - length - 1) // length
    if corpus_of(corpus.split) == "code":      # its dev files
        return {**_files_dev(corpus), "length": length, "windows": n,
                "what": "the dev files: whole source files held out of the training part, "
                        "trained on by no run, read by no reported CE"}
    start, stop = split_parts(len(corpus.ids), corpus.split)["dev"]
    return {"split": corpus.split, "start": start, "chars": stop - start,
            "length": length, "windows": n,
            "what": "the corpus' first characters, before the training part: trained on by no "
                    "run, read by no reported CE"}


def dev_ce(run, model_key: str, corpus, length: int, device=None) -> dict:
    """``{"ce", "se", "windows", "window_ce"}`` of the run's final model ``model_key`` on
    every non-overlapping window of ``length`` of the dev slice (``corpus.dev``, int64
    [N_dev]; :func:`catlib.measure.evaluate.cross_entropy`; ``window_ce``: each window's CE,
    [windows], for the paired :func:`margin`), stored with the run (valid for its weights,
    the code and the slice)."""
    from ..common.provenance import code_fingerprint
    from ..measure.evaluate import cross_entropy

    where = dev_definition(corpus, length)
    model = run.load_weights(device or "cpu")[0][model_key]
    ident = {"weights": weights_digest({model_key: model}), "code": code_fingerprint(),
             "scores": ["ce", "se", "windows", "window_ce"],
             **{k: v for k, v in where.items() if k != "what"}}

    def score():
        found = cross_entropy(model, corpus.dev, length, eval_windows=where["windows"],
                              device=device)
        return {k: found[k] for k in ("ce", "se", "windows", "window_ce")}
    return stored_with_run(run, f"dev-ce-{model_key}.json", ident, score)


def sweep_spec(label: str, experiment, rate: float, root, seed: int = SWEEP_SEEDS[0]) -> dict:
    """The pool's job for ``label`` at ``rate`` on ``seed``: its 1x run (:data:`BUDGET`),
    scored on the dev slice, the configuration of the study's 1x point of ``label`` at
    ``seed``. ``model`` and ``train`` also open the run once trained
    (``train_run(CATConfig.from_dict(spec["model"]), TrainConfig(**spec["train"]),
    root=spec["root"], evaluate=False)`` reuses it)."""
    model, train, steps = scale_configs(label, experiment, seed, [BUDGET], rate)
    return dict(model=model.to_dict(), train=train.to_dict(), root=str(root),
                model_key=SCALE_ROWS[label].model, dropout_on=[], steps=steps[BUDGET])


def _sweep_job(spec: dict, steps=None, stored: bool = False) -> dict | None:
    """Train (or reuse) one run of the sweep without its usual evaluation (the validation
    split is not read) and score it on the dev slice: ``{"name", "reused", "ce", "se",
    "windows", "window_ce", "seconds"}``. With ``stored``: only if both are stored (nothing
    computed); else None. A worker process, or this one
    (:func:`catlib.experiment.pool.run_jobs`)."""
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
        except TrainingFailed as e:   # diverged at this rate: never chosen (resumed by
            # a later sweep, it fails again within the steps since its last checkpoint)
            return {"name": "that diverged", "reused": False, "ce": None, "se": None,
                    "windows": 0, "window_ce": None, "seconds": None, "failed": str(e)}
        found = dev_ce(run, spec["model_key"], load_corpus(split=tc.split), tc.seq,
                       spec["device"])
        seconds = sum(m["seconds"] for m in run.metrics() if m.get("kind") == "train")
        return {"name": run.path.name, "reused": run.reused, **found, "seconds": seconds}
    finally:
        torch.set_num_threads(threads)


def _per_seed(found: dict, value) -> dict:
    """``{rate_key: {seed: value(rate, seed, score)}}`` over every run of ``found``
    (``{rate: {seed: job result}}``), rates lowest first, seeds as the artefact's keys."""
    return {rate_key(r): {str(s): value(r, s, found[r][s]) for s in sorted(found[r])}
            for r in sorted(found)}


def sweep_table(measured: dict, steps: dict, grid=RATES, factor: float = FACTOR,
                cap: int = MAX_EXTENSIONS, seeds=SWEEP_SEEDS) -> dict:
    """``{row: {"dev_ce", "dev_se", "seconds", "lead", "dev_margin", "mean_dev_ce",
    "called", "steps", "done", "rate", "all_diverged", "edge"}}`` from
    ``measured[row][rate][seed]`` (a job's result), every row of ``measured`` (one with
    nothing measured yet too). ``dev_ce``, ``dev_se``, ``seconds``: ``{rate: {seed:
    value}}``, rates as :func:`rate_key`, seeds as strings; ``lead`` and ``dev_margin``, for
    each rate but :data:`DEFAULT_RATE`: on each seed, how far its dev CE lies below the
    default's, and its :func:`margin` (None where either cannot be formed);
    ``mean_dev_ce``: over ``seeds`` (None until measured on each, or where one diverged);
    ``called``: ahead by more than the margin on every seed; ``done``: the row needs no run
    more (:func:`runs_to_do`); ``rate``: once done, the chosen one (:func:`chosen_rate`),
    None where every rate diverged (``all_diverged``); ``edge``: the chosen rate is still an
    edge of what was tried (the cap was reached)."""
    out = {}
    for label, found in measured.items():
        tried = measured_rates(found, seeds)
        done = bool(found) and not runs_to_do(found, grid, factor, cap, seeds)
        rate = chosen_rate(found, seeds=seeds) if done else None
        base = found.get(DEFAULT_RATE, {})
        others = {r: by_seed for r, by_seed in found.items() if r != DEFAULT_RATE}

        def lead(r, s, score):
            if s not in base or diverged(base[s]) or diverged(score):
                return None
            return base[s]["ce"] - score["ce"]
        out[label] = {
            "dev_ce": _per_seed(found, lambda r, s, score: score["ce"]),
            "dev_se": _per_seed(found, lambda r, s, score: score["se"]),
            "seconds": _per_seed(found, lambda r, s, score: score["seconds"]),
            "lead": _per_seed(others, lead),
            "dev_margin": _per_seed(others, lambda r, s, score: None if s not in base
                                    else margin(base[s], score)),
            "mean_dev_ce": {rate_key(r): mean_ce(found[r], seeds) for r in sorted(found)},
            "called": {rate_key(r): all(s in base and s in others[r]
                                        and called(base[s], others[r][s]) for s in seeds)
                       for r in sorted(others)},
            "steps": steps[label], "done": done, "rate": rate,
            "all_diverged": done and rate is None,
            "edge": bool(rate is not None and rate in (tried[0], tried[-1]))}
    return out


def sweep_complete(sweep: dict) -> bool:
    """Whether a sweep's artefact (or :func:`run_sweep`'s table) has every row done: each
    row has its rate, or every rate of it diverged. Rows without ``done`` (an artefact made
    before it was recorded) count as done where they have a rate."""
    rows = sweep.get("rows") or {}
    return bool(rows) and all(row.get("done", row.get("rate") is not None)
                              for row in rows.values())


def run_sweep(experiment, *, root, device, rows=None, jobs: int | None = None, echo=print,
              progress_every: float = 30.0, on_change=None, grid=RATES,
              factor: float = FACTOR, cap: int = MAX_EXTENSIONS, seeds=SWEEP_SEEDS) -> dict:
    """Train (or resume, or reuse) every run of the sweep and return its artefact:
    ``{"corpus", "grid", "default_rate", "rule", "factor", "max_extensions", "seeds",
    "budget", "recipe", "dev", "rows": sweep_table(...), "wall_seconds"}``, ``rows`` holding every
    row of ``rows`` from the first call on. The runs go to the pool in rounds: the grid's
    rates of every row on every seed of ``seeds``, then each row's extension on every seed
    (:func:`runs_to_do`), each round with its own progress line and time left.
    ``on_change(artefact)`` is called after each finished run, so that a cut sweep keeps
    what it measured (the command writes it). The rows default to the experiment's
    corpus's (:func:`~catlib.experiment.scale_plan.swept_rows`), each trained and scored on it."""
    from ..data import load_corpus

    if DEFAULT_RATE not in grid:
        raise ValueError(f"the grid {list(grid)} must hold the recipe's rate {DEFAULT_RATE:g}")
    start = time.perf_counter()
    rows = list(rows or swept_rows(experiment.corpus))
    seeds = tuple(seeds)
    measured: dict = {label: {} for label in rows}
    steps = {label: sweep_spec(label, experiment, grid[0], root)["steps"] for label in rows}
    _, tc, _ = scale_configs(rows[0], experiment, seeds[0], [BUDGET])
    head = {"corpus": experiment.corpus, "grid": list(grid), "default_rate": DEFAULT_RATE, "rule": RULE, "factor": factor,
            "max_extensions": cap, "seeds": list(seeds), "budget": BUDGET,
            "recipe": {"schedule": tc.schedule, "warmup": tc.warmup,
                       "decay_share": tc.decay_share, "penalty_horizon": tc.penalty_horizon},
            "dev": dev_definition(load_corpus(split=tc.split), tc.seq)}

    def artefact() -> dict:
        return {**head, "rows": sweep_table(measured, steps, grid, factor, cap, seeds),
                "wall_seconds": time.perf_counter() - start}

    while True:
        specs, owners, names = {}, {}, {}
        for label in rows:
            for rate, seed in runs_to_do(measured[label], grid, factor, cap, seeds):
                key = (label, rate, seed)
                specs[key] = sweep_spec(label, experiment, rate, root, seed)
                owners[key] = [(f"{label} at lr {rate_key(rate)}", seed)]
                names[f"{owners[key][0][0]} (seed {seed}):"] = key
        if not specs:
            return artefact()
        if echo:
            echo(f"sweep: {len(specs)} runs to train or reuse ({len({k[0] for k in specs})} "
                 f"rows, seeds {', '.join(map(str, seeds))})")

        def say(line: str) -> None:
            """The pool's line; a finished run's ("<owner> (seed 1): trained run ...")
            also takes its stored score and calls ``on_change``."""
            if echo:
                echo(line)
            key = next((k for prefix, k in names.items() if line.startswith(prefix)), None)
            found = _sweep_job(specs[key], stored=True) if key and on_change else None
            if found is not None:
                measured[key[0]].setdefault(key[1], {})[key[2]] = found
                on_change(artefact())
        done = run_jobs(specs, owners, _sweep_job, worker_devices(device, jobs), say,
                        progress_every)
        for (label, rate, seed), result in done.items():
            measured[label].setdefault(rate, {})[seed] = result


def _row_states(sweep: dict, rows, where: str, length: int | None,
                corpus: str | None = None) -> dict:
    """``{row: its entry}`` of a sweep's artefact for each of ``rows``; :class:`SweepError`
    naming ``make sweep`` where the artefact was chosen by another rule, on another corpus
    than ``corpus`` (where given, :func:`check_corpus_of`), on another dev slice
    (:func:`check_dev`), lacks a row or has not finished it."""
    command = sweep_command(corpus or swept_corpus(sweep))
    fix = f"run `{command}` (it resumes), or train at the recipe's single rate with --recipe_rate"
    if sweep.get("rule") != RULE:
        raise SweepError(f"{where} was not made by the sweep's rule ({RULE}); {fix}")
    if corpus is not None:
        check_corpus_of(sweep, corpus, where)
    check_dev(sweep, where, length)
    found = sweep.get("rows", {})
    for label in rows:
        row = found.get(label) or {}
        if row.get("rate") is None and not row.get("all_diverged"):
            state = "is not finished for" if label in found else "has no"
            raise SweepError(f"{where} {state} row {label!r}: {fix}")
    return {label: found[label] for label in rows}


def chosen_rates(sweep: dict, rows, where: str = "the sweep's artefact",
                 length: int | None = None, corpus: str | None = None) -> dict:
    """``{row: rate}`` for each of ``rows`` that has a rate in a sweep's artefact
    (:func:`run_sweep`): a row whose every rate diverged is left out (:func:`unrated_rows`
    names it); :class:`SweepError` naming ``make sweep`` where a row is missing or not
    finished, the artefact was made by another rule, or on another dev slice than today's
    (:func:`check_dev`; ``length``: the study's training length, where its windows are to
    be checked too), or, where ``corpus`` is given, on another corpus (:func:`check_corpus_of`)."""
    return {label: float(row["rate"])
            for label, row in _row_states(sweep, rows, where, length, corpus).items()
            if row["rate"] is not None}


def unrated_rows(sweep: dict) -> list[str]:
    """The rows of a sweep's artefact (:func:`run_sweep`) that have no rate because every
    rate tried diverged (on a seed), in the artefact's order: the study cannot train them
    at any rate the sweep measured."""
    return [label for label, row in (sweep.get("rows") or {}).items()
            if row.get("all_diverged")]
