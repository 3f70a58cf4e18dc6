"""The corpora, their vocabularies and splits, and the batch sampler.

Two corpora (:data:`CORPORA`), and the split names the corpus: Tiny Shakespeare
(``tiny``: the splits "published" and "90/10", below) and the Python source of the pinned
SymPy (``code``: its split by file, "files", built by :mod:`catlib.code_corpus`).
:func:`load_corpus` loads either from a split's name, so that every run, which records
its split, loads its own corpus; :func:`corpus_of` names a split's corpus,
:func:`causal_split` gives the split a causal run takes on a corpus and
:func:`vocab_size` the vocabulary size its models need.

Lookup order for Tiny Shakespeare's file (first hit wins):

1. an explicit ``path`` argument (``--data`` on the command line);
2. the environment variable ``CATLIB_DATA``;
3. the user cache, ``$XDG_CACHE_HOME/catlib/tiny.txt`` (default ``~/.cache/catlib/tiny.txt``);
4. otherwise the public char-rnn copy is downloaded into that cache, atomically.

Every load checks the SHA-256 of the file against the published one (and the code
corpus's text against its own, :data:`catlib.code_corpus.CODE_SHA256`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .code_corpus import SPLIT as CODE_SPLIT
from .code_corpus import CodeCorpus, CodeCorpusError, load_code_corpus

CORPUS_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CORPUS_CHARS = 1_115_394
TRAIN_CHARS = 50_000  # the published split: ids[:50000] train, the rest validation
# "published": ids[:50000] train, the rest validation (the prototype's protocol);
# "90/10": the first 90 % train, the last 10 % validation (nanoGPT's shakespeare_char),
# less the training part's first DEV_CHARS: the dev slice, which no run trains on and no
# reported CE reads, for choosing settings such as each row's learning rate (issue 54). It
# opens the corpus, as far from the validation text as the training part allows: the
# training part's last characters are the validation text's nearest neighbours (the
# speakers of the play it opens), and held out they made every validation CE harder
# (issue 61).
SPLITS = ("published", "90/10")     # Tiny Shakespeare's (split_point, split_parts)
DEV_CHARS = 50_000
# Each corpus and its splits: a split belongs to one corpus, so a run's split names it.
CORPORA = {"tiny": SPLITS, "code": (CODE_SPLIT,)}
ALL_SPLITS = tuple(split for splits in CORPORA.values() for split in splits)
# The split a causal run (the book's rows, the sweep, the study) takes on each corpus.
CAUSAL_SPLITS = {"tiny": "90/10", "code": CODE_SPLIT}
# The vocabulary of each corpus, fixed by its SHA-256 (tests/test_corpus_choice.py loads
# both): tiny.txt's 65 characters; the code corpus's 130 characters of its training files
# and the unknown symbol. A model's vocab_size must equal its corpus's.
VOCAB_SIZES = {"tiny": 65, "code": 131}


class DataError(RuntimeError):
    """A corpus problem; the message is one line naming the problem and the fix."""


def check_corpus(name: str) -> str:
    """``name`` if it is a corpus of :data:`CORPORA`, else DataError in one line."""
    if name not in CORPORA:
        raise DataError(f"corpus {name!r} is not one of {list(CORPORA)}; pass "
                        + " or ".join(f"--corpus {c}" for c in CORPORA))
    return name


def corpus_of(split: str) -> str:
    """The corpus (a key of :data:`CORPORA`) whose split ``split`` is; ValueError for a
    split of none."""
    for name, splits in CORPORA.items():
        if split in splits:
            return name
    raise ValueError(f"split must be one of {list(ALL_SPLITS)}, got {split!r}")


def causal_split(corpus: str) -> str:
    """The split a causal run takes on ``corpus``: "90/10" on tiny, "files" on code."""
    return CAUSAL_SPLITS[check_corpus(corpus)]


def vocab_size(corpus: str) -> int:
    """The vocabulary size of ``corpus``, which a model trained on it must have
    (``CATConfig.vocab_size``): 65 on tiny (CATConfig's default), 131 on code."""
    return VOCAB_SIZES[check_corpus(corpus)]


def cache_dir() -> Path:
    """The user cache directory of catlib (``$XDG_CACHE_HOME/catlib`` or ``~/.cache/catlib``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "catlib"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_corpus(dest: Path, url: str = CORPUS_URL, timeout: float = 60.0) -> Path:
    """Download the corpus to ``dest`` atomically (temporary file, checksum, rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tiny-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            while chunk := resp.read(1 << 16):
                out.write(chunk)
        digest = _sha256(Path(tmp))
        if digest != CORPUS_SHA256:
            raise DataError(
                f"downloaded corpus from {url} has SHA-256 {digest}, expected {CORPUS_SHA256}; "
                "set CATLIB_DATA to a verified copy of tiny.txt")
        os.replace(tmp, dest)
    except OSError as e:  # network errors are OSError subclasses (URLError)
        raise DataError(
            f"could not download the corpus from {url} ({e}); "
            "set CATLIB_DATA or pass --data with the path of tiny.txt") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def corpus_path(path: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Find (or download) the corpus file and verify its SHA-256; return its path.

    Raises DataError with a one-line message when the file is missing, unreadable or corrupt.
    """
    if path is not None:
        source, p = "the given path", Path(path)
    elif os.environ.get("CATLIB_DATA"):
        source, p = "CATLIB_DATA", Path(os.environ["CATLIB_DATA"])
    else:
        source, p = "the cache", cache_dir() / "tiny.txt"
        if not p.exists():
            if not download:
                raise DataError(f"corpus not found at {p}; set CATLIB_DATA to the path of tiny.txt")
            download_corpus(p)
    p = p.expanduser()
    if not p.is_file():
        raise DataError(f"corpus not found at {p} ({source}); "
                        "point CATLIB_DATA or --data to the Tiny Shakespeare tiny.txt")
    try:
        digest = _sha256(p)
    except OSError as e:
        raise DataError(f"cannot read the corpus at {p} ({e.strerror}); check its permissions") from None
    if digest != CORPUS_SHA256:
        fix = ("delete it to download a fresh copy" if source == "the cache"
               else "point CATLIB_DATA or --data to an unmodified copy of tiny.txt")
        raise DataError(f"corpus at {p} has SHA-256 {digest[:16]}..., expected "
                        f"{CORPUS_SHA256[:16]}... (corrupt or a different file); {fix}")
    return p


class Vocab:
    """Character vocabulary: the sorted distinct characters of the whole text."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """str of length N -> int64 tensor [N]. Unknown characters raise ValueError."""
        try:
            return torch.tensor([self.stoi[c] for c in text], dtype=torch.int64)
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        """int tensor/sequence [N] -> str of length N."""
        return "".join(self.chars[int(i)] for i in ids)


@dataclass
class Corpus:
    """The corpus and one split of it: ``train``, ``val`` and ``dev``, int64 [N_train],
    [N_val] and [N_dev] (where each lies: :func:`split_parts`).

    ``split`` "published": ids[:50000] / ids[50000:], no dev slice; "90/10": ids[D:n] /
    ids[n:], n = 0.9 N, and the dev slice ids[:D] (D = :data:`DEV_CHARS`) before them.
    """
    text: str
    vocab: Vocab
    ids: torch.Tensor
    train: torch.Tensor
    val: torch.Tensor
    path: Path
    sha256: str = CORPUS_SHA256
    split: str = "published"
    dev: torch.Tensor | None = None


def split_point(n_ids: int, split: str = "published") -> int:
    """Index of the first validation id: 50000 ("published") or int(0.9 N) ("90/10")."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    return TRAIN_CHARS if split == "published" else int(0.9 * n_ids)


def split_parts(n_ids: int, split: str = "published") -> dict[str, tuple[int, int] | None]:
    """Where each part of ``split`` lies among ``n_ids`` ids: ``{"train", "dev", "val"}``,
    each ``(start, stop)`` (ids[start:stop]; "dev" None for the published split). On the
    whole corpus, "90/10": dev 0-50,000, train 50,000-1,003,854, val 1,003,854-1,115,394."""
    cut = split_point(n_ids, split)
    if split == "published":
        return {"train": (0, cut), "dev": None, "val": (cut, n_ids)}
    return {"train": (DEV_CHARS, cut), "dev": (0, DEV_CHARS), "val": (cut, n_ids)}


def load_corpus(path: str | os.PathLike | None = None, download: bool = True,
                split: str = "published") -> Corpus | CodeCorpus:
    """Locate, verify and encode the corpus whose split ``split`` is, then split it
    (:data:`ALL_SPLITS`). Tiny Shakespeare: :data:`SPLITS`, its file found through
    ``path`` (:func:`corpus_path`). The code corpus, split "files":
    :func:`catlib.code_corpus.load_code_corpus`, read from the installed SymPy (``path``
    must be None; ``download`` is not used); its errors (another SymPy, another text)
    are DataError."""
    if corpus_of(split) == "code":   # a bad split name fails before anything is read
        if path is not None:
            raise DataError(f"the code corpus is read from the installed SymPy, not from "
                            f"{path}; leave out --data (the path of tiny.txt) for split "
                            f"{split!r}")
        try:
            return load_code_corpus()
        except CodeCorpusError as e:
            raise DataError(str(e)) from None
    p = corpus_path(path, download=download)   # verified against its SHA-256 on every call
    stat = p.stat()
    text, vocab, encoded = _read_and_encode(str(p), stat.st_mtime_ns, stat.st_size)
    ids = torch.from_numpy(encoded.copy())      # the caller's own tensor
    parts = {name: None if at is None else ids[at[0]:at[1]]
             for name, at in split_parts(len(ids), split).items()}
    return Corpus(text, vocab, ids, parts["train"], parts["val"], p, split=split,
                  dev=parts["dev"])


@functools.lru_cache(maxsize=2)
def _read_and_encode(path: str, mtime_ns: int, size: int) -> tuple[str, Vocab, np.ndarray]:
    """The text, vocabulary and ids of the verified file at ``path``, once per process and
    version of the file (its modification time and size are part of the key)."""
    text = Path(path).read_text(encoding="utf-8")
    vocab = Vocab(text)
    encoded = _ids_of(text, vocab)
    encoded.setflags(write=False)
    return text, vocab, encoded


def _ids_of(text: str, vocab: Vocab) -> np.ndarray:
    """``vocab``'s ids of every character of ``text``, int64 ``[N]``, through a table indexed
    by code point (a Python loop over the 1.1 M characters took 0.12 s; the corpus is
    loaded by every training job and chapter)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    points = [ord(c) for c in vocab.chars]
    table = np.full(max(points, default=0) + 1, -1, dtype=np.int64)
    table[points] = np.arange(len(vocab), dtype=np.int64)
    return table[codes]


class BatchSampler:
    """The published batch sampler, with a state that can be saved and restored.

    Each call draws ``starts = default_rng(seed).choice(len(data) - seq - 1, size=batch)``
    (B random start indices in [0, len(data) - seq - 1)), takes the windows
    ``data[s : s + seq + 1]`` and returns ``x = w[:, :-1]``, ``y = w[:, 1:]``,
    both int64 [batch, seq].

    Repeated passages (``repeat_share`` p > 0): after the published draw, the first
    ``round(p * batch)`` windows of every batch are replaced by a passage of r characters
    repeated to ``seq + 1`` (w[t] = passage[t mod r]), r drawn uniformly from
    ``repeat_periods`` (inclusive) and the passage from anywhere in ``data``. The draws
    come from a second generator seeded by ``(seed, 1)``, so the published windows, and
    the whole batch at p = 0, are the published sampler's. (Under DDP each rank takes its
    slice of this global batch: the repeated windows go to the first ranks, the averaged
    gradient is the same.)
    """

    def __init__(self, data: torch.Tensor, batch: int, seq: int, seed: int = 0,
                 repeat_share: float = 0.0, repeat_periods: tuple[int, int] | None = None):
        if batch < 1 or seq < 1:
            raise ValueError(f"batch and seq must be positive, got batch={batch}, seq={seq}")
        if len(data) - seq - 1 < 1:
            raise ValueError(f"seq={seq} is too long for {len(data)} training tokens; "
                             f"use seq <= {len(data) - 2}")
        check_repeats(repeat_share, repeat_periods, seq, batch)
        self.data, self.batch, self.seq = data, batch, seq
        self.rng = np.random.default_rng(seed)
        self.n_repeat = round(repeat_share * batch)
        self.periods = repeat_periods
        self.repeat_rng = np.random.default_rng((seed, 1))

    def starts(self) -> np.ndarray:
        """Draw the next B start indices (int64 [B]); advances the generator."""
        return self.rng.choice(len(self.data) - self.seq - 1, size=self.batch)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(self.starts())[:, None] + torch.arange(self.seq + 1)
        if self.n_repeat:
            lo, hi = self.periods
            r = self.repeat_rng.integers(lo, hi + 1, size=self.n_repeat)            # periods
            s = self.repeat_rng.integers(0, len(self.data) - hi, size=self.n_repeat)
            t = np.arange(self.seq + 1)
            idx[:self.n_repeat] = torch.from_numpy(s[:, None] + t[None, :] % r[:, None])
        w = self.data[idx]  # [B, seq + 1]
        return w[:, :-1], w[:, 1:]

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state,
                "repeat_rng": self.repeat_rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        if "repeat_rng" in state:            # checkpoints of earlier versions have none
            self.repeat_rng.bit_generator.state = state["repeat_rng"]


def check_repeats(share, periods, seq: int, batch: int | None = None) -> None:
    """Raise ValueError unless ``share`` is in [0, 1] and, when it is > 0, ``periods`` is
    (lo, hi) with 1 <= lo <= hi <= seq (a period within the training length) and
    round(share * batch) is at least one window (no share silently rounded away)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ValueError(f"repeat_share must be a number from 0 to 1, got {share!r}")
    if share == 0:
        return
    ok = (isinstance(periods, (tuple, list)) and len(periods) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in periods)
          and 1 <= periods[0] <= periods[1] <= seq)
    if not ok:
        raise ValueError(f"repeat_periods must be (lo, hi), integers with 1 <= lo <= hi <= "
                         f"seq = {seq} when repeat_share > 0, got {periods!r}; e.g. "
                         f"repeat_periods=(8, {seq})")
    if batch is not None and round(share * batch) < 1:
        raise ValueError(f"repeat_share = {share} of a batch of {batch} rounds to no repeated "
                         f"window; use repeat_share >= {1 / batch:.3g} (one window per batch)")
