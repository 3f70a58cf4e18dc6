"""The device check: correctness, throughput, the cpu book and the paper profile on one device.

    python -m benchmarks.gpu_check [--device cuda|cpu] [--smoke] [--out results] [--budget SECONDS]
                                   [--stages abcd] [--work DIR] [--perturb X]

Four stages run in order, each in a time box cut from ``--budget``. The report,
``<out>/gpu_check_<device>.json`` and ``.md`` (device, torch, CUDA and cuDNN versions, the
environment and commit of ``catlib.common.provenance.environment``, the code fingerprint of
``catlib.common.provenance``), is rewritten after every item: a failure, time-out or kill keeps the rest.

(a) correctness: the logits of every CAT kernel (``catlib.nn.config.KERNELS``) and every baseline
    (``BASELINE_POSITIONS``), in each variant that accepts it, the options read from the config
    module when the check runs: float32 on the device against float64 on the CPU, same weights,
    small sizes. Tolerance: ``TOL_FACTOR * eps * max(1, max |reference logits|)``, eps that of
    float32. On CUDA also the caches after ``.to(device)``: a model evaluated on the CPU is moved
    and evaluated on the device (within the tolerance), moved back (bit for bit its first CPU
    logits), then trained one forward and backward on the device (finite gradients). On the CPU
    the dtype change stands in for the device change: ``.double()`` (bit for bit a model never
    evaluated in float32), then ``.float()`` back.
(b) throughput: a training step (forward, backward, AdamW update; one warm-up step first) of the
    model of every row of ``catlib.experiment.grid.ROWS``, at the sizes of the ``cpu`` and ``paper``
    profiles (``smoke`` only at --smoke), on random tokens: tokens per second of the median step
    and peak memory (``torch.cuda.max_memory_allocated``; on the CPU n/a per row, the process's
    maximum RSS for the stage).
(c) the book: ``python -m catlib.book --profile cpu --device DEVICE --no-build`` in a copy of the
    book's sources under ``--work`` (never the checkout's book/, results/ or README); executed
    notebooks, run report, figures, results/ and the runs' JSON go to
    ``<out>/book_c_<profile>_<device>.tar.gz``. At --smoke: one notebook of the smoke profile.
(d) the paper profile, one notebook at a time (``--only``) until the budget is spent, packed
    likewise. At --smoke: the smoke profile in a box of ``SMOKE_D_BOX`` seconds, which exercises
    only the time-out (the runner interrupted, its kernel and workers killed, none left running).

Exit status: 1 when a correctness check fails (one line names the model and the error), 2 when
another stage fails or does not finish ((d) may stop at the budget), else 0.
"""
from __future__ import annotations

import argparse, contextlib, dataclasses, json, os, resource, shutil, signal  # noqa: E401
import statistics, subprocess, sys, tarfile, tempfile, time, traceback  # noqa: E401
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catlib import CAT, Baseline, CATConfig  # noqa: E402
from catlib.nn import config as cfg  # noqa: E402
from catlib import experiment as ex  # noqa: E402
from catlib.book import PROFILES, _descendants, _now, resolve_device  # noqa: E402
from catlib.book.profiles import experiment  # noqa: E402
from catlib.common.provenance import environment  # noqa: E402
from catlib.common.provenance import code_fingerprint  # noqa: E402
from catlib.training.loop import SideBySide  # noqa: E402

EPS = torch.finfo(torch.float32).eps
TOL_FACTOR = 128   # float32 on a CPU: about 2 eps * magnitude here (the report's error / (eps mag))
SMALL = dict(d_model=32, n_heads=4, n_freq=8, quad_nodes=16, solver="rk4-classic", solver_steps=2,
             dropout=0.0)
LENGTH = 24
EXTRAS = ({}, {"train_length": LENGTH})   # tried in turn, for options that need more fields
FAIL = {"failed", "error", "timeout"}
SMOKE_D_BOX = 4.0


class StageTimeout(BaseException):   # not an Exception: a stage's own handlers let it through
    pass


