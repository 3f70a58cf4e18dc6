"""The smoke book's execution checked against the nbval references, without a second run.

``make test`` executes every notebook once, with the smoke profile (``make book-smoke``),
and builds the book from that execution. This module then reads the executed notebooks
(``book/notebooks``) against the references in ``tests/nbval`` as ``pytest --nbval-lax``
reads a re-execution of them:

- the cells tagged ``nbval-check-output`` must give the same outputs: the text of each
  stream (stdout, stderr) and every ``data`` entry but images, compared as text; never
  metadata, execution counts or tracebacks;
- every other cell only has to run, which the execution itself guarantees (papermill
  stops at the first error).

A reference whose code (or nbval tags) is not the notebook's is stale: a check against it
would test old code, so it fails, naming the command that renews the references
(``make nbval-refs``).
Only the figure folder may differ (the references save no figures). ``make nbval`` still
re-executes the references under nbval itself, and ``make test-portable`` does so under
the portable kernel dispatch.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CHECK = "nbval-check-output"
# nbval's cell tags (nbval reads ``# NBVAL_...`` comments too; the notebooks use tags only).
NBVAL_TAGS = {CHECK, "nbval-ignore-output", "nbval-skip", "nbval-raises-exception",
              "raises-exception"}
# Output keys that nbval leaves out of its comparison (images too, without --nbdime).
SKIPPED = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
           "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}
PARAMETER_TAGS = {"parameters", "injected-parameters"}
_FIGURE_DIR = re.compile(r"^figure_dir = .*$", re.MULTILINE)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def checked_outputs(outputs: list[dict]) -> dict[str, list[str]]:
    """A cell's outputs as nbval compares them: key -> values in order, the text of each
    stream under its name (the streams of one name joined: how a kernel splits its
    messages into outputs is not the notebook's doing), every other key but
    :data:`SKIPPED`, ``data`` flattened into its MIME types."""
    out: dict[str, list[str]] = {}
    streams: dict[str, str] = {}
    for output in outputs:
        if output.get("output_type") == "stream":
            streams[output["name"]] = streams.get(output["name"], "") + _text(output["text"])
            continue
        for key, value in output.items():
            if key == "data":
                for mime, content in value.items():
                    if mime not in SKIPPED:
                        out.setdefault(mime, []).append(_text(content))
            elif key not in SKIPPED:
                out.setdefault(key, []).append(_text(value))
    for name, text in streams.items():
        out.setdefault(name, []).append(text)
    return out


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def checked(cell: dict) -> bool:
    """Whether nbval compares this cell's outputs (``--nbval-lax``): a code cell tagged
    :data:`CHECK`."""
    return cell["cell_type"] == "code" and CHECK in _tags(cell)


def _source(cell: dict) -> str:
    """The cell's code and its nbval tags: what makes a reference stale when it changes."""
    source = _text(cell.get("source", ""))
    if PARAMETER_TAGS & _tags(cell):
        source = _FIGURE_DIR.sub("figure_dir = ...", source)
    return source + "".join(f"\n[tag {t}]" for t in sorted(NBVAL_TAGS & _tags(cell)))


def compare(executed: dict, reference: dict) -> list[str]:
    """The differences between an executed notebook and its reference (nbformat dicts),
    one line each; empty when the executed one passes."""
    cells, refs = executed["cells"], reference["cells"]
    code, ref_code = [_source(c) for c in cells], [_source(c) for c in refs]
    if code != ref_code:
        first = next((i for i, (a, b) in enumerate(zip(code, ref_code)) if a != b),
                     min(len(cells), len(refs)))
        return [f"the reference is stale: its code differs from the notebook's from cell {first} "
                f"on ({len(refs)} cells against {len(cells)}); renew the references with "
                f"`make nbval-refs`"]
    problems = []
    for i, (cell, ref) in enumerate(zip(cells, refs)):
        if not checked(ref):
            continue
        got, want = checked_outputs(cell.get("outputs", [])), checked_outputs(ref.get("outputs", []))
        for key in sorted(set(got) | set(want)):
            if got.get(key) != want.get(key):
                problems.append(f"cell {i}, {key}: expected {want.get(key)!r}, got {got.get(key)!r}")
    return problems


def check_references(executed_dir: Path, reference_dir: Path) -> dict[str, list[str]]:
    """``{notebook: differences}`` for every reference in ``reference_dir`` against the
    notebook of that name executed into ``executed_dir`` (one missing: a difference)."""
    results = {}
    for ref_path in sorted(reference_dir.glob("*.ipynb")):
        path = executed_dir / ref_path.name
        if not path.is_file():
            results[ref_path.stem] = [f"not executed: {path} is missing; run `make book-smoke`"]
            continue
        executed = json.loads(path.read_text(encoding="utf-8"))
        results[ref_path.stem] = compare(executed, json.loads(ref_path.read_text(encoding="utf-8")))
    return results


def main(argv=None) -> int:
    """``python -m catlib.book.references [ROOT]``: check ``ROOT/book/notebooks`` (executed
    with the smoke profile) against ``ROOT/tests/nbval``; one line per notebook, exit 1 on
    any difference."""
    from .locate import find_root

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else find_root()
    results = check_references(root / "book" / "notebooks", root / "tests" / "nbval")
    if not results:
        print(f"no nbval references in {root / 'tests' / 'nbval'}", file=sys.stderr)
        return 1
    for name, problems in results.items():
        print(f"{name}: {'ok' if not problems else 'FAILED'}")
        for line in problems:
            print(f"    {line}")
    failed = [name for name, problems in results.items() if problems]
    print(f"{len(results) - len(failed)} of {len(results)} notebooks match their nbval references")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
