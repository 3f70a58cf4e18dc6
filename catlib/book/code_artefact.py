"""Where chapter 12 finds the scale study on source code, and how far it has gone.

The study (``make scale CORPUS=code``, never ``make book``) writes
``results/scale_code_<device>.json`` once every run has finished, and
``scale_code_<device>.partial.json`` after each run while it is in progress
(:func:`~catlib.book.args.artefact_name`, :func:`~catlib.book.args.partial_path`). The
chapter reads the complete artefact where there is one, else the partial one, and says
which, with how many of the planned runs (one per row and seed) have finished
(:func:`status_text`); where there is neither, it names the commands that make it.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..experiment.scale_plan import row_plan, study_rows
from .args import artefact_name, partial_path
from .scale_readings import STUDY_DEVICES, split_oracle

CORPUS = "code"
# The commands that make the study, in order (the chapter names them where it has none).
COMMANDS = ("make sweep CORPUS=code", "make scale CORPUS=code")


def artefact_paths(root, device: str) -> tuple[Path, Path]:
    """``(complete, partial)``: where the code study of ``device`` is written under ``root``."""
    path = Path(root) / "results" / artefact_name("scale", "cpu", device, CORPUS)
    return path, partial_path(path)


def load_code_study(root) -> dict:
    """``{"study", "device", "path", "partial"}``: the complete artefact of the first device
    of :data:`~catlib.book.scale_readings.STUDY_DEVICES` that has one, else the first
    partial one (``partial`` True), with its oracle apart
    (:func:`~catlib.book.scale_readings.split_oracle`); ``study`` None where there is
    neither."""
    for which in (0, 1):
        for device in STUDY_DEVICES:
            path = artefact_paths(root, device)[which]
            if path.is_file():
                study = split_oracle(json.loads(path.read_text()))
                return {"study": study, "device": device, "path": path,
                        "partial": bool(which or study.get("partial"))}
    return {"study": None, "device": None, "path": None, "partial": False}


def planned_runs(study: dict) -> int:
    """The runs the study plans: one per row and seed (every row of its identity, or of
    :func:`~catlib.experiment.scale_plan.study_rows`, on the seeds of its plan and its own)."""
    plan = {int(b): tuple(s) for b, s in study["plan"].items()}
    extra = {r: {int(b): tuple(s) for b, s in own.items()}
             for r, own in (study.get("extra_seeds") or {}).items()}
    rows = (study.get("identity") or {}).get("rows") or study_rows(CORPUS)
    return sum(len({s for seeds in row_plan(plan, extra, r).values() for s in seeds}) for r in rows)


def finished_runs(study: dict) -> int:
    """The runs whose records the artefact holds."""
    if "finished_runs" in study:
        return len(study["finished_runs"])
    return sum(len(runs) for runs in (study.get("per_seed") or {}).values())


def status_text(found: dict) -> str:
    """Which artefact the chapter reads, in a sentence or three: the complete study, a study
    in progress (its finished runs against those planned), or none (the commands that make
    it)."""
    study = found["study"]
    if study is None:
        return (f"No study on source code is in `results/` in this build. `{COMMANDS[0]}` "
                "chooses each row's learning rate on the code corpus's dev files; "
                f"`{COMMANDS[1]}` then trains the study and writes "
                f"`results/{artefact_name('scale', 'cpu', 'cpu', CORPUS)}`. Until then this "
                "chapter shows the corpus and the goal, with nothing measured against them.")
    where = f"`results/{found['path'].name}`"
    done, planned = finished_runs(study), planned_runs(study)
    if found["partial"]:
        return (f"This is a study in progress: {where} holds {done} of its {planned} runs. "
                "Everything below reads those runs only, and a verdict may change as the rest "
                f"are trained (`{COMMANDS[1]}` resumes it).")
    return f"This chapter reads {where}, the complete study: all {planned} of its runs have finished."
