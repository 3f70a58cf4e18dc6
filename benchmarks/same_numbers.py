"""Same numbers before and after a refactor: nine rows of the book at the cpu profile's
sizes, a few steps, seed 0, one process on one thread; every stored training loss,
evaluation and per-position curve written to one JSON file (not a test: a refactor runs
it on the old and the new code and compares the two files byte for byte).

    python -m benchmarks.same_numbers OUT.json [--steps 40] [--root DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import torch

ROWS = ("published CAT", "published baseline", "causal CAT", "sinusoidal baseline",
        "RoPE baseline", "ALiBi baseline", "KERPLE-prior CAT",
        "KERPLE-prior CAT, ODE-consistent", "far-head ALiBi CAT, repeat")


def _experiment(steps: int):
    """The cpu profile's experiment at ``steps`` steps and a few evaluation windows."""
    from catlib.book.profiles import experiment

    ex = experiment("cpu")
    return dataclasses.replace(
        ex, train=dataclasses.replace(ex.train, train_steps=steps),
        evaluation=dataclasses.replace(ex.evaluation, eval_windows=2, curve_windows=1),
        seeds=(0,), published_seeds=(0,))


def _grid():
    try:                                   # the layout after the house's third pass
        from catlib.experiment.grid import train_grid
    except ImportError:                    # before it
        from catlib.experiment.grid import train_grid
    return train_grid


_NOT_NUMBERS = ("code", "code_fingerprint", "created", "seconds", "env", "git", "weights")


def _numbers(data):
    """``data`` without what names the code, the machine or the time."""
    if isinstance(data, dict):
        return {k: _numbers(v) for k, v in data.items() if k not in _NOT_NUMBERS}
    if isinstance(data, list):
        return [_numbers(v) for v in data]
    return data


def snapshot(steps: int, root: Path) -> dict:
    torch.set_num_threads(1)
    runs = _grid()(ROWS, _experiment(steps), root=root, device="cpu", jobs=1, echo=None)
    out = {}
    for (label, seed), run in sorted(runs.items()):
        files = {}
        for path in sorted(run.path.iterdir()):
            if path.name == "metrics.jsonl":   # every loss, without its wall time
                files[path.name] = [{k: v for k, v in json.loads(line).items()
                                     if k not in ("seconds", "tokens_per_s")}
                                    for line in path.read_text().splitlines()]
            elif path.suffix == ".csv":
                files[path.name] = path.read_text()
            elif path.suffix == ".json" and path.name not in ("config.json", "env.json",
                                                              "status.json"):
                files[path.name] = _numbers(json.loads(path.read_text()))
        out[f"{label} (seed {seed})"] = files
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--root", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = snapshot(args.steps, Path(args.root or tmp))
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{len(result)} runs written to {args.out}")


if __name__ == "__main__":
    main()
