"""The flags of ``python -m catlib train`` and ``eval``, generated from the config fields.

Every field of :class:`~catlib.nn.config.CATConfig`, :class:`~catlib.training.loop.TrainConfig`
and :class:`~catlib.measure.config.EvalConfig` is a flag ``--<field>`` (:data:`TRAIN_FLAGS`),
with the field's type and default; its help is the text below, the one home of every
flag's help (:data:`PUBLISHED_FIELDS`, :data:`CATLIB_FIELDS`). :data:`LEFT_OUT` names the fields without a flag
and why. :func:`configs_from_args` turns parsed arguments back into the three configs.
One flag is no field: ``--corpus`` (:func:`add_corpus_flag`), which picks the split
(:func:`chosen_split`) and with it the models' ``vocab_size``.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from dataclasses import dataclass


from ..data import ALL_SPLITS, CORPORA, check_corpus, corpus_of, vocab_size
from ..measure.config import EvalConfig
from ..nn.config import (BASELINE_BLOCKS, BASELINE_POSITIONS, BASES, PENALTIES, SOLVER_NAMES,
                        VARIANTS, CATConfig)
from ..nn.kernel_choice import KERNELS, TRAIN_LENGTH_KERNELS
from ..training.optim import DECAY_ON
from ..training.config import MODELS, TrainConfig
from ..training.schedule import SCHEDULES


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


# A flag for every field of CATConfig, TrainConfig and EvalConfig: --<field>, its type and
# default the field's, its help below. The fields
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
    "solver_steps": "steps of the fixed-step solvers rk4-classic, midpoint and euler",
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
    "baseline_loop_scale": "looped RoPE/ALiBi baseline: each application adds 1/baseline_loops "
                           "of each sublayer's update (forward Euler in depth)",
    "baseline_block": "RoPE/ALiBi baseline's layer: post-ln-relu (post-norm, ReLU: the "
                      "published layer) or pre-ln-gelu (pre-norm, GELU, final LayerNorm: "
                      "nanoGPT's)",
    "kernel": "CAT's kernel (all but absolute: --variant causal)",
    "kernel_scale": "c, in tokens: distances enter as log(1 + d / c)",
    "kernel_horizon": "D, in tokens: the distance map reaches 1 at d = D",
    "kernel_residual": "prior kernels: learn the spectral residual (--no-kernel_residual: the "
                       "prior alone)",
    "train_length": "T_train of the prior kernels, below which the residual lives, and "
                    "of FIRE, whose threshold L starts at a quarter of it (default: --seq)",
    "far_heads": "prior kernels: the last N heads have no prior (the residual alone, flat "
                 "beyond --train_length) and log-length scaled scores beyond it",
    "attention_residual": "CAT block: the dynamics add the attention's output itself, "
                          "a + FF(LN(h + a)), not only through the feed-forward network",
    "train_solver_steps": "ODE-consistent training: each training step of CAT draws the "
                          "fixed-step solver's step count from these, e.g. 1 2; the largest "
                          "must be --solver_steps, which validation and evaluation use "
                          "(default: train with --solver_steps)",
    # TrainConfig
    "seed": "seed of torch, numpy, python and the sampler",
    "split": "corpus split: published (50000 training characters) or 90/10 of tiny, files "
             "of code (see --corpus)",
    "models": "the models to train: cat, base or both",
    "budget": "wall-clock limit of training: 90, 90s, 15m, 1.5h; stops at a step boundary",
    "val_every": "validate every N steps on a few windows of length --seq (0: never)",
    "val_windows": "windows of length --seq per validation",
    "checkpoint_every": "steps between checkpoints",
    "log_every": "steps between the published progress lines",
    "repeat_share": "share of each training batch made of a passage repeated to --seq "
                    "(the copy study; 0: plain text)",
    "repeat_periods": "lo hi: the repeated passage's length r, drawn from [lo, hi], hi <= --seq",
    "deterministic": "deterministic kernels only (torch.use_deterministic_algorithms; "
                     "bitwise-repeatable runs on CUDA, at some speed)",
    "checkpoints": "steps after which the run also keeps its models' weights "
                   "(ladder-<step>-<model>.pt: the run stopped there, the learning rate being "
                   "constant), e.g. 250 500",
    "schedule": "learning-rate schedule: constant (the published loop) or wsd (linear "
                "warm-up, the constant rate, a linear decay to zero at the end)",
    "warmup": "with --schedule wsd: steps of linear warm-up",
    "decay_share": "with --schedule wsd: the share of the run whose rate decays linearly to zero",
    "penalty_horizon": "steps the Sobolev weight's schedule runs over (default: the published "
                       "--train_steps of each run; with --branches and a CAT, this run's "
                       "--train_steps as a number; a number: the same schedule for every run "
                       "length)",
    "branches": "with --schedule wsd: shorter run lengths to branch from this run where their "
                "decay starts (each trained as its own run, <name>-to-<steps>, once this run "
                "has finished, within what it left of --budget), e.g. 250 500",
    "weight_decay_on": "what AdamW's weight decay (0.01) acts on: all (every parameter, the "
                       "published optimiser) or matrices (weights of linear maps and embeddings "
                       "only) (default: follows --variant: published all, causal matrices)",
    # EvalConfig
    "lengths": "context lengths to evaluate",
    "eval_windows": "max validation windows per context length",
    "batch_tokens": "tokens per evaluation batch; 1 = the published batch of one window",
    "leak_length": "sequence length of the leak score",
    "dropout_in_eval": "keep dropout on during evaluation, as the published script does",
    "span_length": "every length reads the same text: the span of the validation split that "
                   "the windows of this length tile, windows spread evenly over it (the book's "
                   "protocol; e.g. 5000)",
}
# Fields without a flag, on purpose, and why.
LEFT_OUT = {
    "vocab_size": "set by the corpus (--corpus, --split): it must equal its vocabulary",
    "curve_windows": "train and eval score no per-position curve (the book's experiment does)",
}
CHOICES = {"basis": BASES, "variant": VARIANTS, "solver": SOLVER_NAMES, "split": ALL_SPLITS,
           "models": MODELS, "penalty": PENALTIES, "baseline_positions": BASELINE_POSITIONS,
           "kernel": KERNELS, "weight_decay_on": DECAY_ON, "baseline_block": BASELINE_BLOCKS,
           "schedule": SCHEDULES}
ALIASES = {"val_every": ("--val-every",), "checkpoint_every": ("--checkpoint-every",),
           "batch_tokens": ("--batch-tokens",), "dropout_in_eval": ("--dropout-in-eval",)}
PARSERS = {"budget": _budget}          # argparse types that the field's type does not give
# How the help says a default that is None: the solver is resolved with the device
# (CATConfig.resolved, in train_run); the prior kernels' train_length follows --seq.
DEFAULT_WORDS = {"budget": "no limit", "split": "published; files with --corpus code",
                 "solver": "the published choice, dopri5; rk4-classic on mps",
                 "span_length": "the published protocol, the first windows at each length"}
METAVARS = {int: "N", float: "X"} | {"budget": "TIME", "lengths": "T"}
# The fields whose flag, left out, follows another flag: --split follows --corpus.
FOLLOWING = ("split",)
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
    return PUBLISHED_FIELDS.get(f.name) or CATLIB_FIELDS[f.name]


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


class _Given(argparse.Action):
    """argparse's store that also notes the flag as given (``args.given``, a set of
    fields): a flag of :data:`FOLLOWING` left out follows another one."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", set()) | {self.dest}


