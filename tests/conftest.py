"""Shared fixtures.  The corpus of real M1 programs is found through FASTANE_CORPUS."""

import gc
import os
from pathlib import Path

import pytest

# the helpers' asserts report their operands as the tests' own do
pytest.register_assert_rewrite("tests.helpers")

from fastane import lower
from fastane.device import Device


def pytest_collection_finish(session):
    """Once the tests are collected, the objects alive (the modules imported, the tests and
    their parameters) leave the garbage collector's view: coremltools' ``ct.convert`` ends
    with a full ``gc.collect()`` (114 conversions in the suite), and each full collection
    otherwise walks all of them (about 0.3 s each; 54 s of the suite's 8.5 minutes)."""
    gc.collect()
    gc.freeze()


def _corpus_dir():
    env = os.environ.get("FASTANE_CORPUS")
    return Path(env) if env else None


@pytest.fixture(scope="session")
def corpus() -> Path:
    """Path of the corpus (``../shared/corpus``); skips when FASTANE_CORPUS is not set."""
    path = _corpus_dir()
    if path is None:
        pytest.skip(
            "FASTANE_CORPUS is not set: point it at the shared corpus of real M1 programs "
            "(scripts/test.sh sets it to ../shared/corpus when that exists)"
        )
    if not (path / "aneregs.json").is_file():
        pytest.skip(f"FASTANE_CORPUS={path} does not hold the corpus (no aneregs.json there)")
    return path


@pytest.fixture
def device():
    """A fresh default device for the test (the previous one is restored after)."""
    old = lower.default_device()
    dev = Device(memory_size=64 << 20)
    lower.set_default_device(dev)
    yield dev
    lower.set_default_device(old)
