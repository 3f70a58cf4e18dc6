# The two commands of the README: `make book` (the main job) and `make test`.
# Each creates its own virtual environment with the pinned dependencies.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The corpus beside this checkout, where there is one; elsewhere CATLIB_DATA stays unset
# (unless the caller sets it) and catlib finds tiny.txt in its cache or downloads it there.
# Never point it at a missing file: catlib takes CATLIB_DATA as set on purpose and stops
# with one line (a typo or an unmounted disk) instead of quietly downloading another copy.
ifneq ($(wildcard ../shared/data/tiny.txt),)
export CATLIB_DATA ?= $(abspath ../shared/data/tiny.txt)
endif
# Idle OpenMP threads sleep instead of spinning: on a busy machine spinning threads
# slow small torch operations down 10-50x (kernels started by papermill/nbval inherit it).
export OMP_WAIT_POLICY ?= PASSIVE
# Device of `make book`: auto (CUDA, then MPS, then CPU), cpu, cuda or mps.
DEVICE ?= auto
# Corpus of `make sweep` and `make scale`: tiny (Tiny Shakespeare) or code (the pinned
# SymPy's source, chapter 12).
CORPUS ?= tiny

.PHONY: scale sweep venv test test-unit test-book lint unit clean book book-smoke nbval nbval-check nbval-refs browser bench gpu-check test-portable unit-portable

venv: $(STAMP)

# The exact versions come from constraints.txt (pyproject.toml holds ranges). torch is
# pinned there, and so in the same pip call as torchdiffeq: an unpinned resolve pulls a
# CUDA build.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch torchdiffeq
	$(PY) -m pip install -q -c constraints.txt -e '.[test,book]'
	touch $(STAMP)

# The unit tests on every core (pytest-xdist; tests/conftest.py keeps a module's fixture on
# one worker, hands the slow tests out first and gives each worker one thread).
# XDIST= runs them in one process.
XDIST ?= -n auto --dist loadgroup
# The checks of a built book (Chromium); `make test` runs them after book-smoke, not in `unit`.
BROWSER_TESTS := tests/test_book.py -k "browser or mathjax or fits"
BROWSER_IDS := $(addprefix --deselect tests/test_book.py::,test_browser_typesets_math_and_loads_figures test_every_page_fits_1280_px test_mathjax_is_served_locally test_fits_check_sees_a_table_wider_than_the_column)

unit: venv
	$(PY) -m pytest -q $(XDIST) tests

# The book: papermill runs every notebook for a profile (catlib/book/), then
# `jupyter-book build . -W -n --keep-going`; prints the path of the first page.
book: venv
	$(PY) -m catlib.book --profile cpu --device $(DEVICE)

book-smoke: venv
	$(PY) -m catlib.book --profile smoke --device cpu

