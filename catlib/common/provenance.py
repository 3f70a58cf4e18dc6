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

# One name, one folder: PACKAGE_DIR is the catlib package (the files the code fingerprint
# reads), REPO_ROOT the folder above it, the top of the checkout that holds the package
# (whose commit a result records).
PACKAGE_DIR = Path(__file__).resolve().parents[1]   # catlib/
REPO_ROOT = PACKAGE_DIR.parent                       # the repository: catlib/'s parent


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
    """``{"commit": sha or None, "dirty": bool or None, "source": "git", "CATLIB_COMMIT" or
    None}``: the commit of the checkout at ``root`` (default :data:`REPO_ROOT`, the
    repository that holds this catlib package) and whether its tracked files differ from it.

    The commit is read only where ``root`` is the top of its own git repository: a copy of
    the project inside another repository (a scratch folder under someone's home checkout)
    would else report that repository's commit. Where no such checkout is found (a copy
    made with ``git archive``, a folder carried to another machine) ``CATLIB_COMMIT``, if
    set, names the commit, marked ``"source": "CATLIB_COMMIT"`` (its dirtiness unknown); it
    never wins over a checkout, so a stale value left in a shell cannot mislabel a result.
    None means unknown. Changes to the paths in ``ignore`` (outputs the caller writes
    itself) do not count.
    """
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # read only: never touch the index

    def git(*args):
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                               timeout=10, env=env)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    top = git("rev-parse", "--show-toplevel")
    commit = (git("rev-parse", "HEAD")
              if top is not None and Path(top).resolve() == Path(root).resolve() else None)
    if commit is None:
        if os.environ.get("CATLIB_COMMIT"):
            return {"commit": os.environ["CATLIB_COMMIT"], "dirty": None, "source": "CATLIB_COMMIT"}
        return {"commit": None, "dirty": None, "source": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *(f":(exclude){p}" for p in ignore))
    return {"commit": commit, "dirty": None if status is None else bool(status), "source": "git"}


def commit_of(provenance: dict) -> str:
    """The commit an artefact's ``provenance`` records, as its first 12 hex digits: its git
    state's (:func:`environment`), else a ``"commit"`` of its own, else "unknown"."""
    return str((provenance.get("git") or {}).get("commit") or provenance.get("commit")
               or "unknown")[:12]


def environment(packages, device=None, root: Path = REPO_ROOT) -> dict:
    """Where a result is computed: Python, platform, usable CPUs, the versions of
    ``packages`` (None where absent) and the git state (:func:`git_state`) of ``root``, by
    default :data:`REPO_ROOT`, the repository that holds catlib; with a ``device``, its
    type and name, torch's thread count and build, and whether only deterministic kernels
    run (:func:`determinism`). Runs write it to ``env.json``, the book runner to its report."""
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
#   loss, the seeds) with its settings and schedule (``training.config``, ``.schedule``) and
#   ``training.optim``, ``data`` (corpus, split, batches) and
#   ``measure.evaluate`` with its config (the protocol).
# Everything else (runs, cli, provenance, book, audit, experiment, report, ...) handles
# files, the command line and reporting, and changes no weight and no score. A module that
# defines an nn.Module belongs in nn/ (a test checks it).
FINGERPRINT_PACKAGE = "nn"
FINGERPRINT_MODULES = ("training.loop", "training.config", "training.schedule", "training.optim",
                       "data", "measure.evaluate", "measure.config")


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
    return fingerprint_of(fingerprint_files(modules),
                          lambda name: (PACKAGE_DIR / name).read_bytes()
                          if (PACKAGE_DIR / name).is_file() else None)


def fingerprint_of(names, read) -> str:
    """The fingerprint of the files ``names`` (paths relative to the package directory)
    whose bytes ``read(name)`` returns (None: the file does not exist): the one rule of
    :func:`code_fingerprint`, also applied to the files of an earlier commit
    (:func:`commits_with_fingerprint`)."""
    h = hashlib.sha256()
    for name in names:
        source = read(name)
        source = b"missing" if source is None else source
        h.update(f"{name}\0{len(source)}\0".encode() + source)
    return h.hexdigest()[:16]


def commits_with_fingerprint(fingerprint: str, until: str | None = None,
                             root: Path = REPO_ROOT, depth: int = 200) -> list[str]:
    """The commits of ``root``'s history (newest first, the last ``depth``, none after the
    date ``until`` where given) whose code has :func:`code_fingerprint` ``fingerprint``:
    the commits an artefact that recorded its fingerprint but no commit can have been
    built from. Empty where ``root`` is no git checkout."""
    def git(*args, text=True):
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=text, timeout=30)
        return r.stdout if r.returncode == 0 else None

    log = git("log", f"-{depth}", "--format=%H", *([f"--until={until}"] if until else []))
    found = []
    for commit in (log or "").split():
        listed = (git("ls-tree", "-r", "--name-only", commit, f"{PACKAGE_DIR.name}/{FINGERPRINT_PACKAGE}/")
                  or "").split()
        inside = sorted(n.split("/", 1)[1] for n in listed
                        if "__pycache__" not in n and not any(
                            part.startswith(".") for part in n.split("/")[2:]))
        names = inside + fingerprint_files(FINGERPRINT_MODULES)
        if fingerprint_of(names, lambda name: git("show", f"{commit}:{PACKAGE_DIR.name}/{name}",
                                                  text=False)) == fingerprint:
            found.append(commit)
    return found
