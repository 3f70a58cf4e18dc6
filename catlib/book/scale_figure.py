"""The intro's figure: chapter 11's answer drawn as one comparison a reader takes in at a
glance. Each row of the kernel question against the Euler CAT at 1×, CE(row) − CE(Euler
CAT) (> 0: the Euler CAT is lower), its mean over the seeds all the question's rows share
with its 95 % interval, at the training length and at the longest; one dot and whisker a
row, the rows grouped as baselines, CAT rows and learned biases, a line at zero and the
equivalence margin ±δ shaded. The numbers are the answer table's
(:func:`~catlib.book.scale_answer.kernel_question`), so the figure and the table cannot
disagree. The full frontier over budgets stays in chapter 11
(:func:`~catlib.book.scale_tables.frontier_figure`).

A row the artefact lacks is left out and named below the panels (:func:`missing_rows`); a
row far off the others' scale (RoPE at 5000) is drawn as an arrow at the panel's edge with
its number beside it, so that it does not squeeze the rest.
"""
from __future__ import annotations

import numpy as np

from ..common.verdicts import MARGIN, listed
from ..experiment.scale_plan import BASELINE_ROWS, BIAS_KERNELS, EULER, KERNEL_QUESTION_ROWS
from .locate import save_figure
from .scale_answer import QUESTION_BUDGET, kernel_question, question_seeds
from .scale_readings import lengths, name
from .scale_tables import FIGSIZE, FONT_PT, OFF_SCALE, seeds_text

# The groups, top to bottom, and the colour each is drawn in. A row of the question that is
# neither a baseline nor a learned bias (the kernel control: the Euler CAT's block with
# ALiBi's fixed bias) is a CAT row.
GROUPS = ("baselines", "CAT rows", "learned biases")
COLOURS = {"baselines": "C7", "CAT rows": "C0", "learned biases": "C1"}
ROW_IN, PANEL_IN = 0.28, 1.5      # inches a row takes, and what the axes need besides
FILE = "11_scale_against_euler.png"   # the intro's {figure} reads it from book/figures


def group_of(row: str) -> str:
    """The group ``row`` is drawn in (:data:`GROUPS`)."""
    return ("baselines" if row in BASELINE_ROWS else "learned biases" if row in BIAS_KERNELS
            else "CAT rows")


def compared_rows(study: dict) -> list[dict]:
    """The rows the figure draws, top to bottom: each of :func:`kernel_question`'s rivals of
    the Euler CAT (``{"row", "lead", "half", "words", "gain"}``, lead = CE(row) − CE(Euler
    CAT) per length, half its 95 % half-width) with its ``"group"``, grouped in the order of
    :data:`GROUPS` and, within a group, in the question's order. [] where the study lacks
    the Euler CAT or a seed every row shares."""
    found = [{**f, "group": group_of(f["row"])} for f in kernel_question(study)[1:]]
    return sorted(found, key=lambda f: GROUPS.index(f["group"]))       # a stable sort


def missing_rows(study: dict) -> list[str]:
    """The rows of the kernel question the artefact lacks (the Euler CAT included)."""
    return [r for r in KERNEL_QUESTION_ROWS if r not in study["rows"]]


def _positions(found: list[dict]) -> tuple[list[float], list[tuple[float, str]]]:
    """``(y per row, [(y, group)] of each group's heading)``, top to bottom from 0 down,
    a heading line above each group's rows."""
    ys, heads, y, last = [], [], 0.0, None
    for f in found:
        if f["group"] != last:
            heads.append((y, f["group"]))
            y, last = y - 1, f["group"]
        ys.append(y)
        y -= 1
    return ys, heads


def intro_figure(study: dict, title: str = ""):
    """The figure (see the module's docstring): two panels sharing the rows, the training
    length's and the longest length's. Each row is one :meth:`~matplotlib.axes.Axes.errorbar`
    labelled with its name (its whisker the 95 % interval; none where no interval can be
    formed, one seed); the rows the artefact lacks are named below the panels."""
    import matplotlib.pyplot as plt

    found, ls = compared_rows(study), lengths(study)
    ys, heads = _positions(found)
    shown = [(0, ls[0], f"at {ls[0]} characters (the training length)"),
             (len(ls) - 1, ls[-1], f"at {ls[-1]} characters")]
    with plt.rc_context({"font.size": FONT_PT}):
        height = PANEL_IN + ROW_IN * max(len(ys) + len(heads), 4)
        fig, axes = plt.subplots(1, 2, figsize=(FIGSIZE[0], height), sharey=True)
        for ax, (i, L, head) in zip(axes, shown):
            _panel(ax, found, ys, i)
            ax.set_title(head, fontsize=FONT_PT)
            ax.set_xlabel("CE(row) − CE(Euler CAT), nats\n(right of 0: the Euler CAT is lower)",
                          fontsize=FONT_PT)
        ticks = [*ys, *(y for y, _ in heads)]
        labels = [*(name(f["row"]) for f in found), *(g for _, g in heads)]
        axes[0].set_yticks(ticks, labels)
        for label, y in zip(axes[0].get_yticklabels(), ticks):
            if y in {h for h, _ in heads}:
                label.set_fontweight("bold")
        axes[0].set_ylim(min(ticks, default=-1) - 0.7, 0.7)
        for ax in axes:
            ax.tick_params(axis="y", length=0)
            ax.grid(axis="y", visible=False)
        note = _note(study, found)
        if note:
            fig.text(0.01, 0.01, note, fontsize=FONT_PT, va="bottom")
        if title:
            fig.suptitle(title, fontsize=FONT_PT + 1)
        fig.tight_layout(rect=(0, (0.3 if note else 0.0) / height, 1, 1))
    return fig


