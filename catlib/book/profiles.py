"""The book's profiles: the sizes of every notebook, per profile, defined only here.

Every notebook in ``notebooks/`` has one cell tagged ``parameters``. A *profile*
fixes the sizes of every notebook at once; its definition lives only here, in
:data:`PROFILES` (profile -> notebook -> parameter overrides):

- ``smoke``: the smallest sizes that run every cell (CI, nbval references);
- ``cpu``: the default, sizes a laptop's CPU builds the whole book at (the
  reproducibility page states the measured time); a notebook's own ``parameters``
  cell holds these values, so that running it by hand gives the cpu profile
  (``tests/test_book.py`` checks they agree);
- ``paper``: the published sizes, for a GPU.

The runner (:mod:`catlib.book.runner`) executes the notebooks in :data:`PROFILES` order.

To add a notebook: put ``notebooks/NN_name.ipynb`` (with a ``parameters`` cell
holding ``device``, ``profile``, ``figure_dir`` and its own sizes) in every
profile below, and ``book/notebooks/NN_name`` in ``_toc.yml``.

The other modules read ``profiles.PROFILES`` when they are called (never a copy taken
at import), so a replaced table (a test's monkeypatch of this module) reaches them all.
"""
from __future__ import annotations

# Parameters every notebook declares; the runner sets them, profiles may not.
COMMON_PARAMETERS = ("device", "profile", "figure_dir")

# The experiment of notebooks 05, 06, 08 and 09 (and the split study of 07): one set of sizes
# and training settings per profile, shared so that their runs are the same runs. Written
# as the notebooks' papermill parameters (one per field); experiment(profile) is the typed
# value (ExperimentConfig) they make.
_EXPERIMENT: dict[str, dict] = {
    "smoke": dict(d_model=16, n_heads=2, n_freq=8, blocks=1, solver="rk4-classic", solver_steps=1,
                  dropout=0.0, train_steps=40, lr=4e-3, batch=4, seq=32, lengths=[16, 32, 64],
                  eval_windows=4, curve_windows=4),
    # eval_windows: every window of the span at every length (820 at 128, 205 at 512, 102 at
    # 1024; curve_windows: the 21 at 5000), issue 61; the published split's rows read that
    # many first windows (the published protocol).
    "cpu": dict(d_model=128, n_heads=8, n_freq=32, blocks=1, solver="rk4-classic", solver_steps=1,
                dropout=0.0, train_steps=500, lr=4e-3, batch=10, seq=128,
                lengths=[128, 512, 1024, 5000], eval_windows=820, curve_windows=21),
    "paper": dict(d_model=128, n_heads=8, n_freq=32, blocks=1, solver="rk4-classic", solver_steps=4,
                  dropout=0.1, train_steps=800, lr=3e-4, batch=32, seq=256,
                  lengths=[128, 512, 1024, 5000], eval_windows=256, curve_windows=256),
}