@contextlib.contextmanager
def time_box(seconds: float):
    """Raise StageTimeout in the main thread once ``seconds`` have passed."""
    def expire(*_):
        raise StageTimeout(f"its time box of {seconds:.0f} s was spent")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def model_cases() -> tuple[dict, dict]:
    """``({name: (kind, CATConfig)}, {option: why no config was built})`` over the choices."""
    cases, uncovered = {}, {}
    for kind, field, options in (("cat", "kernel", cfg.KERNELS),
                                 ("base", "baseline_positions", cfg.BASELINE_POSITIONS)):
        for option in options:
            error, covered = None, False
            for variant in cfg.VARIANTS:
                for extra in EXTRAS:
                    try:
                        config = CATConfig(**SMALL, **extra, variant=variant, **{field: option})
                    except (ValueError, TypeError) as e:
                        error = str(e)
                        continue
                    name = f"{'CAT' if kind == 'cat' else 'baseline'} {variant}, {option}"
                    cases[name], covered = (kind, config), True
                    break
            if not covered:
                uncovered[f"{field}={option}"] = error
    return cases, uncovered


def check_model(kind: str, config: CATConfig, device: torch.device, perturb: float) -> dict:
    """Logits on ``device`` in float32 against the CPU in float64, and the caches (module doc)."""
    def build():
        torch.manual_seed(0)
        return (CAT if kind == "cat" else Baseline)(config).eval()
    tokens = torch.randint(0, config.vocab_size, (2, LENGTH),
                           generator=torch.Generator().manual_seed(1))
    moved_equal = None
    with torch.no_grad():
        reference = build().double()(tokens)[0]            # fresh: nothing cached in float32
        model = build()
        first = model(tokens)[0]                             # fills the float32 CPU caches
        if device.type == "cpu":
            tested = first.double().clone()
            moved_equal = torch.equal(model.double()(tokens)[0], reference)
            back = model.float()(tokens)[0]
        else:
            tested = model.to(device)(tokens.to(device))[0].cpu().double()
            back = model.to("cpu")(tokens)[0]
    magnitude = reference.abs().max().item()
    tol = TOL_FACTOR * EPS * max(1.0, magnitude)
    tested.view(-1)[0] += perturb * tol                      # --perturb: a check that must fail
    error = (tested - reference).abs().max().item()
    model.to(device).train()
    logits, pen = model(tokens.to(device))
    (logits.sum() + pen).backward()
    finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    problems = [f"max |logits {device.type} float32 - cpu float64| = {error:.3g} > tolerance "
                f"{tol:.3g}"] * (not error <= tol)
    problems += ["after .double() its logits differ from a fresh float64 model's (stale cache)"] \
        * (moved_equal is False)
    problems += ["moved back to the CPU, its logits differ from its first CPU logits (stale cache)"] \
        * (not torch.equal(back, first)) + ["non-finite gradients in training mode"] * (not finite)
    return dict(max_error=error, tolerance=tol, magnitude=magnitude,
                error_over_eps=error / EPS / max(1.0, magnitude),
                cpu_float32_error=(first.double() - reference).abs().max().item(),
                moved_equal=moved_equal, back_equal=torch.equal(back, first), grads_finite=finite,
                ok=not problems, problem="; ".join(problems) or None)


def stage_a(rep, device, args):
    """(a) Max |logits on the device - CPU float64| of every kernel and baseline option, and
    the caches after a device (CPU: dtype) change; failed when one is off (module doc)."""
    st = rep.stage("a", tolerance=f"{TOL_FACTOR} * eps * max(1, max|logits|), eps = {EPS:.3g} "
                   f"(float32)", sizes=dict(SMALL, length=LENGTH), models={})
    cases, st["uncovered"] = model_cases()
    for name, (kind, config) in cases.items():
        chosen = {k: v for k, v in config.to_dict().items()
                  if k in ("variant", "kernel", "baseline_positions", "train_length")}
        st["models"][name] = dict(kind=kind, config=chosen,
                                  **check_model(kind, config, device, args.perturb))
        rep.save()
    bad = [f"{n}: {m['problem']}" for n, m in st["models"].items() if not m["ok"]]
    bad += [f"{o}: no small configuration accepts it ({why})" for o, why in st["uncovered"].items()]
    st["failures"] = bad
    if not bad:
        return "ok", None
    return "failed", bad[0] + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")


