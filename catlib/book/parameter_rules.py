"""The rules of the notebooks' parameters: :func:`check_parameters` reads the values of a
``parameters`` cell (those papermill injected included) and stops an invalid one (a
negative size, an unknown device, a string where a number belongs) with one line naming
the parameter and the fix; :data:`PARAMETERS` says what each parameter of the book accepts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..common.devices import DeviceError, resolve_device
from ..nn.bases import BASIS_NAMES
from ..nn.config import SOLVER_NAMES


class ParameterError(ValueError):
    """A notebook parameter that the page cannot run with; the message names it and the fix.

    Shown as that one line (IPython's ``_render_traceback_``), not as a traceback into
    this module: the reader's fix is the ``-p NAME VALUE`` of the message.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class Rule:
    """What one parameter accepts: ``kind`` (``int``, ``float``, ``str``, ``bool``, or a
    list of ``int``/``float`` as ``"ints"``/``"floats"``), the smallest value ``low``
    (``None``: any), whether ``low`` itself is allowed, the largest ``high`` and whether it
    is allowed, the allowed strings ``choices`` and an ``example`` value for the message.
    A number is finite."""

    kind: str
    low: float | None = None
    low_ok: bool = True
    high: float | None = None          # upper bound, exclusive unless high_ok (dropout < 1)
    high_ok: bool = False
    choices: tuple[str, ...] = ()
    example: object = None

    def need(self) -> str:
        """The values this rule accepts, in words."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        what = {"int": "an integer", "float": "a number", "str": "a string", "bool": "True or False",
                "ints": "a non-empty list of integers",
                "floats": "a non-empty list of numbers"}[self.kind]
        if self.low is not None:
            what += f" {'>=' if self.low_ok else '>'} {self.low:g}"
            if self.kind in ("ints", "floats"):
                what += " each"
        if self.high is not None:
            what += f" and {'<=' if self.high_ok else '<'} {self.high:g}"
        return what


def _size(example):      # a count or a length: an integer >= 1
    return Rule("int", 1, example=example)


def _sizes(example):     # a list of counts or lengths
    return Rule("ints", 1, example=example)


def _positive(example):  # a rate, a tolerance, a scale: a number > 0
    return Rule("float", 0, low_ok=False, example=example)


# Every parameter of the book's notebooks and what it accepts (tests/test_notebook_params.py
# checks that each notebook's parameters cell declares only names listed here).
PARAMETERS: dict[str, Rule] = {
    "device": Rule("str", example="cpu"),                  # resolved by catlib.common.devices
    "profile": Rule("str", example="cpu"),                  # a label of the runs' folder
    "figure_dir": Rule("str", example='""'),
    "seed": Rule("int", 0, example=0),
    "seeds": Rule("ints", 0, example=[0, 1, 2]),
    "published_seeds": Rule("ints", 0, example=[0]),
    "fit_basis": Rule("str", choices=BASIS_NAMES, example="cosine"),
    "solver": Rule("str", choices=SOLVER_NAMES, example="rk4-classic"),
    "study_solver": Rule("str", choices=SOLVER_NAMES, example="euler"),
    "published_protocol": Rule("bool", example=True),
    "extra_rows": Rule("bool", example=True),
    "dropout": Rule("float", 0, high=1, example=0.0),
    "coeff_scale": _positive(1.0),
    "noise": Rule("float", 0, example=1.5),
    "sob_lambda": Rule("float", 0, example=5e-7),
    "penalty_weights": Rule("floats", 0, example=[0.0, 1e-6, 1e-4]),
    "dopri5_rtols": Rule("floats", 0, low_ok=False, example=[1e-3, 1e-5]),
    "euler_steps": _sizes([1, 2, 4, 8]),
    "rk4_steps": _sizes([1, 2, 4]),
    "lengths": _sizes([128, 512, 1024, 5000]),
    "quad_nodes": Rule("int", 2, example=64),      # a rule of one node has no trapezoid
    "q_max": Rule("int", 2, example=512),
    "val_every": Rule("int", 0, example=50),
    "split_val_every": Rule("int", 1, example=10),   # the split study draws validation curves
    "study_share": Rule("float", 0, high=1, high_ok=True, example=0.5),  # the sampler's range
    "study_periods": _sizes([8, 112]),
    "study_batch": _size(20),
    "copy_distances": Rule("ints", 2, example=[32, 100, 400]),
    **{name: _positive(example) for name, example in (
        ("lr", 4e-3), ("brief_lr", 1e-3), ("split_lr", 4e-3), ("check_rtol", 1e-7),
        ("check_atol", 1e-9), ("leak_tolerance", 1e-6))},
    **{name: _size(example) for name, example in (
        ("n_freq", 32), ("n_heads", 4), ("grid", 128),
        ("conv_length", 256), ("fit_steps", 600), ("train_steps", 500), ("d_model", 64),
        ("blocks", 1), ("solver_steps", 1), ("seq", 64), ("batch", 4), ("eval_windows", 16),
        ("curve_windows", 8), ("refine_windows", 8), ("val_windows", 8), ("check_windows", 8),
        ("dropout_max_steps", 600), ("published_batch", 32), ("published_max_steps", 40),
        ("step_repeats", 2), ("long_length", 5000), ("dopri5_max_steps", 600),
        ("brief_steps", 200), ("dropout_repeats", 3), ("split_d_model", 128),
        ("split_n_heads", 8), ("split_steps", 500), ("split_batch", 20), ("split_seq", 128),
        ("sample_chars", 400), ("study_blocks", 2), ("copy_passages", 8),
        ("dial_windows", 2), ("gain_windows", 7))},
}

# Pairs (a, b) with a <= b: the split study validates at least once.
AT_MOST = (("split_val_every", "split_steps"),)

# Pairs (width, heads) that must divide: a head has d_model / n_heads channels.
HEAD_PAIRS = (("d_model", "n_heads"), ("split_d_model", "split_n_heads"))


def _fails(rule: Rule, value) -> bool:
    """Whether ``value`` breaks ``rule`` (its type, its bounds, its choices)."""
    def number_ok(x, integer: bool) -> bool:
        if isinstance(x, bool) or not isinstance(x, int if integer else (int, float)):
            return False                                  # True is not 1, 8.0 is not 8
        if not math.isfinite(x):                          # NaN, inf
            return False
        above = rule.low is None or (x >= rule.low if rule.low_ok else x > rule.low)
        return above and (rule.high is None or (x <= rule.high if rule.high_ok else x < rule.high))

    if rule.kind in ("int", "float"):
        return not number_ok(value, rule.kind == "int")
    if rule.kind in ("ints", "floats"):
        return (not isinstance(value, (list, tuple)) or not value
                or not all(number_ok(x, rule.kind == "ints") for x in value))
    if rule.kind == "bool":
        return not isinstance(value, bool)
    return not isinstance(value, str) or (bool(rule.choices) and value not in rule.choices)


def _check_device(name: str) -> None:
    """A one-line :class:`ParameterError` for a device name that is unknown, or known but
    absent from this machine (:func:`catlib.common.devices.resolve_device` decides)."""
    try:
        kind = "auto" if name == "auto" else torch.device(name).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in ("auto", "cpu", "cuda", "mps"):
        raise ParameterError(f"parameter device = {name!r} is unknown: it must be auto, cpu, "
                             "cuda (cuda:N) or mps; run with e.g. -p device cpu")
    try:
        resolve_device(name)
    except DeviceError:
        raise ParameterError(f"parameter device = {name!r}: this machine has no {kind.upper()} "
                             "device; run with -p device cpu (or auto)") from None


def _check_study(values: dict) -> None:
    """The study's batches by the sampler's rule (:func:`catlib.data.check_repeats`, with
    the batch), named as the notebook parameters: ``study_periods`` is [lo, hi], lo <= hi <=
    seq, and ``study_share`` of the study's batch (``study_batch``, else ``batch``) rounds
    to at least one repeated window."""
    from ..data import check_repeats

    periods, seq = values["study_periods"], values.get("seq")
    batch = values.get("study_batch") or values.get("batch")     # the study's own, if set
    share = values.get("study_share", 1.0)
    try:
        check_repeats(1.0, tuple(periods), seq if seq is not None else max(periods))
    except ValueError:
        raise ParameterError(f"parameter study_periods = {periods!r} is invalid: it must be "
                             f"[lo, hi] with lo <= hi <= seq ({seq}); run with e.g. "
                             f"-p study_periods '[8, {seq or 112}]'") from None
    try:
        check_repeats(share, tuple(periods), seq if seq is not None else max(periods), batch)
    except ValueError:
        raise ParameterError(f"parameter study_share = {share!r} is invalid: of a batch of "
                             f"{batch} it rounds to no repeated window; run with e.g. "
                             f"-p study_share {1 / batch:.3g}") from None


def check_parameters(values: dict, even_heads: bool = False) -> None:
    """Stop at the first invalid parameter among ``values`` (a page passes ``globals()``
    right after its ``parameters`` cell) with a one-line :class:`ParameterError` naming
    it and the fix.

    Checks each name of :data:`PARAMETERS` present in ``values``: its type, its range or
    choices; that ``device`` names a device of this machine; that ``n_heads`` divides
    ``d_model`` (and ``split_n_heads`` ``split_d_model``); that ``split_val_every`` is at
    most ``split_steps``; that ``study_periods`` is [lo, hi] within ``seq`` and that
    ``study_share`` of the study's batch rounds to at least one repeated window; with
    ``even_heads`` (a page that trains the RoPE baseline) that
    ``d_model / n_heads`` is even.
    """
    for name, rule in PARAMETERS.items():
        if name in values and _fails(rule, values[name]):
            raise ParameterError(f"parameter {name} = {values[name]!r} is invalid: it must be "
                                 f"{rule.need()}; run with e.g. -p {name} {rule.example}")
    if "device" in values:
        _check_device(values["device"])
    for small, large in AT_MOST:
        if small in values and large in values and values[small] > values[large]:
            raise ParameterError(f"parameter {small} = {values[small]} is larger than {large} = "
                                 f"{values[large]}; run with e.g. -p {small} {values[large]}")
    if "study_periods" in values:
        _check_study(values)
    for width, heads in HEAD_PAIRS:
        if width in values and heads in values:
            d, h = values[width], values[heads]
            even = even_heads and width == "d_model"
            fits = lambda k: d % k == 0 and not (even and (d // k) % 2)  # noqa: E731
            if not fits(h):
                need = "divide it" + (", leaving an even d_model / n_heads (RoPE)" if even else "")
                fix = max((k for k in range(1, min(h, d) + 1) if fits(k)), default=1)
                raise ParameterError(f"parameters {width} = {d} and {heads} = {h} do not fit: "
                                     f"{heads} must {need}; run with e.g. -p {heads} {fix}")
