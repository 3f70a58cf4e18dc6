"""The book's experiment rows: configs, shared runs, cached per-position curves, artefacts."""
import json

import numpy as np
import pytest

from catlib import book
from catlib.experiment import grid as ex
from catlib.experiment import pool
from catlib.data import load_corpus
from catlib.measure.evaluate import context_table, cross_entropy, text_span
from catlib.experiment.artefacts import read_extrapolation_json, read_position_csv
from catlib.common.devices import one_thread

SIZES = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1, dropout=0.0)
TRAIN = dict(train_steps=3, lr=4e-3, batch=2, seq=16)

def test_configs_follow_the_row(tiny_path):
    # Catches a row built with the wrong variant, split, trained models or dropout.
    model, tc = ex.configs(ex.ROWS["published CAT"], SIZES, TRAIN, seed=2)
    assert model.variant == "published" and model.dropout == 0.1      # the published rate
    assert tc.split == "published" and tc.seed == 2 and tc.models == ("cat", "base")
    model, tc = ex.configs(ex.ROWS["ALiBi baseline"], SIZES, TRAIN, seed=0)
    assert model.baseline_positions == "alibi" and model.dropout == 0.0
    assert tc.split == "90/10" and tc.models == ("base",)
    model, _ = ex.configs(ex.ROWS["relative CAT"], SIZES, TRAIN, seed=0)
    assert model.kernel == "relative" and model.resolved().causal
    assert set(ex.HEADLINE) | set(ex.BEYOND) | set(ex.STUDY) \
        | set(ex.CHAPTER_ROWS["10_equal_compute"]) == set(ex.ROWS)


@pytest.fixture
def trained(tmp_path, tiny_path):
    labels = ("causal CAT", "sinusoidal baseline", "RoPE baseline")
    runs = ex.train_rows(labels, [0], SIZES, TRAIN, root=tmp_path, device="cpu",
                         lengths=[16, 32], eval_windows=2, echo=None)
    return runs, load_corpus(tiny_path, split="90/10")


def test_rows_of_one_run_share_it_and_batches(trained):
    # Catches training the causal CAT's run twice (once per row) or rows on other batches.
    runs, _ = trained
    assert runs["causal CAT", 0] is runs["sinusoidal baseline", 0]
    assert runs["RoPE baseline", 0] is not runs["causal CAT", 0]
    assert runs["RoPE baseline", 0].train_config.models == ("base",)
    ce, leak = ex.scores(runs, "RoPE baseline", [0])
    assert ce.shape == (1, 2) and np.isfinite(ce).all() and leak[0] < 1e-6


def test_position_curve_is_cached_for_its_weights(trained, monkeypatch):
    # Catches a curve that disagrees with the published-protocol CE, a cache that is not
    # used, and a cache that survives a change of the weights it was computed for.
    runs, corpus = trained
    run = runs["causal CAT", 0]
    curve = ex.position_curve(run, "cat", corpus, 32, 2)
    cat, _ = run.load_models()
    # batch_tokens = 32: one window per forward pass, as position_ce, so both read the same
    # float32 logits ([2, 32] products round differently); only the order of the float64
    # sums of 64 CEs differs (rounding ~1e-14; measured 0).
    scored = cross_entropy(cat, corpus.val, 32, eval_windows=2, batch_tokens=32)
    assert curve.mean() == pytest.approx(scored["ce"], rel=1e-12, abs=0)
    # The same stored scoring gives the window-sampling error of that CE.
    assert ex.curve_se(run, "cat", corpus, 32, 2) == pytest.approx(scored["se"], rel=1e-9)
    assert scored["se"] > 0
    calls = []
    monkeypatch.setattr(ex, "position_ce", lambda *a, **k: calls.append(1))
    assert np.array_equal(ex.position_curve(run, "cat", corpus, 32, 2), curve) and not calls
    stored = run.path / "positions-cat-32x2.json"
    data = json.loads(stored.read_text())
    data["ident"]["weights"] = "0" * 16                     # as if other weights were scored
    stored.write_text(json.dumps(data))
    with pytest.raises(TypeError):                          # recomputed: reaches position_ce
        ex.position_curve(run, "cat", corpus, 32, 2)
    assert calls


def test_position_curve_refuses_another_split(trained, tiny_path):
    runs, _ = trained
    with pytest.raises(ValueError, match="split"):
        ex.position_curve(runs["causal CAT", 0], "cat", load_corpus(tiny_path), 32, 2)