# nbval: re-execute the smoke-profile references and compare the cells
# tagged nbval-check-output; `nbval-refs` regenerates the references after an intended change.
nbval: venv
	$(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider tests/nbval

# The same comparison on the smoke book's own execution (book/notebooks, from book-smoke),
# without executing the notebooks a second time; a reference whose code is not the
# notebook's fails as stale (catlib/book/references.py).
nbval-check: venv
	$(PY) -m catlib.book.references

nbval-refs: venv
	$(PY) -m catlib.book --profile smoke --device cpu --refs

# Headless Chromium loads built pages: math typeset, figures loaded (skipped, with a
# message, where /usr/bin/chromium is absent).
browser: venv
	$(PY) -m pytest -q -rs $(BROWSER_TESTS)

# Lint: ruff with the settings of pyproject.toml ([tool.ruff]).
lint: venv
	$(PY) -m ruff check catlib tests benchmarks

# Two chains at once, each target's output shown whole when it ends (-O): the unit tests
# (on every core) beside book-smoke -> nbval-check -> browser, one after the other: the
# notebooks execute once, and the nbval comparison and the browser read that execution. The unit part
# leaves out the browser checks, which read _build while book-smoke writes it; `browser`
# runs them on the new build. TEST_JOBS=1 runs the chains one after the other.
TEST_JOBS ?= 2

test: lint
	$(MAKE) --no-print-directory -j$(TEST_JOBS) -O test-unit test-book

test-unit: venv
	$(PY) -m pytest -q $(XDIST) $(BROWSER_IDS) tests

test-book: venv
	$(MAKE) --no-print-directory book-smoke
	$(MAKE) --no-print-directory nbval-check
	$(MAKE) --no-print-directory browser

# The unit tests and the nbval checks again under another CPU kernel dispatch (ATen's plain
# C++ kernels, not this CPU's AVX2/AVX-512 ones) and one thread, set for every worker
# process, torchrun rank and nbval kernel: a test that holds only for this machine's
# rounding fails here. Not MKL_CBWR=COMPATIBLE: measured, it makes MKL's float32 products
# agree across shapes, and so hides the very failure this target is for (a [1, T] and a
# [2, T] batch giving other last bits); add it with PORTABLE_ENV=... to check MKL's path.
PORTABLE_ENV ?= ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1

# The unit part alone (CI runs it: the failures of this kind were all there).
unit-portable: venv
	env $(PORTABLE_ENV) $(PY) -m pytest -q -p no:cacheprovider $(XDIST) tests

test-portable: unit-portable
	env $(PORTABLE_ENV) $(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider tests/nbval

clean:
	rm -rf $(VENV) _build book/notebooks book/_generated book/figures

# Speed, as ratios measured side by side in one run (a few minutes; not a test).
bench: venv
	$(PY) -m benchmarks.bench

# The scale study (catlib/experiment/scale.py): chapter 10's rows at 1x and 2x its budget on
# the CPU, seeds 0-2, and seeds 3-9 at 1x for the seven rows of the kernel question (the
# corpus runs out beyond 2x); 1x-16x on a GPU (make scale DEVICE=cuda). Writes
# results/scale_<device>.partial.json after every finished run and results/scale_<device>.json
# once complete, which the book reads; stopped and started again, even on another machine
# with runs/ gone, it reads what its artefact records. `make book` never trains it.
# `make scale CORPUS=code` (chapter 12): the code corpus's rows at 1x, 2x and 4x on seeds
# 0-2, at the rates of `make sweep CORPUS=code`, results/scale_code_<device>.json. Each
# corpus's study also trains the oracle (four ALiBi layers and the Euler CAT on windows of
# 512) at 1x.
scale: venv
	$(PY) -m catlib.book.scale --device $(if $(filter auto,$(DEVICE)),cpu,$(DEVICE)) --corpus $(CORPUS)

# The learning-rate sweep that `make scale` reads (catlib/experiment/sweep.py): every row of
# the study at 1x, seeds 0 and 1, at 2e-3, 4e-3 and 8e-3 (extended by 2 beyond an edge that wins,
# at most twice), scored on the dev slice; a row keeps 4e-3 unless another rate wins by a
# called margin on both seeds. Writes results/lr_sweep_<device>.partial.json after each finished run and
# replaces results/lr_sweep_<device>.json only when every row is done; stopped and started
# again, it resumes. `make sweep CORPUS=code`: the code study's rows on the code corpus's dev
# files, results/lr_sweep_code_<device>.json.
sweep: venv
	$(PY) -m catlib.book.sweep --device $(if $(filter auto,$(DEVICE)),cpu,$(DEVICE)) --corpus $(CORPUS)

# Everything a GPU run needs, in one go within 10 minutes: correctness against the CPU,
# a timed training step of every row, the cpu book and as much of the paper profile as fits
# (benchmarks/gpu_check.py; its smoke version on the CPU runs in `make test`).
gpu-check: venv
	$(PY) -m benchmarks.gpu_check --device cuda --out results --budget 540
