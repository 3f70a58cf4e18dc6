"""The scale study's chapter in sentences: which row is lowest over which budgets, each CAT
row against the best baseline, the Euler CAT against its kernel control, the moonshot, and
what the artefact lacks; :func:`chapter_texts` gathers them for chapter 11.

Every difference is called by the book's one rule (:func:`~catlib.common.verdicts.called`:
its 95 % interval over seeds and windows excludes zero); the kernel's comparisons (its
control, the learned biases) say the book's words for it, "ahead", "the same within 0.02"
or "not resolved" (:func:`~catlib.book.scale_rivals.words`), so that a margin not called
never reads as a tie. A lead at the training length and a lead at longer lengths are said
apart, each with the row it is against; a crossing is stated only where the order is called
on both sides of it.

The artefact is read by :mod:`catlib.book.scale_readings` and shown by
:mod:`catlib.book.scale_tables`; their names are importable from here too, as the chapter
and its tests use them (``from catlib.book import scale_study as ss``).
"""
from __future__ import annotations

import numpy as np

from ..common.formatting import signed
from ..common.provenance import commit_of
from ..common.verdicts import NOT_CALLED, listed, nats_range, size_words, subject
from ..common.verdicts import called_words, times_listed as _times, verdict, window_error
from ..experiment.scale_plan import CONTROL, EULER, ORACLES, SCALE_ROWS
from .scale_oracle import oracle_table, oracle_text
from .scale_answer import answer_sentences, answer_table, answer_text, budget_note
from .scale_readings import (CAT_ROWS, KERNEL_RIVALS, MOON_LEAD, NAMES, STUDY_DEVICES,  # noqa: F401
                             row_leads, budgets, common_seeds, compared_seeds, crossing, crossings,
                             difference, kernel_leads, lead_at, lead_path, leads, lengths,
                             load_studies, lowest, matrix, moonshot, name, per_seed, point,
                             unit_flops, within_budget)
from .scale_rivals import (lead_range, reading_words, rival_verdicts, rivals_answer,  # noqa: F401
                           rivals_short, words, words_rule)
from .scale_tables import (ce_table, crossing_caption, draw, frontier_figure,  # noqa: F401
                           lead_table, overfit_table, seeds_text)


def _noise(cells, seeds) -> str:
    """:func:`called_words`, or "not called: one seed" where no interval can be formed."""
    return called_words(cells) if len(seeds) > 1 else f"{NOT_CALLED}: one seed"


def _kind(found: dict | None) -> tuple:
    """How a budget reads (:func:`~catlib.book.scale_readings.lowest`), as a key that joins
    consecutive budgets said in one sentence: the same row lowest at each length, on the
    same seeds (two budgets whose rows lead apart at some length are said apart, issue 60)."""
    if found is None:
        return ("no seed",)
    if found["unmeasured"]:
        return ("unmeasured", tuple((L, tuple(r)) for L, r in found["unmeasured"].items()))
    return ("lowest", tuple(found["firsts"]), tuple(found["seeds"]))


def _against(bs, found: list[dict], part) -> str | None:
    """The row a margin is against over the lengths ``part`` (indices) of the budgets
    ``bs``: "the RoPE baseline", or per budget "the ALiBi baseline at 1× and the deep Euler
    CAT at 2×"; None where a budget's next row differs between those lengths."""
    per = [{f["nexts"][i] for i in part} for f in found]
    if any(len(p) > 1 for p in per):
        return None
    rows = [p.pop() for p in per]
    if len(set(rows)) == 1:
        return subject(name(rows[0]))
    return listed([f"{subject(name(r))} at {_times([b for b, x in zip(bs, rows) if x == r])}"
                   for r in dict.fromkeys(rows)])


