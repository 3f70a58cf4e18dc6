"""Issue 48, part 1: aten ops and ms per training step of the KERPLE-prior CAT at the
``cpu`` profile's sizes, with the parameter-free basis cached and without, in one run.

    CATLIB_DATA=.../tiny.txt python benchmarks/exact_savings.py [--steps 20] [--threads 1]

The steps are SideBySide.train_step of CAT alone (forward with penalty, cross-entropy,
backward, AdamW). Ops: torch.profiler events of one step after warm-up, counted two ways:
every ``aten::`` event, and the top-level ones (no ``aten::`` event above them: the ops
the Python code and the autograd engine dispatch). Time: the two settings alternate step
by step (cache on, cache off, ...) on two trainers of the same seed, so that load from
other jobs reaches both alike; the median of each and their ratio. Without the switch
(code older than the cache) only the "off" column is measured.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import timeit

import torch

from catlib.data import load_corpus
from catlib.nn.config import CATConfig
from catlib.training.loop import SideBySide, TrainConfig

from .gpu_levers import aten_counts

try:
    from catlib.nn.plan import basis_cache
except ImportError:   # the code before the cache
    basis_cache = None

CPU_PROFILE = dict(d_model=128, n_heads=8, n_freq=32, blocks=1, solver="rk4-classic",
                   solver_steps=1, dropout=0.0)


def _setting(on: bool):
    if basis_cache is None:
        return contextlib.nullcontext()
    return basis_cache(on)


def count_ops(trainer: SideBySide, on: bool) -> dict:
    with _setting(on):
        trainer.train_step()                      # warm: caches filled, optimiser state made
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            trainer.train_step()
    counts = aten_counts(prof.events())
    return {"aten_all": counts["aten_ops"], "aten_top": counts["aten_top_level"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ids = load_corpus(split="90/10").train
    cfg = CATConfig(variant="causal", kernel="kerple-prior", train_length=128, **CPU_PROFILE)
    tc = TrainConfig(train_steps=500, lr=4e-3, batch=10, seq=128, models=("cat",),
                     split="90/10")
    settings = (True, False) if basis_cache is not None else (False,)
    trainers = {on: SideBySide(cfg, tc, ids) for on in settings}
    out = {"threads": args.threads, "steps": args.steps, "torch": torch.__version__,
           "switch": basis_cache is not None}
    for on in settings:
        out[f"ops_cache_{'on' if on else 'off'}"] = count_ops(trainers[on], on)
    times = {on: [] for on in settings}
    losses = {on: [] for on in settings}
    for _ in range(args.steps):
        for on in settings:
            with _setting(on):
                t0 = time.perf_counter()
                m = trainers[on].train_step()
                times[on].append(time.perf_counter() - t0)
            losses[on].append((m["ce"], m["loss"], m["penalty"]))
    for on in settings:
        out[f"ms_cache_{'on' if on else 'off'}"] = 1e3 * statistics.median(times[on])
    if len(settings) == 2:
        out["ms_ratio_on_over_off"] = out["ms_cache_on"] / out["ms_cache_off"]
        # the two trainers took the same steps: the same losses and weights, bit for bit
        w_on, w_off = (trainers[on].cat.state_dict() for on in settings)
        out["same_losses"] = losses[True] == losses[False]
        out["same_weights"] = all(torch.equal(w_on[k], w_off[k]) for k in w_on)
        # The plan alone (where the saving is), alternating too: median of the best of 3
        # x 50 calls, repeated 15 times.
        attn = trainers[True].cat.blocks[0].attn
        plan_ms = {on: [] for on in settings}
        for _ in range(15):
            for on in settings:
                with _setting(on):
                    plan_ms[on].append(1e3 / 50 * min(timeit.repeat(
                        lambda: attn.plan(tc.seq), number=50, repeat=3)))
        out["plan_ms_cache_on"] = statistics.median(plan_ms[True])
        out["plan_ms_cache_off"] = statistics.median(plan_ms[False])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
