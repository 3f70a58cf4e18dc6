"""Evaluating a run: the context-length table, bigram floor and leak scores of its models,
written to ``eval.json`` and ``eval.csv``.

A stored evaluation is reused only if it was made by this code, with the same settings,
of the very weights on disk (:func:`_stored_eval`). ``evaluate_run`` refuses a run
trained by other code unless ``allow_other_code`` (``eval --allow-other-code``) asks for it.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import torch

from ..data import Corpus, load_corpus
from ..measure.config import DEFAULTS
from ..measure.evaluate import check_settings, context_table, leak_score
from ..common.provenance import code_fingerprint
from .errors import RunError
from .files import _read_json, _write_json, atomic_write_text
from .identity import weights_digest
from .lock import run_lock
from .run import Run

_EVAL_COLUMNS = ["len", "cat_ce", "cat_ppl", "cat_se", "base_ce", "base_ppl", "base_se", "dce",
                 "bigram_ce", "windows", "skipped", "nonfinite"]


def _check_code(run: Run, allow_other_code: bool) -> None:
    if run.code != code_fingerprint() and not allow_other_code:
        raise RunError(f"{run.path} was trained by other catlib code (code fingerprint "
                       f"{run.code or 'not recorded'}, this code {code_fingerprint()}); train it "
                       "again with this code (the train command with --retrain), or pass "
                       "--allow-other-code to evaluate it as it is")


def eval_settings(lengths, eval_windows: int, dropout_in_eval: bool,
                  leak_length: int = DEFAULTS.leak_length,
                  dropout_seed: int = 0, span_length: int | None = None) -> dict:
    """The evaluation settings recorded in eval.json (a stored evaluation is reused only
    for the same settings); ``span_length`` only where set (the book's protocol), so that a
    published-protocol evaluation keeps its settings."""
    settings = {"lengths": list(lengths), "eval_windows": eval_windows,
                "dropout_in_eval": dropout_in_eval, "leak_length": leak_length,
                "dropout_seed": dropout_seed if dropout_in_eval else None}
    return settings if span_length is None else {**settings, "span_length": span_length}


def evaluate_run(run: Run, lengths=DEFAULTS.lengths, eval_windows: int = DEFAULTS.eval_windows,
                 dropout_in_eval: bool = DEFAULTS.dropout_in_eval,
                 batch_tokens: int = DEFAULTS.batch_tokens, device="cpu",
                 corpus: Corpus | None = None, leak_length: int = DEFAULTS.leak_length, data=None,
                 allow_other_code: bool = False, dropout_seed: int = 0,
                 span_length: int | None = None) -> dict:
    """Evaluate a run's models and write ``eval.json`` and ``eval.csv``; return the result.

    Result: {"rows": context_table rows, "leak": {"cat", "base"} (None: not trained or
    non-finite), "settings", "step" and "weights" (the step and digest of the weights
    scored), "code" (fingerprint of the evaluating code), "device", "nonfinite"}.
    With ``dropout_in_eval`` the dropout masks are seeded by ``dropout_seed`` (recorded),
    so that two evaluations agree; the global RNG state is restored afterwards.
    ``span_length``: the book's protocol (:mod:`catlib.measure.evaluate`).
    Refuses (RunError) a run trained by other code unless ``allow_other_code``, bad
    settings, and an unreadable eval.json (never overwritten).
    """
    _check_code(run, allow_other_code)
    try:
        check_settings(lengths, eval_windows, batch_tokens, run.model_config.resolved().causal,
                       leak_length)
    except ValueError as e:
        raise RunError(str(e)) from None
    device = torch.device(device)
    corpus = corpus or load_corpus(data, split=run.train_config.split)
    with run_lock(run.path):
        if (run.path / "eval.json").exists():
            _read_json(run.path / "eval.json", "delete it to evaluate the run again")
        models, step = run.load_weights(device)
        rows = context_table(models["cat"], models["base"], corpus.val, lengths, eval_windows,
                             dropout_in_eval, batch_tokens, train=corpus.train, device=device,
                             seed=dropout_seed if dropout_in_eval else None,
                             span_length=span_length)
        leak, nonfinite = _leak_scores(models, rows, len(corpus.vocab), leak_length, device)
        result = {"rows": rows, "leak": leak, "step": step, "weights": weights_digest(models),
                  "code": code_fingerprint(), "nonfinite": nonfinite,
                  "settings": eval_settings(lengths, eval_windows, dropout_in_eval, leak_length,
                                            dropout_seed, span_length),
                  "device": str(device)}
        _write_json(run.path / "eval.json", result)
        _write_eval_csv(run.path / "eval.csv", rows)
    run.result = result
    return result


def _leak_scores(models: dict, rows: list[dict], vocab_size: int, leak_length: int,
                 device: torch.device) -> tuple[dict, list[str]]:
    """``({"cat", "base"}: leak score or None, nonfinite)``: the leak score of each model
    (None: not trained, or non-finite) and the names of the non-finite numbers, those of
    the context table ``rows`` (``<model>_ce@<len>``) first, then ``leak_<model>``."""
    leak, nonfinite = {}, [f"{m}_ce@{r['len']}" for r in rows for m in r.get("nonfinite", ())]
    for m, model in models.items():
        leak[m] = leak_score(model, vocab_size, leak_length, device=device) \
            if model is not None else None
        if leak[m] is not None and not math.isfinite(leak[m]):
            leak[m] = None
            nonfinite.append(f"leak_{m}")
    return leak, nonfinite


def _write_eval_csv(path: Path, rows: list[dict]) -> None:
    """The context table ``rows`` as CSV (_EVAL_COLUMNS; ``nonfinite`` space-separated)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_EVAL_COLUMNS, lineterminator="\n",
                       extrasaction="ignore")       # each window's CE: in eval.json only
    w.writeheader()
    w.writerows({**r, "nonfinite": " ".join(r.get("nonfinite", ()))} for r in rows)
    atomic_write_text(path, buf.getvalue())


def _stored_eval(run: Run, settings: dict) -> dict | None:
    """eval.json if it scored the weights now on disk, with these settings, by this code;
    else None. An unreadable eval.json raises RunError (it is never overwritten)."""
    p = run.path / "eval.json"
    if not p.exists():
        return None
    stored = _read_json(p, "delete it to evaluate the run again")
    if not isinstance(stored, dict) or stored.get("settings") != settings \
            or stored.get("code") != code_fingerprint():
        return None
    models, step = run.load_weights()
    if stored.get("step") != step or stored.get("weights") != weights_digest(models):
        return None
    return stored