def _margins(study: dict, bs, found: list[dict]) -> str:
    """A lowest row's margin over the next row at the training length and beyond it, apart,
    each with the row it is against (said once where both are against the same row), and
    whether it is called: "by 0.007 nats at 128 over the RoPE baseline and 0.065-0.069
    beyond over the ALiBi baseline, not called"."""
    ls = lengths(study)
    parts = [(f"at {ls[0]}", [0]), (f"beyond {ls[0]}" if len(ls) > 2 else f"at {ls[-1]}",
                                    list(range(1, len(ls))))][:len(ls)]
    said = []
    for k, (at, part) in enumerate(parts):
        by = nats_range([f["diff"][:, i].mean() for f in found for i in part])
        said.append((f"{by}{' nats' if k == 0 else ''} {at}", _against(bs, found, part) or "the next row",
                     [(b, ls[i], bool(f["called"][i])) for b, f in zip(bs, found) for i in part]))
    seeds = found[0]["seeds"]
    words = [_noise(c, seeds) for *_, c in said]
    if len({who for _, who, _ in said}) == 1:          # one row against: named once
        return f"by {' and '.join(v for v, *_ in said)}, over {said[0][1]} ({_noise([c for *_, cs in said for c in cs], seeds)})"
    if len(set(words)) == 1 and len(said) == 2:       # both called, or neither
        both = "both called" if words[0] == "called" else "neither called" if words[0] == NOT_CALLED else words[0]
        return f"by {' and '.join(f'{v} over {who}' for v, who, _ in said)} ({both})"
    return "by " + " and ".join(f"{v} over {who} ({w})" for (v, who, _), w in zip(said, words))


def _budget_sentence(study: dict, bs: list[int], found: list, seeds_said: bool) -> str:
    """One sentence on the budgets ``bs`` that read alike (:func:`_kind`)."""
    at, first = _times(bs), found[0]
    if first is None:
        return f"At {at}, no seed was trained for every row."
    head = f"At {at} ({seeds_text(first['seeds'])})" if seeds_said else f"At {at}"
    if first["unmeasured"]:
        gaps = [f"{listed([subject(name(r)) for r in rows])} at {L}" for L, rows in first["unmeasured"].items()]
        return f"{head}, not measured: {'; '.join(gaps)}."
    ls = lengths(study)
    if len(set(first["firsts"])) > 1:
        where = [f"{subject(name(r))} at {listed([L for L, f in zip(ls, first['firsts']) if f == r])}"
                 for r in dict.fromkeys(first["firsts"])]
        cells = [(b, L, bool(c)) for b, f in zip(bs, found) for L, c in zip(ls, f["called"])]
        by = nats_range(np.concatenate([f["diff"].mean(0) for f in found]))
        return (f"{head}, no row is lowest at every length: {'; '.join(where)}, by {by} nats over "
                f"the next row ({_noise(cells, first['seeds'])}).")
    return f"{head}, {subject(name(first['firsts'][0]))} is lowest at every length, {_margins(study, bs, found)}."


def budget_verdict(study: dict, budget: int) -> str:
    """One sentence on ``budget``: which row is lowest at every length (every row, equal
    compute, the seeds all rows share there), by how much over the next row, named, at the
    training length and beyond it apart, and whether that is called; or why no row is
    ("no seed was trained for every row", "not measured: ... at 5000")."""
    return _budget_sentence(study, [budget], [lowest(study, budget)], True)


def lowest_over_budgets(study: dict) -> str:
    """The answer's first sentences: :func:`budget_verdict` over runs of consecutive budgets
    that read alike (:func:`_kind`: the same row lowest at each length, on the same seeds;
    the next rows may differ, and are named per budget), said once: "At 1× and 2× (3
    seeds), the Euler CAT is lowest at every length, by 0.007-0.012 nats at 128 over the
    RoPE baseline (not called); by 0.053-0.073 beyond 128 over the ALiBi baseline (called).
    At 4×, ..."; the seeds are named where they differ from the first run's."""
    runs: list[tuple] = []
    for b in budgets(study):
        found = lowest(study, b)
        if runs and runs[-1][0] == _kind(found):
            runs[-1][1].append(b)
            runs[-1][2].append(found)
        else:
            runs.append((_kind(found), [b], [found]))
    first_seeds = next((f[0]["seeds"] for _, _, f in runs if f[0]), None)
    return " ".join(_budget_sentence(study, bs, found, k == 0 or (found[0] or {}).get("seeds") != first_seeds)
                    for k, (_, bs, found) in enumerate(runs))


