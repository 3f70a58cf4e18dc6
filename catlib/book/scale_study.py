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
from ..common.verdicts import beyond_spread, judged, listed, nats_range, spread_name, subject
from ..common.verdicts import verdict, window_error
from ..experiment.scale import (ALIBI, ALIBI_DEEP, BASELINE_ROWS, CONTROL, EULER, EULER_DEEP,
                                KERPLE, KERPLE_ODE, ROPE, SCALE_ROWS)

# The devices a study artefact can come from (``results/scale_<device>.json``), the CPU first.
STUDY_DEVICES = ("cpu", "cuda")
# The moonshot: a row with the CAT's kernel ahead of the best baseline by this much (nats)
# at every length, in every seed, at every budget measured.
MOON_LEAD = 0.05
# The figure leaves a row above its axis where it lies this far (nats) above the median row.
OFF_SCALE = 0.5
# The rows with the CAT's kernel (the kernel's control, the CAT block without it, is
# compared with the Euler CAT apart: :func:`kernel_verdicts`).
CAT_ROWS = tuple(label for label in SCALE_ROWS if label not in (*BASELINE_ROWS, CONTROL))
# The rows as the chapter's sentences, tables and figure name them (short enough to read;
# the chapter says what each is).
NAMES = {ALIBI: "ALiBi baseline", ALIBI_DEEP: "deep ALiBi baseline", ROPE: "RoPE baseline",
         KERPLE: "KERPLE-prior CAT", KERPLE_ODE: "ODE-consistent CAT", EULER: "Euler CAT",
         EULER_DEEP: "deep Euler CAT", CONTROL: "kernel control"}


def name(row: str) -> str:
    return NAMES.get(row, row)


def load_studies(root) -> dict[str, dict]:
    """``{device: artefact}`` for each ``results/scale_<device>.json`` present, CPU first."""
    out = {}
    for device in STUDY_DEVICES:
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


def common_seeds(study: dict, budget: int, rows) -> list[int]:
    """The seeds every row of ``rows`` was measured on at ``budget``, smallest first; none
    where one of them has no point there. Every mean, verdict and crossing of the chapter
    is taken over such a common set, so that no row's mean holds a seed another lacks."""
    first = lengths(study)[0]
    sets = [set(per_seed(study, r, budget, first)) for r in rows]
    return sorted(set.intersection(*sets)) if sets and all(sets) else []


def compared_seeds(study: dict, row: str, budget: int) -> list[int]:
    """The seeds at ``budget`` shared by ``row`` and *every* baseline row: a "who leads"
    verdict reads a budget only where no baseline is missing (else "the best baseline"
    would be the best of the baselines that happen to be there)."""
    return common_seeds(study, budget, (row, *BASELINE_ROWS))


def ce_matrix(study: dict, row: str, budget: int, seeds) -> np.ndarray:
    """CE of ``row`` at ``budget``, ``[seeds, lengths]`` (the seeds in the order given)."""
    return np.array([[per_seed(study, row, budget, L)[s] for L in lengths(study)] for s in seeds])


def lead_at(study: dict, row: str, budget: int, seeds=None) -> dict | None:
    """``row`` against the best baseline at ``budget`` on ``seeds`` (default: its compared
    seeds): ``{"seeds", "best": [baseline per length], "diff": [seeds, lengths]}``, where
    ``best`` is the baseline row with the lowest mean CE over those seeds at each length
    and ``diff`` = CE(best) − CE(row) per seed (> 0: ``row`` leads). None where a baseline
    row or a seed is missing."""
    seeds = compared_seeds(study, row, budget) if seeds is None else list(seeds)
    if not seeds or not set(seeds) <= set(compared_seeds(study, row, budget)):
        return None
    base = {r: ce_matrix(study, r, budget, seeds) for r in BASELINE_ROWS}
    best = [min(BASELINE_ROWS, key=lambda r: base[r][:, i].mean()) for i in range(len(lengths(study)))]
    diff = np.stack([base[b][:, i] for i, b in enumerate(best)], 1) - ce_matrix(study, row, budget, seeds)
    return {"seeds": seeds, "best": best, "diff": diff}


