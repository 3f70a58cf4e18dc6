"""Fault injection: kill -9, a full disk, a NaN loss, damaged run directories,
two processes on one run, crafted checkpoints. benchmarks/faults.py is the long version
of the kill -9 and disk-full campaign (more trials); this file runs it small."""
import errno
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catlib import runs
from catlib.cli.commands import main
from catlib.runs import RunError, load_checkpoint, open_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import faults  # noqa: E402

TINY = ["--d_model", "16", "--n_heads", "2", "--n_freq", "8", "--solver", "rk4-classic",
        "--solver_steps", "1", "--train_steps", "4", "--batch", "2", "--seq", "16",
        "--checkpoint-every", "2", "--lengths", "16", "--eval_windows", "2", "--no-progress",
        "--device", "cpu"]
IGNORED = ("seconds", "tokens_per_s")


def _train(root, *extra, name="run"):
    return main(["train", *TINY, "--run-dir", str(root), "--name", name, *extra])


def _state(run_dir: Path) -> dict:
    """Metrics (without timings) and final weights of a run, for exact comparisons."""
    metrics = [{k: v for k, v in m.items() if k not in IGNORED} for m in open_run(run_dir).metrics()]
    weights = {f: torch.load(run_dir / f, weights_only=True)["state_dict"]
               for f in ("cat.pt", "baseline.pt")}
    return {"metrics": metrics, "weights": weights}


def _same(a: dict, b: dict) -> bool:
    return a["metrics"] == b["metrics"] and all(
        torch.equal(a["weights"][f][k], b["weights"][f][k]) for f in b["weights"] for k in b["weights"][f])


def _snapshot(run_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != "lock"}


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(autouse=True)
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    monkeypatch.delenv("CATLIB_FAULT", raising=False)
    runs._FAULT_COUNTS.clear()


@pytest.fixture(scope="module")
def module_env(tiny_path):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        mp.delenv("CATLIB_FAULT", raising=False)
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory, module_env):
    """An uninterrupted run of the TINY command, in this process."""
    root = tmp_path_factory.mktemp("reference")
    assert _train(root) == 0
    return _state(root / "run")


@pytest.fixture(scope="module")
def made(tmp_path_factory, module_env):
    """A finished run, a run stopped by --budget after 1 step, and a finished run of another
    seed, to be copied and damaged."""
    root = tmp_path_factory.mktemp("made")
    assert _train(root, name="finished") == 0
    assert _train(root, "--budget", "0.000001", name="stopped") == 0
    assert _train(root, "--seed", "1", name="other") == 0
    assert open_run(root / "stopped").status["status"] == "stopped"
    return root


# ---------------------------------------------------------------- 2. kill -9

@pytest.mark.slow("kills and resumes a training subprocess 20+ times")
def test_kill_9_at_random_and_injected_moments(tiny_path, tmp_path):
    """At least 20 random moments (seeded; half inside a random step, half over the whole
    session), then kills inside a write of each run file and a full disk in a checkpoint
    and a metrics write: every run, resumed by the same command, equals the uninterrupted
    one: the metrics of each step once with the same losses, bitwise equal weights, the
    same table. Would catch: non-atomic writes (a torn checkpoint), a metrics log not cut
    back to the checkpoint (steps twice) or not tolerant of a torn line, a resume that
    reseeds instead of restoring the RNGs, a stale lock that blocks the rerun, a torn
    run start that leaves an unusable directory."""
    rng = random.Random(0)
    by_file: dict[str, list[str]] = {}
    for point in faults.fault_points(8):
        by_file.setdefault(point.split(":")[1], []).append(point)
    points = [rng.choice(p) for p in by_file.values()]                 # one kill per file
    points += [rng.choice(by_file[f]).replace("kill:", "enospc:")
               for f in ("checkpoint.pt", "metrics.jsonl")]
    result = faults.campaign(str(tiny_path), tmp_path, kills=20, points=points, steps=8, seed=0,
                             echo=lambda s: None)
    failed = [f"{t['fault']}: {t['diffs']}" for t in result["trials"] if not t["survived"]]
    assert not failed, failed
    moments = sum(len(t["kills"]) for t in result["trials"] if t["fault"].startswith("kill -9"))
    assert moments >= 20
    print(faults.format_summary(result["table"]))


def test_kill_9_of_the_command_line(tmp_path, reference):
    """The real `python -m catlib train` in its own interpreter, killed with SIGKILL in the
    middle of a checkpoint write; the same command resumes it. Would catch a CLI path that
    differs from the library's (the campaign above forks a server)."""
    argv = [sys.executable, "-m", "catlib", "train", *TINY, "--run-dir", str(tmp_path), "--name", "run"]
    env = {**os.environ, "CATLIB_FAULT": "kill:checkpoint.pt:2"}
    # timeouts for a hang only: a tiny run takes seconds
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == -9
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["trainer"]["step"] == 0
    env.pop("CATLIB_FAULT")
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert _same(_state(tmp_path / "run"), reference)  # same threads as this process: bitwise
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------- 3. disk full

