"""Issue 52's branch defects: a branch killed as it starts resumes; a CAT's branches only
with its Sobolev weight on absolute steps (the command line included); the trunk and its
branches under one time budget, and a trunk stopped by it trains no branches."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from catlib.nn.config import CATConfig
from catlib.runs import open_run, train_run
from catlib.training.loop import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
IGNORED = ("seconds", "tokens_per_s")
OPTS = dict(evaluate=False, progress=False, device="cpu")
BASELINE = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, baseline_positions="alibi")
# A 16-step trunk of the ALiBi baseline with a branch of 8 steps (its decay from step 6).
TRUNK = TrainConfig(train_steps=16, models=("base",), branches=(8,), schedule="wsd", warmup=2,
                    decay_share=0.25, lr=4e-3, batch=2, seq=16, checkpoint_every=3, split="90/10")
# The trunk and its branch in a process of their own (one thread: the same bits each time).
SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from catlib.nn.config import CATConfig
from catlib.runs import train_run
from catlib.training.loop import TrainConfig
model = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, baseline_positions="alibi")
train = TrainConfig(train_steps=16, models=("base",), branches=(8,), schedule="wsd", warmup=2,
                    decay_share=0.25, lr=4e-3, batch=2, seq=16, checkpoint_every=3, split="90/10")
train_run(model, train, root=sys.argv[1], name="trunk", data=sys.argv[2], evaluate=False,
          progress=False, echo=None, device="cpu")
"""


def _train_in_a_process(root: Path, data: Path, fault: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "CATLIB_FAULT"}
    if fault:
        env["CATLIB_FAULT"] = fault
    # timeout for a hang only: the two tiny runs take seconds
    return subprocess.run([sys.executable, "-c", SCRIPT, str(root), str(data)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def _run_state(path: Path) -> dict:
    """A run directory's file names, status, metrics (without timings) and weights."""
    metrics = [{k: v for k, v in m.items() if k not in IGNORED} for m in open_run(path).metrics()]
    return {"files": sorted(p.name for p in path.iterdir()),
            "status": open_run(path).status["status"], "metrics": metrics,
            "weights": torch.load(path / "baseline.pt", weights_only=True)["state_dict"]}


def _same_state(a: dict, b: dict) -> bool:
    return ({k: a[k] for k in ("files", "status", "metrics")}
            == {k: b[k] for k in ("files", "status", "metrics")}
            and a["weights"].keys() == b["weights"].keys()
            and all(torch.equal(a["weights"][k], b["weights"][k]) for k in b["weights"]))


def test_a_branch_killed_at_its_config_write_resumes_to_the_run_never_stopped(tiny_path, tmp_path):
    """SIGKILL in the branch's first write (the trunk's config.json is the first, the
    branch's the second): the same command again ends with the files, metrics and weights
    of a run never stopped. A status.json written before config.json left a directory
    refused on every rerun ("config.json is missing")."""
    never = _train_in_a_process(tmp_path / "never", tiny_path)
    assert never.returncode == 0, never.stderr
    killed = _train_in_a_process(tmp_path / "cut", tiny_path, fault="kill:config.json:2")
    assert killed.returncode == -9, killed.stderr
    assert open_run(tmp_path / "cut" / "trunk").status["status"] == "finished"
    assert not (tmp_path / "cut" / "trunk-to-8" / "status.json").exists()
    again = _train_in_a_process(tmp_path / "cut", tiny_path)
    assert again.returncode == 0, again.stderr
    for name, steps in (("trunk", 16), ("trunk-to-8", 8)):
        a, b = _run_state(tmp_path / "cut" / name), _run_state(tmp_path / "never" / name)
        assert a["status"] == "finished" and len(a["metrics"]) == steps
        assert _same_state(a, b), name


def test_a_trunk_stopped_by_its_budget_trains_no_branch_and_says_so(tiny_path, tmp_path):
    """budget 1e-6: the trunk stops after one step, before the state its branch starts
    from exists; no branch is trained (it crashed: "branch-8.pt does not exist"), the
    words say why, and the same call without the budget finishes both."""
    said = []
    stopped = dataclasses.replace(TRUNK, budget=1e-6)
    run = train_run(BASELINE, stopped, root=tmp_path, name="trunk", data=tiny_path,
                    echo=said.append, **OPTS)
    assert run.status["status"] == "stopped" and run.status["step"] == 1
    assert not (tmp_path / "trunk-to-8").exists()
    assert any("its branches [8] train once it has finished; run the same command again" in s
               for s in said), said
    train_run(BASELINE, TRUNK, root=tmp_path, name="trunk", data=tiny_path, echo=None, **OPTS)
    assert open_run(tmp_path / "trunk-to-8").status["status"] == "finished"


def test_the_branches_train_within_what_the_trunk_left_of_the_budget(tiny_path, tmp_path,
                                                                     monkeypatch):
    """One budget for the trunk and its branches: a branch gets what the trunk left (each
    branch had the whole budget again), and none where the trunk spent it."""
    budget = 1000.0
    train_run(BASELINE, dataclasses.replace(TRUNK, budget=budget), root=tmp_path / "a",
              name="trunk", data=tiny_path, echo=None, **OPTS)
    left = open_run(tmp_path / "a" / "trunk-to-8").train_config.budget
    assert 0 < left < budget
    # The trunk's session as if it had taken 1000 s more: the budget is spent at the branch.
    from catlib.runs import branches
    later = types.SimpleNamespace(monotonic=lambda: time.monotonic() + 1000)
    monkeypatch.setattr(branches, "time", later)
    said = []
    run = train_run(BASELINE, dataclasses.replace(TRUNK, budget=budget), root=tmp_path / "b",
                    name="trunk", data=tiny_path, echo=said.append, **OPTS)
    assert run.status["status"] == "finished" and not (tmp_path / "b" / "trunk-to-8").exists()
    assert any(s.startswith("budget of 1000 s spent: the branches [8] of ") for s in said), said


def test_the_command_line_puts_a_cat_s_branches_on_absolute_steps():
    """--branches with a CAT and no --penalty_horizon: the Sobolev weight over this run's
    --train_steps as a number (the refused default before); given, it is kept; a baseline
    alone keeps None (its earlier config hash)."""
    from catlib.cli.commands import build_parser, configs_from_args
    common = ["train", "--variant", "causal", "--train_steps", "40", "--schedule", "wsd",
              "--warmup", "2", "--decay_share", "0.25", "--branches", "20"]
    for extra, horizon in ((["--models", "cat"], 40), (["--models", "cat", "--penalty_horizon", "60"], 60),
                           (["--models", "base"], None)):
        _, train, _ = configs_from_args(build_parser().parse_args(common + extra))
        assert train.penalty_horizon == horizon, extra
        train.validate()


@pytest.fixture(autouse=True)
def _no_fault(monkeypatch):
    monkeypatch.delenv("CATLIB_FAULT", raising=False)