def time_row(label: str, profile: str, device: torch.device, repeats: int) -> dict:
    """Median seconds of a training step of ``label``'s model alone, at ``profile``'s sizes."""
    row = ex.ROWS[label]
    model, tc = ex.row_configs(row, experiment(profile), seed=0)   # the study's rows: its settings
    tc = dataclasses.replace(tc, models=(row.model,))
    ids = torch.randint(0, model.vocab_size, (max(20_000, 4 * tc.batch * tc.seq),),
                        generator=torch.Generator().manual_seed(0))
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    trainer, times = SideBySide(model, tc, ids, device), []
    for _ in range(repeats + 1):
        sync()
        start = time.perf_counter()
        trainer.train_step()
        sync()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times[1:])
    return dict(row=label, profile=profile, model=row.model, batch=tc.batch, seq=tc.seq,
                warmup_s=times[0], seconds_per_step=seconds, tokens_per_s=tc.batch * tc.seq / seconds,
                peak_memory_mib=torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None)


def projected_training(profile: str, rows: list) -> float | None:
    """Seconds the training runs of ``profile``'s book would take at the measured step times:
    per run (the rows of 05, 06, 08 and 09 that share one), its steps x its rows' step times,
    for each seed. Evaluation not included; None when a row was not measured."""
    times = {r["row"]: r["seconds_per_step"] for r in rows if r["profile"] == profile}
    runs = {}
    for chapter, labels in ex.CHAPTER_ROWS.items():
        p = PROFILES[profile][chapter]
        for label in labels:
            row = ex.ROWS[label]
            seeds = ex.chapter_seeds(chapter, label, {"seed": 0, **p})   # 05: its default seed
            run = runs.setdefault((row.variant, row.split, row.options, row.trains, row.study),
                                  [set(), set()])
            run[0].add(label)
            run[1].update(seeds)
    if any(label not in times for labels, _ in runs.values() for label in labels):
        return None
    steps = PROFILES[profile]["06_context_length"]["train_steps"]
    return sum(steps * len(seeds) * sum(times[label] for label in labels)
               for labels, seeds in runs.values())


def stage_b(rep, device, args):
    """(b) Tokens per second and peak memory of a training step of every row (module doc)."""
    st = rep.stage("b", rows=[], errors={})
    for profile in ("smoke",) if args.smoke else ("cpu", "paper"):
        for label in ex.ROWS:
            try:
                st["rows"].append(time_row(label, profile, device, 1 if args.smoke else 3))
            except Exception as e:  # noqa: BLE001 - one row's failure is reported, the rest run
                st["errors"][f"{label} ({profile})"] = f"{type(e).__name__}: {e}"
            st["process_max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            rep.save()
        st.setdefault("projected_training_s", {})[profile] = projected_training(profile, st["rows"])
    return ("error", next(f"{k}: {v}" for k, v in st["errors"].items())) if st["errors"] else ("ok", None)


def prepare_work(work: Path) -> Path:
    """A copy of the book's sources: the runner writes into it, never into the checkout. Outputs
    of an earlier check are removed, except its training runs (``runs/``), which are reused."""
    for old in ("book/notebooks", "book/_generated", "book/figures", "results"):
        shutil.rmtree(work / old, ignore_errors=True)
    (work / "book").mkdir(parents=True, exist_ok=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(ROOT / name, work / name)
    shutil.copytree(ROOT / "notebooks", work / "notebooks", dirs_exist_ok=True)
    outputs = ("notebooks", "_generated", "figures")
    shutil.copytree(ROOT / "book", work / "book", dirs_exist_ok=True, ignore=lambda d, names: [
        n for n in names if Path(d) == ROOT / "book" and n in outputs])
    return work


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_book(work: Path, profile: str, device: str, only: list, timeout: float, log: Path) -> dict:
    """``python -m catlib.book`` in ``work`` for at most ``timeout`` s; on time-out it is
    interrupted as by Ctrl-C (it kills its kernel), then whatever is left of its tree is killed."""
    cmd = [sys.executable, "-m", "catlib.book", "--profile", profile, "--device", device,
           "--no-build", *(a for name in only for a in ("--only", name))]
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    start, left = time.monotonic(), []
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd[1:])}   # in {work}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=max(timeout, 0.1))
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            status, tree = "timeout", set(_descendants(proc.pid))
            proc.send_signal(signal.SIGINT)
            for _ in range(100):                      # up to 10 s for it to stop its kernel
                if proc.poll() is not None:
                    break
                tree |= set(_descendants(proc.pid))
                time.sleep(0.1)
            for pid in (proc.pid, *tree):
                if _alive(pid):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            rc = proc.wait()
            time.sleep(0.5)
            left = [pid for pid in tree if _alive(pid)]
    tail = log.read_text(errors="replace").splitlines()[-4:]
    return dict(command=" ".join(cmd[2:]), status=status, rc=rc, left_running=left,
                seconds=round(time.monotonic() - start, 1), log_tail=tail if status != "ok" else tail[-1:])


