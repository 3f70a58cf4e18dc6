"""The side-by-side training loop: schedule, seeds, resume, validation, budget, NaN."""
import io
import os
import random
import signal

import numpy as np
import pytest
import torch

from catlib.training import loop as train
from catlib.nn.config import CATConfig
from catlib.training.loop import NonFiniteLoss, SideBySide, TrainConfig, penalty_weight, train_loop

# published: dropout inside the dynamics draws random numbers at every evaluation, a hard
# case for resume (dopri5 is avoided here: with that dropout its step count explodes, defect 6)
TINY = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=2)


def _losses(log):
    return [(m["ce"], m["loss"], m["base_loss"]) for m in log if m["kind"] == "train"]


def _run(corpus, steps=4, **tc):
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=steps, batch=2, seq=16, **tc),
                   corpus.train)
    log = []
    assert train_loop(t, val_ids=corpus.val, log=log.append, echo=None, progress=False) == "finished"
    return t, log


def test_penalty_schedule():
    assert penalty_weight(0, 800, 5e-7, once=False) == 5e-7           # applied twice
    assert penalty_weight(400, 800, 5e-7, once=False) == pytest.approx(2.5e-7)
    assert penalty_weight(799, 800, 5e-7, once=False) == pytest.approx(1e-7)  # floor 0.2
    assert penalty_weight(0, 800, 5e-7, once=True) == 1.0             # applied once
    assert penalty_weight(700, 800, 5e-7, once=True) == pytest.approx(0.2)


def test_metrics_and_seed(corpus):
    t, log = _run(corpus, steps=2)
    m = log[0]
    for key in ("step", "ce", "loss", "base_loss", "penalty", "nfe_forward", "nfe_backward",
                "seconds", "tokens_per_s"):
        assert key in m
    assert m["step"] == 0 and m["nfe_forward"] == 8  # rk4-classic, 2 steps
    # The loss was summed in float32: rel 1e-6 (8 ulps) covers its rounding.
    assert m["loss"] == pytest.approx(m["ce"] + 5e-7 * m["penalty"])
    # Exact: a replay in this process, the same kernels on the same shapes.
    assert _losses(_run(corpus, steps=2)[1]) == _losses(log)
    assert _losses(_run(corpus, steps=2, seed=1)[1]) != _losses(log)


def test_adjoint_nfe_is_logged(corpus):
    cfg = CATConfig(variant="causal", **{**TINY, "solver": "dopri5", "rtol": 1e-3, "atol": 1e-5})
    t = SideBySide(cfg, TrainConfig(train_steps=1, batch=2, seq=16), corpus.train)
    m = t.train_step()
    assert m["nfe_forward"] > 0 and m["nfe_backward"] > 0
    assert m["loss"] == pytest.approx(m["ce"] + 1.0 * m["penalty"])  # weight applied once (float32)


def test_resume_gives_identical_losses(corpus):
    _, straight = _run(corpus, steps=4)
    first = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=4, batch=2, seq=16), corpus.train)
    log = []
    calls = []

    def ctrl_c(module, args):  # Ctrl-C in the middle of step 2: after the batch was drawn
        calls.append(1)         # and CAT's dropout drew its masks, before any update
        if len(calls) == 3:
            raise KeyboardInterrupt
    first.base.register_forward_pre_hook(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train_loop(first, log=log.append, echo=None, progress=False)
    assert first.step == 2
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    in_process = list(log)
    train_loop(first, log=in_process.append, echo=None, progress=False)  # continue after rewind()
    # Exact, here and below: a resume runs the very kernels of the straight run, in this process.
    assert _losses(in_process) == _losses(straight)
    torch.manual_seed(1234)  # a fresh process would have other RNG state
    second = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=4, batch=2, seq=16), corpus.train)
    second.load_state_dict(torch.load(buf, weights_only=True))
    train_loop(second, log=log.append, echo=None, progress=False)
    assert _losses(log) == _losses(straight)


def test_validation_does_not_change_training(corpus):
    _, plain = _run(corpus, steps=3)
    _, validated = _run(corpus, steps=3, val_every=1, val_windows=2)
    assert _losses(validated) == _losses(plain)     # exact: the same training steps, replayed
    vals = [m for m in validated if m["kind"] == "val"]
    assert len(vals) == 3 and all(v["val_ce"] > 0 and v["val_base_ce"] > 0 for v in vals)


def test_validation_restores_every_rng(corpus, monkeypatch):
    """Validation in eval mode happens to draw no random numbers, so the test above would
    pass without the RNG restore; here validation draws from torch, numpy and python.
    Would catch a validate() that does not restore the RNG states of the step boundary."""
    def greedy(model, val, length, **kw):
        torch.rand(5), np.random.rand(5), random.random()
        return {"len": length, "ce": 1.0}
    monkeypatch.setattr(train, "cross_entropy", greedy)
    _, plain = _run(corpus, steps=3)
    _, validated = _run(corpus, steps=3, val_every=1)
    assert _losses(validated) == _losses(plain)   # CAT's dropout reads the torch RNG
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=3, batch=2, seq=16), corpus.train)
    t.train_step()
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    t.validate(corpus.val)
    assert torch.equal(torch.get_rng_state(), before[0])
    assert (np.random.get_state()[1] == before[1]).all() and random.getstate() == before[2]


