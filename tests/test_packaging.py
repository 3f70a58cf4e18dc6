"""Packaging that tells the truth: requires-python matches what the pinned set installs
on, the declared ranges admit the pins, one constraints file is the pinned set for the
Makefile and environment.yml, the licence and citation files are there, and the
`catlib` script resolves."""
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

yaml = pytest.importorskip("yaml")   # PyYAML comes with the book extra (jupyter-book)

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def pins() -> dict[str, str]:
    """constraints.txt as {canonical name: exact version}; anything but ``name==version``
    is refused, so that the file stays an exact set."""
    found = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line)
        assert m, f"constraints.txt: {line!r} is not name==version"
        found[canonicalize_name(m[1])] = m[2]
    return found


def declared() -> list[Requirement]:
    extras = [r for group in PROJECT.get("optional-dependencies", {}).values() for r in group]
    return [Requirement(r) for r in PROJECT["dependencies"] + extras]


def lowest_python() -> Version:
    """The lowest Python the project admits: its requires-python must be ``>=X.Y``."""
    m = re.fullmatch(r">=\s*(\d+\.\d+)", PROJECT["requires-python"].strip())
    assert m, f"requires-python {PROJECT['requires-python']!r} is not of the form '>=X.Y'"
    return Version(m[1])


def test_requires_python_is_what_the_pinned_set_needs():
    """Reads each pinned release's own Requires-Python (its installed METADATA): the
    project's lowest Python must satisfy every one (the old ">=3.10" did not: numpy 2.4
    needs 3.11), and some pin must refuse the minor version below it (not stricter than
    the pins)."""
    low = lowest_python()
    below = Version(f"{low.major}.{low.minor - 1}")
    refusing, not_pinned_here = [], []
    for name, pin in pins().items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            not_pinned_here.append(f"{name} (not installed)")
            continue
        if not SpecifierSet(f"=={pin}").contains(dist.version):     # 2.13.0+cpu is 2.13.0
            not_pinned_here.append(f"{name} {dist.version} (pinned {pin})")
            continue
        needs = SpecifierSet(dist.metadata.get("Requires-Python") or "")
        assert needs.contains(f"{low}.0"), (
            f"{name}=={pin} needs Python {needs}, but requires-python admits {low}")
        if not needs.contains(f"{below}.99"):
            refusing.append(name)
    if not_pinned_here:
        pytest.skip("this environment is not the pinned set (make venv installs it): "
                    + ", ".join(not_pinned_here))
    assert refusing, f"no pinned release needs Python {low}; requires-python is stricter than the pins"


def test_every_declared_range_admits_its_pin_and_every_dependency_is_pinned():
    pinned = pins()
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is declared in pyproject.toml but not in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"pyproject.toml's {req} refuses the pinned {req.name}=={pinned[name]}")
    library = {canonicalize_name(Requirement(r).name): Requirement(r) for r in PROJECT["dependencies"]}
    exact = [str(r) for r in library.values() if any(s.operator == "==" for s in r.specifier)]
    assert not exact, f"the library's dependencies must be ranges, not pins: {exact}"
    assert pinned["torch"] == "2.13.0"


def test_makefile_and_environment_install_with_the_constraints(tmp_path):
    """`make -n` of the venv recipe (in an empty folder, so that nothing is up to date):
    every pip install of packages takes constraints.txt, torch in the same call as
    torchdiffeq. environment.yml installs the project and its extras with the same file
    instead of a copied list."""
    if not shutil.which("make"):
        pytest.skip("GNU make not found")
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy2(REPO / name, tmp_path / name)
    # Without a parent make's flags: under `make test VENV=...` they would name a venv
    # that is up to date (and -j's jobserver), not this empty folder's.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-n", "--no-print-directory", "venv"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    installs = [line for line in r.stdout.splitlines()
                if " pip install" in line and "--upgrade pip" not in line]
    assert installs and all("-c constraints.txt" in line for line in installs), r.stdout
    assert any(re.search(r"\btorch\b", line) and "torchdiffeq" in line for line in installs)

    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-c constraints.txt" in pip and "-e .[test,book]" in pip
    copied = [p for p in pip if not p.startswith("-")]
    assert not copied, f"environment.yml lists packages of its own: {copied}"


def test_licence_and_citation():
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "2026 The CAT companion authors" in licence
    assert PROJECT["license"] == "MIT" and "LICENSE" in PROJECT.get("license-files", [])
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    for field in ("cff-version", "message", "title", "authors"):     # required by CFF 1.2.0
        assert cff.get(field), f"CITATION.cff lacks {field}"
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert all(a.get("name") or a.get("family-names") for a in cff["authors"])
    prototype = [r for r in cff.get("references", [])
                 if r.get("type") == "software" and "CAT.py" in r.get("title", "")]
    assert len(prototype) == 1 and prototype[0]["authors"], "the prototype is not credited"


def test_script_entry_point_resolves():
    assert PROJECT["scripts"]["catlib"] == "catlib.cli:main"
    import catlib.cli
    installed = metadata.entry_points(group="console_scripts", name="catlib")
    assert installed, "the installed catlib has no `catlib` script; reinstall: pip install -e ."
    assert next(iter(installed)).load() is catlib.cli.main
    script = Path(sys.executable).parent / "catlib"
    if script.exists():
        r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "train" in r.stdout, r.stderr
