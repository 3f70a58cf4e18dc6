"""The scale study's chapter: its artefacts read, its verdicts said, its frontier drawn.

The study (:mod:`catlib.experiment.scale`) writes ``results/scale_<device>.json``:
``{"plan": {budget: seeds}, "rows": {row: {"points": [{"budget", "steps", "seeds",
"train_flops", "seconds", "ce": {"<length>": [CE per seed]}}]}}, "provenance": ...}``,
a budget being a multiple of the KERPLE-prior CAT's training FLOPs at the book's steps.
The chapter never trains it; it reads what is there and says what is not.

At each budget and length the comparison is at equal training compute: every row spent
the same FLOPs (within 5 %). "The best baseline" there is the lowest of the baseline rows
(ALiBi as steps or as layers, RoPE) at that budget and length, seed by seed where a seed
is shared. A CAT row *leads* where its CE is below the best baseline's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..common.formatting import md_table
from ..experiment.scale import (ALIBI, ALIBI_DEEP, BASELINE_ROWS, EULER, EULER_DEEP, KERPLE,
                                KERPLE_ODE, ROPE, SCALE_ROWS)

DEVICES = ("cpu", "cuda")
# The moonshot: a row with the CAT's kernel ahead of the best baseline by this much (nats)
# at every length, in every seed, at every budget measured.
MOON_LEAD = 0.05
CAT_ROWS = tuple(label for label in SCALE_ROWS if label not in BASELINE_ROWS)
# The rows as the chapter's sentences, tables and figure name them (short enough to read;
# the chapter says what each is).
NAMES = {ALIBI: "ALiBi baseline", ALIBI_DEEP: "deep ALiBi baseline", ROPE: "RoPE baseline",
         KERPLE: "KERPLE-prior CAT", KERPLE_ODE: "ODE-consistent CAT", EULER: "Euler CAT",
         EULER_DEEP: "deep Euler CAT"}


def name(row: str) -> str:
    return NAMES.get(row, row)


def load_studies(root) -> dict[str, dict]:
    """``{device: artefact}`` for each ``results/scale_<device>.json`` present, CPU first."""
    out = {}
    for device in DEVICES:
        path = Path(root) / "results" / f"scale_{device}.json"
        if path.is_file():
            out[device] = json.loads(path.read_text())
    return out


def budgets(study: dict) -> list[int]:
    """The study's budgets, smallest first."""
    return sorted(int(b) for b in study["plan"])


def lengths(study: dict) -> list[str]:
    """The lengths its points are scored at, shortest first (as the artefact's keys)."""
    point = next(iter(study["rows"].values()))["points"][0]
    return sorted(point["ce"], key=int)


def point(study: dict, row: str, budget: int) -> dict | None:
    """``row``'s point at ``budget`` (None where the row has none)."""
    points = study["rows"].get(row, {}).get("points", [])
    return next((p for p in points if p["budget"] == budget), None)


def per_seed(study: dict, row: str, budget: int, length: str) -> dict[int, float]:
    """``{seed: CE}`` of ``row`` at ``budget`` and ``length`` (empty where not measured)."""
    p = point(study, row, budget)
    return dict(zip(p["seeds"], p["ce"][length])) if p else {}


def mean_ce(study: dict, row: str, budget: int, length: str) -> float | None:
    values = list(per_seed(study, row, budget, length).values())
    return float(np.mean(values)) if values else None


def best_baseline(study: dict, budget: int, length: str) -> tuple[str | None, float | None]:
    """The baseline row lowest (mean over its seeds) at ``budget`` and ``length``."""
    found = [(mean_ce(study, r, budget, length), r) for r in BASELINE_ROWS]
    found = [(ce, r) for ce, r in found if ce is not None]
    if not found:
        return None, None
    ce, row = min(found)
    return row, ce


def leads(study: dict, row: str, length: str) -> dict[int, float]:
    """``{budget: best baseline's mean CE − row's mean CE}`` (> 0: ``row`` leads), where both
    were measured."""
    out = {}
    for b in budgets(study):
        _, base = best_baseline(study, b, length)
        own = mean_ce(study, row, b, length)
        if base is not None and own is not None:
            out[b] = base - own
    return out


