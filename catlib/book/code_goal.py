"""The goal chapter 12 sets for source code, met or missed in words: a row with the CAT's
kernel ahead of every other row trained at the training length by a called margin at every
budget and every length (:func:`kernel_goal`), and a row trained at the training length
whose context gain beyond it is called above zero
(:func:`~catlib.book.code_context.best_gain`). While the study is in progress the goal is
"not yet decided"; it is met only where both counts hold on the complete study.
"""
from __future__ import annotations

from ..common.verdicts import listed, times_listed
from .code_artefact import COMMANDS, finished_runs, planned_runs
from .code_context import best_gain
from .context_gain_table import gain_text
from ..experiment.scale_plan import ORACLES
from .scale_readings import CAT_ROWS, budgets, common_seeds, compare, lengths, name


def _plan_seeds(study: dict, budget: int) -> set:
    return set(study["plan"].get(str(budget), []))


def _planned(study: dict) -> list[str]:
    """The rows trained at the training length that the study plans (a row it plans but
    holds no point of, one refused for want of a rate, is untested, never left out)."""
    planned = (study.get("identity") or {}).get("rows") or []
    return [*study["rows"], *(r for r in planned if r not in study["rows"] and r not in ORACLES)]


def kernel_goal(study: dict) -> dict:
    """The goal's first count: a row with the CAT's kernel ahead of every other row trained
    at 128 by a called margin at every budget and every length. ``{"met", "row": the CAT
    row nearest to it, "short": {rival: [(budget, length)]} where it is not called ahead,
    "untested": {rival: [budgets]} where a seed of the plan is missing, "budgets",
    "lengths"}``."""
    best = None
    for row in [r for r in CAT_ROWS if r in study["rows"]]:
        short, untested = {}, {}
        for other in [r for r in _planned(study) if r != row]:
            for b in budgets(study):
                seeds = common_seeds(study, b, (row, other))
                if not seeds or set(seeds) != _plan_seeds(study, b):
                    untested.setdefault(other, []).append(b)
                    continue
                c = compare(study, b, seeds, other, row)
                mean = c["diff"].mean(0)
                for L, m, ok in zip(lengths(study), mean, c["called"]):
                    if not (ok and m > 0):
                        short.setdefault(other, []).append((b, L))
        misses = sum(map(len, short.values())) + sum(map(len, untested.values()))
        if best is None or misses < best[0]:
            best = (misses, {"met": misses == 0, "row": row, "short": short, "untested": untested})
    found = best[1] if best else {"met": False, "row": None, "short": {}, "untested": {}}
    return {**found, "budgets": budgets(study), "lengths": lengths(study)}


def goal(found: dict) -> dict:
    """The goal set for this corpus: ``{"state": "met" | "missed" | "open" | "none",
    "kernel": :func:`kernel_goal`, "gain": :func:`~catlib.book.code_context.best_gain`}``;
    "open" while the study is in progress, "none" without a study."""
    study = found["study"]
    if study is None:
        return {"state": "none", "kernel": None, "gain": None}
    kernel, gain = kernel_goal(study), best_gain(study)
    met = kernel["met"] and gain is not None and gain["uses"]
    state = "open" if found["partial"] else "met" if met else "missed"
    return {"state": state, "kernel": kernel, "gain": gain,
            "runs": (finished_runs(study), planned_runs(study))}


def goal_sentence(g: dict) -> str:
    """The goal's state in one sentence (the answer's second)."""
    if g["state"] == "none":
        return "The goal set for this corpus cannot be read without the study."
    if g["state"] == "open":
        return (f"The goal set for this corpus is not yet decided: {g['runs'][0]} of "
                f"{g['runs'][1]} runs have finished.")
    if g["state"] == "met":
        return "The goal set for this corpus is met on both counts (the last section)."
    failed = [] if g["kernel"]["met"] else [
        "no row with the CAT's kernel is ahead of every other row everywhere"]
    if not (g["gain"] and g["gain"]["uses"]):
        failed.append("no row trained at the training length gains from context beyond it by a called margin")
    return f"The goal set for this corpus is missed: {' and '.join(failed)}."


def _where(cells, bs, ls) -> str:
    """Where a comparison falls short, from its cells ``(budget, length)`` over the budgets
    ``bs`` and lengths ``ls``: "at any budget or length", "at 2× and 4×, every length", "at 5000 at 2×
    and 4×; at 128 at 4×"."""
    by: dict[str, list] = {}
    for b, L in cells:
        by.setdefault(L, []).append(b)
    if set(by) == set(ls) and len({tuple(v) for v in by.values()}) == 1:
        budgets_ = next(iter(by.values()))
        return ("at any budget or length" if budgets_ == list(bs)
                else f"at {times_listed(budgets_)}, every length")
    return "; ".join(f"at {L} at {times_listed(v)}" for L, v in by.items())


def goal_text(g: dict) -> str:
    """The goal met or missed, in words, count by count (the chapter's last section)."""
    if g["state"] == "none":
        return (f"Not yet read: no study on source code is in `results/` (`{COMMANDS[0]}`, "
                f"then `{COMMANDS[1]}`).")
    head = {"met": "**Met.**", "missed": "**Missed.**",
            "open": f"**Not yet decided**: the study is in progress ({g['runs'][0]} of {g['runs'][1]} runs), "
                    "and what follows reads the runs finished so far."}
    said = [head[g["state"]]]
    k = g["kernel"]
    if k["row"] is None:
        said.append("The study holds no row with the CAT's kernel.")
    elif k["met"]:
        said.append(f"The {name(k['row'])} is ahead of every other row at every budget and "
                    "length, each margin called.")
    else:
        gaps = [f"the {name(r)} ({_where(c, k['budgets'], k['lengths'])})" for r, c in k["short"].items()]
        gaps += [f"the {name(r)} (not trained on every seed at {times_listed(bs)})"
                 for r, bs in k["untested"].items() if r not in k["short"]]
        against = (listed(gaps) if len(gaps) <= 3 else
                   f"{', '.join(gaps[:3])} and {len(gaps) - 3} other row{'s' if len(gaps) > 4 else ''}")
        said.append(f"No row with the CAT's kernel is ahead of every other row everywhere. The nearest, the "
                    f"{name(k['row'])}, is not called ahead of {against}.")
    gain = g["gain"]
    if gain is None:
        said.append("No row's context gain is recorded.")
    else:
        what = f"{gain_text(*gain['gain'])} nats at {gain['budget']}×"
        said.append(f"The {name(gain['row'])} gains {what.lstrip('+')} from context beyond "
                    "its training length, called above zero."
                    if gain["uses"] else
                    f"No row trained at the training length gains from context beyond it by a called margin; "
                    f"the largest gain is the {name(gain['row'])}'s, {what}.")
    return " ".join(said)
