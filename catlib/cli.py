"""``python -m catlib train|eval|audit``: the published script's command line, plus runs.

Bad input (flags, corpus, run directory, device, checkpoint) prints one line on stderr
naming the problem and the fix, and exits with status 2 before anything is written.
Exit status 1: training stopped on a NaN/inf loss; 74 (EX_IOERR): a run file could not be
written (disk full; the last checkpoint is intact, run the command again once there is
space); 130: interrupted (Ctrl-C).

The model and training flags of ``train`` are generated from the fields of
:class:`~catlib.nn.config.CATConfig` and :class:`~catlib.train.TrainConfig`
(:data:`TRAIN_FLAGS`): a flag is ``--<field>``, its default the field's default.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from dataclasses import dataclass

from . import distributed
from .audit import AuditError, audit_model, audit_to_json, format_audit, load_for_audit
from .nn.config import BASES, SOLVER_NAMES, VARIANTS, CATConfig
from .data import CORPUS_CHARS, SPLITS, DataError, split_point
from .evaluate import PUBLISHED_LENGTHS, check_settings, format_table
from .devices import DEVICES, DeviceError, resolve_device
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

AUDIT_DESCRIPTION = (
    "Measure the ten defects of the published CAT (numbered as in the book's method page; "
    "chapter \"7. Audit: the ten defects, measured\", book/notebooks/07_audit, says what each "
    "number means) on a model: a state_dict saved from the published script, or a catlib run "
    "directory. Prints one row per defect: whether the model shows it and the measured number.")


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


# ------------------------------------------------------------------ train's generated flags

# The fields of CATConfig and TrainConfig that `train` exposes, in help order, with a
# one-line description each: the flag is --<field>, its type and default the field's.
PUBLISHED_FIELDS = {
    "blocks": "ODE blocks K",
    "d_model": "model width D",
    "n_heads": "heads h, dividing D",
    "n_freq": "basis functions per axis",
    "basis": "spectral basis",
    "sob_lambda": "Sobolev weight",
    "train_steps": "training steps",
    "lr": "AdamW learning rate",
    "batch": "batch size",
    "seq": "training sequence length",
}
CATLIB_FIELDS = {
    "variant": "published (every defect kept) or causal (corrected)",
    "solver": "depth integrator",
    "solver_steps": "steps of the fixed-step solvers rk4-classic and euler",
    "rtol": "dopri5 relative tolerance",
    "atol": "dopri5 absolute tolerance",
    "adjoint": "backpropagate dopri5 through the adjoint ODE",
    "seed": "seed of torch, numpy, python and the sampler",
    "split": "corpus split: published (50000 training characters) or 90/10",
    "models": "the models to train: cat, base or both",
    "budget": "wall-clock limit of training: 90, 90s, 15m, 1.5h; stops at a step boundary",
    "val_every": "validate every N steps on a few windows of length --seq (0: never)",
    "checkpoint_every": "steps between checkpoints",
}
CHOICES = {"basis": BASES, "variant": VARIANTS, "solver": SOLVER_NAMES, "split": SPLITS,
           "models": MODELS}
ALIASES = {"val_every": ("--val-every",), "checkpoint_every": ("--checkpoint-every",)}
PARSERS = {"budget": _budget}          # argparse types that the field's type does not give
# Defaults the command line decides, and how its help says them: the solver is dopri5
# (CATConfig's default) except on MPS, where it is the published MPS path, rk4-classic.
CLI_DEFAULTS = {"solver": (None, "the published choice, dopri5; rk4-classic on mps")}
DEFAULT_WORDS = {"budget": "no limit"}
METAVARS = {int: "N", float: "X"} | {"budget": "TIME"}


@dataclass(frozen=True)
class Flag:
    """One generated ``train`` flag: the config class and field it sets, and its argparse
    spelling, type and default."""

    config: type
    field: str
    help: str
    group: str
    flags: tuple
    default: object
    kind: object


def _plain_type(config: type, name: str):
    """The field's type without ``| None``."""
    kind = typing.get_type_hints(config)[name]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind


def _generate_flags() -> tuple[Flag, ...]:
    owners = {f.name: (cls, f) for cls in (CATConfig, TrainConfig) for f in dataclasses.fields(cls)}
    made = []
    for group, fields in (("published", PUBLISHED_FIELDS), ("catlib", CATLIB_FIELDS)):
        for name, text in fields.items():
            config, f = owners[name]
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            made.append(Flag(config, name, text, group, (f"--{name}", *ALIASES.get(name, ())),
                             default, _plain_type(config, name)))
    return tuple(made)


TRAIN_FLAGS = _generate_flags()
# Field (or evaluation setting) -> its flag, for the messages of CATConfig, TrainConfig and
# check_settings, which name the field.
FLAG_OF = {f.field: f.flags[0] for f in TRAIN_FLAGS} | {
    "lengths": "--lengths", "eval_windows": "--eval_windows", "batch_tokens": "--batch_tokens"}


