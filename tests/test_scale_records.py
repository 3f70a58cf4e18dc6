"""The scale study on Tiny Shakespeare as issue 61 asks for it (items 2, 4 and 6): budgets
1x and 2x, ten seeds at 1x for the kernel question's rows; every point with the passes its
row made over the training part and the context gain beyond the training length per
window; every run's records kept in the artefact, so that a study resumed in a later
session, with its run directories gone, trains nothing it has recorded and rebuilds the
same points, its cost carried across.

Smoke sizes, a few steps: seconds a run."""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from catlib.book import profiles
from catlib.book.scale import main
from catlib.experiment import scale, scale_plan
from catlib.experiment.scale_plan import (ALIBI, BUCKETS, CONTROL, EULER, FOX, KERPLE, KERPLE_LOG,
                                          ROPE)

SEVEN = (EULER, BUCKETS, KERPLE_LOG, FOX, CONTROL, ALIBI,
         ROPE)


def _small(steps: int = 4):
    e = profiles.experiment("smoke")
    return dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=2))


def test_the_cpu_plan_is_1x_and_2x_with_ten_seeds_at_1x_for_the_kernel_question():
    """Every row at 1x and 2x on seeds 0-2; the Euler CAT, the bucket bias, KERPLE-log, FoX,
    the kernel control, ALiBi and RoPE on seeds 0-9 at 1x, seeds 3-9 trained to 1x only;
    paired: seed s draws the batches of seed s in every row. The cuda plan is kept."""
    assert scale_plan.plan_for("cpu") == {1: (0, 1, 2), 2: (0, 1, 2)}
    assert set(scale_plan.KERNEL_QUESTION_ROWS) == set(SEVEN)
    extra = scale_plan.extra_seeds_for("cpu")
    for label in scale_plan.swept_rows():      # the oracle's plan: tests/test_scale_oracle.py
        ten = label in SEVEN
        assert scale_plan.row_plan(scale_plan.plan_for("cpu"), extra, label) == {
            1: tuple(range(10 if ten else 3)), 2: (0, 1, 2)}, label
    assert scale_plan.plan_for("cuda") == {b: (0, 1, 2) for b in (1, 2, 4, 8, 16)}
    assert scale_plan.extra_seeds_for("cuda") == {}
    e = profiles.experiment("cpu")
    specs, _, steps = scale.job_specs(e, scale_plan.plan_for("cpu"), "runs", [EULER, KERPLE],
                                      extra=extra)
    assert sorted(specs) == sorted([(EULER, s) for s in range(10)]
                                   + [(KERPLE, s) for s in range(3)])
    assert len({(s["train"]["batch"], s["train"]["seq"]) for s in specs.values()}) == 1
    for (label, seed), spec in specs.items():
        train = spec["train"]
        assert train["seed"] == seed           # with one batch and seq: seed s's batches
        assert train["train_steps"] == steps[label, seed][2 if seed < 3 else 1]
        assert list(train["branches"]) == ([steps[label, seed][1]] if seed < 3 else [])
    assert steps[EULER, 5] == {1: steps[EULER, 0][1]}


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def test_a_point_records_its_passes_and_each_windows_context_gain(data, tmp_path):
    """Each point says how many times its row read the training part (steps x batch x seq
    characters over its characters) and holds the context gain beyond the training length
    per seed and window at the longest length, every window of the span: the same numbers
    as :func:`~catlib.measure.context_gain.context_gain` on that budget's weights."""
    from catlib.data import load_corpus
    from catlib.experiment.ladder import ladder_model
    from catlib.measure.context_gain import context_gain
    from catlib.measure.evaluate import text_span
    from catlib.runs import open_run

    e = _small()
    out = scale.run_study(e, root=tmp_path, device="cpu", plan={1: (0,), 2: (0,)},
                          rows=[ALIBI], jobs=1, echo=None)
    corpus = load_corpus(split="90/10")
    points = {p["budget"]: p for p in out["rows"][ALIBI]["points"]}
    for budget, p in points.items():
        assert "passes" in p and "context_gain" in p, sorted(p)
        assert p["passes"] == p["steps"] * e.train.batch * e.train.seq / len(corpus.train)
        gain = p["context_gain"]
        assert (gain["length"], gain["train_length"], gain["stride"]) == (64, 32, 4)
        assert gain["windows"] == text_span(len(corpus.val), 64) // 64
        assert [len(g) for g in gain["gain"]] == [gain["windows"]]          # [seeds][windows]
        assert all(abs(g - (s - f)) < 1e-12 for g, s, f in zip(
            gain["gain"][0], gain["sliding"][0], gain["full"][0]))
        assert len(p["train_ce"]["16"]) == 1
    assert points[2]["passes"] > points[1]["passes"] > 0
    trunk = open_run(tmp_path / out["per_seed"][ALIBI]["0"]["run"])
    model = ladder_model(trunk, points[1]["steps"], "base")
    from catlib.common.devices import one_thread   # as the pool scores

    with one_thread():
        direct = context_gain(model, corpus.val, 64, 32, span_length=64)
    assert points[1]["context_gain"]["gain"][0] == direct["gain"].tolist()   # bit for bit
    # issue 62: the per-position curves of both readings, binned from 32 to 64
    bins = points[1]["context_gain"]["bins"]
    assert bins[0] == 32 and bins[-1] == 64 and bins == sorted(set(bins))
    for reading in ("full", "sliding"):
        want = [float(direct[f"{reading}_positions"][a - 32:b - 32].mean())
                for a, b in zip(bins[:-1], bins[1:])]
        assert np.allclose(points[1]["context_gain"][f"{reading}_curve"][0], want, rtol=0, atol=1e-12)
    record = out["per_seed"][ALIBI]["0"]["budgets"]["1"]
    assert record["context_gain"]["gain"] == points[1]["context_gain"]["gain"][0]
    assert record["ce"] == {L: ce[0] for L, ce in points[1]["ce"].items()}