def lead_path(study: dict, row: str) -> tuple[list[int], list[int]]:
    """``(seeds, budgets)``: the seeds ``row`` and every baseline share at the smallest
    budget, and the budgets where all of them were measured on those seeds: the path along
    which ``row``'s lead is followed and its crossing sought. A budget trained on fewer
    seeds (the CPU's 8×, seed 0 only) is left off the path and said apart."""
    bs = budgets(study)
    seeds = compared_seeds(study, row, bs[0]) if bs else []
    on = [b for b in bs if seeds and set(seeds) <= set(compared_seeds(study, row, b))]
    return seeds, on


def leads(study: dict, row: str, length: str) -> dict[int, float]:
    """``{budget: mean lead over the best baseline}`` at ``length`` along :func:`lead_path`
    (> 0: ``row`` leads)."""
    seeds, on = lead_path(study, row)
    i = lengths(study).index(length)
    return {b: float(lead_at(study, row, b, seeds)["diff"][:, i].mean()) for b in on}


def crossing(study: dict, row: str, length: str, rebuild: float | None = None) -> dict | None:
    """Where ``row``'s lead over the best baseline changes sign along :func:`lead_path`:
    ``{"at": budget, "seeds": [budget or None per seed]}``, interpolated linearly in log
    training FLOPs (the budgets are FLOPs multiples) between the two budgets around the
    first sign change of the mean lead, counted only where the lead on both sides is
    beyond the spread (:func:`~catlib.common.verdicts.beyond_spread`); per seed, its own
    lead against the same baselines. None where there is no such change."""
    seeds, on = lead_path(study, row)
    i = lengths(study).index(length)
    diffs = {b: lead_at(study, row, b, seeds)["diff"][:, i] for b in on}
    real = {b: bool(beyond_spread(d[:, None], rebuild)[0]) for b, d in diffs.items()}
    for lo, hi in zip(on, on[1:]):
        a, b = diffs[lo].mean(), diffs[hi].mean()
        if a * b < 0 and real[lo] and real[hi]:
            return {"at": _sign_change(lo, hi, a, b),
                    "seeds": [_first_change(on, [diffs[x][k] for x in on]) for k in range(len(seeds))]}
    return None


def _sign_change(lo: int, hi: int, a: float, b: float) -> float:
    """The budget between ``lo`` and ``hi`` where a lead going from ``a`` to ``b`` is 0,
    linear in log budget."""
    return float(np.exp(np.log(lo) + (np.log(hi) - np.log(lo)) * a / (a - b)))


def _first_change(bs, values) -> float | None:
    for (lo, a), (hi, b) in zip(zip(bs, values), zip(bs[1:], values[1:])):
        if a * b < 0:
            return _sign_change(lo, hi, a, b)
    return None


def seed_leads(study: dict, row: str, budget: int, length: str) -> list[float]:
    """Per compared seed (:func:`compared_seeds`): the lowest baseline of that seed minus
    ``row``'s CE (the moonshot's reading, stricter than the mean's best baseline)."""
    own = per_seed(study, row, budget, length)
    return [min(per_seed(study, r, budget, length)[s] for r in BASELINE_ROWS) - own[s]
            for s in compared_seeds(study, row, budget)]


def moonshot(study: dict, row: str) -> dict:
    """Whether ``row`` leads the best baseline by :data:`MOON_LEAD` at every length, in every
    seed, at every budget of the study: ``{"met": bool, "smallest": lead or None,
    "untested": [budgets where a seed of the plan is missing from the row or from any
    baseline]}``. An untested budget is not met."""
    smallest, untested = None, []
    plan = {int(b): set(s) for b, s in study["plan"].items()}
    for b in budgets(study):
        if set(compared_seeds(study, row, b)) != plan[b]:
            untested.append(b)
            continue
        low = min(min(seed_leads(study, row, b, L)) for L in lengths(study))
        smallest = low if smallest is None else min(smallest, low)
    met = not untested and smallest is not None and smallest >= MOON_LEAD
    return {"met": met, "smallest": smallest, "untested": untested}


def seeds_text(seeds) -> str:
    """"3 seeds", or "seed 0 only"."""
    return f"{len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]} only"


