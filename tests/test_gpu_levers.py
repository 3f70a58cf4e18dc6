"""The device benchmark of the training step's levers (benchmarks/gpu_levers.py) on the CPU at
smoke sizes: it runs end to end and writes every item, keeps what it measured when cut,
skips what the budget does not hold, and refuses bad options in one line. Where a GPU
exists, its float64 training is compared with the CPU's (skipped elsewhere, with the
reason: a CPU run compared with itself tests nothing)."""
import json

import pytest
import torch

from benchmarks import gpu_levers as gl

ROWS = ["KERPLE-prior CAT", "ALiBi baseline"]     # a CAT row (with a plan) and a baseline row
TINY = ["--device", "cpu", "--profile", "smoke", "--rows", *ROWS, "--steps", "2", "--warmup", "1"]


def _report(out):
    return json.loads((out / "gpu_levers_cpu.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_levers")
    code = gl.main([*TINY, "--out", str(out), "--processes", "1", "2", "--pool-steps", "3",
                    "--equality-steps", "20"])
    return code, _report(out)


@pytest.mark.slow("spawns 1 then 2 training processes (item 2)")
def test_runs_end_to_end_with_every_item(run):
    code, report = run
    assert code == 0 and report["exit"] == 0
    items = report["items"]
    assert list(items) == list(gl.ITEMS)
    assert {k: i["status"] for k, i in items.items()} == {
        "step_ms": "measured", "processes": "measured", "kernels_per_step": "measured",
        "float64_equality": "measured", "mps": "n/a on cpu"}
    levers = items["step_ms"]["levers"]
    assert levers["pinned_inputs"] == "n/a on cpu"
    assert levers["cuda_graphs"].startswith("not implemented")
    assert levers["grouped_seeds"].startswith("not implemented")
    for label in ROWS:
        ms = items["step_ms"]["rows"][label]["ms"]
        assert ms["as_is"] > 0 and ms["basis_cache_off"] > 0 and ms["pinned_inputs_off"] == "n/a on cpu"
        counted = items["kernels_per_step"]["rows"][label]
        assert counted["as_is"]["aten_ops"] >= counted["as_is"]["aten_top_level"] > 0
    # the basis cache removes ops from the CAT's step, none from the baseline's
    cat, base = (items["kernels_per_step"]["rows"][r] for r in ROWS)
    assert cat["basis_cache_off"]["aten_ops"] > cat["as_is"]["aten_ops"]
    assert base["basis_cache_off"]["aten_ops"] == base["as_is"]["aten_ops"]
    assert items["kernels_per_step"]["unit"].startswith("aten ops per training step (CPU")
    counts = items["processes"]["counts"]
    assert list(counts) == ["1", "2"]
    for c in counts.values():
        assert c["status"] == "measured" and c["steps_per_s"] > 0
        assert c["per_process_steps_per_s"]["min"] > 0
    assert report["options"]["processes"] == [1, 2] and report["written_by"].endswith("20")


def check_float64_equality(out, monkeypatch, device: str) -> None:
    """The float64 item run with ``--device device``: its tested run trained on CUDA and its
    reference on the CPU, every parameter float64, the losses within the stated tolerance."""
    ran_on, real = [], gl.trainer

    def recording(*args, **kwargs):
        t = real(*args, **kwargs)
        ran_on.append(torch.device(t.device).type)
        return t
    monkeypatch.setattr(gl, "trainer", recording)
    code = gl.main(["--device", device, "--profile", "smoke", "--rows", ROWS[0], "--items",
                    "float64_equality", "--equality-steps", "20", "--out", str(out)])
    eq = json.loads((out / f"gpu_levers_{device}.json").read_text())["items"]["float64_equality"]
    assert ran_on == ["cuda", "cpu"], ran_on
    assert eq["compared"] == "cuda float64 vs cpu float64" and eq["all_parameters_float64"]
    assert len(eq["losses"]) == len(eq["reference_losses"]) == 20
    diffs = [abs(x - y) for x, y in zip(eq["losses"], eq["reference_losses"])]
    assert eq["max_abs_diff"] == max(diffs) <= eq["tolerance"] == pytest.approx(
        gl.GROWTH * gl.EPS64 * max(1.0, max(abs(x) for x in eq["reference_losses"])))
    assert eq["ok"] is True and code == 0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: the float64 check compares CUDA's training with the "
                           "CPU's (a CPU run against itself would test nothing)")
@pytest.mark.slow("trains the CAT row for 20 float64 steps on CUDA and on the CPU")
def test_float64_equality_cuda_against_cpu(tmp_path, monkeypatch):
    check_float64_equality(tmp_path, monkeypatch, "cuda")


def test_a_cut_run_keeps_the_items_it_measured(tmp_path, monkeypatch):
    def cut(b, item):                # the time limit arrives during the second item
        raise KeyboardInterrupt
    monkeypatch.setattr(gl, "ITEMS", {"step_ms": gl.ITEMS["step_ms"], "processes": (cut, lambda b: 0.0)})
    with pytest.raises(KeyboardInterrupt):
        gl.main([*TINY[:5], ROWS[0], "--steps", "1", "--warmup", "0", "--out", str(tmp_path)])
    items = _report(tmp_path)["items"]
    assert items["step_ms"]["status"] == "measured"
    assert items["step_ms"]["rows"][ROWS[0]]["ms"]["as_is"] > 0
    assert items["processes"] == {"status": "running"}


def test_items_past_the_budget_are_skipped(tmp_path):
    assert gl.main([*TINY, "--out", str(tmp_path), "--budget", "0.001"]) == 0
    items = _report(tmp_path)["items"]
    assert list(items) == list(gl.ITEMS)
    for name, item in items.items():
        assert item["status"] == "skipped" and "left of the budget" in item["reason"], name


@pytest.mark.parametrize("bad, says", [
    (["--device", "foo"], "argument --device: invalid choice: 'foo'"),
    (["--budget", "-5"], "--budget must be a positive number of seconds, got -5"),
    (["--processes", "0"], "every --processes count >= 1"),
    (["--rows", "no such row"], "unknown row 'no such row'"),
])
def test_bad_options_exit_2_with_one_line(bad, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gl.main(["--device", "cpu", "--out", str(tmp_path), *bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu_levers: error: ") and says in err
    assert not (tmp_path / "gpu_levers_cpu.json").exists()