def pack(work: Path, dest: Path) -> dict:
    """Executed notebooks, report, figures, results/ and the runs' JSON of ``work``, as a tarball;
    the per-notebook times and the headline table are returned for the report."""
    with tarfile.open(dest, "w:gz") as tar:
        for rel in ("book/notebooks", "book/_generated", "book/figures", "results"):
            if (work / rel).exists():
                tar.add(work / rel, arcname=rel)
        for p in sorted((work / "runs").rglob("*")) if (work / "runs").is_dir() else []:
            if p.suffix in (".json", ".jsonl", ".csv") and p.stat().st_size < 2**21:
                tar.add(p, arcname=str(p.relative_to(work)))
    report = work / "book/_generated/run_report.json"
    notebooks = json.loads(report.read_text())["notebooks"] if report.exists() else {}
    headline = sorted((work / "results").glob("headline_*.md"))
    return dict(artefact=dest.name, headline=headline[0].read_text() if headline else None,
                notebooks={n: {k: r[k] for k in ("seconds", "status")} for n, r in notebooks.items()})


def stage_c(rep, device, args):
    """(c) The cpu profile's book on the device, its notebooks' times and headline table."""
    profile = "smoke" if args.smoke else "cpu"
    work = prepare_work(rep.work / f"c_{profile}")
    st = rep.stage("c", profile=profile, work=str(work))
    only = [next(iter(PROFILES[profile]))] if args.smoke else []
    st.update(run_book(work, profile, device.type, only, rep.left(), rep.log))
    st.update(pack(work, rep.out / f"book_c_{profile}_{device.type}.tar.gz"))
    if st["status"] == "ok":
        return "ok", None
    return st["status"], f"book ({profile}): {st['status']}: " + " | ".join(st["log_tail"][-2:])


def stage_d(rep, device, args):
    """(d) The paper profile's notebooks, one at a time, as many as the budget allows."""
    profile = "smoke" if args.smoke else "paper"
    work = prepare_work(rep.work / f"d_{profile}")
    deadline = time.monotonic() + (SMOKE_D_BOX if args.smoke else rep.left())
    st = rep.stage("d", profile=profile, work=str(work), runs={})
    for name in PROFILES[profile]:
        left = deadline - time.monotonic()
        if left < 3 or any(r["status"] == "timeout" for r in st["runs"].values()):
            st["runs"][name] = {"status": "not started", "seconds": 0.0}
        else:
            st["runs"][name] = run_book(work, profile, device.type, [name], left, rep.log)
        rep.save()
    st.update(pack(work, rep.out / f"book_d_{profile}_{device.type}.tar.gz"))
    failed = [n for n, r in st["runs"].items() if r["status"] == "failed"]
    if failed:
        return "failed", f"{profile} profile: {', '.join(failed)} failed"
    return ("ok", None) if all(r["status"] == "ok" for r in st["runs"].values()) else ("partial", None)


