"""``python -m catlib.book.scale`` (``make scale``): the scale study
(:mod:`catlib.experiment.scale`) at a profile's sizes on one device, written to
``results/scale_<device>.json``, every row at the rate the learning-rate sweep chose for it
(``results/lr_sweep_<device>.json``, ``make sweep``; ``--recipe_rate``: the recipe's single
rate). Never run by ``make book``: its chapter reads the artefact."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ..runs import atomic_write_text
from ..common.devices import check_jobs, resolve_device
from ..common.provenance import code_fingerprint, commit_of, environment
from ..experiment.scale import SCALE_ROWS, plan_for, run_study
from ..experiment.sweep import SweepError, chosen_rates
from .profiles import experiment as profile_experiment


class ScaleArgsError(ValueError):
    """A bad argument of ``python -m catlib.book.scale``: one line that names the fix."""


def artefact_name(stem: str, profile: str, kind: str) -> str:
    """``<stem>_<device>.json`` at the cpu profile (the book's), else
    ``<stem>_<profile>_<device>.json``."""
    return f"{stem}_{kind}.json" if profile == "cpu" else f"{stem}_{profile}_{kind}.json"


def check_profile(args) -> None:
    """:class:`ScaleArgsError` unless ``args.profile`` names a profile."""
    from . import profiles

    if args.profile not in profiles.PROFILES:
        raise ScaleArgsError(f"--profile {args.profile!r} is not a profile; use one of "
                             f"{', '.join(profiles.PROFILES)}")


def check_places(args, stem: str):
    """The device of ``args`` (``--jobs``, ``--device``) and the folders ``--out`` (to hold
    ``<stem>_<device>.json``) and ``--root`` checked; :class:`ScaleArgsError` if bad."""
    try:
        check_jobs(args.jobs)
        device = resolve_device(args.device)
    except ValueError as e:   # a DeviceError is one
        raise ScaleArgsError(str(e)) from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ScaleArgsError(f"--out {out} is a file; give the folder that is to hold "
                             f"{stem}_<device>.json")
    check_writable("--out", out)
    check_writable("--root", Path(args.root))
    return device


def check_args(args) -> tuple:
    """``(device, plan, experiment, output path, rates, rate source)`` of the parsed
    ``args``, every one checked before anything trains or is written; a bad one raises
    :class:`ScaleArgsError`. ``rates``: each row's rate from the sweep's artefact
    (:func:`sweep_rates`), None with ``--recipe_rate``."""
    check_profile(args)
    if args.budgets is not None and any(b < 1 for b in args.budgets):
        raise ScaleArgsError(f"--budgets {' '.join(map(str, args.budgets))}: every budget is a "
                             "multiple of the 1x FLOPs and must be at least 1")
    if args.budgets is not None and 1 not in args.budgets:
        raise ScaleArgsError(f"--budgets {' '.join(map(str, args.budgets))}: chapter 11 reads "
                             "every budget against the 1x one; include 1 (e.g. --budgets 1 "
                             f"{' '.join(map(str, args.budgets))})")
    if args.seeds is not None and args.budgets is None:
        raise ScaleArgsError("--seeds applies to the budgets of --budgets; give both "
                             "(e.g. --budgets 1 2 --seeds 0 1)")
    if args.seeds is not None and any(s < 0 for s in args.seeds):
        raise ScaleArgsError(f"--seeds {' '.join(map(str, args.seeds))}: seeds are >= 0")
    device = check_places(args, "scale")
    plan = ({b: tuple(sorted(set(args.seeds or (0, 1, 2)))) for b in sorted(set(args.budgets))}
            if args.budgets else plan_for(device))
    out = Path(args.out)
    rates, source = None, {"from": "recipe"}
    if not args.recipe_rate:
        sweep = Path(args.sweep or out / artefact_name("lr_sweep", args.profile, device.type))
        rates, source = sweep_rates(sweep, args.profile, list(SCALE_ROWS))
    return (device, plan, profile_experiment(args.profile),
            out / artefact_name("scale", args.profile, device.type), rates, source)


def sweep_rates(path: Path, profile: str, rows) -> tuple[dict, dict]:
    """``({row: rate}, source)`` from the sweep's artefact at ``path`` for each of ``rows``
    (the study's), ``source`` recording where they come from (the artefact, its commit, grid and dev
    slice); :class:`ScaleArgsError` naming ``make sweep`` where it cannot give them."""
    fix = "run `make sweep` first, or pass --recipe_rate for the recipe's single rate"
    if not path.is_file():
        raise ScaleArgsError(f"--sweep {path} is missing (each row's learning rate); {fix}")
    try:
        sweep = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ScaleArgsError(f"--sweep {path} cannot be read ({e}); {fix}") from None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("provenance"), dict):
        raise ScaleArgsError(f"--sweep {path} is not a sweep's artefact; {fix}")
    made_for = sweep["provenance"].get("profile")
    if made_for != profile:
        raise ScaleArgsError(f"--sweep {path} was made for the profile {made_for!r}, not "
                             f"{profile!r}; {fix}")
    try:
        rates = chosen_rates(sweep, rows, f"--sweep {path}")
    except SweepError as e:
        raise ScaleArgsError(str(e)) from None
    source = {"from": "sweep", "artefact": str(path), "dev": sweep.get("dev"),
              "grid": sweep.get("grid"), "commit": (sweep["provenance"].get("git") or {}).get("commit")}
    return rates, source


def earlier_invocations(path: Path, profile: str) -> list[dict]:
    """What the artefact at ``path`` says of the invocations that wrote it, for the next one
    to carry when it reuses their runs (a study resumed across sessions keeps the time it
    cost): ``[{"wall_seconds", "trained", "date", "commit"}]``, its own ``earlier`` first;
    [] where there is none, it cannot be read, or it was made for another profile."""
    try:
        old = json.loads(path.read_text())
        if old["provenance"]["profile"] != profile:
            return []
        this = {"wall_seconds": float(old["wall_seconds"]), "trained": list(old.get("trained", old["rows"])),
                "date": old["provenance"].get("date"), "commit": commit_of(old["provenance"])}
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return list(old.get("earlier", [])) + [this]


def check_writable(flag: str, folder: Path) -> None:
    """Raise :class:`ScaleArgsError` unless ``folder`` can be made (if missing) and written
    in: a temporary folder is made where the first missing part of its path would be, then
    removed, so that nothing is left behind."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ScaleArgsError(f"{flag} {folder}: {existing} is a file; give a folder you can "
                             "write to")
    try:
        Path(tempfile.mkdtemp(prefix=".scale-check-", dir=existing)).rmdir()
    except OSError as e:
        raise ScaleArgsError(f"{flag} {folder}: cannot write in {existing} ({e.strerror or e}); "
                             "give a folder you can write to") from None