def seed_leads(study: dict, row: str, budget: int, length: str) -> list[float]:
    """Per seed both measured: the lowest baseline of that seed minus ``row``'s CE."""
    own = per_seed(study, row, budget, length)
    out = []
    for seed, ce in own.items():
        base = [per_seed(study, r, budget, length).get(seed) for r in BASELINE_ROWS]
        base = [v for v in base if v is not None]
        if base:
            out.append(min(base) - ce)
    return out


def crossing(study: dict, row: str, length: str) -> float | None:
    """The budget where ``row``'s lead over the best baseline changes sign, interpolated
    linearly in log training FLOPs (the budgets are FLOPs multiples) between the two
    budgets around its first sign change; None where it keeps one sign."""
    lead = leads(study, row, length)
    bs = sorted(lead)
    for lo, hi in zip(bs, bs[1:]):
        a, b = lead[lo], lead[hi]
        if a == 0:
            return float(lo)
        if a * b < 0:
            x = np.log(lo) + (np.log(hi) - np.log(lo)) * a / (a - b)
            return float(np.exp(x))
    return None


def moonshot(study: dict, row: str) -> dict:
    """Whether ``row`` leads the best baseline by :data:`MOON_LEAD` at every length, in every
    seed, at every budget of the study: ``{"met": bool, "smallest": lead or None,
    "untested": [budgets where a seed or a baseline is missing]}``. An untested budget is
    not met."""
    smallest, untested = None, []
    plan = {int(b): set(s) for b, s in study["plan"].items()}
    for b in budgets(study):
        got = [seed_leads(study, row, b, L) for L in lengths(study)]
        seeds = set(per_seed(study, row, b, lengths(study)[0]))
        if not all(got) or seeds != plan[b] or any(len(g) != len(plan[b]) for g in got):
            untested.append(b)
            continue
        low = min(min(g) for g in got)
        smallest = low if smallest is None else min(smallest, low)
    met = not untested and smallest is not None and smallest >= MOON_LEAD
    return {"met": met, "smallest": smallest, "untested": untested}


def _the(label: str) -> str:
    return f"the {name(label)}"


def _range(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def budget_verdict(study: dict, budget: int) -> str:
    """One sentence on ``budget``: which row is lowest at each length (all rows, equal
    compute), and by how much it leads the next row."""
    ls = lengths(study)
    firsts, margins = [], []
    for L in ls:
        ranked = sorted((ce, r) for r in study["rows"]
                        if (ce := mean_ce(study, r, budget, L)) is not None)
        firsts.append(ranked[0][1])
        margins.append(ranked[1][0] - ranked[0][0] if len(ranked) > 1 else 0.0)
    if len(set(firsts)) == 1:
        where = "every length"
        return (f"At {budget}×, {_the(firsts[0])} is lowest at {where}, "
                f"{_range(margins)} nats below the next row.")
    parts = [f"{_the(r)} at {', '.join(L for L, f in zip(ls, firsts) if f == r)}"
             for r in dict.fromkeys(firsts)]
    return f"At {budget}×, the lowest row differs by length: {'; '.join(parts)}."


def lead_span(study: dict, row: str, length: str) -> tuple | None:
    """``row``'s lead over the best baseline at ``length`` at its smallest and its largest
    budget measured, and where it changes sign: ``(first budget, lead, last budget, lead,
    crossing or None)``; None where no budget was measured beside a baseline."""
    lead = leads(study, row, length)
    if not lead:
        return None
    first, last = min(lead), max(lead)
    return first, lead[first], last, lead[last], crossing(study, row, length)


def lead_verdict(study: dict, row: str) -> str:
    """One sentence on ``row`` against the best baseline over the budgets: where it leads
    or trails, by how much, whether the gap grows, and the crossing (shortest length and
    longest)."""
    ls = lengths(study)
    pieces = []
    for L in (ls[0], ls[-1]):
        span = lead_span(study, row, L)
        if span is None:
            continue
        b0, first, b1, last, cross = span
        word = "grows" if abs(last) > abs(first) and np.sign(last) == np.sign(first) else (
            "shrinks" if np.sign(last) == np.sign(first) else "changes sign")
        where = f", crossing near {cross:.1f}×" if cross else ""
        pieces.append(f"at {L} characters its lead goes from {first:+.3f} at {b0}× to "
                      f"{last:+.3f} at {b1}× ({word}{where})")
    if not pieces:
        return f"The {name(row)} has no budget measured beside a baseline."
    return f"Against the best baseline, {_the(row)}: {'; '.join(pieces)}."


def lead_table(study: dict, length: str, rows=CAT_ROWS) -> str:
    """Markdown: each CAT row's lead over the best baseline (mean over seeds, nats; > 0:
    the CAT is lower) per budget at ``length``."""
    bs = budgets(study)
    cells = []
    for r in rows:
        if r in study["rows"]:
            lead = leads(study, r, length)
            cells.append([name(r), *[f"{lead[b]:+.3f}" if b in lead else "–" for b in bs]])
    return md_table(["row", *[f"{b}×" for b in bs]], cells, "l" + "r" * len(bs))


def ce_table(study: dict, length: str) -> str:
    """Markdown: mean CE (± standard deviation over seeds, where several) per row and
    budget at ``length``."""
    bs = budgets(study)
    cells = []
    for r in study["rows"]:
        row = [name(r)]
        for b in bs:
            v = list(per_seed(study, r, b, length).values())
            row.append("–" if not v else f"{np.mean(v):.3f}" + (
                f" ± {np.std(v, ddof=1):.3f}" if len(v) > 1 else ""))
        cells.append(row)
    return md_table(["row", *[f"{b}×" for b in bs]], cells, "l" + "r" * len(bs))


def missing(study: dict) -> str:
    """What the plan asked for and the artefact lacks, in a sentence or two ("" if nothing):
    the rows absent, and the rows measured on fewer seeds than the plan's."""
    absent = [name(r) for r in SCALE_ROWS if r not in study["rows"]]
    plan = {int(b): set(s) for b, s in study["plan"].items()}
    short: dict[str, list] = {}
    for r in study["rows"]:
        got = {b: sorted(per_seed(study, r, b, lengths(study)[0])) for b in budgets(study)}
        if any(set(got[b]) != plan[b] for b in got):
            seeds = sorted({s for v in got.values() for s in v})
            short.setdefault(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}",
                             []).append(name(r))
    out = [f"Not finished: the {', the '.join(absent)}."] if absent else []
    out += [f"On {seeds} only: the {', the '.join(rows)}." for seeds, rows in short.items()]
    return " ".join(out)


