"""The extrapolation artefacts of ``results/``: per-position CE curves as CSV and the
summary rows as JSON, validated and written atomically."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import torch

from ..measure.extrapolation import SUMMARY_LENGTHS
from ..runs import atomic_write_text


def write_position_csv(path, curves: dict) -> None:
    """CSV ``model,position,ce``: one row per model and position 0..L-1, full precision.

    ``curves``: ``{model_name: ce [L]}`` (tensor, array or list of finite numbers).
    """
    if not curves:
        raise ValueError("curves is empty: nothing to write")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["model", "position", "ce"])
    for name, ce in curves.items():
        ce = np.asarray(torch.as_tensor(ce).double().cpu(), dtype=np.float64)
        if not isinstance(name, str) or not name:
            raise ValueError(f"model names must be non-empty strings, got {name!r}")
        if ce.ndim != 1 or ce.size == 0 or not np.isfinite(ce).all():
            raise ValueError(f"curve {name!r} must be a non-empty 1-D array of finite numbers")
        for p, v in enumerate(ce.tolist()):
            w.writerow([name, p, repr(v)])   # repr round-trips a float64 exactly
    atomic_write_text(path, out.getvalue())


def read_position_csv(path) -> dict[str, np.ndarray]:
    """The curves of :func:`write_position_csv`: ``{model_name: ce [L]}`` float64."""
    rows: dict[str, list] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != ["model", "position", "ce"]:
            raise ValueError(f"{path}: expected columns model,position,ce, got {reader.fieldnames}")
        for r in reader:
            rows.setdefault(r["model"], []).append((int(r["position"]), float(r["ce"])))
    curves = {}
    for name, pairs in rows.items():
        pairs.sort()
        if [p for p, _ in pairs] != list(range(len(pairs))):
            raise ValueError(f"{path}: positions of {name!r} are not 0..L-1")
        curves[name] = np.array([v for _, v in pairs])
    return curves


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_extrapolation_rows(rows) -> None:
    """Raise ``ValueError`` unless ``rows`` is ``{model_name: {"train_length": int >= 1,
    "leak": finite, "ce": {"128", "512", "1024", "5000" (more lengths allowed): finite}}}``,
    each row optionally with ``"ce_seeds"``: ``{length: [finite CE per seed]}`` at the
    lengths of ``ce``."""
    if not isinstance(rows, dict) or not rows:
        raise ValueError("rows must be a non-empty {model_name: row} mapping")
    for name, row in rows.items():
        where = f"row {name!r}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"model names must be non-empty strings, got {name!r}")
        if not isinstance(row, dict):
            raise ValueError(f"{where} must be a mapping, got {type(row).__name__}")
        missing = sorted({"train_length", "leak", "ce"} - set(row))
        if missing:
            raise ValueError(f"{where} lacks {missing} (needs train_length, leak, ce)")
        tl = row["train_length"]
        if not isinstance(tl, int) or isinstance(tl, bool) or tl < 1:
            raise ValueError(f"{where}: train_length must be an integer >= 1, got {tl!r}")
        if not _finite(row["leak"]):
            raise ValueError(f"{where}: leak must be a finite number, got {row['leak']!r}")
        ce = row["ce"]
        if not isinstance(ce, dict):
            raise ValueError(f"{where}: ce must be a {{length: CE}} mapping, got {type(ce).__name__}")
        missing = [L for L in SUMMARY_LENGTHS if L not in ce]
        if missing:
            raise ValueError(f"{where}: ce lacks lengths {missing} (needs {list(SUMMARY_LENGTHS)})")
        for L, v in ce.items():
            if not (isinstance(L, str) and L.isdigit() and int(L) > 0):
                raise ValueError(f"{where}: ce keys must be positive lengths as strings, got {L!r}")
            if not _finite(v):
                raise ValueError(f"{where}: ce[{L!r}] must be a finite number, got {v!r}")
        seeds = row.get("ce_seeds")
        if seeds is not None:
            if not isinstance(seeds, dict) or set(seeds) != set(ce):
                raise ValueError(f"{where}: ce_seeds must give a list of CE per seed at each "
                                 f"length of ce ({sorted(ce)}), got {seeds!r}")
            for L, values in seeds.items():
                if not (isinstance(values, list) and values and all(map(_finite, values))):
                    raise ValueError(f"{where}: ce_seeds[{L!r}] must be a non-empty list of "
                                     f"finite numbers, got {values!r}")


def write_extrapolation_json(path, rows: dict) -> None:
    """Validate the summary ``rows`` (see :func:`validate_extrapolation_rows`) and write
    them as JSON, atomically."""
    validate_extrapolation_rows(rows)
    atomic_write_text(path, json.dumps(rows, indent=2, sort_keys=True) + "\n")


def read_extrapolation_json(path) -> dict:
    """The rows of :func:`write_extrapolation_json`; ``ValueError`` naming the file and
    the problem when it is not valid JSON or not valid rows."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); rewrite it with "
                         f"write_extrapolation_json") from None
    try:
        validate_extrapolation_rows(rows)
    except ValueError as e:
        raise ValueError(f"{path} is not an extrapolation table: {e}") from None
    return rows


# --------------------------------------------------------------- attention probes
