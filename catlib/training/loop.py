"""Side-by-side training of CAT and its baseline on identical batches, as published.

Both models are trained with AdamW on the same batches of the published sampler. CAT's
loss is ``CE + w(step) * penalty``, where ``penalty`` (returned by ``CAT.forward``) already
carries ``sob_lambda`` and

- published (``penalty_once=False``): ``w = sob_lambda * max(0.2, 1 - step / train_steps)``,
  so the weight is applied twice (defect 3);
- corrected (``penalty_once=True``): ``w = max(0.2, 1 - step / train_steps)``.

``step`` is the 0-based index of the step being taken, as in the published loop, which
prints ``step {step} | CAT {loss:.4f} | base {loss:.4f}`` when ``step % 100 == 0``.

With ``CATConfig.train_solver_steps`` (ODE-consistent training), each step of CAT solves
its depth ODE with a step count drawn from that set (:func:`drawn_solver_steps`), so the
weights cannot exploit one discretisation; validation and evaluation use ``solver_steps``.

The settings are :class:`~catlib.training.config.TrainConfig`; what a step's number
decides (learning rate, penalty weight, solver steps) is :mod:`catlib.training.schedule`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import signal
import threading
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm  # text bar: tqdm.auto warns in kernels without ipywidgets

from . import distributed
from ..nn.baselines import Baseline
from ..nn.config import CATConfig
from ..data import BatchSampler
from ..common.devices import mps_available
from ..measure.evaluate import cross_entropy
from ..nn.model import CAT, solved_with
from .config import MODELS, SEED_MAX, TrainConfig
from .optim import make_optimizer
from .schedule import SCHEDULES, decay_start, drawn_solver_steps, learning_rate, penalty_weight
from .transfer import DeviceInputs

# Where they were defined before the settings and the schedule had modules of their own
# (catlib.training.config, catlib.training.schedule): still imported from here.
__all__ = ["MODELS", "SEED_MAX", "SCHEDULES", "TrainConfig", "decay_start", "learning_rate",
           "penalty_weight", "drawn_solver_steps", "NonFiniteLoss", "SideBySide", "train_loop",
           "seed_everything", "make_deterministic"]


class NonFiniteLoss(RuntimeError):
    """A NaN or infinite loss; ``step`` is the 0-based index of the failing step."""

    def __init__(self, step: int, which: str, value: float):
        super().__init__(f"{which} loss is {value} at step {step}")
        self.step, self.which, self.value = step, which, value


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global generator and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


CUBLAS_WORKSPACE = ":4096:8"  # cuBLAS's documented setting for reproducible results


def make_deterministic() -> None:
    """Only deterministic kernels from now on, in this process: torch's
    ``use_deterministic_algorithms(True)`` (an operation without a deterministic kernel then
    raises, naming itself), cuDNN's autotuner off, and ``CUBLAS_WORKSPACE_CONFIG`` (which
    CUDA >= 10.2 needs for reproducible matrix products) set to :data:`CUBLAS_WORKSPACE`
    unless already set. cuBLAS reads that variable when its first handle is made: set it in
    the environment before a process that has already used CUDA trains. torch's switch is
    process-wide; env.json records its state for each run.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def _rng_state() -> dict:
    """The global generators' states: torch's CPU one, python's, numpy's, and CUDA's
    (every device, once CUDA is initialised) and MPS's where present."""
    name, key, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [name, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if mps_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    """Restore :func:`_rng_state`'s states (a device's state only where the device is)."""
    torch.set_rng_state(state["torch"])
    name, key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and mps_available():
        torch.mps.set_rng_state(state["mps"])


@contextlib.contextmanager
def _defer_sigint():
    """Hold Ctrl-C until the block ends, so that a parameter update is never half done, and
    never done without its metrics being recorded (the block commits both)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class SideBySide:
    """CAT and the baseline, one AdamW each, and the shared published batch sampler.

    ``step`` counts the steps done. :meth:`state_dict` is always the state at the last
    step boundary (models, optimisers, sampler, RNGs), even after an interrupted step, so
    a resumed run continues exactly as an uninterrupted one would (on CPU).
    A model not in ``train_config.models`` is None here (``cat``/``base``, its optimiser).
    """

    def __init__(self, model_config: CATConfig, train_config: TrainConfig,
                 train_ids: torch.Tensor, device: str | torch.device = "cpu"):
        train_config.validate(len(train_ids))
        self.config, self.tc, self.device = model_config.resolved(), train_config, torch.device(device)
        if train_config.deterministic:
            make_deterministic()  # before the first kernel runs
        seed_everything(train_config.seed)
        self.cat = CAT(self.config).to(self.device) if "cat" in train_config.models else None
        self.base = Baseline(self.config).to(self.device) if "base" in train_config.models else None
        self.opt_cat, self.opt_base = (
            make_optimizer(m, train_config.lr, train_config.weight_decay_on) if m is not None else None
            for m in (self.cat, self.base))
        tc = train_config
        self.sampler = BatchSampler(train_ids, tc.batch, tc.seq, tc.seed,
                                    tc.repeat_share, tc.repeat_periods)
        # The batches' copy to the device: on CUDA pinned host buffers and device buffers,
        # reused, copies not blocking the host; elsewhere t.to(device), a no-op on the CPU.
        self._inputs = DeviceInputs(self.device)
        self.step = 0
        self._boundary = self._snapshot()
        self._ddp = {}  # under torchrun: the models in DistributedDataParallel (made at step 1)

    def _snapshot(self) -> dict:
        """Randomness at a step boundary: the sampler's and the global RNGs' states."""
        return {"sampler": self.sampler.state_dict(), "rng": _rng_state()}

    def train_step(self, commit: Callable[[dict], None] | None = None) -> dict:
        """One step of both models on one batch x, y [batch, seq]; returns its metrics:

        kind "train", step (0-based), ce (CAT's cross-entropy), loss (CAT's ce + pen_w *
        penalty), base_loss (the baseline's cross-entropy), penalty (as returned by CAT,
        sob_lambda included), pen_w, nfe_forward / nfe_backward (CAT's dynamics evaluations,
        all blocks), seconds (of the whole step), tokens_per_s (batch tokens / seconds).
        The keys of a model that is not trained are absent.
        ``commit(metrics)`` (e.g. the metrics log) runs together with the parameter update,
        Ctrl-C held: a step is never done without being recorded.
        Raises NonFiniteLoss, before any parameter changes, if either loss is NaN or inf.
        """
        t0 = time.perf_counter()
        s, tc = self.step, self.tc
        batch = self.sampler()  # x, y [B, seq]: the global batch (the same on every rank)
        x, y = self._inputs(distributed.shard(t) for t in batch)  # this rank's rows
        m = {"kind": "train", "step": s}
        losses = {}  # name -> 0-d tensor, still on the device: read once, below
        if self.cat is not None:
            if not self.cat.training:   # train() walks every submodule: only on a change
                self.cat.train()
            w = penalty_weight(s, tc.penalty_horizon or tc.train_steps, self.config.sob_lambda,
                               self.config.penalty_once)
            counts = self.config.train_solver_steps   # None: the model's own solver_steps
            solver = (contextlib.nullcontext() if counts is None
                      else solved_with(self.cat, steps=drawn_solver_steps(counts, tc.seed, s)))
            with solver:   # the forward and the backward pass of this step
                losses["ce"], losses["loss"], losses["penalty"] = self._backward(
                    self.cat, self.opt_cat, x, y, w, "CAT")
        if self.base is not None:
            if not self.base.training:
                self.base.train()
            _, losses["base_loss"], _ = self._backward(self.base, self.opt_base, x, y, 0.0,
                                                       "baseline")
        values = _read(losses)   # the step's one host synchronisation: metrics and verdict
        _check_finite(values, s)  # before any parameter changes
        if self.cat is not None:
            nfe = self.cat.nfe
            m.update(ce=values["ce"], loss=values["loss"], penalty=values["penalty"], pen_w=w,
                     nfe_forward=nfe["forward"], nfe_backward=nfe["backward"])
        if self.base is not None:
            m["base_loss"] = values["base_loss"]

        with _defer_sigint():
            lr = learning_rate(s, tc)
            for opt in (self.opt_cat, self.opt_base):
                if opt is not None:
                    if tc.schedule != "constant":   # constant: the published loop, untouched
                        for group in opt.param_groups:
                            group["lr"] = lr
                    opt.step()
            self.step += 1
            self._boundary = self._snapshot()
            seconds = time.perf_counter() - t0
            m.update(seconds=seconds, tokens_per_s=batch[0].numel() / seconds)
            if tc.schedule != "constant":
                m["lr"] = lr
            if commit:
                commit(m)  # inside: a Ctrl-C during the update cannot lose this step's record
        return m

    def _backward(self, model, optimiser, x, y, pen_w: float, which: str):
        """Loss ``CE + pen_w * penalty`` of one model on x, y [B, seq], and its gradients.

        Returns (ce, loss, penalty), 0-d tensors on the device, not read (no host
        synchronisation: :meth:`train_step` reads every loss of the step at once and checks
        them before any parameter changes). Under torchrun x, y are this rank's rows, the
        model is in DistributedDataParallel (which averages the gradients: the penalty, the
        same on every rank, counts once) and the returned ce and loss are the global-batch
        means, so that every rank reaches the same verdict on a non-finite loss.
        """
        if distributed.active() and which not in self._ddp:
            self._ddp[which] = distributed.wrap(model, self.device)
        with distributed.consistent_dropout(self.device):
            logits, pen = self._ddp.get(which, model)(x, penalty=True)  # [B, seq, V], scalar
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss = ce + pen_w * pen if pen_w else ce
        ce_all, loss_all = distributed.mean(ce, loss)  # ce, loss themselves in one process
        optimiser.zero_grad(set_to_none=True)
        try:
            loss.backward()
        except Exception:  # a NaN loss can break its own backward pass (an adaptive solver)
            _check_finite({key: loss_all.item() for key, name in _VERDICT if name == which},
                          self.step)
            raise
        return ce_all, loss_all, pen

    def validate(self, val_ids: torch.Tensor) -> dict:
        """Validation CE of both models (eval mode, ``val_windows`` windows of length seq)."""
        kw = dict(eval_windows=self.tc.val_windows, device=self.device)
        c = cross_entropy(self.cat, val_ids, self.tc.seq, **kw) if self.cat is not None else {}
        b = cross_entropy(self.base, val_ids, self.tc.seq, **kw) if self.base is not None else {}
        _set_rng_state(self._boundary["rng"])  # validation must not change the training's randomness
        return {"kind": "val", "step": self.step - 1, "val_ce": c.get("ce"), "val_base_ce": b.get("ce")}

    def rewind(self) -> None:
        """Return the sampler and RNGs to the last step boundary (after an interrupted step)."""
        self.sampler.load_state_dict(self._boundary["sampler"])
        _set_rng_state(self._boundary["rng"])
        for opt in (self.opt_cat, self.opt_base):
            if opt is not None:
                opt.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        """The training state at the last step boundary (for ``torch.save``); None for a
        model that is not trained."""
        sd = lambda obj: obj.state_dict() if obj is not None else None
        return {"step": self.step, "cat": sd(self.cat), "base": sd(self.base),
                "opt_cat": sd(self.opt_cat), "opt_base": sd(self.opt_base),
                "sampler": self._boundary["sampler"], "rng": self._boundary["rng"]}

    def load_state_dict(self, state: dict) -> None:
        for key in ("cat", "base", "opt_cat", "opt_base"):
            if getattr(self, key) is not None:
                if state.get(key) is None:
                    raise KeyError(f"the state has no {key!r}")
                getattr(self, key).load_state_dict(state[key])
        self.sampler.load_state_dict(state["sampler"])
        self.step = int(state["step"])
        self._boundary = {"sampler": state["sampler"], "rng": state["rng"]}
        _set_rng_state(state["rng"])


def _read(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Python floats of the 0-d tensors ``values``, in ONE device-to-host read.

    The tensors are stacked in a dtype that holds each exactly (float32 values stay float32;
    a mix is widened), so every float equals what ``.item()`` of its tensor gives.
    """
    if not values:
        return {}
    tensors = [v.detach().reshape(()) for v in values.values()]
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    return dict(zip(values, torch.stack([t.to(dtype) for t in tensors]).tolist()))


# The loss whose value decides the verdict, per model, in the order they are trained.
_VERDICT = (("loss", "CAT"), ("base_loss", "baseline"))


def _check_finite(values: dict[str, float], step: int) -> None:
    """NonFiniteLoss naming the first model (CAT, then the baseline) whose loss is NaN or inf."""
    for key, which in _VERDICT:
        if key in values and not math.isfinite(values[key]):
            raise NonFiniteLoss(step, which, values[key])


def train_loop(trainer: SideBySide, *, val_ids: torch.Tensor | None = None,
          log: Callable[[dict], None] | None = None, checkpoint: Callable[[], None] | None = None,
          echo: Callable[[str], None] | None = print, progress: bool = True,
          on_step: Callable[[dict], None] | None = None) -> str:
    """Train until ``train_steps`` are done or the budget is spent; return the reason.

    Returns "finished", or "budget" when the next step would overrun ``budget`` seconds
    (at least one step is taken). ``log`` receives each metrics dict, ``checkpoint`` is
    called every ``checkpoint_every`` steps and at the end, ``echo`` prints the published
    progress line, ``on_step`` sees every step's metrics. NonFiniteLoss and
    KeyboardInterrupt propagate; the trainer's state is then the last step boundary.
    """
    tc = trainer.tc
    start = time.monotonic()
    last = 0.0
    bar = tqdm(total=tc.train_steps, initial=trainer.step, desc="train", unit="step",
               disable=not progress, dynamic_ncols=True)
    say = (lambda s: bar.write(s)) if progress else echo
    try:
        while trainer.step < tc.train_steps:
            if tc.budget is not None and last and distributed.any_rank(
                    time.monotonic() - start + last > tc.budget):  # all ranks stop together
                if checkpoint:
                    checkpoint()
                if echo:
                    say(f"budget of {tc.budget:g} s reached after {trainer.step} of "
                        f"{tc.train_steps} steps ({time.monotonic() - start:.1f} s); "
                        f"stopped at a step boundary")
                return "budget"
            m = trainer.train_step(commit=log)
            last = m["seconds"]
            losses = {k: f"{m[key]:.4f}" for k, key in (("CAT", "loss"), ("base", "base_loss"))
                      if key in m}
            if echo and m["step"] % tc.log_every == 0:
                say(" | ".join([f"step {m['step']}", *(f"{k} {v}" for k, v in losses.items())]))
            bar.update(1)
            bar.set_postfix(**losses, nfe=m.get("nfe_forward"), refresh=False)
            if val_ids is not None and tc.val_every and trainer.step % tc.val_every == 0:
                v = trainer.validate(val_ids)
                if log:
                    log(v)
            if checkpoint and (trainer.step % tc.checkpoint_every == 0
                               or trainer.step == tc.train_steps):
                checkpoint()
            if on_step:
                on_step(m)
    except (KeyboardInterrupt, NonFiniteLoss):
        trainer.rewind()  # so that training can continue in this process, exactly
        raise
    finally:
        bar.close()
    return "finished"