def budget_verdict(study: dict, budget: int, rebuild: float | None = None) -> str:
    """One sentence on ``budget``: which row is lowest at each length (every row, equal
    compute, the seeds all rows share there), by how much it is below the next row, and
    whether that margin is more than the spread (:func:`~catlib.common.verdicts.judged`)."""
    found = _lowest(study, budget, rebuild)
    if found is None:
        return f"At {budget}×, no seed was measured on every row."
    seeds, firsts, margins, real = found
    ls = lengths(study)
    noise = judged(real, ls, len(seeds), rebuild)
    head = f"At {budget}× ({seeds_text(seeds)}), "
    if len(set(firsts)) == 1:
        return (f"{head}{subject(name(firsts[0]))} is lowest at every length, "
                f"{nats_range(margins.mean(0))} nats below the next row, {noise}.")
    parts = [f"{subject(name(r))} at {listed([L for L, f in zip(ls, firsts) if f == r])}"
             for r in dict.fromkeys(firsts)]
    return (f"{head}the lowest row differs by length: {'; '.join(parts)}; its margin over "
            f"the next row ({nats_range(margins.mean(0))} nats) is {noise}.")


def _lowest(study: dict, budget: int, rebuild: float | None = None):
    """At ``budget``, on the seeds every row shares: ``(seeds, the lowest row at each length,
    its margin over the next row [seeds, lengths], where that margin is beyond the spread
    [lengths])`` (:func:`~catlib.common.verdicts.beyond_spread`); None where no seed was
    measured on every row."""
    ls, rows = lengths(study), list(study["rows"])
    seeds = common_seeds(study, budget, rows)
    if not seeds:
        return None
    ce = {r: ce_matrix(study, r, budget, seeds) for r in rows}
    firsts, margins = [], []
    for i in range(len(ls)):
        ranked = sorted(rows, key=lambda r: ce[r][:, i].mean())
        firsts.append(ranked[0])
        second = ranked[1] if len(ranked) > 1 else ranked[0]
        margins.append(ce[second][:, i] - ce[ranked[0]][:, i])
    margins = np.stack(margins, 1)
    return seeds, firsts, margins, beyond_spread(margins, rebuild)