# stage: (title, function, share of the budget; None: what is left, in the stage's own box)
STAGES = {"a": ("correctness", stage_a, 0.12), "b": ("throughput", stage_b, 0.20),
          "c": ("book", stage_c, None), "d": ("paper profile", stage_d, None)}


class Report:
    """The JSON and Markdown report, rewritten by ``save``; ``left`` is the budget still unspent."""

    def __init__(self, args, device: torch.device):
        self.out, self.device = Path(args.out), device
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work or (self.out / "gpu_check_work" if args.smoke else
                                       Path(tempfile.gettempdir()) / f"catlib_gpu_check_{device.type}"))
        self.log = self.out / f"gpu_check_{device.type}.log"
        self.log.write_text("")
        self.deadline = time.monotonic() + args.budget
        # git_state reads CATLIB_COMMIT for a copy without .git (gpu_prepare.sh sets it)
        env = environment(("torch", "torchdiffeq", "numpy", "papermill"), device, root=ROOT)
        self.data = {"written_by": "python -m benchmarks.gpu_check " + " ".join(sys.argv[1:]),
                     "started": _now(), "device": device_info(device), "smoke": args.smoke,
                     "budget_s": args.budget, "corpus": os.environ.get("CATLIB_DATA"),
                     "environment": env, "code_fingerprint": code_fingerprint(),
                     "stages": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def stage(self, key, **fields) -> dict:
        self.data["stages"].setdefault(key, {}).update(fields)
        return self.data["stages"][key]

    def save(self) -> None:
        self.data["written"] = _now()
        base = self.out / f"gpu_check_{self.device.type}"
        base.with_suffix(".json").write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        base.with_suffix(".md").write_text(render(self.data))


def device_info(device: torch.device) -> dict:
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    info = {"type": device.type, "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "threads": torch.get_num_threads()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gib=p.total_memory / 2**30,
                    matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                             "--format=csv,noheader"], capture_output=True,
                                            text=True, timeout=10).stdout.strip()
    return info


