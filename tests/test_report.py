"""Number formatting and Markdown tables of the book (catlib.common.formatting)."""
import math

import numpy as np
import pytest

from catlib.common import formatting as report
from catlib.common.formatting import NBSP, fixed, md_table, mean_std, number, percent, pm, pm_over, signed


def test_mean_std_over_seeds():
    m, s = mean_std([[1.0, 2.0], [3.0, 6.0]])
    np.testing.assert_allclose(m, [2.0, 4.0])
    np.testing.assert_allclose(s, [math.sqrt(2), math.sqrt(8)])      # sample std, ddof 1
    m, s = mean_std([[1.0, 2.0]])                                      # one seed: std 0
    np.testing.assert_allclose(s, [0.0, 0.0])
    with pytest.raises(ValueError):
        mean_std(np.zeros((0, 3)))


@pytest.mark.parametrize("x, plain, with_sign", [
    (0.1234, "0.123", "+0.123"),
    (-0.3, "-0.300", "-0.300"),
    (0.0, "0.000", "+0.000"),
    (3.7e-5, "4e-05", "+4e-05"),          # would print as 0.000: one significant digit
    (-4.4e-7, "-4e-07", "-4e-07"),
    (0.0004999, "5e-04", "+5e-04"),
    (0.0005, "0.001", "+0.001"),          # rounds to a visible 0.001: decimals stay
    (2.5, "2.500", "+2.500"),
])
def test_fixed_and_signed(x, plain, with_sign):
    assert fixed(x) == plain and signed(x) == with_sign


def test_percent_rounds_to_whole_percent_and_shows_nothing_for_nan():
    assert percent(0.414) == "41%" and percent(1.04) == "104%" and percent(math.nan) == "–"


def test_number_keeps_three_significant_digits():
    assert [number(x) for x in (0.015625, 1.0, 6234.18, 12.34, 0)] == \
        ["0.0156", "1.00", "6234", "12.3", "0"]
    assert number(3.7e-5) == "3.70e-05" and number(2.5e6) == "2.50e+06"
    assert number(float("nan")) == "nan"


def test_pm_joins_with_non_breaking_spaces():
    assert pm(2.4331, 0.0101) == f"2.433{NBSP}±{NBSP}0.010"
    assert pm(2.4331) == "2.433"
    assert pm(0.0231, 0.009, sign=True) == f"+0.023{NBSP}±{NBSP}0.009"
    assert pm(4e-7, 4e-4, sign=True) == f"+4e-07{NBSP}±{NBSP}4e-04"
    assert " " not in pm(1.0, 0.5)                                     # never wraps
    assert pm_over([2.0, 4.0]) == f"3.000{NBSP}±{NBSP}1.414"
    assert pm_over([2.0]) == "2.000"                                   # one seed: no ± 0
    with pytest.raises(ValueError):
        pm_over([])


def test_md_table():
    text = md_table(["model", "CE"], [["a|b", 2.5], ["c\nd", "x"]], align="lr")
    assert text.splitlines() == ["| model | CE |", "|---|---:|", "| a\\|b | 2.5 |", "| c d | x |"]
    assert md_table(["a", "b", "c"], [], "lcr").splitlines()[1] == "|---|:-:|---:|"
    assert md_table(["a"], [["x\\|y"]]).splitlines()[2] == "| x\\|y |"   # no double escape
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        md_table(["a", "b"], [["x"]])
    with pytest.raises(ValueError, match="align"):
        md_table(["a", "b"], [], "lx")


def test_markdown_object_is_what_glue_renders():
    obj = report.markdown("| a |\n|---|\n| 1 |")
    assert obj._repr_markdown_().startswith("| a |")
