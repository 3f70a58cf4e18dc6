"""Equal compute (chapter 10): training FLOPs counted per run, the ladder of checkpoints, the
compute-matched rows and the frontier's and dial's tables."""
from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
import torch

from catlib.experiment import compute
from catlib.experiment import grid as ex
from catlib.book import profiles
from catlib.experiment.config import ExperimentConfig
from catlib.experiment import frontier as fr
from catlib.experiment.frontier import _flops_per_token, frontier_table, ladder_ce, ladder_model
from catlib.nn.config import CATConfig
from catlib.runs import train_run
from catlib.training.loop import TrainConfig, drawn_solver_steps

TINY = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, solver="rk4-classic",
                 solver_steps=1, kernel="kerple-prior", train_length=16)
EVAL = dict(lengths=(16,), eval_windows=2, progress=False, echo=None, device="cpu")


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _tc(steps=6, **kw):
    return TrainConfig(train_steps=steps, batch=2, seq=16, split="90/10", checkpoint_every=2, **kw)


def test_rk4_step_is_four_block_evaluations():
    flops1, nfe1 = compute.step_flops(TINY, "cat", 2, 16, 1)
    flops2, nfe2 = compute.step_flops(TINY, "cat", 2, 16, 2)
    assert (nfe1, nfe2) == (4, 8)
    # every evaluation counts, forward and backward: two steps cost one step's block part more
    base = compute.step_flops(dataclasses.replace(TINY, solver="euler"), "cat", 2, 16, 1)[0]
    per_eval = (flops2 - flops1) / 4
    assert flops1 == pytest.approx(base + 3 * per_eval, rel=1e-9)


def test_run_flops_are_the_sum_of_its_counted_steps(data, tmp_path):
    """A drawn step count (ODE-consistent training) is counted as drawn."""
    cfg = dataclasses.replace(TINY, solver_steps=2, train_solver_steps=(1, 2))
    tc = _tc(8, models=("cat",))
    run = train_run(cfg, tc, root=tmp_path, **EVAL)
    drawn = [drawn_solver_steps((1, 2), tc.seed, s) for s in range(tc.train_steps)]
    assert len(set(drawn)) == 2                         # both counts occur in these 8 steps
    nfe = [m["nfe_forward"] for m in run.metrics() if m["kind"] == "train"]
    assert nfe == [4 * d for d in drawn]
    want = sum(compute.step_flops(cfg, "cat", 2, 16, d)[0] for d in drawn)
    got = compute.run_compute(run)
    assert got["cat"]["train_flops"] == want
    assert got["cat"]["seconds"] == pytest.approx(
        sum(m["seconds"] for m in run.metrics() if m["kind"] == "train"))
    stored = json.loads((run.path / compute.COMPUTE_FILE).read_text())
    assert stored["value"] == got and compute.run_compute(run) == got   # read back
    # a baseline: every step the same
    base = train_run(dataclasses.replace(TINY, baseline_positions="alibi"), _tc(3, models=("base",)),
                     root=tmp_path, **EVAL)
    assert compute.run_compute(base)["base"]["train_flops"] == \
        3 * compute.step_flops(base.model_config, "base", 2, 16)[0]


def test_ladder_point_is_the_shorter_run_bitwise(data, tmp_path):
    """The weights a long run keeps after n steps are those of the run of n steps."""
    base = dataclasses.replace(TINY, baseline_positions="alibi")
    long = train_run(base, _tc(6, models=("base",), checkpoints=(2, 4)), root=tmp_path / "a", **EVAL)
    short = train_run(base, _tc(4, models=("base",)), root=tmp_path / "b", **EVAL)
    assert _tc(4).identity() == TrainConfig(**_tc(4).to_dict()).identity()
    assert "checkpoints" not in _tc(4).identity()          # earlier runs keep their hash
    kept = ladder_model(long, 4, "base").state_dict()
    final = short.load_weights()[0]["base"].state_dict()
    assert kept.keys() == final.keys()
    assert all(torch.equal(kept[k], final[k]) for k in kept)
    with pytest.raises(Exception, match="kept no weights"):
        ladder_model(long, 3, "base")
    from catlib.data import load_corpus
    corpus = load_corpus(split="90/10")
    a = ladder_ce(long, "base", 4, corpus, [16], [2])
    b = ladder_ce(short, "base", 4, corpus, [16], [2])
    assert a == b
    runs = {("long", 0): long}
    ex.ROWS["long"] = ex.Row("long", "causal", "base", "90/10", trains=("base",))
    try:
        table = frontier_table(runs, {"ALiBi": [("long", [0], n) for n in (2, 4, 6)]}, corpus,
                               [16], [2])
    finally:
        del ex.ROWS["long"]
    pts = table["ALiBi"]["points"]
    assert [p["steps"] for p in pts] == [2, 4, 6]
    total = compute.run_compute(long)["base"]["train_flops"]
    assert pts[-1]["train_flops"] == total and pts[0]["train_flops"] == total / 3
    assert pts[1]["ce"]["16"] == [a["16"]]


