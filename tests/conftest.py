"""Shared fixtures: the real corpus, found as catlib finds it (CATLIB_DATA, then the user
cache), or ../shared/data/tiny.txt beside this checkout; never downloaded by a test.

The suite runs on every core (``make unit``: pytest-xdist, ``-n auto --dist loadgroup``).
Three rules here keep that as quick and as safe as one process:

- a test that uses a module- or class-scoped fixture (a trained run, a clone, a server)
  goes to the same worker as the module's other users of it (``xdist_group``), so that
  the fixture is built once, not once per worker;
- the tests marked ``slow`` (each says why) are handed out first, so that no worker
  starts a minute-long test while the other has nothing left to do;
- a worker computes on one thread (below).
"""
import os
import sys
from pathlib import Path

import pytest

# An xdist worker computes on one thread (as `make unit-portable` and the book's training
# jobs do): two workers on two cores with two intra-op threads each would oversubscribe
# them. Set before torch is imported (conftest loads before the test modules), so the
# worker's subprocesses (the CLI, torchrun, papermill kernels) inherit it; a caller's own
# OMP_NUM_THREADS wins.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow(reason): takes many seconds for a reason (a notebook, a pool, a "
                   "subprocess tree); scheduled first under xdist, never skipped")


def pytest_collection_modifyitems(config, items):
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        scoped = [d for defs in (info.name2fixturedefs.values() if info else ()) for d in defs
                  if d.scope in ("module", "class", "package")]
        if scoped and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else
                                                    item.nodeid.split("::")[0]))
    # Stable: the slow tests first, each group in its own order (xdist hands out groups in
    # the order of their first test).
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    from catlib.data import DataError, corpus_path

    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / "tiny.txt"
    try:
        return corpus_path(download=False)
    except DataError as e:
        if beside.is_file():
            return beside
        pytest.skip(f"corpus not found ({e})")


@pytest.fixture(scope="session")
def corpus(tiny_path):
    from catlib.data import load_corpus
    return load_corpus(tiny_path)
