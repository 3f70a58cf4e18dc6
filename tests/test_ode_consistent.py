"""ODE-consistent training: CATConfig.train_solver_steps, a step count drawn per step."""
import dataclasses
import io
import json

import pytest
import torch

from catlib.experiment import grid as ex

from catlib.experiment import pool
from catlib.measure.evaluate import cross_entropy
from catlib.nn.config import CATConfig
from catlib.nn.model import solved_with
from catlib.training.loop import SideBySide, TrainConfig, drawn_solver_steps, train_loop

TINY = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=2)
DRAWN = dict(TINY, train_solver_steps=(1, 2))


def _trainer(corpus, steps=4, **model):
    return SideBySide(CATConfig(**model), TrainConfig(train_steps=steps, batch=2, seq=16,
                                                      models=("cat",)), corpus.train)


def _losses(log):
    return [(m["ce"], m["loss"]) for m in log if m["kind"] == "train"]


def _solves(model):
    """Record (input ids, solver_steps) of each forward call of ``model``."""
    seen = []
    model.register_forward_pre_hook(lambda m, args: seen.append((args[0].clone(),
                                                                 m.config.solver_steps)))
    return seen


def test_draws_are_reproducible_within_the_set_and_leave_the_global_rng_alone():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    draws = [drawn_solver_steps((1, 2), 0, s) for s in range(64)]
    assert torch.equal(torch.get_rng_state(), state)        # its own generator
    torch.manual_seed(123)                                   # another global state: same draws
    assert [drawn_solver_steps((1, 2), 0, s) for s in range(64)] == draws
    assert set(draws) == {1, 2}                              # both counts occur
    assert set(drawn_solver_steps((1, 3, 4), 7, s) for s in range(64)) <= {1, 3, 4}
    assert [drawn_solver_steps((1, 2), 1, s) for s in range(64)] != draws   # seed matters


def test_training_draws_per_step_and_evaluation_uses_solver_steps(corpus):
    t = _trainer(corpus, **DRAWN)
    seen = _solves(t.cat)
    nfe = [t.train_step()["nfe_forward"] for _ in range(4)]
    counts = [drawn_solver_steps((1, 2), 0, s) for s in range(4)]
    assert [k for _, k in seen] == counts and set(counts) == {1, 2}
    assert nfe == [4 * k for k in counts]                    # rk4-classic: 4 evaluations a step
    assert t.cat.config == t.config and t.cat.config.solver_steps == 2   # restored after each
    seen.clear()
    ce = cross_entropy(t.cat, corpus.val, 16, eval_windows=2)["ce"]
    assert [k for _, k in seen] and {k for _, k in seen} == {2}
    with solved_with(t.cat, steps=1):   # the same weights with one step: another CE
        assert cross_entropy(t.cat, corpus.val, 16, eval_windows=2)["ce"] != ce
    assert t.cat.config.solver_steps == 2


def test_batches_and_global_rng_are_those_of_a_run_without_the_option(corpus):
    """Causal CAT (dropout outside the ODE): the step count changes no random draw."""
    states, batches = [], []
    for model in (TINY, DRAWN):   # one after the other: they share the global RNGs
        t = _trainer(corpus, variant="causal", **model)
        batches.append(_solves(t.cat))
        for _ in range(3):
            t.train_step()
        states.append(t.state_dict()["rng"])
    assert torch.equal(states[0]["torch"], states[1]["torch"])
    assert states[0]["python"] == states[1]["python"]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(*batches))
    assert [k for _, k in batches[1]] != [k for _, k in batches[0]]


def test_resume_draws_the_same_counts_and_losses(corpus):
    straight = []
    train_loop(_trainer(corpus, **DRAWN), log=straight.append, echo=None, progress=False)
    first = _trainer(corpus, steps=2, **DRAWN)
    log = []
    train_loop(first, log=log.append, echo=None, progress=False)
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(1234)   # a fresh process would have other RNG state
    second = _trainer(corpus, **DRAWN)
    second.load_state_dict(torch.load(buf, weights_only=True))
    seen = _solves(second.cat)
    train_loop(second, log=log.append, echo=None, progress=False)
    assert [k for _, k in seen] == [drawn_solver_steps((1, 2), 0, s) for s in (2, 3)]
    assert _losses(log) == _losses(straight)      # exact: the same kernels, in this process


def test_config_json_and_the_hash_of_existing_configs():
    plain = CATConfig(**TINY)
    d = plain.to_dict()
    assert "train_solver_steps" not in d                     # configs of earlier runs unchanged
    omitted = ("train_solver_steps", "far_heads", "attention_residual",
               "baseline_block")                                      # left out at defaults
    assert d == {k: v for k, v in dataclasses.asdict(plain).items() if k not in omitted}
    cfg = CATConfig(**DRAWN)
    back = CATConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert cfg.to_dict()["train_solver_steps"] == [1, 2]
    assert back == cfg and back.train_solver_steps == (1, 2)
    assert CATConfig.from_dict(d) == plain


@pytest.mark.parametrize("options, words", [
    (dict(solver="dopri5"), "fixed-step solver"),
    (dict(train_solver_steps=(0, 2)), "integers >= 1"),
    (dict(train_solver_steps=()), "non-empty"),
    (dict(train_solver_steps=(True, 2)), "integers >= 1"),
    (dict(train_solver_steps=2), "tuple"),
    (dict(train_solver_steps=(1, 1, 2)), "repeat"),
    (dict(train_solver_steps=(1, 3)), "must equal solver_steps"),
    (dict(train_solver_steps=(1,)), "set solver_steps=1"),
])
def test_validation_errors(options, words):
    with pytest.raises(ValueError, match=words):
        CATConfig(**{**DRAWN, **options})
    CATConfig(**{**DRAWN, "solver": "euler"})                # euler is a fixed-step solver


def test_the_ode_consistent_row_overrides_the_shared_solver_steps():
    row = ex.ROWS["KERPLE-prior CAT, ODE-consistent"]
    sizes = dict(d_model=16, n_heads=2, n_freq=4, solver="rk4-classic", solver_steps=1)
    model, tc = ex.configs(row, sizes, dict(train_steps=4, batch=2, seq=16), seed=0)
    assert (model.solver_steps, model.train_solver_steps, model.kernel) == (2, (1, 2),
                                                                          "kerple-prior")
    assert model.train_length == 16 and tc.models == ("cat",)
    spec = lambda m: dict(model=m.to_dict(), train=tc.to_dict(), dropout_on=[])
    kerple, _ = ex.configs(ex.ROWS["KERPLE-prior CAT"], sizes, dict(train_steps=4), seed=0)
    ratio = pool.expected_cost(spec(model)) / pool.expected_cost(spec(kerple))
    assert 1.3 <= ratio <= 1.5
