"""Outside this checkout's surroundings: a clone with no ../shared beside it finds the
corpus in its cache, the download works over a real HTTP connection (a local server)
and refuses a corrupt or truncated file, and the book runner finds a process's
descendants with or without psutil."""
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from catlib import book, data
from catlib.data import DataError, corpus_path, download_corpus

REPO = Path(__file__).resolve().parents[1]
# Variables of the caller that would decide the answer in the caller's favour: the
# Makefile's own export (pytest may run under `make test`) and a parent make's flags.
INHERITED = ("CATLIB_DATA", "XDG_CACHE_HOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
# A target evaluated inside the clone's Makefile: what the recipes of `make test` see.
PROBE = ('probe-corpus: ; @$(PY) -c "import os, catlib, catlib.data as d; '
         "print(catlib.__file__); print(os.environ.get('CATLIB_DATA')); "
         'print(d.corpus_path(download=False))"')


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository in a folder with no ``shared/`` beside it.

    A clone holds the committed files only; the Makefile under test is the working
    tree's (copied over the clone's), so that an uncommitted change is what is tested.
    """
    if not (REPO / ".git").exists() or not shutil.which("git") or not shutil.which("make"):
        pytest.skip("needs a git checkout, git and GNU make")
    site = tmp_path_factory.mktemp("site")
    dest = site / "catlib-clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True,
                   capture_output=True, timeout=120)
    shutil.copy2(REPO / "Makefile", dest / "Makefile")
    assert not (site / "shared").exists()
    return dest


def probe(clone: Path, home: Path, **env) -> tuple[Path, str, str]:
    """(catlib's file, CATLIB_DATA, the corpus found) as a recipe of the clone's Makefile
    sees them, with ``HOME=home`` and the caller's corpus variables removed."""
    clean = {k: v for k, v in os.environ.items() if k not in INHERITED}
    clean.update(HOME=str(home), **env)
    r = subprocess.run(["make", "-s", "--no-print-directory", f"PY={sys.executable}",
                        "--eval", PROBE, "probe-corpus"], cwd=clone, env=clean,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    module, variable, found = r.stdout.strip().splitlines()[-3:]
    return Path(module), variable, found


@pytest.mark.slow("clones the repository and runs make in it")
def test_clone_without_shared_finds_the_corpus_in_the_cache(clone, tiny_path, tmp_path):
    home = tmp_path / "home"
    cached = home / ".cache" / "catlib" / "tiny.txt"
    cached.parent.mkdir(parents=True)
    shutil.copyfile(tiny_path, cached)
    module, variable, found = probe(clone, home)
    assert module.is_relative_to(clone)          # the clone's own catlib, not this checkout's
    assert variable == "None"                    # the Makefile left CATLIB_DATA unset ...
    assert Path(found) == cached                 # ... and catlib found the cached copy

    # Beside a shared/ folder the Makefile points CATLIB_DATA at it; a caller's own
    # CATLIB_DATA (.ci/run sets one) wins over it.
    shared = clone.parent / "shared" / "data" / "tiny.txt"
    shared.parent.mkdir(parents=True)
    shutil.copyfile(tiny_path, shared)
    try:
        _, variable, found = probe(clone, home)
        assert variable == found == str(shared)
        _, variable, found = probe(clone, home, CATLIB_DATA=str(cached))
        assert variable == found == str(cached)
    finally:
        shutil.rmtree(clone.parent / "shared")


def test_catlib_data_naming_a_missing_file_is_an_error(tiny_path, tmp_path, monkeypatch):
    """Chosen behaviour: CATLIB_DATA is set on purpose, so a missing file there is a typo
    or an unmounted disk. One line naming the variable, instead of silently using another
    copy or downloading one; the cache is left alone (the Makefile never sets it so)."""
    cache = tmp_path / "xdg"
    (cache / "catlib").mkdir(parents=True)
    shutil.copyfile(tiny_path, cache / "catlib" / "tiny.txt")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("CATLIB_DATA", str(tmp_path / "typo" / "tiny.txt"))

    def no_download(*args, **kwargs):
        raise AssertionError("a missing CATLIB_DATA must not start a download")
    monkeypatch.setattr(data.urllib.request, "urlopen", no_download)
    with pytest.raises(DataError, match=r"corpus not found at .*typo.* \(CATLIB_DATA\); point "
                                        r"CATLIB_DATA"):
        corpus_path()
    assert os.listdir(cache / "catlib") == ["tiny.txt"]


class _Corpora(http.server.BaseHTTPRequestHandler):
    """/tiny.txt: the corpus; /corrupt.txt: one byte changed; /truncated.txt: a
    Content-Length of the whole corpus but half of it sent; anything else: 404."""
    body = b""

    def do_GET(self):
        whole = self.body
        sent = {"/tiny.txt": whole, "/corrupt.txt": b"X" + whole[1:],
                "/truncated.txt": whole[: len(whole) // 2]}.get(self.path)
        if sent is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(whole)))
        self.end_headers()
        self.wfile.write(sent)
        self.close_connection = True

    def log_message(self, *args):   # keep pytest's output clean
        pass


@pytest.fixture(scope="module")
def server(tiny_path):
    handler = type("Handler", (_Corpora,), {"body": tiny_path.read_bytes()})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_over_http_lands_whole_and_verified(server, tiny_path, tmp_path):
    dest = tmp_path / "catlib" / "tiny.txt"
    assert download_corpus(dest, url=f"{server}/tiny.txt", timeout=30) == dest
    assert dest.read_bytes() == tiny_path.read_bytes()
    assert os.listdir(dest.parent) == ["tiny.txt"]          # no temporary file left


@pytest.mark.parametrize("name,message", [("corrupt.txt", "SHA-256"),
                                          ("truncated.txt", "SHA-256"),
                                          ("missing.txt", "could not download")])
def test_bad_download_is_refused_and_leaves_nothing(server, tmp_path, name, message):
    dest = tmp_path / "catlib" / "tiny.txt"
    with pytest.raises(DataError, match=message) as err:
        download_corpus(dest, url=f"{server}/{name}", timeout=30)
    assert "\n" not in str(err.value) and "CATLIB_DATA" in str(err.value)   # one line, the fix
    assert os.listdir(dest.parent) == []                     # neither tiny.txt nor a .part


@pytest.fixture
def process_tree():
    """A child process that starts a grandchild: ``(child pid, grandchild pid)``."""
    script = ("import subprocess, sys, time\n"
              "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              "print(g.pid, flush=True)\n"
              "time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    yield child.pid, grandchild
    for pid in (grandchild, child.pid):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    child.wait(timeout=60)


def test_descendants_with_psutil(process_tree):
    pytest.importorskip("psutil")
    child, grandchild = process_tree
    assert {child, grandchild} <= set(book._descendants(os.getpid()))
    assert book._descendants(child) == [grandchild]


def test_descendants_without_psutil(process_tree, tmp_path, monkeypatch):
    child, grandchild = process_tree
    monkeypatch.setitem(sys.modules, "psutil", None)        # as if it were not installed
    on_linux = Path("/proc/self/stat").exists()
    assert book._descendants(child) == ([grandchild] if on_linux else [])
    assert book._descendants_from_proc(child, proc=tmp_path) == []   # no /proc (macOS)


def test_descendants_of_an_exited_process_is_empty():
    pytest.importorskip("psutil")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(timeout=60)              # reaped: its pid names no process now
    assert book._descendants(ended.pid) == []


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_default_jobs_reads_the_cpus_this_process_may_use():
    """Under `taskset -c 0` (here: an affinity of one CPU set by the process itself) one
    job, whatever os.cpu_count() says; the report's CPU count is the same number."""
    script = ("import os\n"
              "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
              "from catlib.experiment.grid import default_jobs\n"
              "from catlib.book import BOOK_PACKAGES\n"
              "from catlib.common.provenance import environment\n"
              "print(default_jobs('cpu'), environment(BOOK_PACKAGES)['cpus'])\n")
    env = {k: v for k, v in os.environ.items() if k != "CATLIB_JOBS"}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1"]


def test_usable_cpus_without_an_affinity_call(monkeypatch):
    from catlib.common.provenance import usable_cpus
    if hasattr(os, "sched_getaffinity"):
        assert usable_cpus() == len(os.sched_getaffinity(0))
        monkeypatch.delattr(os, "sched_getaffinity")            # as on macOS
    assert usable_cpus() == (os.cpu_count() or 1)


def test_checkpoint_carries_and_restores_the_mps_generator(corpus, monkeypatch):
    """A resumed MPS run continues its MPS random stream: mocked where there is no MPS."""
    import torch

    from catlib.training import loop as train
    from catlib.nn.config import CATConfig

    mps_state = {"now": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda *a: mps_state["now"].clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda s, *a: mps_state.update(now=s.clone()))
    t = train.SideBySide(CATConfig(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic",
                                   solver_steps=1),
                         train.TrainConfig(train_steps=2, batch=2, seq=8), corpus.train)
    saved = t.state_dict()
    assert torch.equal(saved["rng"]["mps"], torch.tensor([1, 2, 3], dtype=torch.uint8))
    mps_state["now"] = torch.tensor([9, 9, 9], dtype=torch.uint8)   # the stream moved on
    t.load_state_dict(saved)                                        # resume
    assert torch.equal(mps_state["now"], torch.tensor([1, 2, 3], dtype=torch.uint8))
