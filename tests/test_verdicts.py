"""Verdicts in sentences a person would write (catlib.common.verdicts): every call site's
verdict, over the patterns a build can produce, names each row at most once a sentence, keeps
sentences within 60 words and bold runs within 25; so do the glued strings of a smoke build."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from catlib.book.publish import equal_compute_summary
from catlib.common.verdicts import (AHEAD, BEHIND, MARGIN, NOT_RESOLVED, called, change_words,
                                    equivalent, interval, nats_range, paired_window_error,
                                    prose_problems, reading, same_words, short_lead, t_quantile,
                                    unpaired_error_bound, verdict, verdict_table, window_error)
from catlib.experiment import frontier as fr
from catlib.experiment.grid import AS_LAYERS, AS_STEPS, ROWS

ROOT = Path(__file__).resolve().parent.parent
LABELS = list(ROWS)
KERPLE, ALIBI, ODE = "KERPLE-prior CAT", "ALiBi baseline", "KERPLE-prior CAT, ODE-consistent"
EULER = "ALiBi-prior CAT, Euler x1, CAT's compute as steps"
# (first, second) of every verdict the book generates: chapter 10 (and the intro and README
# through it), chapter 8.
PAIRS = [(KERPLE, ALIBI), (KERPLE, AS_STEPS), (KERPLE, AS_LAYERS), (ODE, AS_STEPS),
         (EULER, AS_STEPS), ("ALiBi-prior CAT", ALIBI), ("ALiBi-prior CAT", "ALiBi inside the CAT block"),
         ("ALiBi inside the CAT block", "looped ALiBi baseline, scaled"), (ODE, KERPLE), (ODE, ALIBI)]
LENGTHS = {"cpu": [128, 512, 1024, 5000], "smoke": [16, 32, 64, 128, 256]}


def _patterns(n_lengths):
    """Per-seed differences a build can give: one row lower everywhere (clearly, or within
    the noise), the lengths disagreeing, one seed."""
    rng = np.random.default_rng(0)
    ramp = np.linspace(0.12, 0.14, n_lengths)
    mixed = np.linspace(0.05, -0.04, n_lengths)
    return {"leads": ramp + 0.003 * rng.standard_normal((3, n_lengths)),
            "trails": -ramp + 0.003 * rng.standard_normal((3, n_lengths)),
            "noise": 0.002 * rng.standard_normal((3, n_lengths)),
            "mixed": mixed + 0.004 * rng.standard_normal((3, n_lengths)),
            "one seed": mixed[None, :]}


def _cases():
    for profile, lengths in LENGTHS.items():
        for name, diff in _patterns(len(lengths)).items():
            for first, second in PAIRS:
                for rebuild in (0.009, None):
                    yield pytest.param(diff, lengths, first, second, rebuild,
                                       id=f"{profile}-{name}-{first}-{second}-{rebuild}")


@pytest.mark.parametrize("diff, lengths, first, second, rebuild", list(_cases()))
def test_every_verdict_reads_as_a_sentence(diff, lengths, first, second, rebuild):
    text = verdict(diff, lengths, first, second, rebuild)
    assert prose_problems(text, LABELS) == []
    # pasted with {glue:text} (bold), a verdict that names one row still fits a bold run
    if len({first if m < 0 else second for m in np.mean(diff, 0)}) == 1:
        assert prose_problems(text, LABELS, bold=True) == []


def test_a_verdict_names_the_leader_the_range_and_the_noise_in_words():
    diff = np.array([[0.12, 0.13, 0.14], [0.125, 0.13, 0.139], [0.118, 0.131, 0.141]])
    text = verdict(diff, [128, 512, 1024], KERPLE, ALIBI, rebuild=0.009)
    assert text == ("the ALiBi baseline leads at every length, by 0.12-0.14 nats, called (95 % "
                    "interval excludes zero).")
    noisy = verdict([[0.004, -0.002, 0.003], [-0.003, 0.004, -0.002], [0.002, 0.001, 0.004]],
                    [128, 512, 1024], KERPLE, ALIBI, rebuild=0.009)
    assert "not called (95 % interval includes zero)" in noisy and "spread" not in noisy


def test_where_the_lengths_disagree_each_row_is_named_once_with_its_lengths():
    diff = np.array([[0.05, 0.03, -0.03], [0.04, 0.0, -0.02], [0.045, 0.015, -0.025]])
    text = verdict(diff, [128, 512, 1024], KERPLE, AS_STEPS)
    assert text.startswith(f"the {AS_STEPS}, is lower at 128 and 512, by ")
    assert f"; the {KERPLE} at 1024, by 0.025 nats" in text
    assert "called (95 % interval excludes zero) at 128 and 1024 only" in text   # 512: 0.015 ± 0.037
    table = verdict_table(diff, [128, 512, 1024], KERPLE, AS_STEPS)
    assert table.splitlines()[2:] == [f"| 128 | {AS_STEPS} | 0.045 | yes |",
                                      f"| 512 | {AS_STEPS} | 0.015 | no |",
                                      f"| 1024 | {KERPLE} | 0.025 | yes |"]


def test_one_rule_calls_a_difference_when_its_paired_interval_excludes_zero():
    """Issue 53's fixtures. The old rule (mean above max(seed SD, 0.009)) called the first
    "beyond the spread" and left the second "within" (below the 0.009 floor)."""
    wide = np.array([[0.017], [0.002], [0.017]])            # mean 0.012, t = 2.4 on 2 df
    assert called(wide).tolist() == [False]
    mean, half = interval(wide)
    assert mean[0] == pytest.approx(0.012) and half[0] == pytest.approx(4.303 * 0.0087 / 3 ** 0.5, rel=1e-2)
    tight = np.array([[0.006], [0.008], [0.007]])            # mean 0.007, seed SD 0.001
    assert called(tight, window=[0.0005]).tolist() == [True]
    assert called(tight, window=[0.004]).tolist() == [False]     # the window error can undo it
    # each error with its own quantile: t for the seeds, the normal one for the windows
    assert interval(tight, window=[0.004])[1][0] == pytest.approx(
        np.hypot(4.303 * 0.001 / 3 ** 0.5, 1.959964 * 0.004), rel=1e-3)
    # one seed, or a NaN: no interval, never "beyond"
    assert called(np.array([[0.05, 1e-4]])).tolist() == [False, False]
    assert np.isnan(interval(np.array([[0.05]]))[1]).all()
    assert called(np.array([[0.05, np.nan], [0.05, 0.1], [0.05, 0.1]])).tolist() == [True, False]
    one = verdict(np.array([[1e-4, 0.2]]), [128, 5000], KERPLE, ALIBI)
    assert one.endswith("not called (one seed: no interval).") and "called (95" not in one
    # every user of the rule: chapter 10's real lengths, the verdict's words
    assert fr.real_lengths(np.hstack([tight, wide]), [128, 5000], window=[0.0005, 0.0]) == [128]
    assert "called (95 % interval excludes zero) at 128 only" in verdict(
        np.hstack([tight, wide]), [128, 5000], KERPLE, ALIBI, window=[0.0005, 0.0])


def test_the_window_term_from_each_row_s_own_error_is_a_conservative_bound():
    se_a, se_b = np.array([[0.03, 0.004], [0.04, 0.004]]), np.array([[0.04, 0.003], [0.03, 0.003]])
    assert unpaired_error_bound(se_a, se_b).tolist() == pytest.approx([0.05, 0.005])


def test_the_t_quantile_matches_student_s_t():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 30, 31, 50, 200):
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-3), df
        assert t_quantile(df, 0.90) == pytest.approx(stats.t.ppf(0.95, df), abs=2e-3), df


def _seeds(mean: float, sd: float, n: int = 10) -> np.ndarray:
    """``n`` paired differences at one length, ``[n, 1]``, whose sample mean and standard
    deviation (ddof 1) are exactly ``mean`` and ``sd``."""
    z = np.arange(n, dtype=float)
    return (mean + sd * (z - z.mean()) / z.std(ddof=1))[:, None]


def test_the_fixtures_have_the_mean_and_sd_they_name():
    d = _seeds(0.004, 0.01)
    assert d.shape == (10, 1)
    assert d.mean() == pytest.approx(0.004, abs=1e-15) and d.std(ddof=1) == pytest.approx(0.01, abs=1e-15)


def test_the_book_reads_a_difference_in_three_words():
    """Issue 61's fixtures: ten seeds, one length, no window term (issue 60 item 9: "not
    called" is never "the same")."""
    assert MARGIN == 0.02 and same_words() == "the same within 0.02"
    assert reading(_seeds(0.004, 0.01)) == ["the same within 0.02"]     # 90 %: 0.004 ± 0.0058
    assert reading(_seeds(0.03, 0.01)) == [AHEAD]
    assert reading(_seeds(-0.03, 0.01)) == [BEHIND]
    assert reading(_seeds(0.01, 0.03)) == [NOT_RESOLVED]                # neither interval decides
    assert reading(_seeds(0.01, 0.005)) == ["ahead, by less than 0.02"]
    assert reading(_seeds(-0.01, 0.005)) == ["behind, by less than 0.02"]
    # the same fixtures by the two halves of the reading
    assert equivalent(_seeds(0.004, 0.01)).tolist() == [True] and not called(_seeds(0.004, 0.01))[0]
    assert not equivalent(_seeds(0.01, 0.03))[0] and not called(_seeds(0.01, 0.03))[0]
    # the equivalence uses the 90 % interval: 0.004 + t(0.95, 9) · 0.01 / √10 = 0.0098
    mean, half = interval(_seeds(0.004, 0.01), level=0.90)
    assert half[0] == pytest.approx(1.833 * 0.01 / 10 ** 0.5, rel=1e-4)
    assert reading(_seeds(0.004, 0.01), margin=0.009) == [NOT_RESOLVED]
    assert same_words(0.05) == "the same within 0.05"


