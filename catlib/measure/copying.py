"""The copy test: does a model read d characters back?

A passage x of d characters from the validation text is fed twice, s = [x ; x] (2d
characters). The targets x[1:] are scored twice: in the first copy, predicted from
positions 0..d-2 (their own prefix of x), and in the second, from positions d..2d-2 (the
same prefix, with the whole of x d characters earlier). The copy gain at distance d is

    gain(d) = CE(first copy) - CE(second copy)     (nats per character, mean over passages)

Only a model that reads d characters back can make it positive: the targets and their
local context are the same in both copies. A model that cannot tell positions past its
training length apart gets a negative gain (the second copy sits at positions d..2d).

The passages of a distance are the same for every model: ``n`` passages of the
validation ids, starting at evenly spaced offsets (:func:`passages`), or, for the control
without the ambiguities of natural text, ``n`` strings of ids drawn uniformly by a seeded
generator (:func:`random_passages`).

Two references make a gain readable. In range: the largest distance whose whole input
[x ; x] (2d - 1 positions read) lies within the training length, ``d <= (T + 1) // 2``
(:func:`in_range_distance`); a longer reference already asks the model to read past its
training length. A ceiling: the k-gram copy oracle (:func:`oracle_copy_curve`), which
predicts each character from what followed the earlier occurrences of its last k
characters in the same input (counts, nothing learned), scored by the same test.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from . import evaluate

# The distances of the book's test (characters), and passages per distance.
DISTANCES = (32, 100, 400, 1000, 2000)
PASSAGES = 8


def passages(val: torch.Tensor, distance: int, n: int = PASSAGES) -> torch.Tensor:
    """``n`` passages of ``distance`` ids, int64 ``[n, distance]``: passage k starts at
    k * (len(val) - distance) // n, so they spread over the whole validation split."""
    if distance < 2 or n < 1:
        raise ValueError(f"distance must be >= 2 and n >= 1, got distance={distance}, n={n}")
    if len(val) < distance:
        raise ValueError(f"the validation split has {len(val)} ids, fewer than distance = "
                         f"{distance}; use a shorter distance")
    starts = [k * (len(val) - distance) // n for k in range(n)]
    return torch.stack([val[s:s + distance] for s in starts])


def random_passages(vocab_size: int, distance: int, n: int = PASSAGES, seed: int = 0) -> torch.Tensor:
    """``n`` passages of ``distance`` ids drawn uniformly from ``0 .. vocab_size - 1`` by a
    generator seeded with ``seed`` (the same for every model), int64 ``[n, distance]``."""
    if distance < 2 or n < 1 or vocab_size < 2:
        raise ValueError(f"distance must be >= 2, n >= 1 and vocab_size >= 2, got "
                         f"distance={distance}, n={n}, vocab_size={vocab_size}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(vocab_size, (n, distance), generator=gen)


def in_range_distance(train_length: int) -> int:
    """The largest copy distance d whose input (2d - 1 positions) fits ``train_length``."""
    if train_length < 3:
        raise ValueError(f"no copy distance d >= 2 fits a training length of {train_length}")
    return (train_length + 1) // 2


def oracle_copy_curve(passage: torch.Tensor, k: int, vocab_size: int,
                      alpha: float = 0.1) -> np.ndarray:
    """The k-gram copy oracle's CE on every target of [x ; x], float64 ``[2d - 1]`` (as
    :func:`copy_curve`), for one passage ``x [d]``.

    Target t + 1 is predicted from position t's last k ids (fewer at the start): the ids that
    followed that k-gram's earlier occurrences in the input, counted (n_c of id c, N in
    all), smoothed towards the uniform distribution, p(c) = (n_c + alpha / V) / (N + alpha);
    with no earlier occurrence, uniform. It reads nothing but the input.
    """
    if k < 1 or alpha <= 0:
        raise ValueError(f"k must be >= 1 and alpha > 0, got k={k}, alpha={alpha}")
    s = torch.cat([passage, passage]).tolist()
    counts: dict[tuple, dict[int, int]] = {}
    ce = np.empty(len(s) - 1)
    for t in range(len(s) - 1):
        key, nxt = tuple(s[max(0, t - k + 1):t + 1]), s[t + 1]
        seen = counts.get(key, {})
        ce[t] = -np.log((seen.get(nxt, 0) + alpha / vocab_size) / (sum(seen.values()) + alpha))
        if t + 1 >= k:          # the k-gram ending at t, now followed by s[t + 1], is history
            follow = counts.setdefault(key, {})
            follow[nxt] = follow.get(nxt, 0) + 1
    return ce


def oracle_copy_gain(val: torch.Tensor, vocab_size: int, distances=DISTANCES,
                     n: int = PASSAGES, ks=range(1, 9), random_seed: int | None = None
                     ) -> dict[int, dict[int, float]]:
    """``{k: {distance: gain}}`` of the k-gram copy oracle (:func:`oracle_copy_curve`) on
    the passages of :func:`passages` (or, with ``random_seed``, :func:`random_passages`)."""
    out: dict[int, dict[int, float]] = {int(k): {} for k in ks}
    for d in distances:
        x = passages(val, d, n) if random_seed is None else random_passages(vocab_size, d, n, random_seed)
        for k in ks:
            curves = [oracle_copy_curve(p, k, vocab_size) for p in x]
            out[int(k)][int(d)] = float(np.mean([c[:d - 1].mean() - c[d:].mean() for c in curves]))
    return out


def copy_curve(model: torch.nn.Module, passage: torch.Tensor, device=None) -> np.ndarray:
    """CE of every target of [x ; x], float64 ``[2d - 1]``, for one passage ``x [d]``: the
    model reads [x ; x] without its last id, in eval mode and inference mode (its mode is
    restored after). Entries 0..d-2 are the first copy's targets x[1:], entry d-1 the
    junction (x[0] after the end of x), entries d..2d-2 the second copy's x[1:]."""
    device = device or next(model.parameters()).device
    s = torch.cat([passage, passage])[None]                                    # [1, 2d]
    with evaluate.eval_mode(model, False), torch.inference_mode():
        logits = model(s[:, :-1].to(device))[0].cpu().double()                # [1, 2d-1, V]
    return F.cross_entropy(logits[0], s[0, 1:], reduction="none").numpy()


def copy_ce(model: torch.nn.Module, x: torch.Tensor, device=None) -> tuple[np.ndarray, np.ndarray]:
    """CE per passage on its first and second copy, float64 ``([n], [n])``, for passages
    ``x [n, d]`` (:func:`copy_curve`, one passage per forward pass): the mean over the
    targets x[1:] of each copy."""
    d = x.shape[1]
    curves = [copy_curve(model, passage, device) for passage in x]
    return (np.array([c[:d - 1].mean() for c in curves]),
            np.array([c[d:].mean() for c in curves]))


def copy_gain(model: torch.nn.Module, val: torch.Tensor, distances=DISTANCES,
              n: int = PASSAGES, device=None, random_seed: int | None = None,
              vocab_size: int | None = None) -> dict[int, float]:
    """``{distance: gain}``: CE(first copy) - CE(second copy), mean over the ``n``
    passages of :func:`passages` at each distance (nats per character); with
    ``random_seed``, over :func:`random_passages` of ``vocab_size`` ids instead."""
    if random_seed is not None and vocab_size is None:
        raise ValueError("random passages need vocab_size (the model's vocabulary size)")
    out = {}
    for d in distances:
        x = passages(val, d, n) if random_seed is None else random_passages(vocab_size, d, n, random_seed)
        first, second = copy_ce(model, x, device)
        out[int(d)] = float(np.mean(first - second))
    return out
