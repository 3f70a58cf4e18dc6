"""Training: the loop, its settings and the side-by-side CAT and baseline (:mod:`.loop`),
the optimiser (:mod:`.optim`) and data-parallel training under torchrun
(:mod:`.distributed`)."""
