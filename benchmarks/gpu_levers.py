"""Issue 48, part 4: the levers of a training step on one device, measured in one command.

    python -m benchmarks.gpu_levers [--device cuda|cpu] [--profile cpu|smoke] [--out DIR]
        [--budget SECONDS] [--items step_ms processes kernels_per_step float64_equality mps]
        [--rows LABEL ...] [--steps N] [--warmup N] [--threads N]
        [--processes 1 3 7 15] [--pool-row LABEL] [--pool-steps N]
        [--equality-row LABEL] [--equality-steps N]

The rows are the scale study's (``catlib.experiment.scale_plan.SCALE_ROWS``), each at its 1x
configuration of the ``--profile`` sizes (``scale_configs(label, experiment(profile), 0, [1])``:
the study's model, batch, sequence and recipe), trained by ``SideBySide.train_step`` on
random tokens (the time of a step does not depend on the text). Five items, in this order:

1. ``step_ms``: ms per training step (median of ``--steps`` timed steps after ``--warmup``
   steps; on CUDA ``torch.cuda.synchronize()`` before and after each) of every row "as is"
   and with each lever in the code switched off, one at a time: the basis cache
   (``catlib.nn.plan.basis_cache(False)``) and the pinned, non-blocking input copies
   (``DeviceInputs(device, staged=False)``: plain ``.to(device)``; n/a on the CPU). The
   settings alternate step by step on trainers of the same seed, so that load reaches all
   alike. Levers not in the code (CUDA graphs, grouped seeds) are listed "not implemented".
2. ``processes``: 1, 3, 7, 15 (``--processes``) spawned processes, one thread each (as the
   study's pool runs them), each training ``--pool-row`` for ``--pool-steps`` steps after
   the warm-up, all starting together (a barrier): steps/s in all (all steps / (last end -
   first start)) and per process.
3. ``kernels_per_step``: from ``torch.profiler``, per step of every row (as is, and basis
   cache off): on CUDA the device kernel events (memcpy/memset counted apart) and the
   kernel launches; on the CPU, which has no device kernels, the ``aten::`` ops (all, and
   the top-level ones), labelled as such.
4. ``float64_equality``: the losses of ``--equality-row`` over ``--equality-steps`` steps,
   its model(s) in float64 (``.double()`` after ``SideBySide`` builds them on the CPU's
   seed: the same initial weights everywhere), on the device against the same on the CPU;
   max abs difference against ``GROWTH * eps(float64) * max(1, max |loss|)``. On the CPU:
   CPU against CPU, the same kernels, so 0.
5. ``mps``: whether the CUDA MPS control daemon starts (``nvidia-cuda-mps-control -d``, in
   a private pipe directory so that no other process attaches to it), stopped again at
   once (``quit``); nothing depends on it. n/a on the CPU.

``<out>/gpu_levers_<device>.json`` is rewritten (``catlib.runs.atomic_write_text``) at the
start, after each row or process count and after each item, so a run cut by a time limit
keeps what it measured: an item cut midway reads "running". Each item's status:
"measured", "partial" (parts skipped for the budget), "skipped" (its estimated time would
pass ``--budget``), "n/a on cpu", "error" (the message recorded, the next item runs).

Exit status: 2 for a bad option (one line) or an item's error, 1 when the float64
equality fails its tolerance, else 0.
"""
from __future__ import annotations

import argparse, dataclasses, json, os, shlex, shutil, statistics  # noqa: E401
import queue, subprocess, sys, tempfile, time, traceback  # noqa: E401
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catlib.nn.config import CATConfig  # noqa: E402
from catlib.nn.plan import basis_cache  # noqa: E402
from catlib.runs import atomic_write_text  # noqa: E402
from catlib.training.loop import SideBySide, TrainConfig  # noqa: E402
from catlib.training.transfer import DeviceInputs  # noqa: E402

KERPLE = "KERPLE-prior CAT"      # the study's 1x reference row
NOT_IMPLEMENTED = {"cuda_graphs": "not implemented (no CUDA-graph capture of the step in catlib)",
                   "grouped_seeds": "not implemented (no training of several seeds in one step)"}
