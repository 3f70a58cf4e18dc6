"""The copy test: does a model read d characters back?

A passage x of d characters from the validation text is fed twice, s = [x ; x] (2d
characters). The targets x[1:] are scored twice: in the first copy, predicted from
positions 0..d-2 (their own prefix of x), and in the second, from positions d..2d-2 (the
same prefix, with the whole of x d characters earlier). The same targets are scored a
third time after an unrelated prefix y of the same length, [y ; x] (the control: same
positions d..2d-2, nothing to copy; :func:`control_passages`). The copy gain at distance d
is taken against the control,

    gain(d)     = CE(control) - CE(second copy)    (nats per character, mean over passages)
    position(d) = CE(control) - CE(first copy)     (what position alone changes)

so that CE(first copy) - CE(second copy) = gain(d) - position(d). Only a model that reads d
characters back can make gain(d) positive: the targets, their local context and their
positions are the same in the control and the second copy. A model whose CE depends on
position (past its training length, say) has a position term and no gain from it.

The passages of a distance are the same for every model: ``n`` passages of the
validation ids, starting at evenly spaced offsets (:func:`passages`), or, for the control
without the ambiguities of natural text, ``n`` strings of ids drawn uniformly by a seeded
generator (:func:`random_passages`).

Two references make a gain readable. In range: the largest distance whose whole input
[x ; x] (2d - 1 positions read) lies within the training length, ``d <= (T + 1) // 2``
(:func:`in_range_distance`); a longer reference already asks the model to read past its
training length. A ceiling: the k-gram copy oracle (:func:`oracle_copy_curve`), which
predicts each character from what followed the earlier occurrences of its last k
characters in the same input (counts, nothing learned), scored as a model that knows
nothing without the input would be: gain = log V - CE(second copy) (:func:`oracle_copy_gain`).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from . import evaluate

# The distances of the book's test (characters), and passages per distance.
DISTANCES = (32, 100, 400, 1000, 2000)
PASSAGES = 8
# Ids per forward pass of the copy test: short passages are read several to a batch.
BATCH_TOKENS = 2048
# Passages at a distance whose input fits the training length, per passage beyond it:
# measured on a far-head CAT (issue 43), the standard error of its in-range gain g(64) was
# 6.0 % of g(64) with 4 passages, 3.0 % with 16 and 2.1 % with 32.
IN_RANGE_PASSAGES = 8


def passages(val: torch.Tensor, distance: int, n: int = PASSAGES) -> torch.Tensor:
    """``n`` passages of ``distance`` ids, int64 ``[n, distance]``: passage k starts at
    k * (len(val) - distance) // n, so they spread over the whole validation split."""
    if distance < 2 or n < 1:
        raise ValueError(f"distance must be >= 2 and n >= 1, got distance={distance}, n={n}")
    if len(val) < distance:
        raise ValueError(f"the validation split has {len(val)} ids, fewer than distance = "
                         f"{distance}; use a shorter distance")
    return torch.stack([val[s:s + distance] for s in _starts(len(val), distance, n)])