def draw(study: dict, axes, lengths_shown=None) -> None:
    """The frontier: each row's mean CE against its training FLOPs (log scale), one axis
    per length; baselines dashed, CAT rows solid; a band of ± one standard deviation over
    seeds where there are several; the KERPLE-prior CAT's crossing marked."""
    ls = lengths_shown or [lengths(study)[0], lengths(study)[-1]]
    for ax, L in zip(axes, ls):
        for k, (row, table) in enumerate(study["rows"].items()):
            pts = sorted(table["points"], key=lambda p: p["train_flops"])
            x = np.array([p["train_flops"] for p in pts])
            ys = [np.array(p["ce"][L], dtype=float) for p in pts]
            m = np.array([y.mean() for y in ys])
            sd = np.array([y.std(ddof=1) if len(y) > 1 else 0.0 for y in ys])
            style = "--" if row in BASELINE_ROWS else "-"
            ax.plot(x, m, style, marker="o", ms=3, color=f"C{k}", label=name(row))
            ax.fill_between(x, m - sd, m + sd, color=f"C{k}", alpha=0.15, lw=0)
        cross = crossing(study, KERPLE, L) if KERPLE in study["rows"] else None
        if cross:
            unit = _unit_flops(study)
            ax.axvline(cross * unit, color="grey", ls=":", lw=1)
        ax.set(xscale="log", xlabel="training FLOPs", ylabel=f"CE at {L} (nats)",
               title=f"length {L}")


def within_budget(study: dict, tolerance: float = 0.05) -> bool:
    """Whether every point's counted training FLOPs lie within ``tolerance`` of its budget
    times the 1× budget's FLOPs."""
    unit = _unit_flops(study)
    return all(abs(p["train_flops"] / (p["budget"] * unit) - 1) < tolerance
               for t in study["rows"].values() for p in t["points"])


def _unit_flops(study: dict) -> float:
    """The FLOPs of the 1× budget (the KERPLE-prior CAT's point there, else any row's)."""
    p = point(study, KERPLE, 1) or next(point(study, r, 1) for r in study["rows"]
                                        if point(study, r, 1))
    return p["train_flops"]


