"""The intro's figure (issue 61, item 7): one comparison at a glance, each row of the kernel
question against the Euler CAT at 1× with its 95 % interval, grouped as baselines, CAT rows
and learned biases; the full frontier stays in chapter 11."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot
import numpy as np
import pytest

from catlib.book.scale_readings import load_studies, name
from catlib.common.verdicts import MARGIN
from catlib.experiment.scale_plan import (ALIBI, BUCKETS, CONTROL, FOX, KERNEL_QUESTION_ROWS,
                                          KERPLE_LOG, ROPE)

from scale_new_schema import new_study, old_study

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parent.parent
# The order the figure draws the question's rows in, top to bottom: baselines, CAT rows,
# learned biases.
ORDER = [ALIBI, ROPE, CONTROL, BUCKETS, KERPLE_LOG, FOX]


@pytest.fixture(autouse=True)
def _no_open_figures():
    matplotlib.pyplot.close("all")
    yield
    matplotlib.pyplot.close("all")


def _committed() -> dict:
    study = load_studies(ROOT).get("cpu")
    if study is None:
        pytest.skip("results/scale_cpu.json is not in this checkout")
    return study


def _drawn(ax) -> list[tuple[str, float, float, float]]:
    """``(label, x, y, half-width)`` of each row the panel draws, top to bottom (NaN
    half-width: no whisker)."""
    out = []
    for c in ax.containers:
        line, _, bars = c.lines
        x, y = (float(v[0]) for v in line.get_data())
        if bars:
            seg = bars[0].get_segments()[0]
            half = float(seg[1][0] - seg[0][0]) / 2
        else:
            half = float("nan")
        out.append((c.get_label(), x, y, half))
    return sorted(out, key=lambda d: -d[2])


@pytest.mark.parametrize("which", ["committed", "new_schema"])
def test_one_marker_per_row_with_its_interval_grouped_in_order(which):
    """Each panel draws exactly one dot-and-whisker per compared row at 1×, where the answer
    table puts it (CE(row) − CE(Euler CAT), its 95 % half-width), in the order baselines,
    CAT rows, learned biases, with the heading of each group; a line at zero and the band
    ±MARGIN."""
    from catlib.book import scale_answer as sa
    from catlib.book import scale_figure as sf

    study = _committed() if which == "committed" else new_study()
    expected = {f["row"]: f for f in sa.kernel_question(study)[1:]}
    assert set(expected) == set(ORDER)
    fig = sf.intro_figure(study)
    axes = fig.axes
    assert len(axes) == 2
    for ax, i in zip(axes, (0, -1)):
        drawn = _drawn(ax)
        assert [d[0] for d in drawn] == [name(r) for r in ORDER]
        edge = max(abs(ax.get_xlim()[0]), ax.get_xlim()[1])
        for (label, x, _, half), row in zip(drawn, ORDER):
            mean, h = expected[row]["lead"][i], expected[row]["half"][i]
            if abs(mean) <= sf.OFF_SCALE:
                assert x == pytest.approx(mean) and half == pytest.approx(h), label
            else:       # off the others' scale: an arrow at the edge, its number beside it
                assert abs(x) < edge and np.sign(x) == np.sign(mean)
                assert f"{mean:+.2f} ± {h:.2f}" in [t.get_text() for t in ax.texts]
        assert any(np.allclose([p.get_x(), p.get_x() + p.get_width()], [-MARGIN, MARGIN])
                   for p in ax.patches)
        assert any(np.allclose(ln.get_xdata(), 0.0) for ln in ax.lines)
    labels = [t.get_text() for t in axes[0].get_yticklabels()]
    ys = axes[0].get_yticks()
    top_down = [lab for _, lab in sorted(zip(ys, labels), key=lambda p: -p[0])]
    assert top_down == ["baselines", *[name(r) for r in ORDER[:2]], "CAT rows", name(CONTROL),
                        "learned biases", *[name(r) for r in ORDER[3:]]]
    matplotlib.pyplot.close(fig)


def test_committed_rope_at_5000_is_an_arrow_not_a_squeeze():
    """At 5000 RoPE lies about 1.9 nats behind on the committed study: it is drawn at the
    panel's edge, and the axis keeps the other rows' scale (a few tenths at most)."""
    from catlib.book import scale_figure as sf

    fig = sf.intro_figure(_committed())
    assert fig.axes[1].get_xlim()[1] < sf.OFF_SCALE
    matplotlib.pyplot.close(fig)


def test_a_row_missing_from_the_artefact_is_left_out_and_said():
    from catlib.book import scale_figure as sf

    study = new_study()
    del study["rows"][FOX]
    fig = sf.intro_figure(study)
    for ax in fig.axes:
        assert [d[0] for d in _drawn(ax)] == [name(r) for r in ORDER if r != FOX]
    said = " ".join(t.get_text() for t in fig.texts)
    assert f"Not in this artefact: the {name(FOX)}." in said
    assert f"Not in this artefact: the {name(FOX)}." in sf.caption(study)
    assert sf.missing_rows(study) == [FOX]
    matplotlib.pyplot.close(fig)


def test_caption_says_the_seeds_the_margin_and_what_is_missing():
    """The caption names the seeds the seven rows share at 1×: the committed study's (read
    here from its points), ten in the new schema, three in an artefact from before issue 61."""
    from catlib.book import scale_figure as sf

    committed = _committed()
    shared = set.intersection(*(set(p["seeds"]) for r in KERNEL_QUESTION_ROWS
                                for p in committed["rows"][r]["points"] if p["budget"] == 1))
    assert sorted(shared) == list(range(10))
    assert "Read at 1× on seeds 0-9, the seeds all 7 rows share." in sf.caption(committed)
    assert "on seeds 0-9, the seeds all 7 rows share" in sf.caption(new_study())
    assert "on seeds 0-2, the seeds all 7 rows share" in sf.caption(old_study())
    assert f"±{MARGIN:g} nats" in sf.caption(new_study())
    assert "Not in this artefact" not in sf.caption(new_study())
    assert sf.caption(None).startswith("No scale study")


def test_save_intro_figure_writes_only_where_a_folder_is_given(tmp_path):
    from catlib.book import scale_figure as sf

    assert sf.save_intro_figure(new_study(), "", tmp_path) is None
    path = sf.save_intro_figure(new_study(), "figs", tmp_path)
    assert path == tmp_path / "figs" / sf.FILE and path.stat().st_size > 10_000
    assert not matplotlib.pyplot.get_fignums()       # closed: chapter 11 does not show it
