"""Chapter 09's experiment: the study's rows, the copy test in the pool, the artefact."""
import json

import numpy as np
import pytest

from catlib import book
from catlib.book import context_use as cu
from catlib.experiment import grid as ex
from catlib.experiment.config import ExperimentConfig, StudyConfig

SHARED = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
              dropout=0.0, train_steps=3, lr=4e-3, batch=4, seq=16, lengths=[16, 32],
              eval_windows=2, curve_windows=2)
STUDY = dict(study_blocks=2, study_share=0.5, study_periods=[4, 12])


def test_study_rows_take_the_studys_blocks_and_batches():
    # Catches a study row trained on plain text or with one block, and a plain row that
    # picks up the study's settings.
    experiment = ExperimentConfig.from_parameters(dict(SHARED, **STUDY, seeds=[0, 1]))
    assert experiment.train.repeat_share == 0 and experiment.model.blocks == 1
    for label in ex.STUDY:
        model, tc = ex.row_configs(ex.ROWS[label], experiment, seed=1)
        assert model.blocks == 2 and tc.repeat_share == 0.5 and tc.repeat_periods == (4, 12)
        assert tc.seed == 1 and tc.split == "90/10"
        if model.kernel.endswith("prior"):
            assert model.train_length == 16
    model, _ = ex.row_configs(ex.ROWS[ex.FAR_COPY], experiment, 0)
    assert model.kernel == "alibi-prior" and model.far_heads == 2 and model.attention_residual
    model, tc = ex.row_configs(ex.ROWS["ALiBi baseline"], experiment, 0)
    assert model.blocks == 1 and tc.repeat_share == 0
    # The study is not shared: chapters that differ only in it share their runs.
    plain = ExperimentConfig.from_parameters(dict(SHARED, seeds=[0, 1]))
    assert plain.shared() == experiment.shared() and plain.study == StudyConfig()
    assert experiment.study.label() == "repeat p=0.5, r=4-12"


def test_chapter_09_covers_the_rows_of_06_and_08_with_their_seeds():
    # Catches a book row missing from the copy test, or copied with seeds its chapter
    # never trained (they would train here).
    rows = ex.CHAPTER_ROWS["09_using_context"]
    assert set(rows) == set(ex.CHAPTER_ROWS["06_context_length"]) | set(
        ex.CHAPTER_ROWS["08_beyond"]) | set(ex.STUDY)
    assert len(rows) == len(set(rows)) and len(ex.STUDY) >= 5
    p = {"seeds": [0, 1, 2], "published_seeds": [0]}
    for label in rows:
        owner = "06_context_length" if label in ex.CHAPTER_ROWS["06_context_length"] else "08_beyond"
        study = p["seeds"][:1] if label in ex.STUDY_DIAGNOSTIC else p["seeds"]
        want = study if ex.ROWS[label].study else ex.chapter_seeds(owner, label, p)
        assert ex.chapter_seeds("09_using_context", label, p) == want, label
    assert ex.chapter_seeds("09_using_context", "published CAT", p) == [0]
    assert ex.chapter_seeds("09_using_context", "relative CAT", p) == [0]
    assert ex.chapter_seeds("09_using_context", ex.FAR_COPY, p) == [0, 1, 2]
    assert ex.chapter_seeds("09_using_context", ex.STUDY_DIAGNOSTIC[0], p) == [0]


def test_the_extra_rows_are_trained_where_a_profile_asks_and_only_there():
    # Catches a cpu build that still trains a row its chapters were told to leave out (the
    # 45-minute budget), or a smoke or paper build that loses one (CI runs their code).
    from catlib.book.profiles import PROFILES
    from catlib.book.training import _row_seeds
    for profile, wanted in (("smoke", True), ("cpu", False), ("paper", True)):
        chosen = {name: {"seed": 0, **PROFILES[profile][name]} for name in ex.CHAPTER_ROWS}
        trained = _row_seeds(chosen)
        assert all((label in trained) == wanted for label in ex.EXTRA), profile
        assert set(ex.CHAPTER_ROWS["09_using_context"]) - set(ex.EXTRA) <= set(trained), profile
        assert all(trained[label] for label in trained), profile      # no row with no seed
    p = {"seeds": [0, 1, 2], "extra_rows": False}
    assert ex.chapter_seeds("09_using_context", "ALiBi-prior CAT", p) == []
    # The study's ALiBi-prior CAT and RoPE baseline: the first seed in the cpu build (its
    # budget), every seed where extra_rows is True; the study's other rows, the
    # ODE-consistent far-head row among them, keep every seed.
    assert ex.SEEDS_WITH_EXTRA and ex.FAR_ODE not in ex.SEEDS_WITH_EXTRA
    for label in ex.SEEDS_WITH_EXTRA:
        assert ex.chapter_seeds("09_using_context", label, p) == [0], label
        assert ex.chapter_seeds("09_using_context", label, {**p, "extra_rows": True}) == [0, 1, 2]
    for label in (ex.FAR_ODE, ex.FAR_COPY, "ALiBi baseline, repeat"):
        assert ex.chapter_seeds("09_using_context", label, p) == [0, 1, 2], label
    assert ex.chapter_seeds("08_beyond", "KERPLE-prior CAT", p) == [0, 1, 2]


