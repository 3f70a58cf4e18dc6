"""What a rebuild on other hardware may move: rows of the cpu profile trained under two
CPU kernel dispatches.

    python -m benchmarks.rebuild_spread [--rows "ALiBi baseline" ...] [--train-steps 500]

Trains each row (seed 0, the `cpu` profile's sizes and training settings of
catlib.book) twice, in two fresh processes with their own temporary runs root, both on
one thread: once with this machine's default kernel dispatch, once with
``ATEN_CPU_CAPABILITY=default`` and ``MKL_CBWR=COMPATIBLE``. Both are scored as chapter
06 scores them (the stored evaluation at 128, 512 and 1024, the mean per-position CE at
5000, at most ``eval_windows`` windows, ``curve_windows`` at 5000). Other kernels round float32 differently; the
training steps amplify those last-bit differences, which is what another machine's
build does to the book's tables. Writes ``results/rebuild_spread_cpu.md`` and a JSON
twin. A measurement, not a test: it takes minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILE = "cpu"
CHAPTER = "06_context_length"
# The cheapest row (about 6 minutes on 2 busy cores); with the causal CAT's run too, an
# estimated 12, which outgrows a quick check. --rows adds any other.
DEFAULT_ROWS = ("ALiBi baseline",)
# Environment variables that choose CPU kernels; the "default" process has none of them,
# so that it is the build a user gets on this machine.
DISPATCH_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
OTHER = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def worker(rows: list[str], train_steps: int, seed: int, root: Path) -> dict:
    """Train and score ``rows`` in this process (one thread); their CE at the lengths."""
    import torch

    from catlib import experiment as ex
    from catlib.book import PROFILES
    from catlib.data import load_corpus

    torch.set_num_threads(1)
    p = PROFILES[PROFILE][CHAPTER]
    sizes = dict(d_model=p["d_model"], n_heads=p["n_heads"], n_freq=p["n_freq"],
                 blocks=p["blocks"], solver=p["solver"], solver_steps=p["solver_steps"],
                 dropout=p["dropout"])
    train = dict(train_steps=train_steps, lr=p["lr"], batch=p["batch"], seq=p["seq"])
    lengths, windows = p["lengths"], p["eval_windows"]
    start = time.perf_counter()
    runs = ex.train_rows(rows, [seed], sizes, train, root=root, device="cpu",
                         lengths=lengths[:-1], eval_windows=windows, curve_length=lengths[-1],
                         curve_windows=p.get("curve_windows"), jobs=1, echo=None)
    corpus = {split: load_corpus(split=split) for split in {ex.ROWS[r].split for r in rows}}
    ce, _, _ = ex.table_scores(runs, rows, [seed], corpus, lengths[-1], windows, "cpu",
                               p.get("curve_windows"))
    return {"capability": torch.backends.cpu.get_cpu_capability(),
            "seconds": round(time.perf_counter() - start, 1), "lengths": lengths,
            "ce": {label: ce[label][0].tolist() for label in rows}}


def measure(rows: list[str], train_steps: int, seed: int, extra_env: dict) -> dict:
    """Run :func:`worker` in a fresh interpreter with ``extra_env`` on top of a clean one."""
    env = {k: v for k, v in os.environ.items() if k not in DISPATCH_VARS}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **extra_env)
    with tempfile.TemporaryDirectory(prefix="catlib-spread-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.rebuild_spread", "--worker", str(out),
               "--train-steps", str(train_steps), "--seed", str(seed), "--rows", *rows]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        return json.loads(out.read_text())


def render(result: dict) -> str:
    a, b = result["default"], result["other"]
    lines = [f"_Measured by `python -m benchmarks.rebuild_spread` on {result['cpu']} "
             f"({result['cpus']} CPUs), torch {result['torch']}, commit {result['commit']}, "
             f"{result['date']}._", "",
             f"Profile `{PROFILE}`, seed {result['seed']}, {result['train_steps']} training "
             f"steps, {result.get('batch', '?')} sequences per step, one thread, at most "
             f"{result['eval_windows']} windows per length ({result.get('curve_windows')} at "
             f"the longest). "
             f"Default dispatch: `{a['capability']}` ({a['seconds']:.0f} s); other: "
             f"`ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE`, i.e. `{b['capability']}` "
             f"({b['seconds']:.0f} s).", "",
             "| row | L | CE, default dispatch | CE, other dispatch | abs. difference |",
             "|---|---:|---:|---:|---:|"]
    for label in a["ce"]:
        for L, x, y in zip(a["lengths"], a["ce"][label], b["ce"][label]):
            lines.append(f"| {label} | {L} | {x:.4f} | {y:.4f} | {abs(x - y):.4f} |")
    lines += ["", f"Largest difference: {result['max_abs_diff']:.4f} nats."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(DEFAULT_ROWS))
    parser.add_argument("--train-steps", type=int, default=None,
                        help="default: the profile's (fewer only to time the benchmark)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / f"rebuild_spread_{PROFILE}.md")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from catlib import experiment as ex
    from catlib.book import PROFILES, _now
    from catlib.common.provenance import git_state, usable_cpus

    unknown = [r for r in args.rows if r not in ex.ROWS]
    if unknown:
        parser.error(f"unknown row {unknown[0]!r}; choose from {sorted(ex.ROWS)}")
    profile = PROFILES[PROFILE][CHAPTER]
    steps = args.train_steps or profile["train_steps"]
    if args.worker:
        args.worker.write_text(json.dumps(worker(args.rows, steps, args.seed, args.worker.parent)))
        return 0

    import torch
    default = measure(args.rows, steps, args.seed, {})
    other = measure(args.rows, steps, args.seed, OTHER)
    diffs = [abs(x - y) for label in default["ce"]
             for x, y in zip(default["ce"][label], other["ce"][label])]
    git = git_state(ROOT)
    commit = (git["commit"] or "unknown")[:12] + (", with uncommitted changes" if git["dirty"] else "")
    result = {"profile": PROFILE, "seed": args.seed, "train_steps": steps,
              "eval_windows": profile["eval_windows"], "curve_windows": profile.get("curve_windows"),
              "batch": profile["batch"], "cpu": cpu_model(), "cpus": usable_cpus(),
              "torch": torch.__version__, "commit": commit, "date": _now(),
              "default": default, "other": other, "max_abs_diff": max(diffs)}
    text = render(result)
    # A shorter timing run must not replace the artefact of the profile's settings.
    out = args.out if steps == profile["train_steps"] else args.out.with_stem(
        f"{args.out.stem}_{steps}steps")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(text + f"\nwritten: {out} and {out.with_suffix('.json').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
