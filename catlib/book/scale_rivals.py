"""What the CAT's kernel adds over a learned bias, in sentences: the Euler CAT against the
same block holding another bias at the same compute (ALiBi's fixed bias, the learned
buckets, KERPLE-log, FIRE, FoX's forget gate), and the deep Euler CAT against its own
control, read from the scale study's artefact.

Every lead is CE(rival) − CE(Euler CAT), mean over the seeds both rows share at a budget
(> 0: the kernel is lower), said at the shortest and the longest length as separate
clauses and called by the book's rule (:func:`~catlib.common.verdicts.called`).
:func:`rival_verdicts` says each budget; :func:`rivals_answer` says the whole in a few
sentences for the chapter's answer, the abstract and the README, ending on what the kernel
adds: more than a learned bias where it is ahead of every one of them, called, at every
budget and at both lengths; else a learned bias's gain, naming the biases that match it.
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table, signed
from ..common.provenance import commit_of
from ..common.verdicts import called_words, listed, nats_range
from ..experiment.scale import BIAS_KERNELS, CONTROL, CONTROL_DEEP, EULER, EULER_DEEP
from .scale_readings import KERNEL_RIVALS, budgets, lengths, name, per_seed, row_leads
from .scale_tables import seeds_text

CALLED_WORD = {True: "called", False: "not called"}


def rival_verdicts(study: dict) -> list[str]:
    """The Euler CAT's kernel against what else its block could hold, budget by budget:
    ALiBi's fixed bias at depth and each learned bias, the lead at the shortest and at the
    longest length as separate clauses, each called or not by the book's rule; for rivals
    the artefact lacks, one line saying so."""
    ls, out, absent = lengths(study), [], []
    for row, rival in KERNEL_RIVALS[1:]:
        got = row_leads(study, row, rival)
        if not got:
            absent.append(name(rival))
            continue
        for b, g in got.items():
            mean = g["diff"].mean(0)
            ends = [f"{signed(mean[i])} nats at {ls[i]} ({CALLED_WORD[bool(g['called'][i])]})"
                    if np.isfinite(mean[i]) else f"not measured at {ls[i]}" for i in (0, len(ls) - 1)]
            out.append(f"At {b}× ({seeds_text(g['seeds'])}), the {name(row)}'s lead over the "
                       f"{name(rival)}: {ends[0]}; {ends[1]}.")
    if absent:
        out.append(f"Not in this artefact: the rows with {listed(absent)} (added after it was "
                   "trained; `make sweep`, then `make scale`, trains them).")
    return out


def end_reading(study: dict, row: str, rival: str) -> dict | None:
    """``row`` against ``rival`` at the shortest and the longest length over the budgets
    both were measured on: ``{"lengths": (short, long), "means": [2, budgets] mean leads,
    "cells": [[(budget, length, called)] per end]}``; None where the study lacks either."""
    got = row_leads(study, row, rival)
    if not got:
        return None
    ls = lengths(study)
    ends = (0, len(ls) - 1)
    means = np.array([[g["diff"][:, i].mean() for g in got.values()] for i in ends])
    cells = [[(b, ls[i], bool(g["called"][i])) for b, g in got.items()] for i in ends]
    return {"lengths": (ls[0], ls[-1]), "means": means, "cells": cells}


def _end_words(means, cells, length: str) -> str:
    """One end of a comparison in words: "ahead by 0.012-0.020 nats at 128 (called)",
    "behind by ...", or "between -0.003 and +0.004 nats at 5000 (not called)"."""
    means = np.asarray(means, dtype=float)
    finite = means[np.isfinite(means)]
    if not finite.size:
        return f"not measured at {length}"
    said = called_words([c for c, m in zip(cells, means) if np.isfinite(m)])
    if (finite > 0).all():
        return f"ahead by {nats_range(finite)} nats at {length} ({said})"
    if (finite < 0).all():
        return f"behind by {nats_range(-finite)} nats at {length} ({said})"
    return f"between {_cell(finite.min())} and {_cell(finite.max())} nats at {length} ({said})"


def _both_ends(reading: dict) -> list[str]:
    """:func:`_end_words` of a reading (:func:`end_reading`) at its shortest and longest length."""
    return [_end_words(reading["means"][i], reading["cells"][i], reading["lengths"][i]) for i in (0, 1)]


def standing(reading: dict) -> str:
    """How a comparison reads over every budget and both lengths, by the book's rule:
    "ahead" (the kernel lower, called everywhere), "partly" (the kernel lower where a
    difference is called, not everywhere called), "level" (nothing called), "behind" (the
    rival lower where called) or "turns" (called both ways)."""
    means = reading["means"]
    called = np.array([[c for *_, c in end] for end in reading["cells"]])
    up, down = bool((called & (means > 0)).any()), bool((called & (means < 0)).any())
    if up and down:
        return "turns"
    if down:
        return "behind"
    if not up:
        return "level"
    return "ahead" if np.isfinite(means).all() and (means > 0).all() and called.all() else "partly"


def _readings(study: dict) -> dict:
    """``{bias: end_reading(study, EULER, bias)}`` for each learned bias the study holds."""
    found = {bias: end_reading(study, EULER, bias) for bias in BIAS_KERNELS}
    return {b: r for b, r in found.items() if r is not None}


def _conclusion(study: dict, readings: dict) -> str | None:
    """What the learned biases make of the kernel's gain, as a clause: "the kernel adds
    more than a learned bias: ..." where it is ahead of every one, called, everywhere; "...
    in part" where it is lower than each where called but not called everywhere; else "the
    kernel's gain over ALiBi is a learned bias's gain: ..." naming the biases it is not
    separated from, those that beat it and those it meets by turns; None without learned
    biases."""
    if not readings:
        return None
    kinds = {b: standing(r) for b, r in readings.items()}
    named = lambda kind: listed([f"the {name(b)}" for b, k in kinds.items() if k == kind])  # noqa: E731
    bs = budgets(study)
    where = "at every budget" if len(bs) > 1 else f"at {bs[0]}×"
    if set(kinds.values()) == {"ahead"}:
        return ("the kernel adds more than a learned bias: it is ahead of every one of them, "
                f"called, {where} and at both lengths")
    if set(kinds.values()) <= {"ahead", "partly"}:
        return ("the kernel adds more than a learned bias in part: it is lower than each of "
                f"them wherever a difference is called, but not called everywhere against {named('partly')}")
    who = [f"{words} {named(kind)}" for kind, words in (("level", "not separated from"),
                                                        ("behind", "beaten by"),
                                                        ("turns", "lower and higher by turns than"))
           if kind in kinds.values()]
    return f"the kernel's gain over ALiBi is a learned bias's gain: by the book's rule it is {listed(who)}"


def _depth(study: dict) -> tuple[str, dict] | None:
    """``(verb, reading)``: whether the kernel's lead over ALiBi's bias survives at depth
    (the deep Euler CAT against its control), or None without the deep control."""
    deep = end_reading(study, EULER_DEEP, CONTROL_DEEP)
    if deep is None:
        return None
    return {"ahead": "survives at depth", "partly": "survives at depth in part",
            "behind": "is reversed at depth", "turns": "changes sign at depth",
            "level": "is not resolved at depth"}[standing(deep)], deep


def rivals_short(study: dict) -> str:
    """The answer in one sentence for the book's findings: what the learned biases make of
    the kernel's gain (:func:`_conclusion`) and whether its lead survives at depth; where
    the study has neither, the command that trains them (plain text: the intro pastes it)."""
    clause, depth = _conclusion(study, _readings(study)), _depth(study)
    said = [f"against the field's learned biases in the Euler CAT's block at equal compute, {clause}"
            ] if clause else []
    said += [f"the kernel's lead over ALiBi's bias {depth[0]}"] if depth else []
    if not said:
        return ("The scale study in results/ holds no learned-bias rows: make sweep, then "
                "make scale, trains them.")
    text = "; ".join(said)
    return text[0].upper() + text[1:] + "."


def rivals_answer(study: dict) -> str:
    """The answer to "what does the kernel add over a learned bias?" in a few sentences:
    the Euler CAT against each learned bias and FoX, a sentence each, at the shortest and the
    longest length over the budgets; what that makes of the kernel's gain; and whether its
    lead over ALiBi's bias survives at depth. "" where the study has none of these rows."""
    readings = _readings(study)
    said = []
    rate = (" (each row at the rate the sweep chose for it)"
            if study.get("rates", {}).get("from") == "sweep" else " (every row at one rate)")
    for k, (bias, r) in enumerate(readings.items()):
        ends = _both_ends(r)
        said.append(f"Against the {name(bias)} in its block at the same compute{rate if k == 0 else ''}, "
                    f"the Euler CAT's kernel is {ends[0]} and {ends[1]}.")
    clause = _conclusion(study, readings)
    if clause:
        said.append(f"So {clause}.")
    if (depth := _depth(study)) is not None:
        verb, deep = depth
        ends = _both_ends(deep)
        said.append(f"The kernel's lead over ALiBi's bias {verb}: the {name(EULER_DEEP)} against "
                    f"the same blocks with ALiBi's bias is {ends[0]} and {ends[1]}.")
    return " ".join(said)


