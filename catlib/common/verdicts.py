"""Verdicts in sentences a person would write: which of two rows is lower, where, by how much,
and whether the difference is called.

Every comparison of two rows in the book (chapters 8 and 10, the intro, the README) starts
from the same numbers, a difference of cross-entropies per seed and length, ``diff[s, i] =
CE(first) − CE(second)`` for seed ``s`` at ``lengths[i]``, and says it with :func:`verdict`:

- where the lengths agree, one sentence naming the leading row once, with a range over
  lengths: "the ALiBi baseline leads at every length, by 0.12-0.14 nats, called (95 %
  interval excludes zero).";
- where they disagree, one sentence naming each row once with the lengths where it is
  lower ("the X is lower at 128 and 512, by ...; the Y at 1024, by ..."), a tie as "level"
  and a length without a number as "not measured at 5000", or a small table
  (:func:`verdict_table`) where a block of text has room for one.

One rule calls a difference, for every verdict, crossing, "lowest row" and target of the
book (:func:`called`): the 95 % interval of the mean paired difference,
``mean ± sqrt((t(0.975, n−1) · sd / sqrt(n))² + (t(0.975, m−1) · w)²)`` over ``n`` seeds
with the window-sampling error ``w`` of the mean difference over ``m`` windows
(:func:`interval`), excludes zero. With one seed, a NaN, or a window error that is not
known, no interval can be formed and the difference is "not called", never "beyond". Its
counterpart says two rows are alike (:func:`equivalent`): "the same within 0.02" where the
90 % interval lies inside ±:data:`MARGIN`; :func:`reading` gives both in the book's words,
so that "not called" is never read as "the same". The rebuild spread (what a rebuild on
another CPU kernel dispatch moved a row by, ``results/rebuild_spread_<profile>.json``) is no
floor: a rebuild changes a run's trajectory as a seed does, and the seeds measure that; a
chapter may state it beside the verdict. :func:`prose_problems` is the test the generated
sentences pass.

It sits in ``common`` because chapter 10's ``experiment.frontier.who_wins`` and the book's
pages both use it.
"""
from __future__ import annotations

import re

import numpy as np

# The limits of a readable verdict (issue 41): a sentence, and a run of bold text.
MAX_SENTENCE_WORDS = 60
MAX_BOLD_WORDS = 25
# The words of the rule (:func:`called`).
CALLED = "called (95 % interval excludes zero)"
NOT_CALLED = "not called"
# The quantiles of the rule: 97.5th percentiles for the 95 % interval that calls a
# difference, 95th for the 90 % interval of an equivalence ("the same within δ", TOST at 5 %).
Z975, Z95 = 1.959964, 1.644854
# t(0.975, df) and t(0.95, df) for df = 1..30; beyond, their Cornish-Fisher expansion.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782,
       1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711,
       1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
_QUANTILES = {0.95: (Z975, T975), 0.90: (Z95, T95)}      # interval level -> (normal, t table)
# The equivalence margin δ (nats): two rows are "the same within δ" where the 90 % interval
# of their mean paired difference lies inside ±δ.
MARGIN = 0.02
# The words of :func:`reading`; "the same within δ" is :func:`same_words`.
AHEAD, BEHIND, NOT_RESOLVED = "ahead", "behind", "not resolved"


def t_quantile(df: int, level: float = 0.95) -> float:
    """The quantile of Student's t with ``df`` degrees of freedom that bounds a two-sided
    ``level`` interval (0.95: the 97.5th percentile; 0.90: the 95th), three decimals; NaN
    for fewer than one degree of freedom (no interval)."""
    if level not in _QUANTILES:
        raise ValueError(f"level {level} has no quantile table: use 0.95 or 0.90")
    z, table = _QUANTILES[level]
    if not df >= 1:                      # NaN or < 1: no interval
        return float("nan")
    df = int(df)
    if df <= len(table):
        return table[df - 1]
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def unpaired_error_bound(se_a, se_b) -> np.ndarray:
    """A loose upper bound on the window-sampling error of a mean paired difference per
    length, from each row's own standard error ``[seeds, lengths]`` where the per-window
    CEs are not at hand (else :func:`paired_window_error`): ``sqrt(se_a² + se_b²)`` per
    seed, the error as if the rows read independent windows (they read the same ones, so
    their errors are positively correlated and the paired difference's error is smaller),
    averaged over the seeds (they read the same windows too, so the error of their mean does
    not shrink with their number, and the mean of the seeds' errors bounds it)."""
    return np.sqrt(np.square(np.asarray(se_a, dtype=float))
                   + np.square(np.asarray(se_b, dtype=float))).mean(0)


