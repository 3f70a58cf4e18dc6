"""``python -m catlib train|eval|audit|sample``: the published script's command line, plus
runs and text samples of their models.

Bad input (flags, corpus, run directory, device, checkpoint) prints one line on stderr
naming the problem and the fix, and exits with status 2 before anything is written.
Exit status 1: training stopped on a NaN/inf loss; 74 (EX_IOERR): a run file could not be
written (disk full; the last checkpoint is intact, run the command again once there is
space); 130: interrupted (Ctrl-C).

The flags of ``train`` are generated from every field of
:class:`~catlib.nn.config.CATConfig`, :class:`~catlib.train.TrainConfig` and
:class:`~catlib.eval_config.EvalConfig` (:data:`TRAIN_FLAGS`; ``eval`` takes EvalConfig's):
a flag is ``--<field>``, its default the field's default; :data:`LEFT_OUT` names the
fields without a flag and why.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from dataclasses import dataclass

import torch

from . import distributed
from .audit import AuditError, audit_model, audit_to_json, format_audit, load_for_audit
from .nn.config import (BASELINE_POSITIONS, BASES, KERNELS, PENALTIES, PRIOR_KERNELS,
                        SOLVER_NAMES, VARIANTS, CATConfig)
from .data import CORPUS_CHARS, SPLITS, DataError, split_point
from .eval_config import EvalConfig
from .evaluate import check_settings, format_table
from .devices import DEVICES, DeviceError, resolve_device
from .runs import (RunError, RunInterrupted, StorageError, TrainingFailed, evaluate_run,
                   open_run, train_run)
from .sample import MODEL_NAMES, PROMPT_CHARS, sample_run
from .train import MODELS, TrainConfig

CPU_HINT = """\
cost: with no flags this is the published run: dopri5 at rtol 1e-7 / atol 1e-9 with dropout
inside the ODE dynamics, whose adaptive steps make each training step costly on a CPU (the
progress bar's rate and ETA show it; the reproducibility page gives measured times).
Cheaper:
  --solver rk4-classic       the published MPS integrator (fixed steps, no step control)
  --train_steps 200          fewer steps;  --d_model 64 --n_freq 16: a smaller model
  --lengths 128 512 --eval_windows 32   a shorter evaluation
  --budget 15m               stop cleanly at a step boundary after 15 minutes
  --variant causal           the corrected model (causal, dropout outside the dynamics)
e.g.  python -m catlib train --solver rk4-classic --train_steps 200 --eval_windows 32
The book's KERPLE-prior CAT and ALiBi baseline:
  python -m catlib train --variant causal --kernel kerple-prior --models cat --split 90/10
  python -m catlib train --variant causal --baseline_positions alibi --models base --split 90/10
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

# A flag for every field of CATConfig, TrainConfig and EvalConfig: --<field>, its type and
# default the field's, its help below (EvalConfig's from its field metadata). The fields
# of the published script's command line come first, in its order.
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
_FOLLOWS = "default: follows --variant"
CATLIB_FIELDS = {
    # CATConfig
    "variant": "published (every defect kept) or causal (corrected)",
    "quad_nodes": "Gauss-Legendre nodes Q of the attention integral",
    "dropout": "dropout rate of CAT and the baseline",
    "solver": "depth integrator",
    "solver_steps": "steps of the fixed-step solvers rk4-classic and euler",
    "rtol": "dopri5 relative tolerance",
    "atol": "dopri5 absolute tolerance",
    "adjoint": "backpropagate dopri5 through the adjoint ODE",
    "adjoint_seminorm": "the adjoint's step control ignores the parameters' error (seminorm)",
    "max_steps": "cap on dopri5's steps per solve (default: no cap)",
    "causal": f"defect 1 corrected: attention integrates over [0, s] only ({_FOLLOWS})",
    "normalised_integral": f"defect 4 corrected: kernel normalised on the integration "
                           f"interval ({_FOLLOWS})",
    "dropout_in_dynamics": f"defect 6 kept: dropout inside the ODE right-hand side ({_FOLLOWS})",
    "penalty": f"Sobolev penalty formula, defect 9: published or exact ({_FOLLOWS})",
    "half_range_cosine": f"defect 5 corrected: cos(pi k t) basis ({_FOLLOWS})",
    "penalty_once": f"defect 3 corrected: Sobolev weight applied once ({_FOLLOWS})",
    "positional_encoding": f"defect 2 corrected: positions for the baseline ({_FOLLOWS})",
    "logit_dropout": f"dropout on the baseline's logits ({_FOLLOWS})",
    "baseline_positions": "how the baseline sees positions (rope, alibi: --variant causal)",
    "baseline_loops": "RoPE/ALiBi baseline: each layer applied this many times",
    "kernel": "CAT's kernel (all but absolute: --variant causal)",
    "kernel_scale": "c, in tokens: distances enter as log(1 + d / c)",
    "kernel_horizon": "D, in tokens: the distance map reaches 1 at d = D",
    "kernel_residual": "prior kernels: learn the spectral residual (--no-kernel_residual: the "
                       "prior alone)",
    "train_length": "T_train of the prior kernels, below which the residual lives "
                    "(default: --seq)",
    # TrainConfig
    "seed": "seed of torch, numpy, python and the sampler",
    "split": "corpus split: published (50000 training characters) or 90/10",
    "models": "the models to train: cat, base or both",
    "budget": "wall-clock limit of training: 90, 90s, 15m, 1.5h; stops at a step boundary",
    "val_every": "validate every N steps on a few windows of length --seq (0: never)",
    "val_windows": "windows of length --seq per validation",
    "checkpoint_every": "steps between checkpoints",
    "log_every": "steps between the published progress lines",
}
# Fields without a flag, on purpose, and why.
LEFT_OUT = {
    "vocab_size": "set by the corpus: it must equal the vocabulary of tiny.txt",
    "curve_windows": "train and eval score no per-position curve (the book's experiment does)",
}
CHOICES = {"basis": BASES, "variant": VARIANTS, "solver": SOLVER_NAMES, "split": SPLITS,
           "models": MODELS, "penalty": PENALTIES, "baseline_positions": BASELINE_POSITIONS,
           "kernel": KERNELS}
ALIASES = {"val_every": ("--val-every",), "checkpoint_every": ("--checkpoint-every",),
           "batch_tokens": ("--batch-tokens",), "dropout_in_eval": ("--dropout-in-eval",)}
PARSERS = {"budget": _budget}          # argparse types that the field's type does not give
# Defaults the command line decides, and how its help says them: the solver is resolved
# with the device (resolve_solver), the prior kernels' train_length follows --seq.
CLI_DEFAULTS = {"solver": (None, "the published choice, dopri5; rk4-classic on mps")}
DEFAULT_WORDS = {"budget": "no limit"}
METAVARS = {int: "N", float: "X"} | {"budget": "TIME", "lengths": "T"}
# EvalConfig's flags, shared by train and eval.
EVAL_CONFIGS = (EvalConfig,)


@dataclass(frozen=True)
class Flag:
    """One generated flag: the config class and field it sets, and its argparse
    spelling, type and default."""

    config: type
    field: str
    help: str
    group: str
    flags: tuple
    default: object
    kind: object
    optional: bool = False   # the field accepts None (``| None``)


def _plain_type(config: type, name: str) -> tuple[object, bool]:
    """The field's type without ``| None``, and whether it had ``| None``."""
    kind = typing.get_type_hints(config)[name]
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = typing.get_args(kind)
        return next(a for a in args if a is not type(None)), type(None) in args
    return kind, False


def _field_help(f: dataclasses.Field) -> str:
    return f.metadata.get("help") or PUBLISHED_FIELDS.get(f.name) or CATLIB_FIELDS[f.name]


def _generate_flags(configs=(CATConfig, TrainConfig, EvalConfig)) -> tuple[Flag, ...]:
    made = []
    for cls in configs:
        for f in dataclasses.fields(cls):
            if f.name in LEFT_OUT:
                continue
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            kind, optional = _plain_type(cls, f.name)
            group = "published" if f.name in PUBLISHED_FIELDS else \
                "evaluation" if cls in EVAL_CONFIGS else "catlib"
            made.append(Flag(cls, f.name, _field_help(f), group,
                             (f"--{f.name}", *ALIASES.get(f.name, ())), default, kind, optional))
    order = list(PUBLISHED_FIELDS)
    return tuple(sorted(made, key=lambda f: order.index(f.field) if f.field in order
                        else len(order)))


TRAIN_FLAGS = _generate_flags()
EVAL_FLAGS = tuple(f for f in TRAIN_FLAGS if f.config in EVAL_CONFIGS)
# Field -> its flag, for the messages of CATConfig, TrainConfig and check_settings, which
# name the field.
FLAG_OF = {f.field: f.flags[0] for f in TRAIN_FLAGS}


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
    text = flag.help if "(default:" in flag.help else f"{flag.help} (default: {words})"
    kw = dict(dest=flag.field, default=default, help=text)
    if flag.kind is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif flag.kind is tuple:
        kw.update(nargs="+", default=list(default))
        if flag.config in EVAL_CONFIGS:
            kw.update(type=_positive(int), metavar=METAVARS.get(flag.field))
    elif flag.kind is not str:
        kind = _positive(flag.kind) if flag.config in EVAL_CONFIGS else flag.kind
        kw.update(type=PARSERS.get(flag.field, kind),
                  metavar=METAVARS.get(flag.field, METAVARS.get(flag.kind)))
    if flag.field in CHOICES:
        kw["choices"] = CHOICES[flag.field]
    group.add_argument(*flag.flags, **kw)


def resolve_solver(model: dict, device: torch.device) -> dict:
    """``model`` (CATConfig fields) with ``solver`` None resolved for ``device``: the
    published MPS path, rk4-classic, on MPS; else CATConfig's default, dopri5."""
    if model.get("solver") is None:
        model = {**model, "solver": "rk4-classic" if device.type == "mps" else CATConfig.solver}
    return model


def evaluation_from_args(args) -> EvalConfig:
    """The EvalConfig of parsed ``train`` or ``eval`` arguments."""
    return EvalConfig(**{f.field: getattr(args, f.field) for f in EVAL_FLAGS})


def configs_from_args(args, device) -> tuple[CATConfig, TrainConfig, EvalConfig]:
    """The CATConfig, TrainConfig and EvalConfig of parsed ``train`` arguments (raises
    ValueError). A prior kernel's ``train_length`` follows ``--seq`` unless given."""
    values = {cls: {f.field: getattr(args, f.field) for f in TRAIN_FLAGS if f.config is cls}
              for cls in (CATConfig, TrainConfig)}
    model = resolve_solver(values[CATConfig], device)
    train = values[TrainConfig]
    train["models"] = tuple(train["models"])
    if model["kernel"] in PRIOR_KERNELS and model["train_length"] is None:
        model["train_length"] = train["seq"]
    return CATConfig(**model), TrainConfig(**train), evaluation_from_args(args)


# ------------------------------------------------------------------ the parser

def _add_eval_flags(p, groups: dict | None = None) -> None:
    p.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    for flag in EVAL_FLAGS:
        _add_flag(groups["evaluation"] if groups else p, flag)
    p.add_argument("--data", default=None,
                   help="path of tiny.txt (default: $CATLIB_DATA, then the user cache, then download)")


def _add_train_parser(sub) -> argparse.ArgumentParser:
    t = sub.add_parser("train", help="train CAT and the baseline side by side, then evaluate",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CPU_HINT,
                       description="Train CAT and the baseline on identical batches and print the "
                                   "published table. Flags and defaults of the published script, "
                                   "except --device (auto).")
    groups = {"published": t.add_argument_group("published flags"),
              "catlib": t.add_argument_group("catlib flags"),
              "evaluation": t.add_argument_group("evaluation flags")}
    for flag in TRAIN_FLAGS:
        if flag.config not in EVAL_CONFIGS:
            _add_flag(groups[flag.group], flag)
    _add_eval_flags(groups["published"], groups)
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


def _add_sample_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("sample", help="text written by a trained model of a run",
                       description="Print text that a finished run's model writes after a "
                                   "prompt, in eval mode; the same seed gives the same text.")
    s.add_argument("run_dir", help="a finished run directory, e.g. runs/causal-1a2b3c4d")
    s.add_argument("--model", choices=MODEL_NAMES, default="cat",
                   help="the run's model: cat or base, the baseline (default: cat)")
    s.add_argument("--chars", type=_positive(int), default=600, metavar="N",
                   help="characters to write (default: 600)")
    s.add_argument("--prompt", default=None, help=f"the text to continue (default: the first "
                   f"{PROMPT_CHARS} characters of the run's validation split)")
    s.add_argument("--temperature", type=float, default=1.0, metavar="X",
                   help="softmax temperature; 0: the most likely character (default: 1)")
    s.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the draws (default: 0)")
    s.add_argument("--device", default="auto",
                   help="auto (cuda, then mps, then cpu), cpu, cuda or mps (default: auto)")
    s.add_argument("--data", default=None,
                   help="path of tiny.txt (default: $CATLIB_DATA, then the user cache, then download)")
    s.set_defaults(func=cmd_sample)
    return s


def build_parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m catlib", formatter_class=argparse.RawDescriptionHelpFormatter,
                  description="Train and evaluate the Continuous Attention Transformer beside its "
                              "baseline, as published or corrected, audit its defects, and "
                              "print text its models write.")
    sub = top.add_subparsers(dest="command", metavar="{train,eval,audit,sample}", parser_class=_Parser)
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
    s = _add_sample_parser(sub)
    top.epilog = "\n".join(p.format_help() for p in (t, e, a, s))
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
        model_config, train_config, evaluation = configs_from_args(args, device)
        causal = model_config.resolved().causal
        train_config.validate(split_point(CORPUS_CHARS, args.split), causal)
        check_settings(evaluation.lengths, evaluation.eval_windows, evaluation.batch_tokens,
                       causal, evaluation.leak_length)
        distributed.check_batch(args.batch)  # under torchrun: --batch is the global batch
        device = distributed.setup(device)   # torchrun (WORLD_SIZE > 1): the process group
    except ValueError as err:
        raise RunError(_flagify(str(err))) from None
    try:
        run = train_run(model_config, train_config, root=args.run_dir, name=args.name,
                        device=device, data=args.data, retrain=args.retrain,
                        evaluation=evaluation, progress=not args.no_progress)
    finally:
        distributed.teardown()
    if run is None:  # a rank other than 0 under torchrun: rank 0 reports
        return 0
    print(_report(run.result))
    print(f"run: {run.path}")
    return 0


