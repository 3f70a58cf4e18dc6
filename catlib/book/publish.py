"""The build's results: the README's headline table and the extrapolation artefacts in
``results/``, each labelled with the profile, device, commit and date that wrote it."""
from __future__ import annotations

import json
from pathlib import Path

from ..common.provenance import commit_of
from .run_report import Record, _now

README_MARKERS = ("<!-- headline:start -->", "<!-- headline:end -->")


def publish_headline(root: Path, profile: str, records: list[Record]) -> Path | None:
    """Label the headline table notebook 06 wrote and copy it to ``results/`` and the README.

    The label names the profile, device, commit and date of the build, so the README's
    numbers are an artefact of this project, never typed by hand.
    """
    table = root / "book" / "_generated" / "headline_table.md"
    if not table.exists():
        return None
    from ..common.provenance import git_state

    git = git_state(root, ignore=("README.md", "results"))   # our own outputs do not count
    commit = (git["commit"] or "unknown")[:12] + (" (uncommitted changes)" if git["dirty"] else "")
    device = records[0].device if records else "?"
    label = (f"_Written by `python -m catlib.book --profile {profile}` on {device}, "
             f"commit {commit}, {_now()}._")
    text = f"{label}\n\n{table.read_text().strip()}\n"
    compute = root / "book" / "_generated" / "equal_compute.md"   # chapter 10, when it ran
    if compute.exists():
        text = f"{label}\n\n{compute.read_text().strip()}\n\nAt equal parameters and training steps (chapter 6):\n\n{table.read_text().strip()}\n"
    scale = root / "book" / "_generated" / "scale_answer.md"       # chapter 11, when it ran
    if scale.exists():   # read from an artefact of its own commit: labelled with it
        from .scale_study import load_studies

        answer = scale.read_text().strip() + _scale_label(load_studies(root))
        text = text.replace(f"{label}\n\n", f"{label}\n\n{answer}\n\n", 1)
    code = root / "book" / "_generated" / "code_answer.md"         # chapter 12, when it ran
    if code.exists():    # its one line, after chapter 11's answer (or the label)
        at = text.find("\n\nAt equal training compute")
        at = at if at >= 0 else text.find("\n\n")
        text = f"{text[:at]}\n\n{code.read_text().strip()}{text[at:]}"
    out = root / "results" / f"headline_{profile}.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    publish_extrapolation(root, profile, {"profile": profile, "device": device,
                                          "commit": commit, "date": _now()})
    if profile == "cpu":
        _replace_readme_headline(root / "README.md", text)
    print(f"[book] headline table written to {out}")
    return out


def equal_compute_summary(matched_table: str, cat_vs_steps: str, cat_wins: bool,
                          designed_vs_steps: str, designed_met: bool, designed_min: str,
                          length_change: str = "") -> str:
    """The README's lead (``book/_generated/equal_compute.md``, written by chapter 10): its
    compute-matched table and verdicts. ``cat_vs_steps`` and ``designed_vs_steps`` are
    sentences of :func:`catlib.common.verdicts.verdict` (``experiment.frontier.who_wins``),
    which name the rows; the bold lead-ins describe the comparison without a row's label, so
    that no bullet names a row twice. The other verdicts are given as booleans;
    ``length_change``: how CE changes with length on the same text
    (``experiment.frontier.length_change``), a bullet of its own."""
    first = lambda sentence: sentence[:1].upper() + sentence[1:]          # noqa: E731
    return (f"At equal training compute (chapter 10; each row's training FLOPs relative to "
            f"the ALiBi baseline in the second column):\n\n{matched_table}\n\n"
            f"- **The RK4 ×1 CAT against ALiBi given its compute as steps.** "
            f"{first(cat_vs_steps)} Against the better of the two compute-matched ALiBi "
            f"baselines, the CAT is {'ahead' if cat_wins else 'not ahead'} at every length.\n"
            f"- **The one-step Euler CAT against ALiBi given the same compute.** "
            f"{first(designed_vs_steps)} Its target, a lead of at least 0.05 nats over every "
            f"baseline given the same compute (ALiBi as steps and as layers, RoPE as steps) at "
            f"every length in every seed, is "
            f"{'met' if designed_met else 'missed'} (smallest lead {designed_min}).\n"
            + (f"- **From the shortest length to the longest.** {length_change}\n" if length_change else ""))


def republish_scale_answer(root: Path, profile: str = "cpu") -> None:
    """Replace the scale study's sentence in ``results/headline_<profile>.md`` and the
    README's block with the answer of the artefact now in ``results/`` (after ``make
    scale`` and before the next full build), labelled with that artefact's commit: the
    tables around it keep the label of the build that wrote them. Where the file has no
    such sentence (a build before chapter 11 ran), it goes where a build puts it, after the
    build's label, as its own paragraph (:func:`_place_scale_answer`)."""
    from .scale_study import answer_file_text, load_studies

    studies = load_studies(root)
    main = next(iter(studies), None)
    if main is None:
        return
    text = answer_file_text(studies, main).strip() + _scale_label(studies)
    out = root / "results" / f"headline_{profile}.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(_place_scale_answer(out.read_text() if out.exists() else "", text))
    if profile == "cpu":
        _replace_readme_headline(root / "README.md", out.read_text())


CODE_LINE = "On source code (chapter 12): "


