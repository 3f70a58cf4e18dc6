"""Speed of CAT on this machine, as ratios and counts measured side by side in one run.

    python -m benchmarks.bench [--quick] [--out benchmarks/results/bench.json]

Each case runs in its own subprocess so that its peak memory (max RSS) is its
own. Timings are noisy: read the ratios, not the seconds, and never turn them
into test assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import catlib  # noqa: E402

PUBLISHED_SIZE = dict(d_model=128, n_heads=8, n_freq=32, blocks=1, quad_nodes=64)
BATCH, SEQ = 32, 256


class TimeCap(Exception):
    """Raised from inside the dynamics when a capped case runs out of time."""


# -- the cases (each runs in a fresh subprocess) ---------------------------------
def case_train_step(solver: str, rtol: float = 1e-7, atol: float = 1e-9, adjoint: bool = True,
                    cap: float = 60.0, variant: str = "published", repeats: int = 3) -> dict:
    """One AdamW step of CAT at the published default size; capped solves report a lower bound."""
    torch.manual_seed(0)
    cfg = catlib.CATConfig(**PUBLISHED_SIZE, variant=variant, solver=solver, rtol=rtol, atol=atol,
                           adjoint=adjoint)
    model = catlib.CAT(cfg).train()
    tokens = torch.randint(0, 65, (BATCH, SEQ))
    start = [0.0]
    _install_time_cap(model, start, cap)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        start[0] = time.perf_counter()
        logits, pen = model(tokens)
        t_fwd = time.perf_counter() - start[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), tokens.reshape(-1)) + pen
        opt.zero_grad()
        loss.backward()
        opt.step()
        return t_fwd, time.perf_counter() - start[0]

    try:
        step()  # warm-up (allocator, kernels); for capped cases also the measurement
        times = [step() for _ in range(repeats)]
    except TimeCap:
        # CAT registers its counters before each solve, so a stopped solve still has its NFE.
        return dict(capped=True, seconds_at_least=cap, nfe_forward_at_least=model.nfe["forward"],
                    note=f"forward pass stopped after {cap:.0f} s")
    fwd, total = min(times, key=lambda t: t[1])
    result = dict(capped=False, seconds=total, forward_seconds=fwd, tokens_per_s=BATCH * SEQ / total,
                  nfe_forward=model.nfe["forward"], nfe_backward=model.nfe["backward"])
    if not (solver == "dopri5" and adjoint):
        # FlopCounterMode's module hooks cannot run inside the adjoint's autograd.grad.
        result["flops"] = _step_flops(model, tokens)
    return result


def case_baseline_step(repeats: int = 3) -> dict:
    torch.manual_seed(0)
    model = catlib.Baseline(catlib.CATConfig(**PUBLISHED_SIZE)).train()
    tokens = torch.randint(0, 65, (BATCH, SEQ))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        t0 = time.perf_counter()
        logits, _ = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    step()
    seconds = min(step() for _ in range(repeats))
    return dict(seconds=seconds, tokens_per_s=BATCH * SEQ / seconds)


def case_same_math(repeats: int = 3) -> dict:
    """Published operator, rk4-classic 4 steps, forward + backward: catlib vs the loop-by-loop reference."""
    import reference_published as ref

    torch.manual_seed(0)
    naive = ref.CAT(**{k: v for k, v in PUBLISHED_SIZE.items() if k != "quad_nodes"},
                    solver="rk4-classic").eval()
    ours = catlib.load_published(naive.state_dict(), basis="fourier", solver="rk4-classic").eval()
    tokens = torch.randint(0, 65, (BATCH, SEQ))

    def timed(model):
        t0 = time.perf_counter()
        logits, pen = model(tokens)
        (logits.square().mean() + pen).backward()
        return time.perf_counter() - t0

    timed(naive), timed(ours)
    t_naive = min(timed(naive) for _ in range(repeats))
    t_ours = min(timed(ours) for _ in range(repeats))
    return dict(naive_seconds=t_naive, catlib_seconds=t_ours, speedup=t_naive / t_ours)


def case_matmul_peak(repeats: int = 10) -> dict:
    """Best float32 matmul rate over a square product and the feed-forward's own shapes."""
    shapes = [(2048, 2048, 2048), (4096, 4096, 4096), (BATCH * SEQ, 128, 512), (BATCH * SEQ, 512, 128)]
    best = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        a @ b
        seconds = min(_timed(lambda: a @ b) for _ in range(repeats))
        best[f"{m}x{k}x{n}"] = 2 * m * k * n / seconds / 1e9
    return dict(gflops=max(best.values()), by_shape=best)


