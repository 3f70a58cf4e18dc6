"""``python -m catlib.book.scale`` (``make scale``): the scale study
(:mod:`catlib.experiment.scale`) at a profile's sizes on one device, written to
``results/scale_<device>.json``, every row at the rate the learning-rate sweep chose for it
(``results/lr_sweep_<device>.json``, ``make sweep``; ``--recipe_rate``: the recipe's single
rate). Never run by ``make book``: its chapter reads the artefact.

The study in progress is written beside its artefact after each run it trains
(``scale_<device>.partial.json``); the artefact is replaced, atomically, only by a study
whose every run has finished, so that a rerun keeps the last complete one until it has
finished, and a killed study keeps what it trained. Both keep every finished run's
records (``per_seed``, :mod:`catlib.experiment.scale_records`), so that ``make scale`` in a
later session, on a machine where the run directories are gone and only the committed
artefact is left, reads the runs it records (the same run: its name holds the config hash;
the same study: :func:`same_study`) and trains only the others
(:func:`earlier_study`). The artefact says what the study cost
(:func:`invocations`): each run of ``make scale`` that trained a run the study holds, with
its minutes, rows and runs; a run of ``make scale`` that trained nothing adds nothing, one
killed counts until its last finished run, and an artefact of another study (another plan,
rows, profile, device or corpus) lends it nothing. The test options (``--budgets``,
``--seeds``, ``--recipe_rate``) write ``scale_<device>.test.json`` beside the book's
artefact, never over it."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from ..common.provenance import code_fingerprint, commit_of, environment
from ..data import load_corpus
from ..data import DataError, causal_split, check_corpus
from ..experiment.scale import run_study
from ..experiment.scale_plan import (extra_seeds_for, plan_for, study_identity, study_rows,
                                     swept_rows, with_oracle_rates)
from ..experiment.sweep import SweepError, chosen_rates, unrated_rows
from ..runs.files import atomic_write_text
from ..training.config import SEED_MAX
from .args import ArgsError, artefact_name, check_places, check_profile, partial_path, sweep_runs
from .profiles import experiment as profile_experiment


def check_args(args) -> tuple:
    """``(device, plan, experiment, output path, rates, rate source)`` of the parsed
    ``args``, every one checked before anything trains or is written; a bad one raises
    :class:`~catlib.book.args.ArgsError`. ``rates``: each row's rate from the sweep's
    artefact (:func:`sweep_rates`; a row whose every rate diverged has none, and the
    source names it), None with ``--recipe_rate``. The output path is
    ``<out>/scale_<device>.json``, or ``scale_<device>.test.json`` with a test option."""
    check_profile(args)
    try:       # the corpus is read now: another SymPy stops here, in one line
        load_corpus(split=causal_split(check_corpus(args.corpus)))
    except DataError as e:
        raise ArgsError(str(e)) from None
    if args.budgets is not None and any(b < 1 for b in args.budgets):
        raise ArgsError(f"--budgets {' '.join(map(str, args.budgets))}: every budget is a "
                        "multiple of the 1x FLOPs and must be at least 1")
    if args.budgets is not None and 1 not in args.budgets:
        raise ArgsError(f"--budgets {' '.join(map(str, args.budgets))}: chapter 11 reads "
                        "every budget against the 1x one; include 1 (e.g. --budgets 1 "
                        f"{' '.join(map(str, args.budgets))})")
    if args.seeds is not None and args.budgets is None:
        raise ArgsError("--seeds applies to the budgets of --budgets; give both "
                        "(e.g. --budgets 1 2 --seeds 0 1)")
    if args.seeds is not None and any(not 0 <= s <= SEED_MAX for s in args.seeds):
        raise ArgsError(f"--seeds {' '.join(map(str, args.seeds))}: a seed is an integer from 0 "
                        f"to {SEED_MAX} (numpy's seed range)")
    if args.recipe_rate and args.sweep is not None:
        raise ArgsError(f"--recipe_rate trains every row at the recipe's single rate and reads no "
                        f"sweep; drop --sweep {args.sweep} or --recipe_rate")
    device = check_places(args, "scale")
    plan = ({b: tuple(sorted(set(args.seeds or (0, 1, 2)))) for b in sorted(set(args.budgets))}
            if args.budgets else plan_for(device, args.corpus))
    out = Path(args.out)
    rates, source = None, {"from": "recipe"}
    if not args.recipe_rate:
        sweep = Path(args.sweep or out / artefact_name("lr_sweep", args.profile, device.type,
                                                       args.corpus))
        rates, source = sweep_rates(sweep, args.profile, swept_rows(args.corpus), args.corpus)
        rates = with_oracle_rates(rates)
    name = artefact_name("scale", args.profile, device.type, args.corpus)
    if args.budgets is not None or args.recipe_rate:      # a test: never the book's artefact
        name = name.removesuffix(".json") + ".test.json"
    experiment = dataclasses.replace(profile_experiment(args.profile), corpus=args.corpus)
    return device, plan, experiment, out / name, rates, source


def study_folder(profile: str, kind: str, corpus: str = "tiny") -> str:
    """The folder of the study's run directories under ``--root``: ``scale-<profile>-<device>``
    on Tiny Shakespeare, ``scale-<corpus>-<profile>-<device>`` on another corpus."""
    return f"scale-{profile}-{kind}" if corpus == "tiny" else f"scale-{corpus}-{profile}-{kind}"


def sweep_rates(path: Path, profile: str, rows, corpus: str = "tiny") -> tuple[dict, dict]:
    """``({row: rate}, source)`` from the sweep's artefact at ``path`` for each of ``rows``
    (the study's) that has a rate, ``source`` recording where they come from (the artefact,
    its commit, grid and dev slice) and naming the rows whose every rate diverged
    (``"unrated"``: the study does not train them); :class:`~catlib.book.args.ArgsError`
    naming ``make sweep`` where it cannot give them."""
    fix = "run `make sweep` first, or pass --recipe_rate for the recipe's single rate"
    if not path.is_file():
        raise ArgsError(f"--sweep {path} is missing (each row's learning rate); {fix}")
    try:
        sweep = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArgsError(f"--sweep {path} cannot be read ({e}); {fix}") from None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("provenance"), dict):
        raise ArgsError(f"--sweep {path} is not a sweep's artefact; {fix}")
    made_for = sweep["provenance"].get("profile")
    if made_for != profile:
        raise ArgsError(f"--sweep {path} was made for the profile {made_for!r}, not "
                        f"{profile!r}; {fix}")
    try:
        rates = chosen_rates(sweep, rows, f"--sweep {path}", corpus=corpus)
    except SweepError as e:
        raise ArgsError(str(e)) from None
    source = {"from": "sweep", "artefact": str(path), "dev": sweep.get("dev"),
              "grid": sweep.get("grid"), "commit": (sweep["provenance"].get("git") or {}).get("commit"),
              "unrated": [r for r in unrated_rows(sweep) if r in rows]}
    return rates, source



def same_study(old: dict, identity: dict) -> bool:
    """Whether the artefact ``old`` is of the study ``identity`` (``{"profile", "device",
    "plan", "rows", "corpus"}``): the same profile, device, plan and corpus, and rows that are
    all among this study's (a study extended by rows is the same study). An artefact written
    before it kept its identity is read from its provenance, plan and rows (its corpus
    unknown: its runs, found or not, decide); one without ``extra_seeds``, as a plan
    without rows of their own seeds."""
    prov = old.get("provenance") or {}
    was = old.get("identity") or {"profile": prov.get("profile"),
                                  "device": (prov.get("device") or {}).get("type"),
                                  "plan": old.get("plan"), "rows": list(old.get("rows") or {})}
    return (all(was.get(k) == identity.get(k) for k in ("profile", "device", "plan"))
            and (was.get("extra_seeds") or {}) == (identity.get("extra_seeds") or {})
            and set(was.get("rows") or ()) <= set(identity.get("rows") or ())
            and was.get("corpus") in (None, identity.get("corpus")))


def earlier_invocations(old: dict) -> list[dict]:
    """The runs of ``make scale`` the artefact ``old`` records as having trained something:
    its ``invocations``; in an artefact written before it kept them, its ``earlier`` and
    itself, less those that trained no row."""
    if "invocations" in old:
        return list(old["invocations"])
    said = [*old.get("earlier", []),
            {"wall_seconds": old.get("wall_seconds"), "trained": old.get("trained", list(old.get("rows", {}))),
             "date": (old.get("provenance") or {}).get("date"), "commit": commit_of(old.get("provenance") or {})}]
    return [inv for inv in said if inv.get("wall_seconds") is not None and inv.get("trained") != []]


def invocations(previous: list[dict], table: dict, this: dict) -> list[dict]:
    """What the study cost, as the artefact keeps it: ``[{"wall_seconds", "trained",
    "runs", "date", "commit", "finished"}]``, one per run of ``make scale`` that trained a
    run this study holds, oldest first. ``previous``: the study's earlier artefacts'
    (:func:`earlier_invocations`, read only where :func:`same_study`); each is kept where a
    run it trained is among those found finished here (``table["finished_runs"]``). One
    recorded before its runs were named is kept where any run was found finished, and is
    given those runs (they were all trained before this one). This one
    (``this``: its date and commit) is added where it trained a run: its minutes so far,
    rows and runs, and whether it has finished (a study killed later keeps its minutes up
    to its last finished run)."""
    finished = table.get("finished_runs", [])
    found = {r["run"] for r in finished if not r["trained"]}
    kept = [inv if "runs" in inv else {**inv, "runs": sorted(found)} for inv in previous
            if found & set(inv.get("runs", found))]
    mine = [r["run"] for r in finished if r["trained"]]
    if mine:
        kept.append({**this, "wall_seconds": table["wall_seconds"], "trained": table["trained"],
                     "runs": mine, "finished": not table["partial"]})
    return kept


def earlier_study(path: Path, identity) -> dict | None:
    """The artefact of this study found at ``path`` that records runs (``per_seed``): its
    study in progress (:func:`~catlib.book.args.partial_path`), else its complete
    artefact, where it is of the study ``identity()`` (:func:`same_study`; called only
    where such an artefact is found: it reads the corpus); else None."""
    found = [a for a in (read_artefact(partial_path(path)), read_artefact(path))
             if a is not None and a.get("per_seed")]
    study = identity() if found else None
    return next((a for a in found if same_study(a, study)), None)


# A JSON list of numbers (or nulls, booleans): written on one line (a record's windows).
_FLAT_LIST = re.compile(r"\[[^\[\]{}\"]*\]")


def artefact_text(table: dict) -> str:
    """``table`` as the artefact's JSON: indented, keys sorted, each list of numbers on one
    line (the per-window CEs of every record would otherwise take a line each)."""
    text = json.dumps(table, indent=1, sort_keys=True)
    return _FLAT_LIST.sub(lambda m: "[" + ", ".join(
        x.strip() for x in m.group(0)[1:-1].split(",") if x.strip()) + "]", text) + "\n"


def read_artefact(path: Path) -> dict | None:
    """The JSON object at ``path``; None where there is none or it cannot be read."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def writer(path: Path, profile: str, device, provenance: dict):
    """``write(table)``: :func:`~catlib.experiment.scale.run_study`'s artefact (or its
    artefact so far) with its identity, its cost (:func:`invocations`, over the study's
    artefact or study in progress found at ``path`` when the writer was made) and its
    ``provenance`` (dated now), written atomically: to ``path`` where every run has
    finished (then the study in progress beside it is removed), else to
    :func:`~catlib.book.sweep.partial_path` only."""
    before = [read_artefact(p) for p in (partial_path(path), path)]
    this = {"date": provenance["date"], "commit": commit_of(provenance)}

    def write(table: dict) -> None:
        identity = {**table.get("identity", {}), "profile": profile, "device": device.type}
        old = next((a for a in before if a is not None and same_study(a, identity)), None)
        table = {**table, "identity": identity,
                 "invocations": invocations(earlier_invocations(old) if old else [], table, this),
                 "provenance": {**provenance, "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}}
        target = partial_path(path) if table.get("partial") else path
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, artefact_text(table))
        if target == path:
            partial_path(path).unlink(missing_ok=True)
    return write


def main(argv=None) -> int:
    """``python -m catlib.book.scale``: train the study and write its artefact; 2 (one
    line, nothing trained or written) on a bad argument."""

    p = argparse.ArgumentParser(prog="python -m catlib.book.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    p.add_argument("--profile", default="cpu", help="the sizes and batches (default: cpu, chapter 10's)")
    p.add_argument("--corpus", default="tiny",
                   help="the corpus the rows train on and are scored on: tiny (Tiny "
                        "Shakespeare, chapter 11's; default) or code (SymPy's source, chapter 12's)")
    p.add_argument("--out", default="results", help="folder of scale_<device>.json")
    p.add_argument("--root", default="runs", help="folder of the run directories")
    p.add_argument("--budgets", type=int, nargs="+",
                   help="override the device's budgets (all seeds; a test: writes scale_<device>.test.json)")
    p.add_argument("--seeds", type=int, nargs="+", help="with --budgets: the seeds (default 0 1 2)")
    p.add_argument("--jobs", type=int, help="runs trained at once (default: the pool's)")
    p.add_argument("--sweep", help="the learning-rate sweep's artefact (default: "
                                   "<out>/lr_sweep_<device>.json, written by make sweep)")
    p.add_argument("--recipe_rate", action="store_true",
                   help="every row at the recipe's single rate, not the sweep's (a test: "
                        "writes scale_<device>.test.json)")
    args = p.parse_args(argv)
    try:
        device, plan, experiment, path, rates, source = check_args(args)
    except ArgsError as e:
        print(f"[scale] error: {e}", file=sys.stderr)
        return 2
    for label in source.get("unrated", []):
        print(f"[scale] refused: {label!r} has no rate (every rate the sweep tried diverged, "
              f"{source['artefact']}); the study trains the other rows without it", file=sys.stderr)
    rows = [r for r in study_rows(args.corpus) if rates is None or r in rates]
    extra = {} if args.budgets is not None else {
        r: s for r, s in extra_seeds_for(device, args.corpus).items() if r in rows}
    root = Path(args.root) / study_folder(args.profile, device.type, args.corpus)
    earlier = earlier_study(path, lambda: {
        **study_identity(plan, extra, rows, load_corpus(split=causal_split(args.corpus)).sha256),
        "profile": args.profile, "device": device.type})
    own = Counter((b, tuple(s)) for r in extra.values() for b, s in r.items())   # rows per seed set
    print(f"scale study: corpus {args.corpus}, profile {args.profile}, device {device}, budgets "
          f"{', '.join(f'{b}x (seeds {list(s)})' for b, s in sorted(plan.items()))}"
          f"{''.join(f'; seeds {list(s)} at {b}x for {n} rows' for (b, s), n in sorted(own.items()))}; "
          f"runs in {root}; {'rates from ' + source['artefact'] if rates else 'the recipe rate'}; "
          f"writes {partial_path(path)} after each run trained, {path} once complete"
          f"{'; the runs its artefact records are read, not trained' if earlier else ''}",
          flush=True)
    write = writer(path, args.profile, device, {
        **environment(("torch", "numpy"), device), "profile": args.profile,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "code": code_fingerprint(),
        "written_by": "python -m catlib.book.scale " + " ".join(argv or sys.argv[1:])})
    table = run_study(experiment, root=root, device=device, plan=plan, rows=rows, jobs=args.jobs,
                      echo=lambda line: print(line, flush=True), rates=rates, rate_source=source,
                      on_change=write,
                      runs_from=[sweep_runs(args.root, args.profile, device.type, args.corpus)],
                      extra=extra, recorded=earlier)
    write(table)
    print(f"wrote {path} in {table['wall_seconds'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
