"""The code corpus (issue 62, item 1): SymPy 1.14.0's source, the same text everywhere,
split by file, with an unknown symbol for characters training never saw."""
import pytest
import torch

from catlib import code_corpus as cc

# The text's SHA-256, written out here so that a change of the module's constant fails too.
PINNED_SHA256 = "28ee423b0faca29c89eca326de2d970817043bdbf6feaa723ecea8b25353023d"


@pytest.fixture(scope="module")
def corpus():
    return cc.load_code_corpus()     # about 2 s, then cached for the process


def _part_text(corpus, name):
    return "".join(corpus.text[f.start:f.stop] for f in corpus.files[name])


def test_the_text_is_sympy_1_14_0s_source_by_its_sha256(corpus):
    text, files = cc.code_text()
    assert cc.text_sha256(text) == PINNED_SHA256 == cc.CODE_SHA256 == corpus.sha256
    assert text == corpus.text and len(files) == 845
    assert all(text[f.start:f.stop].startswith(f"# file: {f.path}\n") for f in files)
    paths = [f.path for f in files]
    assert not [p for p in paths if "/tests/" in p or p.startswith("sympy/testing/")
                or p.endswith("conftest.py")], "a test file is in the corpus"


def test_a_different_text_stops_in_one_line_naming_the_fix(monkeypatch):
    monkeypatch.setattr(cc, "CODE_SHA256", "0" * 64)
    with pytest.raises(cc.CodeCorpusError) as e:
        cc.code_text()
    assert "\n" not in str(e.value) and "pip install -c constraints.txt sympy" in str(e.value)


def test_the_text_is_the_same_on_every_run(tmp_path):
    """Read twice, from files written in two orders: the same text, in path order."""
    def tree(where, names):
        for name in names:
            (where / "sympy" / name).parent.mkdir(parents=True, exist_ok=True)
            (where / "sympy" / name).write_text(f"x = {name!r}")
        return where / "sympy"
    names = ["b.py", "a/z.py", "a/tests/test_z.py", "testing/runtests.py", "conftest.py", "c.py"]
    one = cc.concatenate(tree(tmp_path / "one", names))
    two = cc.concatenate(tree(tmp_path / "two", names[::-1]))
    assert one == two
    assert [f.path for f in one[1]] == ["sympy/a/z.py", "sympy/b.py", "sympy/c.py"]
    assert one[0].startswith("# file: sympy/a/z.py\nx = 'a/z.py'\n# file: sympy/b.py\n")
    cc._cached_text.cache_clear()          # the installed source, read again from disk
    assert cc.text_sha256(cc.code_text()[0]) == PINNED_SHA256


def test_no_validation_file_is_trained_on_and_dev_files_are_neither(corpus):
    parts = {name: {f.path for f in corpus.files[name]} for name in ("train", "dev", "val")}
    assert not parts["train"] & parts["val"] and not parts["train"] & parts["dev"]
    assert not parts["dev"] & parts["val"]
    assert len(parts["train"] | parts["dev"] | parts["val"]) == 845
    train_text, val_text = _part_text(corpus, "train"), _part_text(corpus, "val")
    # train, val and dev hold exactly their own files' characters ...
    for name, text in (("train", train_text), ("val", val_text), ("dev", _part_text(corpus, "dev"))):
        assert torch.equal(getattr(corpus, name), corpus.vocab.encode(text)), name
    # ... so no validation or dev file's header (its first line) is in the training ids.
    assert not [p for p in parts["val"] | parts["dev"] if f"# file: {p}\n" in train_text]
    assert not [p for p in parts["dev"] if f"# file: {p}\n" in val_text]
    n = len(corpus.ids)
    assert 0.09 < len(corpus.val) / n < 0.12 and 50_000 <= len(corpus.dev) <= 200_000
    assert len(corpus.train) + len(corpus.val) + len(corpus.dev) == n


def test_the_split_follows_the_paths_not_their_positions():
    files = tuple(cc.CodeFile(f"sympy/m{i}.py", 1000 * i, 1000 * (i + 1)) for i in range(200))
    moved = tuple(cc.CodeFile(f.path, f.start, f.stop) for f in reversed(files))
    one, two = cc.split_files(files, dev_chars=5000), cc.split_files(moved, dev_chars=5000)
    assert {k: {f.path for f in v} for k, v in one.items()} == \
           {k: {f.path for f in v} for k, v in two.items()}
    assert len(one["val"]) == 20 and len(one["dev"]) == 5      # 10 % and 5,000 characters
    assert [f.path for f in one["val"]] != [f.path for f in files[:20]]   # not the first files


def test_an_unseen_character_maps_to_the_unknown_symbol(corpus):
    vocab = cc.CodeVocab("ab\n")
    assert vocab.encode("ab\nz\u20ac\U0001F600").tolist() == [1, 2, 0] + [vocab.unknown] * 3
    assert vocab.decode([1, vocab.unknown]) == "a" + cc.UNKNOWN and len(vocab) == 4
    # the corpus's vocabulary is its training files' characters, and validation's others count
    seen = set(_part_text(corpus, "train"))
    assert set(corpus.vocab.chars[:-1]) == seen
    unseen = sum(c not in seen for c in _part_text(corpus, "val"))
    assert corpus.unknown_in_val == unseen == int((corpus.val == corpus.vocab.unknown).sum())


def test_a_wrong_sympy_version_stops_in_one_line(monkeypatch):
    monkeypatch.setattr(cc, "SYMPY_VERSION", "1.13.3")
    with pytest.raises(cc.CodeCorpusError) as e:
        cc.load_code_corpus()
    msg = str(e.value)
    assert "\n" not in msg and "1.14.0" in msg and "1.13.3" in msg
    assert "pip install -c constraints.txt sympy" in msg


def test_a_missing_sympy_stops_in_one_line(monkeypatch):
    def missing(name):
        raise cc.importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(cc.importlib.metadata, "version", missing)
    with pytest.raises(cc.CodeCorpusError, match="not installed.*pip install -c constraints"):
        cc.code_text()
