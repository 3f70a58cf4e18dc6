"""Repeated-passage batches: BatchSampler's repeat_share / repeat_periods, check_repeats and
TrainConfig's fields.

What each test catches:
- repeated windows that are not periodic, whose period lies outside repeat_periods, that
  are not the first round(p * batch) windows, or that are not a passage of the data;
- published windows that move when repeats are on (the published draws must not change),
  or a batch at repeat_share = 0 that differs from the published sampler's in any bit;
- draws that are not reproducible from the seed, or a resume that does not continue them;
- periods that do not cover their range, or a share that is not exact;
- settings accepted that cannot be sampled, errors that do not name the field and a fix;
- a run identity (config hash) of plain-text runs changed by the new fields.
"""
import pytest
import torch

from catlib.data import BatchSampler, check_repeats
from catlib.nn.config import CATConfig
from catlib.training.loop import SideBySide, TrainConfig

# Distinct ids: a window is periodic only where the sampler repeated a passage, and the
# smallest period of a repeated window is the period drawn.
DATA = torch.arange(5000)
B, T = 8, 32


def _window(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The drawn windows w ``[B, T + 1]``: x = w[:, :-1], y = w[:, 1:]."""
    assert torch.equal(x[:, 1:], y[:, :-1])
    return torch.cat([x, y[:, -1:]], dim=1)


def _period(w: torch.Tensor) -> int | None:
    """The smallest r with w[t] == w[t + r] for every valid t, r <= len(w) - 1; else None."""
    for r in range(1, len(w)):
        if torch.equal(w[r:], w[:-r]):
            return r
    return None


def _batches(sampler, n):
    return [sampler() for _ in range(n)]


@pytest.mark.parametrize("share,periods", [(0.5, (3, 20)), (0.25, (1, T)), (1.0, (5, 5))])
def test_first_windows_are_repeated_passages_the_others_published(share, periods):
    lo, hi = periods
    n = round(share * B)
    repeated = BatchSampler(DATA, B, T, 7, share, periods)
    plain = BatchSampler(DATA, B, T, 7)
    for _ in range(10):
        x, y = repeated()
        xp, yp = plain()
        w = _window(x, y)
        for b in range(n):
            r = _period(w[b])
            assert r is not None and lo <= r <= hi, (b, r)
            # One passage of r consecutive ids of the data, repeated to T + 1.
            assert torch.equal(w[b, :r], DATA[int(w[b, 0]):int(w[b, 0]) + r])
        # The published windows, bit for bit: the repeats draw from their own generator.
        assert torch.equal(x[n:], xp[n:]) and torch.equal(y[n:], yp[n:])
        assert all(_period(w[b]) is None for b in range(n, B))


@pytest.mark.parametrize("periods", [None, (2, 5)])
def test_share_zero_is_the_published_sampler(periods):
    a = BatchSampler(DATA, B, T, 3, 0.0, periods)
    b = BatchSampler(DATA, B, T, 3)
    for (xa, ya), (xb, yb) in zip(_batches(a, 5), _batches(b, 5)):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_same_seed_same_batches_other_seed_other_batches():
    def draw(seed):
        return _batches(BatchSampler(DATA, B, T, seed, 0.5, (4, 16)), 3)

    for (x1, y1), (x2, y2) in zip(draw(11), draw(11)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    n = round(0.5 * B)
    one, other = draw(11), draw(12)
    # Both the repeated and the published windows change with the seed.
    assert not all(torch.equal(a[0][:n], b[0][:n]) for a, b in zip(one, other))
    assert not all(torch.equal(a[0][n:], b[0][n:]) for a, b in zip(one, other))


def test_state_dict_resumes_exactly():
    a = BatchSampler(DATA, B, T, 5, 0.5, (4, 16))
    _batches(a, 3)
    state = a.state_dict()
    assert set(state) == {"rng", "repeat_rng"}
    after = _batches(a, 2)
    b = BatchSampler(DATA, B, T, 99, 0.5, (4, 16))     # another seed: the state decides
    b.load_state_dict(state)
    a.load_state_dict(state)
    for (x1, y1), (x2, y2), (x3, y3) in zip(after, _batches(b, 2), _batches(a, 2)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
        assert torch.equal(x1, x3) and torch.equal(y1, y3)


def test_state_of_an_earlier_version_still_loads():
    # Checkpoints written before repeated passages hold the published generator only.
    old = {"rng": BatchSampler(DATA, B, T, 4).state_dict()["rng"]}
    s = BatchSampler(DATA, B, T, 4, 0.25, (2, 8))
    s.load_state_dict(old)
    x, _ = s()
    assert torch.equal(x[2:], BatchSampler(DATA, B, T, 4)()[0][2:])


def test_periods_cover_their_range():
    lo, hi = 4, 12
    sampler = BatchSampler(DATA, 16, T, 0, 1.0, (lo, hi))
    periods = [_period(w) for x, y in _batches(sampler, 30) for w in _window(x, y)]
    # 480 uniform draws of 9 values: every one is drawn (a miss has odds below 1e-23).
    assert set(periods) == set(range(lo, hi + 1))


@pytest.mark.parametrize("share,batch", [(0.25, 8), (0.1, 16), (0.5, 3), (1.0, 4), (0.3, 10)])
def test_share_is_exact_in_every_batch(share, batch):
    n = round(share * batch)
    sampler = BatchSampler(DATA, batch, T, 1, share, (2, T))
    assert sampler.n_repeat == n
    total = 0
    for x, y in _batches(sampler, 20):
        marks = [_period(w) is not None for w in _window(x, y)]
        assert marks == [True] * n + [False] * (batch - n)
        total += sum(marks)
    assert total == 20 * n


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match="repeat_share"):
        check_repeats(share, (2, 8), T)
    with pytest.raises(ValueError, match="repeat_share"):
        BatchSampler(DATA, B, T, 0, share, (2, 8))
    with pytest.raises(ValueError, match="repeat_share"):
        TrainConfig(seq=T, repeat_share=share, repeat_periods=(2, 8)).validate()


@pytest.mark.parametrize("periods", [None, (0, 8), (9, 8), (4, T + 1), (4,), (4, 8, 12),
                                     (4.0, 8), (True, 8), "4-8"])
def test_periods_missing_or_out_of_range_are_refused(periods):
    fix = r"repeat_periods.*e\.g\. repeat_periods=\(8, 32\)"
    with pytest.raises(ValueError, match=fix):
        check_repeats(0.5, periods, T)
    with pytest.raises(ValueError, match=fix):
        BatchSampler(DATA, B, T, 0, 0.5, periods)
    with pytest.raises(ValueError, match=fix):
        TrainConfig(seq=T, repeat_share=0.5, repeat_periods=periods).validate()


def test_periods_are_not_read_without_repeats():
    check_repeats(0.0, None, T)
    check_repeats(0, "anything", T)
    TrainConfig(seq=T, repeat_share=0.0, repeat_periods=(1, 10 * T)).validate()


def test_valid_settings_pass():
    for share, periods in [(1e-9, (1, 1)), (1, (T, T)), (0.5, [2, 8])]:
        check_repeats(share, periods, T)
    TrainConfig(seq=T, repeat_share=0.25, repeat_periods=(8, T)).validate()


def test_train_config_identity_and_fields():
    plain = TrainConfig().identity()
    assert "repeat" not in plain
    # Periods without a share change nothing: earlier runs' hashes stay as they were.
    assert TrainConfig(repeat_periods=(8, 64)).identity() == plain
    ident = TrainConfig(repeat_share=0.25, repeat_periods=(8, 64)).identity()
    assert ident["repeat"] == [0.25, [8, 64]]
    assert {k: v for k, v in ident.items() if k != "repeat"} == plain
    assert TrainConfig(repeat_share=0.5, repeat_periods=(8, 64)).identity() != ident
    assert TrainConfig(repeat_share=0.25, repeat_periods=(8, 32)).identity() != ident
    # From JSON: a list becomes the tuple, so that configs compare equal.
    tc = TrainConfig(repeat_periods=[8, 64])
    assert tc.repeat_periods == (8, 64) and isinstance(tc.repeat_periods, tuple)
    assert TrainConfig(**TrainConfig(repeat_share=0.25, repeat_periods=(8, 64)).to_dict()) \
        == TrainConfig(repeat_share=0.25, repeat_periods=(8, 64))


def test_training_samples_with_the_repeats():
    model = CATConfig(vocab_size=13, d_model=8, n_heads=2, n_freq=4, variant="causal",
                      solver="rk4-classic", solver_steps=1, dropout=0.0)
    tc = TrainConfig(train_steps=1, batch=4, seq=16, seed=2, models=("base",),
                     repeat_share=0.5, repeat_periods=(3, 9))
    side = SideBySide(model, tc, torch.arange(2000) % 13)
    want = BatchSampler(torch.arange(2000) % 13, 4, 16, 2, 0.5, (3, 9))
    for (x1, y1), (x2, y2) in zip(_batches(side.sampler, 3), _batches(want, 3)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_a_share_that_rounds_to_no_window_is_refused():
    """0.01 of a batch of 20 would silently train on plain text only."""
    with pytest.raises(ValueError, match="rounds to no repeated window"):
        TrainConfig(batch=20, seq=32, repeat_share=0.01, repeat_periods=(4, 16)).validate()
    TrainConfig(batch=20, seq=32, repeat_share=0.05, repeat_periods=(4, 16)).validate()
