"""Where a result came from: the git commit a checkout reports."""
import subprocess

import pytest

from catlib.common.provenance import git_state


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def outer(tmp_path, monkeypatch):
    """A git repository with one commit, holding a plain folder ``inner/`` (a copy of the
    project made with ``git archive``, say) that is no repository of its own."""
    monkeypatch.delenv("CATLIB_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("a\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "outer")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "b.txt").write_text("b\n")
    return tmp_path


def test_a_checkout_at_the_top_of_its_repository_reports_its_commit(outer):
    assert git_state(outer) == {"commit": _git(outer, "rev-parse", "HEAD"), "dirty": False}


def test_a_copy_inside_another_repository_reports_no_commit(outer):
    """Not the enclosing repository's commit: that is not the code that ran."""
    assert git_state(outer / "inner") == {"commit": None, "dirty": None}


def test_catlib_commit_wins(outer, monkeypatch):
    monkeypatch.setenv("CATLIB_COMMIT", "8b10738")
    assert git_state(outer / "inner") == {"commit": "8b10738", "dirty": None}
    assert git_state(outer)["commit"] == "8b10738"
