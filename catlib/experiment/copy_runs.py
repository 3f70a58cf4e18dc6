"""A run's copy test (chapter 9), stored with the run beside its evaluation."""
from __future__ import annotations

import numpy as np

from ..common.provenance import code_fingerprint
from ..data import Corpus
from ..runs import Run, check_split, stored_with_run, weights_digest


def run_copy_gain(run: Run, model_key: str, corpus: Corpus, distances, passages: int,
                  device=None, random_seed: int | None = None) -> dict[int, dict[str, np.ndarray]]:
    """The copy test ``{distance: {"first", "second", "control": mean CE per passage
    [passages]}}`` of one model of a run (:func:`catlib.measure.copying.copy_test` on the
    validation split, or with ``random_seed`` on random characters; more passages where
    the input fits the run's training length), stored in the run directory, valid for the
    weights and the code that computed it (as :func:`~catlib.experiment.grid.position_curve`)."""
    from ..measure.copying import copy_test

    check_split(run, corpus)
    model = run.load_weights(device or "cpu")[0][model_key]
    if model is None:
        raise ValueError(f"{run.path.name} did not train {model_key!r}")
    distances = sorted(int(d) for d in distances)     # one identity for any order given
    ident = {"weights": weights_digest({model_key: model}),
             "code": code_fingerprint() + code_fingerprint(("measure.copying",)),
             "distances": distances, "passages": passages}
    name = f"copy-{model_key}.json"
    if random_seed is not None:
        ident["random_seed"], name = random_seed, f"copy-random-{model_key}.json"
    scores = stored_with_run(run, name, ident, lambda: {
        str(d): {k: v.tolist() for k, v in s.items()} for d, s in copy_test(
            model, corpus.val, distances, passages, device, random_seed, len(corpus.vocab),
            run.train_config.seq).items()})
    return {int(d): {k: np.array(v) for k, v in s.items()} for d, s in scores.items()}
