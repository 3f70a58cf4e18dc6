"""The copy test (catlib.measure.copying): passages, copy_scores, copy_gain, the oracle.

What each test catches:
- first and second copies scored at the wrong positions (a model that copies exactly
  d characters back must gain the whole of log V; one that reads the current token only
  must gain nothing);
- a gain that carries a position term (a model of position alone must gain nothing);
- passages that differ between models or calls, or that run past the validation split,
  and control prefixes that overlap their passages;
- a model left in eval mode after the test, or scored in train mode;
- an oracle whose gain rewards a bad first copy (above log V on random characters).
"""
import math

import numpy as np
import pytest
import torch

from catlib.measure.copying import (BATCH_TOKENS, IN_RANGE_PASSAGES, control_passages,
                                    copy_gain, copy_scores, copy_test, in_range_distance,
                                    oracle_copy_curve, oracle_copy_gain, passages, random_passages)

V = 11
EPS64 = torch.finfo(torch.float64).eps
LOGIT = 30.0     # the copier's logit on the token it copies; every other logit is 0


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


def copy_ce(model, x):
    """CE per passage on the first and the second copy of passages ``x [n, d]``."""
    s = copy_scores(model, x, x.roll(1, 0))
    return s["first"], s["second"]


class Copier(torch.nn.Module):
    """Logits ``[B, T, V]`` at position t: LOGIT on the input token x[t - d + 1] (the target
    of the second copy, d - 1 back), 0 elsewhere; all 0 (uniform) while t - d + 1 < 0."""

    def __init__(self, distance: int):
        super().__init__()
        self.distance = distance
        self.zero = torch.nn.Parameter(torch.zeros(()))    # copy_ce reads the device here
        self.modes = []                                      # self.training at each call

    def forward(self, x: torch.Tensor):
        self.modes.append(self.training)
        b, t = x.shape
        back = self.distance - 1
        peak = torch.zeros(b, t, V)
        if t > back:                                 # rows back..t-1 copy x[0..t-1-back]
            peak[:, back:].scatter_(-1, x[:, :t - back, None], LOGIT)
        return peak + self.zero, torch.zeros(())


class Bigram(torch.nn.Module):
    """Logits ``[B, T, V]`` = log of the add-one smoothed bigram frequencies of ``ids``,
    a function of the current token alone."""

    def __init__(self, ids: torch.Tensor):
        super().__init__()
        counts = torch.ones(V, V, dtype=torch.float64)
        counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                          accumulate=True)
        self.table = torch.nn.Parameter((counts / counts.sum(1, keepdim=True)).log().float())

    def forward(self, x: torch.Tensor):
        return self.table[x], torch.zeros(())


@pytest.mark.parametrize("d", [2, 5, 32])
def test_an_exact_copier_gains_all_of_log_v(d):
    val = _ids(500, 0)
    model = Copier(d)
    first, second = copy_ce(model, passages(val, d, 4))
    # First copy: uniform logits, CE = log V; second: log(1 + (V - 1) e^-LOGIT) per target.
    # Float32 logits 0 and LOGIT are exact; the CE is taken in float64.
    want_second = math.log1p((V - 1) * math.exp(-LOGIT))
    tol = 64 * EPS64 * math.log(V)
    np.testing.assert_allclose(first, math.log(V), rtol=0, atol=tol)
    np.testing.assert_allclose(second, want_second, rtol=0, atol=tol)
    test = copy_test(model, val, distances=(d,), n=4)
    assert list(test) == [d]
    np.testing.assert_allclose(test[d]["second"], want_second, rtol=0, atol=tol)
    # Its control: confident guesses from the unrelated prefix, no better than uniform.
    assert copy_gain(model, val, distances=(d,), n=4)[d] > math.log(V) - 1e-9


def test_the_copier_at_another_distance_gains_nothing_positive():
    # Its confident guesses d' - 1 back are wrong on random text: the second copy costs
    # more than the first, and no less than the control.
    test = copy_test(Copier(7), _ids(500, 1), distances=(12,), n=4)[12]
    assert np.mean(test["first"] - test["second"]) < 0


