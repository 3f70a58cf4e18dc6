"""Training: its settings (:mod:`.config`), what a step's number decides (:mod:`.schedule`:
the learning rate, the Sobolev weight, the solver's steps), the loop and the side-by-side CAT
and baseline (:mod:`.loop`, which still exports the names of the other two), the optimiser
(:mod:`.optim`), the batches' copy to the device (:mod:`.transfer`) and data-parallel
training under torchrun (:mod:`.distributed`)."""
