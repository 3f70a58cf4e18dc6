"""Run directories: files, reuse, resume after Ctrl-C, atomic checkpoints, bad input."""
import json
import shutil

import pytest
import torch

from catlib import runs
from catlib.nn.config import CATConfig
from catlib.runs import (RunError, RunInterrupted, TrainingFailed, atomic_save, config_hash,
                         load_checkpoint, open_run, train_run)
from catlib.training.loop import TrainConfig

TINY = CATConfig(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=1)
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
    # the kernel dispatch decides the rounding: a rebuild elsewhere can say why it differs
    assert env["torch_build"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert run.status["status"] == "finished" and len(_losses(run)) == 4
    table = json.loads((run.path / "eval.json").read_text())
    assert table["rows"][0]["len"] == 16 and set(table["leak"]) == {"cat", "base"}
    assert (run.path / "eval.csv").read_text().startswith("len,cat_ce,cat_ppl,cat_se,base_ce")

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
    # Exact, here and in the resumes below: the same kernels in this process, step by step.
    assert _losses(resumed) == _losses(straight)


def test_interrupted_checkpoint_write_keeps_the_previous(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    atomic_save({"step": 1}, path)

    def dying_save(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt
    monkeypatch.setattr(runs.files.torch, "save", dying_save)  # atomic_save's torch.save
    with pytest.raises(KeyboardInterrupt):
        atomic_save({"step": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert load_checkpoint(path) == {"step": 1}


def test_nan_keeps_the_last_good_checkpoint(data, tmp_path, monkeypatch):
    trainers = []
    real_init = runs.training.SideBySide.__init__

    def spy(self, *a, **kw):
        real_init(self, *a, **kw)
        trainers.append(self)
    monkeypatch.setattr(runs.training.SideBySide, "__init__", spy)

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


# ---------------------------------------------------------------- stale stored evaluations

def test_stale_evaluation_is_not_reused(data, tmp_path):
    """A run stopped by --budget was evaluated after 1 step; resumed to the end without an
    evaluation, then reused: the table must be the final weights', not the partial one.
    Would catch reuse that compares only the evaluation settings (the stale eval.json)."""
    straight = train_run(TINY, _tc(4), root=tmp_path / "a", **EVAL)
    stopped = train_run(TINY, _tc(4, budget=1e-9), root=tmp_path / "b", **EVAL)
    assert stopped.status["status"] == "stopped" and stopped.result["step"] == 1
    train_run(TINY, _tc(4), root=tmp_path / "b", evaluate=False, **EVAL)   # to the end
    reused = train_run(TINY, _tc(4), root=tmp_path / "b", **EVAL)
    assert reused.reused and reused.result["step"] == 4
    assert reused.result["rows"] == straight.result["rows"]
    assert reused.result["leak"] == straight.result["leak"]


def test_evaluation_of_other_weights_is_not_reused(data, tmp_path):
    """eval.json records the step and a digest of the weights it scored; a table whose
    digest does not match the weights on disk is recomputed. Would catch reuse keyed on
    the settings alone (here: the final weights replaced after the evaluation)."""
    run = train_run(TINY, _tc(2), root=tmp_path, **EVAL)
    cat, base = run.load_models()
    assert run.result["weights"] == runs.weights_digest({"cat": cat, "base": base})
    ck = torch.load(run.path / "cat.pt", weights_only=True)
    ck["state_dict"]["proj.bias"] += 1.0
    atomic_save(ck, run.path / "cat.pt")
    again = train_run(TINY, _tc(2), root=tmp_path, **EVAL)
    assert again.reused and again.result["rows"] != run.result["rows"]
    assert again.result["weights"] != run.result["weights"]


def test_code_change_gives_a_new_run(data, tmp_path, monkeypatch):
    """The code fingerprint is part of the run's identity: after a code change an identical
    call trains a new run; a run of other code is refused by eval and by --name reuse unless
    asked for. Would catch a run hash without the code (the book reusing stale runs)."""
    from catlib.common import provenance
    old = train_run(TINY, _tc(2), root=tmp_path, **EVAL)
    assert old.config["code"]["fingerprint"] == provenance.code_fingerprint()
    for module in (runs.identity, runs.training, runs.evaluation):  # where it is looked up
        monkeypatch.setattr(module, "code_fingerprint", lambda: "0123456789abcdef")
    new = train_run(TINY, _tc(2), root=tmp_path, **EVAL)
    assert not new.reused and new.path != old.path
    with pytest.raises(RunError, match="trained by other catlib code .* pass --retrain"):
        train_run(TINY, _tc(2), root=tmp_path, name=old.path.name, **EVAL)
    with pytest.raises(RunError, match="trained by other catlib code .*--allow-other-code"):
        runs.evaluate_run(open_run(old.path), lengths=(16,), eval_windows=2)
    result = runs.evaluate_run(open_run(old.path), lengths=(16,), eval_windows=2,
                               allow_other_code=True)
    assert result["code"] == "0123456789abcdef"
    retrained = train_run(TINY, _tc(2), root=tmp_path, name=old.path.name, retrain=True, **EVAL)
    assert retrained.config["code"]["fingerprint"] == "0123456789abcdef"


def test_code_fingerprint_covers_every_model_module(tmp_path, monkeypatch):
    """Every catlib module that defines an nn.Module lives in the fingerprinted folder
    catlib/nn/ (or is a fingerprinted top-level module); a change to any file there, and a
    new file there, changes the fingerprint. Would catch a model module outside nn/, or a
    fingerprint that reads a hand-kept list of the folder's files."""
    import importlib
    import inspect
    import pkgutil

    import catlib
    from catlib.common import provenance
    for info in pkgutil.walk_packages(catlib.__path__, "catlib."):
        if info.name.endswith(".__main__") or info.name == "catlib.book":  # __main__ runs a command
            continue
        mod = importlib.import_module(info.name)
        defines = [c for _, c in inspect.getmembers(mod, inspect.isclass)
                   if c.__module__ == mod.__name__ and issubclass(c, torch.nn.Module)]
        if defines:
            top = info.name.removeprefix("catlib.")
            assert (info.name.startswith(f"catlib.{provenance.FINGERPRINT_PACKAGE}.")
                    or top in provenance.FINGERPRINT_MODULES), (info.name, defines)
    files = provenance.fingerprint_files()
    nn_files = sorted(p.relative_to(provenance.PACKAGE_DIR).as_posix()
                      for p in (provenance.PACKAGE_DIR / "nn").glob("*.py"))
    assert set(nn_files) <= set(files) and "nn/model.py" in files and "training/loop.py" in files
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(provenance.PACKAGE_DIR / name, tmp_path / name)
    monkeypatch.setattr(provenance, "PACKAGE_DIR", tmp_path)
    provenance._fingerprint.cache_clear()
    before = provenance.code_fingerprint()
    assert before == provenance.code_fingerprint()
    with open(tmp_path / "nn" / "model.py", "a") as f:
        f.write("\n# a change\n")
    provenance._fingerprint.cache_clear()
    changed = provenance.code_fingerprint()
    assert changed != before
    (tmp_path / "nn" / "new_kernel.py").write_text("# a new model module\n")
    (tmp_path / "nn" / "__pycache__").mkdir(exist_ok=True)
    provenance._fingerprint.cache_clear()
    assert provenance.code_fingerprint() != changed
    assert "nn/new_kernel.py" in provenance.fingerprint_files()
    added = provenance.code_fingerprint()
    (tmp_path / "nn" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"bytecode")
    provenance._fingerprint.cache_clear()
    assert provenance.code_fingerprint() == added     # bytecode is not source
    provenance._fingerprint.cache_clear()


def test_ctrl_c_during_the_update_keeps_its_metrics(data, tmp_path, monkeypatch):
    """SIGINT arrives while the optimiser updates step 2: the step is completed, logged and
    checkpointed; the resumed run logs every step once and equals a straight run.
    Would catch raising the deferred Ctrl-C before the step's metrics are logged (0,1,3,4)."""
    import os
    import signal
    straight = train_run(TINY, _tc(5), root=tmp_path / "a", evaluate=False, **EVAL)
    real_init, sent = runs.training.SideBySide.__init__, []

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        update = self.opt_cat.step

        def step(*args, **kwargs):
            if self.step == 2 and not sent:
                sent.append(1)
                os.kill(os.getpid(), signal.SIGINT)  # handled inside the update
            return update(*args, **kwargs)
        self.opt_cat.step = step
    monkeypatch.setattr(runs.training.SideBySide, "__init__", init)
    with pytest.raises(RunInterrupted, match="interrupted after 3 of 5 steps"):
        train_run(TINY, _tc(5), root=tmp_path / "b", **EVAL)
    run = open_run(next((tmp_path / "b").iterdir()))
    assert [m["step"] for m in run.metrics()] == [0, 1, 2]
    resumed = train_run(TINY, _tc(5), root=tmp_path / "b", evaluate=False, **EVAL)
    assert [m["step"] for m in resumed.metrics()] == [0, 1, 2, 3, 4]
    assert _losses(resumed) == _losses(straight)


def test_bad_input_is_refused_before_anything_is_written(data, tmp_path):
    """Would catch validation after config.json/env.json are written, or after training
    (a published run with lengths 1 trained to the end, then failing in its evaluation)."""
    cases = [(dict(seed=-1), {}, "seed must be an integer from 0 to 4294967295"),
             (dict(seed=2**32), {}, "seed must be"),
             (dict(split="80/20"), {}, "split must be one of"),
             (dict(models=("cat", "gpt")), {}, "models must be one or both"),
             ({}, dict(lengths=(1, 16)), "lengths must be >= 2 for the published"),
             ({}, dict(eval_windows=0), "eval_windows must be positive"),
             (dict(seq=1), {}, "seq must be >= 2 for the published")]
    for tc, ev, message in cases:
        with pytest.raises(RunError, match=message):
            train_run(TINY, TrainConfig(**{"train_steps": 2, "batch": 2, "seq": 16, **tc}),
                      root=tmp_path / "runs", **{**EVAL, **ev})
        assert not (tmp_path / "runs").exists()
    causal = CATConfig(**{**TINY.to_dict(), "variant": "causal"})
    run = train_run(causal, _tc(1), root=tmp_path / "runs", **{**EVAL, "lengths": (1,)})
    assert run.result["rows"][0]["len"] == 1  # T = 1 is fine for the causal operator


def test_torn_last_metrics_line_is_dropped(data, tmp_path):
    """A crash in the middle of a metrics write leaves half a line: resume drops it (that
    step is redone) and the run equals a straight one; a damaged line in the middle is a
    RunError naming the file and line. Would catch json.loads on every line (a raw
    JSONDecodeError) or silently skipping a damaged middle line (a step lost)."""
    straight = train_run(TINY, _tc(5), root=tmp_path / "a", evaluate=False, **EVAL)

    def ctrl_c(m):
        if m["step"] == 2:
            raise KeyboardInterrupt
    with pytest.raises(RunInterrupted):
        train_run(TINY, _tc(5), root=tmp_path / "b", on_step=ctrl_c, **EVAL)
    run_dir = next((tmp_path / "b").iterdir())
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 3, "ce": 4.1')
    resumed = train_run(TINY, _tc(5), root=tmp_path / "b", evaluate=False, **EVAL)
    assert _losses(resumed) == _losses(straight)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "metrics.jsonl").write_text(lines[0] + "{garbage\n" + "".join(lines[1:]))
    with pytest.raises(RunError, match=r"metrics.jsonl line 2 is damaged"):
        open_run(run_dir).metrics()


def test_dropout_in_eval_is_reproducible(data, tmp_path):
    """Two evaluations with dropout on agree (a recorded seed), and leave the global RNG as
    they found it. Would catch masks drawn from the unseeded global RNG."""
    run = train_run(TINY, _tc(2), root=tmp_path, evaluate=False, **EVAL)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = runs.evaluate_run(run, lengths=(16,), eval_windows=2, dropout_in_eval=True)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(7)
    second = runs.evaluate_run(run, lengths=(16,), eval_windows=2, dropout_in_eval=True)
    assert first["rows"] == second["rows"] and first["settings"]["dropout_seed"] == 0
    plain = runs.evaluate_run(run, lengths=(16,), eval_windows=2)
    assert plain["rows"][0]["base_ce"] != first["rows"][0]["base_ce"]  # dropout did act


def test_files_get_the_umask_mode(data, tmp_path):
    """Would catch files left with mkstemp's 0600 whatever the umask."""
    import os
    old = os.umask(0o022)
    try:
        run = train_run(TINY, _tc(2), root=tmp_path / "a", **EVAL)
        os.umask(0o077)
        private = train_run(TINY, _tc(2), root=tmp_path / "b", **EVAL)
    finally:
        os.umask(old)
    for path, mode in ((run.path, 0o644), (private.path, 0o600)):
        modes = {p.name: p.stat().st_mode & 0o777 for p in path.iterdir()}
        assert set(modes.values()) == {mode}, modes


def test_split_and_models(data, tmp_path):
    """split and models are part of the run's identity; a baseline-only run trains and
    evaluates the baseline alone (CAT's columns None), and is resumable and reusable.
    Would catch a split not passed to load_corpus or a run that needs both models."""
    from catlib.measure.evaluate import format_table
    both = train_run(TINY, _tc(2), root=tmp_path, **EVAL)
    split = train_run(TINY, _tc(2, split="90/10"), root=tmp_path, **EVAL)
    assert split.hash != both.hash and split.train_config.split == "90/10"
    assert split.result["rows"][0]["bigram_ce"] != both.result["rows"][0]["bigram_ce"]
    base = train_run(TINY, _tc(3, models=("base",)), root=tmp_path, **EVAL)
    assert base.hash != config_hash(TINY, _tc(3), "x")
    assert {p.name for p in base.path.iterdir()} >= {"baseline.pt"} and not (base.path / "cat.pt").exists()
    assert all("base_loss" in m and "ce" not in m for m in base.metrics())
    row = base.result["rows"][0]
    assert row["cat_ce"] is None and row["dce"] is None and row["base_ce"] > 0
    assert base.result["leak"]["cat"] is None
    assert format_table(base.result["rows"]).splitlines()[1].startswith("16 | - | - | ")
    cat, b = open_run(base.path).load_models()
    assert cat is None and b is not None
    assert train_run(TINY, _tc(3, models=["base"]), root=tmp_path, **EVAL).reused
