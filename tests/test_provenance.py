"""Where a result came from: the git commit a checkout reports.

Two kinds of test: temporary repositories for the rules (a checkout at the top of its own
repository, a copy inside another one, ``CATLIB_COMMIT``), and this repository itself for
the default, the call every run makes (``git_state()`` with no argument, which must read
the repository that holds the imported catlib package)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catlib.common import provenance
from catlib.common.provenance import git_state

REPO = Path(__file__).resolve().parents[1]
PROVENANCE_FILE = Path(provenance.__file__).resolve()
# What a subprocess prints: where its catlib came from and git_state() without and with a
# CATLIB_COMMIT set (os.environ is read at each call).
PROBE = ("import json, os, catlib\n"
         "from catlib.common.provenance import git_state, environment\n"
         "out = {'catlib': catlib.__file__, 'plain': git_state(),\n"
         "       'env': environment(())['git']}\n"
         "os.environ['CATLIB_COMMIT'] = 'stale0'\n"
         "out['with_env'] = git_state()\n"
         "print(json.dumps(out))\n")
GIT_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES")


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def _is_checkout(folder: Path) -> bool:
    r = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True,
                       text=True)
    return r.returncode == 0 and Path(r.stdout.strip()).resolve() == folder.resolve()


def _probe(project: Path) -> dict:
    """:data:`PROBE` run by a Python whose catlib is ``project``'s (its folder first on the
    path), with no CATLIB_COMMIT and no git variables inherited."""
    env = {k: v for k, v in os.environ.items() if k != "CATLIB_COMMIT" and k not in GIT_VARIABLES}
    env["PYTHONPATH"] = str(project)
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=project, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["catlib"]).resolve().parent == (project / "catlib").resolve()
    return out


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
    assert git_state(outer) == {"commit": _git(outer, "rev-parse", "HEAD"), "dirty": False,
                                "source": "git"}
    (outer / "a.txt").write_text("changed\n")
    assert git_state(outer)["dirty"] is True
    assert git_state(outer, ignore=("a.txt",))["dirty"] is False


def test_a_copy_inside_another_repository_reports_no_commit(outer):
    """Not the enclosing repository's commit: that is not the code that ran."""
    assert git_state(outer / "inner") == {"commit": None, "dirty": None, "source": None}


def test_catlib_commit_names_the_commit_only_where_there_is_no_checkout(outer, monkeypatch):
    """A copy without a repository of its own takes CATLIB_COMMIT, marked as coming from
    the environment; a checkout's own commit wins over it (a stale value left in a shell
    must not relabel a checkout's results)."""
    monkeypatch.setenv("CATLIB_COMMIT", "8b10738")
    assert git_state(outer)["commit"] == _git(outer, "rev-parse", "HEAD")
    assert git_state(outer) == {"commit": _git(outer, "rev-parse", "HEAD"), "dirty": False,
                                "source": "git"}
    assert git_state(outer / "inner") == {"commit": "8b10738", "dirty": None,
                                          "source": "CATLIB_COMMIT"}


# What a clone's catlib says of itself, run from outside the clone (its root must not come
# from the working directory).
ROOT_PROBE = ("import json\n"
              "from catlib.common import provenance as p\n"
              "print(json.dumps({'root': str(p.REPO_ROOT), 'package': str(p.PACKAGE_DIR),\n"
              "                  'git': p.git_state(), 'fingerprint': p.code_fingerprint()}))\n")


@pytest.mark.slow("clones the repository and imports its catlib in a subprocess")
def test_the_default_root_is_the_repository_that_holds_catlib(clone):
    """A clone whose model code differs from this checkout's (one line more in
    ``nn/config.py``, committed), its catlib imported from a folder outside it: its root is
    the clone, its commit the one ``git rev-parse HEAD`` reads there, its fingerprint that of
    its own package, not this checkout's."""
    config = clone / "catlib" / "nn" / "config.py"
    if "# a clone's own line" not in config.read_text():
        config.write_text(config.read_text() + "# a clone's own line\n")
        _git(clone, "commit", "-q", "-am", "a line of model code only the clone has")
    env = {k: v for k, v in os.environ.items() if k != "CATLIB_COMMIT" and k not in GIT_VARIABLES}
    env["PYTHONPATH"] = str(clone)
    r = subprocess.run([sys.executable, "-c", ROOT_PROBE], cwd=clone.parent, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["root"]) == clone.resolve() and Path(out["package"]) == clone.resolve() / "catlib"
    assert out["git"] == {"commit": _git(clone, "rev-parse", "HEAD"), "dirty": False, "source": "git"}
    assert out["fingerprint"] != provenance.code_fingerprint()