def case_attention(length: int, causal: bool, linear_path: bool = False) -> dict:
    """Attention alone (published size per head), forward + backward, batch 1.

    ``linear_path`` forces the causal operator's gather path at every length (the
    library uses a dense matmul up to ``DENSE_CAUSAL_MAX``, faster there).
    """
    import catlib.nn.attention

    if linear_path:
        catlib.nn.attention.DENSE_CAUSAL_MAX = 0
    torch.manual_seed(0)
    attn = catlib.ContinuousAttention(128, 8, 32, causal=causal, normalised_integral=causal,
                                      dropout=0.0)
    x = torch.randn(1, length, 128, requires_grad=True)

    def run():
        attn(x).square().mean().backward()

    run()
    return dict(seconds=min(_timed(run) for _ in range(3)))


def case_eval(length: int, windows: int, batched: bool) -> dict:
    """Published evaluation protocol at one length, same weights and solver (rk4-classic).

    ``batched=False``: the published loop, the loop-by-loop reference model at batch 1 in
    training mode (dropout on) with autograd recording, kernels rebuilt at every
    evaluation. ``batched=True``: ``catlib.measure.evaluate.cross_entropy``: windows batched,
    eval mode, inference mode, kernels computed once per solve.
    """
    import reference_published as ref
    from catlib.measure.evaluate import cross_entropy, windows as make_windows

    torch.manual_seed(0)
    sizes = {k: v for k, v in PUBLISHED_SIZE.items() if k != "quad_nodes"}
    published = ref.CAT(**sizes, solver="rk4-classic")
    val = torch.randint(0, 65, ((windows + 1) * length + 1,))
    if batched:
        ours = catlib.load_published(published.state_dict(), solver="rk4-classic")
        cross_entropy(ours, val, length, eval_windows=1)                  # warm-up
        t0 = time.perf_counter()
        cross_entropy(ours, val, length, eval_windows=windows)
    else:
        x, y = make_windows(val, length, windows)
        published(x[:1])                                                  # warm-up
        t0 = time.perf_counter()
        for k in range(windows):
            logits, _ = published(x[k:k + 1])
            torch.nn.functional.cross_entropy(logits[0], y[k]).item()
    seconds = time.perf_counter() - t0
    return dict(seconds=seconds, tokens_per_s=windows * length / seconds)


# -- helpers ---------------------------------------------------------------------
def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _install_time_cap(model, start, cap):
    """Stop the current step (raise TimeCap) once it has run ``cap`` seconds."""
    def hook(module, args):
        if time.perf_counter() - start[0] > cap:
            raise TimeCap

    for block in model.blocks:
        block.ff.register_forward_pre_hook(hook)


