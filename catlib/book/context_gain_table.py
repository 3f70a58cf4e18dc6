"""The context gain beyond the training length as chapters 6, 8, 9 and 10 show it.

A fall of CE from the training length to a longer one is not evidence that a model reads
further back: a longer window also spares more of its targets the start of a window, where
context is short. The context gain is (:mod:`catlib.measure.context_gain`): the same
targets, those past the training length ``T`` in windows of the longest length, read once
with every earlier character of the window and once with at most ``T`` of them. A row
"uses context beyond its training length" only where that gain is called above zero
(:func:`~catlib.measure.context_gain.uses_context_beyond`: its 95 % interval over seeds
and windows lies above zero); where the interval lies below zero, more context costs it;
otherwise the question is not resolved. :func:`gain_reading` says which (:func:`gain_words`
in a clause on one row), :func:`gain_table` gives a chapter its table, :func:`gain_sentence`
the sentence that names the rows, and :func:`gain_figure` draws both readings per position
(chapter 9).
"""
from __future__ import annotations

import math

import numpy as np

from ..common.formatting import fixed, md_table, signed
from ..experiment.gain_runs import RowGain
from ..measure.context_gain import gain_interval, uses_context_beyond

USES = "uses context beyond its training length"
COSTS = "does not use context beyond its training length: more context costs it"
NOT_RESOLVED = "not resolved"


def gain_reading(gains) -> str:
    """What the gain ``[seeds, windows]`` (the same windows for every seed) says, in words:
    :data:`USES` only where it is called above zero, :data:`COSTS` where it is called below
    zero, else :data:`NOT_RESOLVED` with the reason (its interval holds zero, or no interval
    can be formed from one seed or one window)."""
    gains = np.asarray(gains, dtype=float)
    mean, half = gain_interval(gains)
    if uses_context_beyond(gains):
        return USES
    if mean + half < 0:
        return COSTS
    if not math.isfinite(half):
        why = "one seed" if gains.shape[0] < 2 else "one window"
        return f"{NOT_RESOLVED} ({why}: no interval)"
    return f"{NOT_RESOLVED} (its interval holds zero)"


def gain_cell(gains) -> str:
    """The gain's mean and the half-width of its 95 % interval, "+0.0042 ± 0.0031" (the mean
    alone, "(no interval)", where none can be formed)."""
    return gain_text(*gain_interval(gains))


def gain_text(mean: float, half: float) -> str:
    """A context gain and its 95 % half-width as every page writes them, to four decimals:
    "+0.0042 ± 0.0031" (a gain is a few ten-thousandths of a nat where there is none to
    read); the mean alone, "(no interval)", where none can be formed."""
    return f"{signed(mean, 4)} ± {fixed(half, 4)}" if math.isfinite(half) else \
        f"{signed(mean, 4)} (no interval)"


def gain_table(gains: dict[str, RowGain]) -> str:
    """A Markdown table of each row's context gain (``{label: RowGain}``), with a sentence
    under it saying what was read: CE of the targets read in full and by the sliding window
    (mean over seeds and windows), the gain with its 95 % interval, and its reading."""
    if not gains:
        return "No causal row of this page is scored beyond its training length."
    rows = [[label, f"{g.gain.shape[0]} × {g.windows}", f"{g.full.mean():.4f}",
             f"{g.sliding.mean():.4f}", gain_cell(g.gain), gain_reading(g.gain)]
            for label, g in gains.items()]
    first = next(iter(gains.values()))
    T = first.train_length
    header = ["row", "seeds × windows", "CE, every earlier character", f"CE, at most {T}",
              "gain (95 % interval)", "reading"]
    return md_table(header, rows, "lrrrrl") + "\n\n" + _what_was_read(gains)


def _what_was_read(gains: dict[str, RowGain]) -> str:
    """The sentence under :func:`gain_table`: the targets, the windows and the two readings
    (one clause per distinct setting among the rows)."""
    settings = sorted({(g.train_length, g.length, g.stride, g.windows, g.span_windows)
                       for g in gains.values()})
    clauses = []
    for T, L, stride, n, tiles in settings:
        windows = f"all {tiles}" if n == tiles else f"{n} of the {tiles}"
        clauses.append(f"the targets at positions {T} to {L - 1} of {windows} windows of {L} "
                       f"characters that tile the span, read once with every earlier character "
                       f"of the window and once with at most {T} (a window of {T} slid by "
                       f"{stride}: each target reads {T - stride + 1} to {T} characters)")
    return ("Read: " + "; ".join(clauses) + ". The gain is CE(at most the training length) − "
            "CE(every earlier character), its interval over seeds and windows (95 %); a row is "
            "said to read usefully beyond its training length only where that interval lies "
            "above zero.")


