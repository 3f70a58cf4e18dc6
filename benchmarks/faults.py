"""Fault injection for run directories: kill -9 and a full disk, at random and injected moments.

    python -m benchmarks.faults [--kills 200] [--seed 0] [--steps 12] [--out FILE]

Every trial runs the command line, ``python -m catlib train`` on a small model, in a
process forked from a server that imported catlib once (a fresh interpreter per trial
would spend seconds importing torch). It is then

- killed with SIGKILL after a random delay (1 to 3 times, each session resuming the last), or
- killed at an injected point: CATLIB_FAULT="kill:<file>:<n>" tears the n-th write of that
  run file in half and sends SIGKILL to the process (see ``catlib.runs._fault_point``), or
- hit by a full disk at such a point ("enospc:<file>:<n>"): it must exit with status 74
  and one line on stderr, its last checkpoint intact;

and the same command is run again to the end. The run must then equal an uninterrupted
run of the same command: the metrics of every step exactly once, with the same losses;
the same final weights (bitwise); the same table. ``tests/test_faults.py`` runs this
harness with fewer trials; this script is the long version and prints the table
fault | trials | survived | data lost.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IGNORED = ("seconds", "tokens_per_s")  # wall-clock fields of the metrics


def tiny_argv(root: str | os.PathLike, steps: int = 8, name: str = "run") -> list[str]:
    """A small published run (dropout inside the dynamics: every step draws random numbers),
    validating every 3 steps (validation must not disturb the training's randomness)."""
    return ["train", "--d_model", "16", "--n_heads", "2", "--n_freq", "8", "--solver",
            "rk4-classic", "--solver_steps", "1", "--train_steps", str(steps), "--batch", "2",
            "--seq", "16", "--checkpoint-every", "2", "--val-every", "3", "--lengths", "16",
            "32", "--eval_windows", "2", "--no-progress", "--device", "cpu",
            "--run-dir", str(root), "--name", name]


# ---------------------------------------------------------------- the fork server

def serve() -> None:
    """Read requests (JSON lines) on stdin; run each in a forked child; answer on stdout.

    Request: {"argv", "fault" (CATLIB_FAULT or null), "kill" (null, or [seconds]: SIGKILL
    that long after the child starts, or [seconds, file, n]: that long after ``file`` first
    holds n lines), "out", "err" (files for the child's output)}.
    Answer: {"rc" (exit status; -9 when killed), "seconds", "killed"}.
    The server kills only its own children, before reaping them, so a pid is never reused.
    """
    import threading

    import torch
    import torch._dynamo  # noqa: F401  (the first optimiser imports it: 2-3 s in every child)
    torch.set_num_threads(1)  # no OpenMP worker threads: forking is safe
    from catlib.cli.commands import main
    assert threading.active_count() == 1, "fork needs a single-threaded server"
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: one command line, then exit without cleanup handlers
            rc = 99
            try:
                for fd, name in ((1, req["out"]), (2, req["err"])):
                    os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), fd)
                if req.get("fault"):
                    os.environ["CATLIB_FAULT"] = req["fault"]
                else:
                    os.environ.pop("CATLIB_FAULT", None)
                rc = main(req["argv"])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        kill = req.get("kill")
        when = t0 + kill[0] if kill and len(kill) == 1 else None
        killed = False
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                break
            now = time.monotonic()
            if kill and when is None and _lines(kill[1]) >= kill[2]:
                when = now + kill[0]
            if when is not None and not killed and now >= when:
                os.kill(pid, signal.SIGKILL)  # not yet reaped: the pid is still our child's
                killed = True
            time.sleep(0.0005 if kill and not killed else 0.005)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "killed": killed,
                          "seconds": time.monotonic() - t0}), flush=True)


def _lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


class Server:
    """Client of :func:`serve`, started as ``python -m benchmarks.faults --serve``."""

    def __init__(self, data: str | None = None):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        env.pop("CATLIB_FAULT", None)
        if data:
            env["CATLIB_DATA"] = str(data)
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.faults", "--serve"],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.logs = Path(tempfile.mkdtemp(prefix="catlib-faults-"))
        self.count = 0

    def run(self, argv, fault: str | None = None, kill: list | None = None) -> dict:
        self.count += 1
        out, err = self.logs / f"{self.count}.out", self.logs / f"{self.count}.err"
        self.proc.stdin.write(json.dumps({"argv": argv, "fault": fault, "kill": kill,
                                          "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fault server died (exit status {self.proc.poll()})")
        answer = json.loads(line)
        answer["out"] = out.read_text() if out.exists() else ""
        answer["err"] = err.read_text() if err.exists() else ""
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- comparing runs

def run_state(run_dir: Path) -> dict:
    """What a run directory holds, for the comparison with an uninterrupted run."""
    import torch
    state = {"status": None, "metrics": None, "weights": {}, "eval": None, "temporaries": []}
    if not run_dir.is_dir():
        return state
    state["temporaries"] = sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".tmp"))
    if (run_dir / "status.json").exists():
        state["status"] = json.loads((run_dir / "status.json").read_text())["status"]
    if (run_dir / "metrics.jsonl").exists():
        state["metrics"] = [{k: v for k, v in json.loads(line).items() if k not in IGNORED}
                            for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                            if line.strip()]
    for f in ("cat.pt", "baseline.pt"):
        if (run_dir / f).exists():
            state["weights"][f] = torch.load(run_dir / f, weights_only=True)["state_dict"]
    if (run_dir / "eval.json").exists():
        ev = json.loads((run_dir / "eval.json").read_text())
        state["eval"] = {k: ev.get(k) for k in ("rows", "leak", "step", "weights")}
    return state


