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


def pytest_itemcollected(item):
    # Here, not in pytest_collection_modifyitems: xdist's own hook reads the marks there.
    info = getattr(item, "_fixtureinfo", None)
    scoped = [d for defs in (info.name2fixturedefs.values() if info else ()) for d in defs
              if d.scope in ("module", "class", "package")]
    if scoped and not item.get_closest_marker("xdist_group"):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else
                                                item.nodeid.split("::")[0]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return                       # one process: the order of the files
    if config.getvalue("loadgroup"):
        _suffix_groups(items)
    # The units that xdist hands out (a group, or a test) with a slow test first; a group
    # stays together, in its order, so that its module fixture is built once.
    def unit(item):
        mark = item.get_closest_marker("xdist_group")
        return ("group", mark.args[0] if mark and mark.args else None) if mark else item.nodeid
    slow, first = {}, {}
    for i, item in enumerate(items):
        u = unit(item)
        slow[u] = slow.get(u, False) or item.get_closest_marker("slow") is not None
        first.setdefault(u, i)
    items.sort(key=lambda item: (not slow[unit(item)], first[unit(item)]))


def _suffix_groups(items):
    """``--dist loadgroup`` reads a test's group from its id, ``ID@GROUP``. xdist 3.8 writes
    the suffix into ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is
    ``item._id``): without this every group is split across the workers."""
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


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


@pytest.fixture
def sampler_spy(monkeypatch):
    """What ``train_run`` hands the batch sampler it builds: ``(handed, drawn)``, the ids
    each sampler is given and each batch's window starts it draws (the training loop's
    ``BatchSampler`` replaced by a subclass that records them)."""
    from catlib.data import BatchSampler
    from catlib.training import loop

    handed, drawn = [], []

    class Spy(BatchSampler):
        def __init__(self, data, *args, **kwargs):
            handed.append(data)
            super().__init__(data, *args, **kwargs)

        def starts(self):
            drawn.append(out := super().starts())
            return out

    monkeypatch.setattr(loop, "BatchSampler", Spy)
    return handed, drawn


@pytest.fixture
def count_plans():
    """``count(model) -> calls``: wraps every block's ``attn.plan`` of ``model`` and returns
    the list of lengths it is then called at (how often an evaluation builds a plan)."""
    def count(model) -> list:
        calls = []
        for block in model.blocks:
            original = block.attn.plan

            def counted(length, *args, _original=original, **kwargs):
                calls.append(length)
                return _original(length, *args, **kwargs)
            block.attn.plan = counted
        return calls
    return count
