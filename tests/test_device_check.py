"""The reproducibility page's section "On a GPU", read from the committed device checks."""
import copy
import json
from pathlib import Path

import pytest

from catlib.book import device_check

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cuda():
    return json.loads((ROOT / "results" / "gpu_check_cuda.json").read_text())


def test_the_section_reads_the_committed_cuda_check(cuda):
    text = device_check.markdown(device_check.load(ROOT))
    b, d = cuda["stages"]["b"], cuda["stages"]["d"]
    assert cuda["device"]["name"] in text and "`8b10738`" in text
    for profile, seconds in b["projected_training_s"].items():   # the books' projected time
        assert f"`{profile}` profile" in text and f"about {seconds / 60:.0f}" in text
    alibi = next(r for r in b["rows"] if r["row"] == "ALiBi baseline" and r["profile"] == "cpu")
    assert f"| ALiBi baseline | {1e3 * alibi['seconds_per_step']:.1f} |" in text
    for name, run in d["runs"].items():                         # what ran, what did not
        assert f"`{name}`" in text
        if run["status"] == "ok":
            assert f"| `{name}` | {d['notebooks'][name]['seconds']:.1f} |" in text
    not_run = text[text.index("Not run:"):]
    assert all(f"`{n}`" in not_run for n in ("07_audit", "08_beyond", "09_using_context",
                                              "10_equal_compute"))
    assert "`cpu` profile's book" in text[text.index("Not run in this check"):]
    assert "Not measured: MPS" in text


def test_a_check_that_ran_everything_lists_nothing_as_not_run(cuda):
    full = copy.deepcopy(cuda)
    full["stages"]["c"] = {"status": "ok"}
    for run in full["stages"]["d"]["runs"].values():
        run["status"] = "ok"
    text = device_check.markdown({"cuda": full, "mps": full})
    assert "Not run" not in text and "Not measured" not in text


def test_without_a_check_the_page_says_nothing_was_measured(tmp_path):
    path = device_check.write(tmp_path)
    assert path == tmp_path / "book" / "_generated" / "device_check.md"
    assert path.read_text().startswith("Not measured: CUDA and MPS")


def test_the_page_includes_the_section_instead_of_saying_not_measured():
    page = (ROOT / "book" / "reproducibility.md").read_text()
    assert "## On a GPU" in page and "_generated/device_check.md" in page
    assert "../results/headline_paper_cuda.md" in page
    assert "Not measured on a GPU" not in page
