"""``python -m catlib.book.scale`` (``make scale``): the scale study
(:mod:`catlib.experiment.scale`) at a profile's sizes on one device, written to
``results/scale_<device>.json``. Never run by ``make book``: its chapter reads the artefact."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..runs import atomic_write_text
from ..common.devices import resolve_device
from ..common.provenance import code_fingerprint, environment
from ..experiment.scale import plan_for, run_study
from .profiles import experiment as profile_experiment


def main(argv=None) -> int:
    """``python -m catlib.book.scale``: train the study and write its artefact."""

    p = argparse.ArgumentParser(prog="python -m catlib.book.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--profile", default="cpu", help="the sizes and batches (default: cpu, chapter 10's)")
    p.add_argument("--out", default="results", help="folder of scale_<device>.json")
    p.add_argument("--root", default="runs", help="folder of the run directories")
    p.add_argument("--budgets", type=int, nargs="+", help="override the device's budgets (all seeds)")
    p.add_argument("--seeds", type=int, nargs="+", help="with --budgets: the seeds (default 0 1 2)")
    p.add_argument("--jobs", type=int, help="runs trained at once (default: the pool's)")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    plan = ({b: tuple(args.seeds or (0, 1, 2)) for b in args.budgets} if args.budgets
            else plan_for(device))
    experiment = profile_experiment(args.profile)
    kind = device.type
    root = Path(args.root) / f"scale-{args.profile}-{kind}"
    print(f"scale study: profile {args.profile}, device {device}, budgets "
          f"{', '.join(f'{b}x (seeds {list(s)})' for b, s in sorted(plan.items()))}; runs in {root}",
          flush=True)
    table = run_study(experiment, root=root, device=device, plan=plan, jobs=args.jobs,
                      echo=lambda line: print(line, flush=True))
    table["provenance"] = {**environment(("torch", "numpy"), device), "profile": args.profile,
                           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                           "written_by": "python -m catlib.book.scale " + " ".join(argv or sys.argv[1:]),
                           "code": code_fingerprint()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"scale_{kind}.json" if args.profile == "cpu" else f"scale_{args.profile}_{kind}.json"
    atomic_write_text(out / name, json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out / name} in {table['wall_seconds'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
