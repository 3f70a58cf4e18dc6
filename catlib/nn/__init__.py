"""The method: everything that decides a CAT or baseline model's weights given its data.

One concept per module:

- ``bases``, ``quadrature``: the spectral bases on [0, 1]; Gauss-Legendre rules and the
  interpolation of token sequences at nodes;
- ``kernel``: the 2-D kernel W(s, t), the 1-D kernel k(u), their Sobolev penalties and the
  Gram matrices those read (as non-persistent buffers);
- ``plan``: the plan protocol every attention operator follows (plan base, geometry cache,
  preamble, the score-bias plan); ``bias``: causal score biases (``CausalBias``, the one
  Toeplitz builder, ALiBi);
- the operators of a CAT block, one per module: ``attention`` (published / causal
  continuous attention), ``relative`` (kernel on token distances; its map and bins in
  ``distance_map``), ``content`` (the kernel as a score bias of query-key attention),
  ``decay_prior`` (ALiBi's or KERPLE's prior plus a spectral residual), ``learned_bias``
  (the literature's learned biases in the same block: ALiBi plus learned buckets,
  KERPLE-log, FIRE), ``forgetting`` (FoX's data-dependent forget gate);
  ``distance_kernels`` keeps the old import path of the first two;
- ``qk_attention`` (causal query-key attention, RoPE), ``baselines`` (the Transformer
  baselines), ``model`` (CAT and its attention factory), ``solvers`` (the depth solvers),
  ``config`` (the model configuration), ``kernel_choice`` (the kernels by name, their
  families and the options each reads), ``compat`` (the loader of published checkpoints).

This folder is what the code fingerprint reads (:func:`catlib.common.provenance.code_fingerprint`):
a module added here is covered by it.
"""