def paired_window_error(first, second) -> float:
    """The window-sampling error of the mean paired difference CE(first) − CE(second) from
    each window's CE, ``[windows]`` or ``[seeds, windows]`` (averaged over the seeds first:
    every seed reads the same windows): the standard deviation over the windows of the
    difference over sqrt(windows). The rows read the same windows, so what makes a window
    hard for both cancels. Its degrees of freedom are windows − 1 (:func:`interval`'s
    ``window_df``). NaN where the rows read different numbers of windows or fewer than two."""
    a, b = (np.asarray(x, dtype=float) for x in (first, second))
    a, b = (x.mean(0) if x.ndim == 2 else x for x in (a, b))
    if a.shape != b.shape or len(a) < 2:
        return float("nan")
    d = a - b                                                   # [windows]
    return float(d.std(ddof=1) / np.sqrt(len(d)))


def _quantiles(df, shape, level: float) -> np.ndarray:
    """The window term's quantile per length: normal where ``df`` is None (a term from
    hundreds of windows, the old calls), else t(df) per length (NaN df: no interval)."""
    if df is None:
        return np.full(shape, _QUANTILES[level][0])
    df = np.broadcast_to(np.asarray(df, dtype=float), shape)
    return np.array([t_quantile(d, level) for d in df.ravel()]).reshape(shape)


