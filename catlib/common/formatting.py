"""Numbers and tables for the book's pages: formatting, Markdown tables, glue-ready objects.

The notebooks build their result tables with these helpers instead of formatting by hand:

- :func:`mean_std` over seeds, :func:`pm` / :func:`pm_over` for "mean ± std" cells
  (non-breaking spaces, so a cell never wraps between a number and its error);
- :func:`fixed` and :func:`signed`: a fixed number of decimals, or one significant digit
  when the number would print as 0.000 (a tiny difference stays visible and honest);
- :func:`number`: a few significant digits, scientific outside [1e-3, 1e5);
- :func:`md_table`: a Markdown (pipe) table with per-column alignment and escaped cells;
- :func:`markdown`: an ``IPython.display.Markdown`` object. myst-nb renders Markdown
  outputs itself, and ``glue(key, markdown(text), display=False)`` makes the text
  available to other pages (``{glue:md}`` directive, ``:format: myst``); no HTML
  conversion is needed. The page's ``render_markdown_format`` must allow tables
  (``myst`` or ``gfm``; myst-nb's default, ``commonmark``, has no tables).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

NBSP = "\u00a0"
MINUS = "\u2212"   # typographic minus, for prose ("baseline − CAT")
ALIGN = {"l": "---", "r": "---:", "c": ":-:"}


def mean_std(values, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation (ddof 1) along ``axis`` (seeds); std 0 for one sample."""
    a = np.asarray(values, dtype=float)
    n = a.shape[axis]
    if n == 0:
        raise ValueError("mean_std needs at least one value along the axis")
    std = a.std(axis=axis, ddof=1) if n > 1 else np.zeros_like(a.mean(axis=axis))
    return a.mean(axis=axis), std


def fixed(x: float, digits: int = 3, sign: bool = False) -> str:
    """``x`` with ``digits`` decimals, or one significant digit when that would print as 0.

    fixed(0.1234) -> "0.123"; fixed(3.7e-5) -> "4e-05"; fixed(0.0) -> "0.000";
    with ``sign``: "+0.123", "-4e-05". NaN and infinities print as "nan", "inf".
    """
    x = float(x)
    plus = "+" if sign else ""
    if not math.isfinite(x):
        return f"{x:{plus}}"
    if x == 0 or abs(x) >= 0.5 * 10 ** -digits:
        return f"{x:{plus}.{digits}f}"
    return f"{x:{plus}.0e}"


def signed(x: float, digits: int = 3) -> str:
    """A signed difference: "+0.012", "-0.300", or "+4e-07" when it would round to 0."""
    return fixed(x, digits, sign=True)


def differ_by_at_most(x: float) -> str:
    """The largest difference of two things, for a sentence about them: "are identical
    (they differ by 0)" where it is exactly zero (never "0.0e+00"), else "differ by at most
    3.2e-07" (two significant digits, scientific below 1e-3)."""
    x = abs(float(x))
    return "are identical (they differ by 0)" if x == 0 else f"differ by at most {number(x, 2)}"


def percent(x: float) -> str:
    """A fraction as a whole percentage, "41%"; "–" for nan (nothing to divide by)."""
    return f"{x:.0%}" if math.isfinite(x) else "–"


def number(x: float, sig: int = 3) -> str:
    """``sig`` significant digits; scientific notation below 1e-3 and from 1e5 (0 -> "0")."""
    x = float(x)
    if not math.isfinite(x):
        return f"{x}"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e5:
        decimals = max(0, sig - 1 - math.floor(math.log10(abs(x))))
        return f"{x:.{decimals}f}"
    return f"{x:.{sig - 1}e}"


def pm(mean: float, std: float | None = None, digits: int = 3, sign: bool = False) -> str:
    """"mean ± std" joined by non-breaking spaces; just the mean when ``std`` is None."""
    m = fixed(mean, digits, sign)
    if std is None:
        return m
    return f"{m}{NBSP}±{NBSP}{fixed(std, digits)}"


def pm_over(values: Iterable[float], digits: int = 3, sign: bool = False) -> str:
    """"mean ± std" of per-seed ``values`` (sample std); the value alone for one seed."""
    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        raise ValueError("pm_over needs at least one value")
    m, s = mean_std(a)
    return pm(float(m), float(s) if a.size > 1 else None, digits, sign)


def md_escape(cell) -> str:
    """A table cell: ``str(cell)`` with pipes escaped and line breaks turned into spaces."""
    text = str(cell).replace("\r", " ").replace("\n", " ")
    return text.replace("\\|", "|").replace("|", "\\|")


def md_table(header: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> str:
    """A Markdown pipe table.

    ``align``: one letter per column, ``l`` (left), ``r`` (right) or ``c`` (centre);
    default: left. Every row must have as many cells as the header.
    """
    header = [md_escape(h) for h in header]
    align = align or "l" * len(header)
    if len(align) != len(header) or set(align) - set(ALIGN):
        raise ValueError(f"align must be {len(header)} letters from 'lrc', got {align!r}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(ALIGN[a] for a in align) + "|"]
    for i, row in enumerate(rows):
        cells = [md_escape(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"row {i} has {len(cells)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(text: str):
    """``IPython.display.Markdown(text)``: shown by ``display`` and pasted by myst-nb's glue."""
    from IPython.display import Markdown
    return Markdown(text)


class Plain:
    """Text whose ``repr`` is the text itself: glued for ``{glue:text}`` on another page
    (a glued ``str`` would show its quotes there; ``{glue:md}`` cannot reach another page)."""

    def __init__(self, text: str):
        self.text = str(text)

    def __repr__(self) -> str:
        return self.text