def test_git_state_with_no_argument_reports_this_checkout(monkeypatch):
    """The call every run makes (env.json, results/scale_*.json): this checkout's commit,
    also with a CATLIB_COMMIT set."""
    if not _is_checkout(REPO) or PROVENANCE_FILE.parents[1] != REPO / "catlib":
        pytest.skip("catlib is not imported from a git checkout of this repository")
    monkeypatch.delenv("CATLIB_COMMIT", raising=False)
    head = _git(REPO, "rev-parse", "HEAD")
    assert git_state()["commit"] == head and git_state()["source"] == "git"
    assert provenance.environment(())["git"]["commit"] == head
    monkeypatch.setenv("CATLIB_COMMIT", "stale0")
    assert git_state()["commit"] == head


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository with the working tree's provenance module committed on
    top (so that its HEAD is no commit of this checkout, and its tree is clean)."""
    if not (REPO / ".git").exists() or not shutil.which("git"):
        pytest.skip("needs a git checkout and git")
    dest = tmp_path_factory.mktemp("clone") / "catlib-clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True,
                   capture_output=True, timeout=120)
    shutil.copy2(PROVENANCE_FILE, dest / "catlib" / "common" / "provenance.py")
    _git(dest, "commit", "-q", "--allow-empty", "-am", "the provenance module under test")
    return dest


@pytest.mark.slow("clones the repository and imports its catlib in a subprocess")
def test_git_state_with_no_argument_returns_the_commit_in_a_clone(clone):
    """In a clone, the default git_state() (and environment()'s) is the clone's commit and
    state, from git; a CATLIB_COMMIT set does not override it."""
    out = _probe(clone)
    head = _git(clone, "rev-parse", "HEAD")
    assert head != _git(REPO, "rev-parse", "HEAD")
    assert out["plain"] == {"commit": head, "dirty": False, "source": "git"}
    assert out["env"] == out["plain"]
    assert out["with_env"] == out["plain"]


@pytest.mark.slow("copies the package into another repository and imports it in a subprocess")
def test_a_copy_inside_another_repository_takes_no_commit_from_it_by_default(clone, outer):
    """The clone's files copied (no .git) into a folder of another repository: the default
    git_state() reports no commit (not the outer repository's), and CATLIB_COMMIT, marked
    as from the environment, where it is set."""
    copy = outer / "inner" / "project"
    shutil.copytree(clone / "catlib", copy / "catlib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = _probe(copy)
    assert out["plain"] == {"commit": None, "dirty": None, "source": None}
    assert out["env"] == out["plain"]
    assert out["with_env"] == {"commit": "stale0", "dirty": None, "source": "CATLIB_COMMIT"}


def test_commits_with_fingerprint_finds_the_head_of_a_clean_checkout():
    """An artefact that recorded only its code fingerprint is labelled by searching the
    history (benchmarks/label_commit.py): the head's own fingerprint finds the head."""


    from catlib.common.provenance import REPO_ROOT, code_fingerprint, commits_with_fingerprint
    changed = subprocess.run(["git", "status", "--porcelain", "--", "catlib"], cwd=REPO_ROOT,
                     capture_output=True, text=True)
    if changed.returncode != 0:
        pytest.skip("not a git checkout")
    if changed.stdout.strip():
        pytest.skip("catlib/ has uncommitted changes: the head's fingerprint is not the tree's")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert commits_with_fingerprint(code_fingerprint(), depth=1) == [head.stdout.strip()]
    assert commits_with_fingerprint("0" * 16, depth=3) == []