@pytest.mark.slow("trains the study's rows in a pool")
def test_pool_trains_the_study_and_stores_every_copy_test(tmp_path, tiny_path, monkeypatch):
    # Catches a pool that leaves the study or the copy tests to the chapter (they would
    # run on one core after the pool), and a copy test computed again when stored.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    params = {"09_using_context": dict(SHARED, **STUDY, seeds=[0], published_seeds=[0],
                                       copy_distances=[4, 8], copy_passages=1, profile="t")}
    monkeypatch.setattr(ex, "CHAPTER_ROWS", {"09_using_context": ("ALiBi baseline",
                                                                  "ALiBi baseline, repeat",
                                                                  "far-head ALiBi CAT, repeat")})
    quiet = lambda *a, **k: None                                           # noqa: E731
    assert book.train_runs_first(params, tmp_path, "cpu", log=quiet) == {"trained": 3, "reused": 0}
    root = tmp_path / "runs" / "book-t"
    stored = [p for p in root.glob("*/copy-*.json") if not p.name.startswith("copy-random-")]
    assert len(stored) == 3
    # The study's two rows, also on random characters (chapter 9's third table).
    assert len(list(root.glob("*/copy-random-*.json"))) == 2
    experiment = ExperimentConfig.from_parameters(params["09_using_context"])
    runs = ex.train_grid(ex.CHAPTER_ROWS["09_using_context"], experiment, root=root,
                         device="cpu", echo=None)
    assert runs["far-head ALiBi CAT, repeat", 0].model_config.blocks == 2
    import catlib.measure.copying
    monkeypatch.setattr(catlib.measure.copying, "copy_gain", None)     # stored: never computed again
    from catlib.data import load_corpus
    corpus = {"90/10": load_corpus(tiny_path, split="90/10")}
    gains = cu.copy_gains(runs, ex.CHAPTER_ROWS["09_using_context"], lambda label: [0], corpus,
                          [4, 8], 1)
    assert all(t.gain.shape == t.position.shape == (1, 2) and np.isfinite(t.gain).all()
               for t in gains.values())
    # Both inputs fit seq = 16 (2d - 1 <= 16): the in-range passages, 8 per passage asked.
    assert all(t.by_passage[d].shape == (1, 8) for t in gains.values() for d in (4, 8))


def test_context_use_part_reaches_results(tmp_path):
    # Catches an artefact without the study's label, blocks or per-seed gains.
    experiment = ExperimentConfig.from_parameters(dict(SHARED, **STUDY, seeds=[0, 1]))
    gains = {"ALiBi baseline": np.array([[0.01, -0.02], [0.0, 0.01]]),
             "ALiBi baseline, repeat": np.array([[0.8, 0.1], [0.6, 0.2]])}
    ce = {label: np.array([[1.9, 2.0], [1.8, 2.1]]) for label in gains}
    table = cu.context_use_table(gains, ce, [100, 32], {label: [16, 32] for label in gains},
                                 experiment)
    assert table["ALiBi baseline"]["train"] == "plain" and table["ALiBi baseline"]["blocks"] == 1
    study = table["ALiBi baseline, repeat"]
    assert study["train"].startswith("repeat p=0.5") and study["blocks"] == 2
    assert study["copy_gain"] == {"32": [0.8, 0.6], "100": [0.1, 0.2]}   # sorted distances
    assert study["ce"] == {"16": pytest.approx(1.85), "32": pytest.approx(2.05)}
    generated = tmp_path / "book" / "_generated"
    ex.write_part(generated, "09_using_context", context_use=table)
    written = book.publish_extrapolation(tmp_path, "cpu", {"commit": "abc"})
    assert [p.name for p in written] == ["context_use_cpu.json"]
    assert json.loads(written[0].read_text()) == table


