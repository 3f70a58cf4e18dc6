"""The ablation: each correction of :data:`catlib.nn.config.CORRECTIONS` switched on alone in
the published configuration, from the same initial weights, and audited on the defects it
removes (:data:`~catlib.audit.findings.CORRECTED_BY`).
"""
from __future__ import annotations

import dataclasses

import torch

from ..measure.evaluate import seeded
from ..nn.baselines import Baseline
from ..nn.config import CORRECTIONS, CATConfig
from ..nn.model import CAT
from .defects import _tokens, audit_model
from .findings import CORRECTED_BY, Finding


def build_cat(config: CATConfig, seed: int = 0, device=None) -> CAT:
    """A fresh CAT with the initial weights of ``seed``: configurations that differ only
    in corrections get identical weights (the global RNG is left as it was)."""
    with seeded(seed, torch.device("cpu")):
        model = CAT(config)
    return model.to(device) if device is not None else model


def logits_zeroed(config: CATConfig, length: int = 32, seed: int = 0) -> Finding:
    """The published baseline's dropout on its logits (a setting of the published script,
    not one of the ten): the share of logits that are exactly 0 in training mode."""
    with seeded(seed, torch.device("cpu")):
        baseline = Baseline(config).train()
        x = _tokens(config.vocab_size, 2, length, seed, "cpu")
        with torch.no_grad():
            share = (baseline(x)[0] == 0).double().mean().item()
    return Finding(0, "dropout on the baseline's logits", share > 0, share,
                   "share of baseline logits zeroed, training mode", "")


def ablation(config: CATConfig, seed: int = 0, **audit) -> list[dict]:
    """One correction at a time, from the same initial weights.

    For each field of :data:`catlib.nn.config.CORRECTIONS`: the published variant of
    ``config``, the published variant with that field corrected alone, and the causal
    variant, audited on the defects the field corrects (:data:`CORRECTED_BY`; without the
    dopri5 count). ``config``'s corrections should be left at None. Defect 9 is measured
    in the Chebyshev basis (the published penalty is Fourier's own); ``logit_dropout`` by
    :func:`logits_zeroed`. Returns one dict per (field, defect): field, change, defect,
    and the findings ``published``, ``alone``, ``causal``.
    """
    published = dataclasses.replace(config, variant="published")
    causal = dataclasses.replace(config, variant="causal")
    rows = []
    for name, (before, after) in CORRECTIONS.items():
        basis = "cheb" if name == "penalty" else config.basis
        configs = [dataclasses.replace(c, basis=basis) for c in
                   (published, dataclasses.replace(published, **{name: after}), causal)]
        if CORRECTED_BY[name]:
            audits = [audit_model(build_cat(c, seed), only=CORRECTED_BY[name], seed=seed,
                                  nfe=False, **audit) for c in configs]
        else:
            audits = [[logits_zeroed(c.resolved(), seed=seed)] for c in configs]
        for found in zip(*audits):
            rows.append(dict(field=name, change=f"{before} → {after}", defect=found[0].defect,
                             published=found[0], alone=found[1], causal=found[2]))
    return rows
