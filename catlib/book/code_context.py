"""Chapter 12's context beyond the training length on source code: each row's context gain
(the same targets of the longest windows read with all their context and with at most the
training length of it, :mod:`catlib.measure.context_gain`), whether it is called above zero,
and the per-position curves of the two readings for the oracle and the best rows.

A point's ``context_gain`` holds, per seed, each window's ``full`` and ``sliding`` CE and
their difference ``gain`` ``[seeds][windows]``, and per position bin (``bins``: the edges,
positions ``bins[i] <= p < bins[i + 1]`` of the window) the mean CE of each reading,
``full_curve`` and ``sliding_curve`` ``[seeds][bins - 1]``.
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table
from ..common.verdicts import listed
from ..experiment.scale_plan import ORACLES
from ..measure.context_gain import gain_interval, uses_context_beyond
from .context_gain_table import gain_text
from .scale_oracle import ORACLE_BUDGET, oracle_point, seed_gains
from .scale_readings import budgets, common_seeds, lengths, name, point
from .scale_tables import FIGSIZE, FONT_PT


def row_gain(study: dict, row: str, budget: int, seeds=None) -> dict | None:
    """``{"row", "budget", "seeds", "gain": (mean, half-width), "uses"}``: ``row``'s context
    gain at ``budget`` on ``seeds`` (default: all of its point's), called above zero or not
    (:func:`~catlib.measure.context_gain.uses_context_beyond`); None where not measured."""
    p = point(study, row, budget)
    seeds = (p or {}).get("seeds", []) if seeds is None else seeds
    gains = seed_gains(p, seeds)
    if gains is None:
        return None
    return {"row": row, "budget": budget, "seeds": list(seeds), "gain": gain_interval(gains),
            "uses": uses_context_beyond(gains)}


def best_gain(study: dict) -> dict | None:
    """Of every row trained at the training length and every budget, the largest context
    gain called above zero, else the largest gain (:func:`row_gain`); None where none is
    measured."""
    found = [g for r in study["rows"] for b in budgets(study) if (g := row_gain(study, r, b))]
    if not found:
        return None
    return max(found, key=lambda g: (g["uses"], g["gain"][0]))


def gains_table(study: dict, budget: int = ORACLE_BUDGET) -> str:
    """Markdown: every row's context gain beyond the training length at ``budget`` on the
    seeds all of them share there (the oracle rows after the rows trained at the training
    length), ± the 95 % half-width, and whether it is called above zero. "" where none
    is measured."""
    rows = [*study["rows"], *(study.get("oracle") or {})]
    seeds = common_seeds({"rows": {**study["rows"], **(study.get("oracle") or {})}}, budget, rows)
    cells = []
    for r in rows:
        gains = seed_gains(_point(study, r, budget), seeds)
        if gains is None:
            cells.append([name(r), "not measured", "–"])
            continue
        cells.append([name(r), gain_text(*gain_interval(gains)),
                      "yes" if uses_context_beyond(gains) else "no"])
    if all(c[1] == "not measured" for c in cells):
        return ""
    short = lengths(study)[0]
    return md_table(["row", f"context gain beyond {short} (nats)", "called above zero"], cells, "lrl")


def gain_words(study: dict, budget: int = ORACLE_BUDGET) -> str:
    """Which rows trained at the training length gain from context beyond it at ``budget``,
    in a sentence."""
    found = [g for r in study["rows"] if (g := row_gain(study, r, budget))]
    if not found:
        return "No row's context gain is recorded at this budget."
    short = lengths(study)[0]
    using = [g["row"] for g in found if g["uses"]]
    if not using:
        return (f"At {budget}×, no row trained at {short} gains from context beyond {short} by a "
                "called margin: where such a row's CE falls with length, it avoids the start of "
                "a window, no more.")
    verb = "gains" if len(using) == 1 else "gain"
    return (f"At {budget}×, {len(using)} of the {len(found)} rows trained at {short} {verb} from "
            f"context beyond it by a called margin: {listed([f'the {name(r)}' for r in using])}.")


def _point(study: dict, row: str, budget: int = ORACLE_BUDGET) -> dict | None:
    """``row``'s point at ``budget``, an oracle row's from ``study["oracle"]``."""
    return oracle_point(study, row) if row in ORACLES else point(study, row, budget)


def curve(study: dict, row: str, budget: int = ORACLE_BUDGET) -> dict | None:
    """``{"x", "edges", "full", "sliding"}``: the geometric centre of each position bin (and
    the bins' edges) and the mean
    over seeds of each reading's CE there, for ``row`` at ``budget`` (an oracle row from
    ``study["oracle"]``); None where its point keeps no curves."""
    gain = (_point(study, row, budget) or {}).get("context_gain") or {}
    if not {"bins", "full_curve", "sliding_curve"} <= set(gain):
        return None
    edges = np.asarray(gain["bins"], dtype=float)
    return {"x": np.sqrt(edges[:-1] * np.maximum(edges[1:] - 1, edges[:-1])), "edges": edges,
            "full": np.mean(gain["full_curve"], 0), "sliding": np.mean(gain["sliding_curve"], 0)}


def best_rows(study: dict, n: int = 2, budget: int = ORACLE_BUDGET) -> list[str]:
    """The ``n`` rows trained at the training length with the lowest mean CE at the longest
    length at ``budget``, on the seeds all of them share there."""
    far = lengths(study)[-1]
    seeds = common_seeds(study, budget, list(study["rows"]))

    def ce(r):
        p = point(study, r, budget)
        if not p or far not in p["ce"]:
            return np.inf
        keep = seeds or p["seeds"]
        return float(np.mean([v for s, v in zip(p["seeds"], p["ce"][far]) if s in keep]))
    ranked = sorted((r for r in study["rows"] if np.isfinite(ce(r))), key=ce)
    return ranked[:n]


def curve_rows(study: dict) -> list[str]:
    """The rows the per-position figure draws: the oracle's, then the two best rows at 1×."""
    return [*(r for r in ORACLES if r in (study.get("oracle") or {})), *best_rows(study)]


def curves_figure(study: dict):
    """``(figure, rows drawn)``: the CE per position beyond the training length at 1×, the
    mean over seeds, for :func:`curve_rows`: each row's full reading solid, its reading
    with at most the training length of context dashed in the same colour; position on a
    log scale. ``(None, [])`` where no row keeps curves."""
    import matplotlib.pyplot as plt

    drawn = [(r, c) for r in curve_rows(study) if (c := curve(study, r)) is not None]
    if not drawn:
        return None, []
    short = lengths(study)[0]
    with plt.rc_context({"font.size": FONT_PT}):
        fig, ax = plt.subplots(figsize=FIGSIZE)
        for k, (row, c) in enumerate(drawn):
            color = f"C{k % 10}"
            ax.plot(c["x"], c["full"], "-", color=color, label=name(row))
            ax.plot(c["x"], c["sliding"], "--", color=color)
        ax.plot([], [], "--", color="grey", label=f"dashed: at most {short} characters of context")
        ax.set(xscale="log", xlabel="position in the window (characters, log scale)",
               ylabel="cross-entropy (nats)", title=f"CE by position at {ORACLE_BUDGET}×, beyond {short}")
        # ticks at the powers of two the positions span, as plain numbers
        lo, hi = min(c["edges"][0] for _, c in drawn), max(c["edges"][-1] for _, c in drawn)
        ticks = [2 ** k for k in range(int(np.ceil(np.log2(lo))), int(np.floor(np.log2(hi))) + 1)]
        ax.set_xlim(lo, hi)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.legend(fontsize=FONT_PT, frameon=False)
        ax.tick_params(labelsize=FONT_PT)
    return fig, [r for r, _ in drawn]


def curves_caption(study: dict | None, drawn) -> str:
    """The figure's caption, from what :func:`curves_figure` drew."""
    if study is None or not drawn:
        return "No per-position curves are recorded in the study here."
    short = lengths(study)[0]
    n = sorted({len(p["seeds"]) for r in drawn if (p := _point(study, r))})
    over = f"its {n[0]} seeds" if len(n) == 1 else f"its seeds ({n[0]}-{n[-1]} by row)"
    return (f"Solid: each position read with all the characters before it in its window; dashed: "
            f"with at most {short} of them. Drawn: {listed([f'the {name(r)}' for r in drawn])}, "
            f"each the mean over {over}. Where a dashed line lies above its solid one, the row "
            "gains from the characters beyond the training length.")
