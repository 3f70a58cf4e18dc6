"""``python -m catlib.book.sweep`` (``make sweep``): each row of the scale study at its own
learning rate (:mod:`catlib.experiment.sweep`: 1x, seed 0, rates 2e-3, 4e-3 and 8e-3,
extended by 2 beyond a winning edge, scored on the dev slice), at a profile's sizes on one
device, written to ``results/lr_sweep_<device>.json`` after each finished run. Resumable:
run it again and it reuses what it trained. ``make scale`` reads each row's rate from it."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..common.formatting import md_table
from ..common.provenance import code_fingerprint, commit_of, environment
from ..experiment.sweep import run_sweep
from ..runs import atomic_write_text
from .profiles import experiment as profile_experiment
from .scale import ScaleArgsError, artefact_name, check_places, check_profile


def check_args(args) -> tuple:
    """``(device, experiment, output path)`` of the parsed ``args``, every one checked
    before anything trains or is written; a bad one raises :class:`ScaleArgsError`."""
    check_profile(args)
    device = check_places(args, "lr_sweep")
    path = Path(args.out) / artefact_name("lr_sweep", args.profile, device.type)
    return device, profile_experiment(args.profile), path


def writer(path: Path, provenance: dict):
    """``write(artefact)``: the artefact with its ``provenance`` (dated now) and whether
    every row has its rate (``complete``), written atomically to ``path``, and its table
    (:func:`summary`, labelled with the commit and date) beside it as ``.md``, which the
    reproducibility page includes."""
    def write(table: dict) -> None:
        table = {**table, "complete": all(r["rate"] is not None for r in table["rows"].values()),
                 "provenance": {**provenance, "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
        prov = table["provenance"]
        commit = commit_of(prov)
        atomic_write_text(path.with_suffix(".md"),
                          f"_Written by `{prov.get('written_by', 'python -m catlib.book.sweep')}`, "
                          f"commit {commit}, {prov['date']}"
                          f"{'' if table['complete'] else '; not finished'}._\n\n"
                          + summary(table) + "\n")
    return write


def summary(table: dict) -> str:
    """The sweep as a Markdown table: dev CE per rate of each row, and its chosen rate."""
    rates = sorted({float(r) for row in table["rows"].values() for r in row.get("dev_ce", {})})
    body = []
    for label, row in table["rows"].items():
        ce = {float(r): v for r, v in row.get("dev_ce", {}).items()}
        body.append([label, *(("—" if r not in ce else "diverged" if ce[r] is None
                               else f"{ce[r]:.4f}") for r in rates),
                     "—" if row["rate"] is None else f"{row['rate']:g}" + (" (edge)" if row.get("edge") else "")])
    return md_table(["row", *(f"{r:g}" for r in rates), "rate"], body, "l" + "r" * (len(rates) + 1))


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
    except ScaleArgsError as e:
        print(f"[sweep] error: {e}", file=sys.stderr)
        return 2
    root = Path(args.root) / f"lr-sweep-{args.profile}-{device.type}"
    print(f"learning-rate sweep: profile {args.profile}, device {device}; runs in {root}; "
          f"writes {path} after each finished run", flush=True)
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