def test_parts_merge_into_labelled_results(tmp_path):
    # Catches a runner that drops a notebook's share or writes results without their label.
    rows = {"a CAT": {"train_length": 128, "leak": 0.0,
                      "ce": {"128": 1.9, "512": 2.0, "1024": 2.1, "5000": 2.2}}}
    generated = tmp_path / "book" / "_generated"
    ex.write_part(generated, "06", rows=rows, curves={"a CAT": np.ones(8)})
    ex.write_part(generated, "08", rows={"b CAT": rows["a CAT"]}, curves={"b CAT": np.zeros(8)})
    written = book.publish_extrapolation(tmp_path, "cpu", {"commit": "abc", "device": "cpu"})
    assert [p.name for p in written] == ["extrapolation_cpu.json", "position_ce_cpu.csv"]
    assert set(read_extrapolation_json(written[0])) == {"a CAT", "b CAT"}
    assert set(read_position_csv(written[1])) == {"a CAT", "b CAT"}
    label = json.loads((tmp_path / "results" / "provenance_cpu.json").read_text())
    assert label["commit"] == "abc" and label["artefacts"] == [p.name for p in written]


def test_depth_parts_merge_and_per_seed_ce_is_checked(tmp_path):
    # Catches a refinement table that does not reach results/ and per-seed CE at lengths
    # the row does not have (a reader compares them with the means).
    row = {"train_length": 128, "leak": 0.0, "ce": {"128": 1.9, "512": 2.0, "1024": 2.1, "5000": 2.2},
           "ce_seeds": {"128": [1.8, 2.0], "512": [2.0, 2.0], "1024": [2.1, 2.1], "5000": [2.2, 2.2]}}
    generated = tmp_path / "book" / "_generated"
    depth = {"a CAT": {"trained_solver": "rk4-classic x1",
                       "ce_by_solver": {"rk4-classic x1": [1.9], "rk4-classic x4": [1.95]},
                       "drift": [0.05]}}
    ex.write_part(generated, "08", rows={"a CAT": row}, depth=depth)
    written = book.publish_extrapolation(tmp_path, "cpu", {"commit": "abc"})
    assert [p.name for p in written] == ["extrapolation_cpu.json", "depth_cpu.json"]
    assert json.loads(written[1].read_text()) == depth
    assert read_extrapolation_json(written[0])["a CAT"]["ce_seeds"]["128"] == [1.8, 2.0]
    bad = dict(row, ce_seeds={"128": [1.8]})
    with pytest.raises(ValueError, match="ce_seeds"):
        ex.write_part(generated, "09", rows={"a CAT": bad})


@pytest.mark.slow("trains the same runs in a pool and serially")
def test_parallel_runs_give_the_serial_numbers(tmp_path, tiny_path, monkeypatch):
    # Catches a parallel runner whose runs differ from the serial ones (other thread count,
    # other seeds, other hashes) or that loses a run's stored evaluation or curve.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))        # the worker processes read it
    labels = ("causal CAT", "RoPE baseline")
    out = {}
    for jobs in (1, 2):
        runs = ex.train_rows(labels, [0], SIZES, TRAIN, root=tmp_path / f"jobs{jobs}", device="cpu",
                             lengths=[16], eval_windows=2, curve_length=32, jobs=jobs, echo=None)
        corpus = {"90/10": load_corpus(tiny_path, split="90/10")}
        out[jobs] = ex.table_scores(runs, labels, [0], corpus, 32, 2)
        out[jobs, "names"] = sorted(r.path.name for r in runs.values())
    assert out[1, "names"] == out[2, "names"]                   # same configurations, same hashes
    for part in range(3):   # exact: every job trains and scores on one thread, either way
        for label in labels:
            assert np.array_equal(out[1][part][label], out[2][part][label]), (part, label)


