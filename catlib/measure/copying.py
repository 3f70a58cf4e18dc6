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
validation ids, starting at evenly spaced offsets (:func:`passages`).
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
              n: int = PASSAGES, device=None) -> dict[int, float]:
    """``{distance: gain}``: CE(first copy) - CE(second copy), mean over the ``n``
    passages of :func:`passages` at each distance (nats per character)."""
    out = {}
    for d in distances:
        first, second = copy_ce(model, passages(val, d, n), device)
        out[int(d)] = float(np.mean(first - second))
    return out
