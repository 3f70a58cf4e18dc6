"""Context-length evaluation (the published protocol and the book's), a bigram floor and the
leak score.

Published protocol, for each context length L: windows start at k*L, k = 0..n-1, with
n = (len(val) - L - 1) // L capped at ``eval_windows``; each window has L + 1 ids, the
model reads the first L and is scored on the last L; CE = summed CE / (n * L), PPL = exp(CE).
Its first windows read easier than the rest of the split, and each length reads another
stretch of text (the first 16,384 characters at 128, every window at 5000).

The book's protocol (``span_length`` set, issue 53): every length reads the same text, the
span that the windows of ``span_length`` (the longest length scored) tile,
S = n_windows(len(val), span_length) * span_length characters. Length L tiles it with
S // L non-overlapping windows; capped at ``eval_windows``, that many are taken spread
evenly over the span (:func:`window_starts`), never the first ones.

CEs are summed in float64 on the CPU when the model runs on MPS (which has no float64).
A NaN or infinite CE never reaches a table: :func:`context_table` stores None and names
the model in the row's ``nonfinite`` list, and :func:`format_table` prints "non-finite".
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from ..nn.reused_plans import evaluation_plans
from .config import DEFAULTS, PUBLISHED_LENGTHS  # noqa: F401 (its earlier home)

TABLE_HEADER = "len | CAT CE | PPL | Bas CE | PPL | dCE"


def n_windows(n_val: int, length: int, eval_windows: int, span_length: int | None = None) -> int:
    """Number of evaluation windows of length ``length``: the published (n_val - L - 1) // L,
    or with ``span_length`` the windows tiling the common span (module docstring); capped."""
    if span_length is None:
        return max(0, min((n_val - length - 1) // length, eval_windows))
    return max(0, min(text_span(n_val, span_length) // length, eval_windows))


def text_span(n_val: int, span_length: int) -> int:
    """Characters every length reads under the book's protocol: those the windows of
    ``span_length`` tile (each window also needs the id after it, as the published count)."""
    return max(0, (n_val - span_length - 1) // span_length) * span_length


def window_starts(n_val: int, length: int, n: int, span_length: int | None = None) -> torch.Tensor:
    """Where each of ``n`` windows of ``length`` starts, int64 ``[n]``: the first ``n``
    (published protocol), or with ``span_length`` ``n`` of the span's tiles spread evenly
    (all of them when ``n`` is their number), first and last included."""
    if span_length is None:
        return torch.arange(n) * length
    tiles = text_span(n_val, span_length) // length
    if n > tiles:
        raise ValueError(f"{n} windows of {length} asked for, the span holds {tiles}")
    # Evenly spread tile indices; distinct because n <= tiles.
    idx = torch.div(torch.arange(n) * max(tiles - 1, 0), max(n - 1, 1), rounding_mode="floor")
    return idx * length


def windows(val: torch.Tensor, length: int, n: int,
            span_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows (:func:`window_starts`): inputs x and targets y, int64
    [n, length] each."""
    idx = window_starts(len(val), length, n, span_length)[:, None] + torch.arange(length + 1)
    w = val[idx]
    return w[:, :-1], w[:, 1:]


# On the CPU, about this many tokens per forward pass, and at least CPU_MIN_WINDOWS windows
# (never more than the rule below): a pass of a few thousand tokens keeps a block's
# activations in a core's cache, where larger ones stream them through memory, and with
# fewer windows a long window's biased attention is cut into fewer query chunks, which skip
# less of the masked upper triangle (catlib.nn.qk_attention). Measured at the cpu profile's
# sizes on one thread (benchmarks/scoring_share.py --batches; a shared, busy machine): every
# window at 128 scored 1.4-1.8 times faster in passes of 16 windows than of 256, at 512
# 1.1-1.5 times in passes of 8 than of 32, at 1024 (8 windows a pass either way) as before;
# each window's CE the same bit for bit, at 512 for query-key attention within float32
# rounding (differences below 1e-8).
CPU_BATCH_TOKENS = 2048
CPU_MIN_WINDOWS = 8