@pytest.mark.slow("starts a pool under a kernel and kills it")
def test_workers_stop_when_the_notebook_is_killed(tmp_path, tiny_path):
    # Catches parallel workers that train on after their notebook was killed: they would hold
    # their runs' locks and the next build would be refused ("in use by pid ...").
    import fcntl
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys; from catlib import experiment as ex; "
        f"ex.train_rows(('RoPE baseline', 'ALiBi baseline'), [0], {SIZES!r}, "
        "dict(train_steps=100000, lr=4e-3, batch=2, seq=16, checkpoint_every=1000), "
        f"root={str(tmp_path)!r}, device='cpu', lengths=[16], eval_windows=2, jobs=2, echo=None)")
    env = {**os.environ, "CATLIB_DATA": str(tiny_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 600      # a hang only: the loop ends when both have started
    while len(list(tmp_path.glob("*/metrics.jsonl"))) < 2:     # both workers are training
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Workers look for their parent every second (_exit_with_parent): far less than this
    # on a loaded machine; the loop ends as soon as each lock is free.
    deadline = time.monotonic() + 120
    for lock in tmp_path.glob("*/lock"):
        fd = os.open(lock, os.O_RDWR)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{lock} still held by a worker"
                    time.sleep(0.2)
        finally:
            os.close(fd)


def test_worker_devices(monkeypatch):
    # Catches a runner that ignores --jobs / --devices or spreads GPU runs over CPU workers.
    monkeypatch.setenv("CATLIB_JOBS", "3")
    assert ex.worker_devices("cpu") == ["cpu"] * 3
    assert ex.worker_devices("cpu", jobs=1) == ["cpu"]
    monkeypatch.setenv("CATLIB_DEVICES", "cuda:0,cuda:1")
    assert ex.worker_devices("cuda") == ["cuda:0", "cuda:1"]
    assert ex.worker_devices("cuda", jobs=2) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    monkeypatch.delenv("CATLIB_DEVICES")
    # several runs share one GPU (CATLIB_JOBS, else as its memory and the CPUs allow)
    assert ex.worker_devices("cuda:1") == ["cuda:1"] * 3
    assert ex.worker_devices("cuda:1", jobs=1) == ["cuda:1"]


def test_book_refuses_absent_gpus(capsys):
    assert book.main(["--devices", "cuda:7", "--no-build", "--profile", "smoke"]) == 2
    assert "not CUDA devices of this machine" in capsys.readouterr().err


def test_dropout_on_rows_are_the_published_protocol_and_stored(tmp_path, tiny_path, monkeypatch):
    # Catches a stored dropout-on table that differs from evaluating with dropout on, one
    # that is not reused, or one reused for other weights.
    runs = ex.train_rows(["published CAT"], [1], SIZES, TRAIN, root=tmp_path, device="cpu",
                         lengths=[16], eval_windows=2, dropout_on=[16, 32], echo=None)
    run, corpus = runs["published CAT", 1], load_corpus(tiny_path, split="published")
    assert (run.path / "eval-dropout-on.json").exists()           # computed by the job itself
    rows = ex.dropout_on_rows(run, corpus, [16, 32], 2)
    cat, base = run.load_models()
    with one_thread():       # as the job scored them: the same kernels, so the same bits
        again = context_table(cat, base, corpus.val, [16, 32], 2, dropout_in_eval=True, seed=1)
        plain = context_table(cat, base, corpus.val, [16, 32], 2)
    assert [r["cat_ce"] for r in rows] == [r["cat_ce"] for r in again]
    assert [r["base_ce"] for r in rows] == [r["base_ce"] for r in again]
    assert rows[0]["cat_ce"] != plain[0]["cat_ce"]                # dropout really was on
    monkeypatch.setattr(ex, "context_table", None)                 # reused: never called
    assert ex.dropout_on_rows(run, corpus, [16, 32], 2) == rows
    stored = run.path / "eval-dropout-on.json"
    data = json.loads(stored.read_text())
    data["ident"]["weights"] = "0" * 16
    stored.write_text(json.dumps(data))
    with pytest.raises(TypeError):                                 # recomputed: reaches it
        ex.dropout_on_rows(run, corpus, [16, 32], 2)


def test_longest_length_of_the_dropout_on_table_uses_the_curve_windows(tmp_path, tiny_path):
    # Catches a dropout-on table whose longest length is scored on other windows than the
    # per-position curve whose mean is the evaluation-mode CE there.
    runs = ex.train_rows(["published CAT"], [1], SIZES, TRAIN, root=tmp_path, device="cpu",
                         lengths=[16], eval_windows=3, curve_length=32, curve_windows=1,
                         dropout_on=[16, 32], echo=None)
    run, corpus = runs["published CAT", 1], load_corpus(tiny_path, split="published")
    rows = ex.dropout_on_rows(run, corpus, [16, 32], 3, curve_length=32, curve_windows=1)
    assert [r["windows"] for r in rows] == [3, 1]
    assert list(json.loads((run.path / "eval-dropout-on.json").read_text())["value"]) == rows
    curve = ex.position_curve(run, "cat", corpus, 32, 1)           # stored by the job: 1 window
    assert curve.shape == (32,) and (run.path / "positions-cat-32x1.json").exists()


def test_costliest_jobs_start_first():
    # Catches the published run (training plus its dropout-on evaluation) queued behind
    # the cheap baseline runs, which leaves one worker idle at the end of a pool.
    spec = lambda kernel, models, dropout_on=(): dict(                     # noqa: E731
        model={"kernel": kernel}, train={"train_steps": 500, "models": models},
        dropout_on=list(dropout_on))
    costs = [pool.expected_cost(spec("absolute", ["cat", "base"], [128])),
             pool.expected_cost(spec("content", ["cat"])),
             pool.expected_cost(spec("absolute", ["cat", "base"])),
             pool.expected_cost(spec("relative", ["cat"])),
             pool.expected_cost(spec("absolute", ["base"]))]
    assert costs == sorted(costs, reverse=True)
    # Chapter 9's study: two blocks; its CATs take one Euler step per block.
    two = lambda **model: pool.expected_cost(dict(                           # noqa: E731
        model={"blocks": 2, **model}, train={"train_steps": 500, "models": ["cat"]}, dropout_on=[]))
    assert two(kernel="alibi-prior", solver="euler") == pool.expected_cost(
        spec("alibi-prior", ["cat"])) / 2
    assert two(kernel="alibi-prior", solver="rk4-classic", train_solver_steps=[1, 2]) > two(
        kernel="alibi-prior", solver="rk4-classic")
    # The midpoint rule evaluates a block twice a step, RK4 four times, Euler once.
    assert two(kernel="alibi-prior", solver="euler") < two(kernel="alibi-prior", solver="midpoint") \
        < two(kernel="alibi-prior", solver="rk4-classic")


@pytest.mark.slow("trains a book pool of 7 runs twice (worker processes)")
def test_book_trains_the_chapters_runs_first(tmp_path, tiny_path, monkeypatch):
    # Catches a first training stage that trains other runs than the chapters ask for
    # (they would train again) or misses the stored curves and dropout-on tables.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    shared = dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic",
                  solver_steps=1, dropout=0.0, train_steps=3, lr=4e-3, batch=2, seq=16,
                  lengths=[16, 32], eval_windows=2, profile="t")
    params = {"05_training": dict(shared, seed=1, val_every=2, val_windows=1),
              "06_context_length": dict(shared, seeds=[0, 1], published_seeds=[1],
                                        published_protocol=True)}
    quiet = lambda *a, **k: None                                           # noqa: E731
    assert book.train_runs_first(params, tmp_path, "cpu", log=quiet) == {"trained": 7, "reused": 0}
    assert book.train_runs_first(params, tmp_path, "cpu", log=quiet) == {"trained": 0, "reused": 7}
    sizes = dict(SIZES)
    said = []
    runs = ex.train_rows(ex.HEADLINE, lambda l: [1] if "published" in l else [0, 1], sizes,
                         dict(TRAIN), root=tmp_path / "runs" / "book-t", device="cpu",
                         lengths=[16], eval_windows=2, curve_length=32, dropout_on=[16, 32],
                         echo=said.append, progress_every=0)   # no progress line on a slow machine
    assert said and all("reused" in line for line in said), said
    assert [m for m in runs["causal CAT", 1].metrics() if m["kind"] == "val"]   # 05's validation
    monkeypatch.setattr(ex, "position_ce", None)
    monkeypatch.setattr(ex, "context_table", None)
    corpus = {s: load_corpus(tiny_path, split=s) for s in ("published", "90/10")}
    ex.table_scores(runs, ex.HEADLINE, lambda l: [1] if "published" in l else [0, 1], corpus, 32, 2)
    ex.dropout_on_rows(runs["published CAT", 1], corpus["published"], [16, 32], 2)
    assert not book.train_runs_first({"07_audit": {}}, tmp_path, "cpu")


def test_book_leaves_chapters_with_other_settings_to_train_their_own(tmp_path):
    shared = dict(d_model=16, lr=4e-3, seeds=[0], seed=0, profile="t")
    params = {"05_training": shared, "08_beyond": dict(shared, lr=1e-3)}
    said = []
    assert not book.train_runs_first(params, tmp_path, "cpu", log=said.append)
    assert "differ" in said[0] and not (tmp_path / "runs").exists()


def test_window_cap_reads_the_curve_windows_at_the_longest_length_only():
    # Catches a bigram floor or table at the longest length on other windows than its curve.
    assert [ex.window_cap(L, 5000, 32, 8) for L in (128, 1024, 5000)] == [32, 32, 8]
    assert ex.window_cap(5000, 5000, 32, None) == 32


def test_a_pool_of_stored_runs_starts_no_worker_and_a_new_run_is_not_begun(tmp_path, tiny_path,
                                                                           monkeypatch):
    # Catches a pool that starts worker processes (seconds of CPU each) to reuse runs whose
    # scores are all stored, or a stored-only pass that writes into a run it cannot reuse.
    from catlib.experiment import pool
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    labels = ("causal CAT", "RoPE baseline")
    kwargs = dict(root=tmp_path, device="cpu", lengths=[16], eval_windows=2, curve_length=32,
                  echo=None)
    first = ex.train_rows(labels, [0], SIZES, TRAIN, jobs=1, **kwargs)

    def no_worker(*args, **kw):
        raise AssertionError("a worker was started for stored runs")
    monkeypatch.setattr(pool, "ProcessPoolExecutor", no_worker)
    again = ex.train_rows(labels, [0], SIZES, TRAIN, jobs=2, **kwargs)
    assert all(run.reused for run in again.values())
    assert {k: r.path for k, r in again.items()} == {k: r.path for k, r in first.items()}
    assert [r.result for r in again.values()] == [r.result for r in first.values()]
    # A run of other settings: the stored-only pass returns None and leaves no directory.
    before = sorted(p.name for p in tmp_path.iterdir())
    row = ex.ROWS["RoPE baseline"]
    model, train = ex.configs(row, SIZES, dict(TRAIN, train_steps=TRAIN["train_steps"] + 1), 0)
    spec = dict(model=model.to_dict(), train=train.to_dict(), root=str(tmp_path), lengths=[16],
                eval_windows=2, curve_length=None, curve_windows=2, dropout_on=[], copy=None,
                device="cpu")
    assert ex._train_job(spec, stored=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.fixture(scope="module")
def trained_with_curve(tmp_path_factory, tiny_path):
    """The book's shape of a chapter's runs: the shorter lengths evaluated, the longest (64)
    scored per position, every length on the span that 64's windows tile."""
    labels = ("causal CAT", "RoPE baseline")
    runs = ex.train_rows(labels, [0], SIZES, TRAIN, root=tmp_path_factory.mktemp("curve"),
                         device="cpu", lengths=[16, 32], eval_windows=2, curve_length=64,
                         curve_windows=3, echo=None)
    return runs, load_corpus(tiny_path, split="90/10")


def test_table_errors_read_the_windows_the_scores_read(trained_with_curve):
    # Catches a stated window count that is not the one the CEs read, and a standard error
    # that is not the CE's own (each row's stored evaluation, the curve's windows at the
    # longest length).
    runs, corpus = trained_with_curve
    corpora = {"90/10": corpus}
    labels, longest = ("causal CAT", "RoPE baseline"), 64
    reads, se = ex.table_errors(runs, labels, [0], corpora, longest, eval_windows=2,
                                curve_windows=3)
    assert reads == {"90/10": {"windows": {16: 2, 32: 2, 64: 3},
                               "span": text_span(len(corpus.val), 64)}}
    cat, _ = runs["causal CAT", 0].load_models()
    _, rope = runs["RoPE baseline", 0].load_models()
    for L, n in reads["90/10"]["windows"].items():
        expected = [cross_entropy(m, corpus.val, L, eval_windows=n, span_length=longest,
                                  **({"batch_tokens": L} if L == longest else {}))["se"]
                    for m in (cat, rope)]
        # float32 logits from batches of other sizes: the CEs agree to float32 rounding.
        assert se[L] == pytest.approx(expected, rel=1e-4), L
    ce, _, _ = ex.table_scores(runs, labels, [0], corpora, longest, 2, curve_windows=3)
    assert ce["causal CAT"].shape == (1, 3)


def test_table_errors_without_a_curve_read_the_stored_lengths(trained):
    runs, corpus = trained
    reads, se = ex.table_errors(runs, ["RoPE baseline"], [0], {"90/10": corpus}, None, 2)
    assert reads == {"90/10": {"windows": {16: 2, 32: 2}, "span": text_span(len(corpus.val), 32)}}
    assert all(len(v) == 1 and v[0] > 0 for v in se.values())