@pytest.mark.parametrize("point,kept_step", [("checkpoint.pt:3", 2), ("metrics.jsonl:2", 0)])
def test_disk_full(point, kept_step, tmp_path, monkeypatch, capsys, reference):
    """ENOSPC in the 3rd checkpoint write (after step 4) or in the 2nd metrics line: one line,
    exit 74, the previous checkpoint intact, nothing half-written left, and the same command
    finishes the run exactly once there is space. Would catch: a traceback; a checkpoint
    written in place (torn); a metrics log that keeps a torn line; a run that cannot resume."""
    monkeypatch.setenv("CATLIB_FAULT", f"enospc:{point}")
    assert _train(tmp_path) == 74
    line = _one_line(capsys.readouterr().err)
    assert "No space left on device" in line and point.split(":")[0] in line and "resume" in line
    run_dir = tmp_path / "run"
    assert load_checkpoint(run_dir / "checkpoint.pt")["trainer"]["step"] == kept_step
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert open_run(run_dir).status["status"] == "interrupted"
    monkeypatch.delenv("CATLIB_FAULT")
    assert _train(tmp_path) == 0
    assert _same(_state(run_dir), reference)   # resumed in this process: the same kernels, bitwise


def test_disk_full_in_a_plain_write(tmp_path, monkeypatch):
    """The write itself fails (not the injection hook): StorageError naming the file, the
    previous file intact. Would catch an OSError that escapes as a traceback."""
    path = tmp_path / "status.json"
    runs.atomic_write_text(path, "old")
    monkeypatch.setattr(runs.files.os, "fdopen", lambda fd, mode: _Full(fd))
    with pytest.raises(runs.StorageError, match=r"cannot write .*status.json \(No space left"):
        runs.atomic_write_text(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["status.json"]


class _Full:
    """A file whose writes fail with ENOSPC."""

    def __init__(self, fd):
        self.fd = fd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# ---------------------------------------------------------------- 4. NaN / inf loss

def test_absurd_learning_rate_fails_cleanly(tmp_path, capsys):
    """--lr 1e6: the run stops at the first non-finite loss, status failed, the message names
    the step and the loss, the last good checkpoint is kept, exit 1; `eval` of the failed run
    shows no NaN. Would catch a run that trains on NaN to the end, or a table with "nan"."""
    assert _train(tmp_path, "--lr", "1e6") == 1
    line = _one_line(capsys.readouterr().err)
    assert "loss is nan at step 1" in line and "last good checkpoint (after 0 steps)" in line
    run = open_run(tmp_path / "run")
    assert run.status["status"] == "failed"
    assert load_checkpoint(run.path / "checkpoint.pt")["trainer"]["step"] == 0
    assert not (run.path / "eval.json").exists()
    assert main(["eval", str(run.path), "--lengths", "16", "--eval_windows", "2", "--device", "cpu"]) == 0
    assert "nan" not in capsys.readouterr().out.lower()


def test_nan_never_reaches_a_table(made, tmp_path, capsys):
    """Weights that give NaN logits: eval.json, eval.csv and the printed table say
    "non-finite" and hold no NaN. Would catch a table that prints "nan" or JSON with NaN."""
    run_dir = tmp_path / "run"
    shutil.copytree(made / "finished", run_dir)
    ck = torch.load(run_dir / "cat.pt", weights_only=True)
    ck["state_dict"]["proj.bias"][0] = float("nan")
    runs.atomic_save(ck, run_dir / "cat.pt")
    assert main(["eval", str(run_dir), "--lengths", "16", "--eval_windows", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "non-finite" in out and "nan" not in out.lower()
    ev = json.loads((run_dir / "eval.json").read_text())
    assert ev["rows"][0]["cat_ce"] is None and ev["rows"][0]["nonfinite"] == ["cat"]
    assert ev["rows"][0]["base_ce"] is not None
    for f in ("eval.json", "eval.csv"):
        assert "nan" not in (run_dir / f).read_text().lower()


# ---------------------------------------------------------------- 5. damaged run directories

def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _foreign_checkpoint(made):
    def damage(p: Path):
        p.write_bytes((made / "other" / "checkpoint.pt").read_bytes())
    return damage


def _middle_line(p: Path):
    lines = p.read_text().splitlines(keepends=True)
    p.write_text(lines[0] + '{"kind": "tr\n' + "".join(lines[1:]))


DAMAGE = [  # run, file, damage, commands, words of the message
    ("stopped", "checkpoint.pt", _truncate, ("train",), "cannot load checkpoint"),
    ("stopped", "checkpoint.pt", "foreign", ("train",), "written for another config"),
    ("stopped", "checkpoint.pt", None, ("train",), "is missing"),
    ("stopped", "metrics.jsonl", _middle_line, ("train",), "line 2 is damaged"),
    ("stopped", "metrics.jsonl", None, ("train",), "does not hold the metrics"),
    ("finished", "cat.pt", _truncate, ("train", "eval"), "cannot load checkpoint"),
    ("finished", "baseline.pt", None, ("train", "eval"), "is missing"),
    ("finished", "config.json", lambda p: p.write_text('{"hash": '), ("train", "eval"), "cannot read"),
    ("finished", "status.json", lambda p: p.write_text("[1, 2"), ("train", "eval"), "cannot read"),
    ("finished", "status.json", None, ("train",), "is missing"),
    ("finished", "eval.json", lambda p: p.write_text("{"), ("train", "eval"), "cannot read"),
]


@pytest.mark.parametrize("source,file,damage,commands,words", DAMAGE,
                         ids=[f"{d[0]}-{d[1]}-{getattr(d[2], '__name__', d[2])}" for d in DAMAGE])
def test_damaged_run_directory(source, file, damage, commands, words, made, tmp_path, capsys):
    """One line naming the file and a fix, exit 2, every byte of the directory unchanged.
    Would catch: a raw traceback, a damaged file silently replaced (e.g. eval.json
    re-evaluated over, a run with a missing checkpoint or status trained afresh over its
    metrics), a fallback to other weights than the finished ones."""
    run_dir = tmp_path / "run"
    shutil.copytree(made / source, run_dir)
    target = run_dir / file
    if damage is None:
        target.unlink()
    else:
        (_foreign_checkpoint(made) if damage == "foreign" else damage)(target)
    before = _snapshot(run_dir)
    for command in commands:
        argv = ["train", *TINY, "--run-dir", str(tmp_path), "--name", "run"] if command == "train" \
            else ["eval", str(run_dir), "--lengths", "16", "--eval_windows", "2", "--device", "cpu"]
        assert main(argv) == 2, command
        line = _one_line(capsys.readouterr().err)
        assert file in line and words in line and ("--retrain" in line or "restore" in line
                                                   or "delete" in line), line
        assert _snapshot(run_dir) == before


# ---------------------------------------------------------------- 6. two processes

def test_second_process_refused_and_stale_lock_taken_over(made, tmp_path, capsys):
    """A process holds the run: train and eval refuse, naming its pid and host; killed with
    SIGKILL, its lock is taken over. Would catch: no lock (two writers), a lock file that
    outlives its holder and blocks the run forever, a message without the holder."""
    run_dir = tmp_path / "run"
    shutil.copytree(made / "finished", run_dir)
    # The holder keeps the lock until it is killed (or its stdin closes), however long the
    # refusals below take.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from catlib.runs import run_lock\nwith run_lock(Path(sys.argv[1])):\n"
         "    print('held', flush=True); sys.stdin.read()", str(run_dir)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _snapshot(run_dir)
        for argv in (["train", *TINY, "--run-dir", str(tmp_path), "--name", "run"],
                     ["eval", str(run_dir), "--lengths", "16", "--eval_windows", "2", "--device", "cpu"]):
            assert main(argv) == 2
            line = _one_line(capsys.readouterr().err)
            assert f"in use by pid {holder.pid} on {os.uname().nodename}" in line
        assert _snapshot(run_dir) == before
    finally:
        holder.kill()  # SIGKILL: the lock file still names it
        holder.wait()
    assert str(holder.pid) in (run_dir / "lock").read_text()
    assert _train(tmp_path) == 0
    out = capsys.readouterr()
    assert f"taking over the lock of {run_dir} left by pid {holder.pid}" in out.out + out.err
    assert (run_dir / "lock").read_text() == ""  # released


# ---------------------------------------------------------------- 8. untrusted checkpoints

class _Payload:
    """Unpickling this runs a shell command (the attack weights_only=True must stop)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("file", ["cat.pt", "checkpoint.pt"])
def test_crafted_checkpoint_is_refused(file, made, tmp_path, capsys):
    """A checkpoint whose unpickling would run `touch marker`: refused with one line, the
    marker never created. Would catch torch.load(weights_only=False) anywhere on the path."""
    run_dir = tmp_path / "run"
    shutil.copytree(made / "finished", run_dir)
    marker = tmp_path / "marker"
    torch.save({"config_hash": open_run(run_dir).hash, "state_dict": _Payload(marker),
                "trainer": _Payload(marker)}, run_dir / file)
    with pytest.raises(RunError, match="refused, it asks for posix.system"):
        load_checkpoint(run_dir / file)
    if file == "checkpoint.pt":
        (run_dir / "status.json").write_text(json.dumps({"status": "interrupted", "step": 2}))
        argv = ["train", *TINY, "--run-dir", str(tmp_path), "--name", "run"]
    else:
        argv = ["eval", str(run_dir), "--lengths", "16", "--eval_windows", "2", "--device", "cpu"]
    assert main(argv) == 2
    assert "weights_only=True" in _one_line(capsys.readouterr().err)
    assert not marker.exists()