def test_kept_fraction():
    gains = np.array([[0.4, 0.2, 0.1], [0.6, 0.2, 0.0]])
    assert cu.kept_fraction(gains, [100, 1000, 2000], 100, 1000) == pytest.approx(0.4)
    assert cu.kept_fraction(gains, [100, 1000, 2000], 100, 2000) == pytest.approx(0.1)
    assert np.isnan(cu.kept_fraction(-gains, [100, 1000, 2000], 100, 1000))
    assert np.isnan(cu.kept_fraction(gains / 100, [100, 1000, 2000], 100, 1000))   # 0.005: none


def test_the_in_range_reference_fits_the_training_length():
    # Catches the earlier rule (the longest distance below T: 100 at T = 128, whose second
    # copy runs to position 198).
    near, far = cu.reference_distances([32, 64, 100, 400, 1000, 2000], 128)
    assert near == 64 and far == {8: 1000, 16: 2000}     # no 32x: nothing near 4096
    assert cu.reference_distances([32, 100, 400], 128)[0] == 32
    assert cu.reference_distances([32, 100, 128, 400, 1000, 2000, 4000], 128)[1] == {8: 1000, 16: 2000, 32: 4000}
    # At T = 256, 4000 is 15.6x: 16x, not 32x; two multiples never share a distance.
    assert cu.reference_distances([128, 2000, 4000], 256)[1] == {8: 2000, 16: 4000}
    assert cu.reference_distances([8, 16, 64], 32) == (16, {})


def test_kept_by_seed_divides_each_seeds_gains():
    gains = np.array([[0.4, 0.2], [0.5, 0.45], [0.001, 0.3]])
    kept = cu.kept_by_seed(gains, [64, 2000], 64, 2000)
    assert kept[:2] == pytest.approx([0.5, 0.9]) and np.isnan(kept[2])   # nothing to keep


def test_best_oracle_takes_the_best_k_per_distance_and_reaches_the_artefact():
    oracle = {1: {32: 0.5, 64: 0.1}, 4: {32: 0.4, 64: 0.3}}
    gains, ks, by_k = cu.best_oracle(oracle, [64, 32])
    assert ks == [1, 4] and gains.tolist() == [[0.5, 0.3]] and by_k is oracle
    assert cu.kept_fraction(gains, [32, 64], 32, 64) == pytest.approx(0.6)
    experiment = ExperimentConfig.from_parameters(dict(SHARED, **STUDY, seeds=[0]))
    g = {"ALiBi baseline, repeat": np.array([[0.8, 0.1]])}
    table = cu.context_use_table(g, {"ALiBi baseline, repeat": np.array([[1.9]])}, [32, 64],
                                 {"ALiBi baseline, repeat": [16]}, experiment,
                                 random_gains={"ALiBi baseline, repeat": np.array([[0.9, 0.7]])},
                                 oracle={"text": (gains, ks, oracle),
                                         "random": (gains * 2, [8, 8], oracle)},
                                 drift={"ALiBi baseline, repeat": np.array([0.002])})
    assert table["ALiBi baseline, repeat"]["copy_gain_random"] == {"32": [0.9], "64": [0.7]}
    row = table[cu.ORACLE]
    assert row["copy_gain"] == {"32": [0.5], "64": [0.3]} and row["best_k"] == {"32": 1, "64": 4}
    assert row["copy_gain_random"] == {"32": [1.0], "64": [0.6]}
    assert row["copy_gain_by_k"] == {"1": {"32": 0.5, "64": 0.1}, "4": {"32": 0.4, "64": 0.3}}
    assert table["ALiBi baseline, repeat"]["drift"] == [0.002]