def _panel(ax, found: list[dict], ys: list[float], i: int) -> None:
    """One length (the lengths' index ``i``): the margin's band, the line at zero, a dot and
    whisker per row; a row off the others' scale as an arrow at the edge, its number
    beside it."""
    ax.axvspan(-MARGIN, MARGIN, color="0.85", lw=0, zorder=0)
    ax.axvline(0.0, color="k", lw=0.8, zorder=1)
    mean = np.array([f["lead"][i] for f in found], dtype=float)
    half = np.array([f["half"][i] for f in found], dtype=float)
    near = np.isfinite(mean) & (np.abs(mean) <= OFF_SCALE)
    reach = np.nan_to_num(np.abs(mean) + np.nan_to_num(half), nan=0.0)
    edge = 1.15 * max([MARGIN, *reach[near]])
    for f, y, m, h, ok in zip(found, ys, mean, half, near):
        colour = COLOURS[f["group"]]
        if ok:
            ax.errorbar([m], [y], xerr=None if not np.isfinite(h) else [[h], [h]], fmt="o",
                        color=colour, ms=5, capsize=3, lw=1.4, label=name(f["row"]), zorder=3)
        elif np.isfinite(m):
            side = np.sign(m)
            ax.errorbar([side * edge], [y], fmt=">" if side > 0 else "<", color=colour, ms=6,
                        label=name(f["row"]), zorder=3)
            said = f"{m:+.2f}" + (f" ± {h:.2f}" if np.isfinite(h) else "")
            ax.annotate(said, (side * edge, y), xytext=(-9 * side, 0), textcoords="offset points",
                        ha="right" if side > 0 else "left", va="center", fontsize=FONT_PT)
    ax.set_xlim(-1.25 * edge, 1.25 * edge)


def _note(study: dict, found: list[dict]) -> str:
    """The line below the panels: the rows the artefact lacks, or that it lacks the
    question."""
    gone = missing_rows(study)
    if not found:
        return "This artefact holds no rows of the kernel question beside the Euler CAT on a shared seed."
    return f"Not in this artefact: {listed([f'the {name(r)}' for r in gone])}." if gone else ""


def caption(study: dict | None) -> str:
    """The caption's sentences generated from the artefact: the margin the band shades, the
    budget and seeds the figure reads, a row drawn without an interval, the rows it lacks."""
    if study is None or EULER not in study["rows"] or not compared_rows(study):
        return "No scale study with the kernel question's rows is in results/ in this build."
    seeds, found = question_seeds(study), compared_rows(study)
    on = (f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1
          and seeds == list(range(seeds[0], seeds[-1] + 1)) else seeds_text(seeds))
    said = [f"The shaded band is the equivalence margin, ±{MARGIN:g} nats.",
            f"Read at {QUESTION_BUDGET}× on {on}, the seeds all {len(found) + 1} rows share."]
    bare = [f["row"] for f in found if not np.isfinite(np.asarray(f["half"], dtype=float)).all()]
    if bare:
        said.append(f"No whisker: no interval ({listed([f'the {name(r)}' for r in bare])}).")
    gone = missing_rows(study)
    if gone:
        said.append(f"Not in this artefact: {listed([f'the {name(r)}' for r in gone])}.")
    return " ".join(said)


def save_intro_figure(study: dict, figure_dir: str, root=None):
    """Draw :func:`intro_figure` and save it as ``figure_dir/`` :data:`FILE` for the intro
    (:func:`~catlib.book.locate.save_figure`), closed so that the chapter does not show it
    (the chapter shows the answer as its table); the path, or None where ``figure_dir`` is
    empty (nothing drawn)."""
    import matplotlib.pyplot as plt

    if not figure_dir:
        return None
    fig = intro_figure(study)
    try:
        return save_figure(fig, FILE, figure_dir, root)
    finally:
        plt.close(fig)
