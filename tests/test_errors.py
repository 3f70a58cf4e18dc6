"""Bad inputs raise ValueError naming what is wrong."""

import re

import pytest
import torch

import catlib
from catlib import CATConfig

SMALL = dict(vocab_size=11, d_model=16, n_heads=2, n_freq=4, quad_nodes=8, solver="rk4-classic")


@pytest.mark.parametrize("field,value,accepts", [
    ("n_heads", 0, "an integer >= 1"),
    ("n_freq", 0, "an integer >= 1"),
    ("n_freq", -3, "an integer >= 1"),
    ("quad_nodes", 0, "an integer >= 1"),
    ("blocks", 0, "an integer >= 1"),
    ("vocab_size", 0, "an integer >= 1"),
    ("solver_steps", 0, "an integer >= 1"),
    ("basis", "legendre", "one of ['fourier', 'cheb']"),
    ("solver", "rk45", "one of ['dopri5', 'rk4-classic', 'midpoint', 'euler']"),
    ("variant", "corrected", "one of ['published', 'causal']"),
    ("penalty", "l2", "one of ['published', 'exact']"),
    ("dropout", 1.5, "in [0, 1)"),
])
def test_config_field_named(field, value, accepts):
    # The whole message: the field first, what it accepts, the value given. A bare
    # match=field would also pass for another field's message that merely mentions it.
    with pytest.raises(ValueError, match=rf"^{field} must be {re.escape(accepts)}, "
                                         rf"got {re.escape(repr(value))}$"):
        CATConfig(**{field: value})


def test_divisibility_message_names_both():
    with pytest.raises(ValueError, match=r"^d_model \(30\) must be divisible by n_heads \(4\)"):
        CATConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"^d_model \(30\) must be divisible by n_heads \(8\)"):
        CATConfig(d_model=30)   # the default n_heads


def test_unknown_choice_lists_allowed_values():
    with pytest.raises(ValueError, match=r"^basis must be one of \['fourier', 'cheb'\], "
                                         r"got 'legendre'$"):
        CATConfig(basis="legendre")


def test_from_dict_unknown_field():
    with pytest.raises(ValueError, match=r"unknown CATConfig field\(s\) \['n_layers'\]"):
        CATConfig.from_dict({**CATConfig().to_dict(), "n_layers": 2})
    assert CATConfig.from_dict(CATConfig(n_freq=5).to_dict()) == CATConfig(n_freq=5)


def test_components_validate_too():
    with pytest.raises(ValueError, match=r"^n_freq must be an integer >= 1, got 0$"):
        catlib.Kernel2D(0, "fourier")
    with pytest.raises(ValueError, match=r"^basis must be one of \['fourier', 'cosine', 'cheb'\], "
                                         r"got 'legendre'$"):
        catlib.Kernel2D(4, "legendre")
    with pytest.raises(ValueError, match=r"^penalty must be one of \['published', 'exact'\], got 'l2'$"):
        catlib.Kernel2D(4, "cheb", penalty="l2")
    with pytest.raises(ValueError, match=r"^d_model \(30\) must be divisible by n_heads \(4\)"):
        catlib.ContinuousAttention(30, 4, 4, "fourier")
    with pytest.raises(ValueError, match=r"^basis must be one of \['fourier', 'cheb'\], got 'legendre'$"):
        catlib.ContinuousAttention(16, 2, 4, "legendre")
    with pytest.raises(ValueError, match=r"^quad_nodes \(q\) must be an integer >= 1, got 0$"):
        catlib.gauss_legendre(0)
    with pytest.raises(ValueError, match=r"^solver must be one of \['dopri5', 'rk4-classic', 'midpoint', 'euler'\], "
                                         r"got 'rk45'$"):
        catlib.integrate(lambda t, y: y, torch.ones(1), solver="rk45")


@pytest.mark.parametrize("variant", ["published", "causal"])
def test_empty_sequence(variant):
    torch.manual_seed(0)
    empty = torch.zeros(2, 0, dtype=torch.long)
    for model in (catlib.CAT(CATConfig(**SMALL, variant=variant)),
                  catlib.Baseline(CATConfig(**SMALL, variant=variant))):
        # The message names the expected shape and the one given; match="T" alone would
        # pass for nearly any message (an unrelated ValueError from deep inside included).
        with pytest.raises(ValueError, match=r"^tokens must be \[B, T\] with T >= 1, got shape \(2, 0\)$"):
            model(empty)


def test_single_token_causal_works():
    torch.manual_seed(0)
    for basis in ("fourier", "cheb"):
        model = catlib.CAT(CATConfig(**SMALL, variant="causal", basis=basis)).eval()
        logits, pen = model(torch.tensor([[3], [5]]))
        assert logits.shape == (2, 1, 11) and bool(torch.isfinite(logits).all())
        assert bool(torch.isfinite(pen))
    base = catlib.Baseline(CATConfig(**SMALL, variant="causal")).eval()
    assert base(torch.tensor([[3]]))[0].shape == (1, 1, 11)


def test_single_token_published_raises_value_error():
    # Defect 8: the published interpolation reads token i0 + 1 = 1. catlib says so
    # clearly instead of failing with an IndexError deep inside.
    torch.manual_seed(0)
    model = catlib.CAT(CATConfig(**SMALL, variant="published"))
    with pytest.raises(ValueError, match="T = 1"):
        model(torch.tensor([[3]]))


def test_single_token_published_reference_fails_with_index_error():
    # The independent reference reproduces the published failure.
    import reference_published as ref

    torch.manual_seed(0)
    model = ref.CAT(11, 16, 2, 4, solver="rk4-classic").eval()
    with pytest.raises(IndexError):
        model(torch.tensor([[3]]))


def _float_fields(cls) -> list[str]:
    import dataclasses
    return [f.name for f in dataclasses.fields(cls) if "float" in str(f.type)]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", _float_fields(CATConfig))
def test_a_non_finite_model_setting_is_refused(field, value):
    # Catches NaN and inf passing comparisons such as `sob_lambda < 0` (False for NaN) and
    # `not value > 0` (inf is > 0): kernel_scale=inf gave NaN logits, sob_lambda=nan a
    # loss that failed at step 0.
    assert {"sob_lambda", "rtol", "atol", "dropout", "kernel_scale", "kernel_horizon"} <= set(
        _float_fields(CATConfig))
    with pytest.raises(ValueError, match=rf"^{field} must be a finite number, got {value!r}"):
        CATConfig(**{**SMALL, "variant": "causal", "kernel": "alibi-prior", "train_length": 16,
                     field: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("field", _float_fields(catlib.TrainConfig))
def test_a_non_finite_training_setting_is_refused(field, value):
    assert {"lr", "budget", "repeat_share"} <= set(_float_fields(catlib.TrainConfig))
    with pytest.raises(ValueError, match=rf"^{field} must be a finite number, got {value!r}"):
        catlib.TrainConfig(**{field: value}).validate()


def test_train_refuses_a_nan_setting_before_writing(tmp_path, capsys, tiny_path):
    # Catches `train --sob_lambda nan` creating its run directory, then stopping at step 0.
    from catlib.cli.commands import main
    code = main(["train", "--variant", "causal", "--d_model", "16", "--n_heads", "2", "--n_freq", "4",
                 "--train_steps", "1", "--batch", "2", "--seq", "16", "--sob_lambda", "nan",
                 "--run-dir", str(tmp_path / "runs"), "--data", str(tiny_path), "--device", "cpu",
                 "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--sob_lambda must be a finite number, got nan" in err[0], err
    assert not (tmp_path / "runs").exists()