def _cell(x: float) -> str:
    """A lead in a table: "+0.012", "-0.300", "0.000" where it rounds to zero (never a signed
    zero, never a float's last bits)."""
    text = f"{x:+.3f}"
    return "0.000" if float(text) == 0 else text


def at_budget(study: dict, budget: int) -> dict:
    """The study read at ``budget`` alone (its plan cut to that budget; the points kept), as
    chapter 10 reads it at its own budget, 1×."""
    return {**study, "plan": {str(budget): study["plan"][str(budget)]}}


def rival_table(study: dict, budget: int) -> str:
    """Markdown: at ``budget``, the Euler CAT, its kernel control and each learned bias in
    its block: the row's learning rate, its CE at the shortest and the longest length (mean
    ± standard deviation over its seeds) and, for the others, their CE minus the Euler CAT's
    on the seeds both share (> 0: the kernel is lower); "" where the study has no such row."""
    ls = lengths(study)
    ends = (ls[0], ls[-1])
    rows = [r for r in (EULER, CONTROL, *BIAS_KERNELS) if r in study["rows"]]
    if len(rows) < 2 or EULER not in rows:
        return ""
    leads = {r: row_leads(study, EULER, r).get(budget) for r in rows[1:]}
    body = []
    for r in rows:
        ce = [list(per_seed(study, r, budget, L).values()) for L in ends]
        cells = [f"{np.mean(v):.3f} ± {np.std(v, ddof=1):.3f}" if len(v) > 1 else
                 f"{v[0]:.3f}" if v else "–" for v in ce]
        got = leads.get(r)
        lead = ["" if r == EULER else "–" if got is None else _cell(got["diff"][:, ls.index(L)].mean())
                for L in ends]
        rate = study["rows"][r].get("rate")
        body.append([name(r), "–" if rate is None else f"{rate:g}", *cells, *lead])
    return md_table(["row", "rate", *(f"CE at {L}" for L in ends),
                     *(f"minus the Euler CAT's at {L}" for L in ends)], body, "lrrrrr")


def at_one_budget_text(studies: dict, budget: int = 1) -> str:
    """Chapter 10's reading of the learned biases at its own budget, from the scale study's
    artefact (``studies``: :func:`~catlib.book.scale_readings.load_studies`; the CPU's
    first): where it was read, :func:`rival_table` and :func:`rivals_answer` at ``budget``;
    or a sentence saying which command trains them."""
    device = next(iter(studies), None)
    study = studies.get(device)
    table = rival_table(study, budget) if study and str(budget) in study["plan"] else ""
    if not table:
        return ("The scale study in `results/` has no learned-bias rows at this budget yet: "
                "`make sweep`, then `make scale`, trains them.")
    prov = study.get("provenance", {})
    view = at_budget(study, budget)
    return (f"Read from `results/scale_{device}.json` (commit {commit_of(prov)}, {prov.get('date', 'date unknown')}), "
            f"the study's own runs at {budget}×, not this build's:\n\n{table}\n\n{rivals_answer(view)}")
