"""The arguments the book's training commands share, checked before anything trains.

``python -m catlib.book.sweep`` (``make sweep``) and ``python -m catlib.book.scale``
(``make scale``) both take a profile, a device, the number of runs trained at once, a folder
for their artefact (``--out``) and one for the run directories (``--root``). A bad one
raises :class:`ArgsError`, whose message is one line naming the problem and the fix; the
command prints it and exits 2, having trained and written nothing. The artefact's file
name (:func:`artefact_name`), where the work in progress is written (:func:`partial_path`)
and where the sweep's runs are (:func:`sweep_runs`) are the other things both commands agree
on; each names the corpus where it is not Tiny Shakespeare (``code``: issue 62), so that
the two corpora's artefacts and runs lie side by side and Tiny Shakespeare's keep their
names.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..common.devices import check_jobs, resolve_device


class ArgsError(ValueError):
    """A bad argument of a book command (``make sweep``, ``make scale``): one line that
    names the fix."""


def artefact_name(stem: str, profile: str, kind: str, corpus: str = "tiny") -> str:
    """``<stem>_<device>.json`` at the cpu profile (the book's), else
    ``<stem>_<profile>_<device>.json``; on a corpus other than "tiny", its name follows the
    stem: ``lr_sweep_code_cpu.json``, ``scale_code_smoke_cpu.json``."""
    stem = stem if corpus == "tiny" else f"{stem}_{corpus}"
    return f"{stem}_{kind}.json" if profile == "cpu" else f"{stem}_{profile}_{kind}.json"


def check_profile(args) -> None:
    """:class:`ArgsError` unless ``args.profile`` names a profile."""
    from . import profiles

    if args.profile not in profiles.PROFILES:
        raise ArgsError(f"--profile {args.profile!r} is not a profile; use one of "
                        f"{', '.join(profiles.PROFILES)}")


def check_places(args, stem: str):
    """The device of ``args`` (``--jobs``, ``--device``) and the folders ``--out`` (to hold
    ``<stem>_<device>.json``) and ``--root`` checked; :class:`ArgsError` if bad."""
    try:
        check_jobs(args.jobs)
        device = resolve_device(args.device)
    except ValueError as e:   # a DeviceError is one
        raise ArgsError(str(e)) from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ArgsError(f"--out {out} is a file; give the folder that is to hold "
                        f"{stem}_<device>.json")
    check_writable("--out", out)
    check_writable("--root", Path(args.root))
    return device


def check_writable(flag: str, folder: Path) -> None:
    """Raise :class:`ArgsError` unless ``folder`` can be made (if missing) and written in:
    a temporary folder is made where the first missing part of its path would be, then
    removed, so that nothing is left behind."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ArgsError(f"{flag} {folder}: {existing} is a file; give a folder you can "
                        "write to")
    try:
        Path(tempfile.mkdtemp(prefix=".args-check-", dir=existing)).rmdir()
    except OSError as e:
        raise ArgsError(f"{flag} {folder}: cannot write in {existing} ({e.strerror or e}); "
                        "give a folder you can write to") from None


def partial_path(path: Path) -> Path:
    """Where a sweep or a study in progress is written beside its complete artefact ``path``:
    ``lr_sweep_cpu.json`` -> ``lr_sweep_cpu.partial.json``."""
    return path.with_suffix(".partial.json")


def sweep_runs(root, profile: str, kind: str, corpus: str = "tiny") -> Path:
    """The folder of the learning-rate sweep's run directories under ``root`` (``--root``),
    where ``python -m catlib.book.sweep`` keeps them: the study copies a run from there rather
    than train it again (:func:`catlib.experiment.scale.borrow_runs`).
    ``lr-sweep-<profile>-<device>``; on a corpus other than "tiny"
    ``lr-sweep-<corpus>-<profile>-<device>`` (``lr-sweep-code-cpu-cpu``)."""
    name = "lr-sweep" if corpus == "tiny" else f"lr-sweep-{corpus}"
    return Path(root) / f"{name}-{profile}-{kind}"
