"""A ladder point (``TrainConfig.checkpoints``) cut short: kill -9 or Ctrl-C while
``ladder-<step>-<model>.pt`` is written, or a run cut by older code that checkpointed a
ladder step before writing its weights. A checkpoint at a ladder step must imply the
step's ladder files, and the resumed run must end with the files, the losses and the
weights (bitwise: the same kernels on the CPU) of a run never stopped."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catlib import runs
from catlib.nn.config import CATConfig
from catlib.runs import RunInterrupted, load_checkpoint, open_run, train_run
from catlib.runs.training import ladder_file
from catlib.training.loop import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
TINY = CATConfig(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=1)
# Ladder step 2 is also a checkpoint step (checkpoint_every 2), step 3 is not.
TRAIN = TrainConfig(train_steps=4, batch=2, seq=16, checkpoint_every=2, checkpoints=(2, 3))
OPTS = dict(evaluate=False, progress=False, echo=None, device="cpu")
IGNORED = ("seconds", "tokens_per_s")

# The same training as _train, in its own interpreter (to be killed with SIGKILL).
SCRIPT = """
import json, sys
from catlib.nn.config import CATConfig
from catlib.runs import train_run
from catlib.training.loop import TrainConfig
model, train = (json.loads(a) for a in sys.argv[2:4])
train_run(CATConfig.from_dict(model), TrainConfig(**train), root=sys.argv[1], name="run",
          evaluate=False, progress=False, echo=None, device="cpu")
"""


def _train(root, **kw):
    return train_run(TINY, TRAIN, root=root, name="run", **OPTS, **kw)


def _state(path: Path) -> dict:
    """The files of a run directory, its metrics (without timings) and the weights of each
    weight file (final and ladder), for exact comparisons."""
    files = sorted(p.name for p in path.iterdir() if p.name != "lock")
    metrics = [{k: v for k, v in m.items() if k not in IGNORED} for m in open_run(path).metrics()]
    weights = {f: torch.load(path / f, weights_only=True)["state_dict"]
               for f in files if f.endswith(".pt") and f != "checkpoint.pt"}
    return {"files": files, "metrics": metrics, "weights": weights}


def _assert_same(a: dict, b: dict) -> None:
    assert a["files"] == b["files"], (f"missing {sorted(set(b['files']) - set(a['files']))}, "
                                      f"extra {sorted(set(a['files']) - set(b['files']))}")
    assert a["metrics"] == b["metrics"]
    for f, sd in b["weights"].items():
        assert all(torch.equal(a["weights"][f][k], sd[k]) for k in sd), f


def _assert_ladder_kept(path: Path) -> None:
    """The invariant: a checkpoint at a ladder step implies that step's ladder files."""
    step = load_checkpoint(path / "checkpoint.pt")["trainer"]["step"]
    if step in TRAIN.checkpoints:
        missing = [ladder_file(step, m) for m in TRAIN.models
                   if not (path / ladder_file(step, m)).exists()]
        assert not missing, f"checkpoint.pt after {step} steps, but {missing} missing"


@pytest.fixture(autouse=True)
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    monkeypatch.delenv("CATLIB_FAULT", raising=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_path):
    """A run never stopped, in this process; it writes each ladder file once (an expensive
    write: not once for the checkpoint and again for the step)."""
    root, writes, real = tmp_path_factory.mktemp("reference"), [], runs.files._fault_point
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        mp.delenv("CATLIB_FAULT", raising=False)
        mp.setattr(runs.files, "_fault_point", lambda name, tear=None: (writes.append(name),
                                                                        real(name, tear)))
        _train(root)
    ladders = [ladder_file(s, m) for s in TRAIN.checkpoints for m in TRAIN.models]
    assert sorted(w for w in writes if w.startswith("ladder-")) == sorted(ladders)
    state = _state(root / "run")
    assert set(ladders) <= set(state["files"])
    return state


def test_kill_9_while_the_ladder_file_is_written(tmp_path, reference):
    """SIGKILL in the write of ladder-2-base.pt (after step 2, a checkpoint step), then the
    same training again: it resumes and ends as the run never stopped. Would catch a
    checkpoint of step 2 written before its ladder files: the resumed run starts after
    step 2 and never writes them (reading the ladder then fails on every start)."""
    argv = [sys.executable, "-c", SCRIPT, str(tmp_path), json.dumps(TINY.to_dict()),
            json.dumps(TRAIN.to_dict())]
    env = {**os.environ, "CATLIB_FAULT": "kill:ladder-2-base.pt:1"}
    # timeout for a hang only: the tiny run takes seconds
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == -9, r.stderr
    _assert_ladder_kept(tmp_path / "run")
    resumed = _train(tmp_path)
    assert resumed.status["status"] == "finished"
    _assert_same(_state(tmp_path / "run"), reference)


@pytest.mark.parametrize("step", [2, 3])
def test_ctrl_c_while_the_ladder_file_is_written(step, tmp_path, monkeypatch, reference):
    """Ctrl-C in the write of ladder-<step>-base.pt (step 2: a checkpoint step, step 3:
    not): the run is interrupted after that step with its ladder files, and the same
    training again ends as the run never stopped. Would catch the Ctrl-C handler's
    checkpoint at a ladder step whose files were not (all) written."""
    real, hit = runs.files._fault_point, []

    def fault_point(name, tear=None):
        if name == ladder_file(step, "base") and not hit:
            hit.append(name)
            raise KeyboardInterrupt      # as SIGINT would, in the middle of the write
        real(name, tear)
    monkeypatch.setattr(runs.files, "_fault_point", fault_point)
    with pytest.raises(RunInterrupted, match=f"interrupted after {step} of 4 steps"):
        _train(tmp_path)
    assert hit
    _assert_ladder_kept(tmp_path / "run")
    resumed = _train(tmp_path)
    assert resumed.status["status"] == "finished"
    _assert_same(_state(tmp_path / "run"), reference)


def test_a_run_cut_by_older_code_gets_its_ladder_files(tmp_path, reference):
    """A run interrupted after ladder step 2 whose ladder files are missing (older code
    checkpointed before writing them, and was cut in between): resuming it writes them from
    the restored weights, which are step 2's; it ends as the run never stopped."""
    def ctrl_c(m):
        if m["step"] == 1:               # after step 2 (metrics count from 0)
            raise KeyboardInterrupt
    with pytest.raises(RunInterrupted, match="interrupted after 2 of 4 steps"):
        _train(tmp_path, on_step=ctrl_c)
    for m in TRAIN.models:
        (tmp_path / "run" / ladder_file(2, m)).unlink(missing_ok=True)
    resumed = _train(tmp_path)
    assert resumed.status["status"] == "finished"
    _assert_same(_state(tmp_path / "run"), reference)
