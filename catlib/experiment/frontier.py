"""Chapter 10's measurements: budgets matched in training compute, the loss-compute frontier
and the inference dial.

- :func:`budget_configs`: the configuration of a row whose steps or layers are set by
  compute (``Row.steps_share``, ``Row.compute_as``, ``Row.ladder``), the multiplier
  computed from counted FLOPs (:mod:`catlib.experiment.compute`), never typed.
- :func:`frontier_table`: CE against training FLOPs, per row, at several budgets. A
  baseline's points are the weights one long run kept on its way (``TrainConfig.
  checkpoints``: the learning rate is constant and there is no schedule, so the weights
  after n steps of a long run *are* the run of n steps, bit for bit on the same kernels).
  A CAT's Sobolev penalty weight follows a schedule over ``train_steps``
  (:func:`catlib.training.loop.penalty_weight`), so a CAT's points are its run stopped
  early, the penalty weight still on the run's schedule (not bit for bit a shorter run:
  the chapter states the difference, measured). Points away from a row's final budget
  have one seed.
- :func:`dial_table`: an ODE-consistent CAT evaluated with other solvers (fewer or more
  evaluations than it was trained with), CE against inference FLOPs per token.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..common.verdicts import beyond_spread, verdict
from ..nn.config import FIXED_STEP_SOLVERS
from .compute import expected_step_flops, matched_budget, run_compute

# The inference dial: (solver, steps), from the cheapest; the trained solver is added.
DIAL = (("euler", 1), ("euler", 2), ("rk4-classic", 1), ("euler", 4), ("rk4-classic", 2),
        ("euler", 8), ("rk4-classic", 4))


# The longest length of the frontier is scored on at most this many windows (the table's
# curve uses more): the frontier's points are many, and each is a forward pass per window.
FRONTIER_LONG_WINDOWS = 4


def frontier_scoring(lengths, eval_windows: int, curve_windows: int | None) -> tuple[list, list]:
    """The lengths of the frontier (the shortest and the longest of ``lengths``) and the
    windows each is scored on: ``eval_windows`` at the shortest, at most
    :data:`FRONTIER_LONG_WINDOWS` at the longest."""
    longest = max(lengths)
    return ([min(lengths), longest],
            [eval_windows, min(FRONTIER_LONG_WINDOWS, curve_windows or eval_windows)])


def budget_configs(row, experiment, model, train):
    """The model and training configuration of a chapter-10 row (see
    :class:`catlib.experiment.Row`): ``model`` and ``train`` are the row's plain ones.

    ``steps_share`` s: ``round(s * train_steps)`` steps. ``compute_as`` ("steps", R): as
    many steps as give the row the training FLOPs of row R at the experiment's steps (R's
    expected FLOPs per step, counted, times its steps, over the row's own FLOPs per step);
    ("layers", R): the most layers whose FLOPs per step stay within R's, then as many
    steps as give it R's training FLOPs (layers come in whole numbers: at the ``cpu``
    profile's sizes 4 ALiBi layers cost 1.00 of the RK4 x1 CAT's FLOPs per step, so they
    train the experiment's steps). ``ladder``: the weights are also kept after ``round(f *
    train_steps)`` steps for each share f, those below the run's own steps.
    """
    from .grid import ROWS, row_configs

    steps = experiment.train.train_steps
    if row.steps_share != 1.0:
        train = dataclasses.replace(train, train_steps=max(1, round(row.steps_share * steps)))
    if row.compute_as:
        how, of = row.compute_as
        m_of, t_of = row_configs(ROWS[of], experiment, train.seed)
        if ROWS[of].is_cat and m_of.resolved().solver not in FIXED_STEP_SOLVERS:
            raise ValueError(f"{row.label}: matching the compute of {of!r} needs its FLOPs per "
                             f"step, which its adaptive solver {m_of.resolved().solver!r} does "
                             f"not fix in advance; use a fixed-step solver {FIXED_STEP_SOLVERS}")
        target = expected_step_flops(m_of, ROWS[of].model, t_of.batch, t_of.seq) * t_of.train_steps
        n = matched_budget(target, model, train.batch, train.seq, steps, how, row.model)
        if how == "layers":       # whole layers, then the FLOPs they leave as steps
            model = dataclasses.replace(model, blocks=n)
            n = matched_budget(target, model, train.batch, train.seq, steps, "steps", row.model)
        train = dataclasses.replace(train, train_steps=n)
    if row.ladder:
        keep = sorted({round(f * steps) for f in row.ladder} - {0})
        train = dataclasses.replace(train, checkpoints=tuple(
            n for n in keep if n < train.train_steps))
    return model, train


def ladder_model(run, step: int, model_key: str, device="cpu"):
    """The model ``model_key`` of ``run`` with the weights it kept after ``step`` steps
    (``TrainConfig.checkpoints``); the final weights when ``step`` is the run's last."""
    from ..nn.baselines import Baseline
    from ..nn.model import CAT
    from ..runs import RunError
    from ..runs.files import load_checkpoint
    from ..runs.training import ladder_file

    if step == run.train_config.train_steps:
        return run.load_weights(device)[0][model_key]
    path = run.path / ladder_file(step, model_key)
    if not path.exists():
        raise RunError(f"{path} is missing: the run kept no weights after {step} steps "
                       f"(its checkpoints: {list(run.train_config.checkpoints)})")
    ck = load_checkpoint(path, "cpu")
    if not isinstance(ck, dict) or ck.get("config_hash") != run.hash:
        raise RunError(f"{path} was written for another config; retrain the run")
    with torch.random.fork_rng(devices=[]):
        net = (CAT if model_key == "cat" else Baseline)(run.model_config)
    net.load_state_dict(ck["state_dict"])
    return net.to(device)


