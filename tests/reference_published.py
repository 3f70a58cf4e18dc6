"""The published CAT prototype, written loop by loop from ALGORITHM.md.

This file is the independent ground truth of the parity tests: it does not
import catlib. It follows the specification literally (a Python loop over
heads, one Kernel2D module per head, the ODE state in [T, B, D] layout,
interpolation index by index), defects included. Its module and parameter
names are the published ones, so `ref.state_dict()` can be handed to
`catlib.load_published`.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torchdiffeq import odeint_adjoint as odeint
except ImportError:  # the published fallback
    from torchdiffeq import odeint


def spectral_basis(name, t, n):
    """Phi(t) of shape [n, len(t)]: the n basis functions of the spec at t."""
    if name == "fourier":
        k = torch.arange(n, dtype=t.dtype, device=t.device)
        return torch.cos(2 * math.pi * k[:, None] * t[None, :]) / math.sqrt(n)
    if name == "cheb":
        x = 2 * t - 1
        rows = [torch.ones_like(x), x]
        for _ in range(2, n):
            rows.append(2 * x * rows[-1] - rows[-2])
        return torch.stack(rows[:n]) / math.sqrt(n)
    raise ValueError(f"unknown basis {name!r}")


class Kernel2D(nn.Module):
    def __init__(self, n_freq, basis="fourier"):
        super().__init__()
        self.n, self.basis = n_freq, basis
        self.coeffs = nn.Parameter(0.01 * torch.randn(n_freq, n_freq))
        self.log_scale = nn.Parameter(torch.zeros(1))

    def forward(self, s, t):
        phi_s = spectral_basis(self.basis, s, self.n)  # [n, S]
        phi_t = spectral_basis(self.basis, t, self.n)  # [n, Q]
        w = F.softplus(self.log_scale) * (phi_s.T @ self.coeffs @ phi_t)  # [S, Q]
        return torch.softmax(w, dim=-1)

    def sobolev_penalty(self):
        k = torch.arange(self.n, dtype=self.coeffs.dtype, device=self.coeffs.device)
        weight = (2 * math.pi) ** 4 * (k[:, None] ** 2 + k[None, :] ** 2) ** 2
        return (weight * self.coeffs ** 2).sum()


class ContinuousAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_freq, basis="fourier", quad_nodes=64, dropout=0.1):
        super().__init__()
        self.h, self.dh = n_heads, d_model // n_heads
        x, w = np.polynomial.legendre.leggauss(quad_nodes)
        self.register_buffer("t_nodes", torch.tensor((x + 1) / 2, dtype=torch.float32))
        self.register_buffer("t_w", torch.tensor(w / 2, dtype=torch.float32))
        self.kernels = nn.ModuleList(Kernel2D(n_freq, basis) for _ in range(n_heads))
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.drop = nn.Dropout(dropout)

    def interpolate(self, v):
        """v [B, T, D] -> values at the nodes [B, Q, D], one node at a time."""
        T = v.shape[1]
        columns = []
        for q in range(self.t_nodes.shape[0]):
            f = self.t_nodes[q] * (T - 1)
            i0 = int(torch.floor(f))
            a = f - i0
            columns.append((1 - a) * v[:, i0] + a * v[:, i0 + 1])  # T = 1: IndexError
        return torch.stack(columns, dim=1)

    def forward(self, x):  # x [B, T, D]
        B, T, D = x.shape
        s = torch.linspace(0, 1, T, device=x.device, dtype=x.dtype)
        v_nodes = self.interpolate(self.v_proj(x))  # [B, Q, D]
        heads = []
        for j, kernel in enumerate(self.kernels):
            K = kernel(s, self.t_nodes)  # [T, Q]
            vj = v_nodes[:, :, j * self.dh:(j + 1) * self.dh]  # [B, Q, d]
            heads.append(torch.einsum("iq,q,bqd->bid", K, self.t_w, vj))
        return self.drop(self.out_proj(torch.cat(heads, dim=-1)))

    def sobolev_penalty(self):
        return sum(k.sobolev_penalty() for k in self.kernels)


class ODEFunc(nn.Module):
    """One CAT block as ODE dynamics; the state h is [T, B, D]."""

    def __init__(self, d_model, n_heads, n_freq, basis="fourier"):
        super().__init__()
        self.attn = ContinuousAttention(d_model, n_heads, n_freq, basis)
        self.norm = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                nn.Linear(4 * d_model, d_model))
        self.nfe = 0

    def forward(self, tau, h):
        self.nfe += 1
        a = self.attn(h.transpose(0, 1)).transpose(0, 1)
        return self.ff(self.norm(h + a))


def rk4_classic(func, h, steps=4):
    """The published MPS path: classical RK4 from 0 to 1 in `steps` steps."""
    dt = 1.0 / steps
    for i in range(steps):
        tau = torch.tensor(i * dt)
        k1 = func(tau, h)
        k2 = func(tau + dt / 2, h + dt / 2 * k1)
        k3 = func(tau + dt / 2, h + dt / 2 * k2)
        k4 = func(tau + dt, h + dt * k3)
        h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return h


class CAT(nn.Module):
    def __init__(self, vocab_size=65, d_model=128, n_heads=8, n_freq=32, sob_lambda=5e-7,
                 blocks=1, basis="fourier", solver="dopri5"):
        super().__init__()
        assert solver in ("dopri5", "rk4-classic")
        self.sob_lambda, self.solver = sob_lambda, solver
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(ODEFunc(d_model, n_heads, n_freq, basis) for _ in range(blocks))
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, tokens, penalty=True):
        h = self.embed(tokens).transpose(0, 1)  # [T, B, D]
        for block in self.blocks:
            if self.solver == "dopri5":
                tau = torch.tensor([0.0, 1.0], device=h.device)
                h = odeint(block, h, tau, method="dopri5", rtol=1e-7, atol=1e-9)[-1]
            else:
                h = rk4_classic(block, h)
        logits = self.proj(h.transpose(0, 1))
        if penalty:
            pen = self.sob_lambda * sum(b.attn.sobolev_penalty() for b in self.blocks)
        else:
            pen = torch.zeros((), device=logits.device)
        return logits, pen


class Baseline(nn.Module):
    def __init__(self, vocab_size=65, d_model=128, n_heads=8, blocks=1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1,
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=blocks, enable_nested_tensor=False)
        self.proj = nn.Linear(d_model, vocab_size)
        self.drop = nn.Dropout(0.1)

    def forward(self, tokens):
        return self.drop(self.proj(self.enc(self.embed(tokens))))
