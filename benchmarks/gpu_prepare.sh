#!/usr/bin/env bash
# Prepare a run of `python -m benchmarks.gpu_check` on a lent GPU machine that has torch and
# numpy but no notebook stack and no internet: download the wheels it lacks (Python 3.12,
# pure Python or manylinux x86-64) into .whl/ and copy the corpus to tiny.txt, both ignored
# by git and carried to the machine. Then run there (see book/reproducibility.md, "CUDA"):
#
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 CATLIB_DATA=$PWD/tiny.txt CATLIB_COMMIT=<sha> &&
#   python3 -m benchmarks.gpu_check --device cuda --out $OUT --budget 480 2>&1 | tee $OUT/console.log
#
# The scale study (chapter 11) on the same machine, same set-up (no notebook stack needed):
#
#   python3 -m catlib.book.scale --device cuda --out $OUT 2>&1 | tee $OUT/scale.log
#
# Measured on one H200: about 330 training steps per second in all, whatever the number of
# runs at once (7 or 15), so its plan (368k steps) takes about 19 minutes: run it in two
# commands on a machine kept warm (the runs resume; the first with `--budgets 1 2 4 8 16
# --seeds 0`), or write the finished runs of a cut one with
# `python3 -m benchmarks.scale_partial cuda $OUT/scale_cuda.json`.
#
# The levers of a training step (issue 48, part 4), same set-up, one command of at most
# 10 minutes (no notebook stack and no corpus needed: random tokens): ms/step of every
# scale-study row as is, basis cache off and pinned inputs off; 1, 3, 7, 15 processes at
# once; CUDA kernels per step; float64 losses on the GPU against the CPU; whether the MPS
# daemon starts. $OUT/gpu_levers_cuda.json is rewritten after every row and item, so a
# cut run keeps what it measured (an item it cut reads "running"):
#
#   timeout 590 python3 -m benchmarks.gpu_levers --device cuda --out $OUT --budget 480 \
#     2>&1 | grep --line-buffered -v '^USDT:' | tee $OUT/levers.log
#
# To rerun only part of it: `--items step_ms processes kernels_per_step float64_equality mps`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -qx '/tiny.txt' .git/info/exclude 2>/dev/null || echo '/tiny.txt' >> .git/info/exclude
"$PY" -c "import shutil; from catlib.data import corpus_path; shutil.copy(corpus_path(), 'tiny.txt')"
# The exact versions of the notebook stack that papermill needs (no dependencies resolved
# there: the machine cannot reach an index).
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform any -d .whl \
  asttokens==3.0.2 \
  comm==0.2.3 \
  debugpy==1.8.22 \
  docutils==0.21.2 \
  entrypoints==0.4.2 \
  executing==2.3.0 \
  fastjsonschema==2.22.3 \
  ipykernel==7.4.0 \
  ipython==9.18.1 \
  ipython-pygments-lexers==1.1.1 \
  jedi==0.20.1 \
  jsonschema==4.26.0 \
  jsonschema-specifications==2025.9.1 \
  jupyter-client==8.10.0 \
  jupyter-core==5.9.1 \
  matplotlib-inline==0.2.2 \
  nbclient==0.11.0 \
  nbformat==5.11.1 \
  nest-asyncio2==1.7.4 \
  papermill==2.7.0 \
  parso==0.8.7 \
  pexpect==4.9.0 \
  platformdirs==4.14.9 \
  prompt-toolkit==3.0.53 \
  ptyprocess==0.7.0 \
  pure-eval==0.2.4 \
  pyzmq==27.3.0 \
  referencing==0.37.0 \
  rpds-py==2026.9.1 \
  stack-data==0.6.3 \
  tenacity==9.2.1 \
  tornado==6.6.1 \
  traitlets==5.16.1 \
  wcwidth==0.9.4 \
  myst-nb==1.4.0
