"""Length extrapolation measured as the literature does: CE at each position.

A single CE per context length hides where the loss goes: a model trained on
T = 256 may be fine up to position 256 and fail beyond. :func:`position_ce`
gives the mean CE at every position of the published evaluation windows, so a
notebook draws CE against position on a log axis with the training length
marked (:func:`log_bins`, :func:`plot_position_curves`). The artefacts are one
CSV of curves and one JSON of summary rows, both written atomically.

:func:`attention_input_dependence` measures, through the attention's own forward
pass, how much the mixing weights change with the input: about 0 for CAT (its
kernels W(s, t) read positions only), clearly > 0 for query-key attention.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .cost import parameter_count  # noqa: F401  (re-exported: the book's tables)
from . import evaluate
from .runs import atomic_write_text

SUMMARY_LENGTHS = ("128", "512", "1024", "5000")


# --------------------------------------------------------------- per-position CE

def position_ce(model: torch.nn.Module, val: torch.Tensor, length: int = 5000,
                n_windows: int = 16, device=None, batch: int = 1) -> torch.Tensor:
    """Mean cross-entropy at each position, float64 ``[length]`` on the CPU.

    ``val [N]`` int64 ids. Windows are those of :func:`catlib.evaluate.windows`: window k
    starts at k * length, at most ``n_windows`` of them; the model reads w[:length] and
    position p (0-based) is scored on predicting w[p + 1]. ``batch`` windows per forward
    pass. Eval mode and ``torch.inference_mode``; the model's mode is restored after.
    The mean over positions equals ``evaluate.cross_entropy(...)["ce"]`` on the same windows.
    """
    if length < 1 or n_windows < 1 or batch < 1:
        raise ValueError(f"length, n_windows and batch must be positive, got "
                         f"{length}, {n_windows}, {batch}")
    n = evaluate.n_windows(len(val), length, n_windows)
    if n == 0:
        raise ValueError(f"position_ce at length {length} {evaluate._skip_reason(len(val), length)}")
    device = device or next(model.parameters()).device
    x, y = evaluate.windows(val, length, n)
    total = torch.zeros(length, dtype=torch.float64)
    with evaluate._mode(model, False), torch.inference_mode():
        for i in range(0, n, batch):
            logits = model(x[i:i + batch].to(device))[0]
            # float64 on the CPU: MPS has no float64, and 5000-position sums need it.
            logits = logits.cpu().double()
            ce = F.cross_entropy(logits.transpose(1, 2), y[i:i + batch], reduction="none")
            total += ce.sum(0)                                                 # [length]
    return total / n


def log_bins(ce, per_decade: int = 16) -> dict[str, np.ndarray]:
    """Mean CE in logarithmic position bins, for a CE-vs-position plot on a log axis.

    ``ce [L]`` per position. Bins cover context sizes p + 1 (tokens read, 1..L), with
    edges spaced ``per_decade`` per decade and merged where they round to the same
    integer, so short contexts keep one bin per position. Returns arrays ``[K]``:
    ``start``, ``stop`` (0-based positions, stop exclusive), ``center`` (geometric
    mean of the context sizes p + 1 in the bin) and ``ce`` (mean CE in the bin).
    """
    ce = np.asarray(ce, dtype=np.float64)
    if ce.ndim != 1 or ce.size == 0:
        raise ValueError(f"ce must be a non-empty 1-D array, got shape {ce.shape}")
    if per_decade < 1:
        raise ValueError(f"per_decade must be >= 1, got {per_decade}")
    length = ce.size
    n_edges = max(2, math.ceil(math.log10(length + 1) * per_decade) + 1)
    # Edges on context sizes 1..L+1 (exclusive end): position p sits at p + 1.
    edges = np.unique(np.round(np.logspace(0, math.log10(length + 1), n_edges)).astype(int)) - 1
    edges[-1] = length
    start, stop = edges[:-1], edges[1:]
    means = np.array([ce[a:b].mean() for a, b in zip(start, stop)])
    centers = np.array([math.exp(np.log(np.arange(a + 1, b + 1)).mean())
                        for a, b in zip(start, stop)])
    return {"start": start, "stop": stop, "center": centers, "ce": means}


def plot_position_curves(ax, curves: dict, train_length: int | None = None,
                         per_decade: int = 16):
    """Draw each curve of ``{model_name: ce [L]}`` log-binned on a log position axis
    (context size p + 1), with a dashed line at ``train_length``. Returns ``ax``."""
    for name, ce in curves.items():
        b = log_bins(ce, per_decade)
        ax.plot(b["center"], b["ce"], label=name)
    if train_length is not None:
        ax.axvline(train_length, color="grey", linestyle="--", label=f"training length {train_length}")
    ax.set_xscale("log")
    ax.set_xlabel("position (tokens of context, log scale)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.legend()
    return ax


# --------------------------------------------------------------- artefacts

def write_position_csv(path, curves: dict) -> None:
    """CSV ``model,position,ce``: one row per model and position 0..L-1, full precision.

    ``curves``: ``{model_name: ce [L]}`` (tensor, array or list of finite numbers).
    """
    if not curves:
        raise ValueError("curves is empty: nothing to write")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["model", "position", "ce"])
    for name, ce in curves.items():
        ce = np.asarray(torch.as_tensor(ce).double().cpu(), dtype=np.float64)
        if not isinstance(name, str) or not name:
            raise ValueError(f"model names must be non-empty strings, got {name!r}")
        if ce.ndim != 1 or ce.size == 0 or not np.isfinite(ce).all():
            raise ValueError(f"curve {name!r} must be a non-empty 1-D array of finite numbers")
        for p, v in enumerate(ce.tolist()):
            w.writerow([name, p, repr(v)])   # repr round-trips a float64 exactly
    atomic_write_text(path, out.getvalue())


def read_position_csv(path) -> dict[str, np.ndarray]:
    """The curves of :func:`write_position_csv`: ``{model_name: ce [L]}`` float64."""
    rows: dict[str, list] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != ["model", "position", "ce"]:
            raise ValueError(f"{path}: expected columns model,position,ce, got {reader.fieldnames}")
        for r in reader:
            rows.setdefault(r["model"], []).append((int(r["position"]), float(r["ce"])))
    curves = {}
    for name, pairs in rows.items():
        pairs.sort()
        if [p for p, _ in pairs] != list(range(len(pairs))):
            raise ValueError(f"{path}: positions of {name!r} are not 0..L-1")
        curves[name] = np.array([v for _, v in pairs])
    return curves


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_extrapolation_rows(rows) -> None:
    """Raise ``ValueError`` unless ``rows`` is ``{model_name: {"train_length": int >= 1,
    "leak": finite, "ce": {"128", "512", "1024", "5000" (more lengths allowed): finite}}}``,
    each row optionally with ``"ce_seeds"``: ``{length: [finite CE per seed]}`` at the
    lengths of ``ce``."""
    if not isinstance(rows, dict) or not rows:
        raise ValueError("rows must be a non-empty {model_name: row} mapping")
    for name, row in rows.items():
        where = f"row {name!r}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"model names must be non-empty strings, got {name!r}")
        if not isinstance(row, dict):
            raise ValueError(f"{where} must be a mapping, got {type(row).__name__}")
        missing = sorted({"train_length", "leak", "ce"} - set(row))
        if missing:
            raise ValueError(f"{where} lacks {missing} (needs train_length, leak, ce)")
        tl = row["train_length"]
        if not isinstance(tl, int) or isinstance(tl, bool) or tl < 1:
            raise ValueError(f"{where}: train_length must be an integer >= 1, got {tl!r}")
        if not _finite(row["leak"]):
            raise ValueError(f"{where}: leak must be a finite number, got {row['leak']!r}")
        ce = row["ce"]
        if not isinstance(ce, dict):
            raise ValueError(f"{where}: ce must be a {{length: CE}} mapping, got {type(ce).__name__}")
        missing = [L for L in SUMMARY_LENGTHS if L not in ce]
        if missing:
            raise ValueError(f"{where}: ce lacks lengths {missing} (needs {list(SUMMARY_LENGTHS)})")
        for L, v in ce.items():
            if not (isinstance(L, str) and L.isdigit() and int(L) > 0):
                raise ValueError(f"{where}: ce keys must be positive lengths as strings, got {L!r}")
            if not _finite(v):
                raise ValueError(f"{where}: ce[{L!r}] must be a finite number, got {v!r}")
        seeds = row.get("ce_seeds")
        if seeds is not None:
            if not isinstance(seeds, dict) or set(seeds) != set(ce):
                raise ValueError(f"{where}: ce_seeds must give a list of CE per seed at each "
                                 f"length of ce ({sorted(ce)}), got {seeds!r}")
            for L, values in seeds.items():
                if not (isinstance(values, list) and values and all(map(_finite, values))):
                    raise ValueError(f"{where}: ce_seeds[{L!r}] must be a non-empty list of "
                                     f"finite numbers, got {values!r}")


def write_extrapolation_json(path, rows: dict) -> None:
    """Validate the summary ``rows`` (see :func:`validate_extrapolation_rows`) and write
    them as JSON, atomically."""
    validate_extrapolation_rows(rows)
    atomic_write_text(path, json.dumps(rows, indent=2, sort_keys=True) + "\n")


def read_extrapolation_json(path) -> dict:
    """The rows of :func:`write_extrapolation_json`; ``ValueError`` naming the file and
    the problem when it is not valid JSON or not valid rows."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); rewrite it with "
                         f"write_extrapolation_json") from None
    try:
        validate_extrapolation_rows(rows)
    except ValueError as e:
        raise ValueError(f"{path} is not an extrapolation table: {e}") from None
    return rows


