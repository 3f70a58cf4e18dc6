"""The second corpus, ``code``: the Python source of one pinned SymPy, split by file.

SymPy is a dependency of the pinned torch, so every install of the book already holds it:
a pure-Python wheel, BSD-licensed, the same files on every platform. Its source, tests
left out, is about 16.5 million characters, 15 times Tiny Shakespeare, enough text that a
long budget does not run out of it.

**The text.** The ``.py`` files of the installed ``sympy`` package, in the order of their
POSIX paths relative to site-packages (``sympy/abc.py``, ``sympy/algebras/__init__.py``,
...), read as UTF-8 bytes (no newline translation). Left out as tests: every file under a
directory named ``tests`` (the unit tests), the ``sympy/testing`` package (the test
runner and its helpers: ``runtests.py``, ``pytest.py``, ``randtest.py``, ...) and
``conftest.py`` (pytest's configuration). The ``benchmarks`` directories stay: they are
code that exercises the library, not tests of it. Each file opens with one header line,
``# file: sympy/core/basic.py``: a comment, so the text stays Python, and a path, so the
model sees where one file ends and the next begins and which module it reads (imports
name modules by these paths). A file that does not end in a newline gets one, so each
header starts a line. The text is verified by its SHA-256 (:data:`CODE_SHA256`) and the
installed SymPy by its version (:data:`SYMPY_VERSION`, pinned in ``constraints.txt``).

**The split, by file.** Files are walked in the order of the SHA-256 of their paths (a
fixed shuffle that no file's place in the tree decides). The first files, up to the one
that takes them past :data:`VAL_SHARE` of all characters, are the validation files; the
next files of at most :data:`DEV_FILE_MAX` characters, up to the one that takes them past
:data:`DEV_CHARS`, are the dev files (for choosing settings such as a learning rate: no
run trains on them and no reported CE reads them); the rest are the training files. Each
part is its files' text (header included) in the text's order, so no window of one part
reaches into another.

**The vocabulary** is the sorted characters of the training files, then one unknown
symbol (:data:`UNKNOWN`, id ``len(vocab) - 1``) that every character unseen in training
maps to; :attr:`CodeCorpus.unknown_in_val` counts them in validation.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

SYMPY_VERSION = "1.14.0"        # pinned in constraints.txt
CODE_SHA256 = "28ee423b0faca29c89eca326de2d970817043bdbf6feaa723ecea8b25353023d"
HEADER = "# file: {path}\n"
EXCLUDED_DIRS = ("tests",)      # any directory of this name, at any depth
EXCLUDED_PACKAGES = ("sympy/testing",)
EXCLUDED_FILES = ("conftest.py",)
VAL_SHARE = 0.10
DEV_CHARS = 100_000
DEV_FILE_MAX = 50_000           # a dev file at most this long, so the slice stays near DEV_CHARS
UNKNOWN = "\ufffd"              # the replacement character, shown for an unseen character
SPLIT = "files"                 # the name of this corpus's split (Corpus.split)
FIX = "pip install -c constraints.txt sympy"


class CodeCorpusError(RuntimeError):
    """A problem with the code corpus; the message is one line naming the problem and the fix."""


class CodeFile(NamedTuple):
    """One source file in the text: ``text[start:stop]`` is its header line and its source."""
    path: str
    start: int
    stop: int


def sympy_root() -> Path:
    """The installed ``sympy`` package directory, checked against :data:`SYMPY_VERSION`
    (found without importing SymPy, which takes seconds)."""
    try:
        installed = importlib.metadata.version("sympy")
    except importlib.metadata.PackageNotFoundError:
        raise CodeCorpusError(f"SymPy is not installed; the code corpus is SymPy "
                              f"{SYMPY_VERSION}'s source: {FIX}") from None
    if installed != SYMPY_VERSION:
        raise CodeCorpusError(f"SymPy {installed} is installed, the code corpus is pinned to "
                              f"SymPy {SYMPY_VERSION}: {FIX}")
    spec = importlib.util.find_spec("sympy")
    return Path(spec.origin).parent


def source_paths(root: Path) -> list[str]:
    """The corpus's files under the package directory ``root``, as sorted POSIX paths
    relative to its parent (``sympy/core/basic.py``), tests left out."""
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root.parent).as_posix()
        dirs = rel.split("/")[:-1]
        if (any(d in EXCLUDED_DIRS for d in dirs) or p.name in EXCLUDED_FILES
                or any(rel.startswith(pkg + "/") for pkg in EXCLUDED_PACKAGES)):
            continue
        out.append(rel)
    return sorted(out)


def concatenate(root: Path) -> tuple[str, tuple[CodeFile, ...]]:
    """The files of ``root`` (:func:`source_paths`), each after its header line, and where
    each lies in the text; not verified (:func:`code_text` is)."""
    chunks, files, at = [], [], 0
    for rel in source_paths(root):
        source = (root.parent / rel).read_bytes().decode("utf-8")
        chunk = HEADER.format(path=rel) + source + ("" if source.endswith("\n") else "\n")
        chunks.append(chunk)
        files.append(CodeFile(rel, at, at + len(chunk)))
        at += len(chunk)
    return "".join(chunks), tuple(files)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def code_text(root: str | Path | None = None) -> tuple[str, tuple[CodeFile, ...]]:
    """The corpus text and its files (``text[f.start:f.stop]`` is file ``f``), verified by
    :data:`CODE_SHA256`. ``root``: a ``sympy`` package directory (default: the installed
    one, checked against :data:`SYMPY_VERSION`). Read once per process."""
    root = sympy_root() if root is None else Path(root)
    text, files = _cached_text(str(root))
    digest = text_sha256(text)
    if digest != CODE_SHA256:
        raise CodeCorpusError(f"the code corpus read from {root} has SHA-256 {digest[:16]}..., "
                              f"expected {CODE_SHA256[:16]}... (a different or modified "
                              f"SymPy); reinstall it: {FIX} --force-reinstall")
    return text, files


@functools.lru_cache(maxsize=2)
def _cached_text(root: str) -> tuple[str, tuple[CodeFile, ...]]:
    return concatenate(Path(root))


def _rank(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8")).hexdigest()


def split_files(files: tuple[CodeFile, ...], val_share: float = VAL_SHARE,
                dev_chars: int = DEV_CHARS, dev_file_max: int = DEV_FILE_MAX
                ) -> dict[str, tuple[CodeFile, ...]]:
    """``{"train", "dev", "val"}``: each part's files in the text's order (the rule: the
    module's docstring). Every file is in exactly one part."""
    total = sum(f.stop - f.start for f in files)
    val, dev, val_n, dev_n = set(), set(), 0, 0
    for f in sorted(files, key=lambda f: _rank(f.path)):
        n = f.stop - f.start
        if val_n < val_share * total:
            val.add(f.path)
            val_n += n
        elif dev_n < dev_chars and n <= dev_file_max:
            dev.add(f.path)
            dev_n += n
    return {"train": tuple(f for f in files if f.path not in val | dev),
            "dev": tuple(f for f in files if f.path in dev),
            "val": tuple(f for f in files if f.path in val)}


class CodeVocab:
    """The training files' sorted characters, then :data:`UNKNOWN` for every other one.

    Has :class:`catlib.data.Vocab`'s interface (``chars``, ``stoi``, ``len``, ``encode``,
    ``decode``); ``encode`` maps an unseen character to :attr:`unknown` instead of raising.
    """

    def __init__(self, train_text: str):
        self.chars = [*sorted(set(train_text)), UNKNOWN]
        self.unknown = len(self.chars) - 1
        self.stoi = {c: i for i, c in enumerate(self.chars[:-1])}

    def __len__(self) -> int:
        return len(self.chars)

    def ids(self, text: str) -> np.ndarray:
        """int64 ``[N]`` ids of ``text`` through a table indexed by code point."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        points = [ord(c) for c in self.stoi]
        table = np.full(max(points, default=0) + 2, self.unknown, dtype=np.int64)
        table[points] = np.arange(len(points), dtype=np.int64)
        return table[np.minimum(codes, len(table) - 1)]   # the last slot is unknown

    def encode(self, text: str) -> torch.Tensor:
        """str of length N -> int64 tensor [N]; unseen characters -> :attr:`unknown`."""
        return torch.from_numpy(self.ids(text))

    def decode(self, ids) -> str:
        """int tensor/sequence [N] -> str of length N."""
        return "".join(self.chars[int(i)] for i in ids)


@dataclass
class CodeCorpus:
    """The code corpus and its split by file, with :class:`catlib.data.Corpus`'s fields:
    ``train``, ``val`` and ``dev`` are int64 [N_train], [N_val], [N_dev], each the ids of
    its files in the text's order; ``ids`` int64 [N], the whole text's. ``path``: the
    ``sympy`` package read; ``files``: each part's files; ``unknown_in_val``: validation
    characters unseen in training (mapped to the unknown symbol)."""
    text: str
    vocab: CodeVocab
    ids: torch.Tensor
    train: torch.Tensor
    val: torch.Tensor
    path: Path
    sha256: str
    split: str
    dev: torch.Tensor
    files: dict[str, tuple[CodeFile, ...]]
    unknown_in_val: int


def load_code_corpus(root: str | Path | None = None) -> CodeCorpus:
    """Read, verify, split and encode the code corpus (``root``: :func:`code_text`)."""
    root = sympy_root() if root is None else Path(root)
    text, files = code_text(root)
    vocab, ids, parts = _encoded(str(root))
    tensors = {name: torch.from_numpy(np.concatenate(
        [ids[f.start:f.stop] for f in part]) if part else np.zeros(0, np.int64))
        for name, part in parts.items()}
    unknown = int((tensors["val"] == vocab.unknown).sum())
    return CodeCorpus(text, vocab, torch.from_numpy(ids.copy()), tensors["train"],
                      tensors["val"], root, CODE_SHA256, SPLIT, tensors["dev"], parts, unknown)


@functools.lru_cache(maxsize=2)
def _encoded(root: str) -> tuple[CodeVocab, np.ndarray, dict[str, tuple[CodeFile, ...]]]:
    """The vocabulary, the whole text's ids (read-only) and the parts, once per process."""
    text, files = _cached_text(root)
    parts = split_files(files)
    vocab = CodeVocab("".join(text[f.start:f.stop] for f in parts["train"]))
    ids = vocab.ids(text)
    ids.setflags(write=False)
    return vocab, ids, parts
