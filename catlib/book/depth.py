"""The refinement test's tables (chapters 08 and 09): the artefact ``depth_<profile>.json``
and its Markdown table."""
from __future__ import annotations

import numpy as np

from ..common.formatting import fixed, md_table
from ..measure.refinement import accuracy_key
from .page import pm_cells


def depth_table(results: dict) -> dict:
    """The artefact ``results/depth_<profile>.json`` from ``{row: [refinement result per
    seed]}``: ``{row: {"trained_solver": label, "reference": label, "ce_by_solver": {label:
    [CE per seed]}, "drift": [CE(reference) - CE(trained) per seed]}}``."""
    out = {}
    for row, per_seed in results.items():
        trained = {r["trained_solver"] for r in per_seed}
        if len(trained) != 1:
            raise ValueError(f"{row}: its seeds were trained with different solvers {sorted(trained)}")
        labels = list(per_seed[0]["ce_by_solver"])
        out[row] = {"trained_solver": trained.pop(), "reference": per_seed[0]["reference"],
                    "ce_by_solver": {lab: [r["ce_by_solver"][lab] for r in per_seed] for lab in labels},
                    "drift": [r["drift"] for r in per_seed]}
    return out


def depth_markdown(depth: dict, ode_rows=None) -> str:
    """The refinement table of :func:`depth_table` as Markdown: per row the solver it was
    trained with, the mean CE under each solver (columns from the coarsest method to the
    finest, so that the reference comes last), the drift (mean ± sd over seeds) and, with
    ``ode_rows`` (the rows that pass a chapter's rule), a column "ODE?"."""
    solvers = sorted(dict.fromkeys(s for d in depth.values() for s in d["ce_by_solver"]),
                     key=accuracy_key)
    body = [[label, d["trained_solver"],
             *[fixed(np.mean(d["ce_by_solver"][s])) if s in d["ce_by_solver"] else "" for s in solvers],
             pm_cells(np.array(d["drift"])[:, None], sign=True)[0],
             *(["yes" if label in ode_rows else "no"] if ode_rows is not None else [])]
            for label, d in depth.items()]
    header = ["row", "trained with", *solvers, "drift", *(["ODE?"] if ode_rows is not None else [])]
    return md_table(header, body, "ll" + "r" * (len(solvers) + 1) + ("l" if ode_rows is not None else ""))