def gain_words(label: str, gains) -> str:
    """A clause on one row's gain ``[seeds, windows]``: "the X uses context beyond its
    training length (gain +0.0042 ± 0.0031)" only where it is called above zero; else that
    more context costs it, or that it is not shown to read usefully beyond it."""
    reading, cell = gain_reading(gains), gain_cell(gains)
    if reading == USES:
        return f"the {label} {USES} (gain {cell})"
    if reading == COSTS:
        return f"the {label} {COSTS} (gain {cell})"
    why = reading.removeprefix(NOT_RESOLVED).strip(" ()")
    return f"the {label} is not shown to read usefully beyond its training length (gain {cell}, {why})"


def beyond_clauses(names: dict[str, str], gains: dict[str, RowGain], seq: int) -> str:
    """The sentence that follows a change of CE with length (chapter 10): whether each row of
    ``names`` (``{label: the name shown}``) reads beyond its training length ``seq`` is the
    context gain's question, one clause a row (:func:`gain_words`)."""
    clauses = "; ".join(gain_words(shown, gains[label].gain) for label, shown in names.items())
    return (f" Whether a row reads beyond its training length is the context gain's question "
            f"(the same targets past {seq} read with every earlier character and with at most "
            f"{seq}): {clauses}.")


def gain_sentence(gains: dict[str, RowGain]) -> str:
    """One sentence naming the rows by what their gain says (``{label: RowGain}``): those
    called above zero as the rows that use context beyond their training length, then
    those called below zero and those not resolved."""
    if not gains:
        return "No row is scored beyond its training length."
    # Labels in italics: some hold a comma ("KERPLE-prior CAT, ODE-consistent").
    by = {f"*{label}*": gain_reading(g.gain) for label, g in gains.items()}
    users = [f"{label} ({gain_cell(g.gain)})" for (label, r), g in zip(by.items(), gains.values())
             if r == USES]
    costs = [label for label, r in by.items() if r == COSTS]
    open_ = [label for label, r in by.items() if r.startswith(NOT_RESOLVED)]
    said = ("Rows that use context beyond their training length (their context gain called "
            f"above zero): {', '.join(users)}" if users else
            "No row's context gain beyond the training length is called above zero: no row is "
            "shown to read usefully beyond it")
    if costs:
        said += f"; called below zero (more context costs them): {', '.join(costs)}"
    if open_:
        said += f"; not resolved: {', '.join(open_)}"
    return said + "."


def log_position_bins(positions: np.ndarray, first: int, per_decade: int = 12):
    """``(centres, means)`` of ``positions`` (CE at positions ``first``, ``first + 1``, ...)
    in bins spaced evenly in log position, for a curve on a log axis."""
    values = np.asarray(positions, dtype=float)
    last = first + len(values)
    n = max(2, math.ceil(math.log10(last / first) * per_decade) + 1)
    edges = np.unique(np.round(np.geomspace(first, last, n)).astype(int))
    centres = np.sqrt(edges[:-1] * edges[1:])
    means = np.array([values[a - first:b - first].mean() for a, b in zip(edges[:-1], edges[1:])])
    return centres, means


def gain_figure(gains: dict[str, RowGain], cols: int = 4):
    """A figure of one panel per row of ``gains`` (``{label: RowGain}``, ``cols`` panels a
    line): CE per position from the training length on, read with every earlier character
    (solid) and with at most the training length (dashed), each the mean over seeds and
    windows, binned in log position; each title gives the row's gain. None for no rows."""
    import matplotlib.pyplot as plt

    if not gains:
        return None
    lines = -(-len(gains) // cols)
    fig, axes = plt.subplots(lines, cols, figsize=(3 * cols, 2.5 * lines), squeeze=False)
    for ax, (label, g) in zip(axes.flat, gains.items()):
        for key, style, colour, name in (
                ("full_positions", "-", "C0", "every earlier character"),
                ("sliding_positions", "--", "C3", f"at most {g.train_length}")):
            x, y = log_position_bins(getattr(g, key).mean(0), g.train_length)
            ax.plot(x, y, style, color=colour, lw=1.2, label=name)
        ax.set_xscale("log")
        ticks = sorted({g.train_length, g.length, *[g.train_length * 4 ** k for k in range(1, 8)
                                                     if g.train_length * 4 ** k < g.length]})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_title(f"{label}\ngain {gain_cell(g.gain)}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(gains):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("CE (nats)", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("position (log scale)", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig
