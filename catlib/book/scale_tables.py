"""What chapter 11 shows of the scale study besides its sentences: its tables (leads, CE,
overfitting) and its figure, the frontier, drawn so that it states no more than the
sentences do (a crossing is drawn only where one is called on both sides,
:func:`~catlib.book.scale_readings.crossing`) and read at 1,280 px (its legend and tick
labels at least a footnote's size: :data:`FONT_PT`)."""
from __future__ import annotations

import numpy as np

from ..common.formatting import md_table
from ..experiment.scale_plan import BASELINE_ROWS, KERPLE, SCALE_ROWS
from .scale_readings import (CAT_ROWS, budgets, common_seeds, crossing, lead_at, lengths, name,
                             per_seed, point, unit_flops)

# The figure leaves a row above its axis where it lies this far (nats) above the median row.
OFF_SCALE = 0.5
# The figure as the book shows it: full width of the content column, about COLUMN_PX wide in
# a 1,280 px window; FIGSIZE (inches) and FONT_PT (points) put every label at about 13 px
# there, above a footnote's 12 px (FOOTNOTE_PX).
COLUMN_PX, FOOTNOTE_PX = 760, 12
FIGSIZE, FONT_PT = (8.0, 4.4), 10
LEGEND_ROW_IN = 0.24      # inches a legend row takes at FONT_PT


def lead_cell(x: float) -> str:
    """A lead in a table: "+0.012", "-0.300", "0.000" where it rounds to zero (never a signed
    zero, never a float's last bits)."""
    text = f"{x:+.3f}"
    return "0.000" if float(text) == 0 else text


def lead_text(mean: float, half: float) -> str:
    """A lead and its 95 % half-width in a table, "+0.045 ± 0.005" (the mean alone without
    an interval; "not measured" where there is no mean)."""
    if not np.isfinite(mean):
        return "not measured"
    return lead_cell(mean) + (f" ± {half:.3f}" if np.isfinite(half) else "")


def seeds_text(seeds) -> str:
    """"3 seeds", or "seed 0 only"."""
    return f"{len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]} only"


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
    budget at ``length``, and each row's learning rate where the artefact records it."""
    bs = budgets(study)
    rated = any("rate" in t for t in study["rows"].values())
    cells = []
    for r in sorted(study["rows"], key=list(SCALE_ROWS).index):
        row = [name(r)] + ([f"{study['rows'][r]['rate']:g}" if "rate" in study["rows"][r] else "–"]
                           if rated else [])
        for b in bs:
            v = list(per_seed(study, r, b, length).values())
            row.append("–" if not v else f"{np.mean(v):.3f}" + (
                f" ± {np.std(v, ddof=1):.3f}" if len(v) > 1 else ""))
        cells.append(row)
    heads = ["row", *(["rate"] if rated else []), *[f"{b}×" for b in bs]]
    return md_table(heads, cells, "l" + "r" * (len(heads) - 1))


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


def frontier_figure(study: dict, title: str = ""):
    """``(figure, crossed)``: :func:`draw` on two axes (the shortest and the longest length)
    with one legend below them, every label at :data:`FONT_PT`."""
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.size": FONT_PT}):
        rows = -(-len(study["rows"]) // 4)          # legend rows, four entries a row
        height = FIGSIZE[1] + LEGEND_ROW_IN * max(0, rows - 2)   # the panels keep their height
        fig, axes = plt.subplots(1, 2, figsize=(FIGSIZE[0], height))
        crossed = draw(study, axes)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=FONT_PT, frameon=False)
        if title:
            fig.suptitle(title, fontsize=FONT_PT + 1)
        # room below the axes for their labels and every legend row
        fig.tight_layout(rect=(0, (0.1 + LEGEND_ROW_IN * rows) / height, 1, 1))
    return fig, crossed