def _step_flops(model, tokens) -> int:
    """Floating-point operations of one forward + backward, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        logits, pen = model(tokens)
        (torch.nn.functional.cross_entropy(logits.reshape(-1, 65), tokens.reshape(-1)) + pen).backward()
    return counter.get_total_flops()


def run_case(name: str, **kwargs) -> dict:
    """Run one case in a subprocess; add its peak memory."""
    code = (f"import json,resource,sys; sys.path.insert(0, {str(ROOT)!r});"
            f"from benchmarks import bench;"
            f"r = bench.{name}(**json.loads(sys.argv[1]));"
            f"r['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024;"
            f"print('RESULT', json.dumps(r))")
    # Idle OpenMP threads sleep rather than spin: on a shared machine spinning slows small ops.
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True,
                         text=True, cwd=ROOT, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"benchmark case {name} failed:\n{out.stderr[-2000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter caps and fewer lengths")
    parser.add_argument("--cap", type=float, default=None, help="seconds allowed to the published-settings step")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench.json"))
    args = parser.parse_args(argv)
    cap = args.cap or (20.0 if args.quick else 90.0)
    progress = lambda msg: print(f"... {msg}", file=sys.stderr, flush=True)  # noqa: E731

    results = {"machine": dict(platform=platform.platform(), cpus=os.cpu_count(),
                               torch=torch.__version__, threads=torch.get_num_threads())}
    progress("matmul peak")
    results["matmul_peak"] = run_case("case_matmul_peak")
    steps = {
        "published settings (dopri5 1e-7/1e-9, adjoint, dropout inside)": dict(solver="dopri5", cap=cap),
        "dopri5 loose (1e-3/1e-4, adjoint)": dict(solver="dopri5", rtol=1e-3, atol=1e-4, cap=cap),
        "rk4-classic, 4 steps (published)": dict(solver="rk4-classic"),
        "rk4-classic, 4 steps (causal)": dict(solver="rk4-classic", variant="causal"),
        "euler, 4 steps (published)": dict(solver="euler"),
    }
    results["train_step"] = {}
    for label, kwargs in steps.items():
        progress(f"training step: {label}")
        results["train_step"][label] = run_case("case_train_step", **kwargs)
    progress("training step: baseline")
    results["train_step"]["baseline Transformer"] = run_case("case_baseline_step")
    progress("same math: catlib vs naive per-head")
    results["same_math"] = run_case("case_same_math")
    lengths = (256, 1024, 4096) if args.quick else (256, 1024, 4096, 8192)
    results["attention_scaling"] = {}
    for causal in (False, True):
        for length in lengths:
            progress(f"attention T={length} causal={causal}")
            key = f"{'causal' if causal else 'published'} T={length}"
            results["attention_scaling"][key] = run_case("case_attention", length=length, causal=causal)
    for length in (1024, lengths[-1]):
        progress(f"attention T={length} causal, linear path forced")
        results["attention_scaling"][f"causal linear path T={length}"] = run_case(
            "case_attention", length=length, causal=True, linear_path=True)
    progress("evaluation throughput")
    results["eval"] = {
        "L=512 published loop (batch 1, train mode)": run_case("case_eval", length=512, windows=16,
                                                               batched=False),
        "L=512 catlib (batched, inference mode)": run_case("case_eval", length=512, windows=16,
                                                           batched=True),
        "L=5000 catlib (batched, inference mode)": run_case("case_eval", length=5000, windows=4,
                                                            batched=True),
    }
    report(results)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {args.out}")
    return 0


def report(r: dict) -> None:
    peak = r["matmul_peak"]["gflops"]
    print(f"machine: {r['machine']['platform']}, {r['machine']['cpus']} CPUs, torch {r['machine']['torch']}")
    shapes = ", ".join(f"{k} {v:.0f}" for k, v in r["matmul_peak"]["by_shape"].items())
    print(f"float32 matmul peak: {peak:.1f} GFLOP/s (best of {shapes})\n")
    print("training step, published default size (B=32, T=256, D=128, h=8, n=32, K=1)")
    print(f"{'case':<62} {'s/step':>9} {'tok/s':>8} {'NFE f/b':>11} {'MFU':>6} {'RSS MB':>7}")
    book = r["train_step"]["rk4-classic, 4 steps (published)"]
    for label, c in r["train_step"].items():
        if c.get("capped"):
            print(f"{label:<62} {'>=' + format(c['seconds_at_least'], '.0f'):>9} {'':>8} "
                  f"{'>=' + str(c['nfe_forward_at_least']) + '/?':>11} {'':>6} {c['peak_rss_mb']:7.0f}")
            continue
        nfe = f"{c.get('nfe_forward', '-')}/{c.get('nfe_backward', '-')}"
        mfu = f"{c['flops'] / c['seconds'] / 1e9 / peak:6.0%}" if "flops" in c else ""
        print(f"{label:<62} {c['seconds']:9.2f} {c['tokens_per_s']:8.0f} {nfe:>11} {mfu:>6} "
              f"{c['peak_rss_mb']:7.0f}")
    published = r["train_step"]["published settings (dopri5 1e-7/1e-9, adjoint, dropout inside)"]
    if published.get("capped"):
        print(f"\nbook solver vs published settings: >= {published['seconds_at_least'] / book['seconds']:.0f}x "
              f"(the published step did not finish its forward pass within the cap)")
    else:
        print(f"\nbook solver vs published settings: {published['seconds'] / book['seconds']:.0f}x")
    sm = r["same_math"]
    print(f"same math (published operator, rk4-classic, fwd+bwd): catlib {sm['catlib_seconds']:.2f} s, "
          f"naive per-head {sm['naive_seconds']:.2f} s -> {sm['speedup']:.2f}x")
    print("\nattention forward+backward, batch 1, D=128, h=8, n=32, Q=64")
    for key, c in r["attention_scaling"].items():
        print(f"  {key:<22} {c['seconds'] * 1e3:9.1f} ms  {c['peak_rss_mb']:7.0f} MB")
    for kind in ("published", "causal", "causal linear path"):
        a = r["attention_scaling"].get(f"{kind} T=1024")
        b = r["attention_scaling"].get(f"{kind} T=8192") or r["attention_scaling"].get(f"{kind} T=4096")
        top = 8192 if f"{kind} T=8192" in r["attention_scaling"] else 4096
        print(f"  {kind}: time(T={top}) / time(T=1024) = {b['seconds'] / a['seconds']:.1f} "
              f"(linear would be {top // 1024})")
    print("\nevaluation (published protocol, same weights, rk4-classic)")
    ev = r["eval"]
    for label, c in ev.items():
        print(f"  {label:<45} {c['tokens_per_s']:9.0f} tok/s")
    loop, batched = ev["L=512 published loop (batch 1, train mode)"], ev["L=512 catlib (batched, inference mode)"]
    print(f"  batched / published loop at L=512: {batched['tokens_per_s'] / loop['tokens_per_s']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
