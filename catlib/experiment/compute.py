"""What training a run cost: its training FLOPs and wall seconds, counted per trained model,
and the budgets (steps or layers) that give a baseline the training compute of a CAT.

Counting. The FLOPs of one training step are counted on the real training computation of
a model of the run's configuration, on the CPU: the forward pass (train mode, the Sobolev
penalty included) and the backward pass of the loss, at the run's ``batch`` x ``seq``, by
the one rule of :mod:`catlib.measure.cost` (:func:`~catlib.measure.cost.counting`: matrix
products, attention on the MATH backend), so that a step costs the same whatever
attention kernel a run takes. Under that rule a step is 3 x its forward FLOPs for every
model (tests/test_compute.py checks each kind); the step is still counted, not derived,
so that the Sobolev penalty and a drawn solver step count are counted as they run.

Every ODE evaluation counts: a CAT's step count is read per training step from its
metrics log (``nfe_forward``, the block evaluations of that step's forward pass, all
blocks), each distinct count is counted once on a model solved with that many solver
steps, and the run's training FLOPs are the sum over its logged steps, a drawn step count
(ODE-consistent training) counted as drawn. A baseline's steps all cost the same.

Seconds are the sum of the per-step ``seconds`` of the metrics log: the time of the whole
step, so a side-by-side run (CAT and its baseline on the same batches) reports one time
for both of its models.

:func:`run_compute` stores the count as ``compute.json`` in the run directory (written
atomically, valid for the run's config hash, its logged steps and this code), so that a
chapter and a rebuild read it without counting again.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter

import torch
import torch.nn.functional as F

from ..measure.cost import counting
from ..nn.baselines import Baseline
from ..nn.config import CATConfig
from ..nn.model import CAT

COMPUTE_FILE = "compute.json"


def step_flops(model_config: CATConfig, model: str, batch: int, seq: int,
               solver_steps: int | None = None) -> tuple[int, int]:
    """``(flops, nfe)`` of one training step of ``model`` ("cat" or "base") of
    ``model_config`` on a batch of ``batch`` x ``seq`` tokens: forward (train mode, penalty
    included) and backward, counted; ``nfe``: the CAT's block evaluations of the forward pass
    (0 for a baseline). ``solver_steps``: the CAT solved with that many steps (default: its
    own ``solver_steps``). Cached per configuration."""
    cfg = model_config.resolved(torch.device("cpu")).to_dict()
    return _step_flops(json.dumps(cfg, sort_keys=True), model, batch, seq, solver_steps)


@functools.lru_cache(maxsize=256)
def _step_flops(config_json: str, model: str, batch: int, seq: int,
                solver_steps: int | None) -> tuple[int, int]:
    cfg = CATConfig.from_dict(json.loads(config_json))
    if model == "cat":
        cfg = dataclasses.replace(cfg, train_solver_steps=None,
                                  solver_steps=solver_steps or cfg.solver_steps)
    return count_training_step(cfg, model, batch, seq)


def count_training_step(cfg: CATConfig, model: str, batch: int, seq: int,
                        rule=counting) -> tuple[int, int]:
    """``(flops, nfe)`` of one training step of ``model`` ("cat" or "base") of the resolved
    ``cfg`` on random ``[batch, seq]`` tokens (seeded), counted by ``rule`` (a context
    manager yielding a ``FlopCounterMode``; default the module's rule, another one to
    compare rules: benchmarks/recount.py)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = (CAT if model == "cat" else Baseline)(cfg)
        net.train()
        x = torch.randint(0, cfg.vocab_size, (batch, seq))
        with rule() as counter:
            logits, pen = net(x, penalty=True)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x.reshape(-1)) + pen
            loss.backward()
    nfe = net.nfe["forward"] if model == "cat" else 0
    return int(counter.get_total_flops()), int(nfe)


