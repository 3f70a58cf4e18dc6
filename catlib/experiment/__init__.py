"""The book's experiment: the grid of rows and how its runs are trained and scored.

- :mod:`.grid`       ``Row``, ``ROWS`` and the chapters' row groups; :func:`train_grid` and the
  values stored with each run (per-position curves, copy gains, the refinement test);
- :mod:`.config`     ``ExperimentConfig``: the sizes, training, evaluation and seeds rows share;
- :mod:`.pool`       the runs of a grid in parallel worker processes, costliest first;
- :mod:`.progress`   the pool's progress line (runs, steps, time left);
- :mod:`.gain_runs`  each causal run's context gain beyond its training length, stored with it;
- :mod:`.artefacts`  the extrapolation tables of ``results/`` (CSV of curves, JSON of rows).

The grid's names are importable from here (``from catlib import experiment as ex``).
A test that replaces one patches :mod:`.grid`, the module that looks it up.
"""
from .grid import (BASELINES, BEYOND, CHAPTER_ROWS, CONTROLS, DECAY_ANCHORED,  # noqa: F401
                   DIAGNOSTIC, DISTANCE_KERNELS, EXTRA, FAR_COPY, FAR_ODE, HEADLINE, ODE_CONSISTENT,
                   RANDOM_PASSAGES_SEED, ROWS, SEEDS_WITH_EXTRA, STUDY, STUDY_DIAGNOSTIC, TABLE_PARTS, Row,
                   chapter_seeds, configs, curve_se, dropout_on_rows, position_curve, row_configs,
                   run_copy_gain, run_refinement, scores, span_of, table_errors,
                   table_paired_window_errors, table_scores, train_grid, train_rows,
                   training_costs, window_cap, WindowTerm, write_part, PUBLISHED_WINDOWS,
                   split_windows, row_windows)
from .grid import (AS_LAYERS, AS_STEPS, CAT_LADDER, COMPUTE_MATCHED, EULER_CAT, EULER_CONTROL,  # noqa: F401
                   EXTRA_EQUAL_COMPUTE, FRONTIER_CATS, FRONTIER_ONE_SEED, LADDER, MATCHED,
                   NO_COPY_TEST, ROPE_LADDER, SCHEDULE_CHECK, runs_summary)
from .pool import worker_devices  # noqa: F401