def ladder_points(run, model_key: str) -> list[int]:
    """The steps of the run's ladder: its kept checkpoints and its last step."""
    tc = run.train_config
    return sorted({*tc.checkpoints, tc.train_steps})


def ladder_ce(run, model_key: str, step: int, corpus, lengths, caps, device=None) -> dict:
    """CE ``{length: ce}`` of the weights ``run`` kept after ``step`` steps at each of
    ``lengths`` on at most ``caps[i]`` windows (:func:`catlib.measure.evaluate.cross_entropy`),
    stored with the run (valid for the weights, the code and the settings)."""
    from ..measure.evaluate import cross_entropy
    from ..common.provenance import code_fingerprint
    from ..runs import stored_with_run, weights_digest

    model = ladder_model(run, step, model_key, device or "cpu")
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("experiment.frontier",)),
             "step": step, "lengths": list(lengths), "windows": list(caps)}
    return stored_with_run(run, f"ladder-ce-{step}-{model_key}.json", ident, lambda: {
        str(L): cross_entropy(model, corpus.val, L, eval_windows=n, device=device)["ce"]
        for L, n in zip(lengths, caps)})


def step_train_flops(run, model_key: str, step: int) -> tuple[float, float]:
    """``(train FLOPs, seconds)`` of the first ``step`` steps of ``run``'s model (a ladder
    point: its share of the run's counted FLOPs and logged seconds)."""
    full = run_compute(run)[model_key]
    per = {int(n): f for n, f in full["flops_per_step"].items()}
    train = [m for m in run.metrics() if m.get("kind") == "train" and m["step"] < step]
    nfe = [int(m["nfe_forward"]) if model_key == "cat" else 0 for m in train]
    return float(sum(per[n] for n in nfe)), float(sum(m["seconds"] for m in train))


def frontier_table(runs: dict, points: dict, corpus, lengths, caps, device=None) -> dict:
    """The artefact ``results/frontier_<profile>.json``: ``{row: {"points": [{"steps": n,
    "train_flops": f, "seconds": s, "ce": {"<length>": [CE per seed]}}]}}``.

    ``points``: ``{row: [(label, seeds, step), ...]}``, each point the weights of the runs
    ``runs[label, seed]`` after ``step`` steps (their final weights or a ladder point);
    ``train_flops`` and ``seconds`` are the mean over its seeds. ``corpus``: the rows' split.
    """
    from .grid import ROWS

    out = {}
    for row, plist in points.items():
        pts = []
        for label, seeds, step in plist:
            key = ROWS[label].model
            counted = [step_train_flops(runs[label, s], key, step) for s in seeds]
            ce = [ladder_ce(runs[label, s], key, step, corpus, lengths, caps, device) for s in seeds]
            pts.append({"steps": int(step), "seeds": [int(s) for s in seeds],
                        "train_flops": float(np.mean([c[0] for c in counted])),
                        "seconds": float(np.mean([c[1] for c in counted])),
                        "ce": {str(L): [c[str(L)] for c in ce] for L in lengths}})
        out[row] = {"points": sorted(pts, key=lambda p: p["train_flops"])}
    return out


