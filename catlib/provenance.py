"""Where a result came from: package versions, the git commit and a fingerprint of the code."""
from __future__ import annotations

import functools
import hashlib
import os
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

    Changes to the paths in ``ignore`` (outputs the caller writes itself) do not count.
    """
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # read only: never touch the index

    def git(*args):
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                               timeout=10, env=env)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *(f":(exclude){p}" for p in ignore))
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


# The catlib modules whose source determines a run's trained weights or its evaluation:
# the models and everything they are built from, the training loop, the data pipeline and
# the evaluation protocol. A module that defines a model must be listed here (a test checks
# that every nn.Module of catlib lives in a listed module); add new ones to the tuple.
# Not listed: runs, cli, provenance, compat, book (files, command line, reporting).
FINGERPRINT_MODULES = (
    "config", "bases", "quadrature", "kernel", "attention", "solvers", "model", "baselines",
    "train", "data", "evaluate", "extrapolating", "qk_attention", "decay_prior",
)
PACKAGE_DIR = Path(__file__).resolve().parent


def code_fingerprint(modules: tuple[str, ...] | None = None) -> str:
    """SHA-256 (16 hex digits) of the source of ``modules`` (default FINGERPRINT_MODULES).

    Runs record it (config.json, eval.json) and it enters the run's config hash, so that a
    change to model, training, data or evaluation code gives a new run instead of reusing
    one trained by other code. Computed once per process for each tuple: the code that is
    running is the code that was read at the first call, not whatever is on disk later.
    A listed module without a file counts as "missing" (a module not yet written).
    """
    return _fingerprint(tuple(FINGERPRINT_MODULES if modules is None else modules))


@functools.lru_cache(maxsize=None)
def _fingerprint(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in modules:
        path = PACKAGE_DIR / f"{name}.py"
        source = path.read_bytes() if path.is_file() else b"missing"
        h.update(f"{name}\0{len(source)}\0".encode() + source)
    return h.hexdigest()[:16]