def lowest_over_budgets(study: dict, rebuild: float | None = None) -> str:
    """The answer's first sentence: which row is lowest at every length over which budgets,
    by how much (below the next row), on how many seeds, and where that margin is beyond the
    spread (:func:`~catlib.common.verdicts.beyond_spread`); consecutive budgets with the
    same lowest row are said once: "At 1× and 2× (3 seeds), the Euler CAT is lowest at
    every length, by 0.007-0.069 nats (beyond the spread except at 128 at 1×); at 4×, the
    deep Euler CAT, by 0.006-0.008 (within the spread)."."""
    ls, groups = lengths(study), []
    for b in budgets(study):
        found = _lowest(study, b, rebuild)
        row = found[1][0] if found is not None and len(set(found[1])) == 1 else None
        if groups and row is not None and groups[-1]["row"] == row \
                and groups[-1]["seeds"] == found[0]:
            groups[-1]["budgets"].append(b)
            groups[-1]["margins"].append(found[2])
            groups[-1]["real"].append(found[3])
        else:
            groups.append({"row": row, "budgets": [b], "seeds": found and found[0],
                           "margins": [found[2]] if row is not None else [],
                           "real": [found[3]] if row is not None else []})
    parts = []
    for k, g in enumerate(groups):
        at = listed([f"{b}×" for b in g["budgets"]])
        if g["row"] is None:
            parts.append(f"at {at}, no row is lowest at every length")
            continue
        seeds = f" ({seeds_text(g['seeds'])})" if k == 0 or g["seeds"] != groups[0]["seeds"] else ""
        real = g["real"]
        if spread_name(len(g["seeds"]), rebuild) is None:
            noise = "one seed, no spread to judge it by"
        elif all(r.all() for r in real):
            noise = "beyond the spread"
        elif not any(r.any() for r in real):
            noise = "within the spread"
        else:
            noise = "beyond the spread except at " + listed(
                [f"{b}×" if not r.any() else f"{listed([L for L, ok in zip(ls, r) if not ok])} at {b}×"
                 for b, r in zip(g["budgets"], real) if not r.all()])
        by = nats_range(np.concatenate([m.mean(0) for m in g["margins"]]))
        parts.append(f"at {at}{seeds}, {subject(name(g['row']))} is lowest at every length, by "
                     f"{by} nats ({noise})" if not parts else
                     f"at {at}{seeds}, {subject(name(g['row']))}, by {by} ({noise})")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def lead_sentence(study: dict, row: str, length: str, rebuild: float | None = None) -> str | None:
    """``row`` against the best baseline at ``length`` along :func:`lead_path`, in words:
    whether it leads or trails, the baseline it is compared with (named once per run of
    budgets), every budget's value (the path need not be monotone), "within the spread"
    where a value is, and the crossing with its range over seeds; None where no budget was
    measured beside every baseline."""
    seeds, on = lead_path(study, row)
    if not on:
        return None
    i = lengths(study).index(length)
    steps = []
    for b in on:
        lead = lead_at(study, row, b, seeds)
        d = lead["diff"][:, i]
        steps.append(("leads" if d.mean() > 0 else "trails", lead["best"][i], abs(d.mean()), b,
                      bool(beyond_spread(d[:, None], rebuild)[0])))
    groups: list[list] = []
    for step in steps:
        if groups and groups[-1][0][:2] == step[:2]:
            groups[-1].append(step)
        else:
            groups.append([step])
    said, before = [], (None, None)
    for group in groups:
        verb, base = group[0][:2]
        values = listed([f"{v:.3f} at {b}×" + ("" if real else " (within the spread)")
                         for _, _, v, b, real in group])
        whom = "it" if base == before[1] else subject(name(base))   # each row named once
        said.append(f"{verb + ' ' if verb != before[0] else ''}{whom} by {values}")
        before = (verb, base)
    cross = crossing(study, row, length, rebuild)
    where = ""
    if cross:
        per = [c for c in cross["seeds"] if c is not None]
        where = (f"; it crosses near {cross['at']:.1f}×" + (
            f" ({len(per)} of {len(seeds)} seeds cross, at {nats_range(per)}×)" if len(seeds) > 1 else ""))
    return (f"At {length} characters ({seeds_text(seeds)}), {subject(name(row))} "
            f"{', then '.join(said)}{where}.")


def lead_verdict(study: dict, row: str, rebuild: float | None = None) -> str:
    """``row`` against the best baseline over the budgets, at the shortest and the longest
    length (:func:`lead_sentence`), and the budgets left off the path."""
    ls = lengths(study)
    said = [t for L in (ls[0], ls[-1]) if (t := lead_sentence(study, row, L, rebuild))]
    if not said:
        return f"The {name(row)} has no budget measured beside every baseline."
    seeds, on = lead_path(study, row)
    off = [b for b in budgets(study) if b not in on]
    if off:
        said.append(f"Not on this path, for want of seeds: {listed([f'{b}×' for b in off])}.")
    return " ".join(said)


def lead_table(study: dict, length: str, rows=CAT_ROWS) -> str:
    """Markdown: each CAT row's lead over the best baseline (mean over the seeds it shares
    with every baseline, nats; > 0: the CAT is lower) per budget at ``length``; a budget
    read on fewer seeds than the smallest budget says so in its column's head."""
    bs = budgets(study)
    i = lengths(study).index(length)
    first = common_seeds(study, bs[0], list(study["rows"]))
    heads = []
    for b in bs:
        seeds = common_seeds(study, b, list(study["rows"]))
        heads.append(f"{b}×" + ("" if seeds == first or not seeds else f" ({seeds_text(seeds)})"))
    cells = []
    for r in rows:
        if r in study["rows"]:
            got = [lead_at(study, r, b) for b in bs]
            cells.append([name(r), *[f"{g['diff'][:, i].mean():+.3f}" if g else "–" for g in got]])
    return md_table(["row", *heads], cells, "l" + "r" * len(bs))


def ce_table(study: dict, length: str) -> str:
    """Markdown: mean CE (± standard deviation over seeds, where several) per row and
    budget at ``length``."""
    bs = budgets(study)
    cells = []
    for r in sorted(study["rows"], key=list(SCALE_ROWS).index):
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


