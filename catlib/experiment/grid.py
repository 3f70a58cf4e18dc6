"""The book's experiment: the rows (:mod:`catlib.experiment.rows`) trained in the pool and
scored: CE per length, per-position curves, the context gain beyond the training length,
the published protocol, the refinement test, the copy test and chapter 10's ladder points,
each stored with its run.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import numpy as np
import torch

from ..nn.config import CATConfig
from ..data import Corpus, load_corpus
from ..measure.config import EvalConfig
from ..measure.evaluate import context_table, n_windows, text_span, window_se
from .config import ExperimentConfig
from .copy_runs import run_copy_gain  # noqa: F401 (chapter 9's copy test, run in the pool)
from .gain_runs import run_context_gain
from .ladder import frontier_scoring, ladder_ce, point_steps
from .scale_records import span_corpus
from ..measure.extrapolation import position_ce
from .pool import default_jobs, run_jobs, worker_devices  # noqa: F401 (default_jobs: its earlier home)
from .progress import reporter
from ..common.provenance import code_fingerprint
from ..common.verdicts import paired_window_error
from ..measure.refinement import FINER, finer_solvers, refinement
from ..runs import (NotStored, Run, atomic_write_text, check_split, stored_only, stored_with_run,
                    train_run, weights_digest)
from ..training.config import TrainConfig
from .rows import (  # noqa: F401 (the rows' names, importable from here as before)
    AS_LAYERS, AS_STEPS,
    BASELINES, BEYOND, CAT_LADDER, CHAPTER_ROWS, COMPUTE_MATCHED, CONTROLS, DECAY_ANCHORED,
    DIAGNOSTIC, DISTANCE_KERNELS, EULER_CAT, EULER_CONTROL, EXTRA, EXTRA_EQUAL_COMPUTE,
    FAR_COPY, FAR_ODE,
    FRONTIER_CATS, FRONTIER_ONE_SEED, FRONTIER_ROWS, HEADLINE, LADDER, MATCHED, NO_COPY_TEST,
    ODE_CONSISTENT, RANDOM_PASSAGES_SEED, ROPE_LADDER, ROWS, Row, SCHEDULE_CHECK,
    SEEDS_WITH_EXTRA, STUDY, STUDY_DIAGNOSTIC, _BOOK_ROWS, chapter_seeds, configs,
    row_configs, budget_configs)


# The published split's rows keep the prototype's protocol, the first windows of their split
# at each length (span_of), and read at most this many per length. Every window there would
# add nothing the book reads (those rows are not language-model scores: they read the
# characters they predict) and cost much: 820 windows at 1024 on the published split cost the
# published baseline alone 34 s of the 87 s of the published run's scoring at the cpu sizes.
# The causal rows read every window of the span (the profile's eval_windows).
PUBLISHED_WINDOWS = 128


def split_windows(split: str, windows: int) -> int:
    """The cap on windows per length of a row on ``split``: ``windows``, at most
    :data:`PUBLISHED_WINDOWS` on the published split (its first windows, the published
    protocol)."""
    return min(windows, PUBLISHED_WINDOWS) if split == "published" else windows


def row_windows(label: str, windows: int) -> int:
    """:func:`split_windows` of the row ``label``'s split."""
    return split_windows(ROWS[label].split, windows)


def span_of(label: str, span_length: int | None) -> int | None:
    """The text a row's lengths read: the book's common span tiled by ``span_length``'s
    windows (:mod:`catlib.measure.evaluate`), except on the published split, whose rows keep
    the prototype's protocol (the first windows at each length)."""
    return None if ROWS[label].split == "published" else span_length


def window_cap(length: int, longest: int, eval_windows: int, curve_windows: int | None) -> int:
    """The cap on evaluation windows at ``length``: ``curve_windows`` at the ``longest``
    length (scored per position, :func:`position_curve`), else ``eval_windows``."""
    return (curve_windows or eval_windows) if length == longest else eval_windows