def differences(got: dict, want: dict) -> list[str]:
    """How a resumed run differs from the uninterrupted one (empty: identical)."""
    import torch
    diffs = []
    if got["status"] != "finished":
        diffs.append(f"status {got['status']}")
    steps = [m["step"] for m in got["metrics"] or [] if m["kind"] == "train"]
    if steps != sorted(set(steps)) or len(steps) != len([m for m in want["metrics"]
                                                         if m["kind"] == "train"]):
        diffs.append(f"metrics steps {steps}")   # a step lost or logged twice: data lost
    elif got["metrics"] != want["metrics"]:
        diffs.append("metrics values differ")
    for f, sd in want["weights"].items():
        g = got["weights"].get(f)
        if g is None or g.keys() != sd.keys() or not all(torch.equal(g[k], sd[k]) for k in sd):
            diffs.append(f"{f} differs")
    if got["eval"] != want["eval"]:
        diffs.append("eval.json differs")
    if got["temporaries"]:
        diffs.append(f"temporaries left: {got['temporaries']}")
    return diffs


def lost(diffs: list[str]) -> bool:
    """Data lost: a step's metrics missing or doubled, or a final file missing."""
    return any(d.startswith(("metrics steps", "status")) or "differs" in d and "values" not in d
               for d in diffs)


# ---------------------------------------------------------------- trials

