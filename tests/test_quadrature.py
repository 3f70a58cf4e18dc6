"""Gauss-Legendre rules and the interpolation of token sequences."""

import math

import pytest
import torch

import catlib
from catlib.nn.quadrature import interpolate

INTERVALS = [(0.0, 1.0), (-0.5, 2.0)]
ORDERS = [1, 2, 3, 8, 64]


def monomial_integral(p, a, b):
    return (b ** (p + 1) - a ** (p + 1)) / (p + 1)


@pytest.mark.parametrize("a,b", INTERVALS)
@pytest.mark.parametrize("q", ORDERS)
def test_exact_up_to_degree_2q_minus_1(q, a, b):
    nodes, weights = catlib.gauss_legendre(q, a, b)
    assert nodes.dtype == torch.float64 and weights.dtype == torch.float64
    assert nodes.shape == (q,) and weights.shape == (q,)
    assert bool(((nodes > a) & (nodes < b)).all())
    for p in range(2 * q):
        exact = monomial_integral(p, a, b)
        approx = float((weights * nodes ** p).sum())
        assert approx == pytest.approx(exact, rel=1e-12, abs=1e-300), (q, p)


@pytest.mark.parametrize("a,b", INTERVALS)
@pytest.mark.parametrize("q", [1, 2, 3, 8])
def test_not_exact_at_degree_2q(q, a, b):
    # The test above would pass for a rule that is "too good" only by accident;
    # a q-point Gauss rule cannot integrate x^(2q) exactly.
    nodes, weights = catlib.gauss_legendre(q, a, b)
    exact = monomial_integral(2 * q, a, b)
    approx = float((weights * nodes ** (2 * q)).sum())
    assert abs(approx - exact) > 1e-11 * abs(exact)


@pytest.mark.parametrize("a,b", INTERVALS)
@pytest.mark.parametrize("q", ORDERS)
def test_weights_sum_to_length(q, a, b):
    _, weights = catlib.gauss_legendre(q, a, b)
    assert float(weights.sum()) == pytest.approx(b - a, rel=1e-13)
    assert bool((weights > 0).all())


def test_smooth_function_on_unit_interval():
    nodes, weights = catlib.gauss_legendre(32)
    approx = float((weights * torch.exp(nodes) * torch.cos(3 * nodes)).sum())
    exact = (math.exp(1) * (math.cos(3) + 3 * math.sin(3)) - 1) / 10
    assert approx == pytest.approx(exact, rel=1e-14)


def test_published_nodes_in_float32():
    # The published buffers: numpy leggauss mapped to [0, 1], stored as float32.
    import numpy as np

    x, w = np.polynomial.legendre.leggauss(64)
    nodes, weights = catlib.gauss_legendre(64, dtype=torch.float32)
    assert nodes.dtype == torch.float32
    assert torch.equal(nodes, torch.tensor((x + 1) / 2, dtype=torch.float32))
    assert torch.equal(weights, torch.tensor(w / 2, dtype=torch.float32))


@pytest.mark.parametrize("T", [1, 2, 5, 33])
def test_interpolate_index_by_index(T):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(2, T, 3, generator=g, dtype=torch.float64)
    positions, _ = catlib.gauss_legendre(16)
    positions = torch.cat([torch.tensor([0.0, 1.0], dtype=torch.float64), positions])
    out = interpolate(values, positions)
    assert out.shape == (2, positions.numel(), 3)
    for q, p in enumerate(positions.tolist()):
        if T == 1:
            expected = values[:, 0]
        else:
            f = p * (T - 1)
            i0 = min(int(math.floor(f)), T - 2)
            a = f - i0
            expected = (1 - a) * values[:, i0] + a * values[:, i0 + 1]
        torch.testing.assert_close(out[:, q], expected, rtol=0, atol=1e-14)


def test_interpolate_reproduces_linear_sequences():
    T = 9
    grid = torch.linspace(0, 1, T, dtype=torch.float64)
    values = (3 * grid - 1)[None, :, None]
    positions = torch.rand(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = interpolate(values, positions)
    torch.testing.assert_close(out[0, :, 0], 3 * positions - 1, rtol=0, atol=1e-13)
