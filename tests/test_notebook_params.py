"""The notebooks run for any valid parameters and stop an invalid one in their parameters' check.

Each notebook is executed with parameter sets that no profile uses (small, large-ish, odd),
starting from the smoke profile so that each run stays at smoke cost, and must run to its
end (in this process, cell by cell as papermill runs it: :func:`_execute_here`; the kernel
path, :func:`catlib.book.execution.execute`, runs every notebook in ``make book-smoke``
and two invalid parameters here): a finding that
depends on the parameters is stated in glued words, never asserted. One invalid parameter
per notebook must stop it in :func:`catlib.book.page.check_parameters` with one line naming the
parameter and the fix. What the book's own profiles must show (what the notebooks' asserts
used to guard) is read from the smoke profile's executed references in ``tests/nbval``.

The notebooks run in a scratch book root (a folder with ``_config.yml``), so the runs that
05, 06 and 08 train land in a temporary ``runs/`` and never in the checkout's.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from catlib.book import page, parameter_rules
from catlib.experiment import grid as ex
from catlib.book.parameters import notebook_parameters
from catlib.book.profiles import PROFILES
from catlib.book.references import checked

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Parameter sets other than the profiles' (merged over the smoke profile's).
VALID = {
    "01_spectral_kernels": [dict(n_freq=8), dict(n_freq=1, n_heads=3, grid=17),
                            dict(n_freq=40, grid=96, seed=5)],
    "02_quadrature": [dict(q_max=256), dict(q_max=100, quad_nodes=48, lengths=[7, 300]),
                      dict(q_max=2, quad_nodes=3, n_freq=1, conv_length=5, coeff_scale=0.01)],
    "03_sobolev_penalty": [dict(fit_steps=100), dict(n_freq=2, fit_steps=20, penalty_weights=[1e-3],
                                                     sob_lambda=1e-2, fit_basis="cheb")],
    "04_depth_solvers": [dict(d_model=30, n_heads=3, n_freq=5, seq=17, batch=1, euler_steps=[1, 3],
                              rk4_steps=[2], dopri5_rtols=[1e-2], dropout_max_steps=20,
                              published_batch=1, published_max_steps=2, seed=3)],
    "05_training": [dict(seed=1, train_steps=12, n_heads=4, solver="euler", solver_steps=2,
                         val_every=0, lengths=[32, 48])],
    "06_context_length": [dict(seeds=[3], published_seeds=[4], train_steps=12, n_heads=4,
                               lengths=[32, 40], published_protocol=False)],
    "07_audit": [dict(seed=2, d_model=18, n_heads=3, n_freq=5, seq=17, long_length=300,
                      brief_steps=3, dopri5_max_steps=10, dropout_repeats=1, split_d_model=12,
                      split_n_heads=3, split_steps=6, split_val_every=3)],
    "08_beyond": [dict(seeds=[5], train_steps=12, n_heads=4, lengths=[32, 40])],
    "09_using_context": [dict(seeds=[5], published_seeds=[5], train_steps=12, n_heads=4,
                              lengths=[32, 40], study_share=0.25, study_periods=[3, 10],
                              study_solver="rk4-classic", copy_distances=[20, 5],
                              copy_passages=1)],
    "10_equal_compute": [dict(seeds=[5], train_steps=16, n_heads=4, lengths=[32, 40])],
    "11_scale": [dict(figure_dir="")],
    "12_code": [dict(figure_dir="")],
}

# One invalid parameter per notebook, and a word its one-line error must contain.
INVALID = {
    "01_spectral_kernels": (dict(n_freq=-3), "n_freq"),
    "02_quadrature": (dict(q_max="big"), "q_max"),
    "03_sobolev_penalty": (dict(penalty_weights=[1e-6, -1e-6]), "penalty_weights"),
    "04_depth_solvers": (dict(device="tpu"), "device"),
    "05_training": (dict(lr=0), "lr"),
    "06_context_length": (dict(n_heads=3), "n_heads"),
    "07_audit": (dict(seq=2.5), "seq"),
    "08_beyond": (dict(solver="rk5"), "solver"),
    "09_using_context": (dict(study_periods=[8, 400]), "study_periods"),
    "10_equal_compute": (dict(dial_windows=0), "dial_windows"),
    "11_scale": (dict(device="tpu"), "device"),
    "12_code": (dict(device="tpu"), "device"),
}


def _parameters(name: str, changes: dict) -> dict:
    return {**PROFILES["smoke"][name], "device": "cpu", "profile": "params", **changes}


def _scratch_root(path: Path) -> Path:
    """A scratch book root: the notebooks find it upward from their working directory."""
    (path / "_config.yml").write_text("title: scratch\n")
    (path / "notebooks").mkdir()
    return path


@pytest.fixture(autouse=True)
def _runs_in_the_kernel(monkeypatch):
    """The kernels train their runs in their own process (the kernel inherits CATLIB_JOBS):
    runs of a dozen steps cost less than starting a worker for them (about 3 s of CPU,
    torch imported); the pool's workers are tested in test_experiment.py."""
    monkeypatch.setenv("CATLIB_JOBS", "1")


