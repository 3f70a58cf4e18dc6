"""``python -m catlib train|eval|audit|sample``: the published script's command line, plus
runs and text samples of their models.

Bad input (flags, corpus, run directory, device, checkpoint) prints one line on stderr
naming the problem and the fix, and exits with status 2 before anything is written.
Exit status 1: training stopped on a NaN/inf loss; 74 (EX_IOERR): a run file could not be
written (disk full; the last checkpoint is intact, run the command again once there is
space); 130: interrupted (Ctrl-C).

The flags of ``train`` are generated from every field of
:class:`~catlib.nn.config.CATConfig`, :class:`~catlib.training.loop.TrainConfig` and
:class:`~catlib.measure.config.EvalConfig` (``eval`` takes EvalConfig's), in
:mod:`catlib.cli.flags`: a flag is ``--<field>``, its default the field's default;
``LEFT_OUT`` there names the fields without a flag and why.
"""
from __future__ import annotations

import argparse
import sys

from ..training import distributed
from ..audit import AuditError, audit_model, audit_to_json, format_audit, load_for_audit
from .flags import (CATLIB_FIELDS, EVAL_CONFIGS, EVAL_FLAGS, FLAG_OF, LEFT_OUT,  # noqa: F401
                        PUBLISHED_FIELDS, TRAIN_FLAGS, Flag, _add_flag, _positive,
                        add_corpus_flag, configs_from_args, evaluation_from_args)
from ..nn.config import BASES
from ..data import CORPUS_CHARS, SPLITS, DataError, split_point
from ..measure.evaluate import check_settings, format_table
from ..common.devices import DEVICES, DeviceError, resolve_device
from ..runs import (RunError, RunInterrupted, StorageError, TrainingFailed, evaluate_run,
                   open_run, train_run)
from .sample import MODEL_NAMES, PROMPT_CHARS, check_sampling, sample_run

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
    add_corpus_flag(c)
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
        model_config, train_config, evaluation = configs_from_args(args)
        causal = model_config.resolved().causal
        # Tiny Shakespeare's training characters bound --seq here; the code corpus's, once
        # train_run has read it (it checks SymPy first).
        n_train = (split_point(CORPUS_CHARS, train_config.split)
                   if train_config.split in SPLITS else None)
        train_config.validate(n_train, causal)
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
                          data=args.data, allow_other_code=args.allow_other_code,
                          span_length=ev.span_length)
    print(_report(result))
    return 0


def cmd_sample(args) -> int:
    try:
        check_sampling(args.temperature, args.seed)
    except ValueError as err:   # "temperature must ..." -> "--temperature must ..."
        raise RunError(f"--{err}") from None
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
