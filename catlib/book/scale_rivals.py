"""What the CAT's kernel adds over a learned bias, in sentences: the Euler CAT against the
same block holding another bias at the same compute (ALiBi's fixed bias, the learned
buckets, KERPLE-log, FIRE, FoX's forget gate), and the deep Euler CAT against its own
control, read from the scale study's artefact.

Every lead is CE(rival) − CE(Euler CAT), mean over the seeds both rows share at a budget
(> 0: the kernel is lower), said at the shortest and the longest length as separate
clauses, each with one of the book's words (:func:`~catlib.common.verdicts.reading`):
"ahead" (or "behind") where its 95 % interval excludes zero, "the same within 0.02" where
its 90 % interval lies inside that margin, both where both hold, and "not resolved" where
neither does. A difference that is not called is never said to be "the same": with three
seeds most are neither. :func:`rival_verdicts` says each budget; :func:`rivals_answer`
says the whole in a few sentences for the chapter's answer, the abstract and the README,
ending on what the kernel adds: more than a learned bias where it is ahead of every one of
them at every budget and at both lengths; a learned bias's gain where one is the same
within the margin, or beats it; else that the question is not resolved, naming the biases
it is not resolved against.
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table, signed
from ..common.provenance import commit_of
from ..common.verdicts import (AHEAD, BEHIND, MARGIN, NOT_RESOLVED, listed, reading,
                               same_words, times_listed)
from ..experiment.scale_plan import BIAS_KERNELS, CONTROL, CONTROL_DEEP, EULER, EULER_DEEP
from .scale_readings import KERNEL_RIVALS, budgets, lengths, name, per_seed, row_leads
from .scale_tables import lead_cell, seeds_text



def words(lead: dict) -> list[str]:
    """The book's word per length (:func:`~catlib.common.verdicts.reading`) for a comparison
    of :func:`~catlib.book.scale_readings.row_leads` (``diff`` = CE(rival) − CE(row), its
    window term and, where the artefact records it, the window term's degrees of freedom)."""
    return reading(lead["diff"], lead["window"], window_df=lead.get("window_df"))


def reading_words(cells) -> str:
    """The words of a clause's cells ``[(budget, length, word)]``: the word where every
    cell reads it ("not resolved"), else each word with where it holds ("ahead at 4×; not
    resolved at 1× and 2×"; a budget named whole where all its cells agree)."""
    said = list(dict.fromkeys(w for *_, w in cells))
    if len(said) == 1:
        return said[0]
    out = []
    for word in said:
        named: dict[tuple, list] = {}      # the lengths named at a budget (none: all) -> budgets
        for b in dict.fromkeys(c[0] for c in cells):
            mine = [L for bb, L, w in cells if bb == b and w == word]
            every = [L for bb, L, _ in cells if bb == b]
            if mine:
                named.setdefault(() if mine == every else tuple(mine), []).append(b)
        out.append(f"{word} at " + listed([f"{listed(ls)} at {times_listed(bs)}" if ls else
                                           times_listed(bs) for ls, bs in named.items()]))
    return "; ".join(out)


def words_rule(margin: float = MARGIN) -> str:
    """The book's words for a comparison, in a sentence said once on a page that uses them:
    what "ahead", "the same within 0.02" and "not resolved" mean."""
    return (f"The kernel's comparisons say one of the book's words. A lead is {AHEAD} (or "
            f"{BEHIND}) where its 95 % interval excludes zero and {same_words(margin)} where its "
            f"90 % interval lies inside ±{margin:g} nats; where both hold it is \"{AHEAD}, by "
            f"less than {margin:g}\", where neither, {NOT_RESOLVED}. A lead that is not called "
            "is not a tie.")


def lead_range(values) -> str:
    """Leads in a sentence, signed (a lead may be negative): "+0.031", "-0.008 to +0.002"."""
    cells = list(dict.fromkeys(lead_cell(v) for v in sorted(values)))
    return cells[0] if len(cells) == 1 else f"{cells[0]} to {cells[-1]}"


def rival_verdicts(study: dict) -> list[str]:
    """The Euler CAT's kernel against what else its block could hold, budget by budget:
    ALiBi's fixed bias at depth and each learned bias, the lead at the shortest and at the
    longest length as separate clauses, each with the book's word (:func:`words`); for
    rivals the artefact lacks, one line saying so."""
    ls, out, absent = lengths(study), [], []
    for row, rival in KERNEL_RIVALS[1:]:
        got = row_leads(study, row, rival)
        if not got:
            absent.append(name(rival))
            continue
        for b, g in got.items():
            mean, said = g["diff"].mean(0), words(g)
            ends = [f"{signed(mean[i])} nats at {ls[i]} ({said[i]})"
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
    "cells": [[(budget, length, word)] per end] (:func:`words`), "seeds": the numbers of
    seeds compared}``; None where the study lacks either."""
    got = row_leads(study, row, rival)
    if not got:
        return None
    ls = lengths(study)
    ends = (0, len(ls) - 1)
    said = {b: words(g) for b, g in got.items()}
    means = np.array([[g["diff"][:, i].mean() for g in got.values()] for i in ends])
    cells = [[(b, ls[i], said[b][i]) for b in got] for i in ends]
    return {"lengths": (ls[0], ls[-1]), "means": means, "cells": cells,
            "seeds": sorted({len(g["seeds"]) for g in got.values()})}


def _end(means, cells) -> tuple[str, str] | None:
    """One end of a comparison: its leads (:func:`lead_range`) and their words
    (:func:`reading_words`) over the budgets measured there; None where none was."""
    means = np.asarray(means, dtype=float)
    kept = [(m, c) for m, c in zip(means, cells) if np.isfinite(m)]
    if not kept:
        return None
    return lead_range([m for m, _ in kept]), reading_words([c for _, c in kept])


def _both_ends(reading: dict) -> str:
    """A comparison at its shortest and longest length in words: "+0.031 to +0.043 nats at
    128 and +0.033 to +0.046 at 5000 (not resolved, at both lengths)", or each end with its
    own words ("... at 128 (not resolved) and +0.464 to +0.766 at 5000 (ahead)")."""
    ends = [_end(reading["means"][i], reading["cells"][i]) for i in (0, 1)]
    ls = reading["lengths"]
    if None in ends:
        return " and ".join(f"not measured at {L}" if e is None else
                            f"{e[0]} nats at {L} ({e[1]})" for e, L in zip(ends, ls))
    (lead0, said0), (lead1, said1) = ends
    if said0 == said1:
        both = f"{said0}, at both lengths" if ";" not in said0 else f"at both lengths: {said0}"
        return f"{lead0} nats at {ls[0]} and {lead1} at {ls[1]} ({both})"
    return f"{lead0} nats at {ls[0]} ({said0}) and {lead1} at {ls[1]} ({said1})"


def standing(reading: dict) -> str:
    """How a comparison reads over every budget and both lengths, in the book's words:
    "ahead" (the kernel ahead everywhere), "partly" (ahead somewhere, behind nowhere),
    "same" (the same within the margin everywhere, ahead nowhere), "behind" (the rival
    ahead somewhere, the kernel nowhere), "turns" (ahead somewhere, behind elsewhere) or
    "unresolved" (neither called anywhere nor the same everywhere: a few seeds)."""
    said = [w for end in reading["cells"] for *_, w in end]
    up, down = (any(w.startswith(side) for w in said) for side in (AHEAD, BEHIND))
    measured = np.isfinite(reading["means"]).all()
    if up and down:
        return "turns"
    if down:
        return "behind"
    if up:
        return "ahead" if measured and all(w.startswith(AHEAD) for w in said) else "partly"
    return "same" if measured and all(w == same_words() for w in said) else "unresolved"


def _readings(study: dict) -> dict:
    """``{bias: end_reading(study, EULER, bias)}`` for each learned bias the study holds."""
    found = {bias: end_reading(study, EULER, bias) for bias in BIAS_KERNELS}
    return {b: r for b, r in found.items() if r is not None}


def _conclusion(study: dict, readings: dict) -> str | None:
    """What the learned biases make of the kernel's gain, as a clause: "the kernel adds
    more than a learned bias: ..." where it is ahead of every one everywhere; "... in part"
    where it is ahead of each somewhere and behind none; "the kernel's gain over ALiBi is a
    learned bias's gain: ..." where a bias is the same within the margin everywhere, beats
    it, or meets it by turns (naming them, and those it is not resolved against); else
    "whether the kernel adds more than a learned bias is not resolved on 3 seeds: ...",
    naming the biases against which nothing is called and not everything is the same
    within the margin. None without learned biases."""
    if not readings:
        return None
    kinds = {b: standing(r) for b, r in readings.items()}
    named = lambda kind: listed([f"the {name(b)}" for b, k in kinds.items() if k == kind])  # noqa: E731
    bs = budgets(study)
    where = "at every budget" if len(bs) > 1 else f"at {bs[0]}×"
    if set(kinds.values()) == {"ahead"}:
        return f"the kernel adds more than a learned bias: it is ahead of every one of them {where} and at both lengths"
    if set(kinds.values()) <= {"ahead", "partly"}:
        return ("the kernel adds more than a learned bias in part: it is ahead of each of them "
                f"somewhere and behind none, but not ahead everywhere of {named('partly')}")
    if set(kinds.values()) & {"same", "behind", "turns"}:
        # behind only by less than the margin wherever it is called: said so, not "beaten"
        narrow = all(w != BEHIND for b, k in kinds.items() if k == "behind"
                     for end in readings[b]["cells"] for *_, w in end)
        beaten = (f"beaten, by less than {MARGIN:g} nats where at all, by" if narrow
                  else "beaten by")
        who = [f"{words} {named(kind)}" for kind, words in ((
            "same", f"{same_words()} as"), ("behind", beaten),
            ("turns", "lower and higher by turns than"), ("unresolved", "not resolved against"))
            if kind in kinds.values()]
        return f"the kernel's gain over ALiBi is a learned bias's gain: by the book's rule it is {listed(who)}"
    seeds = sorted({n for b, r in readings.items() if kinds[b] == "unresolved" for n in r["seeds"]})
    on = f" on {listed(seeds)} seed{'s' * (seeds != [1])}"
    return (f"whether the kernel adds more than a learned bias is not resolved{on}: against "
            f"{named('unresolved')} no lead is called, nor is every one {same_words()}")


def _depth(study: dict) -> tuple[str, dict] | None:
    """``(verb, reading)``: whether the kernel's lead over ALiBi's bias survives at depth
    (the deep Euler CAT against its control), or None without the deep control."""
    deep = end_reading(study, EULER_DEEP, CONTROL_DEEP)
    if deep is None:
        return None
    return {"ahead": "survives at depth", "partly": "survives at depth in part",
            "behind": "is reversed at depth", "turns": "changes sign at depth",
            "same": f"is gone at depth ({same_words()})",
            "unresolved": "is not resolved at depth"}[standing(deep)], deep


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
    """The answer to "what does the kernel add over a learned bias?" in a few sentences,
    in the book's words (:func:`words_rule` says them once, beside it): the Euler CAT's
    lead over each learned bias and FoX, a sentence each, at the shortest and the longest length over the budgets;
    what that makes of the kernel's gain; and whether its lead over ALiBi's bias survives at
    depth. "" where the study has none of these rows."""
    readings, depth = _readings(study), _depth(study)
    said = []
    rate = (" (each row at the rate the sweep chose for it)"
            if study.get("rates", {}).get("from") == "sweep" else " (every row at one rate)")
    for k, (bias, r) in enumerate(readings.items()):
        said.append(f"Against the {name(bias)} in its block at the same compute{rate if k == 0 else ''}, "
                    f"the Euler CAT's lead is {_both_ends(r)}.")
    clause = _conclusion(study, readings)
    if clause:
        said.append(f"So {clause}.")
    if depth is not None:
        verb, deep = depth
        said.append(f"The kernel's lead over ALiBi's bias {verb}: the {name(EULER_DEEP)}'s lead "
                    f"over the same blocks with ALiBi's bias is {_both_ends(deep)}.")
    return " ".join(said)


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
        lead = ["" if r == EULER else "–" if got is None else lead_cell(got["diff"][:, ls.index(L)].mean())
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
            f"the study's own runs at {budget}×, not this build's:\n\n{table}\n\n{words_rule()} "
            f"{rivals_answer(view)}")
