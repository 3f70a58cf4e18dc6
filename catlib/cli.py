"""``python -m catlib train|eval``: the published script's command line, plus runs.

Bad input (flags, corpus, run directory, device) prints one line on stderr naming the
problem and the fix, and exits with status 2 before anything is written.
Exit status 1: training stopped on a NaN/inf loss; 74 (EX_IOERR): a run file could not be
written (disk full; the last checkpoint is intact, run the command again once there is
space); 130: interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import re
import sys

from . import distributed
from .audit import add_parser as add_audit_parser
from .nn.config import BASES, SOLVER_NAMES, VARIANTS, CATConfig
from .data import CORPUS_CHARS, SPLITS, DataError, split_point
from .evaluate import PUBLISHED_LENGTHS, check_settings, format_table
from .devices import DeviceError, resolve_device
from .runs import (RunError, RunInterrupted, StorageError, TrainingFailed, evaluate_run,
                   open_run, train_run)
from .train import MODELS, TrainConfig

CPU_HINT = """\
cost on a CPU: with no flags this is the published run: dopri5 at rtol 1e-7 / atol 1e-9
with dropout inside the ODE dynamics, about 850 s per training step on a 2-core CPU
(the progress bar's rate and ETA show it). To make it practical on a CPU:
  --solver rk4-classic       the published MPS integrator (4 RK4 steps), ~2 s per step
  --train_steps 200          fewer steps;  --d_model 64 --n_freq 16: a smaller model
  --lengths 128 512 --eval_windows 32   a shorter evaluation
  --budget 15m               stop cleanly at a step boundary after 15 minutes
  --variant causal           the corrected model (causal, dropout outside the dynamics)
e.g.  python -m catlib train --solver rk4-classic --train_steps 200 --eval_windows 32
Running the same command again reuses a finished run and resumes an unfinished one."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2, no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def _budget(text: str) -> float:
    """Seconds from '90', '90s', '15m' or '1.5h'."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"invalid budget {text!r}: give seconds (90), or 15m, 1.5h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _add_eval_flags(p) -> None:
    p.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    p.add_argument("--eval_windows", type=_positive(int), default=256,
                   help="max validation windows per context length (default: 256)")
    p.add_argument("--lengths", type=_positive(int), nargs="+", default=list(PUBLISHED_LENGTHS),
                   help="context lengths to evaluate (default: 128 512 1024 5000)")
    p.add_argument("--dropout-in-eval", action="store_true",
                   help="keep dropout on during evaluation, as the published script does")
    p.add_argument("--batch-tokens", type=_positive(int), default=32768,
                   help="tokens per evaluation batch; 1 = the published batch of one window")
    p.add_argument("--data", default=None,
                   help="path of tiny.txt (default: $CATLIB_DATA, then the user cache, then download)")


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m catlib", formatter_class=argparse.RawDescriptionHelpFormatter,
                  description="Train and evaluate the Continuous Attention Transformer beside its "
                              "baseline, as published or corrected.")
    sub = top.add_subparsers(dest="command", metavar="{train,eval,audit}", parser_class=_Parser)

    t = sub.add_parser("train", help="train CAT and the baseline side by side, then evaluate",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CPU_HINT,
                       description="Train CAT and the baseline on identical batches and print the "
                                   "published table. Flags and defaults of the published script, "
                                   "except --device (auto).")
    g = t.add_argument_group("published flags")
    g.add_argument("--blocks", type=int, default=1, help="ODE blocks K (default: 1)")
    g.add_argument("--d_model", type=int, default=128, help="model width D (default: 128)")
    g.add_argument("--n_heads", type=int, default=8, help="heads h, dividing D (default: 8)")
    g.add_argument("--n_freq", type=int, default=32, help="basis functions per axis (default: 32)")
    g.add_argument("--basis", choices=BASES, default="fourier", help="spectral basis (default: fourier)")
    g.add_argument("--sob_lambda", type=float, default=5e-7, help="Sobolev weight (default: 5e-7)")
    g.add_argument("--train_steps", type=int, default=800, help="training steps (default: 800)")
    g.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (default: 3e-4)")
    g.add_argument("--batch", type=int, default=32, help="batch size (default: 32)")
    g.add_argument("--seq", type=int, default=256, help="training sequence length (default: 256)")
    _add_eval_flags(g)
    c = t.add_argument_group("catlib flags")
    c.add_argument("--variant", choices=VARIANTS, default="published",
                   help="published (every defect kept) or causal (corrected) (default: published)")
    c.add_argument("--solver", choices=SOLVER_NAMES, default=None,
                   help="depth integrator (default: the published choice, dopri5; rk4-classic on mps)")
    c.add_argument("--solver_steps", type=int, default=4,
                   help="steps of the fixed-step solvers rk4-classic and euler (default: 4)")
    c.add_argument("--rtol", type=float, default=1e-7, help="dopri5 relative tolerance (default: 1e-7)")
    c.add_argument("--atol", type=float, default=1e-9, help="dopri5 absolute tolerance (default: 1e-9)")
    c.add_argument("--adjoint", action=argparse.BooleanOptionalAction, default=True,
                   help="backpropagate dopri5 through the adjoint ODE (default: on, as published)")
    c.add_argument("--seed", type=int, default=0, help="seed of torch, numpy, python and the sampler (default: 0)")
    c.add_argument("--split", choices=SPLITS, default="published",
                   help="corpus split: published (50000 training characters) or 90/10 (default: published)")
    c.add_argument("--models", choices=MODELS, nargs="+", default=list(MODELS),
                   help="the models to train: cat, base or both (default: cat base)")
    c.add_argument("--run-dir", default="runs", help="parent directory of the runs (default: runs)")
    c.add_argument("--name", default=None, help="run name (default: <variant>-<config hash>)")
    c.add_argument("--retrain", action="store_true", help="train again even if a finished run matches")
    c.add_argument("--budget", type=_budget, default=None,
                   help="wall-clock limit of training: 90, 90s, 15m, 1.5h; stops at a step boundary")
    c.add_argument("--val-every", type=int, default=0,
                   help="validate every N steps on a few windows of length --seq (default: 0, never)")
    c.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints (default: 100)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="evaluate a run directory at several context lengths",
                       description="Evaluate the models of a run directory with the published "
                                   "protocol and print the published table.")
    e.add_argument("run_dir", help="a run directory, e.g. runs/published-1a2b3c4d")
    _add_eval_flags(e)
    e.add_argument("--allow-other-code", action="store_true",
                   help="evaluate a run trained by other catlib code (another code fingerprint)")
    e.set_defaults(func=cmd_eval)
    a = add_audit_parser(sub)

    top.epilog = "\n".join(p.format_help() for p in (t, e, a))
    return top


def _report(result: dict) -> str:
    nonfinite = result.get("nonfinite", ())

    def leak(m: str) -> str:
        v = result["leak"].get(m)
        return "non-finite" if f"leak_{m}" in nonfinite else "-" if v is None else f"{v:.3g}"
    return "\n".join([
        format_table(result["rows"]),
        f"leak score | CAT {leak('cat')} | base {leak('base')}   "
        "(about 0: causal, a language-model score; > 0: the model reads later tokens)"])


def cmd_train(args) -> int:
    device = resolve_device(args.device)
    solver = args.solver or ("rk4-classic" if device.type == "mps" else "dopri5")
    try:
        model_config = CATConfig(
            d_model=args.d_model, n_heads=args.n_heads, n_freq=args.n_freq, basis=args.basis,
            blocks=args.blocks, sob_lambda=args.sob_lambda, variant=args.variant, solver=solver,
            rtol=args.rtol, atol=args.atol, adjoint=args.adjoint, solver_steps=args.solver_steps)
        train_config = TrainConfig(train_steps=args.train_steps, lr=args.lr, batch=args.batch,
                                   seq=args.seq, seed=args.seed, val_every=args.val_every,
                                   checkpoint_every=args.checkpoint_every, budget=args.budget,
                                   split=args.split, models=tuple(args.models))
        train_config.validate(split_point(CORPUS_CHARS, args.split), model_config.resolved().causal)
        check_settings(args.lengths, args.eval_windows, args.batch_tokens,
                       model_config.resolved().causal)
        distributed.check_batch(args.batch)  # under torchrun: --batch is the global batch
        device = distributed.setup(device)   # torchrun (WORLD_SIZE > 1): the process group
    except ValueError as err:
        raise RunError(_flagify(str(err))) from None
    try:
        run = train_run(model_config, train_config, root=args.run_dir, name=args.name,
                        device=device, data=args.data, retrain=args.retrain, lengths=args.lengths,
                        eval_windows=args.eval_windows, dropout_in_eval=args.dropout_in_eval,
                        batch_tokens=args.batch_tokens, progress=not args.no_progress)
    finally:
        distributed.teardown()
    if run is None:  # a rank other than 0 under torchrun: rank 0 reports
        return 0
    print(_report(run.result))
    print(f"run: {run.path}")
    return 0


def cmd_eval(args) -> int:
    run = open_run(args.run_dir)
    try:
        check_settings(args.lengths, args.eval_windows, args.batch_tokens,
                       run.model_config.resolved().causal)
    except ValueError as err:
        raise RunError(_flagify(str(err))) from None
    status = run.status
    if status.get("status") != "finished":
        print(f"note: run is {status.get('status')} at step {status.get('step')} of "
              f"{run.config['train']['train_steps']}; evaluating its last checkpoint", file=sys.stderr)
    result = evaluate_run(run, args.lengths, args.eval_windows, args.dropout_in_eval,
                          args.batch_tokens, resolve_device(args.device), data=args.data,
                          allow_other_code=args.allow_other_code)
    print(_report(result))
    return 0


def _flagify(message: str) -> str:
    """'val_every must ...' -> name the command-line flag instead of the config field."""
    flags = {"vocab_size": "vocab_size", "val_every": "--val-every",
             "checkpoint_every": "--checkpoint-every", "batch_tokens": "--batch-tokens"}
    field = message.split(" ", 1)[0]
    flag = flags.get(field, f"--{field}")
    return f"{flag}{message[len(field):]}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"python -m catlib {args.command}" if args.command else "python -m catlib"
    if args.command is None:
        print(f"{prog}: error: choose a command, train, eval or audit; see `{prog} --help`", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except (RunError, DataError, DeviceError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except TrainingFailed as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    except StorageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 74
    except RunInterrupted as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