def train_grid(rows: Iterable[str], experiment: ExperimentConfig, *, root, device,
               seeds=None, curve: bool = True, dropout_on: list | None = None,
               jobs: int | None = None, devices=None,
               echo: Callable[[str], None] | None = print,
               progress_every: float = 30.0,
               copy: tuple | None = None,
               gain_windows: int | None = None) -> dict[tuple[str, int], Run]:
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
    With ``gain_windows``, each model of a causal run also gets its context gain at the
    longest length beyond its training length, on at most that many windows of the span
    (:func:`~catlib.experiment.gain_runs.run_context_gain`; none where the longest length
    is not beyond it).

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
            # the row's own seeds: its first keeps the frontier's points (row_configs)
            own = dataclasses.replace(experiment, seeds=tuple(seeds_of(label)))
            model, tc = row_configs(row, own, seed)
            key = (json.dumps(model.resolved().to_dict(), sort_keys=True), json.dumps(tc.identity()))
            if key not in specs:
                # The study's rows are scored on plain text at their training length only.
                specs[key] = dict(model=model.to_dict(), train=tc.to_dict(), root=str(root),
                                  lengths=[tc.seq] if row.study else list(lengths),
                                  eval_windows=row_windows(label, ev.eval_windows),
                                  span_length=span_of(label, ev.span_length),
                                  curve_length=None if row.study else curve_length,
                                  curve_windows=row_windows(
                                      label, ev.curve_windows or ev.eval_windows),
                                  dropout_on=list(dropout_on or []) if row.published_dropout else [],
                                  copy=[list(copy[0]), copy[1]]
                                  if copy and label not in NO_COPY_TEST else None,
                                  # the study's rows: also on random characters (chapter 9)
                                  copy_random=bool(copy) and row.study,
                                  gain=_gain_spec(row, tc, ev, gain_windows))
            if label in FRONTIER_ROWS and curve:
                first = seed == seeds_of(label)[0]
                steps = point_steps(tc) if first else [tc.train_steps]
                f_lengths, f_caps = frontier_scoring(ev.lengths, ev.eval_windows, ev.curve_windows)
                ladder = specs[key].setdefault("ladder", dict(steps=[], lengths=f_lengths,
                                                              caps=f_caps, model=row.model))
                ladder["steps"] = sorted({*ladder["steps"], *steps})
            owners.setdefault(key, []).append((label, seed))
    done = run_jobs(specs, owners, _train_job, slots, echo, progress_every)
    out = {}
    for key, spec in specs.items():   # finished now: open each run with its stored evaluation
        evaluation = EvalConfig(lengths=tuple(spec["lengths"]), eval_windows=spec["eval_windows"],
                                span_length=spec["span_length"])
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
               progress_every: float = 30.0,
               gain_windows: int | None = None) -> dict[tuple[str, int], Run]:
    """:func:`train_grid` from plain parameters (the name and signature of earlier
    versions): ``sizes`` and ``train`` as CATConfig and TrainConfig fields, evaluation at
    ``lengths``, and with ``curve_length`` the per-position curve at that length, with
    ``gain_windows`` the context gain there (:func:`train_grid`). Every length reads the
    text the longest one tiles (:func:`span_of`)."""
    curve = curve_length is not None
    scored = (*lengths, curve_length) if curve else tuple(lengths)
    evaluation = EvalConfig(lengths=scored, eval_windows=eval_windows, curve_windows=curve_windows,
                            span_length=max(scored))
    experiment = ExperimentConfig(CATConfig(**sizes), TrainConfig(**train), evaluation)
    return train_grid(rows, experiment, root=root, device=device, seeds=seeds, curve=curve,
                      dropout_on=dropout_on, jobs=jobs, devices=devices, echo=echo,
                      progress_every=progress_every, gain_windows=gain_windows)


def _gain_spec(row: Row, train: TrainConfig, ev: EvalConfig,
               gain_windows: int | None) -> dict | None:
    """What a run's job scores of the context gain (:func:`train_grid`): the longest length
    and the cap on its windows, for a causal row whose longest length is beyond its
    training length; else None."""
    longest = max(ev.lengths)
    if not gain_windows or not row.causal or longest <= train.seq:
        return None
    return dict(length=longest, windows=gain_windows)


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
        span = spec.get("span_length")
        run = train_run(CATConfig.from_dict(spec["model"]), tc, root=spec["root"],
                        device=spec["device"], evaluation=EvalConfig(span_length=span),
                        lengths=spec["lengths"], eval_windows=spec["eval_windows"],
                        progress=False, echo=None,
                        on_step=reporter(spec["index"], steps) if "index" in spec else None)
        needs_corpus = (spec["curve_length"] or spec["dropout_on"] or spec.get("copy")
                        or spec.get("gain"))
        corpus = load_corpus(split=tc.split) if needs_corpus else None
        if spec["curve_length"]:
            n = n_windows(len(corpus.val), spec["curve_length"], spec["curve_windows"], span)
            for model_key in tc.models:
                position_curve(run, model_key, corpus, spec["curve_length"], n, spec["device"],
                               span)
        if spec.get("gain"):          # read twice beyond the training length: full and sliding
            for model_key in tc.models:
                run_context_gain(run, model_key, corpus, spec["gain"]["length"],
                                 spec["gain"]["windows"], spec["device"], span)
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
            lad = spec["ladder"]
            held = span_corpus(corpus if corpus is not None else load_corpus(split=tc.split),
                               span, lad.get("span_tiles"))
            for step in lad["steps"]:
                ladder_ce(run, lad["model"], step, held, lad["lengths"], lad["caps"], spec["device"],
                          span_length=span)
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
                   device=None, span_length: int | None = None) -> np.ndarray:
    """Per-position CE ``[length]`` of one model of a run (see :func:`position_ce`; with
    ``span_length``, on the book's common span).

    Stored in the run directory beside its evaluation, valid for the weights and the
    code that computed it, so that the chapters that draw it and a rebuild reuse it.
    """
    return np.array(_stored_curve(run, model_key, corpus, length, n_windows, device,
                                  span_length)["positions"], dtype=float)