# --------------------------------------------------------------- attention probes

def _attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Attention modules the probe understands, in module order: those that mix per-head
    values ``v_proj(.)`` and feed the result to ``out_proj`` (ContinuousAttention,
    QKAttention, and any module with ``v_proj``, ``out_proj``, ``n_heads``, ``head_dim``)."""
    found = [m for m in model.modules()
             if all(hasattr(m, a) for a in ("v_proj", "out_proj", "n_heads", "head_dim"))]
    if not found:
        raise ValueError(f"{type(model).__name__} has no attention with separate v_proj and "
                         "out_proj, such as ContinuousAttention or QKAttention (the sinusoidal "
                         "baseline's nn.MultiheadAttention cannot be probed)")
    return found


def mixing_weights(model: torch.nn.Module, tokens: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """The mixing weights that attention module ``layer`` applies in ``model(tokens)``,
    ``[h, T, S]`` float64 (S = T for causal and query-key attention, Q nodes for the
    published CAT), measured by probing, not read from the kernels.

    ``tokens [1, T]``. The model runs once (eval mode); a pre-hook records the input
    (and CAT's plan) of the attention's first call. That call is then repeated with the
    value projection's output replaced by S one-hot probes (probe j: 1 at value slot j,
    all features), while queries, keys and plans come from the recorded input; the input
    of ``out_proj`` in probe j, head h, query i is then the weight of slot j.
    """
    if tokens.dim() != 2 or tokens.shape[0] != 1:
        raise ValueError(f"tokens must be [1, T], got shape {tuple(tokens.shape)}")
    attn = _attention_modules(model)[layer]
    device = next(model.parameters()).device
    recorded = {}

    def record(module, args, kwargs):
        recorded.setdefault("call", (args, kwargs))

    with evaluate._mode(model, False), torch.inference_mode():
        handle = attn.register_forward_pre_hook(record, with_kwargs=True)
        try:
            model(tokens.to(device))
        finally:
            handle.remove()
        (x, *rest), kwargs = recorded["call"]

        probe = {"slots": None}   # None: record the number of value slots; else replace

        def values(module, inp, out):                                   # out [B, S, D]
            if probe["slots"] is None:
                probe["slots"] = out.shape[1]
                return None
            eye = torch.eye(out.shape[1], dtype=out.dtype, device=out.device)
            return eye[:, :, None].expand(-1, -1, out.shape[2]).contiguous()   # [S, S, D]

        def record_mixed(module, inp):
            probe["mixed"] = inp[0]

        hooks = [attn.v_proj.register_forward_hook(values),
                 attn.out_proj.register_forward_pre_hook(record_mixed)]
        try:
            attn(x, *rest, **kwargs)                                    # learns S
            slots = probe["slots"]
            attn(x.expand(slots, *x.shape[1:]), *rest, **kwargs)        # S probes, one batch
        finally:
            for h in hooks:
                h.remove()
    heads, head_dim = attn.n_heads, attn.head_dim
    mixed = probe["mixed"].double().cpu()                                 # [S, T, D]
    # mixed[j, i, h * d + c] = sum_k A_h[i, k] probe_j[k] = A_h[i, j], the same for every c.
    per_feature = mixed.view(slots, mixed.shape[1], heads, head_dim)
    return per_feature.mean(-1).permute(2, 1, 0)                           # [h, T, S]


def attention_input_dependence(model: torch.nn.Module, tokens_a: torch.Tensor,
                               tokens_b: torch.Tensor, layer: int = 0) -> float:
    """max |A(a) - A(b)| over heads and entries, A = :func:`mixing_weights` for two inputs
    ``[1, T]`` of the same length: about 0 when the attention's weights do not read the
    input (CAT), clearly > 0 for query-key attention."""
    if tokens_a.shape != tokens_b.shape:
        raise ValueError(f"inputs must have the same shape, got {tuple(tokens_a.shape)} "
                         f"and {tuple(tokens_b.shape)}")
    a, b = mixing_weights(model, tokens_a, layer), mixing_weights(model, tokens_b, layer)
    return (a - b).abs().max().item()
