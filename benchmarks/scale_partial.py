"""The scale study's finished runs only, as results/scale_<device>.json's rows (a study cut
short: nothing trains; each row at each budget with the seeds whose run finished and
reached that budget), labelled with its provenance (the commit, from
:func:`catlib.common.provenance.git_state`, the device, versions and code fingerprint)
as ``python -m catlib.book.scale`` labels a whole study.

    python -m benchmarks.scale_partial cuda results/scale_cuda.json
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from catlib.book.profiles import experiment
from catlib.common.devices import resolve_device
from catlib.common.provenance import code_fingerprint, environment
from catlib.data import load_corpus
from catlib.experiment import scale, scale_plan
from catlib.experiment.grid import _train_job
from catlib.runs import atomic_write_text

PROFILE = "cpu"     # the study's sizes and batches (``python -m catlib.book.scale``'s default)


def partial_study(e, plan: dict, root, device) -> dict:
    """The artefact of the finished runs under ``root`` of the study of ``e`` and ``plan``
    (nothing trains): ``{"plan", "rows": scale_table(...) of :func:`~catlib.experiment.scale.reached`'s seeds,
    "partial": True, "finished_runs": [[row, seed], ...], "runs": how many the plan has}``."""
    specs, _, steps = scale.job_specs(e, plan, root, extra=scale_plan.extra_seeds_for(device))
    done = {k: s for k, s in specs.items() if _train_job(dict(s, device=device), stored=True)}
    runs = scale.open_runs(done, e, device)
    corpus, (lengths, caps) = load_corpus(split="90/10"), scale.scoring(e)
    rows = {}
    for label, seeds in scale.reached(done, steps, plan).items():
        rows.update(scale.scale_table({k: r for k, r in runs.items() if k[0] == label}, steps,
                                      seeds, corpus, lengths, caps, device))
    return {"plan": {str(b): list(s) for b, s in sorted(plan.items())}, "rows": rows,
            "partial": True, "finished_runs": [list(k) for k in done], "runs": len(specs)}


def write(study: dict, out, device, written_by: str) -> None:
    """``study`` with its provenance (as :mod:`catlib.book.scale` writes a whole study's:
    :func:`~catlib.common.provenance.environment`, whose ``git`` is the commit, the
    profile, the date, the command, the code fingerprint) written atomically to ``out``:
    a failed write leaves its previous version intact."""
    date = time.strftime("%Y-%m-%d %H:%M:%S %z")
    labelled = {**study, "date": date, "provenance": {
        **environment(("torch", "numpy"), device), "profile": PROFILE, "date": date,
        "written_by": written_by, "code": code_fingerprint()}}
    text = json.dumps(labelled, indent=1, sort_keys=True) + "\n"     # serialised first
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)


def main(device: str, out: str) -> None:
    """Write the finished runs of the study on ``device`` (its runs under
    runs/scale-cpu-<device type>, as ``python -m catlib.book.scale`` trains them) to ``out``."""
    dev = resolve_device(device)
    plan = scale_plan.plan_for(dev)
    study = partial_study(experiment(PROFILE), plan, Path("runs") / f"scale-{PROFILE}-{dev.type}",
                          str(dev))
    write(study, out, dev, f"python -m benchmarks.scale_partial {device} {out}")
    print(f"{len(study['finished_runs'])} of {study['runs']} runs finished:",
          sorted(map(tuple, study["finished_runs"])))


if __name__ == "__main__":     # python -m benchmarks.scale_partial cuda results/scale_cuda.json
    main(sys.argv[1], sys.argv[2])
