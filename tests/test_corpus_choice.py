"""The second corpus through ``catlib.data`` (issue 62, item 1, the wiring): a run's split
names its corpus, so every ``load_corpus(split=run.train_config.split)`` loads the code
corpus for a run on it; ``--corpus`` picks it on the command line, and a bad corpus, a
split of the other corpus or another SymPy stops in one line before anything trains.

Only names that the code before this change already had are imported at the top, so that
each test fails there on what it checks (a split the data layer does not know, a flag the
command line does not have), not on an import."""
import pytest
import torch

from catlib import code_corpus as cc
from catlib.cli.commands import main
from catlib.data import DataError, load_corpus

# The first flags of a tiny, quick run (tests/test_cli.py's), without its corpus.
TINY = ["--variant", "causal", "--d_model", "16", "--n_heads", "2", "--n_freq", "4",
        "--solver", "euler", "--solver_steps", "1", "--train_steps", "2", "--batch", "2",
        "--seq", "16", "--lengths", "16", "--eval_windows", "2", "--no-progress",
        "--device", "cpu"]


def _main(argv):
    try:
        return main(argv)
    except SystemExit as e:   # argparse's errors
        return e.code


def _one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_the_files_split_loads_the_code_corpus(tiny_path):
    c = load_corpus(split="files")
    assert c.sha256 == cc.CODE_SHA256 and c.split == "files" == cc.SPLIT
    assert len(c.vocab) == 131 and c.vocab.chars[-1] == cc.UNKNOWN
    own = cc.load_code_corpus()
    for part in ("train", "dev", "val"):
        assert torch.equal(getattr(c, part), getattr(own, part)), part
    # the data layer's names of each corpus, its causal split and its vocabulary
    from catlib.data import CORPORA, causal_split, corpus_of, vocab_size
    assert {split: corpus_of(split) for splits in CORPORA.values() for split in splits} == \
        {"published": "tiny", "90/10": "tiny", "files": "code"}
    assert (causal_split("tiny"), causal_split("code")) == ("90/10", "files")
    assert vocab_size("code") == len(c.vocab)
    assert vocab_size("tiny") == len(load_corpus(tiny_path, split="90/10").vocab) == 65
    # Tiny Shakespeare's file is no source of the code corpus: refused, not ignored.
    with pytest.raises(DataError, match="installed SymPy") as e:
        load_corpus(tiny_path, split="files")
    assert "\n" not in str(e.value)


def test_an_unknown_corpus_is_one_line_naming_the_fix():
    from catlib.data import causal_split, check_corpus
    for name_it in (check_corpus, causal_split):
        with pytest.raises(DataError) as e:
            name_it("nonsense")
        message = str(e.value)
        assert "\n" not in message and "'nonsense'" in message
        assert "--corpus tiny" in message and "--corpus code" in message


def test_a_run_on_the_code_corpus_trains_on_no_validation_or_dev_file(tmp_path, monkeypatch,
                                                                     sampler_spy):
    # Reads what train_run hands the sampler, the validation during training and the
    # evaluation (tests/test_protocol.py's way): the training files' ids, and only they,
    # are drawn from; every reported CE reads the validation files.
    from catlib.nn.config import CATConfig
    from catlib.runs import evaluation, train_run
    from catlib.runs import training as run_training
    from catlib.training import loop
    from catlib.training.loop import TrainConfig

    handed, drawn = sampler_spy
    validated, scored = [], []

    def train_loop(trainer, *, val_ids=None, **kwargs):
        validated.append(val_ids)
        return loop.train_loop(trainer, val_ids=val_ids, **kwargs)

    def context_table(cat, base, val, *args, **kwargs):
        scored.append(val)
        return table(cat, base, val, *args, **kwargs)

    table = evaluation.context_table
    monkeypatch.setattr(run_training, "train_loop", train_loop)
    monkeypatch.setattr(evaluation, "context_table", context_table)
    model = CATConfig(vocab_size=131, variant="causal", d_model=16, n_heads=2, n_freq=4,
                      solver="euler", solver_steps=1, dropout=0.0)
    run = train_run(model, TrainConfig(train_steps=2, batch=2, seq=16, split="files",
                                       models=("cat",), val_every=1, val_windows=2),
                    root=tmp_path, device="cpu", lengths=(16,), eval_windows=2, progress=False,
                    echo=None)
    c = cc.load_code_corpus()
    assert run.config["data_sha256"] == cc.CODE_SHA256 and len(handed) == 1 and len(drawn) == 2
    train_ids = torch.cat([c.ids[f.start:f.stop] for f in c.files["train"]])
    assert torch.equal(handed[0], train_ids) and torch.equal(handed[0], c.train)
    held_out = {f.path for f in c.files["val"] + c.files["dev"]}
    assert held_out and not held_out & {f.path for f in c.files["train"]}
    assert all(int(s.max()) + 16 + 1 <= len(handed[0]) for s in drawn)
    # Every CE the run reports (validation while training, the evaluation) reads the
    # validation files, none the dev files.
    assert validated and scored
    for val in validated + scored:
        assert torch.equal(val, c.val) and not torch.equal(val[:len(c.dev)], c.dev)


def test_the_command_line_picks_the_code_corpus_with_its_vocabulary():
    from catlib.cli.commands import build_parser, configs_from_args
    model, train, _ = configs_from_args(build_parser().parse_args(["train", "--corpus", "code"]))
    assert (train.split, model.vocab_size) == ("files", 131)
    model, train, _ = configs_from_args(build_parser().parse_args(["train", "--corpus", "tiny"]))
    assert (train.split, model.vocab_size) == ("published", 65)     # the published run's


@pytest.mark.parametrize("flags,says", [
    (["--corpus", "nonsense"], ("--corpus", "'nonsense'", "tiny", "code")),
    (["--corpus", "code", "--split", "90/10"], ("--split 90/10", "--corpus code", "files")),
    (["--corpus", "code", "--split", "published"], ("--split published", "--corpus code")),
])
def test_a_bad_corpus_choice_stops_in_one_line_writing_nothing(flags, says, tmp_path, capsys):
    root = tmp_path / "runs"
    assert _main(["train", *TINY, "--run-dir", str(root), *flags]) == 2
    err = _one_line(capsys.readouterr().err)
    assert all(s in err for s in says), err
    assert not root.exists()


def test_another_sympy_stops_the_command_line_in_one_line_before_training(tmp_path, monkeypatch,
                                                                          capsys):
    from catlib.runs import training as run_training
    trainers = []
    monkeypatch.setattr(run_training, "SideBySide", lambda *a, **k: trainers.append(a))
    monkeypatch.setattr(cc, "SYMPY_VERSION", "1.13.3")    # the corpus pinned to another SymPy
    root = tmp_path / "runs"
    assert _main(["train", *TINY, "--run-dir", str(root), "--corpus", "code"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "SymPy 1.13.3" in err and "pip install -c constraints.txt sympy" in err, err
    assert not trainers and not root.exists()
