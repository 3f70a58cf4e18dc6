"""Chapter 12's order over budgets on a corpus that does not run out: the passes each row
makes over the training files, the lowest row at each budget and length, and whether
chapter 11's order (the same rows on Tiny Shakespeare) holds on source code.

Two rows are *ordered* at a budget and length where their difference is called by the
book's rule (:func:`~catlib.book.scale_readings.compare`, on the seeds both share). The
order of a pair *holds* across the corpora where it is called on both and the same way; it
is *reversed* where it is called on both, the other way round; otherwise it is open (not
called on one corpus at least). Chapter 11's order holds at a budget where no pair shared by
the two studies is reversed there.
"""
from __future__ import annotations

from itertools import combinations

from ..common.formatting import md_table
from ..common.verdicts import listed, times_listed
from .scale_answer import overfit_rows, passes_of
from .scale_readings import budgets, common_seeds, compare, lengths, lowest, name

TINY = "Tiny Shakespeare"


def passes_sentence(study: dict) -> str:
    """The passes over the training files at the smallest and the largest budget, and
    whether any row makes a full pass at the largest."""
    bs = [b for b in budgets(study) if passes_of(study, b)]
    if not bs:
        return "This artefact does not record the passes over the training files."
    lo, top = passes_of(study, bs[0]), passes_of(study, bs[-1])
    a, b = f"{min(lo.values()):.2f}", f"{max(lo.values()):.2f}"
    said = (f"At {bs[0]}× the rows make {a if a == b else f'{a}-{b}'} passes over the training "
            f"files, at {bs[-1]}× up to {max(top.values()):.2f}: ")
    full = [r for r, p in top.items() if p >= 1]
    if not full:
        return said + "none makes a full pass, so no row reads a training character twice."
    verb = "reads" if len(full) == 1 else "read"
    return said + f"{listed([f'the {name(r)}' for r in full])} {verb} some of them more than once."


def overfit_sentence(study: dict) -> str:
    """The rows whose validation CE rises from one budget to the next while their training
    CE falls (:func:`~catlib.book.scale_answer.overfit_rows`), or that none does."""
    said = [f"at {b}× {listed([f'the {name(r)}' for r in rows])}"
            for b in budgets(study) if (rows := overfit_rows(study, b))]
    if not said:
        return ("No row's validation CE rises from one budget to the next while its training CE "
                "falls: none overfits.")
    return f"Overfit (validation CE up from the budget before, training CE down): {'; '.join(said)}."


def lowest_table(study: dict) -> str:
    """Markdown: at each budget and length, the lowest row on the seeds every row shares,
    the next, the margin between them (nats) and whether it is called; "" where no budget
    has a seed every row shares."""
    ls = lengths(study)
    cells = []
    for b in budgets(study):
        low = lowest(study, b)
        if low is None:
            continue
        for i in range(len(ls)):
            first, nxt = low["firsts"][i], low["nexts"][i]
            if first is None:
                cells.append([f"{b}×", ls[i], "not every row measured", "–", "–", "–"])
                continue
            m = float(low["diff"][:, i].mean())
            cells.append([f"{b}×", ls[i], name(first), name(nxt), f"{m:.3f}",
                          "yes" if low["called"][i] else "no"])
    if not cells:
        return ""
    return md_table(["budget", "length", "lowest row", "next row", "margin", "called"], cells, "lrllrl")


def _sign(study: dict, budget: int, a: str, b: str) -> list[int] | None:
    """Per length, +1 where ``b`` is called lower than ``a``, −1 where ``a`` is, 0 where
    their difference is not called; None where they share no seed at ``budget``."""
    seeds = common_seeds(study, budget, (a, b))
    if not seeds:
        return None
    c = compare(study, budget, seeds, a, b)
    return [int(ok) * (1 if m > 0 else -1) for m, ok in zip(c["diff"].mean(0), c["called"])]


def _only(study: dict, rows) -> dict:
    return {**study, "rows": {r: study["rows"][r] for r in rows}}


