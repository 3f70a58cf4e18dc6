"""What issue 42's recount of training FLOPs changed, said on chapter 10's page.

The last build counted by the old rule (the fused attention's backward pass counted as
zero) is kept as ``results/recount_cpu.json`` (``python -m benchmarks.recount``): its
compute-matched table (means over seeds) and the steps each matched row trained then.
"""
from __future__ import annotations

from ..common.verdicts import short_lead


def recount_paragraph(rc: dict, steps_now: dict, relative_now: float, profile: str,
                      cat: str, as_steps: str, as_layers: str) -> str:
    """Two or three sentences: what the old count missed, the matched steps then and now,
    and the verdict then (``rc``: the artefact; ``steps_now``: ``{row: steps}`` of this
    build; ``relative_now``: the CAT's training FLOPs over ALiBi's in this build)."""
    before = rc["before"]["ce"]
    lengths = sorted(before[cat], key=int)
    then = short_lead([before[as_steps][L] - before[cat][L] for L in lengths],
                      "the CAT", "ALiBi given the CAT's compute as steps")
    return (f"Until this build the count missed the backward pass of the fused attention "
            f"kernel the baselines use. Each compute-matched baseline therefore trained about "
            f"10 % more than the CAT it was matched to: ALiBi as steps "
            f"{rc['steps'][as_steps]['old']} steps at the `cpu` sizes (this build, profile "
            f"{profile}: {steps_now[as_steps]}), the deep ALiBi {rc['steps'][as_layers]['old']} "
            f"({steps_now[as_layers]}). In that build (commit {rc['before']['commit'][:7]}, "
            f"means over its seeds) {then}, and the CAT cost "
            f"{rc['before']['relative'][cat]:.2f} times ALiBi's training FLOPs, not "
            f"{relative_now:.2f}.")