def test_compute_matched_rows_get_the_flops_they_claim():
    """Within 5 % of the KERPLE-prior CAT's training FLOPs, at the smoke and cpu sizes."""
    for profile in ("smoke", "cpu"):
        e = profiles.experiment(profile)
        e = dataclasses.replace(e, train=dataclasses.replace(e.train, batch=2))  # cheaper
        m, t = ex.row_configs(ex.ROWS[ex.MATCHED], e, 0)
        target = compute.expected_step_flops(m, "cat", t.batch, t.seq) * t.train_steps
        for label in ex.COMPUTE_MATCHED + (ex.ROPE_LADDER, ex.EULER_CAT):
            mb, tb = ex.row_configs(ex.ROWS[label], e, 0)
            got = compute.step_flops(mb, ex.ROWS[label].model, tb.batch, tb.seq)[0] * tb.train_steps
            assert abs(got / target - 1) < 0.05, (profile, label, got / target)
        mb, tb = ex.row_configs(ex.ROWS[ex.AS_LAYERS], e, 0)
        assert mb.blocks > 1
        ms, ts = ex.row_configs(ex.ROWS[ex.AS_STEPS], e, 0)
        assert ts.train_steps > 2 * e.train.train_steps and ms.blocks == 1
        assert e.train.train_steps in ts.branches         # the headline budget is a point


# One counting rule for every row (issue 42): each model kind of catlib.nn.config, with its
# options: a training step is 3 x its forward FLOPs within a few percent (the backward pass
# computes the input's and the weight's gradient of every product; a fused attention whose
# backward the counter does not see gave 2.72 for a baseline).
SMALL = CATConfig(variant="causal", d_model=32, n_heads=4, n_freq=8, quad_nodes=16, dropout=0.0,
                  solver="rk4-classic", solver_steps=1)
KINDS = {
    "sinusoidal": ("base", {}), "rope": ("base", dict(baseline_positions="rope")),
    "alibi": ("base", dict(baseline_positions="alibi")),
    "alibi, 3 layers": ("base", dict(baseline_positions="alibi", blocks=3)),
    "alibi, dropout": ("base", dict(baseline_positions="alibi", dropout=0.1)),
    "alibi, looped": ("base", dict(baseline_positions="alibi", baseline_loops=2,
                                   baseline_loop_scale=True)),
    "published baseline": ("base", dict(variant="published", dropout=0.1)),
    "absolute CAT": ("cat", {}), "relative CAT": ("cat", dict(kernel="relative")),
    "content CAT": ("cat", dict(kernel="content")),
    "alibi-prior CAT, euler": ("cat", dict(kernel="alibi-prior", train_length=32, solver="euler")),
    "kerple-prior CAT, midpoint x2": ("cat", dict(kernel="kerple-prior", train_length=32,
                                                  solver="midpoint", solver_steps=2)),
    "kerple-prior CAT, 2 blocks": ("cat", dict(kernel="kerple-prior", train_length=32, blocks=2)),
    "far-head CAT": ("cat", dict(kernel="alibi-prior", train_length=32, far_heads=2,
                                 attention_residual=True)),
    "published CAT, rk4": ("cat", dict(variant="published")),
}


def _forward_flops(cfg: CATConfig, model: str, batch: int, seq: int) -> int:
    """The forward FLOPs of the training computation (train mode, penalty), by the rule."""
    from catlib.measure.cost import counting
    from catlib.nn.baselines import Baseline
    from catlib.nn.model import CAT

    cfg = cfg.resolved()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = (CAT if model == "cat" else Baseline)(cfg).train()
        x = torch.randint(0, cfg.vocab_size, (batch, seq))
        with torch.no_grad(), counting() as counter:
            net(x, penalty=True)
    return counter.get_total_flops()


@pytest.mark.parametrize("kind", list(KINDS))
def test_training_step_is_three_forwards_for_every_kind(kind):
    model, options = KINDS[kind]
    cfg = dataclasses.replace(SMALL, **options)
    step = compute.step_flops(cfg, model, 2, 32)[0]
    assert step / _forward_flops(cfg, model, 2, 32) == pytest.approx(3.0, rel=0.03), kind


