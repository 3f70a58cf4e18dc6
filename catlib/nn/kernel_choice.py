"""The kernel of a CAT block, chosen by name: its family and the options it reads.

``CATConfig.kernel`` names the operator of a CAT block. The kernels come in three
families, each kernel in one:

- CAT's spectral kernel alone: on positions rescaled to [0, 1] ("absolute", the
  published), on token distances ("relative"; :mod:`.relative`) or as the positional bias
  of query-key attention ("content"; :mod:`.content`);
- :data:`PRIOR_KERNELS`: a decaying prior, ALiBi's or KERPLE's, plus CAT's spectral
  residual, which vanishes beyond the training length (:mod:`.decay_prior`);
- :data:`LEARNED_BIASES`: a learned bias of the literature in place of CAT's kernel, in
  the same block: ALiBi plus learned buckets in place of the residual ("alibi-buckets",
  built by :mod:`.decay_prior` on :mod:`.learned_bias`'s buckets), KERPLE-log and FIRE
  (:mod:`.learned_bias`), FoX's data-dependent forget gate (:mod:`.forgetting`).

A config holds the options of every kernel (:data:`KERNEL_OPTIONS`), and each kernel reads
only some of them (:func:`options_read`): FoX's gate reads none, FIRE only the training
length. An option the kernel does not read cannot change the model, so it is no part of
the config's identity: ``CATConfig.resolved`` sets it to its default
(:func:`unread_defaults`), and two configs that build the same model have one config hash,
so one run directory. Two options are refused instead, as they always were, because they
ask for something the kernel cannot do: ``far_heads`` on a kernel without a prior, and
"alibi-buckets" without its residual (that is ALiBi alone, "alibi-prior" without one).
"""
from __future__ import annotations

import dataclasses

PRIOR_KERNELS = ("alibi-prior", "kerple-prior")
LEARNED_BIASES = ("alibi-buckets", "kerple-log", "fire", "fox")
KERNELS = ("absolute", "relative", "content") + PRIOR_KERNELS + LEARNED_BIASES

# The CATConfig fields that only the kernel of a CAT block reads (the baseline none).
KERNEL_OPTIONS = ("n_freq", "basis", "quad_nodes", "kernel_scale", "kernel_horizon",
                  "kernel_residual", "train_length", "far_heads")
# The options each kernel reads. A prior kernel's residual (spectral, or the buckets of
# "alibi-buckets": n_freq of them) lives on distances below ``train_length``, mapped by
# log(1 + d / kernel_scale); its spectral basis is always the half-range cosines, so
# ``basis`` is not read. FIRE's threshold starts at a share of ``train_length``.
_PRIOR = ("n_freq", "kernel_scale", "kernel_residual", "train_length", "far_heads")
READS = {
    "absolute": ("n_freq", "basis", "quad_nodes"),
    "relative": ("n_freq", "basis", "quad_nodes", "kernel_scale", "kernel_horizon"),
    "content": ("n_freq", "basis", "kernel_scale", "kernel_horizon"),
    "alibi-prior": _PRIOR, "kerple-prior": _PRIOR, "alibi-buckets": _PRIOR,
    "kerple-log": (), "fire": ("train_length",), "fox": (),
}
# The kernels whose parameters are laid out from the training length ``train_length``
# (which they need): the prior kernels' residual, the buckets, FIRE's threshold L.
TRAIN_LENGTH_KERNELS = tuple(k for k in KERNELS if "train_length" in READS[k])
# The kernels with heads of their own: those built on a decaying prior.
FAR_HEAD_KERNELS = tuple(k for k in KERNELS if "far_heads" in READS[k])


def options_read(kernel: str, kernel_residual: bool = True) -> tuple[str, ...]:
    """The options of :data:`KERNEL_OPTIONS` that ``kernel`` reads, and so its identity
    holds. A prior kernel without its residual (``kernel_residual=False``: the prior alone)
    reads neither the residual's size ``n_freq`` nor its distance map's ``kernel_scale``.
    It keeps ``train_length``, the one option held that a model may not read: the prior
    alone reads it only for its far heads' scale, but every prior kernel needs it, and the
    identity of the book's control rows (ALiBi inside the CAT block) has always held it, so
    setting it aside would rename their runs; it follows the training length, so two such
    configs differ there only where a user sets it apart from ``seq``."""
    reads = READS[kernel]
    if kernel in PRIOR_KERNELS and not kernel_residual:
        reads = tuple(o for o in reads if o not in ("n_freq", "kernel_scale"))
    return reads


def unread_defaults(config) -> dict:
    """``{option: default}`` for each option of :data:`KERNEL_OPTIONS` that ``config``'s
    kernel does not read: the values that make the config's identity that of every config
    building the same model (the default itself, so that 4 and 4.0 write one JSON)."""
    reads = options_read(config.kernel, config.kernel_residual)
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    return {name: defaults[name] for name in KERNEL_OPTIONS if name not in reads}


def check_kernel(config) -> None:
    """Raise ``ValueError`` (one line: the option, what it accepts, the fix) unless
    ``config``'s kernel and its options are valid: the kernel one of :data:`KERNELS`, its
    numbers in range, ``train_length`` where the kernel needs it, ``far_heads`` only on a
    kernel with a prior, and every kernel but "absolute" on the causal operator."""
    if config.kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {list(KERNELS)}, got {config.kernel!r}")
    for name in ("kernel_scale", "kernel_horizon"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a number of tokens > 0, got {value!r}")
    for name in ("kernel_residual", "attention_residual"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(config, name)!r}")
    if config.kernel in TRAIN_LENGTH_KERNELS:
        t = config.train_length
        if isinstance(t, bool) or not isinstance(t, int) or t < 2:
            why = ("its threshold L starts below it" if config.kernel == "fire"
                   else "its residual lives on distances below it")
            raise ValueError(
                f"kernel={config.kernel!r} needs train_length, the training sequence length "
                f"(an integer >= 2; {why}), got {t!r}; "
                f"e.g. train_length=128 for runs trained on 128 characters")
    if config.kernel == "alibi-buckets" and not config.kernel_residual:
        raise ValueError("kernel='alibi-buckets' with kernel_residual=False is ALiBi alone, "
                         "the model of kernel='alibi-prior' with kernel_residual=False; use "
                         "that, or kernel_residual=True for the learned buckets")
    _check_far_heads(config)
    if config.kernel == "absolute":
        return
    causal = (config.variant != "published") if config.causal is None else config.causal
    if not causal:
        raise ValueError(
            f"kernel={config.kernel!r} needs the causal corrected model, but causal resolves "
            f"to False; use variant='causal' or set causal=True")


def _check_far_heads(config) -> None:
    far, n_heads = config.far_heads, config.n_heads
    if isinstance(far, bool) or not isinstance(far, int) or not 0 <= far <= n_heads:
        raise ValueError(f"far_heads must be an integer from 0 to n_heads = {n_heads}, "
                         f"got {far!r}")
    if far and config.kernel not in FAR_HEAD_KERNELS:
        raise ValueError(f"far_heads is an option of the prior kernels {list(FAR_HEAD_KERNELS)}, "
                         f"not of kernel={config.kernel!r}; use e.g. kernel='kerple-prior'")
