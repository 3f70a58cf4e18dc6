"""Where a result came from: package versions, the git commit and a fingerprint of the code."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def package_versions(names) -> dict[str, str | None]:
    """Installed version of each distribution in ``names`` (None where it is absent)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask where the OS has one (Linux),
    which, unlike ``os.cpu_count()``, honours ``taskset`` and container CPU sets."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:   # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def git_state(root: Path = REPO_ROOT, ignore: tuple[str, ...] = ()) -> dict:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout at ``root``.

    ``CATLIB_COMMIT``, where set, wins (a copy made with ``git archive`` says so itself).
    Otherwise the commit is read only where ``root`` is the top of its own git repository:
    a copy of the project inside another repository (a scratch folder under someone's
    home checkout) would else report that repository's commit. None means unknown.
    Changes to the paths in ``ignore`` (outputs the caller writes itself) do not count.
    """
    if os.environ.get("CATLIB_COMMIT"):
        return {"commit": os.environ["CATLIB_COMMIT"], "dirty": None}
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # read only: never touch the index

    def git(*args):
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                               timeout=10, env=env)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != Path(root).resolve():
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *(f":(exclude){p}" for p in ignore))
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def environment(packages, device=None, root: Path = REPO_ROOT) -> dict:
    """Where a result is computed: Python, platform, usable CPUs, the versions of
    ``packages`` (None where absent) and the git state of ``root``; with a ``device``,
    its type and name, torch's thread count and build, and whether only deterministic
    kernels run (:func:`determinism`). Runs write it to ``env.json``, the book
    runner to its report."""
    env = {"python": platform.python_version(), "platform": platform.platform(),
           "cpus": usable_cpus(), "versions": package_versions(packages), "git": git_state(root)}
    if device is not None:
        import torch
        env["device"] = {"type": device.type, "name": (torch.cuda.get_device_name(device)
                                                       if device.type == "cuda" else str(device))}
        env["torch_threads"] = torch.get_num_threads()
        env["torch_build"] = torch_build(device)
        env["deterministic"] = determinism()
    return env


def determinism() -> dict:
    """Whether torch runs only deterministic kernels now (``TrainConfig.deterministic``), and
    the cuBLAS workspace setting that CUDA's reproducible matrix products need."""
    import torch

    return {"algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}


def torch_build(device) -> dict:
    """What torch computes with on ``device``: the CPU kernel dispatch (AVX2, AVX-512, or
    ATen's plain kernels, which round differently), the BLAS torch was built with, and on
    CUDA the CUDA, cuDNN and driver versions (from ``torch.utils.collect_env``)."""
    import torch

    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    blas = found.group(1) if found else None
    out = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "blas": blas,
           "cuda": torch.version.cuda}
    if device.type == "cuda":
        from torch.utils import collect_env

        out["cudnn"] = torch.backends.cudnn.version()
        out["driver"] = collect_env.get_nvidia_driver_version(collect_env.run)
    return out


# What decides a run's trained weights and its evaluation, and so enters its fingerprint:
# - every file of the method package ``catlib/nn/`` (bases, quadrature, kernels, attentions,
#   baselines, the model, solvers, the model configuration, the published loader), found
#   by listing the folder, so that a module added there cannot be left out;
# - the modules that train, feed and score those models: ``training.loop`` (the loop, the
#   loss, the seeds) and ``training.optim``, ``data`` (corpus, split, batches) and
#   ``measure.evaluate`` with its config (the protocol).
# Everything else (runs, cli, provenance, book, audit, experiment, report, ...) handles
# files, the command line and reporting, and changes no weight and no score. A module that
# defines an nn.Module belongs in nn/ (a test checks it).
FINGERPRINT_PACKAGE = "nn"
FINGERPRINT_MODULES = ("training.loop", "training.optim", "data", "measure.evaluate", "measure.config")
PACKAGE_DIR = Path(__file__).resolve().parent.parent   # catlib/


def fingerprint_files(modules: tuple[str, ...] | None = None) -> list[str]:
    """The files a fingerprint reads, as sorted paths relative to the package directory.

    Default: every file below ``nn/`` (but ``__pycache__`` and hidden files), then the
    FINGERPRINT_MODULES; with ``modules`` (dotted names below catlib), just those modules.
    """
    tops = [name.replace(".", "/") + ".py" for name in (FINGERPRINT_MODULES if modules is None else modules)]
    if modules is not None:
        return tops
    folder = PACKAGE_DIR / FINGERPRINT_PACKAGE
    inside = sorted(p.relative_to(PACKAGE_DIR).as_posix() for p in folder.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts
                    and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    return inside + tops


def code_fingerprint(modules: tuple[str, ...] | None = None) -> str:
    """SHA-256 (16 hex digits) of the files of :func:`fingerprint_files` (paths and contents).

    Runs record it (config.json, eval.json) and it enters the run's config hash, so that a
    change to model, training, data or evaluation code gives a new run instead of reusing
    one trained by other code. Computed once per process for each ``modules``: the code
    that is running is the code that was read at the first call, not whatever is on disk
    later. A listed module without a file counts as "missing" (a module not yet written).
    """
    return _fingerprint(None if modules is None else tuple(modules))


@functools.lru_cache(maxsize=None)
def _fingerprint(modules: tuple[str, ...] | None) -> str:
    h = hashlib.sha256()
    for name in fingerprint_files(modules):
        path = PACKAGE_DIR / name
        source = path.read_bytes() if path.is_file() else b"missing"
        h.update(f"{name}\0{len(source)}\0".encode() + source)
    return h.hexdigest()[:16]
