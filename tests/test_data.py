"""Corpus lookup and checksum, vocabulary, split and the published batch sampler."""
import io
import urllib.error

import numpy as np
import pytest
import torch

from catlib import data
from catlib.data import (CORPUS_CHARS, BatchSampler, DataError, Vocab, corpus_path,
                         load_corpus)


def test_corpus_vocab_and_split(corpus):
    assert len(corpus.text) == CORPUS_CHARS == 1_115_394
    assert len(corpus.vocab) == 65 and corpus.vocab.chars == sorted(set(corpus.text))
    assert corpus.ids.dtype == torch.int64
    assert torch.equal(corpus.train, corpus.ids[:50000]) and torch.equal(corpus.val, corpus.ids[50000:])
    assert corpus.vocab.decode(corpus.vocab.encode("First Citizen")) == "First Citizen"
    assert corpus.vocab.decode(corpus.train[:14]) == corpus.text[:14]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Vocab("abc").encode("abz")


def test_lookup_order(tiny_path, tmp_path, monkeypatch):
    cache = tmp_path / "xdg"
    (cache / "catlib").mkdir(parents=True)
    (cache / "catlib" / "tiny.txt").write_bytes(tiny_path.read_bytes())
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("CATLIB_DATA", raising=False)
    assert corpus_path() == cache / "catlib" / "tiny.txt"           # 3. the cache
    monkeypatch.setenv("CATLIB_DATA", str(tiny_path))
    assert corpus_path() == tiny_path                                 # 2. CATLIB_DATA
    bad = tmp_path / "other.txt"
    bad.write_text("not shakespeare")
    with pytest.raises(DataError, match="SHA-256"):                   # 1. explicit path wins
        corpus_path(bad)


def test_corrupt_cache_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CATLIB_DATA", raising=False)
    (tmp_path / "catlib").mkdir()
    (tmp_path / "catlib" / "tiny.txt").write_text("First Citizen: truncated")
    with pytest.raises(DataError, match="delete it to download"):
        load_corpus()


def test_download_into_cache(tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CATLIB_DATA", raising=False)
    urls = []

    def fake_urlopen(url, timeout):
        urls.append(url)
        return io.BytesIO(tiny_path.read_bytes())
    monkeypatch.setattr(data.urllib.request, "urlopen", fake_urlopen)
    assert corpus_path() == tmp_path / "catlib" / "tiny.txt"
    assert urls == [data.CORPUS_URL]
    assert [p.name for p in (tmp_path / "catlib").iterdir()] == ["tiny.txt"]


def test_failed_download_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CATLIB_DATA", raising=False)

    def offline(url, timeout):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(data.urllib.request, "urlopen", offline)
    with pytest.raises(DataError, match="CATLIB_DATA"):
        corpus_path()
    assert list((tmp_path / "catlib").iterdir()) == []
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"junk"))
    with pytest.raises(DataError, match="SHA-256"):
        corpus_path()
    assert list((tmp_path / "catlib").iterdir()) == []


def test_sampler_yields_the_published_windows(corpus):
    B, T = 8, 256
    sampler = BatchSampler(corpus.train, B, T, seed=0)
    rng = np.random.default_rng(0)  # the published sampler, written out
    for _ in range(3):
        starts = rng.choice(len(corpus.train) - T - 1, size=B)
        x, y = sampler()
        assert x.shape == y.shape == (B, T) and x.dtype == torch.int64
        for b, s in enumerate(starts):
            w = corpus.train[s:s + T + 1]
            assert torch.equal(x[b], w[:-1]) and torch.equal(y[b], w[1:])
    # pinned: numpy's Generator.choice for seed 0 (guards against a change of numpy's stream)
    assert BatchSampler(corpus.train, B, T, 0).starts().tolist() == [
        42312, 31684, 25425, 13420, 15312, 2038, 3742, 822]


def test_sampler_state_round_trip(corpus):
    a = BatchSampler(corpus.train, 4, 16, seed=3)
    a()
    state = a.state_dict()
    x1, _ = a()
    b = BatchSampler(corpus.train, 4, 16, seed=99)
    b.load_state_dict(state)
    assert torch.equal(b()[0], x1)


@pytest.mark.parametrize("batch,seq", [(0, 16), (4, 0), (4, 49999)])
def test_sampler_rejects_bad_sizes(corpus, batch, seq):
    with pytest.raises(ValueError):
        BatchSampler(corpus.train, batch, seq)


def test_90_10_split(tiny_path, corpus):
    """Would catch a split setting that is ignored or cuts elsewhere than 90 %."""
    c = load_corpus(tiny_path, split="90/10")
    cut = int(0.9 * CORPUS_CHARS)
    assert c.split == "90/10" and corpus.split == "published"
    assert torch.equal(c.val, c.ids[cut:])
    # the dev slice: the corpus' first 50,000 characters, before the training part
    assert torch.equal(c.train, c.ids[50_000:cut]) and torch.equal(c.dev, c.ids[:50_000])
    assert corpus.dev is None and len(corpus.train) == 50_000
    with pytest.raises(ValueError, match="split must be one of"):
        load_corpus(tiny_path, split="80/20")


def test_the_encoded_corpus_is_each_characters_id_and_each_callers_own(tiny_path):
    # The table lookup gives the ids of the vocabulary's own map, character by character;
    # the encoding is kept per process, so a caller that writes into its tensor must not
    # change what the next caller reads.
    from catlib.data import load_corpus
    a = load_corpus(tiny_path)
    assert torch.equal(a.ids, torch.tensor([a.vocab.stoi[c] for c in a.text]))
    a.ids[:10] = 0
    assert not torch.equal(load_corpus(tiny_path).ids[:10], a.ids[:10])


def test_the_dev_slice_takes_nothing_from_beside_the_validation_split(tiny_path):
    # Issue 61, item 1. Fails on 364f0a7: the dev slice was the training part's last 50,000
    # characters (953,854-1,003,854), the validation text's nearest neighbours.
    import numpy as np

    from catlib.data import DEV_CHARS

    c = load_corpus(tiny_path, split="90/10")
    text = c.ids.numpy().astype(np.uint8).tobytes()       # 65 ids: one byte each
    dev_start = text.find(c.dev.numpy().astype(np.uint8).tobytes())
    val_start = len(c.ids) - len(c.val)
    assert dev_start >= 0 and dev_start + DEV_CHARS <= val_start - DEV_CHARS, dev_start

    from catlib.data import split_parts                    # where the page reads them
    parts = split_parts(len(c.ids), "90/10")
    assert parts == {"dev": (0, 50_000), "train": (50_000, 1_003_854),
                     "val": (1_003_854, CORPUS_CHARS)}
    for name, (start, stop) in parts.items():
        assert torch.equal(getattr(c, name), c.ids[start:stop]), name
    assert parts["train"][1] == val_start                  # training runs up to validation
    assert split_parts(len(c.ids), "published") == {"train": (0, 50_000), "dev": None,
                                                    "val": (50_000, CORPUS_CHARS)}
