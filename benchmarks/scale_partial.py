"""The scale study's finished runs only, as results/scale_<device>.json's rows (a study cut
short: nothing trains; each row with the seeds whose run finished)."""
import json
import sys
import time

from catlib.book.profiles import experiment
from catlib.data import load_corpus
from catlib.experiment import scale
from catlib.experiment.grid import _train_job


def main(device: str, out: str) -> None:
    """Write the finished runs of the study on ``device`` (its runs under
    runs/scale-cpu-<device>) to ``out``."""
    e, plan = experiment("cpu"), scale.plan_for(device)
    specs, _, steps = scale.job_specs(e, plan, f"runs/scale-cpu-{device}")
    done = {k: s for k, s in specs.items() if _train_job(dict(s, device=device), stored=True)}
    runs = scale.open_runs(done, e, device)
    corpus, (lengths, caps) = load_corpus(split="90/10"), scale.scoring(e)
    rows = {}
    for label in scale.SCALE_ROWS:
        seeds = tuple(s for (lab, s) in done if lab == label)
        if seeds:
            sub = {b: seeds for b in plan}
            rows.update(scale.scale_table({k: r for k, r in runs.items() if k[0] == label}, steps,
                                          sub, corpus, lengths, caps, device))
    json.dump({"plan": {str(b): list(s) for b, s in plan.items()}, "rows": rows, "partial": True,
               "finished_runs": [list(k) for k in done], "date": time.strftime("%Y-%m-%d %H:%M:%S %z")},
              open(out, "w"), indent=1, sort_keys=True)
    print(f"{len(done)} of {len(specs)} runs finished:", sorted(done))


if __name__ == "__main__":     # python -m benchmarks.scale_partial cuda results/scale_cuda.json
    main(sys.argv[1], sys.argv[2])
