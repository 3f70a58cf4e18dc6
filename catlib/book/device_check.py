"""The reproducibility page's section "On a GPU": what ``benchmarks/gpu_check.py`` measured.

It reads the device checks committed as ``results/gpu_check_<device>.json`` (one file per
device type, as the check writes them) and says, for each: what was checked and with what
result, the training step times, how long the books' training would take on that device,
which notebooks of the ``paper`` profile ran there and which did not; and, for each device
type with no check in ``results/``, that it was not measured. Every number comes from the
files; :func:`write` puts the text where the page includes it.
"""
from __future__ import annotations

import json
from pathlib import Path

# The device types a check can run on, as the page names them.
DEVICE_NAMES = {"cuda": "CUDA", "mps": "MPS (Apple GPUs)"}
# What each stage of the check does, for the stages a run left out.
STAGE_WORK = {"a": "correctness", "b": "throughput", "c": "the `cpu` profile's book on the device",
              "d": "the `paper` profile's book on the device"}
# The rows whose step times the page shows (the check times every row of the book).
# What a notebook's status in the check means, in words.
STATUS_WORDS = {"timeout": "stopped when the check's time ran out",
                "not started": "not started: the check's time had run out"}
KEY_ROWS = ("ALiBi baseline", "RoPE baseline", "causal CAT", "KERPLE-prior CAT",
            "KERPLE-prior CAT, ODE-consistent", "ALiBi baseline, CAT's compute as steps")


def load(root: Path) -> dict[str, dict]:
    """``{device type: report}`` of every ``results/gpu_check_<type>.json`` under ``root``."""
    found = {}
    for kind in DEVICE_NAMES:
        path = root / "results" / f"gpu_check_{kind}.json"
        if path.exists():
            found[kind] = json.loads(path.read_text())
    return found


def markdown(checks: dict[str, dict]) -> str:
    """The section's text for the reports of :func:`load` (Markdown, no heading)."""
    parts = [_one(kind, data) for kind, data in checks.items()]
    missing = [DEVICE_NAMES[k] for k in DEVICE_NAMES if k not in checks]
    if missing:
        parts.append(f"Not measured: {' and '.join(missing)}; no device check of this project "
                     f"has run there, so nothing on this page is known to hold on "
                     f"{'them' if len(missing) > 1 else 'it'}.")
    return "\n\n".join(parts) + "\n"


def write(root: Path) -> Path:
    """Write :func:`markdown` of the committed checks to ``book/_generated/device_check.md``."""
    path = root / "book" / "_generated" / "device_check.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(load(root)))
    return path


def _one(kind: str, d: dict) -> str:
    dev, stages = d["device"], d["stages"]
    commit = d["environment"]["git"]["commit"] or "unknown"
    out = [f"**{DEVICE_NAMES[kind]}.** Measured by `{d['written_by']}` on one {dev['name']} "
           f"({dev['memory_gib']:.0f} GiB; torch {dev['torch']}, CUDA {dev['cuda']}, driver "
           f"{dev.get('driver', 'n/a')}), commit `{commit}`, {d['written'][:10]}; the report is "
           f"`results/gpu_check_{kind}.md` (data in `.json`)."]
    if "a" in stages:
        out.append(_correctness(stages["a"]))
    if "b" in stages:
        out += _throughput(stages["b"])
    if "d" in stages:
        out += _paper_book(stages["d"])
    left_out = [f"({k}) {STAGE_WORK[k]}" for k in STAGE_WORK if k not in stages]
    if left_out:
        out.append(f"Not run in this check: {', '.join(left_out)}.")
    return "\n\n".join(out)


def _correctness(a: dict) -> str:
    models = a["models"].values()
    ratios = [m["error_over_eps"] for m in models]
    ok = sum(m["ok"] for m in models)
    return (f"*Correctness.* Each of {len(ratios)} models (every CAT kernel and baseline), in "
            f"float32 on the device, against the same weights in float64 on the CPU: "
            f"{ok} of {len(ratios)} within the tolerance `{a['tolerance']}`; the largest error "
            f"was {min(ratios):.1f}-{max(ratios):.1f} eps times the logits' magnitude. Caches "
            f"moved to the device and back matched: "
            f"{'yes' if all(m['back_equal'] is not False for m in models) else 'no'}; "
            f"gradients finite: {'yes' if all(m['grads_finite'] for m in models) else 'no'}.")


def _throughput(b: dict) -> list[str]:
    rows = {(r["row"], r["profile"]): r for r in b["rows"]}
    sizes = {p: next(f"{r['batch']} × {r['seq']}" for r in b["rows"] if r["profile"] == p)
             for p in ("cpu", "paper")}
    table = [f"| row | ms / step, `cpu` sizes ({sizes['cpu']}) | ms / step, `paper` sizes "
             f"({sizes['paper']}) |", "|---|---:|---:|"]
    for name in KEY_ROWS:
        if (name, "cpu") in rows and (name, "paper") in rows:
            table.append(f"| {name} | {1e3 * rows[name, 'cpu']['seconds_per_step']:.1f} | "
                         f"{1e3 * rows[name, 'paper']['seconds_per_step']:.1f} |")
    peak = max(r["peak_memory_mib"] for r in b["rows"]) / 1024
    times = [1e3 * r["seconds_per_step"] for r in b["rows"]]
    projected = b["projected_training_s"]
    return [f"*Step times.* One training step of each of the book's "
            f"{len({name for name, _ in rows})} rows at both sizes, timed after warm-up: {min(times):.1f}-{max(times):.1f} ms, peak memory at "
            f"most {peak:.1f} GiB. Some of them:",
            "\n".join(table),
            f"*The books on this device.* At these step times the training runs of the `cpu` "
            f"profile's book, one after another, would take about "
            f"{projected['cpu'] / 60:.0f} minutes and those of the `paper` profile about "
            f"{projected['paper'] / 60:.0f} (evaluation not included)."]


def _paper_book(d: dict) -> list[str]:
    ran = {n: r for n, r in d["notebooks"].items() if r["status"].startswith("ok")}
    not_run = [f"`{n}` ({STATUS_WORDS.get(r['status'], r['status'])})" for n, r in d["runs"].items() if r["status"] != "ok"]
    table = ["| notebook | seconds |", "|---|---:|"]
    table += [f"| {n if n.startswith('training') else f'`{n}`'} | {r['seconds']:.1f} |"
              for n, r in ran.items()]
    out = [f"*What ran.* The `{d['profile']}` profile's notebooks through papermill on the "
           f"device, within the check's time budget:", "\n".join(table)]
    if not_run:
        out.append(f"Not run: {', '.join(not_run)}; the chapters these notebooks hold have no "
                   f"`{d['profile']}`-profile result on the device.")
    return out
