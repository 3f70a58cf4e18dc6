"""Where a result came from: package versions and the git commit of the code."""
from __future__ import annotations

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