def lead_sentence(study: dict, row: str, length: str) -> str | None:
    """``row`` against the best baseline at ``length`` along :func:`lead_path`, in words:
    whether it leads or trails (or is level, or was not measured), the baseline it is
    compared with (named once per run of budgets), every budget's value (the path need not
    be monotone), "not called" where a value is not, and each change of sign: a crossing
    with its range over seeds where the order is called on both sides, else "between 2× and
    4× the order is not resolved"; None where no budget was measured beside every baseline."""
    seeds, on = lead_path(study, row)
    if not on:
        return None
    i = lengths(study).index(length)
    steps = []
    for b in on:
        lead = lead_at(study, row, b, seeds)
        m = lead["diff"][:, i].mean()
        verb = ("was not measured" if not np.isfinite(m) else "leads" if m > 0 else "trails"
                if m < 0 else "is level with")
        steps.append((verb, None if verb == "was not measured" else lead["best"][i], abs(m), b,
                      bool(lead["called"][i])))
    groups: list[list] = []
    for step in steps:
        if groups and groups[-1][0][:2] == step[:2]:
            groups[-1].append(step)
        else:
            groups.append([step])
    said, before = [], (None, None)
    for group in groups:
        verb, base = group[0][:2]
        bs = [b for *_, b, _ in group]
        whom = "" if base is None else " it" if base == before[1] else f" {subject(name(base))}"
        if verb in ("leads", "trails"):
            none = not any(real for *_, real in group)      # "(not called)" once for them all
            values = listed([f"{size_words(v)} at {b}×" + ("" if real or none else f" ({NOT_CALLED})")
                             for _, _, v, b, real in group]) + (f" ({NOT_CALLED})" if none else "")
            said.append(f"{verb + ' ' if verb != before[0] else ''}{whom.strip()} by {values}")
        else:
            said.append(f"{verb}{whom} at {_times(bs)}")
        before = (verb, base)
    where = ""
    for cross in crossings(study, row, length):
        lo, hi = cross["between"]
        if cross["at"] is None:
            where += f"; between {lo}× and {hi}× the order is not resolved"
            continue
        per = [c for c in cross["seeds"] if c is not None]
        where += (f"; it crosses near {cross['at']:.1f}×" + (
            f" ({len(per)} of {len(seeds)} seeds cross, at {nats_range(per)}×)" if len(seeds) > 1 else ""))
    return (f"At {length} characters ({seeds_text(seeds)}), {subject(name(row))} "
            f"{', then '.join(said)}{where}.")


def lead_verdict(study: dict, row: str) -> str:
    """``row`` against the best baseline over the budgets, at the shortest and the longest
    length (:func:`lead_sentence`), and the budgets left off the path."""
    ls = lengths(study)
    said = [t for L in (ls[0], ls[-1]) if (t := lead_sentence(study, row, L))]
    if not said:
        return f"The {name(row)} has no budget measured beside every baseline."
    seeds, on = lead_path(study, row)
    off = [b for b in budgets(study) if b not in on]
    if off:
        said.append(f"Not on this path, for want of seeds: {_times(off)}.")
    return " ".join(said)


def kernel_clause(study: dict) -> str:
    """One sentence for the answer: the Euler CAT against its kernel control at every length
    of the budgets both were measured on with the same seeds (named, where they are not all
    of the study's), where the sign agrees, and the book's word for it
    (:func:`~catlib.book.scale_rivals.words`: ahead, the same within 0.02, not resolved);
    "" where the study has no control (:func:`~catlib.book.scale_readings.kernel_leads`)."""
    got = kernel_leads(study)
    if not got:
        return ""
    means = np.concatenate([g["diff"].mean(0) for g in got.values()])
    cells = [(b, L, w) for b, g in got.items() for L, w in zip(lengths(study), words(g))]
    where = ("at every budget and length" if list(got) == budgets(study) else
             f"at every length at {_times(got)} (its control's only budget{'s' if len(got) > 1 else ''})")
    gaps = f"; not measured at {listed(sorted({L for b, L, _ in cells if not np.isfinite(means[0])}))}" \
        if not np.isfinite(means).all() else ""
    means = means[np.isfinite(means)]
    if (means > 0).all():
        return (f"The Euler CAT's learned kernel leads ALiBi's bias in its block by "
                f"{nats_range(means)} nats {where} ({reading_words(cells)}){gaps}.")
    if (means < 0).all():
        return (f"ALiBi's bias in the Euler CAT's block leads its learned kernel by "
                f"{nats_range(-means)} nats {where} ({reading_words(cells)}){gaps}.")
    return "The Euler CAT's learned kernel and ALiBi's bias in its block lead by turns."


