"""Length extrapolation measured as the literature does: CE at each position.

A single CE per context length hides where the loss goes: a model trained on
T = 256 may be fine up to position 256 and fail beyond. :func:`position_ce`
gives the mean CE at every position of the published evaluation windows, so a
notebook draws CE against position on a log axis with the training length
marked (:func:`log_bins`, :func:`plot_position_curves`). The artefacts that hold them
(a CSV of curves, a JSON of summary rows) are :mod:`catlib.experiment.artefacts`.

:func:`attention_input_dependence` measures, through the attention's own forward
pass, how much the mixing weights change with the input: about 0 for CAT (its
kernels W(s, t) read positions only), clearly > 0 for query-key attention.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..nn.reused_plans import evaluation_plans
from .cost import parameter_count  # noqa: F401  (re-exported: the book's tables)
from . import evaluate

SUMMARY_LENGTHS = ("128", "512", "1024", "5000")


# --------------------------------------------------------------- per-position CE

def position_ce(model: torch.nn.Module, val: torch.Tensor, length: int = 5000,
                n_windows: int = 16, device=None, batch: int = 1,
                per_window: bool = False, span_length: int | None = None):
    """Mean cross-entropy at each position, float64 ``[length]`` on the CPU.

    ``val [N]`` int64 ids. Windows are those of :func:`catlib.measure.evaluate.windows`
    (the published first ones, or with ``span_length`` spread over the book's common span),
    at most ``n_windows`` of them; the model reads w[:length] and
    position p (0-based) is scored on predicting w[p + 1]. ``batch`` windows per forward
    pass. Eval mode and ``torch.inference_mode``; the model's mode is restored after.
    The mean over positions equals ``evaluate.cross_entropy(...)["ce"]`` on the same windows.
    With ``per_window``: ``(positions [length], windows [n])``, the second each window's
    mean CE (for its standard error, :func:`catlib.measure.evaluate.window_se`).
    """
    if length < 1 or n_windows < 1 or batch < 1:
        raise ValueError(f"length, n_windows and batch must be positive, got "
                         f"{length}, {n_windows}, {batch}")
    n = evaluate.n_windows(len(val), length, n_windows, span_length)
    if n == 0:
        raise ValueError(f"position_ce at length {length} {evaluate._skip_reason(len(val), length)}")
    device = device or next(model.parameters()).device
    x, y = evaluate.windows(val, length, n, span_length)
    total = torch.zeros(length, dtype=torch.float64)
    by_window = []
    # One plan per length for all the windows (evaluation_plans), not one per window.
    with evaluate.eval_mode(model, False), torch.inference_mode(), evaluation_plans():
        for i in range(0, n, batch):
            logits = model(x[i:i + batch].to(device))[0]
            # float64 on the CPU: MPS has no float64, and 5000-position sums need it.
            logits = logits.cpu().double()
            ce = F.cross_entropy(logits.transpose(1, 2), y[i:i + batch], reduction="none")
            total += ce.sum(0)                                                 # [length]
            by_window.append(ce.mean(1))                                       # [batch]
    return (total / n, torch.cat(by_window)) if per_window else total / n


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

    with evaluate.eval_mode(model, False), torch.inference_mode():
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