def draw(study: dict, axes, lengths_shown=None, rebuild: float | None = None) -> bool:
    """The frontier: each row's mean CE against its training FLOPs (log scale), one axis
    per length; baselines dashed, CAT rows solid; a band of ± one standard deviation over
    seeds where there are several; a dotted line where the KERPLE-prior CAT crosses the
    best baseline (:func:`crossing`). A row far above the others at a length (RoPE at
    5000) is left above the axis, named in the panel, so that it does not squeeze the
    rest. Returns whether a crossing line was drawn (the caption says so only then)."""
    ls = lengths_shown or [lengths(study)[0], lengths(study)[-1]]
    drawn = False
    for ax, L in zip(axes, ls):
        tops, lows = {}, []
        for k, (row, table) in enumerate(study["rows"].items()):
            pts = sorted(table["points"], key=lambda p: p["train_flops"])
            x = np.array([p["train_flops"] for p in pts])
            ys = [np.array(p["ce"][L], dtype=float) for p in pts]
            m = np.array([y.mean() for y in ys])
            sd = np.array([y.std(ddof=1) if len(y) > 1 else 0.0 for y in ys])
            style = "--" if row in BASELINE_ROWS else "-"
            ax.plot(x, m, style, marker="o", ms=3, color=f"C{k}", label=name(row))
            ax.fill_between(x, m - sd, m + sd, color=f"C{k}", alpha=0.15, lw=0)
            tops[row], lows = float((m + sd).max()), [*lows, float((m - sd).min())]
        cross = crossing(study, KERPLE, L, rebuild) if KERPLE in study["rows"] else None
        if cross:
            ax.axvline(cross["at"] * _unit_flops(study), color="grey", ls=":", lw=1)
            drawn = True
        # a row more than OFF_SCALE nats above the median row's top is left above the axis
        cap = float(np.median(list(tops.values()))) + OFF_SCALE
        off = [r for r, t in tops.items() if t > cap]
        if off:
            ax.set_ylim(min(lows) - 0.02, max(t for t in tops.values() if t <= cap) + 0.05)
            ax.text(0.02, 0.97, "above the axis: " + ", ".join(
                        f"{name(r)} (up to {tops[r]:.2f})" for r in off),
                    transform=ax.transAxes, fontsize=7, va="top")
        ax.set(xscale="log", xlabel="training FLOPs", ylabel=f"CE at {L} (nats)",
               title=f"length {L}")
    return drawn


def crossing_caption(crossed: bool) -> str:
    """The figure caption's last sentence, from what :func:`draw` drew: the dotted line only
    where it is there."""
    if crossed:
        return ("The dotted line marks where the KERPLE-prior CAT crosses the best baseline: "
                "the budget at which the verdict changes.")
    return ("No line marks a crossing: over these budgets the KERPLE-prior CAT does not cross "
            "the best baseline beyond the spread.")


def budgets_text(studies: dict, main: str | None) -> str:
    """The budgets of the study read here, and of the other device's where there is one:
    "1×, 2× and 4× on a CPU; 1× to 16× on a GPU"."""
    where = {"cpu": "on a CPU", "cuda": "on a GPU"}
    said = [f"{listed([f'{b}×' for b in budgets(studies[d])])} {where.get(d, d)}"
            for d in [main, *[d for d in studies if d != main]] if d in studies]
    return "; ".join(said) or "none measured here"


def passes_text(study: dict | None) -> str:
    """How many passes over the training split the rows make, in words: the range over rows
    at 1× and the most at the largest budget (a point's steps × batch × training length over
    the split's characters, at the sizes of the profile the study was trained with)."""
    from ..data import load_corpus
    from .profiles import experiment

    if study is None:
        return "a budget that no scale artefact here measures"
    tc = experiment(study.get("provenance", {}).get("profile", "cpu")).train
    chars = len(load_corpus(split="90/10").train)
    passes = {b: [p["steps"] * tc.batch * tc.seq / chars for t in study["rows"].values()
                  for p in t["points"] if p["budget"] == b] for b in budgets(study)}
    first, top = budgets(study)[0], budgets(study)[-1]
    return (f"{min(passes[first]):.1f}-{max(passes[first]):.1f} passes over the training split "
            f"by row at {first}× (up to {max(passes[top]):.0f} at {top}×)")


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


