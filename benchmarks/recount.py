"""The equal-compute table before issue 42's recount, as a labelled artefact for chapter 10.

Reads the compute-matched table of the last build counted by the old rule (the fused
attention's backward counted as zero) from git history, ``results/headline_cpu.md`` at
commit a3a72ca (built from f447b5c), and the steps each compute-matched row trained then
and now, counted here by both rules; writes ``results/recount_cpu.json``:
``{"before": {"commit", "relative": {row: x}, "ce": {row: {"<L>": mean}}}, "steps":
{row: {"old": n, "new": n}}, "step_flops": {kind: {"old": f, "new": f}}}``.

    python -m benchmarks.recount
"""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from catlib.book.profiles import experiment
from catlib.experiment import compute
from catlib.experiment import grid as ex
from catlib.nn.baselines import explicit_encoder

BEFORE = "a3a72ca"          # the results commit of the last build counted by the old rule
ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _old_rule():
    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
               lambda q, k, v, *a, out_shape=None, **kw: sdpa_flop_count(q, k, v)}
    with explicit_encoder(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        yield counter


def _before_table() -> dict:
    text = subprocess.run(["git", "show", f"{BEFORE}:results/headline_cpu.md"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    commit = re.search(r"commit (\w+)", text).group(1)
    block = text.split("At equal training compute", 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("|").split("|") for line in block.splitlines()[2:]]
    lengths = [h.split()[-1] for h in block.splitlines()[0].strip("|").split("|")[2:]]
    return {"commit": commit,
            "relative": {r[0].strip(): float(r[1]) for r in rows},
            "ce": {r[0].strip(): {L: float(c.split("±")[0]) for L, c in zip(lengths, r[2:])}
                   for r in rows}}


def main() -> None:
    torch.set_num_threads(1)
    e = experiment("cpu")
    steps, flops = {}, {}
    for label in (ex.AS_STEPS, ex.AS_LAYERS, ex.MATCHED, "ALiBi baseline"):
        m, t = ex.row_configs(ex.ROWS[label], e, 0)
        key = ex.ROWS[label].model
        new = compute.step_flops(m, key, t.batch, t.seq)[0]
        old = compute.count_training_step(m.resolved(), key, t.batch, t.seq, rule=_old_rule)[0]
        flops[label] = {"old": old, "new": int(new), "blocks": m.blocks}
        steps[label] = {"new": t.train_steps}
    cat = flops[ex.MATCHED]["old"] * e.train.train_steps
    steps[ex.AS_STEPS]["old"] = round(cat / flops["ALiBi baseline"]["old"])
    steps[ex.AS_LAYERS]["old"] = round(cat / flops[ex.AS_LAYERS]["old"])
    out = {"before": _before_table(), "steps": steps, "step_flops": flops,
           "written_by": "python -m benchmarks.recount"}
    path = ROOT / "results" / "recount_cpu.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
