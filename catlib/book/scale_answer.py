"""Chapter 11's answer to the kernel question (issue 61, items 4, 6 and 7): at 1×, on every
seed the seven rows of the question share
(:data:`~catlib.experiment.scale_plan.KERNEL_QUESTION_ROWS`: seeds 0-9 in the new study,
0-2 in the old one), each row against the Euler CAT at the training length (128) and beyond
it (the longest length), in the book's words
(:func:`~catlib.common.verdicts.reading`: "ahead", "the same within 0.02", "not resolved",
"ahead, by less than 0.02"), with each row's context gain beyond 128
(:func:`~catlib.measure.context_gain.gain_interval`) where the artefact measured it. A
short table and at most three sentences; the abstract and the README carry the same.

Beside it, what each budget cost in passes over the training part and which rows overfit
there: validation CE up from the budget before while training CE falls (:func:`overfit_rows`).
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table
from ..common.verdicts import AHEAD, BEHIND, MARGIN, NOT_RESOLVED, interval, listed, reading
from ..experiment.scale_plan import EULER, KERNEL_QUESTION_ROWS
from ..measure.context_gain import gain_interval
from .context_gain_table import gain_text
from .scale_readings import budgets, common_seeds, compare, lengths, name, point
from .scale_tables import lead_text, seeds_text

# The budget the kernel question is asked at: where its rows have ten seeds.
QUESTION_BUDGET = 1


def question_rows(study: dict) -> list[str]:
    """The rows of the kernel question the study holds, the Euler CAT first; [] where it
    lacks the Euler CAT."""
    return [r for r in KERNEL_QUESTION_ROWS if r in study["rows"]] if EULER in study["rows"] else []


def question_seeds(study: dict) -> list[int]:
    """The seeds every row of the question was trained on at 1×."""
    rows = question_rows(study)
    return common_seeds(study, QUESTION_BUDGET, rows) if rows else []


def context_gain(study: dict, row: str, seeds) -> tuple[float, float] | None:
    """``(mean, half-width)`` of ``row``'s context gain beyond the training length at 1× on
    ``seeds`` (its point's ``context_gain["gain"]`` ``[seeds, windows]``); None where the
    artefact did not measure it (a study from before issue 61)."""
    p = point(study, row, QUESTION_BUDGET)
    gain = (p or {}).get("context_gain")
    if not gain or not seeds or not set(seeds) <= set(p["seeds"]):
        return None
    return gain_interval([gain["gain"][p["seeds"].index(s)] for s in seeds])


def kernel_question(study: dict) -> list[dict]:
    """Each rival of the Euler CAT at 1× on :func:`question_seeds`: ``{"row", "lead":
    [mean per length], "half": [95 % half-width], "words": [per length], "gain"}`` with
    lead = CE(row) − CE(Euler CAT) (> 0: the Euler CAT is lower) and ``gain`` the row's
    context gain (:func:`context_gain`). The Euler CAT itself comes first, lead None."""
    seeds = question_seeds(study)
    if len(seeds) < 1:
        return []
    out = [{"row": EULER, "lead": None, "half": None, "words": None,
            "gain": context_gain(study, EULER, seeds)}]
    for row in question_rows(study)[1:]:
        c = compare(study, QUESTION_BUDGET, seeds, row, EULER)
        mean, half = interval(c["diff"], c["window"], c["window_df"])
        out.append({"row": row, "lead": mean, "half": half,
                    "words": reading(c["diff"], c["window"], MARGIN, c["window_df"]),
                    "gain": context_gain(study, row, seeds)})
    return out


def _gain(g) -> str:
    if g is None:
        return "not measured"
    return gain_text(*g)


def answer_table(study: dict) -> str:
    """Markdown: each row against the Euler CAT at 1× (:func:`kernel_question`): its lead
    at the training length and beyond (nats, ± the 95 % half-width; positive: the Euler CAT
    is lower), the book's words at each, and the row's context gain beyond the training
    length (or "not measured"). "" where the study lacks the question's rows."""
    found = kernel_question(study)
    if not found:
        return ""
    short, far = lengths(study)[0], lengths(study)[-1]
    cells = []
    for f in found:
        if f["lead"] is None:
            cells.append([name(f["row"]), "–", "–", "–", "–", _gain(f["gain"])])
        else:
            cells.append([name(f["row"]), lead_text(f["lead"][0], f["half"][0]),
                          lead_text(f["lead"][-1], f["half"][-1]), f["words"][0], f["words"][-1],
                          _gain(f["gain"])])
    heads = ["row", f"Euler CAT's lead at {short}", f"its lead at {far}", f"at {short}",
             f"at {far}", f"context gain beyond {short}"]
    return md_table(heads, cells, "lrrllr")


def _says(word: str, rows) -> str:
    """"ahead of the X and the Y", "the same within 0.02 as the X", "not resolved against
    the X"."""
    who = listed([f"the {name(r)}" for r in rows])
    if word.startswith(AHEAD):
        return f"ahead of {who}" if word == AHEAD else f"ahead of {who}, by less than {MARGIN:g}"
    if word.startswith(BEHIND):
        return f"behind {who}" if word == BEHIND else f"behind {who}, by less than {MARGIN:g}"
    if word == NOT_RESOLVED:
        return f"not resolved against {who}"
    return f"{word} as {who}"


def _at(found: list[dict], i: int) -> str:
    groups: dict[str, list] = {}
    for f in found[1:]:
        groups.setdefault(f["words"][i], []).append(f["row"])
    return "; ".join(_says(w, rows) for w, rows in groups.items())


def answer_sentences(study: dict) -> str:
    """At most three sentences: the Euler CAT's standing at the training length, beyond it,
    and its context gain beyond the training length (or what the artefact lacks)."""
    found = kernel_question(study)
    if not found:
        return "The scale study here lacks the rows of the kernel question."
    seeds, ls = question_seeds(study), lengths(study)
    on = (f"seeds {seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1))
          and len(seeds) > 1 else seeds_text(seeds))
    said = [f"At 1× ({on}) and {ls[0]} characters, the {name(EULER)} is {_at(found, 0)}.",
            f"Beyond, at {ls[-1]}, it is {_at(found, -1)}."]
    own = found[0]["gain"]
    if own is None:
        said.append(f"This artefact predates the ten seeds and the context gain beyond {ls[0]}: "
                    f"with {len(seeds)} seeds, not resolved is not the same.")
    else:
        uses = own[0] - own[1] > 0
        said.append(f"Its context gain beyond {ls[0]} is {_gain(own)} nats: it "
                    + ("uses context beyond its training length." if uses else
                       "is not called above zero."))
    return " ".join(said)


def answer_text(study: dict) -> str:
    """The answer as chapter 11, the abstract and the README carry it: the table, then the
    sentences."""
    table = answer_table(study)
    return (table + "\n\n" if table else "") + answer_sentences(study)


def passes_of(study: dict, budget: int) -> dict[str, float]:
    """``{row: passes over the training part}`` at ``budget`` (the point's ``passes``); empty
    for an artefact that does not record them."""
    return {r: float(p["passes"]) for r in study["rows"]
            if (p := point(study, r, budget)) and "passes" in p}


def overfit_rows(study: dict, budget: int) -> list[str]:
    """The rows overfit at ``budget``: on the seeds they share with the budget before, the
    mean validation CE at the shortest length rises from it while the mean training CE
    falls. [] at the smallest budget and for an artefact without training CE."""
    bs = budgets(study)
    if budget not in bs or bs.index(budget) == 0:
        return []
    before, L, out = bs[bs.index(budget) - 1], lengths(study)[0], []
    for r in study["rows"]:
        a, b = point(study, r, before), point(study, r, budget)
        if not a or not b or "train_ce" not in a or "train_ce" not in b:
            continue
        seeds = sorted(set(a["seeds"]) & set(b["seeds"]))
        if not seeds:
            continue
        mean = lambda p, k: np.mean([p[k][L][p["seeds"].index(s)] for s in seeds])  # noqa: E731
        if mean(b, "ce") > mean(a, "ce") and mean(b, "train_ce") < mean(a, "train_ce"):
            out.append(r)
    return out


def budget_note(study: dict, budget: int) -> str:
    """What a budget cost and who overfit there, in words, beside its verdicts: the passes
    each row made over the training part (their range, or "not recorded"), and the rows
    whose validation CE rose from the budget before while their training CE fell."""
    got = passes_of(study, budget)
    lo, hi = (f"{min(got.values()):.1f}", f"{max(got.values()):.1f}") if got else ("", "")
    said = (f"{lo if lo == hi else f'{lo}-{hi}'} passes over the training part by row"
            if got else "passes not recorded in this artefact")
    over = overfit_rows(study, budget)
    if over:
        said += (f"; overfit here (validation CE up from {budgets(study)[budgets(study).index(budget) - 1]}×, "
                 f"training CE down): {listed([f'the {name(r)}' for r in over])}")
    return f"At {budget}×: {said}."


def passes_table(study: dict, digits: int = 1) -> str:
    """Markdown: the passes each row made over the training part at each budget ("–": not
    recorded; ``digits`` decimals), "overfit" beside a row that overfit there; "" where
    none is recorded."""
    bs = budgets(study)
    if not any(passes_of(study, b) for b in bs):
        return ""
    cells = []
    for r in study["rows"]:
        row = [name(r)]
        for b in bs:
            p = passes_of(study, b).get(r)
            row.append("–" if p is None else f"{p:.{digits}f}" + (" (overfit)" if r in overfit_rows(study, b) else ""))
        cells.append(row)
    return md_table(["row", *[f"{b}×" for b in bs]], cells, "l" + "r" * len(bs))
