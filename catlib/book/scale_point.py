"""Chapter 11's 1× point beside chapter 10's: which rows are chapter 10's runs, and where
and why the others differ.

The scale study trains chapter 10's rows at chapter 10's sizes, batches and recipe, so a
row's 1× point is chapter 10's run only where three things agree as well: its learning
rate (the study trains each row at the rate the sweep chose for it, chapter 10 every row
at the recipe's), its steps (the study gives every row the 1× budget in training FLOPs;
chapter 10 trains the ODE-consistent CAT for the experiment's steps, whatever they cost)
and its seeds (a row of the kernel question, on ten seeds here, is read on chapter 10's
three). Where they differ, so do the leads over that row in the two chapters, and the page
says so (issue 60).

The two are compared on the same windows. Chapter 10's points
(``results/frontier_<profile>.json``, :func:`catlib.experiment.frontier.frontier_table`)
read a few windows of the book's common span at each length, spread evenly over it
(:func:`catlib.measure.evaluate.window_starts`); the study reads every window of that span
and keeps each window's CE (the mean over its seeds), so its CE on chapter 10's windows is
the mean over those windows.
"""
from __future__ import annotations

import numpy as np

from ..experiment.rows import AS_LAYERS, EULER_CAT, EULER_CONTROL, MATCHED
from ..experiment.scale_plan import ALIBI, ALIBI_DEEP, CONTROL, EULER, KERPLE, KERPLE_ODE, ROPE
from ..experiment.scale_records import seed_window_ce
from ..measure.evaluate import window_starts
from ..common.verdicts import listed
from .scale_readings import budgets, lengths, name, point

# Each study row that chapter 10 trains too, and its key in chapter 10's frontier artefact
# (the notebook files the ALiBi and RoPE baselines given the CAT's compute as steps under
# the plain names, as their ladders' rows).
CHAPTER_10 = {ALIBI: "ALiBi baseline", ALIBI_DEEP: AS_LAYERS, ROPE: "RoPE baseline",
              KERPLE: MATCHED, KERPLE_ODE: "KERPLE-prior CAT, ODE-consistent",
              EULER: EULER_CAT, CONTROL: EULER_CONTROL}