EPS64 = torch.finfo(torch.float64).eps
# Float64 on two devices differs by summation order: about eps per reduction, compounded
# over the steps (the Adam updates feed each difference forward). 2**20 eps (2.3e-10
# relative) holds that growth over 20 steps and stays far below what one float32 kernel
# on the way would leave (1e-7 relative).
GROWTH = 2**20
KERNEL_STEPS = 3                 # profiled steps per row and setting
PROFILER_FACTOR = 4.0            # a profiled step's cost over a plain one (for the estimate)
BARRIER_S = 180.0                # the longest a worker waits for the others to be ready
# Seconds per step assumed before a row is measured, and to start a worker (torch, CUDA).
PRIOR_STEP_S = {("cuda", "cpu"): 0.03, ("cuda", "smoke"): 0.02, ("cpu", "cpu"): 0.6,
                ("cpu", "smoke"): 0.05}
STARTUP_S = {"cuda": 20.0, "cpu": 6.0}
MPS_S = 30.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_CONFIGS: dict = {}


def configs(label: str, profile: str) -> tuple[CATConfig, TrainConfig]:
    """The model and training configuration of ``label``'s 1x run of the scale study at
    ``profile``'s sizes, seed 0 (cached: counting a row's FLOPs takes a second or two)."""
    if (label, profile) not in _CONFIGS:
        from catlib.book.profiles import experiment
        from catlib.experiment.scale import scale_configs
        _CONFIGS[label, profile] = scale_configs(label, experiment(profile), 0, [1])[:2]
    return _CONFIGS[label, profile]


def trainer(model: CATConfig, tc: TrainConfig, device, steps: int, staged=None) -> SideBySide:
    """A trainer of ``model`` on random tokens, long enough for ``steps`` steps (a longer
    run only stretches the recipe: the cost of a step is the same). ``staged=False``:
    inputs moved with plain ``.to(device)``, not through pinned buffers."""
    tc = dataclasses.replace(tc, train_steps=max(tc.train_steps, steps))
    ids = torch.randint(0, model.vocab_size, (max(20_000, 4 * tc.batch * tc.seq),),
                        generator=torch.Generator().manual_seed(0))
    t = SideBySide(model, tc, ids, device)
    if staged is not None:
        t._inputs = DeviceInputs(t.device, staged=staged)   # what train_step makes at step 1
    return t


def timed_step(t: SideBySide, cache: bool = True) -> float:
    """Seconds of one training step, the device synchronised before and after."""
    _sync(t.device)
    start = time.perf_counter()
    with basis_cache(cache):
        t.train_step()
    _sync(t.device)
    return time.perf_counter() - start


