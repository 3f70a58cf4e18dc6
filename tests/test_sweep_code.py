"""The learning-rate sweep on the code corpus (issue 62): the code study's nine rows on seeds
0 and 1 at every rate of the grid, each run on the split "files" with the code corpus's
vocabulary, scored on its dev files only; ``--corpus`` on the command (a bad one stops in
one line); the code corpus's artefacts and runs under names of their own, Tiny
Shakespeare's unchanged.

The plan's test runs the sweep with a job that trains nothing; the dev files' test trains
one smoke-sized run of 4 steps on the code corpus: seconds."""
from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
import torch

from catlib.book import profiles
from catlib.book.args import artefact_name, partial_path, sweep_runs
from catlib.book.sweep import main as sweep_main
from catlib.data import load_corpus
from catlib.experiment import scale, sweep
from catlib.experiment.scale_plan import (ALIBI, ALIBI_DEEP, BUCKETS, CONTROL, EULER, EULER_DEEP,
                                          FOX, KERPLE_LOG, ROPE)

# The code study's rows the sweep tunes (issue 62, item 3): the oracle is never swept.
CODE_ROWS = (ALIBI, ALIBI_DEEP, ROPE, EULER, EULER_DEEP,
             CONTROL, BUCKETS, KERPLE_LOG, FOX)
COMMITTED = Path(__file__).resolve().parent.parent / "results" / "lr_sweep_cpu.json"


@pytest.fixture
def data(tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))


def _code(steps=4, batch=2):
    """The smoke profile's experiment on the code corpus, trained ``steps`` steps."""
    e = profiles.experiment("smoke")
    e = dataclasses.replace(e, train=dataclasses.replace(e.train, train_steps=steps, batch=batch))
    return dataclasses.replace(e, corpus="code")


def _sweep_main(argv) -> int:
    """``python -m catlib.book.sweep argv``'s exit status (argparse's own exit too)."""
    try:
        return sweep_main(argv)
    except SystemExit as e:
        return e.code


def test_the_code_sweeps_plan_holds_its_nine_rows_on_the_code_split(data, monkeypatch):
    """The code sweep's first round is each of the nine code rows at every rate of the grid
    on seeds 0 and 1, each run the study's configuration on the split "files" with the
    code corpus's 131 symbols; the artefact records the corpus and its dev files."""
    planned = []

    def job(spec, steps=None, stored=False):
        if stored:
            return None                     # nothing stored: every run goes through the pool
        planned.append((spec["train"]["lr"], spec["train"]["seed"], spec["model"], spec["train"]))
        return {"name": "run", "reused": False, "ce": 1.9, "se": 0.0, "windows": 100,
                "window_ce": [1.9] * 100, "seconds": 1.0}
    monkeypatch.setattr(sweep, "_sweep_job", job)
    e = _code()
    out = sweep.run_sweep(e, root="unused", device="cpu", jobs=1, echo=None)
    assert list(out["rows"]) == list(CODE_ROWS) and out["corpus"] == "code"
    assert len(planned) == 9 * len(sweep.RATES) * 2 == 54                 # ties: no extension
    assert sorted((lr, seed) for lr, seed, *_ in planned) == sorted(
        (r, s) for r in sweep.RATES for s in (0, 1) for _ in CODE_ROWS)
    assert all(train["split"] == "files" and model["vocab_size"] == 131
               for *_, model, train in planned)
    for label, rate, seed in itertools.product(CODE_ROWS, sweep.RATES, (0, 1)):
        model, train, _ = scale.scale_configs(label, e, seed, [1], rate)
        assert (rate, seed, model.to_dict(), train.to_dict()) in planned, (label, rate, seed)
    dev = load_corpus(split="files").files["dev"]
    assert out["dev"]["split"] == "files" and out["dev"]["files"] == [f.path for f in dev]


def test_a_code_run_is_scored_on_the_dev_files_only(data, tmp_path, monkeypatch):
    """A code sweep run (one, trained 4 steps) reads one text: the dev files' ids
    (``corpus.dev``), whole files that lie in neither the training nor the validation part;
    its windows are every non-overlapping one of the training length inside them, as the
    artefact's dev slice records. That slice is today's (``check_dev``); one of other
    files is refused in one line naming ``make sweep CORPUS=code``."""
    import catlib.measure.evaluate as ev

    read, real = [], ev.windows

    def windows(text, length, n, span_length=None):
        read.append((text, length, n))
        return real(text, length, n, span_length)
    monkeypatch.setattr(ev, "windows", windows)
    e = _code()
    spec = {**sweep.sweep_spec(ALIBI, e, 4e-3, tmp_path, seed=0), "device": "cpu"}
    score = sweep._sweep_job(spec)
    corpus = load_corpus(split="files")
    parts = {name: {f.path for f in files} for name, files in corpus.files.items()}
    assert parts["dev"] and not parts["dev"] & (parts["train"] | parts["val"])
    dev_ids = torch.cat([corpus.ids[f.start:f.stop] for f in corpus.files["dev"]])
    definition = sweep.dev_definition(corpus, 32)
    assert read and all(torch.equal(text, corpus.dev) for text, _, _ in read)
    assert torch.equal(corpus.dev, dev_ids)
    assert {(len(t), length, n) for t, length, n in read} == {
        (definition["chars"], 32, definition["windows"])}
    n = definition["windows"]
    assert n == (len(corpus.dev) - 33) // 32 == score["windows"] and n * 32 + 1 <= len(corpus.dev)
    assert definition["files"] == [f.path for f in corpus.files["dev"]]
    sweep.check_dev({"dev": definition}, length=32)                      # today's
    moved = {"dev": {**definition, "files": definition["files"][1:]}, "corpus": "code"}
    with pytest.raises(sweep.SweepError) as said:
        sweep.check_dev(moved)
    assert len(str(said.value).splitlines()) == 1 and "make sweep CORPUS=code" in str(said.value)


