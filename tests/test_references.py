"""The check of the smoke book's execution against the nbval references
(:mod:`catlib.book.references`): what it compares, what it leaves out, and a stale reference."""
import copy
import json

from catlib.book.references import check_references, checked_outputs, compare


def _stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def _notebook(check_text="every CE finite: True\n", ignored_text="took 3.2 s\n",
              figure_dir='""'):
    cells = [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]},
         "source": f'profile = "smoke"\nfigure_dir = {figure_dir}  # folder\n', "outputs": []},
        {"cell_type": "code", "metadata": {}, "source": "# NBVAL_IGNORE_OUTPUT\nprint(t)",
         "outputs": [_stream(ignored_text)]},
        {"cell_type": "code", "metadata": {}, "source": "# NBVAL_CHECK_OUTPUT\nprint(ok)",
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
    stale["cells"][1]["source"] = "# NBVAL_IGNORE_OUTPUT\nprint(old)"
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