class Bench:
    """The options, the device, the JSON being written and the budget left."""

    def __init__(self, args, argv: list[str]):
        from benchmarks.gpu_check import device_info
        from catlib.common.provenance import environment
        self.args, self.device = args, torch.device(args.device)
        self.out = Path(args.out) / f"gpu_levers_{self.device.type}.json"
        self.deadline = time.monotonic() + args.budget
        self.step_s: dict[str, float] = {}          # measured "as is" seconds per step
        opts = {k: v for k, v in vars(args).items() if k != "out"}
        self.data = {"benchmark": "gpu_levers", "started": _now(),
                     "written_by": "python -m benchmarks.gpu_levers " + shlex.join(argv),
                     "device": device_info(self.device),
                     "environment": environment(("torch", "numpy"), self.device, root=ROOT),
                     "options": opts, "items": {name: {"status": "pending"} for name in ITEMS}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def fits(self, seconds: float) -> bool:
        return seconds <= self.left()

    def skipped(self, seconds: float) -> dict:
        return {"status": "skipped", "reason": f"estimated {seconds:.0f} s > {max(self.left(), 0):.0f} "
                f"s left of the budget of {self.args.budget:g} s"}

    def step(self, label: str) -> float:
        """Seconds per step of ``label`` as is: measured (item 1) or the prior."""
        return self.step_s.get(label, PRIOR_STEP_S.get((self.device.type, self.args.profile), 0.6))

    def save(self) -> None:
        self.data["written"] = _now()
        atomic_write_text(self.out, json.dumps(self.data, indent=1, default=str) + "\n")


# --- 1. ms per step, each lever on and off ---------------------------------------------------

def settings(device: torch.device) -> dict:
    """Setting name -> (basis cache on, inputs staged); None where it does not apply."""
    cuda = device.type == "cuda"
    return {"as_is": (True, None), "basis_cache_off": (False, None),
            "pinned_inputs_off": (True, False) if cuda else None}


def step_ms_estimate(b: Bench) -> float:
    n = sum(s is not None for s in settings(b.device).values())
    return sum(n * (b.args.warmup + b.args.steps) * b.step(r) + 1 for r in b.args.rows)


def step_ms(b: Bench, item: dict) -> str:
    """ms per step of every row as is and with each lever off, alternating step by step."""
    a, cuda = b.args, b.device.type == "cuda"
    on = settings(b.device)
    item.update(unit=f"ms per training step, median of {a.steps} after {a.warmup} warm-up steps"
                + (", torch.cuda.synchronize() around each" if cuda else ""),
                levers={"basis_cache": "on as is; off: catlib.nn.plan.basis_cache(False)",
                        "pinned_inputs": ("on as is (CUDA); off: DeviceInputs(device, staged=False),"
                                          " plain .to(device)") if cuda else "n/a on cpu",
                        **NOT_IMPLEMENTED}, rows={})
    for label in a.rows:
        est = sum(s is not None for s in on.values()) * (a.warmup + a.steps) * b.step(label) + 1
        if not b.fits(est):
            item["rows"][label] = b.skipped(est)
            continue
        model, tc = configs(label, a.profile)
        live = {name: s for name, s in on.items() if s is not None}
        trainers = {name: trainer(model, tc, b.device, a.warmup + a.steps, staged)
                    for name, (_, staged) in live.items()}
        times = {name: [] for name in live}
        for i in range(a.warmup + a.steps):
            for name, (cache, _) in live.items():
                s = timed_step(trainers[name], cache)
                if i >= a.warmup:
                    times[name].append(s)
        ms = {name: 1e3 * statistics.median(times[name]) if name in live else "n/a on cpu"
              for name in on}
        b.step_s[label] = ms["as_is"] / 1e3
        item["rows"][label] = {
            "model": tc.models[0], "blocks": model.blocks, "batch": tc.batch, "seq": tc.seq,
            "ms": ms, "over_as_is": {n: ms[n] / ms["as_is"] for n in live if n != "as_is"},
            "tokens_per_s_as_is": tc.batch * tc.seq / b.step_s[label]}
        b.save()
    return "partial" if any("status" in r for r in item["rows"].values()) else "measured"


# --- 2. several processes training at once ---------------------------------------------------

def _worker(model: dict, train: dict, device: str, steps: int, warmup: int, threads: int,
            barrier, queue) -> None:
    """One process: train ``steps`` steps after ``warmup`` ones, starting with the others."""
    try:
        torch.set_num_threads(threads)
        t = trainer(CATConfig.from_dict(model), TrainConfig(**train), device, warmup + steps)
        for _ in range(warmup):
            t.train_step()
        _sync(t.device)
        barrier.wait(timeout=BARRIER_S)
        start = time.monotonic()          # CLOCK_MONOTONIC: one clock for all processes
        for _ in range(steps):
            t.train_step()
        _sync(t.device)
        queue.put({"start": start, "end": time.monotonic(), "steps": steps})
    except BaseException as e:  # noqa: BLE001 - reported to the parent, the others released
        barrier.abort()
        queue.put({"error": f"{type(e).__name__}: {e}"})


def processes_estimate(b: Bench) -> float:
    a = b.args
    return sum(STARTUP_S[b.device.type] + n * (a.warmup + a.pool_steps) * b.step(a.pool_row)
               for n in a.processes)


def run_processes(b: Bench, n: int) -> dict:
    """``n`` spawned workers training ``--pool-row`` at once: steps/s in all and per process."""
    import multiprocessing
    a = b.args
    model, tc = configs(a.pool_row, a.profile)
    ctx = multiprocessing.get_context("spawn")
    barrier, q = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_worker, daemon=True, args=(
        model.to_dict(), tc.to_dict(), str(b.device), a.pool_steps, a.warmup, a.threads,
        barrier, q)) for _ in range(n)]
    start, results = time.monotonic(), []
    for p in procs:
        p.start()
    try:
        until = start + max(BARRIER_S, b.left())
        while len(results) < n and time.monotonic() < until:
            try:
                results.append(q.get(timeout=1.0))
            except queue.Empty:
                if not any(p.is_alive() for p in procs):   # a worker died without a word
                    break
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in results if "error" in r]
    if len(results) < n:
        errors.append(f"{n - len(results)} of {n} workers gave no result (exit codes "
                      f"{[p.exitcode for p in procs]})")
    if errors:
        return {"status": "error", "error": errors[0], "errors": len(errors)}
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    each = [r["steps"] / (r["end"] - r["start"]) for r in results]
    return {"status": "measured", "steps_per_s": sum(r["steps"] for r in results) / span,
            "per_process_steps_per_s": {"mean": statistics.mean(each), "min": min(each),
                                        "max": max(each)},
            "wall_s": span, "with_startup_s": time.monotonic() - start}


