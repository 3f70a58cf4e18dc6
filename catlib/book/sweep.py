"""``python -m catlib.book.sweep`` (``make sweep``): each row of the scale study at its own
learning rate (:mod:`catlib.experiment.sweep`: 1x, seeds 0 and 1, rates 2e-3, 4e-3 and 8e-3,
extended by 2 beyond an edge that wins, scored on the dev slice; a row keeps 4e-3 unless
another rate is lower by a called margin on both seeds), at a profile's sizes on one
device, on one corpus (``--corpus``: ``tiny``, the default, or ``code``, the nine rows of
issue 62 on the SymPy source's dev files; ``make sweep CORPUS=code``). The sweep in
progress is written beside its artefact after each finished run
(``results/lr_sweep_<device>.partial.json``; on code ``lr_sweep_code_<device>...``);
``results/lr_sweep_<device>.json`` is replaced, atomically, only by a complete sweep, so
that a rerun keeps the last complete one until it has finished. Resumable: run it again and
it reuses what it trained. ``make scale`` reads each row's rate from it, and the runs
themselves as its 1x branches."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from ..common.formatting import md_table
from ..common.provenance import code_fingerprint, commit_of, environment
from ..data import DataError, causal_split, check_corpus, load_corpus
from ..experiment.sweep import DEFAULT_RATE, run_sweep, sweep_complete
from ..runs import atomic_write_text
from .args import ArgsError, artefact_name, check_places, check_profile, partial_path, sweep_runs
from .profiles import experiment as profile_experiment


def check_args(args) -> tuple:
    """``(device, experiment, output path)`` of the parsed ``args``, every one checked
    before anything trains or is written; a bad one raises :class:`ArgsError`. The
    experiment is the profile's on ``args.corpus``, whose text is read (and verified) here,
    so that a corpus that cannot be read (another SymPy, a missing tiny.txt) stops in one
    line too."""
    check_profile(args)
    try:
        corpus = check_corpus(args.corpus)
    except DataError as e:
        raise ArgsError(str(e)) from None
    device = check_places(args, "lr_sweep")
    try:
        load_corpus(split=causal_split(corpus))
    except DataError as e:
        raise ArgsError(str(e)) from None
    path = Path(args.out) / artefact_name("lr_sweep", args.profile, device.type, corpus)
    return device, dataclasses.replace(profile_experiment(args.profile), corpus=corpus), path


def writer(path: Path, provenance: dict):
    """``write(artefact)``: the artefact with its ``provenance`` (dated now) and whether
    every row is done (``complete``, :func:`~catlib.experiment.sweep.sweep_complete`), and
    its table (:func:`summary`, labelled with the commit and date) beside it as ``.md``,
    which the reproducibility page includes. A complete sweep replaces ``path``
    atomically (its ``.md`` first) and removes the sweep in progress; an incomplete one is
    written to :func:`partial_path` only, so that a complete artefact at ``path`` stays
    until a new one is complete."""
    def write(table: dict) -> None:
        table = {**table, "complete": sweep_complete(table),
                 "provenance": {**provenance, "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}}
        target = path if table["complete"] else partial_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        prov = table["provenance"]
        atomic_write_text(target.with_suffix(".md"),
                          f"_Written by `{prov.get('written_by', 'python -m catlib.book.sweep')}`, "
                          f"commit {commit_of(prov)}, {prov['date']}"
                          f"{'' if table['complete'] else '; not finished'}._\n\n"
                          + summary(table) + "\n")
        atomic_write_text(target, json.dumps(table, indent=1, sort_keys=True) + "\n")
        if table["complete"]:
            for stale in (partial_path(path), partial_path(path).with_suffix(".md")):
                stale.unlink(missing_ok=True)
    return write


def summary(table: dict) -> str:
    """The sweep as Markdown: a line saying how to read it, then a table of each row's dev
    CE per rate on each seed ("1.7655 / 1.7601": seed 0 / seed 1), its chosen rate, and the
    margin: the chosen rate's lead over the recipe's on each seed and the called margin it
    had to beat there, or, where the row kept the recipe's rate, the lead and margin of the
    other rate of lowest mean dev CE."""
    seeds = [str(s) for s in table.get("seeds") or sorted(
        {s for row in table["rows"].values() for by in row.get("dev_ce", {}).values() for s in by})]
    rates = sorted({float(r) for row in table["rows"].values() for r in row.get("dev_ce", {})})
    body = []
    for label, row in table["rows"].items():
        ce = {float(r): by for r, by in row.get("dev_ce", {}).items()}
        body.append([label, *(_ce_cell(ce.get(r), seeds) for r in rates), _rate_cell(row),
                     _margin_cell(row, seeds)])
    legend = (f"Dev CE per rate, seed {' / seed '.join(seeds)}. A row keeps {DEFAULT_RATE:g} "
              "unless another rate leads it by more than the called margin on every seed; "
              f"the last column gives the chosen rate's lead over {DEFAULT_RATE:g} on each "
              "seed and, in brackets, the called margin it had to beat there (where the row "
              f"kept {DEFAULT_RATE:g}: those of the other rate of lowest mean dev CE).")
    return legend + "\n\n" + md_table(
        ["row", *(f"{r:g}" for r in rates), "rate",
         f"lead over {DEFAULT_RATE:g} (margin), seed {'; seed '.join(seeds)}"],
        body, "l" + "r" * (len(rates) + 2))


def _ce_cell(by_seed: dict | None, seeds: list[str]) -> str:
    """One rate's dev CEs, "1.7655 / 1.7601" in the order of ``seeds``: "—" for a run not
    measured (a rate not tried: "—" alone), "diverged" for one that diverged."""
    if not by_seed:
        return "—"
    return " / ".join("—" if s not in by_seed else "diverged" if by_seed[s] is None
                      else f"{by_seed[s]:.4f}" for s in seeds)


def _rate_cell(row: dict) -> str:
    """A row's chosen rate as the table says it: the rate (with "(edge)" where the grid's
    extension was capped), "none: every rate diverged", or "—" while not finished."""
    if row.get("all_diverged"):
        return "none: every rate diverged (on a seed)"
    if row["rate"] is None:
        return "—"
    return f"{row['rate']:g}" + (" (edge)" if row.get("edge") else "")


def _margin_cell(row: dict, seeds: list[str]) -> str:
    """The rate the row's margin is read on (:func:`summary`) against :data:`DEFAULT_RATE`,
    "0.008: +0.0011 (0.0040); -0.0003 (0.0042)": its lead on each seed (positive: lower dev
    CE than the recipe's) and the margin it had to beat; "—" where there is none (the
    recipe's rate diverged, or no other rate has a mean)."""
    shown = row.get("rate")
    if shown is None or shown == DEFAULT_RATE:
        means = {float(r): m for r, m in (row.get("mean_dev_ce") or {}).items()
                 if m is not None and float(r) != DEFAULT_RATE}
        shown = min(means, key=means.get) if means else None
    lead = (row.get("lead") or {}).get(f"{shown:g}") if shown is not None else None
    if not lead or any(lead.get(s) is None for s in seeds):
        return "—"
    margins = (row.get("dev_margin") or {}).get(f"{shown:g}") or {}
    return f"{shown:g}: " + "; ".join(
        f"{lead[s]:+.4f}" + ("" if margins.get(s) is None else f" ({margins[s]:.4f})")
        for s in seeds)


def main(argv=None) -> int:
    """``python -m catlib.book.sweep``: train the sweep and write its artefact; 2 (one
    line, nothing trained or written) on a bad argument."""
    p = argparse.ArgumentParser(prog="python -m catlib.book.sweep",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--profile", default="cpu", help="the sizes and batches (default: cpu, chapter 10's)")
    p.add_argument("--corpus", default="tiny",
                   help="the corpus swept on: tiny (Tiny Shakespeare, the default) or code "
                        "(the pinned SymPy's source; writes lr_sweep_code_<device>.json)")
    p.add_argument("--out", default="results", help="folder of lr_sweep_<device>.json")
    p.add_argument("--root", default="runs", help="folder of the run directories")
    p.add_argument("--jobs", type=int, help="runs trained at once (default: the pool's)")
    args = p.parse_args(argv)
    try:
        device, experiment, path = check_args(args)
    except ArgsError as e:
        print(f"[sweep] error: {e}", file=sys.stderr)
        return 2
    root = sweep_runs(args.root, args.profile, device.type, experiment.corpus)
    print(f"learning-rate sweep: corpus {experiment.corpus}, profile {args.profile}, "
          f"device {device}; runs in {root}; "
          f"writes {partial_path(path)} after each finished run, {path} once complete",
          flush=True)
    write = writer(path, {**environment(("torch", "numpy"), device), "profile": args.profile,
                          "corpus": experiment.corpus,
                          "written_by": "python -m catlib.book.sweep " + " ".join(argv or sys.argv[1:]),
                          "code": code_fingerprint()})
    table = run_sweep(experiment, root=root, device=device, jobs=args.jobs, on_change=write,
                      echo=lambda line: print(line, flush=True))
    write(table)
    print(summary(table), flush=True)
    print(f"wrote {path} in {table['wall_seconds'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