def answer(study: dict) -> str:
    """The chapter's answer: which row is lowest over which budgets (:func:`lowest_over_budgets`),
    whether the Euler CAT's lead is its kernel's (its control, :func:`kernel_clause`), and
    what the kernel adds over a learned bias and at depth
    (:func:`~catlib.book.scale_rivals.rivals_answer`);
    the KERPLE-prior CAT against the best baseline is the chapter's next verdict
    (:func:`lead_verdict`), where every budget's value is given."""
    said = [lowest_over_budgets(study), kernel_clause(study), rivals_answer(study)]
    return " ".join(s for s in said if s)


def kernel_verdicts(study: dict) -> list[str]:
    """Per budget, the Euler CAT against its control (:func:`~catlib.book.scale_readings.kernel_leads`):
    is the Euler CAT's lead its kernel's? Its lead at each length with the book's word
    (:func:`~catlib.book.scale_rivals.words`), said once where every length reads alike."""
    ls, out = lengths(study), []
    for b, g in kernel_leads(study).items():
        mean, said = g["diff"].mean(0), words(g)
        if not np.isfinite(mean).all():
            leads = verdict(-g["diff"], ls, name(EULER), name(CONTROL), window=g["window"],
                            window_df=g["window_df"])
        elif len(set(said)) == 1:
            leads = f"{lead_range(mean)} nats at every length ({said[0]})."
        else:
            leads = "; ".join(f"{lead_range([m])} nats at {L} ({w})" for m, L, w in zip(mean, ls, said)) + "."
        out.append(f"At {b}× ({seeds_text(g['seeds'])}), the {name(EULER)}'s lead over the "
                   f"{name(CONTROL)}: {leads}")
    return out


def rule_text(rebuild: float | None, paired: bool = False, errors: bool = True) -> str:
    """How chapter 11 calls a margin, with the rebuild spread said beside the rule (no floor);
    ``paired``: the artefact's points keep each window's CE (the window error is paired);
    ``errors``: they keep standard errors at all (else no margin is called, and the text says
    why). A margin whose window error is not known is never called on its seeds alone
    (:func:`~catlib.book.scale_readings.window_term`)."""
    text = ("A margin is called where its 95 % interval excludes zero: the mean of the paired "
            "differences over the seeds ± the root of the sum of two squares: t(0.975, seeds − 1) "
            "× their standard error over the seeds, and t(0.975, windows − 1) × the "
            "window-sampling error of the "
            + ("difference, from each window's pair of CEs. " if paired else
               "difference. That error is bounded from each row's own standard error, as the "
               "artefact keeps no per-window CEs; the bound is loose, since the rows read "
               "the same windows. " if errors else
               "difference, which this artefact cannot give: its points keep no standard "
               "error, so no margin is called. ")
            + "Where a point keeps no standard error at a length, its margins there are not "
            "called, whatever the seeds say. With one seed no interval can be formed and a "
            "margin is not called.")
    if rebuild is not None:
        text += (f" A rebuild on another CPU kernel dispatch moved a row by up to "
                 f"{rebuild:.3f} nats; a rebuild changes a run's trajectory as a seed does, so "
                 "the seeds' spread measures it and it is no floor.")
    return text


