"""The plan protocol shared by every attention operator of a CAT block.

An operator's mixing weights (or score bias) depend on the length T and its kernel
parameters only, not on the hidden state: ``plan(T, device, dtype)`` computes them once
per ODE solve and every function evaluation of the solve reuses them. A plan is a
:class:`Plan`: its ``length`` and ``grad_tensors()``, the tensors through which gradients
reach the kernel parameters (what the adjoint takes as parameters).

Here, once for all operators:

- :func:`plan_target`, the preamble of every ``plan``: the length checked, the device and
  dtype defaulted from the module's parameters;
- :class:`GeometryCache`, the one cache of what a plan reads that depends on (T, device,
  dtype) but on no parameter (basis values, stencils, bin widths), with the inference-mode
  rule in one place; :func:`kernel_at`, a 1-D spectral kernel at parameter-free points
  with its basis kept there (:func:`basis_cache` switches that off, for comparisons);
- :func:`~catlib.nn.bias.causal_toeplitz` (in :mod:`.bias`), the one builder of a distance bias ``[h, T, T]`` from its values
  at distances 0..T-1 (ALiBi, the decay prior, the content kernel's rows within its horizon);
- :class:`ScoreBiasPlan`, the plan of the operators that act on query-key scores.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from .bias import CausalBias, causal_toeplitz  # noqa: F401  (the builder, re-exported)

# A handful of lengths at a time is all a run uses (training, a few evaluation lengths).
CACHE_ENTRIES = 8


@dataclass
class Plan:
    """The hidden-state-independent part of an operator at one length T.

    Subclasses name the tensor that carries the kernel parameters' gradients
    (:meth:`kernel_tensor`).
    """

    length: int

    def kernel_tensor(self) -> torch.Tensor:
        raise NotImplementedError

    def grad_tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors through which gradients reach the kernel parameters."""
        t = self.kernel_tensor()
        return (t,) if t.requires_grad else ()


@dataclass
class ScoreBiasPlan(Plan):
    """A causal score bias ``bias [h, T, T]``: the kernel's value for j <= i, -inf above the
    diagonal, built masked so that every call of the solve reads it as it is (``causal``, a
    :class:`~catlib.nn.bias.CausalBias` view of it), never a masked copy. ``query_scale``
    ``[h, T]`` (optional): a factor on each head's content scores q_i . k_j per query."""

    bias: torch.Tensor
    query_scale: torch.Tensor | None = None
    keys_reversed: bool = False      # see CausalBias (a Toeplitz bias built without grad)

    @property
    def causal(self) -> CausalBias:
        return CausalBias(self.bias, self.keys_reversed)

    def kernel_tensor(self) -> torch.Tensor:
        return self.bias


def plan_target(module: nn.Module, length: int, device=None, dtype=None,
                ref: torch.Tensor | None = None) -> tuple[torch.device, torch.dtype]:
    """The preamble of ``plan``: check ``length`` and default ``device``/``dtype`` to those of
    ``ref`` (default: the module's first parameter)."""
    if length < 1:
        raise ValueError(f"sequence length T must be >= 1, got {length}")
    if ref is None:
        ref = next(iter(module.parameters()))
    return device or ref.device, dtype or ref.dtype


class GeometryCache:
    """Parameter-free plan inputs per key ``(length, device, dtype, *extra)``.

    Built with inference mode off and without grad: an entry made while evaluating under
    ``torch.inference_mode`` must still serve a training pass afterwards (inference tensors
    cannot be saved for backward), and nothing in it needs grad. At most ``CACHE_ENTRIES``
    entries: the cache empties when full.
    """

    def __init__(self):
        self._entries: dict = {}

    def get(self, key: tuple, build: Callable[[], dict]) -> dict:
        if key not in self._entries:
            with torch.inference_mode(False), torch.no_grad():
                entry = build()
            if len(self._entries) >= CACHE_ENTRIES:
                self._entries.clear()
            self._entries[key] = entry
        return self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def cache_key(length: int, device, dtype, *extra) -> tuple:
    """The key of a :class:`GeometryCache` entry (``device`` normalised: "cpu" == cpu)."""
    return (length, torch.device(device), dtype, *extra)


# Whether plans keep the basis values of their 1-D spectral kernels (a recurrence of about
# 3n small operations per evaluation, on points that depend on no parameter) in their
# GeometryCache. ``basis_cache(False)`` evaluates them in every plan, as the code before
# the cache did: the same operations on the same values, so the same numbers bit for bit.
_BASIS_CACHE = True


@contextlib.contextmanager
def basis_cache(enabled: bool = True):
    """Within the block, plans keep their kernels' basis values (``enabled``, the default
    outside any block) or evaluate them every time (``False``); restored on exit. The
    numbers are the same either way: this is for measuring and testing the cache."""
    global _BASIS_CACHE
    saved, _BASIS_CACHE = _BASIS_CACHE, bool(enabled)
    try:
        yield
    finally:
        _BASIS_CACHE = saved


def basis_cache_enabled() -> bool:
    """Whether plans keep their kernels' basis values now (see :func:`basis_cache`)."""
    return _BASIS_CACHE


def kernel_at(kernel: nn.Module, cache: GeometryCache, key: tuple,
              points: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``kernel(points())``, ``[h, *S]``, for a :class:`~catlib.nn.kernel.SpectralKernel1D`
    ``kernel`` at points ``[*S]`` that depend on no parameter, with the basis at them
    (:meth:`~catlib.nn.kernel.SpectralKernel1D.basis_values`) kept in ``cache``.

    ``key``: a :func:`cache_key` that determines the points (length, device, dtype and
    whatever else ``points`` reads); the kernel's basis and n_freq are added here. The
    entry holds the basis as a constant (built without grad, inference mode off): the
    gradient reaches the coefficients through
    :meth:`~catlib.nn.kernel.SpectralKernel1D.from_basis`, which only reads it. Under
    ``basis_cache(False)``: ``kernel(points())`` itself, evaluated every time.
    """
    if not _BASIS_CACHE:
        return kernel(points())

    def build() -> dict:
        u = points()
        return {"phi": kernel.basis_values(u), "shape": tuple(u.shape)}

    entry = cache.get(key + (kernel.basis, kernel.n_freq), build)
    return kernel.from_basis(entry["phi"], entry["shape"])
