"""Run directories: files, reuse, resume after Ctrl-C, atomic checkpoints, bad input."""
import json

import pytest
import torch

from catlib import runs
from catlib.config import CATConfig
from catlib.runs import (RunError, RunInterrupted, TrainingFailed, atomic_save, config_hash,
                         load_checkpoint, open_run, train_run)
from catlib.train import TrainConfig

TINY = CATConfig(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", steps=1)
EVAL = dict(lengths=(16,), eval_windows=2, progress=False, echo=None, device="cpu")


def _tc(steps=4, **kw):
    return TrainConfig(train_steps=steps, batch=2, seq=16, checkpoint_every=2, **kw)


def _losses(run):
    return [(m["ce"], m["loss"], m["base_loss"]) for m in run.metrics() if m["kind"] == "train"]


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def test_run_directory_and_reuse(data, tmp_path):
    run = train_run(TINY, _tc(), root=tmp_path, **EVAL)
    assert run.path.name == f"published-{run.hash[:8]}" and not run.reused
    files = {p.name for p in run.path.iterdir()}
    assert {"config.json", "env.json", "status.json", "metrics.jsonl", "checkpoint.pt", "cat.pt",
            "baseline.pt", "eval.json", "eval.csv"} <= files
    assert not [f for f in files if f.endswith(".tmp")]
    env = json.loads((run.path / "env.json").read_text())
    assert env["versions"]["torch"] and env["device"]["type"] == "cpu" and "commit" in env["git"]
    assert run.status["status"] == "finished" and len(_losses(run)) == 4
    table = json.loads((run.path / "eval.json").read_text())
    assert table["rows"][0]["len"] == 16 and set(table["leak"]) == {"cat", "base"}
    assert (run.path / "eval.csv").read_text().startswith("len,cat_ce,cat_ppl,base_ce")

    steps, mtime = [], (run.path / "cat.pt").stat().st_mtime_ns
    again = train_run(TINY, _tc(), root=tmp_path, on_step=steps.append, **EVAL)
    assert again.reused and steps == [] and again.result["rows"] == table["rows"]
    assert (run.path / "cat.pt").stat().st_mtime_ns == mtime
    # evaluation settings are not part of the hash: a new table, no retraining
    other = train_run(TINY, _tc(), root=tmp_path, **{**EVAL, "lengths": (8, 16)})
    assert other.reused and [r["len"] for r in other.result["rows"]] == [8, 16]
    cat, base = open_run(run.path).load_models()
    assert torch.equal(cat.proj.weight, torch.load(run.path / "cat.pt", weights_only=True)
                       ["state_dict"]["proj.weight"])


def test_config_hash_identity():
    h = config_hash(TINY, _tc(), "sha")
    assert h == config_hash(TINY, _tc(budget=5.0, val_every=3), "sha")
    assert h != config_hash(TINY, TrainConfig(train_steps=4, batch=2, seq=16, lr=1e-3), "sha")
    assert h != config_hash(CATConfig(**{**TINY.to_dict(), "variant": "causal"}), _tc(), "sha")
    # a correction spelled out equals the variant's default
    assert h == config_hash(CATConfig(**{**TINY.to_dict(), "causal": False}), _tc(), "sha")


def test_ctrl_c_then_resume_equals_straight_run(data, tmp_path):
    straight = train_run(TINY, _tc(5), root=tmp_path / "a", evaluate=False, **EVAL)

    def ctrl_c(m):
        if m["step"] == 2:
            raise KeyboardInterrupt
    with pytest.raises(RunInterrupted, match="interrupted after 3 of 5 steps; checkpoint saved"):
        train_run(TINY, _tc(5), root=tmp_path / "b", on_step=ctrl_c, **EVAL)
    run = open_run(next((tmp_path / "b").iterdir()))
    assert run.status["status"] == "interrupted"
    assert load_checkpoint(run.path / "checkpoint.pt")["trainer"]["step"] == 3
    resumed = train_run(TINY, _tc(5), root=tmp_path / "b", evaluate=False, **EVAL)
    assert resumed.status["status"] == "finished"
    assert _losses(resumed) == _losses(straight)


def test_interrupted_checkpoint_write_keeps_the_previous(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    atomic_save({"step": 1}, path)

    def dying_save(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt
    monkeypatch.setattr(runs.torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        atomic_save({"step": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert load_checkpoint(path) == {"step": 1}


def test_nan_keeps_the_last_good_checkpoint(data, tmp_path, monkeypatch):
    trainers = []
    real_init = runs.SideBySide.__init__

    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        trainers.append(self)
    monkeypatch.setattr(runs.SideBySide, "__init__", spy)

    def poison(m):  # after step 2 (3 steps done; last checkpoint after 2) CAT's output is nan
        if m["step"] == 2:
            with torch.no_grad():
                trainers[0].cat.proj.bias.fill_(float("nan"))
    with pytest.raises(TrainingFailed, match=r"CAT loss is nan at step 3; the last good "
                                             r"checkpoint \(after 2 steps\)"):
        train_run(TINY, _tc(5), root=tmp_path, on_step=poison, **EVAL)
    run = open_run(next(tmp_path.iterdir()))
    assert run.status["status"] == "failed"
    assert load_checkpoint(run.path / "checkpoint.pt")["trainer"]["step"] == 2


def test_bad_run_directories(data, tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        open_run(tmp_path / "nope")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "config.json").write_text("{not json")
    with pytest.raises(RunError, match="cannot read"):
        open_run(tmp_path / "junk")
    with pytest.raises(RunError, match="cannot read"):  # never overwritten by train
        train_run(TINY, _tc(), root=tmp_path, name="junk", **EVAL)
    assert (tmp_path / "junk" / "config.json").read_text() == "{not json"
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage")
    with pytest.raises(RunError, match="cannot load checkpoint"):
        load_checkpoint(bad)


def test_checkpoint_from_another_config(data, tmp_path):
    a = train_run(TINY, _tc(2), root=tmp_path, name="a", **EVAL)
    b = train_run(TINY, _tc(2, seed=1), root=tmp_path, name="b", **EVAL)
    for f in ("cat.pt", "checkpoint.pt"):
        (b.path / f).write_bytes((a.path / f).read_bytes())
    with pytest.raises(RunError, match="another config"):
        open_run(b.path).load_models()
    (b.path / "status.json").write_text(json.dumps({"status": "interrupted", "step": 1}))
    with pytest.raises(RunError, match="another config"):
        train_run(TINY, _tc(2, seed=1), root=tmp_path, name="b", **EVAL)
    with pytest.raises(RunError, match="another config"):  # a different config, same name
        train_run(TINY, _tc(3), root=tmp_path, name="a", **EVAL)
    assert open_run(a.path).status["status"] == "finished"
