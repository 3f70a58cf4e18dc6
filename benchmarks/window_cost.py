"""What scoring every validation window would cost the book (issue 47): seconds to score
one model at each of the ``cpu`` profile's lengths on the windows the chapters read
(``eval_windows``, ``curve_windows`` at the longest) and on every window the split holds,
and the refinement test of the KERPLE-prior CAT at the training length on 32, 128 and
every window (it reads ``eval_windows`` too)::

    python -m benchmarks.window_cost          # about 2 minutes on one core

A benchmark, not a test: the seconds are this machine's, on one thread; compare the two
columns of one run. The weights are untrained (the cost does not depend on them), so the
standard errors printed are not those of a trained model.
"""
from __future__ import annotations

import time

import torch

import catlib
from catlib.book.profiles import PROFILES, experiment
from catlib.data import load_corpus
from catlib.experiment.grid import window_cap
from catlib.experiment.rows import AS_STEPS, EULER_CAT, MATCHED, ROWS, row_configs
from catlib.experiment.scale import ALL_WINDOWS
from catlib.measure.evaluate import cross_entropy, n_windows
from catlib.measure.refinement import FINER, refinement

ROWS_TIMED = ("ALiBi baseline", AS_STEPS, MATCHED, EULER_CAT)


def seconds(model, val, length: int, cap: int) -> tuple[float, dict]:
    start = time.perf_counter()
    found = cross_entropy(model, val, length, eval_windows=cap, device="cpu")
    return time.perf_counter() - start, found


def main() -> None:
    torch.set_num_threads(1)
    ex = experiment("cpu")
    params = PROFILES["cpu"]["06_context_length"]
    lengths, longest = params["lengths"], params["lengths"][-1]
    val = load_corpus(split="90/10").val
    print(f"{'row':50s} {'length':>6s} {'book windows':>13s} {'s':>6s} {'every window':>13s} {'s':>6s}")
    for label in ROWS_TIMED:
        model_config, _ = row_configs(ROWS[label], ex, 0)
        torch.manual_seed(0)
        model = (catlib.CAT if ROWS[label].is_cat else catlib.Baseline)(model_config).eval()
        total = [0.0, 0.0]
        for L in lengths:
            cap = window_cap(L, longest, params["eval_windows"], params["curve_windows"])
            a, few = seconds(model, val, L, cap)
            b, every = seconds(model, val, L, ALL_WINDOWS)
            total = [total[0] + a, total[1] + b]
            print(f"{label:50s} {L:6d} {few['windows']:13d} {a:6.2f} {every['windows']:13d} {b:6.2f}",
                  flush=True)
        print(f"{label:50s} {'all':>6s} {'':13s} {total[0]:6.2f} {'':13s} {total[1]:6.2f}")
        if label == MATCHED:
            for cap in (32, 128, ALL_WINDOWS):
                start = time.perf_counter()
                refinement(model, val, ex.train.seq, cap, FINER)
                print(f"{'  its refinement test at ' + str(ex.train.seq):50s} {'':6s} "
                      f"{n_windows(len(val), ex.train.seq, cap):13d} {time.perf_counter() - start:6.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
