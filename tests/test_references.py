"""The check of the smoke book's execution against the nbval references
(:mod:`catlib.book.references`): what it compares, what it leaves out, and a stale reference."""
import copy
import json
import re
from pathlib import Path

import pytest

from catlib.book.references import check_references, checked_outputs, compare


def _stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def _notebook(check_text="every CE finite: True\n", ignored_text="took 3.2 s\n",
              figure_dir='""'):
    cells = [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]},
         "source": f'profile = "smoke"\nfigure_dir = {figure_dir}  # folder\n', "outputs": []},
        {"cell_type": "code", "metadata": {"tags": ["nbval-ignore-output"]}, "source": "print(t)",
         "outputs": [_stream(ignored_text)]},
        {"cell_type": "code", "metadata": {"tags": ["nbval-check-output"]}, "source": "print(ok)",
         "outputs": [_stream(check_text),
                     {"output_type": "display_data", "metadata": {"w": 1},
                      "data": {"text/plain": "<Figure>", "image/png": "AAAA"}}]},
        {"cell_type": "markdown", "metadata": {}, "source": "# Text"},
    ]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_the_same_outputs_pass_and_a_changed_checked_line_fails():
    ref = _notebook()
    assert compare(_notebook(), ref) == []
    problems = compare(_notebook(check_text="every CE finite: False\n"), ref)
    assert len(problems) == 1 and problems[0].startswith("cell 2, stdout: expected")
    assert "False" in problems[0]


def test_what_nbval_leaves_out_is_left_out():
    ref, run = _notebook(), _notebook(ignored_text="took 9.9 s\n", figure_dir='"book/figures"')
    checked = run["cells"][2]["outputs"][1]
    checked["data"]["image/png"], checked["metadata"] = "BBBB", {"w": 2}   # an image, metadata
    run["cells"][2]["execution_count"] = 7
    assert compare(run, ref) == []


def test_a_stream_split_in_two_outputs_reads_as_one():
    assert checked_outputs([_stream("a\n"), _stream("b\n")]) == checked_outputs([_stream("a\nb\n")])
    assert checked_outputs([_stream("a\n"), _stream("x\n", "stderr")]) == {"stdout": ["a\n"],
                                                                           "stderr": ["x\n"]}


def test_a_reference_with_other_code_is_stale_and_names_the_fix():
    run = _notebook()
    stale = copy.deepcopy(run)
    stale["cells"][1]["source"] = "print(old)"
    (problem,) = compare(run, stale)
    assert "stale" in problem and "make nbval-refs" in problem and "cell 1" in problem
    shorter = copy.deepcopy(run)
    del shorter["cells"][-1]
    assert "stale" in compare(run, shorter)[0]


def test_every_reference_is_read_and_a_missing_execution_is_named(tmp_path):
    refs, done = tmp_path / "refs", tmp_path / "done"
    refs.mkdir(), done.mkdir()
    for name in ("01_a", "02_b"):
        (refs / f"{name}.ipynb").write_text(json.dumps(_notebook()))
    (done / "01_a.ipynb").write_text(json.dumps(_notebook()))
    results = check_references(done, refs)
    assert results["01_a"] == [] and "make book-smoke" in results["02_b"][0]


def test_a_reference_with_other_nbval_tags_is_stale():
    """A check cell turned ignore (or back) changes what nbval compares: stale, not passed."""
    run = _notebook()
    other = copy.deepcopy(run)
    other["cells"][2]["metadata"]["tags"] = ["nbval-ignore-output"]
    (problem,) = compare(run, other)
    assert "stale" in problem and "cell 2" in problem


ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted([*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "tests" / "nbval").glob("*.ipynb")])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_code_cell_carries_an_nbval_comment(path):
    """nbval's markers are cell tags (``nbval-check-output``, ...), not comments in the code a
    reader sees; a comment marker would also be checked by nbval but not by this module."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    marked = [i for i, c in enumerate(cells)
              if re.search(r"^\s*#\s*NBVAL_", "".join(c["source"]), re.MULTILINE)]
    assert marked == [], f"cells {marked} carry an NBVAL_ comment; tag them instead"