def _shown(value) -> str:
    """A default as the help prints it: 5e-7, 0.1, on/off, 'cat base'."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        mantissa, exponent = f"{value:e}".split("e")
        short = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return min((f"{value:g}", short), key=len) if float(short) == value else f"{value:g}"
    if isinstance(value, (tuple, list)):
        return " ".join(map(str, value))
    return str(value)


def _add_flag(group, flag: Flag) -> None:
    default, words = CLI_DEFAULTS.get(flag.field, (flag.default, None))
    words = words or DEFAULT_WORDS.get(flag.field) or _shown(default)
    kw = dict(dest=flag.field, default=default, help=f"{flag.help} (default: {words})")
    if flag.kind is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif flag.kind is tuple:
        kw.update(nargs="+", default=list(default))
    elif flag.kind is not str:
        kw.update(type=PARSERS.get(flag.field, flag.kind),
                  metavar=METAVARS.get(flag.field, METAVARS.get(flag.kind)))
    if flag.field in CHOICES:
        kw["choices"] = CHOICES[flag.field]
    group.add_argument(*flag.flags, **kw)


def configs_from_args(args, device) -> tuple[CATConfig, TrainConfig]:
    """The CATConfig and TrainConfig of parsed ``train`` arguments (raises ValueError)."""
    values = {cls: {f.field: getattr(args, f.field) for f in TRAIN_FLAGS if f.config is cls}
              for cls in (CATConfig, TrainConfig)}
    model = values[CATConfig]
    if model["solver"] is None:
        model["solver"] = "rk4-classic" if device.type == "mps" else CATConfig.solver
    train = values[TrainConfig]
    train["models"] = tuple(train["models"])
    return CATConfig(**model), TrainConfig(**train)


# ------------------------------------------------------------------ the parser

def _add_eval_flags(p) -> None:
    p.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    p.add_argument("--eval_windows", type=_positive(int), default=256, metavar="N",
                   help="max validation windows per context length (default: 256)")
    p.add_argument("--lengths", type=_positive(int), nargs="+", default=list(PUBLISHED_LENGTHS),
                   metavar="T", help="context lengths to evaluate (default: 128 512 1024 5000)")
    p.add_argument("--dropout_in_eval", "--dropout-in-eval", action="store_true",
                   help="keep dropout on during evaluation, as the published script does")
    p.add_argument("--batch_tokens", "--batch-tokens", type=_positive(int), default=32768,
                   metavar="N", help="tokens per evaluation batch; 1 = the published batch of one window")
    p.add_argument("--data", default=None,
                   help="path of tiny.txt (default: $CATLIB_DATA, then the user cache, then download)")


def _add_train_parser(sub) -> argparse.ArgumentParser:
    t = sub.add_parser("train", help="train CAT and the baseline side by side, then evaluate",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CPU_HINT,
                       description="Train CAT and the baseline on identical batches and print the "
                                   "published table. Flags and defaults of the published script, "
                                   "except --device (auto).")
    groups = {"published": t.add_argument_group("published flags"),
              "catlib": t.add_argument_group("catlib flags")}
    for flag in TRAIN_FLAGS:
        _add_flag(groups[flag.group], flag)
    _add_eval_flags(groups["published"])
    c = groups["catlib"]
    c.add_argument("--run-dir", default="runs", help="parent directory of the runs (default: runs)")
    c.add_argument("--name", default=None, help="run name (default: <variant>-<config hash>)")
    c.add_argument("--retrain", action="store_true", help="train again even if a finished run matches")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)
    return t


def add_audit_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``audit`` command to ``subparsers``; it sets ``func`` to :func:`cmd_audit`,
    which prints its own errors and returns the exit status."""
    p = subparsers.add_parser("audit", help="measure the ten published defects on a CAT checkpoint",
                              description=AUDIT_DESCRIPTION)
    p.add_argument("path", metavar="PATH",
                   help="a state_dict file of the published CAT (torch.save(model.state_dict(), "
                        "PATH)) or a catlib run directory")
    p.add_argument("--basis", choices=BASES, default=None,
                   help="basis of a state_dict file, which does not record it (default: fourier)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    p.add_argument("--no-nfe", action="store_true",
                   help="skip the dopri5 evaluation count of defect 6 (the slowest measurement)")
    p.set_defaults(func=cmd_audit)
    return p


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m catlib", formatter_class=argparse.RawDescriptionHelpFormatter,
                  description="Train and evaluate the Continuous Attention Transformer beside its "
                              "baseline, as published or corrected, and audit its defects.")
    sub = top.add_subparsers(dest="command", metavar="{train,eval,audit}", parser_class=_Parser)
    t = _add_train_parser(sub)
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


# ------------------------------------------------------------------ the commands

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
    try:
        model_config, train_config = configs_from_args(args, device)
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


def cmd_audit(args, prog: str = "python -m catlib audit") -> int:
    """Run the audit for parsed arguments; 0 on success, 2 (one line on stderr) for bad input."""
    try:
        device = resolve_device(args.device)
        loaded = load_for_audit(args.path, args.basis, device)
        findings = audit_model(loaded.model, loaded.baseline, nfe=not args.no_nfe)
    except (AuditError, DeviceError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(audit_to_json(findings, **loaded.describe()))
        return 0
    c = loaded.model.config
    print(f"CAT audit of {args.path}: D {c.d_model}, {c.n_heads} heads, n_freq {c.n_freq}, "
          f"{c.blocks} block{'s' * (c.blocks > 1)}, Q {c.quad_nodes}, V {c.vocab_size}")
    for note in loaded.notes:
        print(f"note: {note}")
    print(format_audit(findings))
    shown = [f.defect for f in findings if f.shows]
    print(f"shows {len(shown)} of {len(findings)}: {', '.join(map(str, shown)) or 'none'} "
          f"(7 is the evaluation protocol's: catlib evaluates in eval mode)")
    return 0


def _flagify(message: str) -> str:
    """'val_every must ...' -> '--val_every must ...': the messages of CATConfig, TrainConfig
    and check_settings begin with the field; :data:`FLAG_OF` names its flag."""
    field, space, rest = message.partition(" ")
    return f"{FLAG_OF[field]}{space}{rest}" if field in FLAG_OF else message


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
