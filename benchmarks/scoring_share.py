"""What scoring costs the book's training pool beside its training (issue 61 item 3).

For every distinct model of the ``cpu`` profile's pool (the runs ``make book`` trains: every
row and seed of chapters 05, 06, 08, 09 and 10), on one thread:

- its training step, timed on the run's own batches (:class:`~catlib.training.loop.SideBySide`,
  a few steps after one untimed), times the steps the run trains (its branches' decay
  steps included);
- its scoring as the pool scores it: the context table's lengths through
  :func:`~catlib.measure.evaluate.cross_entropy`, the longest per position through
  :func:`~catlib.measure.extrapolation.position_ce` (one window a pass), the study's rows at
  their training length only. Three columns, measured in the same process: ``before``, the
  caps and the code before issue 61 (``eval_windows`` = 128: 128 windows at 128 and 512;
  :func:`old_code`: plans built once per forward pass, passes of 32,768 tokens, the
  sinusoidal baseline's causal mask written per pass); ``all_old_code``, every window with
  that code; ``all``, every window (the span's 820 windows at 128 cap every length) with
  this code;
- its copy test (chapter 09's, every model of the pool but chapter 10's), once.

Then the pool's worker-seconds: each run's training and scoring times its seeds, with
chapter 10's frontier points (every kept step of a frontier row's first seed, scored at
the shortest length on every window and at the longest on
:data:`~catlib.experiment.ladder.FRONTIER_LONG_WINDOWS`). The weights are untrained: the
cost of these fixed-step models does not depend on them. Seconds are this machine's, on
one thread, and a busy machine inflates them all alike; compare columns of one run::

    python -m benchmarks.scoring_share            # about 25 minutes on one core
    python -m benchmarks.scoring_share --quick    # the ``all`` column only, no copy test
    python -m benchmarks.scoring_share --batches  # the CPU's passes against 32,768 tokens
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from unittest import mock

import torch
import torch.nn as nn

from catlib.book.profiles import PROFILES, experiment
from catlib.book.training import _row_seeds
from catlib.data import load_corpus
from catlib.experiment.compute import expected_step_flops
from catlib.experiment.ladder import FRONTIER_LONG_WINDOWS, point_steps
from catlib.experiment.rows import CHAPTER_ROWS, FRONTIER_ROWS, NO_COPY_TEST, ROWS, row_configs
from catlib.measure.copying import copy_test
from catlib.measure.cost import forward_flops_per_token
from catlib.measure import evaluate
from catlib.measure.evaluate import cross_entropy, n_windows
from catlib.measure.extrapolation import position_ce
from catlib.nn import baselines
from catlib.nn.baselines import Baseline
from catlib.nn.model import CAT
from catlib.nn.reused_plans import plan_reuse
from catlib.training.loop import SideBySide

ALL = 10**9
TIMED_STEPS = 4
# The cpu profile's eval_windows before issue 61 (128 windows at 128 and 512).
BEFORE_CAP = 128


@contextlib.contextmanager
def old_code():
    """Scoring as the code before issue 61 scored: a plan per forward pass, passes of up to
    32,768 tokens on the CPU too, the sinusoidal baseline's [T, T] causal mask written per pass."""
    def mask(length, like):
        return nn.Transformer.generate_square_subsequent_mask(length, device=like.device,
                                                              dtype=like.dtype)
    with plan_reuse(False), mock.patch.object(evaluate, "CPU_BATCH_TOKENS", 10**9), \
            mock.patch.object(baselines, "causal_hint", mask):
        yield


def pool_runs(profile: str = "cpu") -> dict[tuple, list]:
    """The pool's runs grouped by their model: ``{model key: [(label, seed, model config,
    train config)]}``, as :func:`catlib.book.training.train_book_pool` asks for them."""
    params = {n: dict(p, profile=profile) for n, p in PROFILES[profile].items() if n in CHAPTER_ROWS}
    params["05_training"].setdefault("seed", 0)       # its notebook's own parameter
    seeds, ex, groups, seen = _row_seeds(params), experiment(profile), {}, set()
    for label, chosen in seeds.items():
        own = dataclasses.replace(ex, seeds=tuple(sorted(chosen)))
        for seed in sorted(chosen):
            model, train = row_configs(ROWS[label], own, seed)
            run = (json.dumps(model.resolved().to_dict(), sort_keys=True), json.dumps(train.identity()))
            if run in seen:              # a run shared by two rows (a CAT and its baseline)
                continue
            seen.add(run)
            arch = (run[0], train.batch, train.seq, train.split, tuple(train.models))
            groups.setdefault(arch, []).append((label, seed, model, train))
    return groups