def test_records_are_read_only_for_the_same_run_scored_the_same_way(data, tmp_path):
    """A record stands for a run where it names the run the study would train (its config
    hash: another rate is another run) and holds every score at each of its budgets,
    scored as the study scores."""
    e = _small()
    plan = {1: (0,), 2: (0,)}
    specs, _, steps = scale.job_specs(e, plan, tmp_path, [ALIBI])
    spec = specs[ALIBI, 0]
    name = scale.run_name(scale.CATConfig.from_dict(spec["model"]),
                          scale.TrainConfig(**spec["train"]), "cpu")
    record = {k: 0 for k in ("steps", "train_flops", "seconds", "passes", "ce", "se", "windows",
                             "window_ce", "train_ce", "context_gain")}
    study = {"scoring": scale.study_scoring(e), "per_seed": {ALIBI: {"0": {
        "run": name, "budgets": {"1": record, "2": record}}}}}
    read = lambda s, sp=specs: scale.recorded_runs(sp, steps, s, scale.study_scoring(e), "cpu")  # noqa: E731
    assert list(read(study)) == [(ALIBI, 0)]
    other, _, _ = scale.job_specs(e, plan, tmp_path, [ALIBI], rates={ALIBI: 8e-3})
    assert read(study, other) == {}                                        # another rate
    assert read({**study, "scoring": {**study["scoring"], "caps": [4, 4, 4]}}) == {}
    short = {k: v for k, v in record.items() if k != "context_gain"}
    assert read({**study, "per_seed": {ALIBI: {"0": {
        "run": name, "budgets": {"1": record, "2": short}}}}}) == {}       # not finished
    assert read(None) == {}


ROWS = (ALIBI, EULER)
PLAN = {1: (0,), 2: (0,)}
EXTRA = {ALIBI: {1: (1,)}}          # a row's own seed at 1x, as the kernel question's