def republish_code_line(root: Path, profile: str = "cpu") -> None:
    """Replace chapter 12's line (from :data:`CODE_LINE` to the end of its paragraph) in
    ``results/headline_<profile>.md`` and the README's block with the finding of the code
    study's artefact now in ``results/`` (after ``make scale CORPUS=code`` and before the
    next full build), labelled with that artefact's commit; nothing where the block has no
    such line or there is no artefact."""
    from .code_artefact import load_code_study
    from .code_goal import goal
    from .code_study import code_short

    found = load_code_study(root)
    out = root / "results" / f"headline_{profile}.md"
    if found["study"] is None or not out.exists():
        return
    block = out.read_text()
    at = block.find(CODE_LINE)
    if at < 0:
        return
    end = block.find("\n\n", at)
    end = len(block) if end < 0 else end
    label = f" _(From `{found['path'].name}`, commit {commit_of(found['study'].get('provenance', {}))}.)_"
    out.write_text(block[:at] + CODE_LINE + code_short(found, goal(found)) + label + block[end:])
    if profile == "cpu":
        _replace_readme_headline(root / "README.md", out.read_text())


def _place_scale_answer(block: str, answer: str) -> str:
    """``block`` (a ``headline_<profile>.md``) with its scale answer replaced by ``answer``:
    from the line that opens "Over budgets (" through the line that carries the study's
    label (`` _(From `results/scale_…`` , the answer's last line; where no line carries it,
    the opening line alone, as an answer of one paragraph was written). Where the block has
    no answer (a build before chapter 11 ran), ``answer`` goes after the first paragraph
    (the build's label), or alone in an empty block."""
    lines = block.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("Over budgets (")), None)
    if at is not None:
        end = next((i for i in range(at, len(lines)) if "_(From `results/scale_" in lines[i]), at)
        lines[at:end + 1] = [answer]
        return "\n".join(lines)
    paragraphs = block.split("\n\n", 1)
    if not block.strip():
        return answer + "\n"
    return "\n\n".join([paragraphs[0], answer, *paragraphs[1:]])


def _scale_label(studies: dict) -> str:
    """`` _(From `results/scale_<device>.json`, commit <c>.)_``: the artefact chapter 11 reads
    (the first of :func:`~catlib.book.scale_study.load_studies`) and the commit it recorded;
    the scale study is trained apart from the build, so its sentence carries its own label."""
    main = next(iter(studies), None)
    if main is None:
        return ""
    return f" _(From `results/scale_{main}.json`, commit {commit_of(studies[main].get('provenance', {}))}.)_"


def _replace_readme_headline(readme: Path, text: str) -> None:
    """Put ``text`` between the :data:`README_MARKERS` of ``readme``; nothing where they are absent."""
    start, end = README_MARKERS
    body = readme.read_text() if readme.exists() else ""
    if start in body and end in body:
        head, rest = body.split(start, 1)
        readme.write_text(f"{head}{start}\n{text}{end}{rest.split(end, 1)[1]}")


def publish_extrapolation(root: Path, profile: str, label: dict) -> list[Path]:
    """Merge the notebooks' shares of the extrapolation artefacts into ``results/``.

    ``book/_generated/extrapolation/<notebook>.json`` and ``.csv`` (written by
    :func:`catlib.experiment.grid.write_part`) become ``results/extrapolation_<profile>.json``
    (``{model: {"train_length", "leak", "ce"}}``) and ``results/position_ce_<profile>.csv``
    (``model,position,ce``), the refinement tables of ``book/_generated/depth/`` become
    ``results/depth_<profile>.json`` and the copy tests of ``book/_generated/context_use/``
    ``results/context_use_<profile>.json``; ``results/provenance_<profile>.json`` labels them.
    """
    from ..experiment.grid import TABLE_PARTS
    from ..experiment.artefacts import write_extrapolation_json, write_position_csv

    rows, curves = _read_parts(root / "book" / "_generated" / "extrapolation")
    results = root / "results"
    results.mkdir(exist_ok=True)
    written = []
    if rows:
        written.append(results / f"extrapolation_{profile}.json")
        write_extrapolation_json(written[-1], rows)
    if curves:
        written.append(results / f"position_ce_{profile}.csv")
        write_position_csv(written[-1], curves)
    for kind in TABLE_PARTS:
        table = {}
        for part in sorted((root / "book" / "_generated" / kind).glob("*.json")):
            table.update(json.loads(part.read_text()))
        if table:
            written.append(results / f"{kind}_{profile}.json")
            written[-1].write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    if written:
        meta = {**label, "written_by": f"python -m catlib.book --profile {profile}",
                "artefacts": [p.name for p in written]}
        (results / f"provenance_{profile}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"[book] extrapolation artefacts written: {', '.join(p.name for p in written)}")
    return written


def _read_parts(parts: Path) -> tuple[dict, dict]:
    """The rows (``*.json``) and per-position curves (``*.csv``) of every notebook's share."""
    from ..experiment.artefacts import read_extrapolation_json, read_position_csv

    rows, curves = {}, {}
    for part in sorted(parts.glob("*.json")) if parts.is_dir() else []:
        rows.update(read_extrapolation_json(part))
    for part in sorted(parts.glob("*.csv")) if parts.is_dir() else []:
        curves.update(read_position_csv(part))
    return rows, curves