def add_corpus_flag(group) -> None:
    """``--corpus {tiny,code}`` (default: the corpus of ``--split``)."""
    group.add_argument("--corpus", choices=tuple(CORPORA), default=None,
                       help="the corpus: tiny (Tiny Shakespeare) or code (the pinned SymPy's "
                            "Python source, split by file: --split files, its own vocabulary) "
                            "(default: the corpus of --split, tiny)")


def chosen_split(corpus: str | None, split: str, given: bool) -> str:
    """The split that ``--corpus`` and ``--split`` pick: ``split`` where no corpus is named;
    the corpus's first split (tiny: published, code: files) where ``--split`` is not
    ``given``; ValueError (one line) where the split given is another corpus's."""
    if corpus is None:
        return split
    splits = CORPORA[check_corpus(corpus)]
    if not given:
        return splits[0]
    if split not in splits:
        raise ValueError(f"split {split} is not a split of --corpus {corpus}, whose splits "
                         f"are {', '.join(splits)}; leave --split out, or pass --corpus "
                         f"{corpus_of(split)}")
    return split


def _add_flag(group, flag: Flag) -> None:
    default = flag.default
    words = DEFAULT_WORDS.get(flag.field) or _shown(default)
    text = flag.help if "(default:" in flag.help else f"{flag.help} (default: {words})"
    kw = dict(dest=flag.field, default=default, help=text)
    if flag.kind is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif flag.kind is tuple or typing.get_origin(flag.kind) is tuple:
        kw.update(nargs="+", default=None if default is None else list(default))
        if flag.config in EVAL_CONFIGS or typing.get_args(flag.kind)[:1] == (int,):
            kw.update(type=_positive(int), metavar=METAVARS.get(flag.field, "N"))
    elif flag.kind is not str:
        kind = _positive(flag.kind) if flag.config in EVAL_CONFIGS else flag.kind
        kw.update(type=PARSERS.get(flag.field, kind),
                  metavar=METAVARS.get(flag.field, METAVARS.get(flag.kind)))
    if flag.field in CHOICES:
        kw["choices"] = CHOICES[flag.field]
    if flag.field in FOLLOWING:
        kw["action"] = _Given
    group.add_argument(*flag.flags, **kw)


def evaluation_from_args(args) -> EvalConfig:
    """The EvalConfig of parsed ``train`` or ``eval`` arguments."""
    return EvalConfig(**{f.field: getattr(args, f.field) for f in EVAL_FLAGS})


def configs_from_args(args) -> tuple[CATConfig, TrainConfig, EvalConfig]:
    """The CATConfig, TrainConfig and EvalConfig of parsed ``train`` arguments (raises
    ValueError). A prior kernel's ``train_length`` follows ``--seq`` unless given; the
    split follows ``--corpus`` (:func:`chosen_split`) and ``vocab_size`` the split's corpus."""
    values = {cls: {f.field: getattr(args, f.field) for f in TRAIN_FLAGS if f.config is cls}
              for cls in (CATConfig, TrainConfig)}
    model = values[CATConfig]     # solver None: train_run resolves it with the device
    train = values[TrainConfig]
    train["split"] = chosen_split(getattr(args, "corpus", None), train["split"],
                                  "split" in getattr(args, "given", ()))
    model["vocab_size"] = vocab_size(corpus_of(train["split"]))   # tiny: CATConfig's default
    train["models"] = tuple(train["models"])
    if model["kernel"] in TRAIN_LENGTH_KERNELS and model["train_length"] is None:
        model["train_length"] = train["seq"]
    # A CAT's branches need its Sobolev weight on absolute steps (TrainConfig.validate):
    # --branches sets it over this run's steps unless given (this run's weights unchanged).
    if train["branches"] and "cat" in train["models"] and train["penalty_horizon"] is None:
        train["penalty_horizon"] = train["train_steps"]
    return CATConfig(**model), TrainConfig(**train), evaluation_from_args(args)
