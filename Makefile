# The two commands of the README: `make book` (the main job) and `make test`.
# Each creates its own virtual environment with the pinned dependencies.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export CATLIB_DATA ?= $(abspath ../shared/data/tiny.txt)

.PHONY: venv test unit clean

venv: $(STAMP)

# torch is pinned in the same pip call as torchdiffeq: an unpinned resolve pulls a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 torchdiffeq==0.2.5
	$(PY) -m pip install -q -e '.[test,book]'
	touch $(STAMP)

unit: venv
	$(PY) -m pytest -q tests

test: unit

clean:
	rm -rf $(VENV) _build
