"""The probe that chose the compute-matched baselines' block (issue 47), as a labelled
artefact::

    python -m benchmarks.block_probe          # about 15 minutes on one core

The ALiBi baseline given the KERPLE-prior CAT's compute as steps (chapter 10's row, on the
book's recipe) in the prototype's post-norm ReLU layer and in today's pre-LN GELU block
(``CATConfig.baseline_block``), at 1x (three seeds) and 4x (the first seed) of that
compute, scored at 128 and 1024 characters on every window of the validation split.
Writes ``results/block_probe_cpu.json`` after each run and ``results/block_probe_cpu.md``
(the table the reproducibility page includes).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from catlib.book.profiles import experiment
from catlib.common.formatting import md_table
from catlib.data import load_corpus
from catlib.experiment.rows import AS_STEPS, ROWS, row_configs

from .probes import labelled, record, started, trained_and_scored

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = ("post-ln-relu", "pre-ln-gelu")
LENGTHS = (128, 1024)
PLAN = {1: (0, 1, 2), 4: (0,)}


def probe(out: Path, root: Path, plan=PLAN, profile: str = "cpu", steps: int | None = None) -> dict:
    """Train and score every (budget, seed, block), writing ``out`` (.json and .md) after
    each; ``steps`` overrides the experiment's (a tiny probe for the test)."""
    e = experiment(profile)
    if steps:
        e = dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps))
    corpus = load_corpus(split="90/10")
    found = started("python -m benchmarks.block_probe", profile)
    for budget, seeds in plan.items():
        for seed in seeds:
            for block in BLOCKS:
                model, train = row_configs(ROWS[AS_STEPS], e, seed)
                model = dataclasses.replace(model, baseline_block=block)
                train = dataclasses.replace(train, train_steps=budget * train.train_steps,
                                            branches=())
                entry = trained_and_scored(model, train, root, "base", corpus, LENGTHS)
                record(found, {"budget": budget, "seed": seed, "block": block, **entry}, out,
                       markdown, f"{budget}x, seed {seed}, {block}")
    return found


def markdown(found: dict) -> str:
    """The probe as a table: per budget and length, each block's CE (mean over its seeds),
    pre-LN minus post-LN per seed, and the window-sampling standard error."""
    prov = found["provenance"]
    cells = []
    for budget in sorted({r["budget"] for r in found["runs"]}):
        for L in map(str, LENGTHS):
            by = {b: {r["seed"]: r for r in found["runs"] if r["budget"] == budget and r["block"] == b}
                  for b in BLOCKS}
            seeds = sorted(set(by[BLOCKS[0]]) & set(by[BLOCKS[1]]))
            if not seeds:
                continue
            diff = [by[BLOCKS[1]][s]["ce"][L] - by[BLOCKS[0]][s]["ce"][L] for s in seeds]
            se = max(by[b][s]["se"][L] for b in BLOCKS for s in seeds)
            cells.append([f"{budget}×", L, ", ".join(map(str, seeds)),
                          *[f"{np.mean([by[b][s]['ce'][L] for s in seeds]):.3f}" for b in BLOCKS],
                          ", ".join(f"{d:+.3f}" for d in diff), f"{se:.3f}"])
    table = md_table(["budget", "length", "seeds", "post-LN ReLU", "pre-LN GELU",
                      "pre − post, per seed", "window s.e. (at most)"], cells, "llrrrrr")
    return labelled(prov, table)


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe(ROOT / "results" / "block_probe_cpu.json", ROOT / "runs" / "block-probe")
    sys.exit(0)
