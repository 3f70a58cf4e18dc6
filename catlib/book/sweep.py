"""``python -m catlib.book.sweep`` (``make sweep``): each row of the scale study at its own
learning rate (:mod:`catlib.experiment.sweep`: 1x, seed 0, rates 2e-3, 4e-3 and 8e-3,
extended by 2 beyond a winning edge, scored on the dev slice; a row keeps 4e-3 unless
another rate is lower by a called margin), at a profile's sizes on one device. The sweep in
progress is written beside its artefact after each finished run
(``results/lr_sweep_<device>.partial.json``); ``results/lr_sweep_<device>.json`` is
replaced, atomically, only by a complete sweep, so that a rerun keeps the last complete one
until it has finished. Resumable: run it again and it reuses what it trained. ``make
scale`` reads each row's rate from it."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..common.formatting import md_table
from ..common.provenance import code_fingerprint, commit_of, environment
from ..experiment.sweep import DEFAULT_RATE, run_sweep, sweep_complete
from ..runs import atomic_write_text
from .args import ArgsError, artefact_name, check_places, check_profile, partial_path, sweep_runs
from .profiles import experiment as profile_experiment


def check_args(args) -> tuple:
    """``(device, experiment, output path)`` of the parsed ``args``, every one checked
    before anything trains or is written; a bad one raises :class:`ArgsError`."""
    check_profile(args)
    device = check_places(args, "lr_sweep")
    path = Path(args.out) / artefact_name("lr_sweep", args.profile, device.type)
    return device, profile_experiment(args.profile), path





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
    """The sweep as a Markdown table: dev CE per rate of each row, its chosen rate, and the
    reason: the other rate of lowest dev CE, its difference from the recipe's rate and the
    margin it had to beat."""
    rates = sorted({float(r) for row in table["rows"].values() for r in row.get("dev_ce", {})})
    body = []
    for label, row in table["rows"].items():
        ce = {float(r): v for r, v in row.get("dev_ce", {}).items()}
        body.append([label, *(("—" if r not in ce else "diverged" if ce[r] is None
                               else f"{ce[r]:.4f}") for r in rates),
                     _rate_cell(row), _against_default(ce, row.get("dev_margin", {}))])
    return md_table(["row", *(f"{r:g}" for r in rates), "rate",
                     f"lowest other − {DEFAULT_RATE:g} (margin)"],
                    body, "l" + "r" * (len(rates) + 2))


def _rate_cell(row: dict) -> str:
    """A row's chosen rate as the table says it: the rate (with "(edge)" where the grid's
    extension was capped), "none: every rate diverged", or "—" while not finished."""
    if row.get("all_diverged"):
        return "none: every rate diverged"
    if row["rate"] is None:
        return "—"
    return f"{row['rate']:g}" + (" (edge)" if row.get("edge") else "")


def _against_default(ce: dict, margins: dict) -> str:
    """The other rate of lowest dev CE against :data:`DEFAULT_RATE`: "8e-3: -0.0011
    (0.0040)", the difference and its called margin; "—" where either is missing."""
    others = {r: v for r, v in ce.items() if r != DEFAULT_RATE and v is not None}
    if not others or ce.get(DEFAULT_RATE) is None:
        return "—"
    r = min(others, key=others.get)
    m = margins.get(f"{r:g}")
    return f"{r:g}: {others[r] - ce[DEFAULT_RATE]:+.4f}" + ("" if m is None else f" ({m:.4f})")


def main(argv=None) -> int:
    """``python -m catlib.book.sweep``: train the sweep and write its artefact; 2 (one
    line, nothing trained or written) on a bad argument."""
    p = argparse.ArgumentParser(prog="python -m catlib.book.sweep",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--profile", default="cpu", help="the sizes and batches (default: cpu, chapter 10's)")
    p.add_argument("--out", default="results", help="folder of lr_sweep_<device>.json")
    p.add_argument("--root", default="runs", help="folder of the run directories")
    p.add_argument("--jobs", type=int, help="runs trained at once (default: the pool's)")
    args = p.parse_args(argv)
    try:
        device, experiment, path = check_args(args)
    except ArgsError as e:
        print(f"[sweep] error: {e}", file=sys.stderr)
        return 2
    root = sweep_runs(args.root, args.profile, device.type)
    print(f"learning-rate sweep: profile {args.profile}, device {device}; runs in {root}; "
          f"writes {partial_path(path)} after each finished run, {path} once complete",
          flush=True)
    write = writer(path, {**environment(("torch", "numpy"), device), "profile": args.profile,
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