def answer(study: dict, rebuild: float | None = None) -> str:
    """The chapter's answer: which row is lowest over which budgets (:func:`lowest_over_budgets`),
    and whether the Euler CAT's lead is its kernel's (its control, :func:`kernel_clause`);
    the KERPLE-prior CAT against the best baseline is the chapter's next verdict
    (:func:`lead_verdict`), where every budget's value is given."""
    clause = kernel_clause(study, rebuild)
    return lowest_over_budgets(study, rebuild) + (f" {clause}" if clause else "")


def kernel_leads(study: dict) -> dict[int, tuple[list, np.ndarray]]:
    """Per budget, the Euler CAT against its kernel control (the same block with ALiBi's fixed
    bias, the learned kernel off) on their common seeds: ``{budget: (seeds, CE(control) −
    CE(Euler CAT) [seeds, lengths])}`` (> 0: the kernel gains); empty where the study has
    no control."""
    if not {EULER, CONTROL} <= set(study["rows"]):
        return {}
    out = {}
    for b in budgets(study):
        seeds = common_seeds(study, b, (EULER, CONTROL))
        if seeds:
            out[b] = seeds, ce_matrix(study, CONTROL, b, seeds) - ce_matrix(study, EULER, b, seeds)
    return out


def kernel_clause(study: dict, rebuild: float | None = None) -> str:
    """One sentence for the answer: the Euler CAT against its kernel control over the
    budgets both were measured on with the same seeds, where the sign agrees; "" where the
    study has no control (:func:`kernel_leads`)."""
    diffs = [d for _, d in kernel_leads(study).values()]
    if not diffs:
        return ""
    means = np.concatenate([d.mean(0) for d in diffs])
    real = all(beyond_spread(d, rebuild).all() for d in diffs)
    noise = "more than the spread" if real else "not everywhere more than the spread"
    if (means > 0).all():
        return (f"The Euler CAT's learned kernel beats ALiBi's bias in its block by "
                f"{nats_range(means)} nats at every budget and length, {noise}.")
    if (means < 0).all():
        return (f"ALiBi's bias in the Euler CAT's block beats its learned kernel by "
                f"{nats_range(-means)} nats at every budget and length, {noise}.")
    return "The Euler CAT's learned kernel and ALiBi's bias in its block lead by turns."


def kernel_verdicts(study: dict, rebuild: float | None = None) -> list[str]:
    """Per budget, the Euler CAT against its control (:func:`kernel_leads`), with the spread
    rule: is the Euler CAT's lead its kernel's? (:func:`~catlib.common.verdicts.verdict`)."""
    return [f"At {b}× ({seeds_text(seeds)}), "
            + verdict(-gain, lengths(study), name(EULER), name(CONTROL), rebuild)
            for b, (seeds, gain) in kernel_leads(study).items()]


def window_text(study: dict) -> str:
    """How many validation windows each CE reads and the standard error that window sampling
    gives it (the range over the points), in a sentence; "" for an artefact without it."""
    points = [p for t in study["rows"].values() for p in t["points"] if "se" in p]
    if not points:
        return ""
    return window_error({L: points[0]["windows"][L] for L in lengths(study)},
                        {L: [v for p in points for v in p["se"][L]] for L in lengths(study)},
                        every=True)


def overfit_table(study: dict) -> str:
    """Markdown: per row and budget, the CE on the training split minus the CE on the
    validation split at the shortest length (mean over seeds, nats; near 0: no overfitting,
    below 0: the row fits its training text better than text it has not seen); "" for an
    artefact without training CE."""
    L, bs = lengths(study)[0], budgets(study)
    if not any("train_ce" in p for t in study["rows"].values() for p in t["points"]):
        return ""
    cells = []
    for r in sorted(study["rows"], key=list(SCALE_ROWS).index):
        row = [name(r)]
        for b in bs:
            p = point(study, r, b)
            row.append("–" if not p or "train_ce" not in p else
                       f"{np.mean(p['train_ce'][L]) - np.mean(p['ce'][L]):+.3f}")
        cells.append(row)
    return md_table(["row", *[f"{b}×" for b in bs]], cells, "l" + "r" * len(bs))


