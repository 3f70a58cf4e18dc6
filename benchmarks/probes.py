"""What the design probes (benchmarks/recipe_probe.py, block_probe.py) share: a run trained
(or reused) and scored on every window of the validation split, and the artefact written
after each run, so that a cut probe keeps what it measured."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from catlib.common.provenance import code_fingerprint, environment
from catlib.experiment.scale import ALL_WINDOWS
from catlib.measure.evaluate import cross_entropy
from catlib.runs import atomic_write_text, train_run



def started(written_by: str, profile: str) -> dict:
    """An empty probe artefact with its provenance: ``{"runs": [], "provenance"}``."""
    return {"runs": [], "provenance": {**environment(("torch",), torch.device("cpu")),
                                       "profile": profile, "code": code_fingerprint(),
                                       "written_by": written_by}}


def trained_and_scored(model, train, root, model_key: str, corpus, lengths) -> dict:
    """Train (or reuse) the run of ``model`` and ``train`` in ``root`` on the CPU and score
    ``model_key`` at ``lengths`` on every validation window: ``{"steps", "ce", "se",
    "windows", "seconds"}``, keyed by length as text."""
    start = time.perf_counter()
    run = train_run(model, train, root=root, device="cpu", evaluate=False, progress=False,
                    echo=None)
    net = run.load_weights("cpu")[0][model_key]
    scores = {str(L): cross_entropy(net, corpus.val, L, eval_windows=ALL_WINDOWS, device="cpu")
              for L in lengths}
    return {"steps": train.train_steps, **{k: {L: s[k] for L, s in scores.items()}
                                           for k in ("ce", "se", "windows")},
            "seconds": time.perf_counter() - start}


def record(found: dict, entry: dict, out: Path, markdown: Callable[[dict], str], label: str) -> None:
    """Add ``entry`` to ``found``, write ``out`` (JSON) and its table (``.md``) atomically,
    and print one line."""
    found["runs"].append(entry)
    found["provenance"]["date"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    atomic_write_text(out, json.dumps(found, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), markdown(found))
    print(f"{label:50s} " + " ".join(f"{L}: {entry['ce'][L]:.4f} ± {entry['se'][L]:.4f}"
                                     for L in entry["ce"]), flush=True)


def labelled(prov: dict, table: str) -> str:
    """A probe's Markdown table under the line that says what wrote it, at which commit
    (with its note, where the tree was not that commit's) and when."""
    commit = ((prov.get("git") or {}).get("commit") or "unknown")[:12]
    note = f" ({prov['note']})" if prov.get("note") else ""
    return f"_Written by `{prov['written_by']}` at commit {commit}{note}, {prov.get('date', '')}._\n\n{table}\n"