def rule_example(study: dict) -> str:
    """The rule worked through on one margin of the study, for the reproducibility page: the
    Euler CAT's lead over the best baseline at the shortest length, at the first budget
    where it has two seeds or more ("" where there is none)."""
    from ..common.verdicts import interval, t_quantile

    for b in budgets(study):
        lead = lead_at(study, EULER, b) if EULER in study["rows"] else None
        if lead is not None and len(lead["seeds"]) > 1:
            break
    else:
        return ""
    d, n, L = lead["diff"][:, 0], len(lead["seeds"]), lengths(study)[0]
    w, df = float(lead["window"][0]), int(lead["window_df"][0])
    mean, half = interval(lead["diff"][:, :1], [w], window_df=[df])
    if not np.isfinite(half[0]):
        return ""      # no window error at this length: nothing to work through
    seed_half, tw = t_quantile(n - 1) * d.std(ddof=1) / np.sqrt(n), t_quantile(df)
    verdict_words = "excludes zero: called" if abs(mean[0]) > half[0] else "includes zero: not called"
    return (f"At {b}× and {L} characters the Euler CAT's lead over the {name(lead['best'][0])} "
            f"is {listed([signed(x) for x in d])} in seeds {listed(lead['seeds'])} (mean "
            f"{signed(mean[0])}). The seeds give t(0.975, {n - 1}) = {t_quantile(n - 1):.3f} × "
            f"{d.std(ddof=1):.4f} / √{n} = {seed_half:.4f}; the windows' error of the difference, "
            f"{w:.4f}, gives t(0.975, {df}) = {tw:.3f} × {w:.4f} = {tw * w:.4f}; together "
            f"√({seed_half:.4f}² + {tw * w:.4f}²) = {half[0]:.4f}. The interval, "
            f"{signed(mean[0])} ± {half[0]:.4f}, {verdict_words}.")


def moon_lines(study: dict) -> list[str]:
    """Per CAT row, the moonshot (:func:`~catlib.book.scale_readings.moonshot`) in words."""
    out = []
    for r in CAT_ROWS:
        if r not in study["rows"]:
            continue
        m = moonshot(study, r)
        status = ("met" if m["met"] else "untested" if m["smallest"] is None else
                  "missed" if m["missed"] else "not met" if m["untested"] else "not resolved")
        out.append(f"the {name(r)}: {status}"
                   + (f", smallest mean lead {m['smallest']:+.3f} (at {m['where'][0]}× and "
                      f"{m['where'][1]}, against the {name(m['where'][2])})"
                      if m["smallest"] is not None else "")
                   + (f" (untested at {_times(m['untested'])}: a seed or a baseline missing "
                      "there)" if m["untested"] else ""))
    return out


def window_text(study: dict) -> str:
    """How many validation windows each CE reads and the standard error that window sampling
    gives it (the range over the points), in a sentence; "" for an artefact without it."""
    points = [p for t in study["rows"].values() for p in t["points"] if "se" in p]
    if not points:
        return ""
    ls = [L for L in lengths(study) if all(L in p["se"] for p in points)]
    read = {"windows": {L: points[0]["windows"][L] for L in ls}, "span": study.get("span"), "every": True}
    return window_error({"90/10": read}, {L: [v for p in points for v in p["se"][L]] for L in ls})


def method_text(study: dict) -> str:
    """How the artefact's points were made, from its recipe: branched runs on the book's
    recipe, or (an artefact from before it) checkpoints of constant-rate runs with the
    schedule check it measured."""
    recipe = study.get("recipe")
    if recipe and recipe.get("points") == "branched":
        return (f"Every run warms up over {recipe['warmup']} steps, holds the rate "
                f"{recipe['lr']:g}, then decays it linearly to zero over its last "
                f"{recipe['decay_share']:.0%}; the CAT's Sobolev weight runs over "
                f"{recipe['penalty_horizon']} steps whatever the run's length. A smaller "
                "budget's point is a run of that budget branched from the row's longest run "
                "where its own decay starts: the run trained alone to that budget, bit for bit, "
                "its decay counted in its FLOPs.")
    check = study.get("schedule_check")
    text = ("This artefact was trained before the book's recipe: a constant rate with no "
            "warm-up and no decay, each budget's point the weights the row's longest run kept "
            "at that step (the shorter run, for a baseline). A CAT's Sobolev weight decays over "
            "its run, so its point is the long run stopped early")
    if check and "skipped" not in check:
        text += (": at 1×, first seed, the checkpoint minus a run of exactly that many steps "
                 "reads " + ", ".join(f"{check['checkpoint'][L] - check['own_run'][L]:+.3f} at {L}"
                                      for L in lengths(study)) + " nats")
    return text + ". `make scale` trains it again on the recipe."