def draw(study: dict, axes, lengths_shown=None) -> bool:
    """The frontier: each row's mean CE against its training FLOPs (log scale), one axis
    per length, drawn as :func:`line_styles` says; a band of ± one standard deviation over
    seeds where there are several; a dotted line where the KERPLE-prior CAT crosses the
    best baseline, only where the crossing is called on both sides (:func:`crossing`; an
    unresolved order is not drawn, as it is not stated). A row far above the others at a
    length (RoPE at 5000) is left above the axis, named in the panel, so that it does not
    squeeze the rest. Returns whether a crossing line was drawn (the caption says so only
    then)."""
    ls = lengths_shown or [lengths(study)[0], lengths(study)[-1]]
    drawn = False
    styles = line_styles(study["rows"])
    for ax, L in zip(axes, ls):
        tops, lows = {}, []
        for row in styles:
            table = study["rows"][row]
            pts = [p for p in sorted(table["points"], key=lambda p: p["train_flops"]) if L in p["ce"]]
            if not pts:
                continue
            x = np.array([p["train_flops"] for p in pts])
            ys = [np.array(p["ce"][L], dtype=float) for p in pts]
            m = np.array([y.mean() for y in ys])
            sd = np.array([y.std(ddof=1) if len(y) > 1 else 0.0 for y in ys])
            line, marker, color = styles[row]
            ax.plot(x, m, line, marker=marker, ms=3, color=color, label=name(row))
            ax.fill_between(x, m - sd, m + sd, color=color, alpha=0.15, lw=0)
            tops[row], lows = float((m + sd).max()), [*lows, float((m - sd).min())]
        cross = crossing(study, KERPLE, L) if KERPLE in study["rows"] else None
        if cross:
            ax.axvline(cross["at"] * unit_flops(study), color="grey", ls=":", lw=1)
            drawn = True
        # a row more than OFF_SCALE nats above the median row's top is left above the axis
        cap = float(np.median(list(tops.values()))) + OFF_SCALE
        off = [r for r, t in tops.items() if t > cap]
        if off:
            ax.set_ylim(min(lows) - 0.02, max(t for t in tops.values() if t <= cap) + 0.05)
            # one row a line, inside the panel (a long line would push the panels apart)
            ax.text(0.02, 0.97, "above the axis:\n" + "\n".join(
                        f"{name(r)} (up to {tops[r]:.2f})" for r in off),
                    transform=ax.transAxes, fontsize=FONT_PT, va="top")
            ax.set_ylim(top=ax.get_ylim()[1] + 0.03 * (len(off) + 1))
        ax.set(xscale="log", xlabel="training FLOPs (budget)", ylabel=f"CE at {L} (nats)",
               title=f"length {L}")
        ax.set_xticks([b * unit_flops(study) for b in budgets(study)],
                      [f"{b}×" for b in budgets(study)])
        ax.minorticks_off()
        ax.tick_params(labelsize=FONT_PT)
    return drawn


def line_styles(rows) -> dict[str, tuple[str, str, str]]:
    """``{row: (line style, marker, colour)}`` in the order the legend lists them: the
    baselines dashed with squares, the rows with the CAT's kernel solid with dots, the other
    rows of the CAT's block (controls, learned biases, FoX) dotted with triangles. Colours
    run on from group to group, so that no two rows of one group share one (the cycle has
    ten; thirteen rows had put two baselines in one green)."""
    order = list(SCALE_ROWS)
    groups = ([r for r in rows if r in BASELINE_ROWS], [r for r in rows if r in CAT_ROWS],
              [r for r in rows if r not in BASELINE_ROWS and r not in CAT_ROWS])
    out, k = {}, 0
    for (line, marker), group in zip((("--", "s"), ("-", "o"), (":", "^")), groups):
        for r in sorted(group, key=lambda r: order.index(r) if r in order else len(order)):
            out[r], k = (line, marker, f"C{k % 10}"), k + 1
    return out


def crossing_caption(crossed: bool) -> str:
    """The figure caption's last sentence, from what :func:`draw` drew: the dotted line only
    where it is there."""
    if crossed:
        return ("The dotted line marks where the KERPLE-prior CAT crosses the best baseline: "
                "the budget at which the verdict changes, called on both sides.")
    return ("No line marks a crossing: over these budgets the KERPLE-prior CAT does not cross "
            "the best baseline with the order called on both sides.")