@pytest.fixture(scope="module")
def sessions(tmp_path_factory, tiny_path):
    """Three runs of ``make scale`` (``--recipe_rate``: the device's plan, here
    :data:`PLAN` with :data:`EXTRA`), each on a "fresh machine": the run directories of the
    one before deleted, only its artefact left. The first is killed after its first run;
    the second finishes the study; the third finds it complete. Returns each one's
    artefact and the runs each trained."""
    from catlib.experiment import grid

    folder = tmp_path_factory.mktemp("scale_sessions")
    two = {r: scale_plan.SCALE_ROWS[r] for r in ROWS}
    out, trained = [], []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        mp.chdir(folder)
        mp.setattr("catlib.experiment.scale_plan.SCALE_ROWS", two)
        mp.setitem(scale_plan.PLANS, "cpu", PLAN)
        mp.setattr(scale_plan, "EXTRA_SEEDS", {"cpu": EXTRA, "cuda": {}}, raising=False)
        mp.setattr("catlib.book.scale.profile_experiment", lambda profile: _small())
        (folder / "results").mkdir()
        command = ["--profile", "smoke", "--root", "runs", "--recipe_rate", "--jobs", "1"]
        path = folder / "results" / "scale_smoke_cpu.test.json"
        partial = folder / "results" / "scale_smoke_cpu.test.partial.json"
        for session in range(3):
            mine = []

            def counting(spec, steps=None, stored=False, mine=mine, session=session):
                if not stored and session == 0 and mine:
                    raise RuntimeError("killed")
                found = grid._train_job(spec, steps, stored)
                if found is not None and not found["reused"]:
                    mine.append(found["name"])
                return found
            mp.setattr("catlib.experiment.scale._train_job", counting)
            shutil.rmtree(folder / "runs", ignore_errors=True)             # a fresh machine
            if session == 0:
                with pytest.raises(RuntimeError, match="killed"):
                    main(command)
                out.append(json.loads(partial.read_text()))
            else:
                assert main(command) == 0
                assert not partial.exists()
                out.append(json.loads(path.read_text()))
                out[-1]["text"] = path.read_text()
            trained.append(mine)
    return out, trained


@pytest.mark.slow("trains three tiny runs of the scale study, one session after another")
def test_a_resumed_study_trains_nothing_it_recorded_and_rebuilds_the_same_points(sessions):
    """The second session, its run directories gone, reads the run the first recorded
    (trains only the other two) and gives that row the same points; the third trains
    nothing and writes the same rows. Before, every run was trained again."""
    (cut, whole, again), trained = sessions
    assert cut["partial"] is True and len(trained[0]) == 1
    assert trained[0][0] not in trained[1] and len(trained[1]) == 2, trained
    (first,) = cut["rows"]
    (seed,) = cut["per_seed"][first]
    assert cut["per_seed"][first][seed]["run"] == trained[0][0]
    assert whole["rows"][first] == cut["rows"][first]
    assert whole["per_seed"][first][seed] == cut["per_seed"][first][seed]
    assert whole["recorded_runs"] == 1 and whole["partial"] is False
    assert trained[2] == [] and again["recorded_runs"] == 3 and again["trained"] == []
    assert again["rows"] == whole["rows"] and again["per_seed"] == whole["per_seed"]
    points = {p["budget"]: p for p in whole["rows"][ALIBI]["points"]}
    assert {b: p["seeds"] for b, p in points.items()} == {1: [0, 1], 2: [0]}  # its own seed
    from catlib.experiment.scale_records import seed_window_ce

    # each window's CE over any of a point's seeds, for a comparison on the seeds two rows share
    assert seed_window_ce(whole, ALIBI, 1, [0, 1]) == points[1]["window_ce"]
    assert seed_window_ce(whole, ALIBI, 1, [1]) == whole["per_seed"][ALIBI]["1"][
        "budgets"]["1"]["window_ce"]
    assert seed_window_ce(whole, ALIBI, 2, [0, 1]) is None           # seed 1 stops at 1x
    assert whole["extra_seeds"] == {ALIBI: {"1": [1]}}
    assert not any(line.strip().replace(".", "").replace(",", "").isdigit()
                   for line in whole["text"].splitlines())        # a number list on one line


@pytest.mark.slow("trains three tiny runs of the scale study, one session after another")
def test_the_cost_carries_across_sessions(sessions):
    """The killed first session's minutes and run stay in the study's cost after the second
    session read its run from the artefact (not from a run directory); the third, which
    trained nothing, adds nothing."""
    (cut, whole, again), trained = sessions
    assert [i["runs"] for i in cut["invocations"]] == [trained[0]]
    assert [i["runs"] for i in whole["invocations"]] == [trained[0], trained[1]]
    assert whole["invocations"][0] == cut["invocations"][0]
    assert [i["finished"] for i in whole["invocations"]] == [False, True]
    assert again["invocations"] == whole["invocations"]