def interval(diff, window=None, window_df=None, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per length, the mean over seeds of ``diff`` ``[seeds, lengths]`` and the half-width of
    its ``level`` interval (95 %: the rule that calls; 90 %: :func:`equivalent`),
    ``sqrt((t(n−1) · sd / sqrt(n))² + (t(window_df) · w)²)``: ``sd`` the standard deviation
    over the ``n`` seeds, ``w`` = ``window`` the window-sampling standard error of the mean
    paired difference at each length (None: the differences hold no window sampling, 0;
    NaN: unknown, no interval; from the per-window CEs: :func:`paired_window_error`; a row's
    own errors only: :func:`unpaired_error_bound`). The two errors are independent (every
    seed reads the same windows, so the spread over seeds holds none of the windows'
    sampling) and each has its own quantile: Student's t on seeds − 1 degrees of freedom,
    and on ``window_df`` (windows − 1, per length or one number) for the windows; None: the
    normal quantile, for a term from hundreds of windows. The half-width is NaN where no
    interval can be formed (one seed, an unknown window term)."""
    diff = np.asarray(diff, dtype=float)
    n, mean = len(diff), diff.mean(0)
    if n < 2:
        return mean, np.full(mean.shape, np.nan)
    w = np.zeros(mean.shape) if window is None else np.asarray(window, dtype=float)
    seeds_half = t_quantile(n - 1, level) * np.sqrt(diff.var(0, ddof=1) / n)
    return mean, np.hypot(seeds_half, _quantiles(window_df, mean.shape, level) * w)


def called(diff, window=None, window_df=None) -> np.ndarray:
    """Per length, whether the difference ``diff`` ``[seeds, lengths]`` (the same seeds, the
    same windows for both rows) is called: its 95 % interval (:func:`interval`) excludes
    zero. False where no interval can be formed (one seed, a NaN, an unknown window term)."""
    mean, half = interval(diff, window, window_df)
    with np.errstate(invalid="ignore"):
        return np.abs(mean) > half       # a NaN on either side compares False


def equivalent(diff, window=None, margin: float = MARGIN, window_df=None) -> np.ndarray:
    """Per length, whether the two rows of ``diff`` ``[seeds, lengths]`` are the same within
    ``margin`` nats: the 90 % interval of the mean paired difference (:func:`interval` at
    90 %, two one-sided tests at 5 %) lies inside ±``margin``. False where no interval can
    be formed (one seed, a NaN, an unknown window term): "not called" is never "the same"."""
    mean, half = interval(diff, window, window_df, level=0.90)
    with np.errstate(invalid="ignore"):
        return (mean - half > -margin) & (mean + half < margin)


def same_words(margin: float = MARGIN) -> str:
    """The words of an equivalence: "the same within 0.02"."""
    return f"the same within {margin:g}"


def reading(diff, window=None, margin: float = MARGIN, window_df=None) -> list[str]:
    """Per length, the book's words for ``diff`` ``[seeds, lengths]`` = CE(rival) − CE(row)
    (> 0: the row is lower): :data:`AHEAD` or :data:`BEHIND` where the difference is called
    (:func:`called`), :func:`same_words` where the rows are equivalent within ``margin``
    (:func:`equivalent`), "ahead, by less than 0.02" (or behind) where both hold, and
    :data:`NOT_RESOLVED` where neither does (few seeds, a wide interval, an unknown window
    term)."""
    mean = np.asarray(diff, dtype=float).mean(0)
    real, same = called(diff, window, window_df), equivalent(diff, window, margin, window_df)
    out = []
    for m, r, e in zip(mean, real, same):
        side = AHEAD if m > 0 else BEHIND
        out.append(f"{side}, by less than {margin:g}" if r and e else side if r
                   else same_words(margin) if e else NOT_RESOLVED)
    return out


LEVEL = "level"          # a tie, in :func:`lower_row`'s words


def lower_row(mean: float, first: str, second: str) -> str | None:
    """Which of two rows is lower where CE(first) − CE(second) = ``mean``: ``first``,
    ``second``, :data:`LEVEL` for a tie, None for a NaN (not measured)."""
    if not np.isfinite(mean):
        return None
    return LEVEL if mean == 0 else second if mean > 0 else first


def verdict(diff, lengths, first: str, second: str, rebuild: float | None = None,
            window=None, window_df=None) -> str:
    """One sentence on ``diff`` = CE(``first``) − CE(``second``) per seed ``[seeds, lengths]``
    (see the module's docstring); each row named at most once; a tie "level", a NaN "not
    measured". ``window``: the window-sampling error of the mean difference per length,
    ``window_df`` its degrees of freedom (:func:`interval`). ``rebuild`` is no longer part of the rule (the module's docstring);
    it is accepted so that calls written for the old rule keep working."""
    diff = np.asarray(diff, dtype=float)
    mean, real = diff.mean(0), called(diff, window, window_df)
    lower = [lower_row(m, first, second) for m in mean]
    if all(r is None for r in lower):
        return f"not measured at {listed(lengths)}."
    noise = judged(*zip(*[(c, L) for c, L, r in zip(real, lengths, lower) if r]), len(diff))
    if len(set(lower)) == 1 and lower[0] not in (None, LEVEL):
        where = "at every length" if len(lengths) > 1 else f"at {lengths[0]}"
        return f"{subject(lower[0])} leads {where}, by {nats_range(np.abs(mean))} nats, {noise}."
    parts = []
    for row in dict.fromkeys(lower):
        at = listed([L for L, r in zip(lengths, lower) if r == row])
        if row is None:
            parts.append(f"not measured at {at}")
        elif row == LEVEL:
            parts.append(f"level at {at}")
        else:
            by = nats_range(np.abs([m for m, r in zip(mean, lower) if r == row]))
            parts.append(f"{subject(row)}{'' if parts else ' is lower'} at {at}, by {by} nats")
    return f"{'; '.join(parts)}; {noise}."


def verdict_table(diff, lengths, first: str, second: str, rebuild: float | None = None,
                  window=None, window_df=None) -> str:
    """The same verdict as a small Markdown table: per length, the lower row ("level",
    "not measured"), by how much, and whether the difference is called (:func:`called`)."""
    diff = np.asarray(diff, dtype=float)
    mean, real = diff.mean(0), called(diff, window, window_df)
    lines = ["| length | lower | by (nats) | called (95 % interval excludes zero) |",
             "|---:|---|---:|---|"]
    for L, m, r in zip(lengths, mean, real):
        row = lower_row(m, first, second)
        lines.append(f"| {L} | {row or 'not measured'} | {'–' if row is None else f'{abs(m):.3f}'} "
                     f"| {'yes' if r else 'no'} |")
    return "\n".join(lines)


def subject(label: str) -> str:
    """A row's label as the subject of a sentence: "the ALiBi baseline, CAT's compute as
    steps," (a label with a comma is closed by one)."""
    return f"the {label}," if "," in label else f"the {label}"


def nats_range(values) -> str:
    """"0.12-0.14" (two decimals; three where the smallest is below 0.1), or one number;
    "up to 0.012" where the smallest rounds to zero, "less than 0.001" where both do
    (:func:`size_words`), never a signed zero. NaNs are left out (the callers say where)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    lo, hi = float(np.min(values)), float(np.max(values))
    digits = 3 if lo < 0.1 else 2
    a, b = size_words(lo, digits), size_words(hi, digits)
    if a == b:
        return a
    return f"up to {b}" if a.startswith("less than") else f"{a}-{b}"


def size_words(x: float, digits: int = 3) -> str:
    """A size (nats) with ``digits`` decimals, or in words where it rounds to zero: "0.012",
    "less than 0.001" (never "0.000" or "-0.000")."""
    x = abs(float(x))
    return f"{x:.{digits}f}" if round(x, digits) else f"less than {10.0 ** -digits:.{digits}f}"


def change_words(x: float, digits: int = 4) -> str:
    """A signed change (nats) for a sentence "moves by ... nats": "+0.0123", "-0.0040", or
    "less than 0.0001" where it rounds to zero (never a signed zero such as "-0.0000")."""
    return f"{x:+.{digits}f}" if round(float(x), digits) else size_words(x, digits)


def window_error(reads: dict, se: dict) -> str:
    """What text each CE of a table reads and the standard error that window sampling leaves
    on it (its range over the rows and seeds shown), in a sentence or two.

    ``reads`` ``{split: {"windows": {length: n}, "span": characters | None, "every": bool}}``,
    one entry per split the rows were trained on: ``span``, the characters every length reads
    under the book's protocol (:mod:`catlib.measure.evaluate`; None: the published protocol,
    the first windows at each length, or with ``every`` every window of the split).
    ``se`` ``{length: [standard errors]}`` (NaN: not scored, left out). The differences
    between rows are called paired only where every row reads the same windows of one split.
    """
    clauses = [_reads(split, r, se) for split, r in reads.items()]
    if len(clauses) == 1:
        return f"{clauses[0]}; every row reads the same windows, so the differences between rows are paired."
    return (" ".join(f"Rows on the {split} split: {c[0].lower()}{c[1:]}." for split, c
                     in zip(reads, clauses))
            + " The differences between rows are paired only within a split.")


def _reads(split: str, read: dict, se: dict) -> str:
    """One clause of :func:`window_error` for the rows of one split."""
    span, parts = read.get("span"), []
    for L, n in read["windows"].items():
        values = [v for v in np.ravel(np.asarray(se.get(L, []), dtype=float)) if np.isfinite(v)]
        if n == 1:
            error = " (one window: no standard error)"
        else:
            error = f" (standard error {nats_range(values)} nats)" if values else ""
        of = f" of {span // L}" if span and n < span // L else ""
        parts.append(f"{n}{of}{' windows' if not parts else ''} at {L}{error}")
    if span:
        spread = any(n < span // L for L, n in read["windows"].items())
        return (f"Every length reads the same {span:,} characters of the validation split"
                f"{', windows spread evenly over them' if spread else ''}: {listed(parts)}")
    where = "every window" if read.get("every") else "the first windows"
    return f"Each CE reads {where} of the validation split, {listed(parts)}"


def listed(values) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


def times_listed(budgets) -> str:
    """Budgets as multiples in words: "1×, 2× and 4×"."""
    return listed([f"{b}×" for b in budgets])


def called_words(cells) -> str:
    """Whether a clause's margins are called, from its cells ``[(budget, length, called)]``:
    "called", "not called", "called at 2× only", "called except at 128 at 1×" (whichever
    names fewer cells; a budget is named whole where all its cells agree)."""
    yes = [c for c in cells if c[2]]
    if len(yes) == len(cells):
        return "called"
    if not yes:
        return NOT_CALLED
    no = [c for c in cells if not c[2]]
    few, form = (yes, "called at {} only") if len(yes) <= len(no) else (no, "called except at {}")
    named: dict[tuple, list] = {}      # the lengths named at a budget (none: all) -> budgets
    for b in dict.fromkeys(c[0] for c in cells):
        mine, every = [c[1] for c in few if c[0] == b], [c[1] for c in cells if c[0] == b]
        if mine:
            named.setdefault(() if mine == every else tuple(mine), []).append(b)
    return form.format(listed([f"{listed(ls)} at {times_listed(bs)}" if ls else times_listed(bs)
                               for ls, bs in named.items()]))


def judged(real, lengths, seeds: int) -> str:
    """Whether the difference is called (:func:`called`, per length ``real``), in words:
    :data:`CALLED`, "not called", or called at some lengths only; one seed: not called,
    for want of an interval."""
    if seeds < 2:
        return f"{NOT_CALLED} (one seed: no interval)"
    if np.all(real):
        return CALLED
    if not np.any(real):
        return f"{NOT_CALLED} (95 % interval includes zero)"
    return f"{CALLED} at {listed([L for L, r in zip(lengths, real) if r])} only"


def sentences(text: str) -> list[str]:
    """``text`` split into sentences (at ". ", "? ", "! " before a capital, a link or
    emphasis, after a bold lead-in ending in a full stop, and at every line break);
    Markdown table rows are left out."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("|")]
    parts = re.split(r"(?<=[.?!])\s+(?=[A-Z*_`\[(])|(?<=[.?!]\*\*)\s+|\n", "\n".join(lines))
    return [p.strip() for p in parts if p.strip()]


def prose_problems(text: str, labels, bold: bool = False) -> list[str]:
    """What makes ``text`` hard to read as a verdict: a row label twice in one sentence, a
    sentence over :data:`MAX_SENTENCE_WORDS` words, a bold run (``**...**``, or the whole
    text where ``bold``: ``{glue:text}`` sets pasted text in bold) over
    :data:`MAX_BOLD_WORDS` words. Labels are matched longest first, so "ALiBi baseline"
    does not count inside "ALiBi baseline, CAT's compute as steps"."""
    problems = []
    pattern = re.compile("|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True)))
    for s in sentences(text):
        found = [m.group(0) for m in pattern.finditer(s)] if labels else []
        twice = sorted({x for x in found if found.count(x) > 1})
        if twice:
            problems.append(f"{', '.join(repr(x) for x in twice)} named "
                            f"{max(found.count(x) for x in twice)} times in: {s!r}")
        if len(s.split()) > MAX_SENTENCE_WORDS:
            problems.append(f"a sentence of {len(s.split())} words: {s!r}")
    runs = [text] if bold else re.findall(r"\*\*(.+?)\*\*", text, re.DOTALL)
    problems += [f"a bold run of {len(r.split())} words: {r!r}" for r in runs
                 if len(r.split()) > MAX_BOLD_WORDS]
    return problems


def short_lead(mean_diff, first: str, second: str) -> str:
    """A clause short enough for a bold paste: who leads at every length and by how much,
    from the mean difference per length ``mean_diff`` = CE(second) − CE(first) (> 0:
    ``first`` is lower); a tie is "level" ("the two are level at every length", "... leads
    by up to 0.050 nats, level at one length"), a NaN "not measured"; "the lead changes
    sides between lengths" only where both rows lead somewhere."""
    d = np.asarray(mean_diff, dtype=float)
    unmeasured = int((~np.isfinite(d)).sum())
    d = d[np.isfinite(d)]
    level = int((d == 0).sum())
    if not len(d):
        return "not measured at any length"
    if (d > 0).any() and (d < 0).any():
        text = "the lead changes sides between lengths"
    elif level == len(d):
        text = "the two are level at every length"
    else:
        who, by = (first, d) if (d > 0).any() else (second, -d)
        text = f"{who} leads at every length, by {nats_range(by)} nats"
        if level:
            text = f"{who} leads by {nats_range(by[by > 0])} nats, level at {_count(level)}"
    return text + (f", not measured at {_count(unmeasured)}" if unmeasured else "")


def _count(n: int) -> str:
    return "one length" if n == 1 else f"{n} lengths"