def curve_se(run: Run, model_key: str, corpus: Corpus, length: int, n_windows: int,
             device=None, span_length: int | None = None) -> float:
    """The standard error from window sampling of the mean of :func:`position_curve` (the
    CE at ``length``), from the same stored scoring (:func:`~catlib.measure.evaluate.window_se`)."""
    return window_se(_stored_curve(run, model_key, corpus, length, n_windows, device,
                                   span_length)["windows"])


def _stored_curve(run: Run, model_key: str, corpus: Corpus, length: int, n_windows: int,
                  device=None, span_length: int | None = None) -> dict:
    """``{"positions": [length], "windows": [n]}``: the per-position CE of one model of a run
    and each window's CE, computed once and stored with the run."""
    check_split(run, corpus)
    models, _ = run.load_weights(device or "cpu")
    model = models[model_key]
    if model is None:
        raise ValueError(f"{run.path.name} did not train {model_key!r}")
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("measure.extrapolation",)),
             "length": length, "windows": n_windows}
    if span_length is not None:
        ident["span_length"] = span_length

    def scored():
        positions, by_window = position_ce(model, corpus.val, length, n_windows, device=device,
                                           per_window=True, span_length=span_length)
        return {"positions": positions.tolist(), "windows": by_window.tolist()}
    return stored_with_run(run, f"positions-{model_key}-{length}x{n_windows}.json", ident, scored)


def dropout_on_rows(run: Run, corpus: Corpus, lengths, eval_windows: int,
                    device=None, curve_length: int | None = None,
                    curve_windows: int | None = None) -> list[dict]:
    """The published protocol's table of a run: :func:`~catlib.measure.evaluate.context_table` of
    both its models with dropout on (the published script never calls ``eval()``), the
    masks seeded by the run's seed. Stored in the run directory like :func:`position_curve`.

    At ``curve_length`` the windows are capped by ``curve_windows`` (the windows of the
    per-position curve, whose mean is the evaluation-mode CE there), elsewhere by
    ``eval_windows``; on the published split by at most :data:`PUBLISHED_WINDOWS` too
    (:func:`split_windows`), as its evaluation-mode CEs.
    """
    check_split(run, corpus)
    models, _ = run.load_weights(device or "cpu")
    seed = run.train_config.seed
    split = run.train_config.split
    eval_windows = split_windows(split, eval_windows)
    curve_windows = split_windows(split, curve_windows) if curve_windows else curve_windows
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