def cmd_eval(args) -> int:
    run = open_run(args.run_dir)
    ev = evaluation_from_args(args)
    try:
        check_settings(ev.lengths, ev.eval_windows, ev.batch_tokens,
                       run.model_config.resolved().causal, ev.leak_length)
    except ValueError as err:
        raise RunError(_flagify(str(err))) from None
    status = run.status
    if status.get("status") != "finished":
        print(f"note: run is {status.get('status')} at step {status.get('step')} of "
              f"{run.config['train']['train_steps']}; evaluating its last checkpoint", file=sys.stderr)
    result = evaluate_run(run, ev.lengths, ev.eval_windows, ev.dropout_in_eval,
                          ev.batch_tokens, resolve_device(args.device), leak_length=ev.leak_length,
                          data=args.data, allow_other_code=args.allow_other_code)
    print(_report(result))
    return 0


def cmd_sample(args) -> int:
    if args.temperature < 0:
        raise RunError(f"--temperature must be >= 0, got {args.temperature}")
    print(sample_run(args.run_dir, args.chars, args.prompt, args.model, args.temperature,
                     args.seed, resolve_device(args.device), data=args.data))
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
        print(f"{prog}: error: choose a command, train, eval, audit or sample; see `{prog} --help`", file=sys.stderr)
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
