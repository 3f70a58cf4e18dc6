"""One model, one identity (issue 60, item 6): the options a kernel does not read
(catlib.nn.kernel_choice) are no part of its config's identity, and the table of what each
kernel reads is true (tests/test_learned_biases.py holds the learned biases' case).

What each test catches:
- two configs that build the same model under two config hashes (the prior alone with
  another n_freq), so two run directories;
- an option a kernel reads left out of its identity (two models under one hash);
- a table that says a kernel ignores an option it reads, or reads one it ignores: each
  model is built with the option changed and its parameters set alike, and its weights
  and logits compared;
- an option that asks for what the kernel cannot do (far heads without a prior, the
  buckets without their residual) accepted instead of refused.
"""
import pytest
import torch

import catlib
from catlib.nn import config as nn_config
from catlib.nn.kernel_choice import (KERNEL_OPTIONS, KERNELS, LEARNED_BIASES, PRIOR_KERNELS,
                                     TRAIN_LENGTH_KERNELS, options_read)
from catlib.runs.identity import config_hash
from catlib.training.loop import TrainConfig

V, T_TRAIN = 13, 24
TINY = dict(vocab_size=V, d_model=16, n_heads=4, n_freq=6, variant="causal", solver="euler",
            solver_steps=1, dropout=0.0)
# A value away from the default of each option (far_heads: refused where unread, below).
CHANGED = dict(n_freq=5, basis="cheb", quad_nodes=7, kernel_scale=2.0, kernel_horizon=64.0,
               kernel_residual=False, train_length=40)


def _config(kernel, **kw):
    fields = {**TINY, "kernel": kernel, **kw}
    if kernel in TRAIN_LENGTH_KERNELS:
        fields.setdefault("train_length", T_TRAIN)
    return catlib.CATConfig(**fields)


def _hash(cfg):
    return config_hash(cfg, TrainConfig(), "sha", code="code")


def test_the_kernels_own_options_keep_their_identity():
    for kernel, option in (("absolute", "n_freq"), ("absolute", "quad_nodes"),
                           ("relative", "kernel_scale"), ("content", "kernel_horizon"),
                           ("alibi-prior", "kernel_residual"), ("kerple-prior", "n_freq"),
                           ("alibi-buckets", "n_freq"), ("alibi-buckets", "kernel_scale"),
                           ("fire", "train_length")):
        assert _hash(_config(kernel, **{option: CHANGED[option]})) != _hash(_config(kernel)), \
            (kernel, option)
    # The prior alone (no residual) reads no residual size: one identity for any n_freq.
    off = dict(kernel_residual=False)
    assert _hash(_config("alibi-prior", **off, n_freq=5)) == _hash(_config("alibi-prior", **off))


def _built(cfg, monkeypatch):
    """The model ``cfg`` builds with every option as given (not set to its default by
    ``resolved``), its parameters set from one generator; its logits at 40 tokens (beyond
    the training length 24)."""
    with monkeypatch.context() as m:
        m.setattr(nn_config, "unread_defaults", lambda config: {})
        torch.manual_seed(0)
        model = catlib.CAT(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        x = torch.randint(0, V, (1, 40), generator=torch.Generator().manual_seed(2))
        return model.state_dict(), model(x)[0]


def _same(a, b) -> bool:
    (sa, la), (sb, lb) = a, b
    return (list(sa) == list(sb) and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k])
                                         for k in sa) and torch.equal(la, lb))


CASES = [(k, True) for k in KERNELS] + [(k, False) for k in PRIOR_KERNELS]


# The one option an identity holds that the model need not read (options_read says why):
# the training length of a prior kernel without its residual and without far heads.
HELD_UNREAD = {(k, False, "train_length") for k in PRIOR_KERNELS}


@pytest.mark.parametrize("kernel,residual", CASES)
def test_the_table_says_what_each_kernel_reads(kernel, residual, monkeypatch):
    # Each option the table calls unread leaves weights and logits equal bit for bit; each
    # option it calls read changes them (parameters moved off their zero start, so that a
    # residual's distance map shows), but for HELD_UNREAD.
    base = dict(kernel_residual=residual)
    plain = _built(_config(kernel, **base), monkeypatch)
    reads = options_read(kernel, residual)
    for option in KERNEL_OPTIONS:
        if option == "far_heads" or (option == "kernel_residual" and kernel == "alibi-buckets"):
            continue                                   # refused where unread (below)
        value = CHANGED[option] if (option, residual) != ("kernel_residual", False) else True
        changed = _built(_config(kernel, **{**base, option: value}), monkeypatch)
        unread = option not in reads or (kernel, residual, option) in HELD_UNREAD
        assert _same(plain, changed) == unread, (kernel, residual, option)
    if not residual:                                   # the far heads' scale reads it
        far = dict(base, far_heads=1)
        assert not _same(_built(_config(kernel, **far), monkeypatch),
                         _built(_config(kernel, **far, train_length=40), monkeypatch))


def test_what_a_kernel_cannot_do_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"far_heads is an option of the prior kernels "
                                         r"\['alibi-prior', 'kerple-prior', 'alibi-buckets'\]"):
        _config("fox", far_heads=1)
    with pytest.raises(ValueError, match="is ALiBi alone"):
        _config("alibi-buckets", kernel_residual=False)
    _config("alibi-buckets", far_heads=1)
    _config("kerple-prior", far_heads=2)


def test_each_kernel_is_in_one_family():
    assert not set(PRIOR_KERNELS) & set(LEARNED_BIASES)
    assert set(KERNELS) == {"absolute", "relative", "content", *PRIOR_KERNELS, *LEARNED_BIASES}
    assert TRAIN_LENGTH_KERNELS == ("alibi-prior", "kerple-prior", "alibi-buckets", "fire")
