"""The pool that trains the independent runs of an experiment, and its progress line.

The runs train in parallel worker processes, one thread each, so that their numbers do not
depend on how many run at once: on the CPU one per core, on a GPU several sharing it
(:func:`default_jobs`), on several GPUs that many per device. The costliest jobs start first (by relative
step weights, :func:`expected_cost`); the workers report their steps into a shared array
that :class:`~catlib.experiment.progress.PoolProgress` turns into one line with the time left.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable

import torch

from .progress import PoolProgress, shared_steps
from .progress import attach as attach_progress


# Runs trained at once on one GPU: each run's process needs a CPU core to launch its kernels
# (a step at the ``cpu`` sizes is launch-bound: 4-24 ms on an H200, ../shared/device), and
# at most this much GPU memory (measured peak of a training step at the ``paper`` sizes,
# 2.2 GiB, with room for evaluation at 5000 characters).
RUN_GPU_MEMORY = 4 * 2**30


def default_jobs(device) -> int:
    """Runs trained at once: ``CATLIB_JOBS`` if set; else on the CPU the CPUs this process
    may use (:func:`~catlib.common.provenance.usable_cpus`); on CUDA as many as the free
    memory holds at :data:`RUN_GPU_MEMORY` each and the CPUs can drive, one CPU left to
    this process (measured on one H200: three runs at once each kept the speed of one
    alone); 1 on MPS."""
    from ..common.provenance import usable_cpus

    if os.environ.get("CATLIB_JOBS"):
        return max(1, int(os.environ["CATLIB_JOBS"]))
    device = torch.device(device)
    if device.type == "cpu":
        return usable_cpus()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(1, min(usable_cpus() - 1, free // RUN_GPU_MEMORY))
    return 1


def worker_devices(device, jobs: int | None = None, devices=None) -> list[str]:
    """One entry per worker process: ``jobs`` (default :func:`default_jobs`) times the
    device; on CUDA with several ``devices`` given (default ``CATLIB_DEVICES``,
    comma-separated, e.g. "cuda:0,cuda:1"), ``jobs`` workers on each. A single entry
    means: train in this process."""
    device = torch.device(device)
    listed = devices or [d for d in os.environ.get("CATLIB_DEVICES", "").split(",") if d]
    if device.type == "cuda" and listed:
        per = jobs or 1
        return [str(torch.device(d)) for d in listed for _ in range(per)]
    return [str(device)] * (jobs or default_jobs(device))


# Relative cost of a training step, by CAT's kernel and for a baseline (per loop): weights
# that only order the jobs (costliest first), never change a number. The content kernel
# scores every query-key pair, the prior kernels add a prior to the spectral kernel, a
# baseline is a plain transformer layer; benchmarks/ measures the times behind them. The
# dropout-on evaluation of a published run weighs about as much as training it.
# The literature's learned biases (issue 54), from a training step's time against the
# ALiBi-prior kernel's (one Euler step, the cpu profile's sizes, one thread: buckets 0.98,
# KERPLE-log 0.71, FIRE 0.81, FoX 0.94).
STEP_WEIGHT = {"absolute": 23, "relative": 20, "content": 38, "alibi-prior": 36,
               "kerple-prior": 36, "alibi-buckets": 35, "kerple-log": 26, "fire": 29, "fox": 34}
UNKNOWN_KERNEL_WEIGHT = 30
BASELINE_STEP_WEIGHT = 8
# A CAT trained with drawn solver steps (train_solver_steps (1, 2)): a step costs about
# 1.3-1.5 times the CAT's at one step.
DRAWN_STEPS_WEIGHT = 1.4
# A CAT block's evaluations of its dynamics per solver step, against classical RK4's four:
# one for Euler, two for the midpoint rule.
SOLVER_WEIGHT = {"euler": 0.25, "midpoint": 0.5}


def expected_cost(spec: dict) -> float:
    """A job's relative cost (steps times the step weights, per block), to start the
    costliest first."""
    model, steps = spec["model"], spec["train"]["train_steps"]
    blocks = model.get("blocks", 1)
    cat = STEP_WEIGHT.get(model.get("kernel", "absolute"), UNKNOWN_KERNEL_WEIGHT) * blocks * (
        DRAWN_STEPS_WEIGHT if model.get("train_solver_steps") else 1.0) * (
        SOLVER_WEIGHT.get(model.get("solver"), 1.0))
    base = BASELINE_STEP_WEIGHT * model.get("baseline_loops", 1) * blocks
    per_step = sum(cat if m == "cat" else base for m in spec["train"]["models"])
    return steps * per_step * (2.0 if spec["dropout_on"] else 1.0)


def run_jobs(specs: dict, owners: dict, job: Callable[..., dict], slots: list[str],
             echo: Callable[[str], None] | None, progress_every: float) -> dict:
    """Run ``job(spec)`` for every spec (a dict; ``owners[key]``: the (row, seed) pairs it
    serves), costliest first, in worker processes when there are several ``slots``
    (:func:`worker_devices`), else in this process. ``job`` returns ``{"name", "reused"}``
    and is a module-level function (the workers import it); ``job(spec, steps,
    stored=True)`` returns the same for a run whose scores are all stored, computing
    nothing, else None. Runs found stored are taken in this process first: reading one
    takes a fraction of a second, starting a worker (torch and catlib imported) about 3 s
    of CPU. Returns the results by key."""
    specs = dict(sorted(specs.items(), key=lambda item: -expected_cost(item[1])))
    for i, spec in enumerate(specs.values()):
        spec["device"] = slots[i % len(slots)]
        spec["index"] = i                      # its entry in the progress array
    context = multiprocessing.get_context("spawn")   # a clean interpreter: safe in kernels
    line = PoolProgress([expected_cost(s) for s in specs.values()],
                        [s["train"]["train_steps"] for s in specs.values()],
                        shared_steps(context, len(specs)))
    with line.running(echo, every=progress_every) as say:
        done = {}
        for key, spec in specs.items():
            result = job(spec, line.steps, stored=True)
            if result is not None:
                done[key] = result
                _finished(line, spec, result, say, owners[key])
        rest = {key: spec for key, spec in specs.items() if key not in done}
        if len(slots) > 1 and len(rest) > 1:
            done.update(_in_workers(rest, owners, job, slots, say, context, line))
        else:
            for key, spec in rest.items():
                done[key] = job(spec, line.steps)
                _finished(line, spec, done[key], say, owners[key])
        return {key: done[key] for key in specs}


def _in_workers(specs: dict, owners: dict, job: Callable[..., dict], slots: list[str],
                say, context, line: PoolProgress) -> dict:
    """Run the specs in worker processes: on the CPU a shared pool of len(slots) processes;
    on GPUs one process per device, each taking the runs assigned to it, in order. The
    workers report their steps into ``line``'s shared array. Returns each job's result
    (``job``) by spec key."""
    start = dict(mp_context=context, initializer=_start_worker,
                 initargs=(os.getpid(), line.steps))
    # One pool per device, as many processes as it has slots: the CPU's cores, or several
    # runs sharing one GPU; the same path on both (tests/test_scale.py runs it on the CPU).
    by_device = {d: ProcessPoolExecutor(min(slots.count(d), len(specs)), **start)
                 for d in dict.fromkeys(slots)}
    pools = list(by_device.values())
    pool_of = lambda spec: by_device[spec["device"]]                     # noqa: E731
    try:
        futures = {pool_of(spec).submit(job, spec): key for key, spec in specs.items()}
        done = {}
        for future in as_completed(futures):      # each run reported as soon as it ends
            key = futures[future]
            done[key] = future.result()
            _finished(line, specs[key], done[key], say, owners[key])
        return {key: done[key] for key in specs}
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)


def _finished(line: PoolProgress, spec: dict, done: dict, say, owners) -> None:
    """A job has ended: count it in the progress line and say which rows it served."""
    line.finished(spec["index"], reused=done["reused"])
    _say(say, owners, done)


def _say(echo, owners, done: dict) -> None:
    if echo:
        rows = ", ".join(f"{label} (seed {seed})" for label, seed in owners)
        echo(f"{rows}: {'reused' if done['reused'] else 'trained'} run {done['name']}")


def _start_worker(parent: int, steps) -> None:
    """A worker's initializer: exit with its parent, report steps into ``steps``."""
    _exit_with_parent(parent)
    attach_progress(steps)


def _exit_with_parent(parent: int) -> None:
    """In a worker: exit as soon as the process that started it is gone (a killed or
    interrupted notebook), instead of training on and holding its run's lock."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()
