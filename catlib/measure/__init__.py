"""What a trained model does, measured: CE per context length (:mod:`.evaluate`, with its
settings :mod:`.config`), CE per position and attention diagnostics (:mod:`.extrapolation`),
the copy test (:mod:`.copying`), the refinement test (:mod:`.refinement`) and parameters
and FLOPs (:mod:`.cost`). Functions of a model and a validation tensor; storing results
with a run is :mod:`catlib.experiment.grid`'s job."""