def order_comparison(code: dict, tiny: dict) -> list[dict]:
    """Per budget both studies measure: ``{"budget", "lengths": [shortest, longest shared],
    "pairs", "held", "reversed": [(a, b, length, lower on code)], "lowest": {corpus: [row
    per length]}}`` over the rows both train (``pairs``: pairs × the two lengths)."""
    shared = [r for r in code["rows"] if r in tiny["rows"]]
    ls = [L for L in lengths(code) if L in lengths(tiny)]
    if len(shared) < 2 or not ls:
        return []
    ends = sorted({ls[0], ls[-1]}, key=int)
    out = []
    for b in [b for b in budgets(code) if b in budgets(tiny)]:
        held, reversed_, pairs = 0, [], 0
        for a, c in combinations(shared, 2):
            signs = [_sign(s, b, a, c) for s in (code, tiny)]
            if None in signs:
                continue
            for L in ends:
                x, y = (sg[lengths(s).index(L)] for sg, s in zip(signs, (code, tiny)))
                pairs += 1
                if x and y:
                    if x == y:
                        held += 1
                    else:
                        reversed_.append((a, c, L, c if x > 0 else a))
        lows = {}
        for label, s in (("code", code), (TINY, tiny)):
            low = lowest(_only(s, shared), b)
            lows[label] = [None if low is None else low["firsts"][lengths(s).index(L)] for L in ends]
        out.append({"budget": b, "lengths": ends, "pairs": pairs, "held": held,
                    "reversed": reversed_, "lowest": lows})
    return out


def _rows_at(rows, ends) -> str:
    """"Euler CAT (128, 5000)", "RoPE baseline (128), Euler CAT (5000)"."""
    by: dict = {}
    for r, L in zip(rows, ends):
        by.setdefault(r, []).append(L)
    return ", ".join(f"{name(r) if r else 'not every row measured'} ({', '.join(ls)})"
                     for r, ls in by.items())


def order_table(code: dict, tiny: dict | None) -> str:
    """Markdown: per budget both studies measure, the lowest of the rows both train on each
    corpus (at the shortest and the longest length they share) and how many orders of two
    rows (pairs × those two lengths) hold, are reversed, or are not called on both
    (:func:`order_comparison`); "" where there is nothing to compare."""
    found = order_comparison(code, tiny) if tiny is not None else []
    cells = [[f"{f['budget']}×", _rows_at(f["lowest"]["code"], f["lengths"]),
              _rows_at(f["lowest"][TINY], f["lengths"]), str(f["held"]), str(len(f["reversed"])),
              str(f["pairs"] - f["held"] - len(f["reversed"]))] for f in found]
    if not cells:
        return ""
    return md_table(["budget", "lowest on source code", f"lowest on {TINY}", "same order",
                     "reversed", "not called on both"], cells, "lllrrr")


def _examples(reversed_: list) -> str:
    """Up to two reversed orders that name no row twice: "the A below the B at 128 and the C
    below the D at 5000"."""
    chosen, seen = [], set()
    for a, b, L, low in reversed_:
        if not {a, b} & seen:
            chosen.append(f"the {name(low)} below the {name(b if low == a else a)} at {L}")
            seen |= {a, b}
        if len(chosen) == 2:
            break
    return listed(chosen)


def order_text(code: dict, tiny: dict | None) -> str:
    """Whether chapter 11's order holds on source code, budget by budget (the table is
    :func:`order_table`), in a sentence or two; what is missing where it cannot be read."""
    if tiny is None:
        return (f"Chapter 11's study on {TINY} is not in `results/` in this build: there is no "
                "order to compare with.")
    found = order_comparison(code, tiny)
    if not found:
        return ("The two studies share no budget with the rows both train measured: chapter 11's "
                "order cannot be compared here.")
    holds = [f["budget"] for f in found if not f["reversed"]]
    broken = [f for f in found if f["reversed"]]
    same_low = [f["budget"] for f in found if f["lowest"]["code"] == f["lowest"][TINY]]
    low = (f"The lowest row is the same on both corpora at {times_listed(same_low)}" if same_low
           else "The lowest row differs between the corpora at every budget both measure")
    if not broken:
        return (f"Chapter 11's order holds at {times_listed(holds)}: no order called on both "
                f"corpora is reversed. {low}.")
    first = broken[0]
    return (f"Chapter 11's order does not hold at {times_listed([f['budget'] for f in broken])}"
            + (f" (it holds at {times_listed(holds)})" if holds else "")
            + f": at {first['budget']}× on source code, for instance, {_examples(first['reversed'])}, "
            f"the other way round on {TINY}. {low}.")
