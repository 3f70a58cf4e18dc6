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
import json
import sys
import time
from pathlib import Path

import torch

from catlib.book.profiles import experiment
from catlib.common.provenance import code_fingerprint, environment
from catlib.data import load_corpus
from catlib.experiment.rows import ROWS, row_configs
from catlib.measure.evaluate import cross_entropy
from catlib.runs import atomic_write_text, train_run

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
    found = {"runs": [], "provenance": {**environment(("torch",), torch.device("cpu")),
                                        "profile": profile, "code": code_fingerprint(),
                                        "written_by": "python -m benchmarks.recipe_probe"}}
    for name, change in recipes:
        for label in rows:
            model, train = row_configs(ROWS[label], e, 0)
            train = dataclasses.replace(train, **change, train_steps=steps or train.train_steps,
                                        penalty_horizon=(steps or train.train_steps)
                                        if change else None)
            start = time.perf_counter()
            run = train_run(model, train, root=root, device="cpu", evaluate=False,
                            progress=False, echo=None)
            net = run.load_weights("cpu")[0][ROWS[label].model]
            scores = {L: cross_entropy(net, corpus.val, L, eval_windows=10**9, device="cpu")
                      for L in LENGTHS}
            found["runs"].append({"recipe": name, "row": label, "steps": train.train_steps,
                                  "ce": {str(L): s["ce"] for L, s in scores.items()},
                                  "se": {str(L): s["se"] for L, s in scores.items()},
                                  "windows": {str(L): s["windows"] for L, s in scores.items()},
                                  "seconds": time.perf_counter() - start})
            found["provenance"]["date"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
            atomic_write_text(out, json.dumps(found, indent=1) + "\n")
            print(f"{name:36s} {label:18s} " + " ".join(
                f"{L}: {s['ce']:.4f} ± {s['se']:.4f}" for L, s in scores.items()), flush=True)
    return found


if __name__ == "__main__":
    torch.set_num_threads(1)
    probe(ROOT / "results" / "recipe_probe_cpu.json", ROOT / "runs" / "recipe-probe")
    sys.exit(0)