def phase(run_dir: Path) -> str:
    """Where a killed run stood: its status and the step of its checkpoint."""
    try:
        st = json.loads((run_dir / "status.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        st = "no status"
    n = 0
    if (run_dir / "metrics.jsonl").exists():
        n = sum(1 for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                if '"kind": "train"' in line)
    return f"{st}, {n} steps logged"


def trial(server: Server, root: Path, reference: dict, steps: int, fault: str | None = None,
          kills: tuple = ()) -> dict:
    """One trial: the faulty session(s), then the same command to the end; the verdict.

    ``kills``: one entry per session killed, each (seconds,) after its start, or
    (seconds, n) after the n-th line of the metrics log (inside step n or its checkpoint).
    """
    run_dir = root / "run"
    argv = tiny_argv(root, steps)
    sessions, notes, killed = [], [], 0
    for k in kills:
        spec = [k[0]] if len(k) == 1 else [k[0], str(run_dir / "metrics.jsonl"), k[1]]
        r = server.run(argv, kill=spec)
        sessions.append(r["rc"])
        if not r["killed"]:
            notes.append("finished before the kill")
            break
        killed += 1
        notes.append(phase(run_dir))
    if fault:
        r = server.run(argv, fault=fault)
        sessions.append(r["rc"])
        if fault.startswith("enospc"):
            one_line = len(r["err"].strip().splitlines()) == 1 and "Traceback" not in r["err"]
            if r["rc"] not in (0, 74) or (r["rc"] == 74 and not one_line):
                notes.append(f"disk full: exit {r['rc']}, stderr {r['err'][-300:]!r}")
        elif r["rc"] not in (-9, 0):
            notes.append(f"injected kill: exit {r['rc']}: {r['err'][-300:]!r}")
        notes.append(phase(run_dir))
    final = server.run(argv)
    diffs = differences(run_state(run_dir), reference)
    if final["rc"] != 0:
        diffs.insert(0, f"the rerun exited {final['rc']}: {final['err'][-300:]!r}")
    bad_notes = [n for n in notes if n.startswith(("disk full", "injected kill"))]
    return {"fault": fault or f"kill -9 x{killed}", "kills": list(kills[:killed]),
            "sessions": sessions,
            "notes": notes, "diffs": diffs + bad_notes,
            "survived": not diffs and not bad_notes, "lost": lost(diffs)}


def fault_points(steps: int, every: int = 2, action: str = "kill") -> list[str]:
    """Every injected point of a run of ``steps`` steps checkpointed every ``every``:
    each write of each run file (first session: config, env, status x3, the step-0
    checkpoint and one per ``every`` steps, each metrics line, the final weights, the table)."""
    n_ckpt = 1 + steps // every + (steps % every != 0)
    n_metrics = steps + steps // 3
    files = {"config.json": 1, "env.json": 1, "status.json": 3, "checkpoint.pt": n_ckpt,
             "metrics.jsonl": n_metrics, "cat.pt": 1, "baseline.pt": 1, "eval.json": 1,
             "eval.csv": 1}
    return [f"{action}:{f}:{i}" for f, n in files.items() for i in range(1, n + 1)]


def campaign(data: str | None, work: Path, kills: int = 20, points: list[str] | None = None,
             steps: int = 8, seed: int = 0, max_kills_per_trial: int = 3,
             echo=print) -> dict:
    """Run the trials: at least ``kills`` random kill moments, then one trial per injected
    point. Returns the summary and every trial.

    A trial kills 1 to ``max_kills_per_trial`` sessions in a row, each resuming the last.
    The first kill of every other trial lands inside a random step (a random fraction of a
    step's time after the log's n-th line, n uniform), the others at a delay uniform over
    an uninterrupted run's duration (start-up, training, evaluation, final writes).
    """
    rng = random.Random(seed)
    trials = []
    with Server(data) as server:
        ref = server.run(tiny_argv(work / "reference", steps))
        if ref["rc"] != 0:
            raise RuntimeError(f"the uninterrupted run failed: {ref['err'][-500:]}")
        reference = run_state(work / "reference" / "run")
        duration = ref["seconds"]
        lines = len(reference["metrics"])
        raw = (work / "reference" / "run" / "metrics.jsonl").read_text().splitlines()
        step_s = 2 * max(json.loads(x).get("seconds", 0.0) for x in raw)  # a step, a checkpoint
        moments = 0
        while moments < kills:
            k = min(kills - moments, rng.randint(1, max_kills_per_trial))
            delays = [(rng.uniform(0.0, duration),) for _ in range(k)]
            if len(trials) % 2 == 0:
                delays[0] = (rng.uniform(0.0, step_s), rng.randrange(lines))
            trials.append(trial(server, work / f"t{len(trials)}", reference, steps,
                                kills=tuple(delays)))
            moments += len(trials[-1]["kills"])
            echo(_line(trials[-1]))
        for fault in points or []:
            trials.append(trial(server, work / f"t{len(trials)}", reference, steps, fault=fault))
            echo(_line(trials[-1]))
    return {"duration_s": duration, "trials": trials, "table": summary(trials)}


def _line(t: dict) -> str:
    verdict = "ok" if t["survived"] else "FAILED: " + "; ".join(t["diffs"])
    return f"{t['fault']:28s} {', '.join(t['notes'])[:90]:90s} {verdict}"


def summary(trials: list[dict]) -> list[dict]:
    """fault | trials | moments | survived | data lost, by kind of fault."""
    kinds: dict[str, dict] = {}
    for t in trials:
        kind = ("kill -9 at a random moment" if t["fault"].startswith("kill -9")
                else "kill -9 inside a write of " + t["fault"].split(":")[1]
                if t["fault"].startswith("kill:")
                else "disk full in a write of " + t["fault"].split(":")[1])
        k = kinds.setdefault(kind, {"fault": kind, "trials": 0, "moments": 0, "survived": 0,
                                    "data lost": 0})
        k["trials"] += 1
        k["moments"] += len(t["kills"]) if t["fault"].startswith("kill -9") else 1
        k["survived"] += t["survived"]
        k["data lost"] += t["lost"]
    return list(kinds.values())


def format_summary(rows: list[dict]) -> str:
    lines = ["| fault | trials | moments | survived | data lost |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['fault']} | {r['trials']} | {r['moments']} | {r['survived']} | "
              f"{r['data lost']} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kills", type=int, default=200, help="random kill moments (default: 200)")
    p.add_argument("--steps", type=int, default=12, help="training steps per run (default: 12)")
    p.add_argument("--seed", type=int, default=0, help="seed of the moments (default: 0)")
    p.add_argument("--no-points", action="store_true", help="skip the injected points")
    p.add_argument("--data", default=os.environ.get("CATLIB_DATA"), help="path of tiny.txt")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults.json"))
    args = p.parse_args(argv)
    if args.serve:
        serve()
        return 0
    points = [] if args.no_points else (fault_points(args.steps)
                                        + fault_points(args.steps, action="enospc"))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="catlib-faults-") as work:
        result = campaign(args.data, Path(work), args.kills, points, args.steps, args.seed)
    result["wall_s"] = time.perf_counter() - start
    print(format_summary(result["table"]))
    print(f"{len(result['trials'])} trials in {result['wall_s']:.0f} s "
          f"(an uninterrupted run takes {result['duration_s']:.2f} s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0 if all(t["survived"] for t in result["trials"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
