"""What a trained model does, measured: CE per context length (:mod:`.evaluate`, with its
settings :mod:`.config`), CE per position and attention diagnostics (:mod:`.extrapolation`),
the copy test (:mod:`.copying`), the context gain beyond the training length (the same
targets read with all their context and with at most the training length of it:
:mod:`.context_gain`), the refinement test (:mod:`.refinement`) and parameters
and FLOPs (:mod:`.cost`). Functions of a model and a validation tensor; storing results
with a run is :mod:`catlib.experiment.grid`'s job."""