def test_ctrl_c_in_the_update_is_raised_after_the_step_is_recorded(corpus):
    """SIGINT during the optimiser update: the update completes, its metrics reach the log,
    then KeyboardInterrupt. Would catch raising before the log (a step done, never logged)."""
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=3, batch=2, seq=16), corpus.train)
    update = t.opt_base.step

    def step(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)
        return update(*a, **kw)
    t.opt_base.step = step
    log = []
    with pytest.raises(KeyboardInterrupt):
        train_loop(t, log=log.append, echo=None, progress=False)
    assert t.step == 1 and [m["step"] for m in log] == [0]


def test_one_model_only(corpus, capsys):
    """models=("cat",) or ("base",) trains that model alone: the other is None, its metrics
    keys absent, the progress line names only the trained one. Would catch a trainer that
    needs both models."""
    for models, present, absent in ((("cat",), "loss", "base_loss"), (("base",), "base_loss", "ce")):
        t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=1, batch=2, seq=16, models=models,
                                                      val_every=1, log_every=1), corpus.train)
        log = []
        train_loop(t, val_ids=corpus.val, log=log.append, progress=False)
        assert present in log[0] and absent not in log[0]
        assert (t.cat is None) == (models == ("base",)) and (t.base is None) == (models == ("cat",))
        assert (log[1]["val_ce"] is None) == (models == ("base",))
        state = t.state_dict()
        assert state["cat" if models == ("base",) else "base"] is None
        t.load_state_dict(state)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("step 0 | CAT ") and " base " not in out[0]
    assert out[1].startswith("step 0 | base ") and "CAT" not in out[1]


def test_budget_stops_at_a_step_boundary(corpus, capsys):
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=50, batch=2, seq=16, budget=1e-9),
                   corpus.train)
    saved = []
    assert train_loop(t, checkpoint=lambda: saved.append(t.step), progress=False) == "budget"
    assert t.step == 1 and saved == [1]
    assert "budget of 1e-09 s reached after 1 of 50 steps" in capsys.readouterr().out


def test_progress_line_every_100_steps(corpus, capsys):
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=3, batch=2, seq=16, log_every=2),
                   corpus.train)
    train_loop(t, progress=False)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" |")[0] for line in out] == ["step 0", "step 2"]
    assert out[0].startswith("step 0 | CAT ") and " | base " in out[0]


def test_nan_loss_stops_before_any_update(corpus):
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=5, batch=2, seq=16), corpus.train)
    t.train_step()
    before = {k: v.clone() for k, v in t.cat.state_dict().items()}
    t.cat.proj.bias.data[0] = float("nan")
    with pytest.raises(NonFiniteLoss, match="CAT loss is nan at step 1"):
        train_loop(t, progress=False, echo=None)
    assert t.step == 1
    after = t.cat.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k != "proj.bias")



def test_nan_loss_whose_backward_fails_is_reported_as_nan(corpus, monkeypatch):
    # The losses are read after the backward passes (one read per step): a backward pass
    # broken by the NaN (e.g. an adaptive solver giving up) must still say "loss is nan".
    t = SideBySide(CATConfig(**TINY), TrainConfig(train_steps=5, batch=2, seq=16), corpus.train)
    t.cat.proj.bias.data[0] = float("nan")

    def broken(self, *args, **kwargs):
        raise RuntimeError("the solver gave up")
    monkeypatch.setattr(torch.Tensor, "backward", broken)
    with pytest.raises(NonFiniteLoss, match="CAT loss is nan at step 0"):
        t.train_step()
    assert t.step == 0

def test_train_config_validation():
    # seed: numpy's global seed is 0..2**32-1 (a -1 used to fail after files were written)
    for bad in (dict(train_steps=0), dict(batch=-1), dict(lr=0.0), dict(lr=float("nan")),
                dict(budget=0), dict(val_every=-1), dict(seed=-1), dict(seed=2**32),
                dict(seed=1.5), dict(split="80/20"), dict(models=()), dict(models=("cat", "cat")),
                dict(models=("cat", "gpt"))):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TrainConfig(**bad).validate()
    TrainConfig(seed=2**32 - 1, split="90/10", models=["base"]).validate()
    assert TrainConfig(models=("base", "cat")).identity() == TrainConfig().identity()
    assert TrainConfig(models=("base",)).identity() != TrainConfig().identity()
    with pytest.raises(ValueError, match="seq must be at most 49998"):
        TrainConfig(seq=50000).validate(50000)


def test_deterministic_gives_the_same_numbers_on_the_cpu(corpus, monkeypatch):
    """On the CPU every kernel used is deterministic already: the option changes no bit."""
    from catlib.common.provenance import determinism

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    _, plain = _run(corpus, steps=2)
    assert determinism()["algorithms"] is False
    try:
        _, det = _run(corpus, steps=2, deterministic=True)
        assert determinism() == {"algorithms": True, "cublas_workspace_config": ":4096:8"}
    finally:
        torch.use_deterministic_algorithms(False)   # torch's switch is process-wide
    assert _losses(det) == _losses(plain)
    with pytest.raises(ValueError, match="deterministic must be True or False"):
        TrainConfig(deterministic="yes").validate()