def method_text(study: dict) -> str:
    """How the artefact's points were made, from its recipe: branched runs on the book's
    recipe, or (an artefact from before it) checkpoints of constant-rate runs with the
    schedule check it measured."""
    recipe = study.get("recipe")
    if recipe and recipe.get("points") == "branched":
        return (f"Every run warms up over {recipe['warmup']} steps, holds the rate "
                f"{recipe['lr']:g}, then decays it linearly to zero over its last "
                f"{recipe['decay_share']:.0%}; the CAT's Sobolev weight runs over "
                f"{recipe['penalty_horizon']} steps whatever the run's length. A smaller "
                "budget's point is a run of that budget branched from the row's longest run "
                "where its own decay starts: the run trained alone to that budget, bit for bit, "
                "its decay counted in its FLOPs.")
    check = study.get("schedule_check")
    text = ("This artefact was trained before the book's recipe: a constant rate with no "
            "warm-up and no decay, each budget's point the weights the row's longest run kept "
            "at that step (the shorter run, for a baseline). A CAT's Sobolev weight decays over "
            "its run, so its point is the long run stopped early")
    if check and "skipped" not in check:
        text += (": at 1×, first seed, the checkpoint minus a run of exactly that many steps "
                 "reads " + ", ".join(f"{check['checkpoint'][L] - check['own_run'][L]:+.3f} at {L}"
                                      for L in lengths(study)) + " nats")
    return text + ". `make scale` trains it again on the recipe."


NO_STUDY = ("No artefact of the scale study is in `results/` in this build: run `make scale` "
            "(or `make scale DEVICE=cuda`) to write one.")


def chapter_texts(studies: dict, main: str | None, rebuild: float | None = None) -> dict[str, str]:
    """Chapter 11's generated Markdown, by glue key, from the study of device ``main``
    (``studies``: :func:`load_studies`): the answer, where it was read from and what it
    lacks, the schedule check, the tables, the verdicts and the moonshot; ``rebuild``: the
    rebuild spread (:func:`catlib.book.page.rebuild_spread`) the verdicts are judged by."""
    keys = ("where", "method", "windows", "lead_short", "lead_long", "ce_short", "ce_long",
            "budget_verdicts", "row_verdicts", "kernel", "overfit", "moon")
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
    moon = []
    for r in CAT_ROWS:
        if r in study["rows"]:
            m = moonshot(study, r)
            status = ("met" if m["met"] else "untested" if m["smallest"] is None else
                      "missed" if m["smallest"] < MOON_LEAD else "not met")
            moon.append(f"the {name(r)}: {status}"
                        + (f", smallest lead {m['smallest']:+.3f}" if m["smallest"] is not None else "")
                        + (f" (untested at {', '.join(f'{b}×' for b in m['untested'])}: a seed "
                           f"or a baseline missing there)" if m["untested"] else ""))
    kernel = kernel_verdicts(study, rebuild)
    return {"answer": answer(study, rebuild), "where": where.strip(), "method": method_text(study),
            "windows": window_text(study) or "This artefact scored a few windows per length.",
            "kernel": _bullets(kernel) if kernel else "- this artefact has no kernel control row",
            "overfit": overfit_table(study) or "(this artefact holds no training CE)",
            "lead_short": lead_table(study, ls[0]), "lead_long": lead_table(study, ls[-1]),
            "ce_short": ce_table(study, ls[0]),
            "ce_long": ce_table(study, ls[-1]),
            "budget_verdicts": _bullets([budget_verdict(study, b, rebuild) for b in budgets(study)]),
            "row_verdicts": _bullets([lead_verdict(study, r, rebuild) for r in CAT_ROWS
                                     if r in study["rows"]]),
            "moon": _bullets(moon)}


def answer_file_text(studies: dict, main: str | None, rebuild: float | None = None) -> str:
    """The sentence the intro and the README include (``book/_generated/scale_answer.md``)."""
    if main not in studies:
        return NO_STUDY + "\n"
    where = "on a CPU" if main == "cpu" else "on a GPU"
    return f"Over budgets ({where}, chapter 11): {answer(studies[main], rebuild)}\n"


def _bullets(lines) -> str:
    return "\n".join(f"- {line}" for line in lines) or "- none"