def render(d: dict) -> str:
    dev, env, st = d["device"], d["environment"], d["stages"]
    git = env["git"]
    commit = (git["commit"] or "unknown")[:12] + (" (uncommitted changes)" if git["dirty"] else
                                                  "" if git["dirty"] is False else " (changes unknown)")
    lines = [f"# Device check on {dev.get('name', dev['type'])}", "",
             f"_Written by `{d['written_by']}`, commit {commit}, code {d['code_fingerprint']}, "
             f"{d['written']}._", "",
             f"torch {dev['torch']}, CUDA {dev['cuda']}, cuDNN {dev['cudnn']}, driver "
             f"{dev.get('driver', 'n/a')}, float32 matmul precision {dev['float32_matmul_precision']}; "
             f"Python {env['python']}, `{env['platform']}`, {env['cpus']} CPUs.", "",
             "| stage | status | seconds | note |", "|---|---|---:|---|"]
    lines += [f"| ({k}) {STAGES[k][0]} | {s['status']} | {s.get('seconds', 0):.1f} | {s.get('note') or ''} |"
              for k, s in st.items()]
    if st.get("a", {}).get("models"):
        lines += ["", f"Correctness: tolerance {st['a']['tolerance']}.", "",
                  "| model | max error | tolerance | error / (eps mag) | CPU float32 error | ok |",
                  "|---|---:|---:|---:|---:|---|"]
        lines += [f"| {n} | {m['max_error']:.2e} | {m['tolerance']:.2e} | {m['error_over_eps']:.1f} | "
                  f"{m['cpu_float32_error']:.2e} | {'yes' if m['ok'] else 'NO: ' + m['problem']} |"
                  for n, m in st["a"]["models"].items()]
    if st.get("b", {}).get("rows"):
        lines += ["", "| row | sizes | batch x seq | s / step | tokens / s | peak memory (MiB) |",
                  "|---|---|---|---:|---:|---:|"]
        lines += [f"| {r['row']} | {r['profile']} | {r['batch']} x {r['seq']} | {r['seconds_per_step']:.4f} "
                  f"| {r['tokens_per_s']:,.0f} | "
                  f"{'n/a' if r['peak_memory_mib'] is None else round(r['peak_memory_mib'])} |"
                  for r in st["b"]["rows"]]
        lines += ["", f"Process max RSS: {st['b']['process_max_rss_mib']:.0f} MiB."]
        lines += [f"Training runs of the {k} profile's book at these step times, one after another: "
                  f"about {v / 60:.0f} min (evaluation not included)." for k, v in
                  st["b"].get("projected_training_s", {}).items() if v is not None]
    for s in (st[k] for k in ("c", "d") if k in st and "artefact" in st[k]):
        runs = s.get("runs") or s["notebooks"]
        lines += ["", f"Book, {s['profile']} profile (`{s['artefact']}`):", "",
                  "| notebook | status | seconds |", "|---|---|---:|"]
        lines += [f"| {n} | {r['status']} | {r['seconds']} |" for n, r in runs.items()]
        lines += ["", s["headline"]] if s["headline"] else []
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smoke", action="store_true", help="smoke sizes, one notebook (a CPU test)")
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all stages (default 540; 120 at --smoke)")
    parser.add_argument("--stages", default="abcd", help="a subset of abcd, e.g. ab")
    parser.add_argument("--work", default=None, help="folder for the book's copies")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="add X tolerances to one device logit of each model (must then fail)")
    args = parser.parse_args(argv)
    args.budget = args.budget or (120.0 if args.smoke else 540.0)
    try:
        device = torch.device(resolve_device(args.device))
    except Exception as e:  # noqa: BLE001 - BookError: the device is absent
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    if not os.environ.get("CATLIB_DATA"):      # as the Makefile does: the book's runs need it
        found = [p for p in (ROOT / "tiny.txt", ROOT.parent / "shared/data/tiny.txt") if p.is_file()]
        os.environ.update({"CATLIB_DATA": str(found[0])} if found else {})
    rep = Report(args, device)
    for key in (k for k in STAGES if k in args.stages):
        title, run, share = STAGES[key]
        box = min(rep.left(), max(30.0, share * args.budget)) if share else rep.left()
        print(f"[gpu_check] ({key}) {title} ...", flush=True)
        start, st = time.monotonic(), rep.stage(key, status="running")
        try:
            with time_box(box) if share else contextlib.nullcontext():
                status, note = run(rep, device, args)
        except StageTimeout as e:
            status, note = "timeout", f"stopped: {e}"
        except Exception as e:  # noqa: BLE001 - a stage's failure is reported, the next one runs
            status, note, st["traceback"] = "error", f"{type(e).__name__}: {e}", traceback.format_exc()
        st.update(status=status, note=note, seconds=round(time.monotonic() - start, 1))
        rep.save()
        print(f"[gpu_check] ({key}) {title}: {status} in {st['seconds']:.1f} s"
              + (f": {note}" if note else ""), flush=True)
    stages, code, message = rep.data["stages"], 0, None
    if stages.get("a", {}).get("status") == "failed":
        code, message = 1, f"correctness FAILED on {device.type}: {stages['a']['note']}"
    elif any(s["status"] in FAIL for s in stages.values()):
        k, s = next((k, s) for k, s in stages.items() if s["status"] in FAIL)
        code, message = 2, f"stage ({k}) {STAGES[k][0]}: {s['status']}: {s['note']}"
    rep.data["exit"] = {"code": code, "message": message}
    rep.save()
    print(f"[gpu_check] report: {rep.out / f'gpu_check_{device.type}.md'}")
    if message:
        print(f"gpu_check: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
