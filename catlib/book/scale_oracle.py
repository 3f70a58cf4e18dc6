"""Chapter 11's oracle (issue 62, item 2): what context beyond the training length is worth
at the book's sizes.

A "gain of zero" beyond 128 characters means nothing until a model that can read far
shows what there is to gain. The oracle is two rows trained on windows of 512
(:data:`~catlib.experiment.scale_plan.ORACLES`): four ALiBi layers (copying a name from far
back takes two layers, one marking what came before each character and one looking it
up) and the Euler CAT, each beside its own row trained at 128, at 1× on the same seeds.
Each row's context gain beyond 128 (:mod:`catlib.measure.context_gain`: the same targets,
read with all their context and with at most 128 characters of it) is called above zero
or not (:func:`~catlib.measure.context_gain.uses_context_beyond`).
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table
from ..common.verdicts import listed
from ..experiment.scale_plan import ORACLES
from ..measure.context_gain import gain_interval, uses_context_beyond
from .context_gain_table import gain_text
from .scale_readings import lengths, name, point

# The budget the oracle is trained to (its rows are trained to 1x only).
ORACLE_BUDGET = 1


def oracle_point(study: dict, row: str) -> dict | None:
    """``row``'s 1× point: from the oracle (:func:`~catlib.book.scale_readings.split_oracle`)
    or from the rows trained at 128."""
    if row in (study.get("oracle") or {}):
        return point({"rows": study["oracle"]}, row, ORACLE_BUDGET)
    return point(study, row, ORACLE_BUDGET)


def seed_gains(p: dict | None, seeds) -> list | None:
    """The context gain ``[seeds, windows]`` of point ``p`` on ``seeds``; None where ``p``
    lacks one of them or was not measured for it."""
    gain = (p or {}).get("context_gain")
    if not gain or not seeds or not set(seeds) <= set(p["seeds"]):
        return None
    return [gain["gain"][p["seeds"].index(s)] for s in seeds]


def oracle_rows(study: dict) -> list[dict]:
    """Each oracle row after the row it stands beside, on the seeds both share at 1×:
    ``{"row", "seeds", "ce": {length: mean}, "gain": (mean, half) | None, "uses": bool}``.
    [] where the study holds no oracle."""
    out = []
    for oracle, twin in ORACLES.items():
        o, t = oracle_point(study, oracle), oracle_point(study, twin)
        if o is None:
            continue
        seeds = sorted(set(o["seeds"]) & set((t or {}).get("seeds", o["seeds"])))
        for row, p in ((twin, t), (oracle, o)):
            if p is None:
                continue
            gains = seed_gains(p, seeds)
            ce = {L: float(np.mean([v for s, v in zip(p["seeds"], p["ce"][L]) if s in seeds]))
                  for L in p["ce"]}
            out.append({"row": row, "seeds": seeds, "ce": ce,
                        "gain": None if gains is None else gain_interval(gains),
                        "uses": gains is not None and uses_context_beyond(gains)})
    return out


def oracle_table(study: dict) -> str:
    """Markdown: each oracle row and its twin trained at 128, CE at the shortest and the
    longest length (the mean over the shared seeds), the context gain beyond the shortest
    (± the 95 % half-width) and whether it is called above zero. "" where there is no
    oracle."""
    found = oracle_rows(study)
    if not found:
        return ""
    short, far = lengths(study)[0], lengths(study)[-1]
    cells = [[name(f["row"]), f"{f['ce'].get(short, np.nan):.3f}", f"{f['ce'].get(far, np.nan):.3f}",
              "not measured" if f["gain"] is None else gain_text(*f["gain"]),
              "yes" if f["uses"] else "no"] for f in found]
    return md_table(["row", f"CE at {short}", f"CE at {far}", f"context gain beyond {short}",
                     "called above zero"], cells, "lrrrl")


def oracle_text(study: dict) -> str:
    """One or two sentences: whether the oracle reads usefully beyond the training length
    (its gain called above zero), on how many seeds; where it does not, what "extrapolates"
    then means. "" where there is no oracle."""
    found = oracle_rows(study)
    oracles = [f for f in found if f["row"] in ORACLES]
    if not oracles:
        return ("The study holds no oracle yet (`make scale` trains it beside the rows): "
                "without it a gain of zero beyond 128 cannot be told from nothing to gain.")
    seeds = len(oracles[0]["seeds"])
    using = [f for f in oracles if f["uses"]]
    short, far = lengths(study)[0], lengths(study)[-1]
    if using:
        best = max(using, key=lambda f: f["gain"][0])
        return (f"There is context to use beyond {short} characters at this size: the "
                f"{name(best['row'])} gains {gain_text(*best['gain'])} nats "
                f"from it (on {seeds} seeds), called above zero. A row trained at {short} whose "
                "gain is not called leaves that on the table.")
    said = (f"Neither oracle row gains from context beyond {short} characters by a called "
            f"margin (on {seeds} seeds)")
    twin = {f["row"]: f for f in found}
    weaker = [f for f in oracles if ORACLES[f["row"]] in twin
              and f["ce"].get(far, np.nan) > twin[ORACLES[f["row"]]]["ce"].get(far, np.nan)]
    if len(weaker) == len(oracles):     # the oracle is itself behind: it cannot say "nothing"
        ces = listed([f"{f['ce'][far]:.3f} against {twin[ORACLES[f['row']]]['ce'][far]:.3f}"
                      for f in weaker])
        return (f"{said}, but at this budget {'both read' if len(weaker) > 1 else 'it reads'} "
                f"worse than {'their twins' if len(weaker) > 1 else 'its twin'} trained at "
                f"{short} (CE at {far}: {ces}): trained on fewer, longer windows for the same "
                f"FLOPs, the oracle is itself behind, so this shows that these models do not "
                f"read beyond {short} characters, not that there is nothing there to read. A row "
                f"that \"extrapolates\" to {far} does not get worse; it is not shown to gain.")
    return (f"{said}: at this size there is little or nothing to read there, and a row that "
            f"\"extrapolates\" to {far} only does not get worse.")
