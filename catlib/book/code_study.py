"""Chapter 12 in sentences and tables: the scale study on the second corpus, SymPy's Python
source, read against the Euler CAT at each budget, the kernel question in the book's three
words, and every generated text of the chapter by glue key (:func:`chapter_texts`).

Every comparison is CE(rival) − CE(Euler CAT) per seed and length on the seeds both rows
share at a budget (:func:`~catlib.book.scale_readings.compare`), read in the book's words
(:func:`~catlib.common.verdicts.reading`): "ahead" (the 95 % interval excludes zero), "the
same within 0.02" (the 90 % interval inside ±0.02 nats), "not resolved", or "ahead, by less
than 0.02" where both hold. Where the artefact is and how far the study has gone:
:mod:`catlib.book.code_artefact`; the corpus: :mod:`catlib.book.code_split`; the order over
budgets and chapter 11's: :mod:`catlib.book.code_order`; the context gain and its curves:
:mod:`catlib.book.code_context`; the goal: :mod:`catlib.book.code_goal`.
"""
from __future__ import annotations

from ..common.formatting import md_table
from ..common.verdicts import (AHEAD, BEHIND, MARGIN, NOT_RESOLVED, interval, listed, reading,
                               same_words, times_listed)
from ..experiment.scale_plan import BIAS_KERNELS, CONTROL, EULER, ORACLES, SCALE_ROWS, plan_for
from .code_artefact import COMMANDS, status_text
from .code_context import gain_words, gains_table
from .context_gain_table import gain_text
from .code_goal import goal_sentence, goal_text
from .code_order import lowest_table, order_table, order_text, overfit_sentence, passes_sentence
from .code_split import corpus_text, split_table
from .scale_answer import passes_table
from .scale_tables import lead_text
from .scale_oracle import oracle_rows, oracle_table, oracle_text
from .scale_rivals import words_rule
from .scale_readings import budgets, common_seeds, compare, lengths, name

# The kernel question's rivals of the Euler CAT in its own block: its control (ALiBi's fixed
# bias) and the field's learned biases that the code study trains.
KERNEL_RIVALS = (CONTROL, *BIAS_KERNELS)


def rivals(study: dict) -> list[str]:
    """The rows trained at 128 but the Euler CAT, in the study's order of rows."""
    order = list(SCALE_ROWS)
    return sorted((r for r in study["rows"] if r != EULER),
                  key=lambda r: order.index(r) if r in order else len(order))


def against_euler(study: dict, rows=None) -> list[dict]:
    """Each row of ``rows`` (default :func:`rivals`) against the Euler CAT at each budget,
    on the seeds both share there: ``{"row", "budget", "seeds", "lead": [mean per length],
    "half": [95 % half-width], "words": [per length]}`` with lead = CE(row) − CE(Euler CAT)
    (> 0: the Euler CAT is lower); lead, half and words None where the two share no seed."""
    if EULER not in study["rows"]:
        return []
    out = []
    for row in rivals(study) if rows is None else [r for r in rows if r in study["rows"]]:
        for b in budgets(study):
            seeds = common_seeds(study, b, (EULER, row))
            if not seeds:
                out.append({"row": row, "budget": b, "seeds": [], "lead": None, "half": None,
                            "words": None})
                continue
            c = compare(study, b, seeds, row, EULER)
            mean, half = interval(c["diff"], c["window"], c["window_df"])
            out.append({"row": row, "budget": b, "seeds": seeds, "lead": mean, "half": half,
                        "words": reading(c["diff"], c["window"], MARGIN, c["window_df"])})
    return out


def answer_table(study: dict, rows=None) -> str:
    """Markdown: each row against the Euler CAT at each budget (:func:`against_euler`): its
    lead at the shortest and the longest length (± the 95 % half-width; positive: the
    Euler CAT is lower) and the book's words at each. "" without the Euler CAT."""
    found = against_euler(study, rows)
    if not found:
        return ""
    short, far = lengths(study)[0], lengths(study)[-1]
    cells, last = [], None
    for f in found:
        label = name(f["row"]) if f["row"] != last else ""
        last = f["row"]
        if f["lead"] is None:
            cells.append([label, f"{f['budget']}×", "not measured", "–", "not measured", "–"])
        else:
            cells.append([label, f"{f['budget']}×", lead_text(f["lead"][0], f["half"][0]), f["words"][0],
                          lead_text(f["lead"][-1], f["half"][-1]), f["words"][-1]])
    return md_table(["row", "budget", f"Euler CAT's lead at {short}", f"at {short}",
                     f"its lead at {far}", f"at {far}"], cells, "lrrlrl")


