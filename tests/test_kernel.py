"""Kernel2D: row-stochastic kernels and their Sobolev penalties."""

import math

import numpy as np
import pytest
import torch
from numpy.polynomial import chebyshev as npcheb

from catlib.nn.kernel import Kernel2D

BASES = ["fourier", "cosine", "cheb"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("basis", BASES)
def test_kernel_matches_formula(basis):
    # K[i, q] = exp(W_iq) / sum_q' exp(W_iq'), W = softplus(log_scale) Phi(s)^T C Phi(t),
    # with Phi from the formulas of ALGORITHM.md (numpy, independent of catlib.nn.bases).
    # Catches a transposed C, s and t swapped, a missing softplus or 1/sqrt(n), the softmax
    # over the wrong axis: a row-sum check cannot, softmax makes every row sum to 1.
    kernel = Kernel2D(8, basis).double()
    with torch.no_grad():
        kernel.coeffs.mul_(100.0)  # far from uniform
        kernel.log_scale.fill_(1.0)
    s = torch.linspace(0, 1, 17, dtype=torch.float64)
    t = torch.rand(23, dtype=torch.float64)
    with torch.no_grad():
        k = kernel(s, t).numpy()
    c = kernel.coeffs.detach().numpy()
    phi_s, _ = _basis_and_second_derivative(basis, s.numpy(), 8)
    phi_t, _ = _basis_and_second_derivative(basis, t.numpy(), 8)
    w = np.log1p(np.e) * (phi_s.T @ c @ phi_t)                  # softplus(1) = log(1 + e)
    expected = np.exp(w - w.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    assert k.shape == (17, 23)
    np.testing.assert_allclose(k, expected, rtol=1e-12, atol=0)
    assert float(k.std()) > 1e-3  # not trivially uniform


def test_parameters_and_init():
    kernel = Kernel2D(8, "fourier")
    assert dict((n, p.shape) for n, p in kernel.named_parameters()) == {
        "coeffs": torch.Size([8, 8]), "log_scale": torch.Size([1])}
    assert float(kernel.log_scale.detach()) == 0.0
    assert 0.003 < float(kernel.coeffs.detach().std()) < 0.03  # 0.01 * N(0, 1)


@pytest.mark.parametrize("basis", ["fourier", "cheb"])
def test_published_penalty_formula(basis):
    n = 7
    kernel = Kernel2D(n, basis, penalty="published").double()
    c = kernel.coeffs.detach().numpy()
    expected = sum((2 * math.pi) ** 4 * (k * k + l * l) ** 2 * c[k, l] ** 2
                   for k in range(n) for l in range(n))
    assert float(kernel.sobolev_penalty().detach()) == pytest.approx(expected, rel=1e-12)
    # The default penalty is the published one: its value, not merely a positive one
    # (the exact penalty is positive too). Catches a default switched to "exact".
    default = Kernel2D(n, basis).double()
    default.load_state_dict(kernel.state_dict())
    assert float(default.sobolev_penalty().detach()) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("basis,omega", [("fourier", 2 * math.pi), ("cosine", math.pi)])
@pytest.mark.parametrize("k,l", [(0, 1), (2, 3), (5, 5)])
def test_exact_penalty_of_one_cosine_mode(basis, omega, k, l):
    # f(s, t) = c cos(omega k s) cos(omega l t) / n has Laplacian -omega^2 (k^2 + l^2) f, and
    # the mean of cos^2(omega k s) over [0, 1] is 1/2 (1 for k = 0), so by hand
    # |Lap f|^2 = omega^4 (k^2 + l^2)^2 c^2 / n^2 * a_k a_l, a_0 = 1, a_k = 1/2.
    # Catches a missing 1/sqrt(n) scaling, a wrong omega or a Gram matrix off by a factor:
    # the published weights (2 pi)^4 (k^2 + l^2)^2 c^2 differ from this by n^2 / (a_k a_l).
    n, c = 6, 0.7
    kernel = Kernel2D(n, basis, penalty="exact").double()
    with torch.no_grad():
        kernel.coeffs.zero_()
        kernel.coeffs[k, l] = c
    half = lambda j: 1.0 if j == 0 else 0.5  # noqa: E731
    expected = omega ** 4 * (k * k + l * l) ** 2 * c * c / n ** 2 * half(k) * half(l)
    assert float(kernel.sobolev_penalty().detach()) == pytest.approx(expected, rel=1e-10)


# ---- brute-force Laplacian energy, independent of catlib.nn.bases ---------------------

def _basis_and_second_derivative(basis, t, n):
    """phi_k(t) and phi_k''(t), [n, len(t)], straight from the formulas of ALGORITHM.md."""
    k = np.arange(n)[:, None]
    if basis in ("fourier", "cosine"):
        omega = (2 * np.pi if basis == "fourier" else np.pi) * k
        return np.cos(omega * t) / np.sqrt(n), -(omega ** 2) * np.cos(omega * t) / np.sqrt(n)
    x = 2 * t - 1  # d/dt = 2 d/dx
    eye = np.eye(n)
    phi = np.stack([npcheb.chebval(x, eye[j]) for j in range(n)])
    d2 = np.stack([4 * npcheb.chebval(x, npcheb.chebder(eye[j], 2)) for j in range(n)])
    return phi / np.sqrt(n), d2 / np.sqrt(n)


def _laplacian_energy(coeffs, basis, nodes=240):
    """Integral over [0,1]^2 of (f_ss + f_tt)^2 with f = sum C_kl phi_k(s) phi_l(t)."""
    n = coeffs.shape[0]
    x, w = np.polynomial.legendre.leggauss(nodes)
    t, w = (x + 1) / 2, w / 2
    phi, d2 = _basis_and_second_derivative(basis, t, n)
    # Laplacian on the tensor grid [s, t].
    lap = d2.T @ coeffs @ phi + phi.T @ coeffs @ d2
    return float(w @ lap ** 2 @ w)


def _laplacian_energy_fd(coeffs, basis, m=801):
    """Same integral with a 5-point finite-difference Laplacian and the 2D trapezoid rule."""
    n = coeffs.shape[0]
    grid = np.linspace(0, 1, m)
    phi, _ = _basis_and_second_derivative(basis, grid, n)
    f = phi.T @ coeffs @ phi
    h = grid[1] - grid[0]
    # second differences, one-sided (second order) at the edges
    def d2(a, axis):
        a = np.moveaxis(a, axis, 0)
        out = np.empty_like(a)
        out[1:-1] = (a[2:] - 2 * a[1:-1] + a[:-2]) / h ** 2
        out[0] = (2 * a[0] - 5 * a[1] + 4 * a[2] - a[3]) / h ** 2
        out[-1] = (2 * a[-1] - 5 * a[-2] + 4 * a[-3] - a[-4]) / h ** 2
        return np.moveaxis(out, 0, axis)
    lap = d2(f, 0) + d2(f, 1)
    tw = np.full(m, h)
    tw[[0, -1]] = h / 2
    return float(tw @ lap ** 2 @ tw)


@pytest.mark.parametrize("basis", BASES)
def test_exact_penalty_is_laplacian_energy(basis):
    n = 6
    kernel = Kernel2D(n, basis, penalty="exact").double()
    c = kernel.coeffs.detach().numpy()
    brute = _laplacian_energy(c, basis)
    assert float(kernel.sobolev_penalty().detach()) == pytest.approx(brute, rel=1e-9)
    # The finite-difference version confirms the analytic brute force itself.
    assert _laplacian_energy_fd(c, basis) == pytest.approx(brute, rel=2e-3)


@pytest.mark.parametrize("basis", BASES)
def test_exact_penalty_float32(basis):
    kernel = Kernel2D(8, basis, penalty="exact")
    brute = _laplacian_energy(kernel.coeffs.detach().double().numpy(), basis)
    pen = kernel.sobolev_penalty()
    assert pen.dtype == torch.float32
    assert float(pen.detach()) == pytest.approx(brute, rel=1e-4)
    pen.backward()
    assert kernel.coeffs.grad is not None and bool(torch.isfinite(kernel.coeffs.grad).all())


def test_exact_penalty_differs_from_published_for_cheb():
    # Defect 9: Fourier weights are not the Chebyshev expansion's energy.
    kernel = Kernel2D(6, "cheb", penalty="exact").double()
    published = Kernel2D(6, "cheb", penalty="published").double()
    published.load_state_dict(kernel.state_dict())
    a, b = float(kernel.sobolev_penalty().detach()), float(published.sobolev_penalty().detach())
    assert abs(a - b) > 0.1 * max(a, b)


def test_exact_penalty_zero_for_harmonic_expansion():
    # f(s, t) = phi_0(s) phi_0(t) + phi_1(s) phi_0(t) is linear in s for cheb: zero Laplacian.
    kernel = Kernel2D(4, "cheb", penalty="exact").double()
    with torch.no_grad():
        kernel.coeffs.zero_()
        kernel.coeffs[0, 0] = 1.0
        kernel.coeffs[1, 0] = 2.0
        kernel.coeffs[1, 1] = -3.0  # (2s-1)(2t-1): harmonic too
    assert abs(float(kernel.sobolev_penalty().detach())) < 1e-10


# ---- the corrected (causal, normalised) attention averages ------------------------

@pytest.mark.parametrize("length", [1, 2, 7, 33])
@pytest.mark.parametrize("basis", ["fourier", "cheb"])
def test_causal_attention_of_constant_is_constant(basis, length):
    from catlib import ContinuousAttention

    attn = ContinuousAttention(8, 2, 6, basis, quad_nodes=16, dropout=0.0, causal=True,
                               normalised_integral=True, half_range_cosine=True).eval()
    with torch.no_grad():
        for k in attn.kernels:
            k.coeffs.mul_(100.0)
            k.log_scale.fill_(2.0)
        attn.v_proj.weight.copy_(torch.eye(8))
        attn.out_proj.weight.copy_(torch.eye(8))
        c = torch.randn(3, 1, 8)
        out = attn(c.expand(3, length, 8))
    torch.testing.assert_close(out, c.expand(3, length, 8), rtol=0, atol=1e-5)


def test_published_attention_of_constant_is_not_constant():
    # Defect 4: softmax, then quadrature weights: the rows sum to far less than 1.
    from catlib import ContinuousAttention

    # Input 1 everywhere, identity projections: out_i = sum_q softmax_q(W(s_i, t_q)) w_q for
    # each head's channels, about 1/Q = 0.0625 at the near-flat initial kernel, not 1.
    # Checked against that formula (numpy basis), so it also catches weights applied twice
    # or the normalised integral switched on by default (which gives 1).
    attn = ContinuousAttention(8, 2, 6, "fourier", quad_nodes=16, dropout=0.0).double().eval()
    with torch.no_grad():
        attn.v_proj.weight.copy_(torch.eye(8))
        attn.out_proj.weight.copy_(torch.eye(8))
        out = attn(torch.ones(1, 5, 8, dtype=torch.float64))[0]           # [5, 8]
    s = np.linspace(0, 1, 5)
    nodes, weights = attn.t_nodes.double().numpy(), attn.t_w.double().numpy()
    phi_s, _ = _basis_and_second_derivative("fourier", s, 6)
    phi_t, _ = _basis_and_second_derivative("fourier", nodes, 6)
    for j, kernel in enumerate(attn.kernels):
        scale = np.log1p(np.exp(float(kernel.log_scale.detach())))
        w = scale * (phi_s.T @ kernel.coeffs.detach().numpy() @ phi_t)   # [5, Q]
        soft = np.exp(w) / np.exp(w).sum(1, keepdims=True)
        expected = soft @ weights                                         # [5]
        np.testing.assert_allclose(out[:, 4 * j:4 * j + 4].numpy(),
                                   np.repeat(expected[:, None], 4, 1), rtol=1e-12)
    assert float((out - 1 / 16).abs().max()) < 5e-4   # measured 7e-5


@pytest.mark.parametrize("half_range,mirrored", [(False, True), (True, False)])
def test_fourier_mirror_symmetry(half_range, mirrored):
    # Defect 5: cos(2 pi k s) is symmetric about s = 1/2, so the published attention
    # output at position i equals the one at T-1-i; the half-range cosine breaks this.
    from catlib import ContinuousAttention

    attn = ContinuousAttention(8, 2, 6, "fourier", quad_nodes=16, dropout=0.0,
                               half_range_cosine=half_range).double().eval()
    with torch.no_grad():
        for k in attn.kernels:
            k.coeffs.mul_(100.0)
        out = attn(torch.randn(2, 11, 8, dtype=torch.float64))
    gap = float((out - out.flip(1)).abs().max())
    assert (gap < 1e-12) if mirrored else (gap > 1e-4)
