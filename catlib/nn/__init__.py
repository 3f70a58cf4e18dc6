"""The method: everything that decides a CAT or baseline model's weights given its data.

Bases and quadrature, the 2-D kernel and the continuous attention, the distance
kernels and the decay-anchored priors, query-key attention, the baselines, the model
with its attention factory, the depth solvers, the model configuration and the loader
of published checkpoints. This folder is what the code fingerprint reads
(:func:`catlib.provenance.code_fingerprint`): a module added here is covered by it.
"""
