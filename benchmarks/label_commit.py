"""Label an artefact that recorded its code fingerprint but no commit (written while
``git_state`` read no commit by default, issue 46) with the commit it was built from::

    python -m benchmarks.label_commit results/scale_cpu.json

The commit is the newest one on this checkout's history, not after the artefact's date,
whose code fingerprint (:func:`catlib.common.provenance.code_fingerprint`) is the one the
artefact recorded: the model, training, data and scoring code that made it is that commit's,
file for file (the fingerprint's files). The label says how it was found and how many
commits share that code. Written atomically; an
artefact that already names its commit is left as it is.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from catlib.common.provenance import commits_with_fingerprint
from catlib.runs import atomic_write_text


def label(path: Path) -> dict:
    """The artefact at ``path`` with ``provenance["git"]`` recovered (see the module)."""
    study = json.loads(path.read_text())
    prov = study.get("provenance", {})
    if (prov.get("git") or {}).get("commit") or prov.get("commit"):
        return study
    found = commits_with_fingerprint(prov["code"], until=prov["date"])
    if not found:
        raise SystemExit(f"{path}: no commit up to {prov['date']} has code fingerprint {prov['code']}")
    prov["git"] = {"commit": found[0], "dirty": None,
                   "source": f"recovered by benchmarks/label_commit.py: the newest commit before "
                             f"{prov['date']} with code fingerprint {prov['code']} ({len(found)} "
                             f"commits share it, from {found[-1][:12]})"}
    study["provenance"] = prov
    return study


def main(argv=None) -> int:
    for name in argv or sys.argv[1:]:
        path = Path(name)
        atomic_write_text(path, json.dumps(label(path), indent=1, sort_keys=True) + "\n")
        print(f"{path}: commit {label(path)['provenance']['git']['commit'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
