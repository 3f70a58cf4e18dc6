"""What a model keeps of its in-range copy gain far away, with its uncertainty over passages.

The kept fraction of one trained model at distance ``far`` is mean gain(far) / mean
gain(near), the gains per passage of the copy test (:func:`catlib.measure.copying.copy_test`,
against its control). The passages are a sample of the text (or of random strings), so the
fraction is uncertain even for one set of weights: :func:`kept_interval` gives a percentile
bootstrap interval over them, resampling the passages of each distance independently, with
a seeded generator (the same interval on every build).
"""
from __future__ import annotations

import numpy as np

# The interval's coverage (5 % to 95 %) and the bootstrap's resamples and seed.
LEVEL, RESAMPLES, SEED = 0.90, 2000, 0


def kept_interval(near: np.ndarray, far: np.ndarray, min_gain: float,
                  level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
                  ) -> tuple[float, float, float]:
    """``(kept, lo, hi)``: mean(far) / mean(near) of the gains per passage ``near [n1]`` and
    ``far [n2]``, and the central ``level`` interval of that ratio over ``resamples``
    resamples of each distance's passages (with replacement); all nan when mean(near) is
    below ``min_gain`` (no copying to keep)."""
    near, far = np.asarray(near, float), np.asarray(far, float)
    if not near.mean() >= min_gain:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    g_near = near[rng.integers(0, len(near), (resamples, len(near)))].mean(1)    # [resamples]
    g_far = far[rng.integers(0, len(far), (resamples, len(far)))].mean(1)        # [resamples]
    lo, hi = np.quantile(g_far / g_near, [(1 - level) / 2, (1 + level) / 2])
    return float(far.mean() / near.mean()), float(lo), float(hi)


def differs(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether two kept fractions ``(kept, lo, hi)`` differ by more than either interval's
    half-width: a difference the passages alone would rarely make."""
    half = lambda k: (k[2] - k[1]) / 2                                  # noqa: E731
    return abs(a[0] - b[0]) > max(half(a), half(b))
