"""Verdicts in sentences a person would write: which of two rows is lower, where, by how much,
and whether that is more than the noise.

Every comparison of two rows in the book (chapters 8 and 10, the intro, the README) starts
from the same numbers, a difference of cross-entropies per seed and length, ``diff[s, i] =
CE(first) − CE(second)`` for seed ``s`` at ``lengths[i]``, and says it with :func:`verdict`:

- where the lengths agree, one sentence naming the leading row once, with a range over
  lengths: "the ALiBi baseline leads at every length, by 0.12-0.14 nats, more than the
  spread over seeds and over rebuilds.";
- where they disagree, one sentence naming each row once with the lengths where it is
  lower ("the X is lower at 128 and 512, by ...; the Y at 1024, by ..."), or
  a small table (:func:`verdict_table`) where a block of text has room for one.

A difference counts (:func:`beyond_spread`) where its mean over seeds exceeds both its
standard deviation over seeds and the rebuild spread (what a rebuild on another CPU kernel
dispatch moved a row by, ``results/rebuild_spread_<profile>.json``): the rule chapter 8
states. :func:`prose_problems` is the test the generated sentences pass.

It sits in ``common`` because chapter 10's ``experiment.frontier.who_wins`` and the book's
pages both use it.
"""
from __future__ import annotations

import re

import numpy as np

# The limits of a readable verdict (issue 41): a sentence, and a run of bold text.
MAX_SENTENCE_WORDS = 60
MAX_BOLD_WORDS = 25


def beyond_spread(diff, rebuild: float | None = None) -> np.ndarray:
    """Per length, whether the mean of ``diff`` ``[seeds, lengths]`` exceeds both its
    standard deviation over seeds (none for one seed) and ``rebuild``."""
    diff = np.asarray(diff, dtype=float)
    sd = diff.std(0, ddof=1) if len(diff) > 1 else np.zeros(diff.shape[1])
    return np.abs(diff.mean(0)) > np.maximum(sd, rebuild or 0.0)


def verdict(diff, lengths, first: str, second: str, rebuild: float | None = None) -> str:
    """One sentence on ``diff`` = CE(``first``) − CE(``second``) per seed ``[seeds, lengths]``
    (see the module's docstring); each row named at most once."""
    diff = np.asarray(diff, dtype=float)
    mean, real = diff.mean(0), beyond_spread(diff, rebuild)
    lower = [second if m > 0 else first for m in mean]
    if len(set(lower)) == 1:
        where = "at every length" if len(lengths) > 1 else f"at {lengths[0]}"
        return (f"{subject(lower[0])} leads {where}, by {nats_range(np.abs(mean))} nats, "
                f"{judged(real, lengths, len(diff), rebuild)}.")
    parts = []
    for k, row in enumerate(dict.fromkeys(lower)):
        idx = [i for i, r in enumerate(lower) if r == row]
        parts.append(f"{subject(row)}{' is lower' if k == 0 else ''} at "
                     f"{listed([lengths[i] for i in idx])}, by {nats_range(np.abs(mean[idx]))} nats")
    return f"{'; '.join(parts)}; {judged(real, lengths, len(diff), rebuild)}."


def verdict_table(diff, lengths, first: str, second: str, rebuild: float | None = None) -> str:
    """The same verdict as a small Markdown table: per length, the lower row, by how much,
    and whether that is more than the spread."""
    diff = np.asarray(diff, dtype=float)
    mean, real = diff.mean(0), beyond_spread(diff, rebuild)
    lines = [f"| length | lower | by (nats) | more than {spread_name(len(diff), rebuild) or 'a spread'} |",
             "|---:|---|---:|---|"]
    for L, m, r in zip(lengths, mean, real):
        lines.append(f"| {L} | {second if m > 0 else first} | {abs(m):.3f} | {'yes' if r else 'no'} |")
    return "\n".join(lines)


def subject(label: str) -> str:
    """A row's label as the subject of a sentence: "the ALiBi baseline, CAT's compute as
    steps," (a label with a comma is closed by one)."""
    return f"the {label}," if "," in label else f"the {label}"


def nats_range(values) -> str:
    """"0.12-0.14" (two decimals; three where the smallest is below 0.1), or one number."""
    lo, hi = float(np.min(values)), float(np.max(values))
    digits = 3 if lo < 0.1 else 2
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return a if a == b else f"{a}-{b}"


def window_error(windows: dict, se: dict, every: bool = False) -> str:
    """One sentence: the validation windows each CE reads at each length and the standard
    error that window sampling leaves on it, its range over the rows and seeds shown.

    ``windows`` ``{length: n}``; ``se`` ``{length: [standard errors]}`` (NaN: not scored,
    left out); ``every``: the windows are all that the validation split holds."""
    parts = []
    for L, values in se.items():
        values = [v for v in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(v)]
        error = f" (standard error {nats_range(values)} nats)" if values else ""
        parts.append(f"{windows[L]}{' windows' if not parts else ''} at {L}{error}")
    where = "every window of the validation split" if every else "the first windows of the validation split"
    return (f"Each CE reads {where}, {listed(parts)}; every row reads the same windows, so the "
            "differences between rows are paired.")


def listed(values) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} and {values[-1]}"


def spread_name(seeds: int, rebuild: float | None) -> str | None:
    if seeds > 1:
        return "the spread over seeds" + (" and over rebuilds" if rebuild is not None else "")
    return "the spread over rebuilds" if rebuild is not None else None


def judged(real, lengths, seeds: int, rebuild: float | None) -> str:
    """Whether the difference is more than the noise, in words."""
    spread = spread_name(seeds, rebuild)
    if spread is None:
        return "one seed and no rebuild measured, so not judged against any spread"
    if real.all():
        return f"more than {spread}"
    if not real.any():
        return f"within {spread}, so not a measured difference"
    return f"more than {spread} at {listed([L for L, r in zip(lengths, real) if r])} only"


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
    ``first`` is lower); "the lead changes sides between lengths" where they disagree."""
    mean_diff = np.asarray(mean_diff, dtype=float)
    if (mean_diff > 0).all():
        return f"{first} leads at every length, by {nats_range(mean_diff)} nats"
    if (mean_diff < 0).all():
        return f"{second} leads at every length, by {nats_range(-mean_diff)} nats"
    return "the lead changes sides between lengths"
