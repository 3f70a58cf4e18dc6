"""Bad inputs raise ValueError naming what is wrong."""

import pytest
import torch

import catlib
from catlib import CATConfig

SMALL = dict(vocab_size=11, d_model=16, n_heads=2, n_freq=4, quad_nodes=8, solver="rk4-classic")


@pytest.mark.parametrize("field,value", [
    ("d_model", 30),        # not divisible by n_heads = 8
    ("n_heads", 0),
    ("n_freq", 0),
    ("n_freq", -3),
    ("quad_nodes", 0),
    ("blocks", 0),
    ("vocab_size", 0),
    ("steps", 0),
    ("basis", "legendre"),
    ("solver", "rk45"),
    ("variant", "corrected"),
    ("penalty", "l2"),
    ("dropout", 1.5),
])
def test_config_field_named(field, value):
    with pytest.raises(ValueError, match=field):
        CATConfig(**{field: value})


def test_divisibility_message_names_both():
    with pytest.raises(ValueError, match="d_model") as info:
        CATConfig(d_model=30, n_heads=4)
    assert "n_heads" in str(info.value)


def test_unknown_choice_lists_allowed_values():
    with pytest.raises(ValueError, match="fourier") as info:
        CATConfig(basis="legendre")
    assert "cheb" in str(info.value) and "legendre" in str(info.value)


def test_from_dict_unknown_field():
    with pytest.raises(ValueError, match="n_layers"):
        CATConfig.from_dict({**CATConfig().to_dict(), "n_layers": 2})
    assert CATConfig.from_dict(CATConfig(n_freq=5).to_dict()) == CATConfig(n_freq=5)


def test_components_validate_too():
    with pytest.raises(ValueError, match="n_freq"):
        catlib.Kernel2D(0, "fourier")
    with pytest.raises(ValueError, match="basis"):
        catlib.Kernel2D(4, "legendre")
    with pytest.raises(ValueError, match="penalty"):
        catlib.Kernel2D(4, "cheb", penalty="l2")
    with pytest.raises(ValueError, match="d_model"):
        catlib.ContinuousAttention(30, 4, 4, "fourier")
    with pytest.raises(ValueError, match="basis"):
        catlib.ContinuousAttention(16, 2, 4, "legendre")
    with pytest.raises(ValueError, match="quad_nodes"):
        catlib.gauss_legendre(0)
    with pytest.raises(ValueError, match="solver"):
        catlib.integrate(lambda t, y: y, torch.ones(1), solver="rk45")


@pytest.mark.parametrize("variant", ["published", "causal"])
def test_empty_sequence(variant):
    torch.manual_seed(0)
    empty = torch.zeros(2, 0, dtype=torch.long)
    for model in (catlib.CAT(CATConfig(**SMALL, variant=variant)),
                  catlib.Baseline(CATConfig(**SMALL, variant=variant))):
        with pytest.raises(ValueError, match="T"):
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
