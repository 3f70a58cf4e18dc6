"""Evaluation's plans, built once per length and reused across forward passes.

A plan (:mod:`.plan`) depends on the length T and the attention's own weights alone, so a
forward pass builds it once and every function evaluation of its solve reads it. An
evaluation makes many forward passes at one length (the windows of a length go in batches:
at T = 5000 one window a pass), and without this module each pass built its plans again:
at T = 5000 the causal CAT's dense mixing matrix ``[h, T, T]`` (written zero, then
scattered into) took more of a window's forward pass than the products that read it, and
FIRE's bias is an ``[h, T, T]`` tensor evaluated at every (i, j).

Within :func:`evaluation_plans` (the scope that :func:`catlib.measure.evaluate.cross_entropy`
and the per-position scoring open) and without grad, :func:`plan_for` keeps each module's
last plan and hands it back for the next pass at the same length, device and dtype while the
module is as it was: the same parameter and buffer tensors at the same version counters
(an optimiser step, ``load_state_dict`` or any in-place edit moves a counter; ``.to``
makes new tensors) and the same plain settings (a far head's slope, a horizon). The plan
handed back is the one those weights build, so the numbers are the same bit for bit.
Outside the scope, or with grad (training, an adjoint's backward), :func:`plan_for` is
``module.plan`` itself: training runs the code it ran before. One plan per module is kept
(the last length), and nothing outlives the scope.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch
import torch.nn as nn

from .plan import Plan

# The plans kept in the innermost open scope, {id(module): entry}; None: no scope open.
_HELD: contextvars.ContextVar = contextvars.ContextVar("catlib_evaluation_plans", default=None)
# Whether scopes keep plans (``plan_reuse(False)``: every pass builds its own, as before).
_REUSE = True
_SETTINGS = (bool, int, float, str, type(None))


@contextlib.contextmanager
def evaluation_plans():
    """Within the block, without grad, a module's plan at a length is built once and reused
    while its weights and settings stay as they were (see the module docstring); the plans
    are dropped on exit. Local to this thread or task; nests (the inner scope keeps its own)."""
    token = _HELD.set({} if _REUSE else None)
    try:
        yield
    finally:
        _HELD.reset(token)


@contextlib.contextmanager
def plan_reuse(enabled: bool = True):
    """Within the block, :func:`evaluation_plans` scopes keep plans (``enabled``, the default
    outside any block) or build every pass's own (``False``); restored on exit. The numbers
    are the same either way: this is for measuring and testing the reuse."""
    global _REUSE
    saved, _REUSE = _REUSE, bool(enabled)
    try:
        yield
    finally:
        _REUSE = saved


def plan_for(module: nn.Module, length: int, device, dtype) -> Plan:
    """``module.plan(length, device, dtype)``, or within :func:`evaluation_plans` and without
    grad the plan it built last, if that was at this length, device and dtype and the module
    is as it was then."""
    held = _HELD.get()
    if held is None or torch.is_grad_enabled():
        return module.plan(length, device, dtype)
    key = (length, torch.device(device), dtype)
    entry = held.get(id(module))
    if entry is not None and entry[0] is module and entry[1] == key:
        state = module_state(module)
        if state is not None and same_state(entry[2], state):
            return entry[3]
    plan = module.plan(length, device, dtype)
    # The state after the build: a plan may set up what it keeps on a first call.
    state = module_state(module)
    if state is not None:           # inference tensors carry no version: nothing to key on
        held[id(module)] = (module, key, state, plan)  # the module held: its id stays its own
    return plan


def module_state(module: nn.Module) -> tuple | None:
    """What a plan of ``module`` reads besides its length: every parameter and buffer (the
    tensor and its version counter) and every plain setting (bool, int, float, str, None) of
    the module and its submodules. None when a tensor is an inference tensor (no counter)."""
    tensors = []
    for t in (*module.parameters(), *module.buffers()):
        if t.is_inference():
            return None
        tensors.append((t, t._version))
    settings = tuple((name, key, value) for name, m in module.named_modules()
                     for key, value in vars(m).items() if isinstance(value, _SETTINGS))
    return tuple(tensors), settings


def same_state(held: tuple, now: tuple) -> bool:
    """Whether two :func:`module_state` records describe the same module state: the same
    tensor objects at the same versions, and equal settings."""
    (held_tensors, held_settings), (now_tensors, now_settings) = held, now
    return (len(held_tensors) == len(now_tensors) and held_settings == now_settings
            and all(a is b and va == vb for (a, va), (b, vb) in zip(held_tensors, now_tensors)))