def processes(b: Bench, item: dict) -> str:
    """1, 3, 7, 15 processes training one row at once on the device."""
    a = b.args
    item.update(row=a.pool_row, steps_per_process=a.pool_steps, warmup=a.warmup,
                threads_per_process=a.threads, counts={})
    for n in a.processes:
        est = STARTUP_S[b.device.type] + n * (a.warmup + a.pool_steps) * b.step(a.pool_row)
        item["counts"][str(n)] = run_processes(b, n) if b.fits(est) else b.skipped(est)
        b.save()
    status = {c["status"] for c in item["counts"].values()}
    return "error" if "error" in status else "partial" if "skipped" in status else "measured"


# --- 3. kernels (CPU: aten ops) per step -----------------------------------------------------

def count_step(t: SideBySide, cache: bool) -> dict:
    """The profiler's events of one training step: CUDA kernels, or on the CPU aten ops."""
    cuda = t.device.type == "cuda"
    acts = [torch.profiler.ProfilerActivity.CPU] + [torch.profiler.ProfilerActivity.CUDA] * cuda
    with basis_cache(cache), torch.profiler.profile(activities=acts) as prof:
        t.train_step()
        _sync(t.device)
    events = prof.events()
    if cuda:
        dev = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        copies = sum(e.name.startswith(("Memcpy", "Memset")) for e in dev)
        return {"kernels": len(dev) - copies, "memcpy_memset": copies,
                "launches": sum("LaunchKernel" in e.name for e in events
                                if e.device_type == torch.autograd.DeviceType.CPU)}
    return aten_counts(events)


