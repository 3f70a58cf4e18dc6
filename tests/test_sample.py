"""Text samples of a run's models (catlib.cli.sample, `python -m catlib sample`)."""
import pytest
import torch

from catlib.cli.commands import main
from catlib.nn.config import CATConfig
from catlib.runs import RunError, train_run
from catlib.cli.sample import generate, sample_run
from catlib.training.loop import TrainConfig

TINY = CATConfig(variant="causal", d_model=16, n_heads=2, n_freq=4, solver="rk4-classic",
                 solver_steps=1, dropout=0.1)


@pytest.fixture(scope="module")
def run_dir(tiny_path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATLIB_DATA", str(tiny_path))
        run = train_run(TINY, TrainConfig(train_steps=2, batch=2, seq=16, models=("cat",)),
                        root=tmp_path_factory.mktemp("runs"), lengths=(16,), eval_windows=1,
                        progress=False, echo=None, device="cpu")
    return run.path


def test_generate_is_reproducible_from_the_seed_and_in_eval_mode():
    torch.manual_seed(0)
    from catlib.nn.model import CAT
    model = CAT(CATConfig(**{**TINY.to_dict(), "vocab_size": 11})).train()
    prompt = torch.tensor([1, 2, 3])
    state = torch.get_rng_state()
    a = generate(model, prompt, 12, seed=5)
    assert torch.equal(torch.get_rng_state(), state)          # the global RNG is untouched
    assert model.training                                      # mode restored
    assert a.shape == (15,) and torch.equal(a[:3], prompt) and int(a.max()) < 11
    assert torch.equal(a, generate(model, prompt, 12, seed=5))
    assert not torch.equal(a, generate(model, prompt, 12, seed=6))
    greedy = generate(model, prompt, 5, temperature=0)
    assert torch.equal(greedy, generate(model, prompt, 5, temperature=0, seed=9))


def test_sample_run_and_its_errors(run_dir, tiny_path, monkeypatch):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    text = sample_run(run_dir, 40, prompt="Th", seed=1)
    assert len(text) == 40 and text == sample_run(run_dir, 40, prompt="Th", seed=1)
    assert len(sample_run(run_dir, 10)) == 10             # default prompt: validation text
    with pytest.raises(RunError, match="did not train 'base'.*--model cat"):
        sample_run(run_dir, 10, model="base")
    with pytest.raises(RunError, match="not in the vocabulary"):
        sample_run(run_dir, 10, prompt="\u00e9")


def test_sample_command(run_dir, tiny_path, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    args = ["sample", str(run_dir), "--chars", "30", "--seed", "2", "--device", "cpu"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first and len(first) >= 30
    assert main(["sample", str(run_dir), "--model", "base", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not train 'base'" in err[0]
    import shutil
    unfinished = tmp_path / "unfinished"
    shutil.copytree(run_dir, unfinished)
    (unfinished / "status.json").write_text('{"status": "stopped", "step": 1}')
    assert main(["sample", str(unfinished), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not finished (it is stopped at step 1)" in err[0]


@pytest.mark.parametrize("flag, value", [("--temperature", "nan"), ("--temperature", "inf"),
                                         ("--temperature", "-1"),
                                         ("--seed", "99999999999999999999999"), ("--seed", "-1")])
def test_sample_refuses_a_bad_setting_in_one_line(run_dir, tiny_path, monkeypatch, capsys, flag, value):
    # Catches settings that crashed inside torch (a NaN temperature: "probability tensor
    # contains either inf, nan or element < 0"; a seed past 64 bits: "Overflow when
    # unpacking long long") instead of one line naming the flag and the fix.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert main(["sample", str(run_dir), "--chars", "5", "--device", "cpu", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"error: {flag} must be" in err[0], err


def test_a_tiny_temperature_draws_the_most_likely_character(run_dir, tiny_path, monkeypatch):
    # Catches logits / 1e-320 overflowing to inf and a NaN softmax: the limit is greedy.
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    greedy = sample_run(run_dir, 12, prompt="Th", temperature=0)
    assert sample_run(run_dir, 12, prompt="Th", temperature=1e-320, seed=3) == greedy


def test_the_empty_prompt_error_names_the_models_own_limit(run_dir, tiny_path, monkeypatch, tmp_path):
    # Catches the published, non-causal CAT's reason given for every model: a causal model
    # needs one character, the non-causal CAT two (its baseline one).
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    with pytest.raises(RunError) as err:
        sample_run(run_dir, 5, prompt="")
    assert "at least 1 character" in str(err.value) and "non-causal" not in str(err.value)
    published = train_run(CATConfig(variant="published", d_model=16, n_heads=2, n_freq=4,
                                    solver="rk4-classic", solver_steps=1),
                          TrainConfig(train_steps=1, batch=2, seq=16), root=tmp_path, lengths=(16,),
                          eval_windows=1, progress=False, echo=None, device="cpu")
    with pytest.raises(RunError, match="at least 2 characters for the published, non-causal CAT"):
        sample_run(published.path, 5, prompt="T")
    assert len(sample_run(published.path, 5, prompt="T", model="base")) == 5