def flops_per_step(model_config: CATConfig, model: str, batch: int, seq: int,
                   nfe_values=()) -> dict[int, int]:
    """``{nfe: flops}``: the FLOPs of a training step for each forward evaluation count in
    ``nfe_values`` (a CAT), or ``{0: flops}`` (a baseline). An evaluation count is mapped to
    its solver step count through the evaluations of one step (``nfe`` of a one-step solve);
    a count that no fixed step count gives raises ValueError."""
    if model != "cat":
        return {0: step_flops(model_config, model, batch, seq)[0]}
    _, per_step = step_flops(model_config, model, batch, seq, 1)
    out = {}
    for nfe in sorted(set(int(n) for n in nfe_values)):
        steps, rest = divmod(nfe, per_step)
        if rest or steps < 1:
            raise ValueError(f"{nfe} block evaluations is not a whole number of solver steps "
                             f"of {per_step} evaluations; adaptive solvers are not counted")
        flops, counted = step_flops(model_config, model, batch, seq, steps)
        if counted != nfe:
            raise ValueError(f"{steps} solver steps gave {counted} evaluations, the log {nfe}")
        out[nfe] = flops
    return out


def count_run(run) -> dict:
    """The training compute of ``run`` (a :class:`~catlib.runs.Run`) from its metrics log:
    ``{model: {"steps": n, "train_flops": F, "seconds": s, "flops_per_step": {nfe: flops},
    "steps_by_nfe": {nfe: n}}}`` per trained model (see the module docstring)."""
    tc, cfg = run.train_config, run.model_config
    train = [m for m in run.metrics() if m.get("kind") == "train"]
    seconds = float(sum(m["seconds"] for m in train))
    out = {}
    for model in tc.models:
        if model == "cat":
            by_nfe = Counter(int(m["nfe_forward"]) for m in train)
        else:
            by_nfe = Counter({0: len(train)})
        per = flops_per_step(cfg, model, tc.batch, tc.seq, by_nfe)
        out[model] = {"steps": len(train), "seconds": seconds,
                      "train_flops": float(sum(per[n] * k for n, k in by_nfe.items())),
                      "flops_per_step": {str(n): float(f) for n, f in per.items()},
                      "steps_by_nfe": {str(n): k for n, k in sorted(by_nfe.items())}}
    return out


def run_compute(run) -> dict:
    """:func:`count_run`, stored as ``compute.json`` in the run directory (atomic, under the
    run's lock) and read back while the run's config hash, its logged steps and this code
    are the same."""
    from ..common.provenance import code_fingerprint
    from ..runs import stored_with_run

    n_logged = sum(1 for m in run.metrics() if m.get("kind") == "train")
    ident = {"hash": run.hash, "steps": n_logged,
             "code": code_fingerprint() + code_fingerprint(("experiment.compute",))}
    return stored_with_run(run, COMPUTE_FILE, ident, lambda: count_run(run))


def expected_step_flops(model_config: CATConfig, model: str, batch: int, seq: int) -> float:
    """The mean FLOPs of one training step before training: for a CAT with drawn step counts
    (``train_solver_steps``) the mean over the counts (each equally likely), else the one
    count."""
    counts = model_config.train_solver_steps if model == "cat" else None
    if not counts:
        return float(step_flops(model_config, model, batch, seq)[0])
    return sum(step_flops(model_config, model, batch, seq, s)[0] for s in counts) / len(counts)


def matched_budget(target: float, base_config: CATConfig, batch: int, seq: int,
                   train_steps: int, how: str, model: str = "base") -> int:
    """The budget that gives ``model`` ("base", the default, or "cat") of ``base_config``
    the training FLOPs ``target``:
    ``how`` "steps": its number of training steps (at its own size, the nearest count);
    "layers": its number of layers (``blocks``), the most whose FLOPs per step at
    ``train_steps`` steps stay within ``target`` (at least 1). Layers come in whole
    numbers (at the ``cpu`` profile's sizes 4 ALiBi layers cost 1.00 of the RK4 x1
    KERPLE-prior CAT's step and 5 layers 1.25), so a caller that must match within 5 %
    gives the layers the remaining FLOPs as steps ("steps" of the deeper configuration;
    :func:`catlib.experiment.frontier.budget_configs`)."""
    if how == "steps":
        return max(1, round(target / expected_step_flops(base_config, model, batch, seq)))
    if how != "layers":
        raise ValueError(f"how must be 'steps' or 'layers', got {how!r}")
    per_step, k = target / train_steps, 1
    while expected_step_flops(dataclasses.replace(base_config, blocks=k + 1), model,
                              batch, seq) <= per_step:
        k += 1
    return k
