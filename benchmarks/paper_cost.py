"""What the `paper` profile would cost on this machine: one training step of each of its runs.

    python -m benchmarks.paper_cost [--repeats 3] [--out results/paper_cost_cpu.md]

Times one side-by-side training step (forward, backward and update of every model the run
trains, on one global batch) for each kind of run of the `paper` profile (catlib.book), at
its sizes, and projects the training time of the whole profile: steps x seeds x the median
step time, summed over runs (evaluation not included). The Markdown it writes is labelled
with the commit, device and date, and the reproducibility page includes it. A benchmark,
not a test: the seconds depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catlib import experiment as ex  # noqa: E402
from catlib.book import PROFILES, _now  # noqa: E402
from catlib.data import load_corpus  # noqa: E402
from catlib.common.provenance import git_state  # noqa: E402
from catlib.training.loop import SideBySide  # noqa: E402


def step_seconds(label: str, profile: dict, repeats: int) -> float:
    """Median seconds of one training step of ``label``'s run at the profile's sizes."""
    sizes = dict(d_model=profile["d_model"], n_heads=profile["n_heads"], n_freq=profile["n_freq"],
                 blocks=profile["blocks"], solver=profile["solver"], solver_steps=profile["solver_steps"],
                 dropout=profile["dropout"])
    train = dict(train_solver_steps=profile["train_steps"], lr=profile["lr"], batch=profile["batch"],
                 seq=profile["seq"])
    model, tc = ex.configs(ex.ARMS[label], sizes, train, seed=0)
    trainer = SideBySide(model, tc, load_corpus(split=tc.split).train, "cpu")
    times = []
    for _ in range(repeats + 1):                 # the first step warms up
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "results" / "paper_cost_cpu.md"))
    args = parser.parse_args(argv)
    profile = {**PROFILES["paper"]["06_context_length"], **PROFILES["paper"]["08_beyond"]}
    runs = {   # one run per label: the rows that share a run are timed once
        "published CAT": profile["published_seeds"], "causal CAT": profile["seeds"],
        "RoPE baseline": profile["seeds"], "ALiBi baseline": profile["seeds"],
        "relative CAT": profile["seeds"], "content-aware CAT": profile["seeds"]}
    rows, total = [], 0.0
    for label, seeds in runs.items():
        seconds = step_seconds(label, profile, args.repeats)
        run_total = seconds * profile["train_steps"] * len(seeds)
        total += run_total
        models = " and its baseline" if len(ex.ARMS[label].trains) == 2 else ""
        rows.append(f"| {label}{models} | {seconds:.2f} | {len(seeds)} | {run_total / 3600:.2f} |")
        print(rows[-1], flush=True)
    git = git_state(ROOT, ignore=("README.md", "results"))
    label = (f"_Measured by `python -m benchmarks.paper_cost` on this CPU ({os.cpu_count()} cores, "
             f"{torch.get_num_threads()} threads), commit {(git['commit'] or 'unknown')[:12]}, "
             f"{_now()}._")
    text = "\n".join([
        label, "",
        f"`paper` profile: width {profile['d_model']}, {profile['batch']} x {profile['seq']} "
        f"characters per step, {profile['train_steps']} steps, classical RK4 with "
        f"{profile['solver_steps']} steps per block, dropout {profile['dropout']}.", "",
        "| run | s per training step | seeds | hours of training |", "|---|---:|---:|---:|",
        *rows, "",
        f"The whole profile would train for about {total / 3600:.1f} hours on this CPU "
        f"(evaluation not included).", ""])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