def test_nothing_unknown_reads_as_the_same_or_as_called():
    """One seed, a NaN, a window error that is not known (NaN): no interval, "not
    resolved", never "the same" or "ahead"."""
    assert reading(np.array([[0.001]])) == [NOT_RESOLVED]
    tight = np.hstack([_seeds(0.001, 0.005), _seeds(0.05, 0.001)])
    assert reading(tight) == ["the same within 0.02", AHEAD]
    assert reading(tight, window=[np.nan, np.nan]) == [NOT_RESOLVED, NOT_RESOLVED]
    assert not called(tight, window=[np.nan, np.nan]).any()
    assert not equivalent(tight, window=[np.nan, np.nan]).any()
    assert reading(tight, window=[0.0, 0.0], window_df=[np.nan, 20]) == [NOT_RESOLVED, AHEAD]


def test_the_window_term_takes_student_s_t_on_the_windows_degrees_of_freedom():
    """Issue 60 item 3: 21 windows give t(0.975, 20) = 2.086, not 1.96 (the seeds' term is
    zero here, so the half-width is the window term alone)."""
    flat = np.full((3, 2), 0.05)                         # no spread over the seeds
    _, half = interval(flat, window=[0.01, 0.01], window_df=[20, 819])
    assert half[0] == pytest.approx(2.086 * 0.01)
    assert half[1] == pytest.approx(t_quantile(819) * 0.01) and t_quantile(819) < 1.97
    assert interval(flat, window=[0.01, 0.01], window_df=20)[1] == pytest.approx([0.02086] * 2)
    # the old calls, with no degrees of freedom, keep the normal quantile
    assert interval(flat, window=[0.01, 0.01])[1] == pytest.approx([0.01959964] * 2)
    # a lead of 0.0200 over a window error of 0.01: called by z, not by t(20)
    near = np.full((3, 1), 0.0200)
    assert called(near, [0.01]).tolist() == [True]
    assert called(near, [0.01], window_df=20).tolist() == [False]
    with pytest.raises(ValueError, match="0.95 or 0.90"):
        interval(flat, level=0.8)


