"""`python -m catlib`: published flags and defaults, output format, reuse, bad input."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from catlib.cli.commands import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--d_model", "16", "--n_heads", "2", "--n_freq", "4", "--solver", "rk4-classic",
        "--solver_steps", "1", "--train_steps", "3", "--batch", "2", "--seq", "16",
        "--lengths", "16", "32", "--eval_windows", "4", "--no-progress", "--device", "cpu"]
PUBLISHED = dict(device="auto", blocks=1, d_model=128, n_heads=8, n_freq=32, basis="fourier",
                 sob_lambda=5e-7, train_steps=800, lr=3e-4, batch=32, seq=256, eval_windows=256)


def _main(argv):
    try:
        return main(argv)
    except SystemExit as e:  # argparse errors
        return e.code


def test_published_flags_and_defaults():
    args = build_parser().parse_args(["train"])
    assert {k: getattr(args, k) for k in PUBLISHED} == PUBLISHED
    assert args.variant == "published" and args.solver is None and args.adjoint
    assert args.lengths == [128, 512, 1024, 5000] and args.rtol == 1e-7 and args.atol == 1e-9
    top = build_parser().format_help()
    for flag in [*PUBLISHED, "variant", "solver", "rtol", "atol", "seed"]:
        assert f"--{flag}" in top
    for flag in ("--no-adjoint", "--run-dir", "--budget", "--lengths", "rk4-classic"):
        assert flag in top


def test_train_end_to_end_then_reuse_and_eval(tiny_path, tmp_path, monkeypatch, capsys):
    env = {**os.environ, "CATLIB_DATA": str(tiny_path)}
    cmd = [sys.executable, "-m", "catlib", "train", *TINY, "--run-dir", str(tmp_path)]
    # timeouts for a hang only: a tiny run takes seconds
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("step 0 | CAT ") and " | base " in out[0]
    i = out.index("len | CAT CE | PPL | Bas CE | PPL | dCE")
    assert out[i + 1].startswith("16 | ") and out[i + 2].startswith("32 | ")
    assert any(line.startswith("leak score | CAT ") for line in out)
    run_dir = out[-1].removeprefix("run: ")
    assert Path(run_dir).name.startswith("published-")

    # `eval` of the finished run, in its own process, prints the training's table exactly
    # (would catch an evaluation of other weights, e.g. the checkpoint of an earlier step)
    ev = subprocess.run([sys.executable, "-m", "catlib", "eval", run_dir, "--lengths", "16", "32",
                         "--eval_windows", "4", "--device", "cpu"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr
    assert ev.stdout.splitlines() == out[i:-1]

    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert main(["train", *TINY, "--run-dir", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert "reusing finished run" in again and "step 0 |" not in again
    assert main(["eval", run_dir, "--lengths", "16", "600000", "--eval_windows", "2",
                 "--device", "cpu"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("len | CAT CE") and "600000 | skipped" in table


BAD = [
    (["--train_steps", "0"], "--train_steps must be a positive integer"),
    (["--batch", "-2"], "--batch must be a positive integer"),
    (["--lr", "0"], "--lr must be a positive number"),
    (["--seq", "60000"], "--seq must be at most 49998"),
    (["--n_heads", "3"], "divisible by n_heads"),
    (["--budget", "soon"], "invalid budget"),
    (["--batch", "many"], "invalid int value"),
    (["--device", "tpu"], "unknown device"),
    # used to fail late: a traceback after config.json was written, or a whole training run
    # and then an evaluation error (the published operator is undefined at T = 1)
    (["--seed", "-1"], "--seed must be an integer from 0 to 4294967295"),
    (["--seed", "4294967296"], "--seed must be an integer from 0"),
    (["--lengths", "1", "16"], "--lengths must be >= 2 for the published (non-causal) CAT"),
    (["--models", "cat", "cat"], "--models must be one or both"),
    (["--split", "80/20"], "invalid choice"),
    (["--seq", "1"], "--seq must be >= 2 for the published"),
]


@pytest.mark.parametrize("extra,message", BAD)
def test_bad_flags(extra, message, tiny_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert _main(["train", *TINY, "--run-dir", str(tmp_path / "runs"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("device,available", [
    ("cuda", torch.cuda.is_available()),
    ("mps", getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available())])
def test_unavailable_device(device, available, tiny_path, tmp_path, monkeypatch, capsys):
    if available:
        pytest.skip(f"{device} is available here")
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert _main(["train", *TINY[:-2], "--device", device, "--run-dir", str(tmp_path)]) == 2
    assert f"--device {device}: {device.upper()} is not available" in capsys.readouterr().err


def test_missing_or_corrupt_corpus(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "tiny.txt"
    bad.write_text("To be, or not to be")
    for path, message in ((bad, "has SHA-256"), (tmp_path / "none.txt", "corpus not found")):
        monkeypatch.setenv("CATLIB_DATA", str(path))
        assert _main(["train", *TINY, "--run-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert message in err and "CATLIB_DATA" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_bad_run_directory_and_no_overwrite(tiny_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert _main(["eval", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "runs" / "mine").mkdir(parents=True)
    (tmp_path / "runs" / "mine" / "notes.txt").write_text("keep me")
    assert _main(["train", *TINY, "--run-dir", str(tmp_path / "runs"), "--name", "mine"]) == 2
    assert "not a catlib run directory" in capsys.readouterr().err
    assert os.listdir(tmp_path / "runs" / "mine") == ["notes.txt"]
    assert _main([]) == 2 and "choose a command" in capsys.readouterr().err


def test_dropout_in_eval_twice_gives_the_same_table(tiny_path, tmp_path, monkeypatch, capsys):
    """Would catch an unseeded --dropout-in-eval (each evaluation its own numbers)."""
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert main(["train", *TINY, "--run-dir", str(tmp_path), "--name", "run"]) == 0
    capsys.readouterr()
    tables = []
    for _ in range(2):
        assert main(["eval", str(tmp_path / "run"), "--lengths", "16", "--eval_windows", "4",
                     "--dropout-in-eval", "--device", "cpu"]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1]


def test_split_and_models_flags():
    args = build_parser().parse_args(["train", "--split", "90/10", "--models", "base"])
    assert args.split == "90/10" and args.models == ["base"]
    args = build_parser().parse_args(["train"])
    assert args.split == "published" and args.models == ["cat", "base"]
    assert build_parser().parse_args(["eval", "r", "--allow-other-code"]).allow_other_code


def test_generated_flags_have_the_config_defaults():
    """Every CATConfig and TrainConfig field that `train` exposes defaults to the field's
    own default (the solver: None, which the command resolves to CATConfig's dopri5 off
    MPS), so that a default lives in one place and the flags cannot drift from it."""
    import dataclasses

    from catlib import CATConfig
    from catlib.cli.commands import FLAG_OF, TRAIN_FLAGS, configs_from_args
    from catlib.training.loop import TrainConfig
    args = build_parser().parse_args(["train"])
    from catlib.cli.commands import LEFT_OUT
    from catlib.measure.config import EvalConfig
    exposed = {f.field: f for f in TRAIN_FLAGS}
    assert {f.config for f in TRAIN_FLAGS} == {CATConfig, TrainConfig, EvalConfig}
    for cls in (CATConfig, TrainConfig, EvalConfig):
        for field in dataclasses.fields(cls):
            if field.name not in exposed:
                assert LEFT_OUT[field.name], field.name   # left out on purpose, with a reason
                continue
            default = field.default if field.default_factory is dataclasses.MISSING \
                else field.default_factory()
            value = getattr(args, field.name)
            if field.name == "solver":
                assert value is None
            else:
                assert (tuple(value) if isinstance(value, list) else value) == default, field.name
            assert FLAG_OF[field.name] == f"--{field.name}"
    assert configs_from_args(args) == (CATConfig(), TrainConfig(),
                                                            EvalConfig())
    model, _, _ = configs_from_args(args)
    assert model == CATConfig() and model.resolved("mps").solver == "rk4-classic"
    assert "Sobolev weight (default: 5e-7)" in " ".join(build_parser().format_help().split())


def test_every_field_has_a_flag_or_a_reason():
    """Flags come from every field of CATConfig, TrainConfig and EvalConfig; the book's
    rows (kernels, baselines, dropout) need these."""
    import dataclasses

    from catlib import CATConfig
    from catlib.cli.commands import LEFT_OUT, TRAIN_FLAGS
    from catlib.measure.config import EvalConfig
    from catlib.training.loop import TrainConfig
    fields = {f.name for c in (CATConfig, TrainConfig, EvalConfig) for f in dataclasses.fields(c)}
    assert fields == {f.field for f in TRAIN_FLAGS} | set(LEFT_OUT)
    help_text = build_parser().format_help()
    for flag in ("--kernel", "--baseline_positions", "--baseline_loops", "--kernel_residual",
                 "--kernel_scale", "--kernel_horizon", "--quad_nodes", "--dropout",
                 "--leak_length"):
        assert f"{flag} " in help_text or f"{flag}," in help_text, flag


def test_prior_kernel_train_length_follows_seq():
    from catlib.cli.commands import configs_from_args
    args = build_parser().parse_args(["train", "--variant", "causal", "--kernel", "kerple-prior",
                                      "--seq", "48", "--models", "cat"])
    model, train, _ = configs_from_args(args)
    assert (model.kernel, model.train_length, train.models) == ("kerple-prior", 48, ("cat",))
    args = build_parser().parse_args(["train", "--variant", "causal", "--kernel", "alibi-prior",
                                      "--seq", "48", "--train_length", "64",
                                      "--no-kernel_residual", "--dropout", "0"])
    model, _, _ = configs_from_args(args)
    assert (model.train_length, model.kernel_residual, model.dropout) == (64, False, 0.0)
    args = build_parser().parse_args(["train", "--variant", "causal", "--baseline_positions",
                                      "alibi", "--baseline_loops", "2", "--models", "base"])
    model, _, _ = configs_from_args(args)
    assert (model.baseline_positions, model.baseline_loops, model.train_length) == ("alibi", 2, None)


def test_old_flag_spellings_are_aliases():
    old = build_parser().parse_args(["train", "--val-every", "3", "--checkpoint-every", "7",
                                     "--batch-tokens", "64", "--dropout-in-eval"])
    new = build_parser().parse_args(["train", "--val_every", "3", "--checkpoint_every", "7",
                                     "--batch_tokens", "64", "--dropout_in_eval"])
    assert vars(old) == vars(new)
    assert (old.val_every, old.checkpoint_every, old.batch_tokens, old.dropout_in_eval) == (3, 7, 64, True)


def test_config_errors_name_the_flag():
    from catlib.cli.commands import _flagify
    assert _flagify("val_every must be an integer >= 0, got -1") == \
        "--val_every must be an integer >= 0, got -1"
    assert _flagify("batch_tokens must be positive integers, got 0").startswith("--batch_tokens ")
    assert _flagify("d_model (30) must be divisible by n_heads (4)") == \
        "--d_model (30) must be divisible by n_heads (4)"
    assert _flagify("vocab_size must be an integer >= 1, got 0").startswith("vocab_size ")


@pytest.mark.parametrize("row", [["--kernel", "kerple-prior", "--models", "cat"],
                                 ["--baseline_positions", "alibi", "--models", "base"]])
def test_the_books_kernel_and_baseline_train_from_the_command_line(row, tiny_path, tmp_path,
                                                                    monkeypatch, capsys):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    tiny = ["train", "--variant", "causal", "--split", "90/10", "--d_model", "16", "--n_heads",
            "2", "--n_freq", "4", "--solver", "rk4-classic", "--solver_steps", "1",
            "--train_steps", "2", "--batch", "2", "--seq", "16", "--lengths", "16", "32",
            "--eval_windows", "2", "--device", "cpu", "--no-progress", "--run-dir",
            str(tmp_path), "--name", "r"]
    assert main(tiny + row) == 0
    out = capsys.readouterr().out
    assert "leak score" in out and out.count("\n32 | ") == 1
    from catlib.runs import open_run
    run = open_run(tmp_path / "r")
    assert run.status["status"] == "finished" and run.train_config.models == (row[-1],)
    if row[0] == "--kernel":
        assert (run.model_config.kernel, run.model_config.train_length) == ("kerple-prior", 16)
    else:
        assert run.model_config.baseline_positions == "alibi"


def test_every_train_flag_has_its_help_in_one_home():
    """The help of every field of the three configs lives in catlib.cli.flags' tables,
    once, and nowhere else (no field carries help metadata)."""
    import dataclasses

    from catlib.cli import flags
    from catlib.measure.config import EvalConfig
    from catlib.nn.config import CATConfig
    from catlib.training.loop import TrainConfig

    tables = (flags.PUBLISHED_FIELDS, flags.CATLIB_FIELDS)
    assert not set(tables[0]) & set(tables[1])
    for cls in (CATConfig, TrainConfig, EvalConfig):
        for f in dataclasses.fields(cls):
            assert "help" not in f.metadata, f"{cls.__name__}.{f.name} keeps help of its own"
            if f.name not in flags.LEFT_OUT:
                assert any(f.name in t for t in tables), f"{cls.__name__}.{f.name} has no help"
    known = {f.name for cls in (CATConfig, TrainConfig, EvalConfig) for f in dataclasses.fields(cls)}
    assert set(tables[0]) | set(tables[1]) <= known, "help for a field that does not exist"