def on_windows(study_point: dict, chapter_point: dict, length: str, longest: str) -> float | None:
    """The study point's CE at ``length`` on the windows chapter 10's point read there: the
    mean of its per-window CEs over chapter 10's evenly spread windows. None where the study
    point keeps no per-window CE there, or did not read every window of the span that
    ``longest``'s windows tile (then chapter 10's windows are not among its own)."""
    ce = (study_point.get("window_ce") or {}).get(length)
    read = study_point.get("windows", {})
    n = (chapter_point.get("windows") or {}).get(length)
    if ce is None or n is None or longest not in read:
        return None
    L, tiles = int(length), len(ce)
    if tiles != read.get(length) or tiles != read[longest] * int(longest) // L or n > tiles:
        return None
    # window_starts spreads n windows over the tiles of a span; one of exactly `tiles`
    # windows of L (a text of tiles + 1 windows and the id after them) gives its indices.
    idx = (window_starts((tiles + 1) * L + 1, L, n, L) // L).numpy()
    return float(np.mean(np.asarray(ce, dtype=float)[idx]))


def compare(study: dict, frontier: dict, chapter_rate: float, budget: int = 1) -> list[dict]:
    """Per study row that chapter 10 trains too (:data:`CHAPTER_10`) and both artefacts
    hold at ``budget``: ``{"row", "rate": (study's, chapter 10's), "steps": (study's,
    chapter 10's), "seeds", "flops": chapter 10's FLOPs over the study's, "ce": {length:
    (study's on chapter 10's windows or None, chapter 10's)}}``; chapter 10's point is its
    row's last (its full run, on every seed). ``chapter_rate``: the rate chapter 10 trains
    every row at."""
    out, longest = [], lengths(study)[-1]
    for row, key in CHAPTER_10.items():
        mine = point(study, row, budget) if row in study["rows"] else None
        if mine is None or key not in frontier:
            continue
        theirs = frontier[key]["points"][-1]
        rate = study["rows"][row].get("rate")
        seeds10 = sorted(theirs.get("seeds", []))
        # A row with more seeds than chapter 10's (the kernel question's ten) is read on
        # chapter 10's, from its per-seed records, where it holds them all.
        own = (seed_window_ce(study, row, budget, seeds10)
               if seeds10 and set(seeds10) < set(mine["seeds"]) else None)
        if own is not None:
            mine = {**mine, "window_ce": own, "seeds": seeds10}
        ce = {L: (on_windows(mine, theirs, L, longest), float(np.mean(theirs["ce"][L])))
              for L in theirs["ce"] if L in mine.get("ce", {})}
        out.append({"row": row, "rate": (chapter_rate if rate is None else rate, chapter_rate),
                    "steps": (mine["steps"], theirs["steps"]),
                    "seeds": (sorted(mine["seeds"]), seeds10),
                    "flops": theirs["train_flops"] / mine["train_flops"], "ce": ce,
                    "swept": study.get("rates", {}).get("from") == "sweep"})
    return out


def _why(c: dict) -> list[str]:
    """What sets a row's 1× point apart from chapter 10's run, in clauses."""
    (rate, rate10), (steps, steps10), (seeds, seeds10) = c["rate"], c["steps"], c["seeds"]
    why = []
    if rate != rate10:
        chosen = "the rate the sweep chose for it, " if c.get("swept") else ""
        why.append(f"trains at {chosen}{rate:g}, where chapter 10 trains every row at {rate10:g}")
    if steps != steps10:
        why.append(f"trains for {steps} steps, the 1× budget, where chapter 10 trains it for "
                   f"{steps10} ({c['flops']:.2f}× that budget's FLOPs)")
    if seeds != seeds10:
        why.append(f"has seeds {', '.join(map(str, seeds))} where chapter 10 has "
                   f"{', '.join(map(str, seeds10)) or 'none recorded'}")
    return why


def point_text(study: dict, frontier: dict | None, chapter_rate: float,
               source: str = "results/frontier_cpu.json") -> str:
    """Where chapter 11's 1× point is chapter 10's and where it is not, in a few sentences
    from both artefacts (:func:`compare`): the rows that are chapter 10's runs (and how
    close their CEs are on chapter 10's windows), then each row that differs, why, and its
    CE on chapter 10's windows in each chapter."""
    if 1 not in budgets(study):
        return "This study has no 1× budget: no point of it is chapter 10's."
    if not frontier:
        return f"Chapter 10's points (`{source}`) are not here: the 1× point is not compared with them."
    found = compare(study, frontier, chapter_rate)
    same = [c for c in found if not _why(c)]
    apart = [c for c in found if _why(c)]
    said = []
    if same:
        gaps = [abs(a - b) for c in same for a, b in c["ce"].values() if a is not None]
        close = ("" if not gaps else "; on chapter 10's windows their CEs agree to four decimals"
                 if max(gaps) < 5e-5 else
                 f"; on chapter 10's windows their CEs differ by at most {max(gaps):.4f} nats")
        said.append(f"Chapter 11's 1× point is chapter 10's run (`{source}`) for the "
                    f"{', the '.join(name(c['row']) for c in same[:-1])}"
                    f"{' and the ' if len(same) > 1 else ''}{name(same[-1]['row'])}: the same "
                    f"rate, steps and seeds{close}.")
    if not apart:
        return " ".join(said) or "Chapter 10's points hold none of the study's rows."
    said.append(f"It is not chapter 10's run for {_count(len(apart))}, and a lead over "
                f"{'it' if len(apart) == 1 else 'either'} at 1× differs between the two chapters.")
    for c in apart:
        ce = [(L, a, b) for L, (a, b) in c["ce"].items() if a is not None]
        reads = ("" if not ce else
                 f": on chapter 10's windows it reads {listed([f'{a:.3f} at {L}' for L, a, _ in ce])} "
                 f"here, against {listed([f'{b:.3f}' for *_, b in ce])} in chapter 10")
        said.append(f"The {name(c['row'])} {' and '.join(_why(c))}{reads}.")
    return " ".join(said)


def point_paragraph(root, study: dict) -> str:
    """:func:`point_text` for chapter 11: chapter 10's points from
    ``<root>/results/frontier_<profile>.json`` of the profile the study was trained at, and
    the rate chapter 10 trains every row at (that profile's, :mod:`catlib.book.profiles`)."""
    import json
    from pathlib import Path

    from .profiles import experiment

    profile = study.get("provenance", {}).get("profile", "cpu")
    source = f"results/frontier_{profile}.json"
    path = Path(root) / source
    frontier = json.loads(path.read_text()) if path.is_file() else None
    return point_text(study, frontier, experiment(profile).train.lr, source)


def _count(n: int) -> str:
    return {1: "one row", 2: "two rows", 3: "three rows"}.get(n, f"{n} rows")
