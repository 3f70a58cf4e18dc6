"""The probe that chose the book's training recipe (issue 47), as a labelled artefact::

    python -m benchmarks.recipe_probe            # about 15 minutes on one core

At the ``cpu`` profile's sizes, seed 0, the ALiBi baseline and the KERPLE-prior CAT each
trained for the experiment's steps with the published constant rate and with warm-up,
constant rate and a linear decay to zero ("wsd", :func:`catlib.training.loop.learning_rate`)
at several warm-ups, decay shares and rates; the CAT's Sobolev weight on absolute steps
(its horizon: the experiment's steps). Each is scored at 128 and 1024 characters on every
non-overlapping window of the validation split, with the standard error from window
sampling. Writes ``results/recipe_probe_cpu.json`` after each run (a cut probe keeps what
it measured): ``{"runs": [{"recipe", "row", "ce": {"<L>": ce}, "se": {"<L>": se},
"seconds"}], "provenance"}``.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from catlib.book.profiles import experiment
from catlib.common.formatting import md_table
from catlib.data import load_corpus
from catlib.experiment.rows import ROWS, row_configs

from .probes import labelled, record, started, trained_and_scored

ROOT = Path(__file__).resolve().parents[1]
PROBE_ROWS = ("ALiBi baseline", "KERPLE-prior CAT")
LENGTHS = (128, 1024)
# (name, TrainConfig changes): the published rate, then the recipes tried.
RECIPES = (
    ("constant 4e-3", dict()),
    ("wsd 4e-3, warm-up 25, decay 20 %", dict(schedule="wsd", warmup=25, decay_share=0.2)),
    ("wsd 4e-3, warm-up 25, decay 10 %", dict(schedule="wsd", warmup=25, decay_share=0.1)),
    ("wsd 4e-3, warm-up 25, decay 35 %", dict(schedule="wsd", warmup=25, decay_share=0.35)),
    ("wsd 4e-3, warm-up 50, decay 20 %", dict(schedule="wsd", warmup=50, decay_share=0.2)),
    ("wsd 8e-3, warm-up 25, decay 20 %", dict(schedule="wsd", warmup=25, decay_share=0.2, lr=8e-3)),
    ("wsd 2e-3, warm-up 25, decay 20 %", dict(schedule="wsd", warmup=25, decay_share=0.2, lr=2e-3)),
)


def probe(out: Path, root: Path, recipes=RECIPES, rows=PROBE_ROWS, profile: str = "cpu",
          steps: int | None = None) -> dict:
    """Train and score every (recipe, row) (reusing finished runs in ``root``), writing
    ``out`` after each; ``steps`` overrides the experiment's (the test's tiny probe)."""
    e = experiment(profile)
    corpus = load_corpus(split="90/10")
    found = started("python -m benchmarks.recipe_probe", profile)
    for name, change in recipes:
        for label in rows:
            model, train = row_configs(ROWS[label], e, 0)
            # from the published constant rate (row_configs gives the book's recipe since
            # the probe chose it), then each recipe tried
            n = steps or train.train_steps
            train = dataclasses.replace(train, schedule="constant", warmup=0, decay_share=0.0,
                                        penalty_horizon=None, branches=(), train_steps=n)
            train = dataclasses.replace(train, **change, penalty_horizon=n if change else None)
            entry = trained_and_scored(model, train, root, ROWS[label].model, corpus, LENGTHS)
            record(found, {"recipe": name, "row": label, **entry}, out, markdown,
                   f"{name}, {label}")
    return found


def markdown(found: dict) -> str:
    """The probe as a table: per recipe, each row's CE at each length (± its window-sampling
    standard error) and their sum at the shortest length, the criterion (both rows at once)."""
    prov = found["provenance"]
    recipes = list(dict.fromkeys(r["recipe"] for r in found["runs"]))
    by = {(r["recipe"], r["row"]): r for r in found["runs"]}
    L0 = str(LENGTHS[0])
    cells = []
    for name in recipes:
        got = [by.get((name, row)) for row in PROBE_ROWS]
        cells.append([name, *[f"{g['ce'][str(L)]:.3f} ± {g['se'][str(L)]:.3f}" if g else "–"
                              for g in got for L in LENGTHS],
                      f"{sum(g['ce'][L0] for g in got):.3f}" if all(got) else "–"])
    heads = [f"{row}, {L}" for row in PROBE_ROWS for L in LENGTHS]
    table = md_table(["recipe", *heads, f"sum at {L0}"], cells, "l" + "r" * (len(heads) + 1))
    return labelled(prov, table)


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe(ROOT / "results" / "recipe_probe_cpu.json", ROOT / "runs" / "recipe-probe")
    sys.exit(0)