# The context gain beyond the training length (chapters 06, 08, 09 and 10: gain_windows) reads
# the targets past ``seq`` of that many windows of the longest length twice, with every
# earlier character and with at most ``seq`` (catlib.measure.context_gain), once per run in
# the book's pool. Its sliding reading feeds a window of 5000 characters to a model as 305
# chunks of 128: measured at the cpu sizes on one thread (untrained weights, the cost is the
# same), 0.35-3.2 s a window per model with its full reading, about 59 s a window over the
# 48 causal runs of the cpu pool. Every window (21) would add about 20 worker-minutes, some
# 10 minutes of a 2-core build; the cpu profile reads 7 spread over the span (about 7
# worker-minutes), and the interval takes their number (Student's t on 6 degrees of freedom).
PROFILES: dict[str, dict[str, dict]] = {
    "smoke": {
        "01_spectral_kernels": dict(n_freq=12, grid=48, n_heads=2),
        "02_quadrature": dict(n_freq=12, q_max=128, lengths=[128, 512, 1024, 5000],
                              conv_length=64),
        "03_sobolev_penalty": dict(n_freq=12, grid=32, fit_steps=300,
                                   penalty_weights=[0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-2]),
        "04_depth_solvers": dict(d_model=32, n_heads=2, n_freq=8, seq=32, batch=2,
                                 euler_steps=[1, 2, 4, 8], rk4_steps=[1, 2, 4],
                                 dopri5_rtols=[1e-3, 1e-5], dropout_max_steps=60,
                                 published_batch=2, published_max_steps=3, step_repeats=1),
        "05_training": dict(_EXPERIMENT["smoke"], val_every=10, val_windows=2, check_windows=2),
        "06_context_length": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2], published_seeds=[0], sample_chars=24,
                                  gain_windows=4),
        "07_audit": dict(d_model=16, n_heads=2, n_freq=8, seq=32, batch=2, dopri5_max_steps=40,
                         brief_steps=30, eval_windows=4, split_d_model=16, split_n_heads=2,
                         split_steps=40, split_lr=4e-3, split_batch=4, split_seq=32,
                         split_val_every=10),
        "08_beyond": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2], extra_rows=True, refine_windows=4,
                          gain_windows=4),
        "09_using_context": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2], published_seeds=[0],
                                 extra_rows=True, refine_windows=4,
                                 study_blocks=2, study_solver="euler", study_share=0.5,
                                 study_periods=[4, 28], study_batch=4,
                                 copy_distances=[8, 16, 256, 512, 1024], copy_passages=2,
                                 gain_windows=4),
        "10_equal_compute": dict(_EXPERIMENT["smoke"], seeds=[0, 1, 2], dial_windows=1,
                                 gain_windows=4),
        "11_scale": {},       # reads results/scale_<device>.json: trains nothing in any profile
        "12_code": {},        # reads results/scale_code_<device>.json: trains nothing either
    },
    "cpu": {
        "01_spectral_kernels": dict(n_freq=32, grid=128, n_heads=4),
        "02_quadrature": dict(n_freq=32, q_max=512, lengths=[128, 256, 512, 1024, 2048, 5000],
                              conv_length=256),
        "03_sobolev_penalty": dict(n_freq=16, grid=64, fit_steps=600,
                                   penalty_weights=[0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2]),
        "04_depth_solvers": dict(d_model=64, n_heads=4, n_freq=16, seq=64, batch=4,
                                 euler_steps=[1, 2, 4, 8, 16, 32], rk4_steps=[1, 2, 4, 8],
                                 dopri5_rtols=[1e-3, 1e-5, 1e-7], dropout_max_steps=600,
                                 published_batch=32, published_max_steps=40, step_repeats=2),
        "05_training": dict(_EXPERIMENT["cpu"], val_every=50, val_windows=8, check_windows=8),
        "06_context_length": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2], published_seeds=[0], sample_chars=400,
                                  gain_windows=7),
        "07_audit": dict(d_model=32, n_heads=4, n_freq=16, seq=64, batch=4, dopri5_max_steps=600,
                         brief_steps=200, eval_windows=16, split_d_model=128, split_n_heads=8,
                         split_steps=500, split_lr=4e-3, split_batch=10, split_seq=128,
                         split_val_every=50),
        "08_beyond": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2], extra_rows=False, refine_windows=128,
                          gain_windows=7),
        "09_using_context": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2], published_seeds=[0],
                                 extra_rows=False, refine_windows=128,
                                 study_blocks=2, study_solver="euler", study_share=0.5,
                                 study_periods=[8, 112], study_batch=20,
                                 copy_distances=[32, 64, 400, 1000, 2000], copy_passages=4,
                                 gain_windows=7),
        "10_equal_compute": dict(_EXPERIMENT["cpu"], seeds=[0, 1, 2], dial_windows=2,
                                 gain_windows=7),
        "11_scale": {},
        "12_code": {},
    },
    "paper": {
        "01_spectral_kernels": dict(n_freq=48, grid=256, n_heads=8),
        "02_quadrature": dict(n_freq=48, q_max=1024, lengths=[128, 256, 512, 1024, 2048, 5000],
                              conv_length=256),
        "03_sobolev_penalty": dict(n_freq=24, grid=96, fit_steps=1500,
                                   penalty_weights=[0.0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3,
                                                    1e-2]),
        "04_depth_solvers": dict(d_model=128, n_heads=8, n_freq=32, seq=256, batch=8,
                                 euler_steps=[1, 2, 4, 8, 16, 32, 64], rk4_steps=[1, 2, 4, 8, 16],
                                 dopri5_rtols=[1e-3, 1e-5, 1e-7], dropout_max_steps=2000,
                                 published_batch=32, published_max_steps=2000, step_repeats=3),
        "05_training": dict(_EXPERIMENT["paper"], val_every=100, val_windows=32, check_windows=32),
        "06_context_length": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2], published_seeds=[0, 1, 2], sample_chars=600,
                                  gain_windows=21),
        "07_audit": dict(d_model=128, n_heads=8, n_freq=32, seq=256, batch=8,
                         dopri5_max_steps=2000, brief_steps=300, eval_windows=64,
                         split_d_model=128, split_n_heads=8, split_steps=800, split_lr=3e-4,
                         split_batch=32, split_seq=256, split_val_every=100),
        "08_beyond": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2], extra_rows=True, refine_windows=256,
                          gain_windows=21),
        "09_using_context": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2], published_seeds=[0, 1, 2],
                                 extra_rows=True, refine_windows=256,
                                 study_blocks=2, study_solver="euler", study_share=0.5,
                                 study_periods=[8, 224], study_batch=32,
                                 copy_distances=[32, 100, 128, 400, 1000, 2000, 4000, 8000],
                                 copy_passages=16,
                                 gain_windows=21),
        "10_equal_compute": dict(_EXPERIMENT["paper"], seeds=[0, 1, 2], dial_windows=8,
                                 gain_windows=21),
        "11_scale": {},
        "12_code": {},
    },
}


# Chapter 9's targets name 8x, 16x and 32x the training length (half kept, the moonshot);
# each profile's copy_distances test them all (at seq: 256, 512, 1024 in smoke; 2000, 4000,
# 8000 in paper) but these. The cpu profile leaves 32x (d = 4000, an input of 8,000
# characters) to the paper profile: measured on one core, one passage of the study's
# ODE-consistent CAT at d = 4000 reads in 3.7 s, 3.3 times d = 2000 (1.1 s), so that with
# its control it would about triple every model's copy test (estimated: 5 minutes more of
# a 45-minute build on two cores; issue 43).
COPY_UNTESTED: dict[str, tuple] = {"smoke": (), "cpu": (32,), "paper": ()}


def experiment(profile: str):
    """The experiment of ``profile`` as an :class:`~catlib.experiment.config.ExperimentConfig`
    (sizes, training, evaluation, the seeds of chapter 06 and the study of chapter 09,
    whose parameters hold them all)."""
    from ..experiment.config import ExperimentConfig

    return ExperimentConfig.from_parameters(PROFILES[profile]["09_using_context"])