@pytest.fixture
def book_root(tmp_path) -> Path:
    return _scratch_root(tmp_path)


# 09 trains the rows of 08 too, with the seeds 08 gives them (experiment.chapter_seeds): with
# the same sizes and seeds it reuses the runs 08 trained, as in the book. The two share a
# scratch root, on one xdist worker, 08 first; either still passes alone.
SHARED_RUNS = ("08_beyond", "09_using_context", "10_equal_compute")


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory) -> Path:
    return _scratch_root(tmp_path_factory.mktemp("shared-runs"))


def _execute(name: str, changes: dict, root: Path) -> None:
    from catlib.book.execution import execute
    execute(name, _parameters(name, changes), ROOT / "notebooks", root / "notebooks", timeout=600)


def _execute_here(name: str, changes: dict, root: Path, monkeypatch) -> list[str]:
    """The notebook's code cells run in this process as papermill runs them in a kernel:
    an IPython shell with a fresh namespace, the parameters cell and then the injected
    values, each cell's display kept apart from what it prints, the working directory
    ``root/notebooks``, the build log in a file. Returns what each code cell printed. A
    kernel that imports torch and catlib costs about 3 s of CPU (measured: 01 at smoke
    sizes, 4.8 s in a kernel, 1.6 s here); the kernel itself is tested by ``make
    book-smoke`` (every notebook) and by
    :func:`test_invalid_parameter_stops_the_notebook_in_one_line`. What a notebook changes
    in this process (the RNGs, torch's threads, open figures) is put back."""
    import random

    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from catlib.book.execution import BUILD_LOG_ENV

    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate(),
             torch.get_num_threads())
    # The shell puts its own namespace in as sys.modules["__main__"] (which lacks __spec__:
    # the next test's spawned workers would fail to start) and its hooks: taken back after.
    main, hooks = sys.modules["__main__"], (sys.displayhook, sys.excepthook)
    monkeypatch.chdir(root / "notebooks")
    monkeypatch.setenv(BUILD_LOG_ENV, str(root / "build.log"))   # as the runner sets it
    shell = InteractiveShell.instance()
    sys.modules["__main__"] = shell.user_module
    shell.reset(new_session=False)
    shell.user_ns["__spec__"] = None      # as a kernel's __main__ has it (a spawned worker reads it)
    printed = []
    try:
        for source, tags in _code_cells(ROOT / "notebooks" / f"{name}.ipynb"):
            with capture_output() as out:
                result = shell.run_cell(source, silent=True)                  # no Out[n] printed
            assert result.success, f"{name}: {result.error_before_exec or result.error_in_exec!r}\n{out.stdout[-3000:]}"
            printed.append(out.stdout)
            if "parameters" in tags:
                shell.user_ns.update(_parameters(name, changes))
    finally:
        shell.reset(new_session=False)
        sys.modules["__main__"], (sys.displayhook, sys.excepthook) = main, hooks
        plt.close("all")
        torch.set_rng_state(saved[0]), np.random.set_state(saved[1]), random.setstate(saved[2])
        torch.set_num_threads(saved[3])
    return printed


# ------------------------------------------------------------------ the check itself (no kernel)

def test_every_parameter_of_every_notebook_has_a_rule():
    for path in NOTEBOOKS:
        missing = sorted(set(notebook_parameters(path)) - set(parameter_rules.PARAMETERS))
        assert not missing, f"{path.name}: no rule in catlib.book.parameter_rules.PARAMETERS for {missing}"


def test_every_profile_passes_the_check():
    for profile, table in PROFILES.items():
        for name, overrides in table.items():
            values = dict(notebook_parameters(ROOT / "notebooks" / f"{name}.ipynb"), **overrides)
            values["device"] = "cpu"
            page.check_parameters(values, even_heads=True)


