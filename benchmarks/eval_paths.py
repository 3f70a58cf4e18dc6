"""Evaluation at T = 5000 of the causal sinusoidal and ALiBi baselines: the path the
library takes against the one it replaced, as ratios measured side by side in one run.

    python -m benchmarks.eval_paths [--windows 4] [--threads 1]

- sinusoidal: ``nn.TransformerEncoder``'s inference fast path, which applies the causal
  mask explicitly, against the fused causal kernel the library uses (fast path off);
- ALiBi: the bias masked again on every call against the prepared ``CausalBias``.

Both pairs give the same numbers (``max |dCE|`` is printed); only the time differs.
Timings are noisy: read the ratios, never turn them into test assertions.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch

from catlib.nn import baselines
from catlib.nn.baselines import Baseline
from catlib.nn.config import CATConfig
from catlib.data import load_corpus
from catlib.extrapolation import position_ce

SIZES = dict(d_model=128, n_heads=8, n_freq=32, blocks=1, dropout=0.0)   # the cpu profile
LENGTH = 5000


def timed_curve(model, val, windows: int):
    position_ce(model, val, 256, 1)                                      # warm-up
    start = time.perf_counter()
    ce = position_ce(model, val, LENGTH, windows)
    return time.perf_counter() - start, ce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    val = load_corpus(split="90/10").val
    print(f"T = {LENGTH}, {args.windows} windows, {args.threads} thread(s), torch {torch.__version__}")
    print(f"{'model':12s} {'before s':>9s} {'now s':>7s} {'ratio':>6s} {'max |dCE|':>10s}")

    torch.manual_seed(0)
    model = Baseline(CATConfig(variant="causal", baseline_positions="sinusoidal", **SIZES))
    now, ce_now = timed_curve(model, val, args.windows)
    original = baselines._without_mha_fastpath
    baselines._without_mha_fastpath = contextlib.nullcontext       # the fast path again
    try:
        before, ce_before = timed_curve(model, val, args.windows)
    finally:
        baselines._without_mha_fastpath = original
    report("sinusoidal", before, now, (ce_now - ce_before).abs().max().item())

    torch.manual_seed(0)
    model = Baseline(CATConfig(variant="causal", baseline_positions="alibi", **SIZES))
    now, ce_now = timed_curve(model, val, args.windows)
    prepared = baselines.CausalBias
    baselines.CausalBias = lambda bias: bias            # a plain tensor: masked per call
    try:
        before, ce_before = timed_curve(model, val, args.windows)
    finally:
        baselines.CausalBias = prepared
    report("ALiBi", before, now, (ce_now - ce_before).abs().max().item())


def report(name: str, before: float, now: float, diff: float) -> None:
    print(f"{name:12s} {before:9.2f} {now:7.2f} {before / now:6.1f} {diff:10.1e}")


if __name__ == "__main__":
    main()
