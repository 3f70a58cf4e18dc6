"""Data-parallel training under torchrun: 2 gloo processes on the CPU give the
per-step losses of one process with the same global batch; bad input, a killed rank and
resuming under torchrun. Three launches of torchrun in all, to stay quick."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from catlib.cli.commands import main
from catlib.runs import open_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--d_model", "16", "--n_heads", "2", "--n_freq", "8", "--solver", "rk4-classic",
        "--solver_steps", "1", "--train_steps", "5", "--batch", "4", "--seq", "16",
        "--variant", "causal", "--eval_windows", "2", "--lengths", "16", "--no-progress",
        "--checkpoint-every", "1", "--device", "cpu"]
TIMEOUT = 20  # CATLIB_DDP_TIMEOUT of the launches


def _torchrun(root, *extra, fault=None, timeout=600):   # a hang only: a launch takes ~15 s here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CATLIB_DDP_TIMEOUT": str(TIMEOUT),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("CATLIB_FAULT_RANK", None)
    if fault:
        env["CATLIB_FAULT_RANK"] = fault
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "catlib", "train", *TINY, "--run-dir", str(root), *extra]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return r, time.monotonic() - t0


def _losses(run_dir: Path) -> list[tuple[float, float]]:
    return [(m["loss"], m["base_loss"]) for m in open_run(run_dir).metrics() if m["kind"] == "train"]


@pytest.fixture(autouse=True)
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def test_bad_batch_is_refused_on_every_rank(tmp_path):
    r, _ = _torchrun(tmp_path / "runs", "--batch", "5")
    assert r.returncode != 0
    msg = "--batch must be divisible by the 2 processes of torchrun"
    # Each rank checks before anything else; torchrun may stop the slower rank (SIGTERM)
    # as soon as the first one exits, so at least one line, and an exit status 2.
    assert r.stderr.count(msg) >= 1, r.stderr[-3000:]
    assert "exitcode  : 2" in r.stderr
    assert not (tmp_path / "runs").exists()              # nothing written


@pytest.mark.slow("three torchrun launches of 2 gloo ranks")
def test_two_ranks_match_one_process_kill_and_resume(tmp_path, capsys):
    assert main(["train", *TINY, "--run-dir", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    (one,) = (tmp_path / "one").iterdir()

    # rank 1 is killed (SIGKILL) after step 2: the command fails, within the timeout
    killed, seconds = _torchrun(tmp_path / "two", fault="1:2")
    assert killed.returncode != 0, killed.stderr[-3000:]
    assert "SIGKILL" in killed.stderr and "rank      : 1" in killed.stderr, killed.stderr[-3000:]
    # 12 s here, start-up included; the bound leaves a slow, loaded machine 4 minutes of
    # start-up and is still far below gloo's default wait of 30 minutes.
    assert seconds < TIMEOUT + 240, seconds
    (two,) = (tmp_path / "two").iterdir()
    assert two.name == one.name                           # same config hash, whatever N
    assert json.loads((two / "status.json").read_text())["status"] == "running"

    # the same command resumes under torchrun and ends with the one-process losses
    resumed, _ = _torchrun(tmp_path / "two")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout and resumed.stdout.count("run: ") == 1  # rank 0 prints
    assert json.loads((two / "config.json").read_text())["hash"] == \
        json.loads((one / "config.json").read_text())["hash"]
    assert json.loads((two / "env.json").read_text())["world_size"] == 2
    assert json.loads((one / "env.json").read_text())["world_size"] == 1
    assert json.loads((two / "status.json").read_text())["status"] == "finished"
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 5
    # float32 losses (~4.5) from other batch shapes and a gloo all-reduce: rounding apart,
    # carried through 5 Adam steps (measured: 2 ulps); 64 ulps allowed.
    ulps = 64 * torch.finfo(torch.float32).eps
    for (cat1, base1), (cat2, base2) in zip(a, b):
        assert cat2 == pytest.approx(cat1, rel=ulps), (a, b)
        assert base2 == pytest.approx(base1, rel=ulps), (a, b)


def test_the_guarantee_names_the_solvers_it_holds_for():
    # Catches "the per-step losses do not depend on N" stated for every solver: it holds for
    # the fixed-step solvers (the test above: RK4 x1, dropout in the forward pass), not for
    # dopri5, whose steps follow each process's slice and whose adjoint backward solve draws
    # dropout masks outside the consistent mode (the published CAT).
    from catlib.training import distributed
    page = (ROOT / "book" / "library.md").read_text()
    section = page.split("## Several processes or GPUs with `torchrun`")[1].split("\n## ")[0]
    for where, text in (("catlib.training.distributed", distributed.__doc__), ("Using catlib", section)):
        flat = " ".join(text.split())
        for word in ("fixed-step", "dopri5", "adjoint", "dropout"):
            assert word in flat, f"{where} states the guarantee without naming {word!r}: {flat}"
    assert "--solver" in TINY and TINY[TINY.index("--solver") + 1] == "rk4-classic"
