"""What the context gain's sliding reading costs against the full one (issue 61, item 2):
seconds for one window of the ``cpu`` profile's longest length read in full (one forward
``[1, L]``) and sliding (one forward ``[chunks, T]``, :func:`catlib.measure.context_gain.
sliding_plan`), per row, and their ratio::

    python -m benchmarks.context_gain          # under a minute on one core

A benchmark, not a test: the seconds are this machine's, on one thread, the best of
``REPEATS``; compare the two columns of one run. The weights are untrained (the cost does
not depend on them).
"""
from __future__ import annotations

import time

import torch

import catlib
from catlib.book.profiles import PROFILES, experiment
from catlib.data import load_corpus
from catlib.experiment.rows import EULER_CAT, MATCHED, ROWS, row_configs
from catlib.measure.context_gain import context_gain, sliding_plan
from catlib.measure.evaluate import windows

ROWS_TIMED = ("ALiBi baseline", "RoPE baseline", MATCHED, EULER_CAT)
REPEATS = 3


def best_seconds(model, tokens: torch.Tensor) -> float:
    """The fastest of :data:`REPEATS` forwards of ``tokens`` [B, T] (inference mode)."""
    times = []
    with torch.inference_mode():
        for _ in range(REPEATS):
            start = time.perf_counter()
            model(tokens)
            times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    ex = experiment("cpu")
    longest, T = PROFILES["cpu"]["06_context_length"]["lengths"][-1], ex.train.seq
    val = load_corpus(split="90/10").val
    plan = sliding_plan(longest, T)
    x, _ = windows(val, longest, 1, longest)
    print(f"one window of {longest}, T = {T}, stride {plan.stride}: "
          f"{len(plan.starts)} chunks of {T} ({plan.positions.numel()} ids read)")
    print(f"{'row':50s} {'full s':>7s} {'sliding s':>9s} {'ratio':>6s} {'both, measured s':>16s}")
    for label in ROWS_TIMED:
        model_config, _ = row_configs(ROWS[label], ex, 0)
        torch.manual_seed(0)
        model = (catlib.CAT if ROWS[label].is_cat else catlib.Baseline)(model_config).eval()
        full = best_seconds(model, x)
        sliding = best_seconds(model, x[0][plan.positions])
        start = time.perf_counter()
        context_gain(model, val, longest, T, eval_windows=1, device="cpu")
        both = time.perf_counter() - start
        print(f"{label:50s} {full:7.2f} {sliding:9.2f} {sliding / full:6.2f} {both:16.2f}",
              flush=True)


if __name__ == "__main__":
    main()
