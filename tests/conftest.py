"""Shared fixtures: the real corpus, found as catlib finds it (CATLIB_DATA, then the user
cache), or ../shared/data/tiny.txt beside this checkout; never downloaded by a test."""
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    from catlib.data import DataError, corpus_path

    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / "tiny.txt"
    try:
        return corpus_path(download=False)
    except DataError as e:
        if beside.is_file():
            return beside
        pytest.skip(f"corpus not found ({e})")


@pytest.fixture(scope="session")
def corpus(tiny_path):
    from catlib.data import load_corpus
    return load_corpus(tiny_path)