def main(argv=None) -> int:
    """``python -m catlib.book.scale``: train the study and write its artefact; 2 (one
    line, nothing trained or written) on a bad argument."""

    p = argparse.ArgumentParser(prog="python -m catlib.book.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--profile", default="cpu", help="the sizes and batches (default: cpu, chapter 10's)")
    p.add_argument("--out", default="results", help="folder of scale_<device>.json")
    p.add_argument("--root", default="runs", help="folder of the run directories")
    p.add_argument("--budgets", type=int, nargs="+", help="override the device's budgets (all seeds)")
    p.add_argument("--seeds", type=int, nargs="+", help="with --budgets: the seeds (default 0 1 2)")
    p.add_argument("--jobs", type=int, help="runs trained at once (default: the pool's)")
    p.add_argument("--sweep", help="the learning-rate sweep's artefact (default: "
                                   "<out>/lr_sweep_<device>.json, written by make sweep)")
    p.add_argument("--recipe_rate", action="store_true",
                   help="every row at the recipe's single rate, not the sweep's (tests)")
    args = p.parse_args(argv)
    try:
        device, plan, experiment, path, rates, source = check_args(args)
    except ScaleArgsError as e:
        print(f"[scale] error: {e}", file=sys.stderr)
        return 2
    root = Path(args.root) / f"scale-{args.profile}-{device.type}"
    print(f"scale study: profile {args.profile}, device {device}, budgets "
          f"{', '.join(f'{b}x (seeds {list(s)})' for b, s in sorted(plan.items()))}; runs in {root}; "
          f"{'rates from ' + source['artefact'] if rates else 'the recipe rate'}", flush=True)
    before = earlier_invocations(path, args.profile)
    table = run_study(experiment, root=root, device=device, plan=plan, jobs=args.jobs,
                      echo=lambda line: print(line, flush=True), rates=rates, rate_source=source)
    table["earlier"] = before if table["reused_runs"] else []
    table["provenance"] = {**environment(("torch", "numpy"), device), "profile": args.profile,
                           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                           "written_by": "python -m catlib.book.scale " + " ".join(argv or sys.argv[1:]),
                           "code": code_fingerprint()}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path} in {table['wall_seconds'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