def _starts(length: int, distance: int, n: int) -> list[int]:
    """Where :func:`passages` starts its ``n`` passages in a split of ``length`` ids."""
    return [k * (length - distance) // n for k in range(n)]


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
    the passages of :func:`passages` (or, with ``random_seed``, :func:`random_passages`):
    log V minus its mean CE on the second copy. Its first copy is costed as a predictor
    without the input would be, log V, not by its own smoothed guesses (which cost an
    unseen continuation far more than log V and would reward the k with the worst first
    copy); so the k with the largest gain is the best copier, and no gain exceeds log V."""
    out: dict[int, dict[int, float]] = {int(k): {} for k in ks}
    for d in distances:
        x = passages(val, d, n) if random_seed is None else random_passages(vocab_size, d, n, random_seed)
        for k in ks:
            second = [oracle_copy_curve(p, k, vocab_size)[d:].mean() for p in x]
            out[int(k)][int(d)] = float(np.log(vocab_size) - np.mean(second))
    return out


def control_passages(val: torch.Tensor, distance: int, n: int = PASSAGES) -> torch.Tensor:
    """The control's unrelated prefixes for :func:`passages`, int64 ``[n, distance]``: prefix
    k starts half the split after passage k (wrapping round), so that it never overlaps it."""
    span = len(val) - distance + 1                     # the starts a passage can have
    starts = [(s + span // 2) % span for s in _starts(len(val), distance, n)]
    if span // 2 < distance or span - span // 2 < distance:
        raise ValueError(f"the validation split has {len(val)} ids, too few for a passage of "
                         f"{distance} and its control prefix half the split away (about "
                         f"{3 * distance}); use a shorter distance")
    return torch.stack([val[s:s + distance] for s in starts])


def _ce_rows(model: torch.nn.Module, s: torch.Tensor, device) -> np.ndarray:
    """CE of every target of each row of ``s [B, 2d]``, float64 ``[B, 2d - 1]``: the model
    reads ``s`` without its last id, in eval mode and inference mode (mode restored after)."""
    with evaluate.eval_mode(model, False), torch.inference_mode():
        logits = model(s[:, :-1].to(device))[0].cpu().double()                # [B, 2d-1, V]
    return F.cross_entropy(logits.transpose(1, 2), s[:, 1:], reduction="none").numpy()


def copy_curve(model: torch.nn.Module, passage: torch.Tensor, device=None) -> np.ndarray:
    """CE of every target of [x ; x], float64 ``[2d - 1]``, for one passage ``x [d]``: the
    model reads [x ; x] without its last id, in eval mode and inference mode (its mode is
    restored after). Entries 0..d-2 are the first copy's targets x[1:], entry d-1 the
    junction (x[0] after the end of x), entries d..2d-2 the second copy's x[1:]."""
    device = device or next(model.parameters()).device
    return _ce_rows(model, torch.cat([passage, passage])[None], device)[0]


def copy_scores(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device=None,
                tokens: int = BATCH_TOKENS) -> dict[str, np.ndarray]:
    """Mean CE per passage of its targets x[1:], float64 ``{"first": [n], "second": [n],
    "control": [n]}``, for passages ``x [n, d]`` and unrelated prefixes ``y [n, d]``: the
    first and second copy of [x ; x] (as :func:`copy_curve`) and the second half of [y ; x].
    Passages are read several rows to a forward pass, at most ``tokens`` ids in all (one row
    when 2d - 1 exceeds it)."""
    device = device or next(model.parameters()).device
    n, d = x.shape
    rows = torch.cat([torch.cat([x, x], 1), torch.cat([y, x], 1)])            # [2n, 2d]
    per = max(1, tokens // (2 * d - 1))
    ce = np.concatenate([_ce_rows(model, rows[i:i + per], device)
                         for i in range(0, 2 * n, per)])                      # [2n, 2d-1]
    return {"first": ce[:n, :d - 1].mean(1), "second": ce[:n, d:].mean(1),
            "control": ce[n:, d:].mean(1)}


def passages_at(distance: int, n: int, train_length: int | None) -> int:
    """Passages scored at ``distance``: ``n``, and :data:`IN_RANGE_PASSAGES` times as many
    where the whole input [x ; x] fits ``train_length`` (the in-range reference among them,
    whose gain every kept fraction divides by; short inputs, read several to a pass)."""
    fits = train_length is not None and 2 * distance - 1 <= train_length
    return n * IN_RANGE_PASSAGES if fits else n


def copy_test(model: torch.nn.Module, val: torch.Tensor, distances=DISTANCES,
              n: int = PASSAGES, device=None, random_seed: int | None = None,
              vocab_size: int | None = None, train_length: int | None = None
              ) -> dict[int, dict[str, np.ndarray]]:
    """``{distance: copy_scores}``: :func:`copy_scores` of the passages of :func:`passages`
    at each distance (``n``, more in range: :func:`passages_at`), after the prefixes of
    :func:`control_passages`; with ``random_seed``, of :func:`random_passages` of
    ``vocab_size`` ids, after random prefixes drawn with ``random_seed + 1``."""
    if random_seed is not None and vocab_size is None:
        raise ValueError("random passages need vocab_size (the model's vocabulary size)")
    out = {}
    for d in distances:
        m = passages_at(d, n, train_length)
        if random_seed is None:
            x, y = passages(val, d, m), control_passages(val, d, m)
        else:
            x, y = (random_passages(vocab_size, d, m, s) for s in (random_seed, random_seed + 1))
        out[int(d)] = copy_scores(model, x, y, device)
    return out


def copy_gain(model: torch.nn.Module, val: torch.Tensor, distances=DISTANCES,
              n: int = PASSAGES, device=None, random_seed: int | None = None,
              vocab_size: int | None = None, train_length: int | None = None) -> dict[int, float]:
    """``{distance: gain}``: CE(control) - CE(second copy), mean over the passages of
    :func:`copy_test` at each distance (nats per character)."""
    return {d: float(np.mean(s["control"] - s["second"])) for d, s in copy_test(
        model, val, distances, n, device, random_seed, vocab_size, train_length).items()}