def windows_per_batch(length: int, batch_tokens: int = DEFAULTS.batch_tokens,
                      device: str | torch.device | None = None) -> int:
    """Windows per forward pass: about ``batch_tokens`` tokens, and few enough that the
    baseline's L x L attention matrices (B * L^2 <= 256 * batch_tokens) stay bounded; at
    least one. On the CPU (``device``) at most the larger of :data:`CPU_BATCH_TOKENS` tokens
    and :data:`CPU_MIN_WINDOWS` windows."""
    n = max(1, min(batch_tokens // length, 256 * batch_tokens // (length * length)))
    if device is not None and torch.device(device).type == "cpu":
        n = min(n, max(CPU_BATCH_TOKENS // length, CPU_MIN_WINDOWS))
    return n


def check_settings(lengths, eval_windows: int = DEFAULTS.eval_windows,
                   batch_tokens: int = DEFAULTS.batch_tokens, causal: bool = True,
                   leak_length: int = DEFAULTS.leak_length) -> None:
    """Raise ValueError naming a bad evaluation setting, before any evaluation starts.

    Lengths must be positive integers, and at least 2 for a non-causal (published) CAT,
    whose operator is undefined at T = 1 (defect 8).
    """
    lengths = list(lengths)
    if not lengths:
        raise ValueError("lengths must name at least one context length")
    for name, v in (("eval_windows", eval_windows), ("batch_tokens", batch_tokens),
                    *(("lengths", L) for L in lengths)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r}")
    if not causal and min(lengths) < 2:
        raise ValueError(f"lengths must be >= 2 for the published (non-causal) CAT, whose "
                         f"operator is undefined at T = 1, got {min(lengths)}")
    if not isinstance(leak_length, int) or leak_length < 2:
        raise ValueError(f"leak_length must be an integer >= 2, got {leak_length!r}")


def _float64(t: torch.Tensor) -> torch.Tensor:
    """``t`` as float64 for an exact sum; MPS has no float64, so such tensors go to the CPU."""
    if t.device.type == "mps":
        t = t.cpu()
    return t.double()


@contextlib.contextmanager
def seeded(seed: int | None, device: torch.device):
    """Run the block with torch seeded by ``seed`` and restore the global RNG state after
    (CPU and the device's), so that a seeded evaluation changes nobody's randomness.
    ``seed=None``: the global RNG as it is."""
    if seed is None:
        yield
        return
    accel = [device] if device.type in ("cuda", "mps") else []
    with torch.random.fork_rng(devices=accel, device_type=device.type if accel else "cuda"):
        torch.manual_seed(seed)
        yield


def _skip_reason(n_val: int, length: int) -> str:
    return f"needs more than {2 * length} validation tokens, the split has {n_val}"


class eval_mode:
    """Context manager: eval mode (or train mode when ``dropout`` is True), restored on exit."""

    def __init__(self, model: torch.nn.Module, dropout: bool):
        self.model, self.dropout = model, dropout

    def __enter__(self):
        self.was_training = self.model.training
        self.model.train(self.dropout)
        return self.model

    def __exit__(self, *exc):
        self.model.train(self.was_training)


def cross_entropy(model: torch.nn.Module, val: torch.Tensor, length: int,
                  eval_windows: int = DEFAULTS.eval_windows,
                  dropout_in_eval: bool = DEFAULTS.dropout_in_eval,
                  batch_tokens: int = DEFAULTS.batch_tokens,
                  device: str | torch.device | None = None,
                  seed: int | None = None, span_length: int | None = None) -> dict:
    """CE of ``model`` (forward(tokens [B, L]) -> (logits [B, L, V], _)) on the windows of the
    published protocol, or of the book's with ``span_length`` (module docstring).

    Windows are batched, :func:`windows_per_batch` per forward pass; pass
    ``batch_tokens=1`` for the published batch of one (an adaptive solver's step control
    couples the windows of a batch, at the level of its tolerances). A plan that depends on
    the length and the weights alone (a CAT's kernel, a learned bias) is built once for all
    the windows (:func:`catlib.nn.reused_plans.evaluation_plans`): the same numbers as a
    plan per pass, bit for bit.
    ``dropout_in_eval=True`` keeps dropout on, as the published script does; with ``seed``
    its masks are drawn from torch seeded by ``seed`` (reproducible; the global RNG state is
    restored afterwards), otherwise from the global RNG.
    Returns {"len", "ce", "ppl", "windows", "tokens", "se", "window_ce"} (``se``: the
    standard error of ``ce`` from window sampling; ``window_ce``: each window's CE, for the
    paired error of a difference between two models), or {"len", "skipped"} with a reason when the validation
    split is too short for one window.
    """
    if length < 1 or eval_windows < 1 or batch_tokens < 1:
        raise ValueError(f"length, eval_windows and batch_tokens must be positive, got "
                         f"{length}, {eval_windows}, {batch_tokens}")
    n = n_windows(len(val), length, eval_windows, span_length)
    if n == 0:
        return {"len": length, "skipped": _skip_reason(len(val), length)}
    device = torch.device(device or next(model.parameters()).device)
    x, y = windows(val, length, n, span_length)
    per_batch = windows_per_batch(length, batch_tokens, device)
    total, per_window = 0.0, []
    # evaluation_plans: a plan that depends on the length and the weights alone (a CAT's
    # kernel, a learned bias) is built once for all the windows of this length.
    with eval_mode(model, dropout_in_eval), torch.inference_mode(), \
            seeded(seed if dropout_in_eval else None, device), evaluation_plans():
        for i in range(0, n, per_batch):
            xb, yb = x[i:i + per_batch].to(device), y[i:i + per_batch].to(device)
            logits = model(xb)[0]
            logits = _float64(logits.reshape(-1, logits.shape[-1]))
            target = yb.reshape(-1).to(logits.device)
            total += F.cross_entropy(logits, target, reduction="sum").item()
            per_window += F.cross_entropy(logits, target, reduction="none").reshape(
                len(xb), length).mean(1).tolist()
    ce = total / (n * length)
    return {"len": length, "ce": ce, "ppl": math.exp(ce), "windows": n, "tokens": n * length,
            "se": window_se(per_window), "window_ce": per_window}


def window_se(per_window) -> float:
    """The window-sampling error of a CE that is the mean of equal windows' CEs
    (``per_window``, one CE per window): their standard deviation over sqrt(n), 0 for one
    window; what another sample of as many windows could move the CE by."""
    n = len(per_window)
    return float(torch.as_tensor(per_window, dtype=torch.float64).std() / math.sqrt(n)) if n > 1 else 0.0


def bigram_ce(train: torch.Tensor, val: torch.Tensor, length: int,
              eval_windows: int = DEFAULTS.eval_windows,
              vocab_size: int | None = None, alpha: float = 1.0, span_length: int | None = None) -> float | None:
    """CE of a character-bigram count model (add-``alpha`` smoothing, fitted on ``train``)
    on the same windows as :func:`cross_entropy`; a floor row for every results table.
    Returns None when the length is skipped."""
    V = vocab_size or int(max(train.max(), val.max())) + 1
    n = n_windows(len(val), length, eval_windows, span_length)
    if n == 0:
        return None
    counts = torch.zeros(V, V, dtype=torch.float64)
    counts.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1, dtype=torch.float64),
                      accumulate=True)
    logp = ((counts + alpha) / (counts.sum(1, keepdim=True) + alpha * V)).log()
    x, y = windows(val, length, n, span_length)
    return -logp[x.reshape(-1), y.reshape(-1)].mean().item()


def context_table(cat: torch.nn.Module | None, baseline: torch.nn.Module | None,
                  val: torch.Tensor, lengths=DEFAULTS.lengths,
                  eval_windows: int = DEFAULTS.eval_windows,
                  dropout_in_eval: bool = DEFAULTS.dropout_in_eval,
                  batch_tokens: int = DEFAULTS.batch_tokens,
                  train: torch.Tensor | None = None, device=None,
                  seed: int | None = None, span_length: int | None = None) -> list[dict]:
    """The published results table as a list of rows, one per context length.

    Row keys: len, cat_ce, cat_ppl, cat_se, cat_window_ce, base_ce, base_ppl, base_se,
    base_window_ce, dce (= base - CAT), windows, and bigram_ce when ``train`` is given
    (``*_se``: the CE's standard error from window sampling, :func:`window_se`;
    ``*_window_ce``: each window's CE); or len and skipped (the reason). A model passed as
    None (a run that trained only the other) has None in its columns and in dce; so has a
    model whose CE is NaN or infinite, which the row also names in ``nonfinite``.
    ``span_length``: the book's protocol (module docstring; None: the published one).
    ``seed`` seeds the dropout masks of ``dropout_in_eval`` (see :func:`cross_entropy`).
    """
    rows = []
    for L in lengths:
        kw = dict(eval_windows=eval_windows, dropout_in_eval=dropout_in_eval,
                  batch_tokens=batch_tokens, device=device, seed=seed,
                  span_length=span_length)
        if n_windows(len(val), L, eval_windows, span_length) == 0:
            rows.append({"len": L, "skipped": _skip_reason(len(val), L)})
            continue
        row = {"len": L}
        for key, model in (("cat", cat), ("base", baseline)):   # "base": the rows' key
            r = cross_entropy(model, val, L, **kw) if model is not None else {}
            ce = r.get("ce")
            if ce is not None and not math.isfinite(ce):
                row.setdefault("nonfinite", []).append(key)
                ce = None
            row[f"{key}_ce"], row[f"{key}_ppl"] = ce, (math.exp(ce) if ce is not None else None)
            row[f"{key}_se"] = r.get("se") if ce is not None else None
            row[f"{key}_window_ce"] = r.get("window_ce") if ce is not None else None
            row["windows"] = r.get("windows", n_windows(len(val), L, eval_windows, span_length))
        both = row["cat_ce"] is not None and row["base_ce"] is not None
        row["dce"] = row["base_ce"] - row["cat_ce"] if both else None
        if train is not None:
            row["bigram_ce"] = bigram_ce(train, val, L, eval_windows, span_length=span_length)
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """The published table, ``len | CAT CE | PPL | Bas CE | PPL | dCE``, one line per length,
    then the bigram floor when the rows carry it. An absent model's cells read "-"; a NaN
    or infinite value (or one a row marks ``nonfinite``) reads "non-finite", never "nan"."""
    lines = [TABLE_HEADER]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['len']} | skipped: {r['skipped']}")
            continue
        bad = set(r.get("nonfinite", ()))
        cell = lambda key, spec, model=None: _cell(r.get(key), spec, model in bad)
        lines.append(" | ".join([str(r["len"]), cell("cat_ce", ".4f", "cat"),
                                 cell("cat_ppl", ".2f", "cat"), cell("base_ce", ".4f", "base"),
                                 cell("base_ppl", ".2f", "base"),
                                 cell("dce", "+.4f", "cat" if "cat" in bad else "base")]))
    floor = [f"{r['len']}: {r['bigram_ce']:.4f}" for r in rows if r.get("bigram_ce") is not None]
    if floor:
        lines.append("bigram floor CE | " + " | ".join(floor))
    return "\n".join(lines)


def _cell(value, spec: str, nonfinite: bool = False) -> str:
    if nonfinite or (value is not None and not math.isfinite(value)):
        return "non-finite"
    return "-" if value is None else format(value, spec)


def leak_score(model: torch.nn.Module, vocab_size: int, length: int = DEFAULTS.leak_length,
               n_positions: int = 4,
               seed: int = 0, device=None) -> float:
    """How much a model reads the future: the mean |change| of the logits at positions <= i
    when every token after i is replaced, averaged over ``n_positions`` random i.

    Runs in eval mode on random tokens [1, length]; about 0 (solver tolerance) for a causal
    model, clearly > 0 for one that attends to later tokens. Each sequence is a separate
    forward pass so that an adaptive solver's step control does not couple them.
    """
    if length < 2 or n_positions < 1:
        raise ValueError(f"length must be >= 2 and n_positions >= 1, got {length}, {n_positions}")
    device = device or next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(vocab_size, (1, length), generator=g)
    positions = torch.randint(length - 1, (n_positions,), generator=g).tolist()
    changes = []
    with eval_mode(model, False), torch.inference_mode(), evaluation_plans():
        ref = _float64(model(x.to(device))[0])
        for i in positions:
            x2 = x.clone()
            shift = torch.randint(1, vocab_size, (length - i - 1,), generator=g)
            x2[0, i + 1:] = (x[0, i + 1:] + shift) % vocab_size  # every later token changes
            out = _float64(model(x2.to(device))[0])
            changes.append((out[:, :i + 1] - ref[:, :i + 1]).abs().mean().item())
    return sum(changes) / len(changes)