def test_the_paired_window_error_is_the_error_of_the_per_window_difference():
    a = np.array([[1.0, 2.0, 3.0, 4.0], [1.2, 2.2, 3.2, 4.2]])      # [seeds, windows]
    b = a - np.array([0.1, 0.3, 0.2, 0.2])                           # the same windows, shifted
    d = np.array([0.1, 0.3, 0.2, 0.2])
    assert paired_window_error(a, b) == pytest.approx(d.std(ddof=1) / 2)
    assert paired_window_error(a[0], b[0]) == pytest.approx(d.std(ddof=1) / 2)
    # what makes a window hard for both cancels: far below the unpaired bound
    se = a.std(1, ddof=1)[:, None] / 2
    assert paired_window_error(a, b) < unpaired_error_bound(se, se)[0] / 10
    assert np.isnan(paired_window_error([1.0], [0.9]))
    assert np.isnan(paired_window_error([1.0, 2.0], [0.9, 1.0, 1.1]))


def test_ties_nan_and_rounding_are_said_in_words():
    """Issue 52's edge cases: a zero difference read "leads by 0.000 nats", a NaN "by nan
    nats", short_lead([0.05, 0]) "the lead changes sides", the intro a signed zero."""
    diff = np.array([[0.1, 0.0, np.nan], [0.12, 0.0, np.nan], [0.11, 0.0, np.nan]])
    text = verdict(diff, [128, 512, 5000], KERPLE, ALIBI)
    assert text == ("the ALiBi baseline is lower at 128, by 0.11 nats; level at 512; not measured "
                    "at 5000; called (95 % interval excludes zero) at 128 only.")
    assert "nan" not in text and "0.000" not in text
    table = verdict_table(diff, [128, 512, 5000], KERPLE, ALIBI).splitlines()
    assert table[3:] == ["| 512 | level | 0.000 | no |", "| 5000 | not measured | – | no |"]
    assert verdict(np.zeros((3, 2)), [128, 5000], KERPLE, ALIBI).startswith("level at 128 and 5000;")
    assert short_lead([0.05, 0], "the CAT", "ALiBi") == "the CAT leads by 0.050 nats, level at one length"
    assert short_lead([0, 0], "the CAT", "ALiBi") == "the two are level at every length"
    assert short_lead([0.05, np.nan], "the CAT", "ALiBi") == \
        "the CAT leads at every length, by 0.050 nats, not measured at one length"
    assert change_words(-0.00003) == "less than 0.0001" and change_words(-0.0123) == "-0.0123"
    assert nats_range([0.0002, 0.012]) == "up to 0.012" and nats_range([0.0002]) == "less than 0.001"