def answer(study: dict) -> str:
    """The chapter's answer in two sentences: the lowest row at the largest budget, and
    the KERPLE-prior CAT's lead over the best baseline from the smallest budget to the
    largest, at the shortest and the longest length, with the crossings."""
    bs, ls = budgets(study), lengths(study)
    out = [budget_verdict(study, bs[-1])]
    spans, crosses = [], []
    for L in (ls[0], ls[-1]):
        span = lead_span(study, KERPLE, L)
        if span is not None:
            b0, first, b1, last, cross = span
            spans.append(f"from {first:+.3f} at {b0}× to {last:+.3f} at {b1}× at {L} characters")
            crosses.append(f"{cross:.1f}×" if cross else None)
    if spans:
        where = [c for c in crosses if c]
        measured = [name(r) for r in BASELINE_ROWS if r in study["rows"]]
        best = ("the best baseline" if len(measured) == len(BASELINE_ROWS) else
                f"the {' and the '.join(measured)} (the only baseline{'s' if len(measured) > 1 else ''} "
                f"finished)")
        out.append(f"The KERPLE-prior CAT's lead over {best} goes {' and '.join(spans)}"
                   + (f" (crossing near {' and '.join(where)})." if where else "."))
    return " ".join(out)


NO_STUDY = ("No artefact of the scale study is in `results/` in this build: run `make scale` "
            "(or `make scale DEVICE=cuda`) to write one.")


def chapter_texts(studies: dict, main: str | None) -> dict[str, str]:
    """Chapter 11's generated Markdown, by glue key, from the study of device ``main``
    (``studies``: :func:`load_studies`): the answer, where it was read from and what it
    lacks, the schedule check, the tables, the verdicts and the moonshot."""
    keys = ("where", "schedule", "lead_short", "lead_long", "ce_short", "ce_long", "budget_verdicts",
            "row_verdicts", "moon")
    study = studies.get(main)
    if study is None:
        return {"answer": NO_STUDY, **{key: "(no artefact)" for key in keys}}
    ls, prov = lengths(study), study.get("provenance", {})
    commit = prov.get("commit") or (prov.get("git") or {}).get("commit") or "unknown"
    others = [d for d in studies if d != main]
    where = (f"Read from `results/scale_{main}.json` (commit {str(commit)[:12]}, "
             f"{prov.get('date') or study.get('date') or 'date unknown'})"
             + (f"; the {', '.join(others)} study is drawn below" if others else "") + ". "
             + missing(study))
    check = study.get("schedule_check")
    schedule = ("at the 1× budget, the long run's checkpoint against a run of exactly that "
                "many steps (first seed): " + ", ".join(
                    f"{check['checkpoint'][L] - check['own_run'][L]:+.3f} at {L}" for L in ls)
                + " nats (checkpoint minus run)." if check else
                "this artefact holds no such check.")
    moon = []
    for r in CAT_ROWS:
        if r in study["rows"]:
            m = moonshot(study, r)
            moon.append(f"the {name(r)}: " + ("met" if m["met"] else "missed")
                        + (f", smallest lead {m['smallest']:+.3f}" if m["smallest"] is not None else "")
                        + (f" (untested at {', '.join(f'{b}×' for b in m['untested'])}: a seed "
                           f"or a baseline missing)" if m["untested"] else ""))
    return {"answer": answer(study), "where": where.strip(), "schedule": schedule,
            "lead_short": lead_table(study, ls[0]), "lead_long": lead_table(study, ls[-1]),
            "ce_short": ce_table(study, ls[0]),
            "ce_long": ce_table(study, ls[-1]),
            "budget_verdicts": _bullets([budget_verdict(study, b) for b in budgets(study)]),
            "row_verdicts": _bullets([lead_verdict(study, r) for r in CAT_ROWS if r in study["rows"]]),
            "moon": _bullets(moon)}


def answer_file_text(studies: dict, main: str | None) -> str:
    """The sentence the intro and the README include (``book/_generated/scale_answer.md``)."""
    if main not in studies:
        return NO_STUDY + "\n"
    where = "on a CPU" if main == "cpu" else "on a GPU"
    return f"Over budgets ({where}, chapter 11): {answer(studies[main])}\n"


def _bullets(lines) -> str:
    return "\n".join(f"- {line}" for line in lines) or "- none"