def _code_cells(path: Path) -> list[tuple[str, list]]:
    """``(source, tags)`` of each code cell of the notebook at ``path``, in order."""
    return [("".join(c["source"]), c.get("metadata", {}).get("tags", []))
            for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def _setup_cell(path: Path) -> str:
    """The source of the code cell right after the notebook's ``parameters`` cell."""
    cells = _code_cells(path)
    index = next(i for i, (_, tags) in enumerate(cells) if "parameters" in tags)
    return cells[index + 1][0]


def test_the_check_runs_before_setup_and_no_import_shadows_a_parameter():
    import ast
    for path in NOTEBOOKS:
        setup = _setup_cell(path)
        assert "page.check_parameters(globals()" in setup.split("page.setup(device)")[0], path.name
        imported = {alias.asname or alias.name.split(".")[0]
                    for node in ast.walk(ast.parse(setup))
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        assert not imported & set(parameter_rules.PARAMETERS), f"{path.name}: {imported & set(parameter_rules.PARAMETERS)}"


@pytest.mark.parametrize("values, word", [
    (dict(n_freq=-3), "n_freq = -3"), (dict(n_freq=8.0), "an integer"),
    (dict(n_freq=True), "n_freq"), (dict(grid="64"), "grid = '64'"),
    (dict(lr=0), "lr = 0"), (dict(lr=math.nan), "lr"), (dict(dropout=1.0), "< 1"),
    (dict(lengths=[]), "non-empty"), (dict(lengths=[128, -1]), "each"),
    (dict(seeds=[0, 1.5]), "seeds"), (dict(fit_basis="legendre"), "fourier, cosine, cheb"),
    (dict(solver="rk5"), "rk4-classic"), (dict(published_protocol="yes"), "True or False"),
    (dict(device="tpu"), "-p device cpu"), (dict(d_model=16, n_heads=3), "-p n_heads 2"),
    (dict(split_d_model=128, split_n_heads=3), "split_n_heads"),
    (dict(split_val_every=0), "split_val_every"),
    (dict(split_val_every=60, split_steps=40), "-p split_val_every 40"),
])
def test_an_invalid_parameter_is_one_line_naming_it_and_the_fix(values, word):
    with pytest.raises(page.ParameterError) as err:
        page.check_parameters(values)
    message = str(err.value)
    assert word in message and "\n" not in message and "-p " in message, message
    assert err.value._render_traceback_() == [f"ParameterError: {message}"]


def test_valid_odd_parameters_pass_and_even_heads_is_asked_for():
    page.check_parameters(dict(n_freq=1, lr=1, seeds=[0], d_model=18, n_heads=3, dropout=0.0,
                               penalty_weights=[0, 1e-3], published_protocol=False, device="cpu"))
    page.check_parameters(dict(d_model=18, n_heads=3))
    with pytest.raises(page.ParameterError, match="even"):
        page.check_parameters(dict(d_model=12, n_heads=4), even_heads=True)


# ------------------------------------------------------------------ the notebooks executed

@pytest.mark.slow("executes the notebook; 05, 06, 08, 09 and 10 train their rows")
@pytest.mark.parametrize("name, changes", [
    pytest.param(n, c, id=f"{n}-{','.join(map(str, c))}",
                 marks=[pytest.mark.xdist_group("shared-runs")] if n in SHARED_RUNS else [])
    for n, cases in VALID.items() for c in cases])
def test_notebook_runs_to_its_end_with_other_parameters(name, changes, request, monkeypatch):
    root = request.getfixturevalue("shared_root" if name in SHARED_RUNS else "book_root")
    printed = _execute_here(name, changes, root, monkeypatch)
    if name in ex.CHAPTER_ROWS:
        check_runs_cell(name, printed)


SUMMARY = re.compile(r"^\d+ rows, \d+ row-seed pairs, \d+ runs: \d+ trained here, \d+ reused")


def check_runs_cell(name: str, printed: list[str]) -> None:
    """The cell of a chapter that trains or reuses its runs prints one summary line on the
    page (05 adds its runs' published progress lines), never the run log: one line per
    run, which goes to the build log (:func:`catlib.book.page.build_log`). ``printed``:
    what each code cell printed (:func:`_execute_here`)."""
    cells = [i for i, (source, _) in enumerate(_code_cells(ROOT / "notebooks" / f"{name}.ipynb"))
             if re.search(r"\bex\.train_(rows|grid)\(", source)]
    assert len(cells) == 1, f"{name}: {len(cells)} runs cells"
    lines = printed[cells[0]].splitlines()
    assert lines and SUMMARY.match(lines[0]), f"{name}: the runs cell printed {lines[:5]}"
    if name != "05_training":
        assert len(lines) == 1, f"{name}: the runs cell printed {len(lines)} lines: {lines[:5]}"
    assert not [line for line in lines if " run " in line], f"{name}: {lines[:5]}"


# Two notebooks go through a kernel, as the runner runs them (the kernel, papermill and the
# failed execution's one-line cause); the check cell of every notebook runs in this process
# (test_every_notebooks_check_cell_stops_its_invalid_parameter): a kernel that imports torch
# and catlib costs about 4 s of CPU, ten of them most of a minute of `make test`.
IN_A_KERNEL = ("05_training", "09_using_context")


@pytest.mark.slow("starts a kernel that imports torch and catlib before the check stops it")
@pytest.mark.parametrize("name", IN_A_KERNEL)
def test_invalid_parameter_stops_the_notebook_in_one_line(name, book_root):
    from catlib.book.errors import NotebookFailed
    changes, word = INVALID[name]
    with pytest.raises(NotebookFailed) as err:
        _execute(name, changes, book_root)
    cause = err.value.cause
    assert cause.startswith("ParameterError: ") and word in cause and "\n" not in cause, cause
    assert "-p " in cause, cause


@pytest.mark.parametrize("name", sorted(INVALID))
def test_every_notebooks_check_cell_stops_its_invalid_parameter(name):
    # The notebook's own cells, as papermill would run them: its parameters' values, the
    # injected ones, then its setup cell up to and including its check (the lines after
    # it, which set up the device and load data, are not reached when the check stops).
    changes, word = INVALID[name]
    path = ROOT / "notebooks" / f"{name}.ipynb"
    setup = _setup_cell(path)
    check = setup.index("page.check_parameters(globals()")
    namespace = {**notebook_parameters(path), **_parameters(name, changes)}
    with pytest.raises(page.ParameterError) as err:
        exec(setup[:setup.index("\n", check)], namespace)              # noqa: S102
    message = str(err.value)
    assert word in message and "\n" not in message and "-p " in message, message


# ------------------------------------------------------------------ the book's own findings

# Claims that the smoke references print as False on purpose: the corrected bases have no
# mirror symmetry (01's "fourier" line prints True).
EXPECTED_FALSE = {("01_spectral_kernels", "cosine", "K(s,t) = K(1-s,t) = K(s,1-t)"),
                  ("01_spectral_kernels", "cheb", "K(s,t) = K(1-s,t) = K(s,1-t)")}
CLAIM = re.compile(r"([^:]+?): (True|False)\b")


def checked_claims(path: Path) -> list[tuple[str, str, bool]]:
    """``(first word of the line, claim, value)`` of every "claim: True/False" that the
    cells tagged ``nbval-check-output`` of an executed notebook printed."""
    claims = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if not checked(cell):
            continue
        text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                       if o.get("output_type") == "stream")
        for line in text.splitlines():
            first = line.split()[0] if line.split() else ""
            claims += [(first, c.strip(), v == "True") for c, v in CLAIM.findall(line)]
    return claims


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "nbval").glob("*.ipynb")),
                         ids=lambda p: p.stem)