def run_refinement(run, corpus, length: int, eval_windows: int, finer=FINER, device=None,
                   span_length: int | None = None) -> dict:
    """:func:`~catlib.measure.refinement.refinement` of a run's CAT on ``corpus.val`` (with
    ``span_length``, on windows spread over the book's common span), stored in the run directory
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
    if span_length is not None:
        ident["span_length"] = span_length
    return stored_with_run(run, f"refinement-{length}x{eval_windows}.json", ident,
                            lambda: refinement(cat, corpus.val, length, eval_windows, finer,
                                               device=device, span_length=span_length))


def table_scores(runs: dict, labels: Iterable[str], seeds, corpus: dict, longest: int,
                 eval_windows: int, device=None,
                 curve_windows: int | None = None) -> tuple[dict, dict, dict]:
    """Everything a results table needs, per row: ``(ce, leak, curves)``.

    ``ce[label]`` is ``[seeds, lengths]``: the stored evaluation at the shorter lengths and,
    last, the mean of the per-position curve at ``longest`` (the same windows, so the same
    number as the published protocol); ``leak[label]`` is ``[seeds]``; ``curves[label]`` is
    ``[seeds, longest]``, on at most ``curve_windows`` windows (default ``eval_windows``).
    ``seeds``: a list or a function of the label; ``corpus``: ``{split: Corpus}``. Rows
    off the published split read the book's common span, tiled by ``longest``'s windows
    (:func:`span_of`).
    """
    seeds_of = _seeds_of(seeds)
    ce, leak, curves = {}, {}, {}
    for label in labels:
        row, split_corpus = ROWS[label], corpus[ROWS[label].split]
        span = span_of(label, longest)
        n = n_windows(len(split_corpus.val), longest,
                      row_windows(label, curve_windows or eval_windows), span)
        curves[label] = np.array([position_curve(runs[label, s], row.model, split_corpus, longest,
                                                 n, device, span) for s in seeds_of(label)])
        short, leak[label] = scores(runs, label, seeds_of(label))
        ce[label] = np.concatenate([short, curves[label].mean(1, keepdims=True)], axis=1)
    return ce, leak, curves


def table_errors(runs: dict, labels: Iterable[str], seeds, corpus: dict, longest: int | None,
                 eval_windows: int, device=None,
                 curve_windows: int | None = None) -> tuple[dict, dict]:
    """What window sampling leaves uncertain in :func:`table_scores`' CEs, as
    :func:`~catlib.common.verdicts.window_error` reads it: ``(reads, se)``, ``reads``
    ``{split: {"windows": {length: n}, "span": characters or None}}`` (the windows the rows
    of each split read, and the common span they are spread over, :func:`span_of`) and ``se``
    ``{length: [standard error of each row's CE per seed]}`` (NaN where a length was not
    scored). Read from the stored evaluation and the stored per-position scoring: nothing is
    computed twice. ``longest`` None: the stored evaluation's lengths only (rows scored at
    those alone); the span is then the one their evaluation recorded."""
    seeds_of = _seeds_of(seeds)
    reads, se = {}, {}
    for label in labels:
        row, split_corpus = ROWS[label], corpus[ROWS[label].split]
        n_val = len(split_corpus.val)
        for s in seeds_of(label):
            result = runs[label, s].result
            span_length = span_of(label, longest) if longest is not None else \
                result.get("settings", {}).get("span_length")
            read = reads.setdefault(row.split, {
                "windows": {}, "span": text_span(n_val, span_length) if span_length else None})
            for r in result["rows"]:
                if "windows" in r:
                    read["windows"][r["len"]] = r["windows"]
                se.setdefault(r["len"], []).append(
                    np.nan if r.get(f"{row.model}_se") is None else r[f"{row.model}_se"])
            if longest is not None:
                n = read["windows"][longest] = n_windows(
                    n_val, longest, row_windows(label, curve_windows or eval_windows), span_length)
                se.setdefault(longest, []).append(curve_se(
                    runs[label, s], row.model, split_corpus, longest, n, device, span_length))
    return reads, se


class WindowTerm(NamedTuple):
    """The window-sampling term of the book's rule for one paired difference, per length
    ``[lengths]``, under the names and in the order :func:`~catlib.common.verdicts.called`
    and :func:`~catlib.common.verdicts.verdict` take it (``called(diff, *term)``):
    ``window`` the window-sampling error of the mean paired difference, ``window_df`` its
    degrees of freedom (windows − 1), from which the rule takes Student's t (21 windows at
    5000: t(20) = 2.086, not the normal 1.96). NaN where a length has fewer than two
    windows."""
    window: np.ndarray
    window_df: np.ndarray


def table_paired_window_errors(runs: dict, first: str, second: str, seeds, corpus: dict,
                               longest: int, eval_windows: int, device=None,
                               curve_windows: int | None = None) -> WindowTerm:
    """The window term of the mean paired difference CE(``first``) − CE(``second``) at each
    length of :func:`table_scores` (``[lengths]``, the longest last), as
    :func:`~catlib.common.verdicts.interval` takes it (:class:`WindowTerm`): the error is
    :func:`~catlib.common.verdicts.paired_window_error` of the two rows' per-window CEs
    ``[seeds, windows]``, the degrees of freedom the windows read less one; both read from
    the stored per-window scores (nothing is computed twice); NaN where a length has one
    window. Both rows must be on one split; ``seeds``: a list or a function of the label."""
    if ROWS[first].split != ROWS[second].split:
        raise ValueError(f"{first!r} and {second!r} read different splits: their windows "
                         "are not paired")
    split_corpus = corpus[ROWS[first].split]
    span = span_of(first, longest)
    n = n_windows(len(split_corpus.val), longest, row_windows(first, curve_windows or eval_windows),
                  span)
    seeds = _seeds_of(seeds)(first)

    def per_window(label, s):                    # [lengths] lists of each window's CE
        run, model = runs[label, s], ROWS[label].model
        short = [r[f"{model}_window_ce"] for r in run.result["rows"] if "windows" in r]
        return [*short, _stored_curve(run, model, split_corpus, longest, n, device, span)["windows"]]
    ce = {label: [per_window(label, s) for s in seeds] for label in (first, second)}
    at = range(len(ce[first][0]))
    error = np.array([paired_window_error([c[i] for c in ce[first]], [c[i] for c in ce[second]])
                      for i in at])
    # Every seed and both rows read the same windows (else the error is NaN): count the first's.
    windows = np.array([len(ce[first][0][i]) for i in at], dtype=float)
    return WindowTerm(error, np.where(windows >= 2, windows - 1, np.nan))


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
