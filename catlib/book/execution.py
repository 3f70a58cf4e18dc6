"""One notebook executed with papermill, atomically, and what a failure reports.

The execution is written to a private temporary folder and lands as ``NAME.ipynb`` only
on success. On an error the runner names the notebook, the cell and the cause, keeps the
notebooks executed before it (and the last good copy of the failing one), saves the
failed execution as ``NAME.failed.ipynb`` and exits non-zero.

What a notebook writes for the build log (:func:`catlib.book.page.build_log`: one line per run
trained or reused, the pool's progress) goes to the runner's log, not to the page.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path

from .errors import NotebookFailed
from .processes import _stop_kernel_on_ctrl_c
from .rewrite import show_parameters_once

# The file a notebook's kernel (which inherits the environment) appends its build-log
# lines to (catlib.book.page.build_log); the runner relays them to its log.
BUILD_LOG_ENV = "CATLIB_BUILD_LOG"


def execute(name: str, parameters: dict, source_dir: Path, output_dir: Path,
            timeout: float | None = None, log=None) -> float:
    """Run one notebook with papermill; return its wall time in seconds.

    The execution is written to a private temporary folder and moved to
    ``NAME.ipynb`` only on success: a failure, Ctrl-C or kill -9 never leaves a
    half-written notebook in ``output_dir`` nor replaces a good executed copy. The
    notebook's build-log lines go to ``log`` (``log(line, flush=True)``) as they come;
    without ``log`` they are dropped. Neither shows on the page.
    """
    import tempfile

    import papermill as pm
    source = source_dir / f"{name}.ipynb"
    output_dir.mkdir(parents=True, exist_ok=True)
    failed = output_dir / f"{name}.failed.ipynb"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="catlib-book-") as staging:
        partial = Path(staging) / f"{name}.ipynb"
        interrupted: list[bool] = []
        try:
            with _stop_kernel_on_ctrl_c(interrupted), \
                    _relayed_build_log(Path(staging) / "build.log", log):
                pm.execute_notebook(str(source), str(partial), parameters=parameters,
                                    kernel_name="python3", cwd=str(output_dir), progress_bar=False,
                                    request_save_on_cell_execute=False, execution_timeout=timeout,
                                    config=kernel_config())
        except Exception as err:  # noqa: BLE001 - every failure is reported the same way
            if interrupted:
                raise KeyboardInterrupt from None
            raise notebook_failed(name, err, partial, failed) from None
        if interrupted:
            raise KeyboardInterrupt
        # Same filesystem or not, the copy lands under a hidden name first, then one rename.
        landing = output_dir / f".{name}.landing.ipynb"
        show_parameters_once(partial, landing)
        os.replace(landing, output_dir / f"{name}.ipynb")
    failed.unlink(missing_ok=True)
    return time.perf_counter() - start


@contextlib.contextmanager
def _relayed_build_log(path: Path, log):
    """While the block runs, :data:`BUILD_LOG_ENV` names ``path`` (for the kernel it starts)
    and a thread passes each line appended to it on to ``log``, indented under the
    runner's lines, until the block has ended and every line is passed on."""
    path.touch()
    previous = os.environ.get(BUILD_LOG_ENV)
    os.environ[BUILD_LOG_ENV] = str(path)
    done = threading.Event()

    def relay():
        pending = ""
        with open(path, encoding="utf-8") as lines:
            while True:
                pending += lines.readline()
                if pending.endswith("\n"):
                    log(f"[book]   {pending.rstrip()}", flush=True)
                    pending = ""
                elif done.is_set():
                    return
                else:
                    time.sleep(0.2)

    thread = threading.Thread(target=relay, daemon=True) if log else None
    if thread:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread:
            thread.join()
        if previous is None:
            os.environ.pop(BUILD_LOG_ENV, None)
        else:
            os.environ[BUILD_LOG_ENV] = previous


def kernel_config():
    """The kernel manager's settings for a private, quiet kernel.

    ipykernel warns "Kernel is running over TCP without encryption" on every start when
    the kernel manager gives it neither CurveZMQ keys nor the IPC transport (jupyter_client
    defaults to plain TCP, ``transport_encryption="disabled"``). The manager's own switch,
    ``transport_encryption="auto"``, provisions the keys when libzmq has CurveZMQ and the
    kernelspec declares it (ipykernel 7 does); without it, on Linux and macOS, local IPC
    sockets, which never leave the machine.
    """
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    if KernelManager.class_traits().get("transport_encryption") is not None and zmq.has("curve"):
        return Config({"KernelManager": {"transport_encryption": "auto"}})
    if os.name != "nt":
        return Config({"KernelManager": {"transport": "ipc"}})
    return Config()


def notebook_failed(name: str, err: Exception, partial: Path, failed: Path) -> NotebookFailed:
    """The error to raise for ``err`` of notebook ``name``: the partial execution ``partial``
    (where papermill wrote one) is moved to ``failed``, and the error names it."""
    cause = (f"{err.ename}: {err.evalue}" if hasattr(err, "ename")
             else f"{type(err).__name__}: {err}")
    saved = None
    if partial.exists():
        shutil.move(str(partial), str(failed))
        saved = failed
    return NotebookFailed(name, _failed_cell(err, failed), cause.strip(), saved)


def _failed_cell(err: Exception, executed: Path) -> str:
    """'cell index N (first line)': N counts from 0 in the source notebook (injected cell left out)."""
    index = getattr(err, "cell_index", None)
    if index is None:
        return "an unknown cell (the kernel stopped)"
    shift = 0
    try:
        import nbformat
        nb = nbformat.read(str(executed), as_version=4)
        injected = [i for i, c in enumerate(nb.cells)
                    if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        shift = int(bool(injected) and injected[0] < index)
    except Exception:  # noqa: BLE001 - the message is still useful without the shift
        pass
    first = (getattr(err, "source", "") or "").strip().splitlines()[:1]
    return f"cell index {index - shift}" + (f" ({first[0][:60]!r})" if first else "")
