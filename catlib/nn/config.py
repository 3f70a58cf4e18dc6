"""CATConfig: one dataclass for CAT and its baseline.

Defaults are the published script's defaults. ``variant`` chooses between the
published prototype (every defect kept) and the corrected, causal CAT; each
correction is also its own field so that an ablation can switch one at a time.
A correction left at ``None`` follows the variant.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .kernel_choice import check_kernel, unread_defaults
# The kernels' names live in kernel_choice (their home); importable from here as before.
from .kernel_choice import KERNELS as KERNELS  # noqa: F401
from .kernel_choice import LEARNED_BIASES as LEARNED_BIASES  # noqa: F401
from .kernel_choice import PRIOR_KERNELS as PRIOR_KERNELS  # noqa: F401
from .kernel_choice import TRAIN_LENGTH_KERNELS as TRAIN_LENGTH_KERNELS  # noqa: F401

BASES = ("fourier", "cheb")
VARIANTS = ("published", "causal")
SOLVER_NAMES = ("dopri5", "rk4-classic", "midpoint", "euler")
# The depth solver of a config that names none, by device type: the published script's
# dopri5, and on MPS (no float64 there) the published script's own fixed-step RK4.
DEFAULT_SOLVER = {"mps": "rk4-classic"}


def default_solver(device=None) -> str:
    """The solver of a config with ``solver=None`` on ``device`` (a torch.device, a string
    or None for the CPU): :data:`DEFAULT_SOLVER`, else "dopri5"."""
    kind = getattr(device, "type", None) or (str(device).split(":")[0] if device else "cpu")
    return DEFAULT_SOLVER.get(kind, "dopri5")
FIXED_STEP_SOLVERS = ("rk4-classic", "midpoint", "euler")   # their step count is ``solver_steps``
PENALTIES = ("published", "exact")
# How the baseline sees positions: added sinusoids, rotary q/k (RoPE) or an ALiBi score bias.
BASELINE_POSITIONS = ("sinusoidal", "rope", "alibi")
# The RoPE/ALiBi baseline's layer: post-norm with ReLU (nn.TransformerEncoderLayer's, the
# published baseline's; the default) or pre-norm with GELU and a final LayerNorm (nanoGPT's).
BASELINE_BLOCKS = ("post-ln-relu", "pre-ln-gelu")

# The corrections of the published defects (the audit chapter measures each one):
# field -> (published value, corrected value).
CORRECTIONS = {
    "causal": (False, True),               # defect 1: attention integrates over [0, s] only
    "normalised_integral": (False, True),  # defect 4: kernel normalised on the integration interval
    "dropout_in_dynamics": (True, False),  # defect 6: dropout moved outside the ODE right-hand side
    "penalty": ("published", "exact"),     # defect 9: true H^2-type seminorm of the expansion
    "half_range_cosine": (False, True),    # defect 5: cos(pi k t), so t = 0 and t = 1 differ
    "penalty_once": (False, True),         # defect 3: Sobolev weight applied once in the loss
    "positional_encoding": (False, True),  # defect 2: sinusoidal positions for the baseline
    "logit_dropout": (True, False),        # baseline: no dropout on its logits
}


@dataclass
class CATConfig:
    """Everything that defines a CAT model and its baseline.

    Sizes: ``d_model`` D, ``n_heads`` h (D % h == 0), ``n_freq`` n basis
    functions per axis, ``quad_nodes`` Q Gauss-Legendre nodes, ``blocks`` K ODE
    blocks. ``solver`` picks the depth integrator from :data:`catlib.nn.solvers.SOLVERS`;
    ``solver_steps`` is the step count of the fixed-step solvers, ``max_steps`` caps dopri5.
    ``train_solver_steps`` (fixed-step solvers only; None: train with ``solver_steps``): the
    step counts a training step of CAT draws its own from (:func:`catlib.training.loop.drawn_solver_steps`),
    so that the weights learn an ODE rather than one discretisation; its largest count is
    ``solver_steps``, with which the model is validated and evaluated.
    """

    vocab_size: int = 65
    d_model: int = 128
    n_heads: int = 8
    n_freq: int = 32
    basis: str = "fourier"
    blocks: int = 1
    quad_nodes: int = 64
    dropout: float = 0.1
    sob_lambda: float = 5e-7
    variant: str = "published"
    solver: str | None = None   # None: default_solver(device) when resolved
    rtol: float = 1e-7
    atol: float = 1e-9
    adjoint: bool = True
    adjoint_seminorm: bool = False
    solver_steps: int = 4
    max_steps: int | None = None
    causal: bool | None = None
    normalised_integral: bool | None = None
    dropout_in_dynamics: bool | None = None
    penalty: str | None = None
    half_range_cosine: bool | None = None
    penalty_once: bool | None = None
    positional_encoding: bool | None = None
    logit_dropout: bool | None = None
    baseline_positions: str = "sinusoidal"
    kernel: str = "absolute"        # CAT's kernel: catlib.nn.kernel_choice.KERNELS
    kernel_scale: float = 4.0      # c, in tokens: distances enter as psi(d) = log(1 + d / c)
    kernel_horizon: float = 1024.0  # D, in tokens: psi(d) / psi(D) reaches 1 at d = D
    kernel_residual: bool = True    # prior kernels: learn the spectral residual (False: prior alone)
    train_length: int | None = None  # T_train of the prior kernels: the residual lives on d < T_train
    baseline_loops: int = 1         # RoPE/ALiBi baseline: each layer applied this many times
    train_solver_steps: tuple[int, ...] | None = None  # step counts drawn per training step
    baseline_loop_scale: bool = False  # looped baseline: each application adds 1/loops of the update
    far_heads: int = 0              # prior kernels: heads without a prior, scores log-length scaled
    attention_residual: bool = False  # the block's dynamics add the attention's output itself
    baseline_block: str = "post-ln-relu"  # RoPE/ALiBi baseline's layer: BASELINE_BLOCKS

    def __post_init__(self) -> None:
        if isinstance(self.train_solver_steps, list):   # from JSON or the command line
            self.train_solver_steps = tuple(self.train_solver_steps)
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field and what it accepts."""
        check_finite(self)
        _choice("basis", self.basis, BASES)
        _choice("variant", self.variant, VARIANTS)
        if self.solver is not None:
            _choice("solver", self.solver, SOLVER_NAMES)
        if self.penalty is not None:
            _choice("penalty", self.penalty, PENALTIES)
        for name in ("vocab_size", "d_model", "n_heads", "n_freq", "blocks", "quad_nodes", "solver_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                f"choose n_heads among the divisors of d_model")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        for name in ("rtol", "atol"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.sob_lambda < 0:
            raise ValueError(f"sob_lambda must be >= 0, got {self.sob_lambda!r}")
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or not isinstance(
                self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"max_steps must be None or an integer >= 1, got {self.max_steps!r}")
        self._validate_baseline_positions()
        check_kernel(self)   # the kernel and the options it reads (kernel_choice)
        loops = self.baseline_loops
        if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
            raise ValueError(f"baseline_loops must be an integer >= 1, got {loops!r}")
        if loops > 1 and self.baseline_positions == "sinusoidal":
            raise ValueError("baseline_loops > 1 loops the RoPE or ALiBi baseline's layers; "
                             "set baseline_positions='rope' or 'alibi'")
        if not isinstance(self.baseline_loop_scale, bool):
            raise ValueError(f"baseline_loop_scale must be True or False, "
                             f"got {self.baseline_loop_scale!r}")
        if self.baseline_loop_scale and self.baseline_positions == "sinusoidal":
            raise ValueError("baseline_loop_scale scales the updates of the looped RoPE or ALiBi "
                             "baseline's layers (the sinusoidal baseline has no loop); set "
                             "baseline_positions='rope' or 'alibi' with baseline_loops > 1")
        _choice("baseline_block", self.baseline_block, BASELINE_BLOCKS)
        if self.baseline_block != "post-ln-relu" and self.baseline_positions == "sinusoidal":
            raise ValueError(f"baseline_block={self.baseline_block!r} is a layer of the RoPE or "
                             f"ALiBi baseline (the sinusoidal baseline is PyTorch's "
                             f"nn.TransformerEncoder, post-ln-relu); set baseline_positions="
                             f"'rope' or 'alibi', or baseline_block='post-ln-relu'")
        self._validate_train_solver_steps()

    def _validate_train_solver_steps(self) -> None:
        """The drawn step counts: distinct integers >= 1 of a fixed-step solver, the largest
        ``solver_steps`` (the solver the model is validated and evaluated with)."""
        counts = self.train_solver_steps
        if counts is None:
            return
        if not isinstance(counts, tuple) or not counts or any(
                isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in counts):
            raise ValueError(f"train_solver_steps must be None or a non-empty tuple of integers "
                             f">= 1, e.g. (1, 2), got {counts!r}")
        if len(set(counts)) != len(counts):
            raise ValueError(f"train_solver_steps must not repeat a step count, got {counts!r}")
        if self.solver not in FIXED_STEP_SOLVERS:
            raise ValueError(f"train_solver_steps draws the step count of a fixed-step solver, "
                             f"but solver={self.solver!r}; use one of {FIXED_STEP_SOLVERS}, "
                             f"or train_solver_steps=None")
        if max(counts) != self.solver_steps:
            raise ValueError(f"the largest of train_solver_steps {counts!r} must equal "
                             f"solver_steps ({self.solver_steps}), the steps the model is "
                             f"evaluated with; set solver_steps={max(counts)}")

    def _validate_baseline_positions(self) -> None:
        """RoPE and ALiBi replace the corrected baseline's sinusoids: they need its causal
        mask and positions (the published baseline has neither)."""
        _choice("baseline_positions", self.baseline_positions, BASELINE_POSITIONS)
        if self.baseline_positions == "sinusoidal":
            return
        pick = 0 if self.variant == "published" else 1
        for name in ("causal", "positional_encoding"):
            value = getattr(self, name)
            if not (CORRECTIONS[name][pick] if value is None else value):
                raise ValueError(
                    f"baseline_positions={self.baseline_positions!r} needs the corrected baseline "
                    f"(causal mask and positions), but {name} resolves to False; use "
                    f"variant='causal' or set causal=True and positional_encoding=True")
        if self.baseline_positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"baseline_positions='rope' rotates pairs of features: the head size "
                f"d_model / n_heads = {self.d_model // self.n_heads} must be even")

    def resolved(self, device=None) -> "CATConfig":
        """A copy with every correction left at ``None`` filled in from ``variant``, and a
        ``solver`` left at ``None`` from ``device`` (:func:`default_solver`; None: the CPU),
        for the Python API and the command line alike; each option the kernel does not read
        at its default (:func:`~catlib.nn.kernel_choice.unread_defaults`), so that configs
        that build the same model resolve to one config, one identity and one run."""
        pick = 0 if self.variant == "published" else 1
        filled = {name: values[pick] for name, values in CORRECTIONS.items()
                  if getattr(self, name) is None}
        if self.solver is None:
            filled["solver"] = default_solver(device)
        return dataclasses.replace(self, **filled, **unread_defaults(self))

    def to_dict(self) -> dict:
        """The fields as JSON values (``train_solver_steps`` a list). ``train_solver_steps``
        (None), ``far_heads`` (0), ``attention_residual`` (False) and ``baseline_block``
        ("post-ln-relu") are left out at their defaults, so that a config that does not use
        them writes the dict it wrote before they existed; ``baseline_loop_scale`` is always
        written, so its arrival changed the dict of every config
        (``CATConfig(variant="causal")`` included). A run's config hash
        also holds the code fingerprint, which changed with each of these fields anyway:
        no run of earlier code is reused either way."""
        data = dataclasses.asdict(self)
        for name in ("far_heads", "attention_residual"):   # at their defaults: left out
            if not data[name]:
                del data[name]
        if data["baseline_block"] == "post-ln-relu":        # at its default: left out
            del data["baseline_block"]
        if data["train_solver_steps"] is None:
            del data["train_solver_steps"]
        else:
            data["train_solver_steps"] = list(data["train_solver_steps"])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "CATConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        if "steps" in data and "solver_steps" not in data:    # its name in runs before the rename
            data = {("solver_steps" if k == "steps" else k): v for k, v in data.items()}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown CATConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**data)


def check_finite(config) -> None:
    """Raise ``ValueError`` naming the first float field of the dataclass ``config`` that
    holds a NaN or an infinity, which pass comparisons such as ``x < 0`` (False for NaN)
    and ``x > 0`` (True for inf); a valid config is left as it is."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if "float" in str(f.type) and isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value!r}; "
                             f"e.g. its default {f.default!r}")


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