def cost_text(study: dict) -> str:
    """What training and scoring the study cost, in wall minutes, from its artefact, as a
    clause: ", made in 137 minutes on 2 CPU cores, in 2 runs of `make scale` (113 for 11
    rows, then 23 for 2 rows)" ("" where the artefact records no time). Each run of
    ``make scale`` counted is one that trained a run the study holds (``invocations``,
    :func:`catlib.book.scale.invocations`), its rows the rows it trained; one killed is said
    so ("40 for 3 rows before it was killed": its minutes up to its last finished run). An artefact written before it kept
    ``invocations`` is read from its ``earlier`` and itself, less those that trained no
    row."""
    from .scale import earlier_invocations

    runs = earlier_invocations(study)
    if not runs:
        return ""
    minutes = [r["wall_seconds"] / 60 for r in runs]
    prov = study.get("provenance", {})
    on = (f" on {prov['cpus']} CPU cores" if (prov.get("device") or {}).get("type") == "cpu"
          and prov.get("cpus") else "")
    total = round(sum(minutes))
    text = f", made in {total} minute{'s' * (total != 1)}{on}"
    if len(runs) > 1 or runs[0].get("finished") is False:
        parts = [f"{m:.0f} for {len(r['trained'])} row{'s' * (len(r['trained']) != 1)}"
                 + (" before it was killed" if r.get("finished") is False else "")
                 for m, r in zip(minutes, runs)]
        text += f", in {len(runs)} run{'s' * (len(runs) != 1)} of `make scale` ({', then '.join(parts)})"
    return text


def missing(study: dict) -> str:
    """What the plan asked for and the artefact lacks, in a sentence or two ("" if nothing):
    the rows absent (those the sweep left without a rate, ``rates.unrated``, said apart) and
    the rows measured on fewer seeds than the plan gives them (its seeds at each budget, and
    a row's ``extra_seeds`` there)."""
    unrated = set(study.get("rates", {}).get("unrated", []))
    absent = [name(r) for r in SCALE_ROWS
              if r not in study["rows"] and r not in ORACLES and r not in unrated]
    plan = {int(b): set(s) for b, s in study["plan"].items()}
    extra = study.get("extra_seeds", {})
    short: dict[str, list] = {}
    for r in study["rows"]:
        want = {b: plan[b] | set(extra.get(r, {}).get(str(b), [])) for b in plan}
        got = {b: sorted((point(study, r, b) or {}).get("seeds", [])) for b in budgets(study)}
        if any(not want.get(b, set()) <= set(got[b]) for b in got):
            seeds = sorted({s for v in got.values() for s in v})
            short.setdefault(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}",
                             []).append(name(r))
    out = [f"Not in this artefact: {listed(absent)} (a study cut short, or rows "
           "added after it was trained)."] if absent else []
    if unrated:
        out.append(f"Not trained: {listed([name(r) for r in sorted(unrated)])}, whose every "
                   "rate diverged in the sweep.")
    out += [f"On {seeds} only: the {', the '.join(rows)}." for seeds, rows in short.items()]
    return " ".join(out)


def budgets_text(studies: dict, main: str | None) -> str:
    """The budgets of the study read here, and of the other device's where there is one:
    "1×, 2× and 4× on a CPU; 1× to 16× on a GPU"."""
    where = {"cpu": "on a CPU", "cuda": "on a GPU"}
    said = [f"{_times(budgets(studies[d]))} {where.get(d, d)}"
            for d in [main, *[d for d in studies if d != main]] if d in studies]
    return "; ".join(said) or "none measured here"


def passes_text(study: dict | None) -> str:
    """How many passes over the training split the rows make, in words: the range over rows
    at the smallest budget and the most at the largest (a point's steps × batch × training
    length over the split's characters, at the sizes of the profile the study was trained
    with)."""
    from ..data import load_corpus
    from .profiles import experiment

    if study is None:
        return "a budget that no scale artefact here measures"
    tc = experiment(study.get("provenance", {}).get("profile", "cpu")).train
    chars = len(load_corpus(split="90/10").train)
    passes = {b: [p["steps"] * tc.batch * tc.seq / chars for t in study["rows"].values()
                  for p in t["points"] if p["budget"] == b] for b in budgets(study)}
    first, top = budgets(study)[0], budgets(study)[-1]
    return (f"{min(passes[first]):.1f}-{max(passes[first]):.1f} passes over the training split "
            f"by row at {first}× (up to {max(passes[top]):.0f} at {top}×)")