def train_seconds(model, train, corpus) -> tuple[float, SideBySide]:
    """Seconds of one training step of the run (both its models), mean of TIMED_STEPS after
    one untimed step, and the trainer (its models, to score)."""
    trainer = SideBySide(model, train, corpus.train)
    trainer.train_step()
    start = time.perf_counter()
    for _ in range(TIMED_STEPS):
        trainer.train_step()
    return (time.perf_counter() - start) / TIMED_STEPS, trainer


def score_seconds(model, val, lengths, caps, span, curve: bool) -> dict:
    """Seconds to score ``model`` at each length (the last per position when ``curve``)."""
    out = {}
    for i, (L, cap) in enumerate(zip(lengths, caps)):
        start = time.perf_counter()
        if curve and i == len(lengths) - 1:
            position_ce(model, val, L, cap, span_length=span)
        else:
            cross_entropy(model, val, L, eval_windows=cap, span_length=span)
        out[L] = time.perf_counter() - start
    return out


BATCH_ROWS = ("causal CAT", "KERPLE-prior CAT", "ALiBi baseline", "sinusoidal baseline")


def batch_probe(lengths, span, repeats: int = 3) -> None:
    """Seconds to score every window at each length in the CPU's passes
    (:func:`catlib.measure.evaluate.windows_per_batch` on the CPU) and in passes of up to
    32,768 tokens (the best of ``repeats``, alternated), and whether each window's CE is
    the same."""
    ex, val = experiment("cpu"), load_corpus(split="90/10").val
    for label in BATCH_ROWS:
        model_config, _ = row_configs(ROWS[label], ex, 0)
        torch.manual_seed(0)
        model = (CAT if ROWS[label].is_cat else Baseline)(model_config)
        for L in lengths:
            best, found = {}, {}
            for _ in range(repeats):
                for rule in ("cpu", "32768"):
                    cap = evaluate.CPU_BATCH_TOKENS if rule == "cpu" else 10**9
                    with mock.patch.object(evaluate, "CPU_BATCH_TOKENS", cap):
                        start = time.perf_counter()
                        r = cross_entropy(model, val, L, eval_windows=ALL, span_length=span,
                                          batch_tokens=32768, device="cpu")
                    best[rule] = min(best.get(rule, 1e9), time.perf_counter() - start)
                    found[rule] = r["window_ce"]
            diff = max(abs(a - b) for a, b in zip(found["cpu"], found["32768"]))
            print(f"{label:24s} L {L:5d}: {evaluate.windows_per_batch(L, device='cpu'):3d} windows "
                  f"a pass {best['cpu']:.2f}s, {evaluate.windows_per_batch(L):3d} windows a pass "
                  f"{best['32768']:.2f}s (x{best['32768'] / best['cpu']:.2f}); window CEs "
                  + ("the same bit for bit" if found["cpu"] == found["32768"]
                     else f"differ by at most {diff:.1e}"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the all column only, no copy test")
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    parser.add_argument("--batches", action="store_true",
                        help="only time the CPU's passes against passes of 32,768 tokens (a few rows)")
    parser.add_argument("--rows", nargs="*", default=None,
                        help="only the models whose first row's label contains one of these")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ex = experiment("cpu")
    ev = ex.evaluation
    context = PROFILES["cpu"]["09_using_context"]
    lengths = list(ev.lengths)
    if args.batches:
        batch_probe(lengths[:-1], ev.span_length)
        return
    corpora = {"90/10": load_corpus(split="90/10")}
    # Every window: the span's windows at the shortest length cap every length (the published
    # split's rows, on the published protocol, read that many first windows).
    every = n_windows(len(corpora["90/10"].val), lengths[0], ALL, ev.span_length)
    columns = [("all", every, True)]
    if not args.quick:
        columns = [("before", BEFORE_CAP, False), ("all_old_code", every, False), *columns]
    totals = {"train": 0.0, "copy": 0.0, **{c: 0.0 for c, _, _ in columns}}
    rows_out = []
    for runs in pool_runs().values():
        label, _, model_config, train = runs[0]
        if args.rows and not any(part in label for part in args.rows):
            continue
        row = ROWS[label]
        corpus = corpora.setdefault(train.split, load_corpus(split=train.split))
        step_s, trainer = train_seconds(model_config, train, corpus)
        span = None if row.split == "published" else ev.span_length
        scored, curve = ([train.seq], False) if row.study else (lengths, True)
        times, copy_s, rates = {}, 0.0, {}
        train_flops = sum(expected_step_flops(model_config, key, train.batch, train.seq)
                          for key in train.models)
        for key in train.models:
            model = getattr(trainer, key)
            for column, cap, new in columns:
                caps = [ev.curve_windows if curve and L == scored[-1] else cap for L in scored]
                with contextlib.nullcontext() if new else old_code():
                    times.setdefault(column, {})[key] = score_seconds(
                        model, corpus.val, scored, caps, span, curve)
            # GFLOP/s of the every-window scoring, FLOPs counted by the book's rule
            # (catlib.measure.cost: attention's full T x T products, as training is counted).
            for L in scored:
                cap = ev.curve_windows if curve and L == scored[-1] else every
                tokens = n_windows(len(corpus.val), L, cap, span) * L
                flops = forward_flops_per_token(model, L, len(corpus.vocab)) * tokens
                rates.setdefault(key, {})[str(L)] = round(flops / times["all"][key][L] / 1e9, 1)
            if not args.quick and label not in NO_COPY_TEST:
                start = time.perf_counter()
                for random_seed in ((None, 0) if row.study else (None,)):
                    copy_test(model, corpus.val, context["copy_distances"],
                              context["copy_passages"], random_seed=random_seed,
                              vocab_size=len(corpus.vocab), train_length=train.seq)
                copy_s += time.perf_counter() - start
        # Every run of this model: its steps (branches: their decay steps) and frontier points.
        steps = sum(t.train_steps + sum(round(t.decay_share * b) for b in t.branches)
                    for _, _, _, t in runs)
        points = sum(len(point_steps(t)) - 1 for lab, _, _, t in runs if lab in FRONTIER_ROWS)
        long_share = FRONTIER_LONG_WINDOWS / n_windows(len(corpus.val), lengths[-1], ALL, span)
        line = {"row": label, "runs": len(runs), "step_s": step_s, "train": step_s * steps,
                "copy": copy_s * len(runs), "points": points,
                "train_gflop_s": round(train_flops / step_s / 1e9, 1), "all_gflop_s": rates}
        for column, by_model in times.items():
            one = sum(sum(s.values()) for s in by_model.values())
            s = next(iter(by_model.values()))
            # A frontier point: the shortest length at the column's cap, the longest on a few.
            point = s[lengths[0]] + s[lengths[-1]] * long_share if points else 0.0
            line[column] = one * len(runs) + point * points
            line[column + "_by_length"] = {k: {str(L): round(v, 3) for L, v in s.items()}
                                           for k, s in by_model.items()}
        rows_out.append(line)
        for k in totals:
            totals[k] += line.get(k, 0.0)
        by_length = " ".join(f"{L}:{sum(s[L] for s in times['all'].values()):.2f}" for L in scored)
        print(f"{label[:48]:48s} runs {len(runs):2d} step {step_s:.3f}s train {line['train']:7.1f}s | "
              + " ".join(f"{c} {line[c]:6.1f}s" for c, _, _ in columns)
              + f" copy {line['copy']:6.1f}s | every window, one run: {by_length} | GFLOP/s: "
              f"training {line['train_gflop_s']}, scoring {rates}", flush=True)
    t = totals
    print(f"\npool worker-seconds: training {t['train']:.0f}, copy test {t['copy']:.0f}, scoring: "
          + ", ".join(f"{c} {t[c]:.0f}" for c, _, _ in columns))
    for column, _, _ in columns:
        print(f"  scoring ({column}) / (training + scoring + copy test): "
              f"{t[column] / (t['train'] + t[column] + t['copy']):.1%}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows_out, "totals": totals, "timed_steps": TIMED_STEPS,
                       "every": every, "threads": 1}, f, indent=1)


if __name__ == "__main__":
    main()
