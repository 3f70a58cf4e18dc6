"""Chapter 12's corpus and its split, from the corpus itself (:mod:`catlib.code_corpus`):
the files and characters of each part, the vocabulary, the characters of the validation
files never seen in training (read as the unknown symbol), and the span the study scores
(stretches of the longest length spread evenly over the validation files,
:func:`~catlib.experiment.scale_records.span_corpus`)."""
from __future__ import annotations

import numpy as np

from ..code_corpus import SYMPY_VERSION
from ..common.formatting import md_table
from ..common.verdicts import listed
from ..data import DataError, load_corpus
from ..experiment.scale_plan import SPAN_TILES
from ..measure.evaluate import text_span, window_starts

PARTS = (("train", "training"), ("dev", "dev"), ("val", "validation"))


def read_corpus():
    """``(corpus, problem)``: the code corpus (``load_corpus(split="files")``) and None, or
    None and the one line that says why it cannot be read (another SymPy installed)."""
    try:
        return load_corpus(split="files"), None
    except DataError as e:
        return None, str(e)


def split_table(corpus) -> str:
    """Markdown: each part's files and characters, and its share of the text's characters."""
    sizes = {k: sum(f.stop - f.start for f in corpus.files[k]) for k, _ in PARTS}
    total = sum(sizes.values())
    cells = [[label, f"{len(corpus.files[k]):,}", f"{sizes[k]:,}", f"{sizes[k] / total:.1%}"]
             for k, label in PARTS]
    return md_table(["part", "files", "characters", "share"], cells, "lrrr")


def unseen(corpus) -> list[str]:
    """The distinct characters of the validation files that no training file holds."""
    val = "".join(corpus.text[f.start:f.stop] for f in corpus.files["val"])
    return sorted(set(val) - set(corpus.vocab.chars[:-1]))


def span(corpus, tiles: int, length: int) -> dict:
    """The span the study scores: ``tiles`` stretches of ``length`` characters spread
    evenly over the validation files (as :func:`~catlib.experiment.scale_records.span_corpus`
    cuts them): ``{"tiles", "length", "characters", "files"}``, ``files`` the validation
    files the scored stretches read from."""
    n_val = len(corpus.val)
    starts = window_starts(n_val, length, tiles + 1, length).tolist()[:tiles]
    sizes = [f.stop - f.start for f in corpus.files["val"]]
    ends = np.cumsum(sizes)                     # where each validation file ends in val
    touched = set()
    for s in starts:
        first, last = np.searchsorted(ends, s, "right"), np.searchsorted(ends, s + length - 1, "right")
        touched.update(range(int(first), int(last) + 1))
    # the span the windows of ``length`` tile in the cut text (its last stretch is kept for
    # the last window's next character): ``tiles`` stretches
    scored = text_span((tiles + 1) * length + 1, length)
    return {"tiles": tiles, "length": length, "characters": scored, "files": len(touched)}


def scored_span(study: dict | None) -> tuple[int, int]:
    """``(tiles, length)`` the study scores: from its artefact's scoring, else the code
    study's at the book's sizes (:data:`~catlib.experiment.scale_plan.SPAN_TILES`, the cpu
    profile's longest length)."""
    scoring = (study or {}).get("scoring") or {}
    if "span_tiles" in scoring:
        return int(scoring["span_tiles"]), int(scoring.get("span_length") or max(scoring["lengths"]))
    from .profiles import experiment

    ev = experiment("cpu").evaluation
    return SPAN_TILES["code"], int(ev.span_length or max(ev.lengths))


def corpus_text(corpus, study: dict | None = None) -> str:
    """The corpus and its split in a few sentences: its source and size, the vocabulary,
    the unseen validation characters and the scored span."""
    chars = len(corpus.text)
    new = unseen(corpus)
    codes = [f"U+{ord(c):04X}" for c in new]
    shown = listed(codes) if len(codes) <= 5 else f"{', '.join(codes[:5])} and {len(codes) - 5} more"
    tiles, length = scored_span(study)
    s = span(corpus, tiles, length)
    said = [f"The text is the Python source of SymPy {SYMPY_VERSION}, tests left out: "
            f"{sum(len(v) for v in corpus.files.values()):,} files, {chars:,} characters, each "
            "file opened by one header line that names its path.",
            f"The vocabulary is the {len(corpus.vocab) - 1} distinct characters of the training "
            f"files and one unknown symbol, {len(corpus.vocab)} in all."]
    if new:
        said.append(f"The validation files hold {corpus.unknown_in_val:,} "
                    f"character{'s' if corpus.unknown_in_val != 1 else ''} that no training file "
                    f"holds ({shown if len(new) == 1 else f'{len(new)} distinct: {shown}'}); each is read "
                    "as the unknown symbol.")
    else:
        said.append("Every character of the validation files occurs in the training files.")
    said.append(f"The study scores {s['tiles']} stretches of {s['length']:,} characters spread "
                f"evenly over the validation files ({s['characters']:,} characters, from "
                f"{s['files']} of the {len(corpus.files['val'])} files), every length reading "
                "the same text.")
    return " ".join(said)