def test_smoke_references_state_the_books_findings(path):
    """The notebooks state their findings instead of asserting them; for the book's smoke
    profile (the nbval references, which nbval compares every execution with) each stated
    check holds, so a finding that stops holding fails here, not silently in the text."""
    claims = checked_claims(path)
    assert claims, f"{path.name}: no checked claims found"
    wrong = [f"{first} {claim}" for first, claim, value in claims
             if not value and (path.stem, first, claim) not in EXPECTED_FALSE]
    assert not wrong, f"{path.name} (smoke profile) states as False: {wrong}"


def test_a_study_share_that_rounds_to_no_window_is_stopped_naming_study_share():
    # Catches the check calling the sampler's rule without the batch: 0.02 of a batch of 20
    # passed here and failed later inside the pool, naming repeat_share.
    with pytest.raises(page.ParameterError) as err:
        page.check_parameters(dict(study_share=0.02, batch=20, seq=128, study_periods=[8, 112]))
    message = str(err.value)
    assert "study_share = 0.02" in message and "-p study_share 0.05" in message, message
    assert "repeat_share" not in message and "\n" not in message


def test_a_study_share_of_one_passes_as_the_sampler_accepts_it():
    # Catches a bound stricter than the sampler's: every window repeated is a valid batch.
    page.check_parameters(dict(study_share=1.0, batch=20, seq=128, study_periods=[8, 112]))
    from catlib.data import check_repeats
    check_repeats(1.0, (8, 112), 128, 20)


@pytest.mark.parametrize("values", [dict(lr=math.inf), dict(noise=math.inf), dict(penalty_weights=[math.inf])])
def test_an_infinite_parameter_is_stopped(values):
    with pytest.raises(page.ParameterError, match="is invalid"):
        page.check_parameters(values)