def test_the_readme_lead_reads_as_sentences():
    lengths = LENGTHS["cpu"]
    for name, diff in _patterns(len(lengths)).items():
        text = equal_compute_summary("| row | × ALiBi |\n|---|---:|\n| x | 1.00 |",
                                     fr.who_wins(diff, lengths, 0.009, KERPLE, AS_STEPS), False,
                                     fr.who_wins(-diff, lengths, 0.009, EULER, AS_STEPS),
                                     True, "+0.047", "From 128 to 5000 characters, on the same "
                                     "text, CE falls by 0.010 nats for the Euler CAT.")
        assert prose_problems(text, LABELS) == [], name
        # a bullet's bold lead-in and its sentences together name each row once at most
        label = re.compile("|".join(re.escape(x) for x in sorted(LABELS, key=len, reverse=True)))
        for bullet in (line for line in text.splitlines() if line.startswith("- ")):
            found = label.findall(bullet)
            assert len(found) == len(set(found)), (name, bullet)


def test_the_check_sees_todays_kind_of_verdict():
    """The README's block of the f447b5c build: a row label four times in one sentence."""
    old = ("at 128: ALiBi baseline, CAT's compute as steps by 0.142; at 512: ALiBi baseline, "
           "CAT's compute as steps by 0.136; at 1024: ALiBi baseline, CAT's compute as steps by "
           "0.131; at 5000: ALiBi baseline, CAT's compute as steps by 0.119.")
    (problem,) = prose_problems(old, LABELS)
    assert "named 4 times" in problem
    assert prose_problems(" ".join(["word"] * 30), LABELS, bold=True)


# ------------------------------------------------------------- a smoke build's glued strings

def _glue_text_keys() -> set[tuple[str, str]]:
    """(notebook, key) of every value a page pastes with {glue:text} (set in bold)."""
    keys = set()
    for page in [*(ROOT / "book").glob("*.md"), *(ROOT / "notebooks").glob("*.ipynb")]:
        text = page.read_text(encoding="utf-8")
        for path, key in re.findall(r"\{glue:text\}`(?:[^`]*?([0-9]{2}_\w+)\.ipynb::)?(\w+)", text):
            keys.add((path or page.stem, key))
    return keys


def _glued(executed: Path):
    """(key, text) of every string glued in an executed notebook."""
    for cell in json.loads(executed.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            key = out.get("metadata", {}).get("scrapbook", {}).get("name")
            data = out.get("data", {})
            text = data.get("text/markdown") or data.get("text/plain")
            if key and text and "image/png" not in data:
                text = "".join(text)
                if "text/markdown" not in data:
                    text = text.strip("'\"")
                yield key, text


EXECUTED = sorted((ROOT / "book" / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.skipif(not EXECUTED, reason="no executed notebooks: run make book-smoke first")
@pytest.mark.parametrize("path", EXECUTED, ids=lambda p: p.stem)
def test_every_glued_string_of_the_build_reads_as_sentences(path):
    bold = _glue_text_keys()
    problems = [f"{key}: {p}" for key, text in _glued(path)
                for p in prose_problems(text, LABELS, bold=(path.stem, key) in bold)]
    assert problems == []


def test_a_zero_difference_reads_as_identical():
    """The intro's finding on attention that ignores its input read "differ by at most
    **0.0e+00**"; a reader wants "identical"."""
    from catlib.common.formatting import differ_by_at_most
    assert differ_by_at_most(0.0) == "are identical (they differ by 0)"
    assert differ_by_at_most(-0.0) == "are identical (they differ by 0)"
    assert differ_by_at_most(3.21e-7) == "differ by at most 3.2e-07"
    assert differ_by_at_most(0.25) == "differ by at most 0.25"


def test_window_error_states_each_length_s_windows_and_error():
    # Catches a sentence that drops a length, its count or its error, or reads a NaN.
    text = window_error({"90/10": {"windows": {128: 32, 5000: 8}, "span": None}},
                        {128: [0.012, float("nan"), 0.031], 5000: [0.004]})
    assert text == ("Each CE reads the first windows of the validation split, 32 windows at 128 "
                    "(standard error 0.012-0.031 nats) and 8 at 5000 (standard error 0.004 nats); "
                    "every row reads the same windows, so the differences between rows are paired.")
    assert "every window" in window_error({"90/10": {"windows": {128: 870}, "span": None,
                                                     "every": True}}, {128: [0.006]})
    assert not prose_problems(text, [])