def aten_counts(events) -> dict:
    """``{"aten_ops", "aten_top_level"}`` of profiler ``events``: every ``aten::`` event,
    and those with no ``aten::`` event above them (one per operation the code called)."""
    aten = [e for e in events if e.name.startswith("aten::")]

    def top(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True
    return {"aten_ops": len(aten), "aten_top_level": sum(top(e) for e in aten)}


def kernels_estimate(b: Bench) -> float:
    return sum(2 * (b.args.warmup + KERNEL_STEPS * PROFILER_FACTOR) * b.step(r) + 1
               for r in b.args.rows)


def kernels_per_step(b: Bench, item: dict) -> str:
    """Device kernels (CPU: aten ops) per training step of every row, basis cache on and off."""
    a = b.args
    item["unit"] = ("CUDA kernels per training step (profiler device events; memcpy/memset "
                    "apart; launches: *LaunchKernel runtime calls)" if b.device.type == "cuda" else
                    "aten ops per training step (CPU: no device kernels; all aten:: events, and "
                    "those with no aten:: op above them)")
    item.update(profiled_steps=KERNEL_STEPS, rows={})
    for label in a.rows:
        est = 2 * (a.warmup + KERNEL_STEPS * PROFILER_FACTOR) * b.step(label) + 1
        if not b.fits(est):
            item["rows"][label] = b.skipped(est)
            continue
        model, tc = configs(label, a.profile)
        t = trainer(model, tc, b.device, a.warmup + 2 * KERNEL_STEPS)
        for _ in range(a.warmup):
            t.train_step()
        row = {}
        for name, cache in (("as_is", True), ("basis_cache_off", False)):
            steps = [count_step(t, cache) for _ in range(KERNEL_STEPS)]
            row[name] = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
            row[name]["per_step"] = [s[next(iter(s))] for s in steps]
        item["rows"][label] = row
        b.save()
    return "partial" if any("status" in r for r in item["rows"].values()) else "measured"


# --- 4. float64 losses on the device against the CPU -----------------------------------------

def float64_losses(label: str, profile: str, device, steps: int) -> tuple[list, bool]:
    """CAT's loss (or the baseline's) at each of ``steps`` steps, its model in float64."""
    model, tc = configs(label, profile)
    t = trainer(model, tc, device, steps)
    for m in (t.cat, t.base):
        if m is not None:
            m.double()             # the same Parameter objects: the optimisers follow
    all64 = all(p.dtype == torch.float64 for m in (t.cat, t.base) if m is not None
                for p in m.parameters())
    losses = []
    for _ in range(steps):
        m = t.train_step()
        losses.append(m["loss"] if "loss" in m else m["base_loss"])
    return losses, all64


def equality_estimate(b: Bench) -> float:
    cpu64 = 2 * PRIOR_STEP_S[("cpu", b.args.profile)]
    return b.args.equality_steps * (2 * b.step(b.args.equality_row) + cpu64) + 2


def float64_equality(b: Bench, item: dict) -> str:
    """Losses in float64 on the device against the CPU after ``--equality-steps`` steps."""
    a = b.args
    model, _ = configs(a.equality_row, a.profile)
    item.update(row=a.equality_row, steps=a.equality_steps, dropout=model.dropout,
                how="SideBySide builds the model(s) (the CPU's seed), then .double(); random "
                    "tokens, the same batches", compared=f"{b.device.type} float64 vs cpu float64")
    tested, ok64 = float64_losses(a.equality_row, a.profile, b.device, a.equality_steps)
    reference, ref64 = float64_losses(a.equality_row, a.profile, "cpu", a.equality_steps)
    diffs = [abs(x - y) for x, y in zip(tested, reference)]
    tol = GROWTH * EPS64 * max(1.0, max(abs(x) for x in reference))
    item.update(all_parameters_float64=ok64 and ref64, losses=tested, reference_losses=reference,
                abs_diff_per_step=diffs, max_abs_diff=max(diffs), max_over_eps=max(diffs) / EPS64,
                tolerance=tol, tolerance_rule=f"{GROWTH} (growth factor) * eps(float64) "
                f"{EPS64:.3g} * max(1, max |reference loss|)",
                ok=max(diffs) <= tol and ok64 and ref64)
    return "measured"


# --- 5. the MPS control daemon ---------------------------------------------------------------

def _control(exe: str, env: dict, *args: str, text: str | None = None) -> dict:
    """Run the control program (10 s at most); its output goes through a file, not a pipe,
    which a daemon forked by ``-d`` would hold open past the program's exit."""
    with tempfile.TemporaryFile("w+") as out:
        try:
            rc = subprocess.run([exe, *args], input=text, env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True, timeout=10).returncode
        except (OSError, subprocess.SubprocessError) as e:
            return {"rc": None, "output": f"{type(e).__name__}: {e}"}
        out.seek(0)
        return {"rc": rc, "output": out.read().strip()[-400:]}


def mps(b: Bench, item: dict) -> str:
    """Start the MPS control daemon in a private pipe directory, then stop it again."""
    exe = shutil.which("nvidia-cuda-mps-control")
    item["executable"] = exe
    if b.device.type != "cuda":
        return "n/a on cpu"
    if exe is None:
        item.update(started=False, reason="nvidia-cuda-mps-control is not on PATH")
        return "measured"
    with tempfile.TemporaryDirectory(prefix="catlib_mps_") as d:
        env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": f"{d}/pipe",
               "CUDA_MPS_LOG_DIRECTORY": f"{d}/log"}
        for sub in ("pipe", "log"):
            os.makedirs(f"{d}/{sub}")
        item["start"] = _control(exe, env, "-d")
        if item["start"]["rc"] != 0 and item["start"]["rc"] is not None:
            item["started"] = False
        else:
            item["query"] = _control(exe, env, text="get_server_list\n")
            item["started"] = item["start"]["rc"] == 0 and item["query"]["rc"] == 0
            item["stop"] = _control(exe, env, text="quit\n")      # stopped whatever happened
            time.sleep(1.0)
        log = Path(d) / "log" / "control.log"
        item["control_log_tail"] = log.read_text(errors="replace")[-600:] if log.exists() else None
    return "measured"