NO_STUDY = ("No artefact of the scale study is in `results/` in this build: run `make scale` "
            "(or `make scale DEVICE=cuda`) to write one.")


def chapter_texts(studies: dict, main: str | None, rebuild: float | None = None,
                  root=None) -> dict[str, str]:
    """Chapter 11's generated Markdown, by glue key, from the study of device ``main``
    (``studies``: :func:`~catlib.book.scale_readings.load_studies`): the answer, where it
    was read from and what it lacks, the rule (with ``rebuild``, the rebuild spread of
    :func:`catlib.book.page.rebuild_spread`, said beside it) and the book's words for the
    kernel's comparisons, the tables, the verdicts and the moonshot; with ``root``, where
    its 1× point is chapter 10's (:func:`~catlib.book.scale_point.point_paragraph`, from
    ``results/`` there)."""
    from .scale_point import point_paragraph

    keys = ("where", "method", "windows", "lead_short", "lead_long", "ce_short", "ce_long",
            "budget_verdicts", "row_verdicts", "kernel", "overfit", "moon", "point")
    study = studies.get(main)
    if study is None:
        return {"answer": NO_STUDY, "rule": rule_text(rebuild), "rule_example": "", "rivals": "",
                "oracle": "", "oracle_table": "",
                "words": words_rule(), **{key: "(no artefact)" for key in keys}}
    ls, prov = lengths(study), study.get("provenance", {})
    others = [d for d in studies if d != main]
    where = (f"Read from `results/scale_{main}.json` (commit {commit_of(prov)}, "
             f"{prov.get('date') or study.get('date') or 'date unknown'}){cost_text(study)}"
             + (f"; the {', '.join(others)} study is drawn below" if others else "") + ". "
             + missing(study))
    kernel = kernel_verdicts(study)
    return {"answer": answer_text(study), "where": where.strip(), "method": method_text(study),
            "rule": rule_text(rebuild, any("window_ce" in p for t in study["rows"].values()
                                           for p in t["points"]),
                              any("se" in p for t in study["rows"].values() for p in t["points"])),
            "rule_example": rule_example(study),
            "windows": window_text(study) or "This artefact scored a few windows per length.",
            "kernel": _bullets(kernel) if kernel else "- this artefact has no kernel control row",
            "rivals": _bullets(rival_verdicts(study)), "words": words_rule(),
            "point": point_paragraph(root, study) if root is not None else "",
            "overfit": overfit_table(study) or "(this artefact holds no training CE)",
            "lead_short": lead_table(study, ls[0]), "lead_long": lead_table(study, ls[-1]),
            "ce_short": ce_table(study, ls[0]), "ce_long": ce_table(study, ls[-1]),
            "budget_verdicts": _bullets([f"{budget_verdict(study, b)} {budget_note(study, b)}"
                                         for b in budgets(study)]),
            "row_verdicts": _bullets([lead_verdict(study, r) for r in CAT_ROWS if r in study["rows"]]),
            "moon": _bullets(moon_lines(study)),
            "oracle": oracle_text(study), "oracle_table": oracle_table(study)}


def answer_file_text(studies: dict, main: str | None) -> str:
    """The answer the intro and the README include (``book/_generated/scale_answer.md``):
    chapter 11's table and sentences on the kernel question
    (:func:`~catlib.book.scale_answer.answer_text`)."""
    if main not in studies:
        return NO_STUDY + "\n"
    where = "on a CPU" if main == "cpu" else "on a GPU"
    study = studies[main]
    table = answer_table(study)
    return (f"Over budgets ({where}, chapter 11), each row against the Euler CAT at 1×:\n\n"
            + (f"{table}\n\n" if table else "") + f"{answer_sentences(study)}\n")


def _bullets(lines) -> str:
    return "\n".join(f"- {line}" for line in lines) or "- none"