def test_tiny_keeps_its_dev_slice_and_a_sweep_of_another_corpus_gives_no_rate(data):
    """Tiny Shakespeare's dev slice is recorded as before the code corpus (the committed
    sweep's artefact still passes ``check_dev``); a study reads no sweep made on the other
    corpus: one line naming the command for its own."""
    committed = json.loads(COMMITTED.read_text())
    sweep.check_dev(committed, length=128)
    assert sweep.dev_definition(load_corpus(split="90/10"), 128) == committed["dev"]
    rows = {label: {"rate": 4e-3, "done": True} for label in CODE_ROWS}
    code_sweep = {"rule": sweep.RULE, "corpus": "code", "rows": rows}
    assert sweep.chosen_rates(code_sweep, CODE_ROWS, corpus="code") == dict.fromkeys(CODE_ROWS, 4e-3)
    with pytest.raises(sweep.SweepError) as said:
        sweep.chosen_rates(code_sweep, CODE_ROWS, corpus="tiny")
    assert len(str(said.value).splitlines()) == 1 and "run `make sweep`" in str(said.value)
    with pytest.raises(sweep.SweepError, match="make sweep CORPUS=code"):
        sweep.chosen_rates({**committed, "rows": rows}, CODE_ROWS, corpus="code")


def test_a_bad_corpus_stops_the_sweep_in_one_line(tmp_path, capsys, monkeypatch):
    """``--corpus nonsense``: exit 2, one line naming the corpora, nothing trained or
    written."""
    monkeypatch.chdir(tmp_path)

    def never(*a, **k):
        raise AssertionError("the sweep started")
    monkeypatch.setattr("catlib.book.sweep.run_sweep", never)
    code = _sweep_main(["--corpus", "nonsense", "--profile", "smoke", "--out", "results",
                        "--root", "runs"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "'nonsense'" in err and "--corpus code" in err, err
    assert list(tmp_path.iterdir()) == []                                # nothing written


def test_the_code_corpus_has_artefacts_and_runs_of_its_own(data, tmp_path, capsys, monkeypatch):
    """Tiny Shakespeare's names are today's; the code corpus's name it. ``--corpus code``
    sweeps the code experiment in ``lr-sweep-code-<profile>-<device>`` and writes
    ``lr_sweep_code_<profile>_<device>.json``."""
    assert artefact_name("lr_sweep", "cpu", "cpu") == "lr_sweep_cpu.json"
    assert artefact_name("scale", "smoke", "cuda") == "scale_smoke_cuda.json"
    assert artefact_name("lr_sweep", "cpu", "cpu", "tiny") == "lr_sweep_cpu.json"
    assert artefact_name("lr_sweep", "cpu", "cpu", corpus="code") == "lr_sweep_code_cpu.json"
    assert artefact_name("scale", "cpu", "cpu", corpus="code") == "scale_code_cpu.json"
    assert artefact_name("lr_sweep", "smoke", "cpu", corpus="code") == "lr_sweep_code_smoke_cpu.json"
    assert partial_path(Path("scale_code_cpu.json")).name == "scale_code_cpu.partial.json"
    assert sweep_runs("runs", "cpu", "cpu") == Path("runs/lr-sweep-cpu-cpu")
    assert sweep_runs("runs", "cpu", "cpu", corpus="code") == Path("runs/lr-sweep-code-cpu-cpu")

    seen = {}

    def fake(experiment, *, root, **kw):
        seen.update(corpus=experiment.corpus, root=Path(root))
        return {"corpus": experiment.corpus, "rows": {ALIBI: {"rate": 4e-3, "done": True}},
                "seeds": [0, 1], "wall_seconds": 1.0}
    monkeypatch.setattr("catlib.book.sweep.run_sweep", fake)
    monkeypatch.setattr("catlib.book.sweep.code_fingerprint", lambda: "fingerprint")
    code = _sweep_main(["--corpus", "code", "--profile", "smoke", "--out", str(tmp_path / "results"),
                        "--root", str(tmp_path / "runs")])
    assert code == 0, capsys.readouterr().err
    assert seen == {"corpus": "code", "root": tmp_path / "runs" / "lr-sweep-code-smoke-cpu"}
    written = json.loads((tmp_path / "results" / "lr_sweep_code_smoke_cpu.json").read_text())
    assert written["corpus"] == "code" and written["provenance"]["corpus"] == "code"
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "lr_sweep_code_smoke_cpu.json", "lr_sweep_code_smoke_cpu.md"]
