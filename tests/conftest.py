"""Shared fixtures: the real corpus, found via CATLIB_DATA or ../shared/data/tiny.txt."""
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    p = Path(os.environ.get("CATLIB_DATA")
             or Path(__file__).resolve().parents[2] / "shared" / "data" / "tiny.txt")
    if not p.is_file():
        pytest.skip(f"corpus not found at {p}: set CATLIB_DATA to tiny.txt")
    return p


@pytest.fixture(scope="session")
def corpus(tiny_path):
    from catlib.data import load_corpus
    return load_corpus(tiny_path)