# name: (function, estimated seconds)
ITEMS = {"step_ms": (step_ms, step_ms_estimate),
         "processes": (processes, processes_estimate),
         "kernels_per_step": (kernels_per_step, kernels_estimate),
         "float64_equality": (float64_equality, equality_estimate),
         "mps": (mps, lambda b: MPS_S if b.device.type == "cuda" else 0.0)}


class Parser(argparse.ArgumentParser):
    def error(self, message):               # one line, exit 2
        print(f"gpu_levers: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse(argv) -> argparse.Namespace:
    from catlib.experiment.scale_plan import SCALE_ROWS
    p = Parser(prog="python -m benchmarks.gpu_levers", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--profile", default="cpu", choices=("cpu", "smoke"),
                   help="the sizes of the rows (the study's: cpu; smoke for a CPU test)")
    p.add_argument("--out", default=str(ROOT / "results"))
    p.add_argument("--budget", type=float, default=480.0, help="seconds for all items")
    p.add_argument("--items", nargs="+", default=list(ITEMS), choices=list(ITEMS))
    p.add_argument("--rows", nargs="+", default=list(SCALE_ROWS), metavar="LABEL")
    p.add_argument("--steps", type=int, default=30, help="timed steps per row and setting")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the pool: 1 per run)")
    p.add_argument("--processes", nargs="+", type=int, default=[1, 3, 7, 15])
    p.add_argument("--pool-row", default=KERPLE, metavar="LABEL")
    p.add_argument("--pool-steps", type=int, default=200)
    p.add_argument("--equality-row", default=KERPLE, metavar="LABEL")
    p.add_argument("--equality-steps", type=int, default=20)
    a = p.parse_args(argv)
    bad = [r for r in (*a.rows, a.pool_row, a.equality_row) if r not in SCALE_ROWS]
    if bad:
        p.error(f"unknown row {bad[0]!r}; the rows: {', '.join(SCALE_ROWS)}")
    if not a.budget > 0:
        p.error(f"--budget must be a positive number of seconds, got {a.budget:g}")
    for name in ("steps", "threads", "pool_steps", "equality_steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    if a.warmup < 0 or min(a.processes) < 1:
        p.error("--warmup must be >= 0 and every --processes count >= 1")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available here")
    return a


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    torch.set_num_threads(args.threads)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    b = Bench(args, argv)
    b.save()
    for name, (run, estimate) in ITEMS.items():
        item = b.data["items"][name]
        est = estimate(b)
        if name not in args.items:
            item.update(status="skipped", reason="not in --items")
        elif not b.fits(est):
            item.update(b.skipped(est))
        else:
            print(f"[gpu_levers] {name} (about {est:.0f} s) ...", flush=True)
            item["status"], start = "running", time.monotonic()
            b.save()
            try:
                item["status"] = run(b, item)
            except Exception as e:  # noqa: BLE001 - one item's failure is recorded, the next runs
                item.update(status="error", error=f"{type(e).__name__}: {e}",
                            traceback=traceback.format_exc())
            item["seconds"] = round(time.monotonic() - start, 2)
        b.save()
        print(f"[gpu_levers] {name}: {item['status']}", flush=True)
    items = b.data["items"]
    code = 2 if any(i["status"] == "error" for i in items.values()) else \
        1 if items["float64_equality"].get("ok") is False else 0
    b.data["exit"] = code
    b.save()
    print(f"[gpu_levers] {b.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