def standing(words: list[str]) -> str:
    """One word for a row's readings over budgets and lengths: "ahead" (every one called
    ahead), "behind", "same" (every one the same within the margin), "unresolved" (none
    resolved) or "mixed"; "unmeasured" where there is none."""
    if not words:
        return "unmeasured"
    if all(w.startswith(AHEAD) for w in words):
        return "ahead"
    if all(w.startswith(BEHIND) for w in words):
        return "behind"
    if all(w == same_words() for w in words):
        return "same"
    return "unresolved" if all(w == NOT_RESOLVED for w in words) else "mixed"


def standings(study: dict, rows=None, every_length: bool = False) -> dict[str, str]:
    """``{row: standing}`` (:func:`standing`) over every budget, at the shortest and the
    longest length (``every_length``: at each length scored)."""
    words: dict[str, list] = {}
    for f in against_euler(study, rows):
        got = words.setdefault(f["row"], [])
        if f["words"] is not None:
            got += f["words"] if every_length else [f["words"][0], f["words"][-1]]
    return {r: standing(w) for r, w in words.items()}


_GROUPS = {"ahead": "ahead of {}", "same": f"{same_words()} as {{}}", "behind": "behind {}",
           "unresolved": "not resolved against {}", "unmeasured": "not yet compared with {}"}


def _grouped(found: dict[str, str], mixed: str) -> str:
    """"ahead of the X and the Y; the same within 0.02 as the Z; <mixed> the W"."""
    said = []
    for key, form in (*_GROUPS.items(), ("mixed", mixed + " {}")):
        rows = [r for r, s in found.items() if s == key]
        if rows:
            said.append(form.format(listed([f"the {name(r)}" for r in rows])))
    return "; ".join(said)


def answer_sentences(found: dict, goal: dict) -> str:
    """At most three sentences: the Euler CAT's standing against every other row over the
    budgets, the goal met or missed, and what context beyond the training length is worth
    (the oracle). Where there is no study, which commands make it."""
    study = found["study"]
    if study is None:
        return (f"No study on source code is in `results/` in this build: `{COMMANDS[0]}`, "
                f"then `{COMMANDS[1]}`, trains it.")
    if EULER not in study["rows"]:
        return "The study here holds no Euler CAT yet: nothing is compared with it."
    short, far = lengths(study)[0], lengths(study)[-1]
    found_rows = standings(study)
    every = (f"ahead of each of the {len(found_rows)} other rows" if len(found_rows) > 1
             and all(s == "ahead" for s in found_rows.values()) else
             _grouped(found_rows, "ahead at some budgets or lengths and not at others, against"))
    said = [f"At {times_listed(budgets(study))}, at {short} and at {far} characters, the "
            f"{name(EULER)} is {every}."]
    said.append(goal_sentence(goal))
    said.append(oracle_sentence(study))
    return " ".join(said)


def oracle_sentence(study: dict) -> str:
    """What context beyond the training length is worth at this size: the oracle row with
    the largest gain called above zero, or that neither has one."""
    oracles = [f for f in oracle_rows(study) if f["row"] in ORACLES]
    short = lengths(study)[0]
    if not oracles:
        return ("The study holds no oracle yet, so what context beyond its training length is "
                "worth here is not measured.")
    using = [f for f in oracles if f["uses"]]
    if not using:
        return (f"Neither oracle row, trained on long windows, gains from context beyond {short} "
                "characters by a called margin.")
    best = max(using, key=lambda f: f["gain"][0])
    return (f"Context beyond {short} characters is worth {gain_text(*best['gain']).lstrip('+')} "
            f"nats to the {name(best['row'])}, called above zero.")


def answer_text(found: dict, goal: dict) -> str:
    """The chapter's opening answer: the table, then the sentences."""
    table = answer_table(found["study"]) if found["study"] is not None else ""
    return (table + "\n\n" if table else "") + answer_sentences(found, goal)


# The Euler CAT against its kernel control, by its standing (:func:`standing`).
_CONTROL_WORDS = {
    "ahead": "ahead at every budget and length: its lead is the kernel's, not the block's.",
    "same": f"{same_words()} at every budget and length: its block, not its kernel, makes its lead.",
    "behind": "behind at every budget and length: the kernel costs it.",
    "unresolved": "not resolved at any budget: the seeds do not say whose lead it is.",
    "mixed": "ahead at some budgets or lengths and not at others (the table).",
    "unmeasured": "not yet measured."}


def kernel_text(study: dict) -> str:
    """The kernel question on code in the book's words: the Euler CAT against its control
    (is its lead the kernel's or its block's?) and against each learned bias in its block,
    over the budgets and lengths; "" without those rows."""
    found = standings(study, KERNEL_RIVALS, every_length=True)
    if not found:
        return ""
    said = []
    control = found.pop(CONTROL, None)
    if control is not None:
        said.append("Against its kernel control, the same block with ALiBi's fixed bias, the "
                    f"{name(EULER)} is {_CONTROL_WORDS[control]}")
    if found:
        said.append("Against the learned biases in its block, it is "
                    + _grouped(found, "ahead at some budgets or lengths and not at others, against")
                    + ".")
        ahead = [r for r, s in found.items() if s == "ahead"]
        same = [r for r, s in found.items() if s == "same"]
        if same:
            said.append(f"Where it is {same_words()}, a learned bias gains what the kernel gains.")
        elif ahead and len(ahead) == len(found):
            said.append("The kernel adds something that none of these biases learns.")
    return " ".join(said)