def test_step_count_does_not_depend_on_the_attention_kernel():
    """Dropout switches ALiBi's attention from the CPU's fused kernel to the unfused path;
    deterministic mode and the MATH backend are other routes to the same products."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = CATConfig(variant="causal", d_model=128, n_heads=8, n_freq=32, blocks=1, dropout=0.0,
                    solver="rk4-classic", solver_steps=1, baseline_positions="alibi")
    compute._step_flops.cache_clear()
    plain = compute.step_flops(cfg, "base", 10, 128)[0]
    assert compute.step_flops(dataclasses.replace(cfg, dropout=0.1), "base", 10, 128)[0] == plain
    for route in (lambda: sdpa_kernel(SDPBackend.MATH), _deterministic):
        compute._step_flops.cache_clear()
        with route():
            assert compute.step_flops(cfg, "base", 10, 128)[0] == plain
    compute._step_flops.cache_clear()


@contextlib.contextmanager
def _deterministic():
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)


def _analytic_step(evaluations: int, batch: int, seq: int, d: int, vocab: int) -> int:
    """Training FLOPs of one step, written out by hand (2 per multiply-add; backward twice
    the forward): per block evaluation the q, k, v and output projections (4 B T D^2 each
    way), the 4D feed-forward network (two B T D 4D products) and the causal attention's
    scores and values (B T^2 D each, full square as the MATH backend computes them); the
    unembedding (B T D V) once."""
    tokens = batch * seq
    per_evaluation = 2 * (4 * tokens * d * d + 2 * tokens * d * 4 * d + 2 * batch * seq * seq * d)
    return 3 * (evaluations * per_evaluation + 2 * tokens * d * vocab)


@pytest.mark.parametrize("model, options, evaluations", [
    ("base", dict(baseline_positions="alibi"), 1),
    ("base", dict(baseline_positions="rope", blocks=3), 3),
    ("cat", dict(kernel="alibi-prior", kernel_residual=False, train_length=32,
                 solver="euler"), 1),
    ("cat", dict(kernel="alibi-prior", kernel_residual=False, train_length=32,
                 solver="rk4-classic"), 4),
])
def test_step_count_matches_an_analytic_count(model, options, evaluations):
    """An independent count (not the counter that sets the budgets) of one baseline step and
    one CAT step (ALiBi's prior alone: no spectral products) at small sizes."""
    cfg = dataclasses.replace(SMALL, **options)
    assert compute.step_flops(cfg, model, 2, 32)[0] == _analytic_step(evaluations, 2, 32, 32, 65)


def test_matched_budget_checked_against_the_analytic_count():
    """The ALiBi steps that match an RK4 x1 CAT, checked by the hand count: within 5 % of
    the CAT's training FLOPs (the baseline's step: 1 block evaluation, the CAT's: 4)."""
    cat = dataclasses.replace(SMALL, kernel="alibi-prior", kernel_residual=False, train_length=32)
    base = dataclasses.replace(SMALL, baseline_positions="alibi")
    target = compute.step_flops(cat, "cat", 2, 32)[0] * 100
    steps = compute.matched_budget(target, base, 2, 32, 100, "steps")
    got, want = steps * _analytic_step(1, 2, 32, 32, 65), 100 * _analytic_step(4, 2, 32, 32, 65)
    assert abs(got / want - 1) < 0.05
    layers = compute.matched_budget(target, base, 2, 32, 100, "layers")
    assert layers == 4       # four layers cost the RK4 step's four evaluations, no more


def test_ladders_and_seeds():
    """Every frontier row keeps at least three earlier budgets spanning at least 8x to its
    last; the moonshot row gets the CAT's compute as steps; RoPE's run on the seeds of
    ALiBi's (issue 52: the Euler CAT's target reads it in every seed)."""
    e = profiles.experiment("cpu")
    for label in (*ex.FRONTIER_CATS, ex.EULER_CAT, ex.AS_STEPS, ex.ROPE_LADDER):
        _, tc = ex.row_configs(ex.ROWS[label], e, 0)
        budgets = sorted({*tc.branches, tc.train_steps})
        assert len(budgets) >= 4 and budgets[-1] >= 8 * budgets[0], (label, budgets)
        assert not tc.checkpoints and tc.schedule == "wsd"   # the recipe's points are branches
    _, tc = ex.row_configs(ex.ROWS[ex.MATCHED], e, 0)
    assert tc.train_steps == e.train.train_steps and max(tc.branches) < tc.train_steps
    rows = ex.CHAPTER_ROWS["10_equal_compute"]
    assert len(rows) == len(set(rows)) and ex.EULER_CAT in rows
    p = {"seeds": [0, 1, 2]}
    assert ex.chapter_seeds("10_equal_compute", ex.AS_STEPS, p) == [0, 1, 2]
    assert ex.chapter_seeds("10_equal_compute", ex.EULER_CAT, p) == [0, 1, 2]
    assert ex.chapter_seeds("10_equal_compute", ex.ROPE_LADDER, p) == [0, 1, 2]
    assert ex.chapter_seeds("10_equal_compute", ex.SCHEDULE_CHECK, p) == [0]
    assert set(ex.NO_COPY_TEST) & set(ex.CHAPTER_ROWS["09_using_context"]) == set()


def test_only_the_first_seed_trains_the_frontier_branches():
    """Issue 52: chapter 10 scores the branched points of a row's first seed only, so the
    other seeds train none (they trained 17-19 % more steps than the chapter reads); the
    scale study, which scores every seed's points, keeps them on every seed."""
    from catlib.experiment import scale, scale_plan

    e = dataclasses.replace(profiles.experiment("cpu"), seeds=(0, 1, 2))
    for label in ex.FRONTIER_ROWS:
        first, other = (ex.row_configs(ex.ROWS[label], e, s)[1] for s in (0, 2))
        assert bool(first.branches) == bool(ex.ROWS[label].ladder), label
        assert other.branches == () and other.train_steps == first.train_steps, label
    for label in scale_plan.SCALE_ROWS:
        _, tc, steps = scale.scale_configs(label, e, 2, [1, 2, 4])
        assert sorted(tc.branches) == sorted(steps[b] for b in (1, 2)), label


def test_flops_per_token_extended_beyond_1024_is_the_count():
    from catlib.measure.cost import forward_flops_per_token
    from catlib.nn.model import CAT

    model = CAT(TINY.resolved())
    direct = forward_flops_per_token(model, 1500)
    assert _flops_per_token(model, 1500, forward_flops_per_token) == pytest.approx(direct, rel=1e-6)


def test_experiment_configs_unchanged_for_earlier_rows():
    e = ExperimentConfig(CATConfig(d_model=16, n_heads=2), TrainConfig(train_steps=10))
    _, tc = ex.row_configs(ex.ROWS["ALiBi baseline"], e, 0)
    assert tc.checkpoints == () and "checkpoints" not in tc.identity()


def test_checkpoints_flag_parses_steps():
    """``--checkpoints 250 500`` reaches TrainConfig as integer steps (the command line's
    typo guard: a string step is refused by TrainConfig)."""
    from catlib.cli.commands import build_parser
    from catlib.cli.flags import configs_from_args

    args = build_parser().parse_args(["train", "--train_steps", "600", "--checkpoints", "250", "500"])
    assert configs_from_args(args)[1].checkpoints == (250, 500)


def test_the_pool_scores_the_frontier_points(monkeypatch, tmp_path):
    """The book's pool asks each frontier run for its ladder points: every kept step of a
    row's first seed, the last step of the others, at the frontier's lengths and windows."""
    import types

    e = profiles.experiment("smoke")
    seen = {}

    def fake_jobs(specs, owners, job, slots, echo, every):
        seen.update({tuple(owners[k]): spec for k, spec in specs.items()})
        return {k: {"reused": True} for k in specs}

    monkeypatch.setattr(ex, "run_jobs", fake_jobs)
    monkeypatch.setattr(ex, "train_run", lambda *a, **k: types.SimpleNamespace())
    ex.train_grid([ex.AS_STEPS, ex.AS_LAYERS, "ALiBi baseline"], e, root=tmp_path, device="cpu",
                  seeds=[0, 1], echo=None)
    by_owner = {owner: spec for owners, spec in seen.items() for owner in owners}
    lengths, caps = fr.frontier_scoring(e.evaluation.lengths, e.evaluation.eval_windows,
                                        e.evaluation.curve_windows)
    first = by_owner[(ex.AS_STEPS, 0)]["ladder"]
    tc = ex.row_configs(ex.ROWS[ex.AS_STEPS], e, 0)[1]
    assert first["steps"] == sorted({*tc.branches, tc.train_steps}) and len(first["steps"]) >= 4
    assert by_owner[(ex.AS_STEPS, 1)]["ladder"]["steps"] == [tc.train_steps]
    assert (first["lengths"], first["caps"]) == (lengths, caps) and caps[-1] <= fr.FRONTIER_LONG_WINDOWS
    assert by_owner[(ex.AS_LAYERS, 0)]["ladder"]["steps"] == [
        ex.row_configs(ex.ROWS[ex.AS_LAYERS], e, 0)[1].train_steps]
    assert "ladder" not in by_owner[("ALiBi baseline", 0)]