def test_a_bigram_model_gains_nothing():
    train, val = _ids(5000, 2), _ids(2000, 3)
    model = Bigram(train)
    for d in (2, 16, 100):
        first, second = copy_ce(model, passages(val, d))
        # Both copies score x[1:] from the same current tokens: the same logits rows.
        # Float64 CE of float32 rows; a few ulps of |CE| for rounding in the mean.
        tol = 64 * EPS64 * max(1.0, float(np.abs(first).max()))
        np.testing.assert_allclose(second, first, rtol=0, atol=tol)
    gain = copy_gain(model, val, distances=(2, 16, 100))
    assert list(gain) == [2, 16, 100]
    assert all(abs(g) <= 64 * EPS64 * 2 * math.log(V) for g in gain.values())


def test_passages_shape_and_spread():
    val = torch.arange(1000)
    x = passages(val, 100, 8)
    assert x.shape == (8, 100) and x.dtype == torch.int64
    starts = x[:, 0].tolist()
    assert starts == [k * 900 // 8 for k in range(8)]
    assert torch.equal(x, torch.stack([val[s:s + 100] for s in starts]))
    assert x[-1, -1] < len(val)
    # The whole split as one passage: every start is 0.
    assert torch.equal(passages(val, 1000, 3), val.expand(3, 1000))


def test_passages_are_the_same_for_the_same_val_and_distance():
    val = _ids(3000, 4)
    assert torch.equal(passages(val, 400), passages(val.clone(), 400))
    assert passages(val, 400).shape == (8, 400)            # PASSAGES by default


def test_passages_errors_name_the_fix():
    val = torch.arange(50)
    with pytest.raises(ValueError, match="shorter distance"):
        passages(val, 51)
    for bad in (1, 0, -3):
        with pytest.raises(ValueError, match="distance must be >= 2"):
            passages(val, bad)
    with pytest.raises(ValueError, match="n >= 1"):
        passages(val, 10, 0)


@pytest.mark.parametrize("training", [True, False])
def test_scored_in_eval_mode_and_mode_restored(training):
    model = Copier(4)
    model.train(training)
    copy_gain(model, _ids(200, 5), distances=(4, 8), n=2)
    assert model.training is training
    assert model.modes and not any(model.modes)          # every forward pass in eval mode


def test_short_passages_are_read_several_to_a_forward_pass_long_ones_alone():
    shapes = []

    class Spy(Copier):
        def forward(self, x):
            shapes.append(tuple(x.shape))
            return super().forward(x)

    copy_ce(Spy(3), passages(_ids(300, 6), 10, 5))       # 5 copies and 5 controls, 19 ids each
    assert shapes == [(10, 19)]
    shapes.clear()
    d = BATCH_TOKENS // 2 + 1                               # 2d - 1 > BATCH_TOKENS
    copy_ce(Spy(3), passages(_ids(3 * d + 10, 6), d, 2))
    assert shapes == [(1, 2 * d - 1)] * 4


class Position(torch.nn.Module):
    """Logits ``[B, T, V]`` of position alone: row t is a fixed random vector of t (no
    input read), so that its CE changes along the sequence and it cannot copy."""

    def __init__(self, length: int):
        super().__init__()
        self.table = torch.nn.Parameter(3 * torch.randn(length, V, generator=torch.Generator().manual_seed(9)))

    def forward(self, x: torch.Tensor):
        return self.table[:x.shape[1]].expand(len(x), -1, -1), torch.zeros(())


@pytest.mark.parametrize("random_seed", [None, 3])
def test_a_model_of_position_alone_gains_nothing(random_seed):
    # Catches the position term in the gain (issue 43): CE(first) - CE(second) of this model
    # is its position term, far from 0; against the control, the same positions, it is 0.
    val, d = _ids(3000, 8), 40
    model = Position(2 * d)
    raw = copy_test(model, val, (d,), 4, random_seed=random_seed, vocab_size=V)[d]
    assert abs(np.mean(raw["first"] - raw["second"])) > 0.1
    gain = copy_gain(model, val, (d,), 4, random_seed=random_seed, vocab_size=V)[d]
    # The same float32 logits rows in the control and the second copy: equal CE.
    assert gain == 0.0


def test_control_prefixes_lie_half_the_split_away_and_never_overlap():
    val = torch.arange(1000)
    x, y = passages(val, 100, 4), control_passages(val, 100, 4)
    assert y.shape == x.shape
    assert (abs(y[:, 0] - x[:, 0]) >= 100).all()            # no passage meets its prefix
    assert torch.equal(control_passages(val, 100, 4), y)    # the same for every model
    with pytest.raises(ValueError, match="shorter distance"):
        control_passages(val, 400, 2)                       # 1000 ids: no room half away


def test_in_range_distances_get_more_passages():
    val = _ids(3000, 1)
    test = copy_test(Copier(4), val, (8, 100), 3, train_length=16)
    assert len(test[8]["first"]) == 3 * IN_RANGE_PASSAGES     # 2 * 8 - 1 <= 16
    assert len(test[100]["first"]) == 3
    assert len(copy_test(Copier(4), val, (8,), 3)[8]["first"]) == 3   # no training length given


def test_runs_on_catlib_models():
    import catlib

    cfg = catlib.CATConfig(vocab_size=V, d_model=16, n_heads=4, n_freq=4, variant="causal",
                           kernel="kerple-prior", train_length=8, far_heads=2,
                           solver="rk4-classic", solver_steps=1, dropout=0.1)
    torch.manual_seed(0)
    for model in (catlib.CAT(cfg), catlib.Baseline(cfg)):
        model.train()
        val = _ids(300, 7)
        gain = copy_gain(model, val, distances=(4, 16), n=2)
        assert list(gain) == [4, 16] and all(math.isfinite(g) for g in gain.values())
        assert model.training
        # Eval mode (no dropout), the same kernels twice: the same numbers.
        assert copy_gain(model, val, distances=(4, 16), n=2) == gain


# ------------------------------------------------------------------ references and ceiling

def test_the_in_range_distance_is_the_largest_whose_input_fits():
    for train_length in (3, 64, 127, 128, 256):
        d = in_range_distance(train_length)
        assert 2 * d - 1 <= train_length < 2 * (d + 1) - 1
    assert in_range_distance(128) == 64
    with pytest.raises(ValueError, match="training length"):
        in_range_distance(2)


def test_random_passages_are_seeded_and_in_the_vocabulary():
    a, b = random_passages(65, 40, 3, seed=1), random_passages(65, 40, 3, seed=1)
    assert torch.equal(a, b) and a.shape == (3, 40) and 0 <= a.min() and a.max() < 65
    assert not torch.equal(a, random_passages(65, 40, 3, seed=2))
    with pytest.raises(ValueError, match="vocab_size"):
        random_passages(1, 40)


def test_the_oracle_is_uniform_without_history_and_copies_a_random_string():
    v, d = 65, 300
    x = random_passages(v, d, 1, seed=0)[0]
    ce = oracle_copy_curve(x, 4, v)
    assert ce.shape == (2 * d - 1,)
    assert ce[0] == pytest.approx(math.log(v))          # nothing seen: uniform
    # The second copy: each 4-gram of x seen once before (a random string of 300 ids over
    # 65 has almost no repeated 4-gram), followed by the right id: p = (1 + 0.1 / V) / 1.1.
    assert np.median(ce[d + 3:]) == pytest.approx(-math.log((1 + 0.1 / v) / 1.1))
    assert ce[:d - 1].mean() - ce[d:].mean() > 3.0


def test_the_oracle_reads_only_its_passages_and_a_one_gram_confuses_more():
    ids = _ids(4000, 3)
    g = oracle_copy_gain(ids, 65, distances=(50, 400), n=2, ks=(1, 6))
    # The ids outside both distances' passages, changed: the same gains.
    used = torch.zeros(len(ids), dtype=torch.bool)
    for d in (50, 400):
        for s in (k * (len(ids) - d) // 2 for k in range(2)):
            used[s:s + d] = True
    other = torch.where(used, ids, (ids + 1) % V)
    assert (other != ids).any()
    assert oracle_copy_gain(other, 65, distances=(50, 400), n=2, ks=(1, 6)) == g
    assert g[6][400] > g[1][400] and g[6][50] > 0
    r = oracle_copy_gain(ids, 65, distances=(50,), n=2, ks=(6,), random_seed=0)
    assert r[6][50] > 3.0


def test_the_oracle_gains_at_most_log_v_and_its_best_k_copies_best():
    # Catches the first-copy inflation (issue 43): scored by CE(first) - CE(second) with its
    # own smoothed first copy, the oracle gained more than log V on random characters and
    # its largest gain went to k = 1, whose first copy is the worst, not to the best copier.
    v, d = 65, 1000
    g = oracle_copy_gain(torch.arange(10), v, distances=(d,), n=2, ks=range(1, 5), random_seed=0)
    assert all(g[k][d] <= math.log(v) for k in g)
    x = random_passages(v, d, 2, seed=0)
    second = {k: np.mean([oracle_copy_curve(p, k, v)[d:].mean() for p in x]) for k in g}
    best = max(g, key=lambda k: g[k][d])
    assert best == min(second, key=second.get) and best > 1


def test_the_oracle_recovers_a_unique_second_copy_and_is_ambiguous_by_hand():
    # x = [0, 1, 0, 2], V = 3: in [x ; x] the 1-gram "0" was followed by 1 and by 2 before
    # target 5 (a 1): p = (1 + alpha / 3) / (2 + alpha). The 2-gram (0, 1) was followed once,
    # by 0, before target 6: with alpha -> 0 the oracle recovers it exactly.
    x = torch.tensor([0, 1, 0, 2])
    ce1 = oracle_copy_curve(x, 1, 3, alpha=0.1)
    assert ce1[0] == pytest.approx(math.log(3))
    assert ce1[2] == pytest.approx(-math.log((0.1 / 3) / 1.1))           # "0" then 1, not 2
    assert ce1[4] == pytest.approx(-math.log((1 + 0.1 / 3) / 2.1))       # ambiguous: 1 or 2
    ce2 = oracle_copy_curve(x, 2, 3, alpha=1e-9)
    assert ce2[5] == pytest.approx(0.0, abs=1e-8)
    y = random_passages(65, 200, 1, seed=4)[0]                           # unique 8-grams
    assert oracle_copy_curve(y, 8, 65, alpha=1e-9)[200 + 7:].max() < 1e-6


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_every_profile_tests_every_multiple_its_targets_name(profile):
    # Catches a target that no distance tests (the paper profile's 32x: 4000 is 15.6x its
    # training length of 256) and two multiples read at one distance (the smoke profile's
    # 8x and 16x, both d = 64), unless the profile says it leaves the multiple out.
    from catlib.book import context_use as cu
    from catlib.book.profiles import COPY_UNTESTED, PROFILES, experiment
    seq = experiment(profile).train.seq
    _, far = cu.reference_distances(PROFILES[profile]["09_using_context"]["copy_distances"], seq)
    named = {*cu.HALF_KEPT, *cu.MOONSHOT}
    assert set(far) == named - set(COPY_UNTESTED[profile])
    assert all(abs(far[m] - m * seq) <= m * seq / 4 for m in far)
    assert len(set(far.values())) == len(far)


def test_an_exact_copier_on_random_characters_gains_all_of_log_v():
    # Catches a random-character test that scores other passages than random_passages
    # gives, or that needs no vocabulary size.
    test = copy_test(Copier(16), _ids(500, 0), distances=(16,), n=3, random_seed=5, vocab_size=V)
    x = random_passages(V, 16, 3, seed=5)
    assert np.array_equal(test[16]["first"], copy_ce(Copier(16), x)[0])
    want = math.log(V) - math.log1p((V - 1) * math.exp(-LOGIT))
    assert abs(np.mean(test[16]["first"] - test[16]["second"]) - want) <= 64 * EPS64 * math.log(V)
    with pytest.raises(ValueError, match="vocab_size"):
        copy_gain(Copier(16), _ids(500, 0), distances=(16,), n=3, random_seed=5)


@pytest.mark.parametrize("profile", ["smoke", "cpu", "paper"])
def test_every_profiles_copy_test_has_its_in_range_reference(profile):
    # Catches a profile whose kept fractions would divide by a gain measured beyond the
    # training length (the cpu profile's d = 100 at T = 128 before).
    from catlib.book import context_use as cu
    from catlib.book.profiles import PROFILES, experiment
    seq = experiment(profile).train.seq
    near, _ = cu.reference_distances(PROFILES[profile]["09_using_context"]["copy_distances"], seq)
    assert 2 * near - 1 <= seq                        # its whole input [x ; x] fits
    assert near > in_range_distance(seq) // 2        # not a much shorter stand-in