def _seeds_words(study: dict) -> str:
    """"3 seeds each", or "1-3 seeds by row and budget" where the points differ."""
    n = sorted({len(p["seeds"]) for t in study["rows"].values() for p in t["points"]})
    if len(n) == 1:
        return f"{n[0]} seed{'s' if n[0] > 1 else ''} each"
    return f"{n[0]}-{n[-1]} seeds by row and budget"


def code_short(found: dict, g: dict) -> str:
    """The chapter's finding in one sentence for the book's findings (plain text: the intro
    pastes it): how many of the other rows the Euler CAT is ahead of everywhere, and the
    goal's state; where there is no study, the commands that make it."""
    study = found["study"]
    if study is None or EULER not in study["rows"]:
        return (f"No study on source code is in results/ in this build: {COMMANDS[0]}, then "
                f"{COMMANDS[1]}, trains it.")
    found_rows = standings(study, every_length=True)
    ahead = sum(s == "ahead" for s in found_rows.values())
    lead = (f"In a study still in progress ({g['runs'][0]} of {g['runs'][1]} runs), on"
            if found["partial"] else "On")
    state = {"met": "met", "missed": "missed", "open": "not yet decided"}[g["state"]]
    return (f"{lead} Python source at {times_listed(budgets(study))}, the {name(EULER)} is ahead of "
            f"{ahead} of the {len(found_rows)} other rows at every budget and length "
            f"({_seeds_words(study)}), and the goal "
            f"set for that corpus is {state}.")


NOT_MEASURED = "Not measured: no study on source code is in `results/` in this build."


def rates_text(study: dict) -> str:
    """Each row's learning rate in a sentence, from the artefact (``rows[r]["rate"]``, the
    sweep's choice; the oracle's, its twin's): the rate most rows share, then the others by
    name. "" where the artefact records none."""
    rates = {r: t.get("rate") for r, t in {**study["rows"], **(study.get("oracle") or {})}.items()}
    rates = {r: v for r, v in rates.items() if v is not None}
    if not rates:
        return ""
    common = max(set(rates.values()), key=list(rates.values()).count)
    others = [f"the {name(r)} at {v:g}" for r, v in rates.items() if v != common]
    source = ("the rate the sweep on the dev files chose for it (`make sweep CORPUS=code`; its "
              "table is on the reproducibility page)" if study.get("rates", {}).get("from") == "sweep"
              else "the recipe's single rate")
    tail = f": {common:g}, {'but ' + listed(others) if others else 'for every row'}" + (
        "; the oracle rows take their twins' rates" if set(rates) & set(ORACLES) else "")
    return f"Each row trains at {source}{tail}."


def chapter_texts(found: dict, goal: dict, tiny: dict | None, corpus,
                  corpus_problem: str | None) -> dict[str, str]:
    """Chapter 12's generated Markdown by glue key, from the study ``found``
    (:func:`~catlib.book.code_artefact.load_code_study`), its ``goal``
    (:func:`~catlib.book.code_goal.goal`), chapter 11's study on Tiny Shakespeare ``tiny``
    (None: not in ``results/``) and the corpus (None: ``corpus_problem`` says why)."""
    study = found["study"]
    planned = budgets(study) if study else sorted(plan_for(found["device"] or "cpu", "code"))
    out = {"budgets": times_listed(planned), "status": status_text(found), "answer": answer_text(found, goal),
           "corpus": corpus_problem if corpus is None else corpus_text(corpus, study),
           "split_table": "" if corpus is None else split_table(corpus),
           "words": words_rule(), "goal": goal_text(goal), "code_short": code_short(found, goal),
           "rates": rates_text(study) if study else ""}
    if study is None:
        keys = ("kernel", "kernel_table", "passes", "passes_table", "overfit", "lowest_table",
                "order", "order_table", "oracle", "oracle_table", "gains_table", "gain_words")
        return {**out, **{k: NOT_MEASURED if not k.endswith("table") else "" for k in keys}}
    return {**out, "kernel": kernel_text(study) or NOT_MEASURED,
            "kernel_table": answer_table(study, KERNEL_RIVALS), "passes": passes_sentence(study),
            "passes_table": passes_table(study, digits=2), "overfit": overfit_sentence(study),
            "lowest_table": lowest_table(study), "order": order_text(study, tiny),
            "order_table": order_table(study, tiny),
            "oracle": oracle_text(study), "oracle_table": oracle_table(study),
            "gains_table": gains_table(study), "gain_words": gain_words(study)}
