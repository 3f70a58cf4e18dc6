"""The device check (benchmarks/gpu_check.py) at smoke sizes on the CPU: it passes, covers every
row of the experiment and every kernel and baseline option of the config, and fails when a
comparison is broken. On a GPU the same command runs with --device cuda."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from catlib.nn import config
from catlib.book import PROFILES
from catlib.experiment.grid import ROWS

ROOT = Path(__file__).resolve().parents[1]


def _check(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--smoke",
           "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    start = time.monotonic()
    result = _check(out)
    print(f"gpu_check --smoke: {time.monotonic() - start:.1f} s")
    report = out / "gpu_check_cpu.json"
    assert report.is_file(), result.stdout + result.stderr
    return result, json.loads(report.read_text()), out


@pytest.mark.slow("runs the GPU check's smoke version on the CPU (a subprocess)")
def test_smoke_check_passes(smoke):
    result, report, out = smoke
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["exit"] == {"code": 0, "message": None}
    assert {k: s["status"] for k, s in report["stages"].items()} == {
        "a": "ok", "b": "ok", "c": "ok", "d": "partial"}
    assert report["code_fingerprint"] and report["environment"]["versions"]["torch"]
    assert "Device check on cpu" in (out / "gpu_check_cpu.md").read_text()


def test_every_row_has_a_throughput(smoke):
    rows = {r["row"]: r for r in smoke[1]["stages"]["b"]["rows"]}
    assert set(rows) == set(ROWS)
    for label, row in rows.items():
        assert row["tokens_per_s"] > 0 and row["profile"] == "smoke", label


def test_every_kernel_and_baseline_within_tolerance(smoke):
    stage = smoke[1]["stages"]["a"]
    models = stage["models"]
    assert stage["uncovered"] == {} and stage["failures"] == []
    cats = {m["config"]["kernel"] for m in models.values() if m["kind"] == "cat"}
    bases = {m["config"]["baseline_positions"] for m in models.values() if m["kind"] == "base"}
    assert cats == set(config.KERNELS) and bases == set(config.BASELINE_POSITIONS)
    eps = torch.finfo(torch.float32).eps
    for name, m in models.items():
        assert m["tolerance"] == pytest.approx(128 * eps * max(1.0, m["magnitude"])), name
        assert 0 <= m["max_error"] < m["tolerance"], name
        assert m["moved_equal"] is True and m["back_equal"] is True and m["grads_finite"], name


def test_book_stages_write_elsewhere_and_leave_nothing_running(smoke):
    _, report, out = smoke
    c, d = report["stages"]["c"], report["stages"]["d"]
    first = next(iter(PROFILES["smoke"]))
    assert list(c["notebooks"]) == [first] and c["notebooks"][first]["status"] == "ok"
    assert Path(c["work"]).is_relative_to(out) and (out / c["artefact"]).stat().st_size > 0
    # (d) gets a few seconds at --smoke: its first notebook is stopped, the rest never start
    runs = list(d["runs"].values())
    assert runs[0]["status"] == "timeout" and runs[0]["left_running"] == []
    assert {r["status"] for r in runs[1:]} == {"not started"}


def test_a_broken_comparison_fails_with_a_clear_message(tmp_path):
    # Two tolerances added to one device logit of every model: the check must fail, exit 1,
    # and name a model and its error in one line.
    result = _check(tmp_path, "--stages", "a", "--perturb", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    first = next(iter(report["stages"]["a"]["models"]))
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(f"gpu_check: correctness FAILED on cpu: {first}: max |logits cpu")
    assert "> tolerance" in message and "more)" in message
    assert report["exit"]["code"] == 1 and report["stages"]["a"]["status"] == "failed"
    assert all(not m["ok"] for m in report["stages"]["a"]["models"].values())