def dial_table(run, corpus, lengths, caps, dial=DIAL, device=None) -> dict:
    """The inference dial of one CAT run: ``{solver label: {"flops_per_token": {"<L>": f},
    "ce": {"<L>": ce}}}`` for its trained solver and each of ``dial`` ((solver, steps)
    pairs), at ``lengths`` on at most ``caps`` windows each. CE from
    :func:`catlib.measure.refinement.run_refinement` (stored with the run), FLOPs per token from
    :func:`catlib.measure.cost.forward_flops_per_token` on one window of each length."""
    from ..nn.model import solved_with
    from ..measure.refinement import solver_label
    from .grid import run_refinement

    cat = run.load_weights(device or "cpu")[0]["cat"]
    out = {}
    for L, n in zip(lengths, caps):
        ref = run_refinement(run, corpus, L, n, finer=dial, device=device)
        for label, ce in ref["ce_by_solver"].items():
            out.setdefault(label, {"flops_per_token": {}, "ce": {}})["ce"][str(L)] = ce
    trained = ref["trained_solver"]
    for solver, steps in [(None, None), *dial]:
        label = trained if solver is None else solver_label(solver, steps)
        with solved_with(cat, solver, steps):
            for L in lengths:
                out[label]["flops_per_token"][str(L)] = flops_per_token(cat, L)
    return out


def flops_per_token(model, length: int) -> float:
    """Forward FLOPs per token of ``model`` on a sequence of ``length`` tokens
    (:func:`catlib.measure.cost.forward_flops_per_token`; beyond 1024 tokens from three short counts,
    see :func:`_flops_per_token`)."""
    from ..measure.cost import forward_flops_per_token

    return _flops_per_token(model, length, forward_flops_per_token)


def _flops_per_token(model, length: int, count) -> float:
    """Forward FLOPs per token at ``length``: counted at the length itself up to 1024 tokens;
    beyond, from three counts at 128, 256 and 512 tokens, which fix the FLOPs per sequence
    a + b L + c L^2 (every product is linear or quadratic in L) exactly."""
    if length <= 1024:
        return count(model, length)
    # three short counts fix the quadratic exactly (every product is linear or quadratic in L)
    xs = np.array([128, 256, 512], dtype=float)
    ys = np.array([count(model, int(x)) * x for x in xs])
    a = np.polyfit(xs, ys, 2)
    return float(np.polyval(a, length) / length)


def real_lengths(diff, lengths, rebuild: float | None = None) -> list:
    """The lengths where a per-seed difference ``[seeds, lengths]`` is real, by chapter 8's
    rule (:func:`catlib.common.verdicts.beyond_spread`)."""
    return [L for L, r in zip(lengths, beyond_spread(diff, rebuild)) if r]


def who_wins(diff, lengths, rebuild: float | None, first: str, second: str) -> str:
    """:func:`catlib.common.verdicts.verdict` of ``diff`` = CE(first) − CE(second) per seed
    ``[seeds, lengths]`` (chapter 10's name for it): one sentence, each row named once."""
    return verdict(diff, lengths, first, second, rebuild)


def frontier_leads(table: dict, row: str, other: str, length: str) -> list:
    """At each budget of ``row``: CE of ``other`` minus CE of ``row``, ``other``'s CE
    interpolated in log training FLOPs between its points (None outside its range); > 0
    where ``row``'s frontier lies below ``other``'s there."""
    b = table[other]["points"]
    xs = np.log([p["train_flops"] for p in b])
    ys = [np.mean(p["ce"][length]) for p in b]
    out = []
    for p in table[row]["points"]:
        x = float(np.log(p["train_flops"]))
        out.append(float(np.interp(x, xs, ys) - np.mean(p["ce"][length]))
                   if xs[0] <= x <= xs[-1] else None)
    return out


def frontier_lead(table: dict, row: str, other: str, length: str) -> float | None:
    """:func:`frontier_leads` at ``row``'s largest budget."""
    return frontier_leads(table, row, other, length)[-1]