def test_the_moonshot_is_met_only_by_a_seed_meeting_every_target():
    # Catches a verdict that reads the mean instead of the seed, lets a missing 32x pass,
    # or forgets the CE or the drift condition.
    d, far = [64, 2000, 4000], {16: 2000, 32: 4000}
    gains = np.array([[1.0, 0.95, 0.80], [1.0, 0.95, 0.70], [1.0, 0.95, 0.80], [0.001, 0.5, 0.5]])
    ce, drift = np.array([[1.90], [1.90], [1.95], [1.90]]), np.array([0.001, 0.001, 0.001, 0.02])
    seeds = cu.moonshot_seeds(gains, ce, drift, d, 64, far, {16: 1.0, 32: 0.5}, alibi_ce=1.92)
    assert [s["misses"] for s in seeds] == [[], ["32×"], ["CE"], ["16×", "32×", "drift"]]
    assert seeds[0]["kept"] == pytest.approx({16: 0.95, 32: 0.80})
    assert seeds[0]["of_oracle"] == pytest.approx({16: 0.95, 32: 1.60})
    # An untested target is neither met nor missed, and the verdict names it.
    untested = cu.moonshot_seeds(gains[:2], ce[:2], drift[:2], d, 64, {16: 2000}, {16: 1.0}, 1.92)
    assert [u["misses"] for u in untested] == [[], []] and 32 not in untested[0]["kept"]
    table = cu.moonshot_markdown({"a": ([0, 1], seeds[:2])}, {"a": 6.5}, far).splitlines()
    assert len(table) == 2 + 2 and table[2].endswith("| met |") and "missed (32×)" in table[3]
    assert "| 6.5 |" in table[2] and "| 95% | 95% |" in table[2]
    table = cu.moonshot_markdown({"b": ([0], untested[:1])}, {"b": 1.2}, {16: 2000}).splitlines()
    assert "not tested" in table[2] and table[2].endswith("| met where tested (32× not tested) |")


def test_kept_intervals_read_each_seeds_passages():
    # Catches an interval that ignores the passages' spread, or a fraction that is not the
    # seed's own (mean far / mean near).
    rng = np.random.default_rng(1)
    near = np.stack([1.0 + 0.2 * rng.standard_normal(32), 1.0 + 0.02 * rng.standard_normal(32)])
    far = np.stack([0.5 + 0.1 * rng.standard_normal(4), 0.5 + 0.01 * rng.standard_normal(4)])
    test = cu.CopyTest(gain=None, position=None, by_passage={64: near, 1000: far})
    k = cu.kept_intervals(test, 64, 1000)
    assert k.shape == (2, 3)
    assert k[:, 0] == pytest.approx(far.mean(1) / near.mean(1))
    assert (k[:, 1] < k[:, 0]).all() and (k[:, 0] < k[:, 2]).all()
    assert k[1, 2] - k[1, 1] < (k[0, 2] - k[0, 1]) / 4          # ten times less spread
    assert np.isnan(cu.kept_intervals(cu.CopyTest(None, None, {64: near / 100, 1000: far}), 64, 1000)).all()
    assert cu.kept_words(k[1]).startswith(f"{k[1, 0]:.0%} [")
    from catlib.measure.kept import differs
    assert differs((0.58, 0.55, 0.61), (0.42, 0.40, 0.44)) and not differs((0.59, 0.54, 0.64), (0.58, 0.56, 0.60))


def test_half_kept_reads_every_seed():
    # Catches a target read from the seeds' mean (issue 43: a row passed with 54.8 % as the
    # mean while one seed kept 48.7 %).
    kept = {8: np.array([[0.58, 0, 0], [0.58, 0, 0], [0.487, 0, 0]]),
            16: np.array([[0.6, 0, 0]] * 3)}
    assert kept[8][:, 0].mean() >= 0.5 and not cu.half_kept(kept)
    assert cu.half_kept({8: kept[16], 16: kept[16]}) and not cu.half_kept({32: kept[16]})


def test_kept_range_is_short_and_says_nothing_to_keep():
    from catlib.book.context_use import kept_range
    from catlib.common.verdicts import MAX_BOLD_WORDS
    text = kept_range({8: [0.57, 0.58, 0.51], 16: [0.44, 0.44, 0.37]}, {8: 1000, 16: 2000})
    assert text == "51–58% at 1000 (8×) and 37–44% at 2000 (16×)"
    assert len(text.split()) <= MAX_BOLD_WORDS
    assert kept_range({8: [float("nan")]}, {8: 1000}) == "nothing to keep at 1000 (8×)"
