"""Apple's elementwise programs from the corpus (``m1-kernels``: 36 programs, each over
a 1600 x 2560 fp16 tensor, 4M elements) on the emulated device (pytest-benchmark).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m pytest bench/bench_corpus.py --benchmark-only

* ``test_corpus_kernel[name]``: ``Device.submit(program, bars).wait()`` with the input
  already in its buffer (the device's work: ControlDMA, every block, TileDMA; not the
  host's copy of the input into the tiled layout, which ``Device.run`` adds).  Target:
  under 20 ms each (the README's speed table).  Beside it, in the same run, numpy float32
  ``np.tanh`` over 4M values (``speedup_vs_numpy_f32_tanh``: the machine's yardstick, not
  the same work).

Before timing, the result is checked bit for bit against the engine's block-by-block
path (the fp16 lane switched off), so a broken lane cannot post a fast time.  Needs the
corpus (``FASTANE_CORPUS``; skipped with a reason where absent).  The machines are shared
and noisy: compare within one run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fastane.device import Device, eltwise
from fastane.td import load_program

_CORPUS = Path(os.environ["FASTANE_CORPUS"]) if os.environ.get("FASTANE_CORPUS") else None
_META = _CORPUS / "m1-kernels" / "kernels.json" if _CORPUS else None
NAMES = sorted(json.loads(_META.read_text())) if _META is not None and _META.is_file() else []
ELEMENTS = 2560 * 1600


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=160 << 20)


def _setup(dev, name):
    meta = json.loads(_META.read_text())[name]
    program = dev.load(load_program(_CORPUS / "m1-kernels" / meta["file"]))
    slots = dev.tensors(program)
    rng = np.random.default_rng(7)
    regions = {}
    for s, t in slots.items():
        regions[s] = dev.memory.alloc(t.nbytes, f"{name}:{s}")
        if t.role == "input":
            x = rng.uniform(-6, 6, t.shape[1:]).astype(np.float16)
            t.view(dev.memory.view(regions[s].iova, regions[s].size))[...] = x
    outputs = [s for s, t in slots.items() if t.role == "output"]
    return program, slots, regions, outputs


def _read(dev, slots, regions, outputs):
    return {
        s: slots[s].view(dev.memory.view(regions[s].iova, regions[s].size)).view(np.uint16).copy()
        for s in outputs
    }


@pytest.mark.skipif(not NAMES, reason="FASTANE_CORPUS is not set or holds no m1-kernels/kernels.json")
@pytest.mark.parametrize("name", NAMES or ["none"])
def test_corpus_kernel(benchmark, smoke, measure, compare, note, dev, name, monkeypatch):
    program, slots, regions, outputs = _setup(dev, name)
    try:
        with monkeypatch.context() as m:  # the block-by-block path, for the check
            m.setattr(eltwise, "run", lambda *a, **k: None)
            want_stats = dev.submit(program, regions).wait()
            want = _read(dev, slots, regions, outputs)
        got_stats = dev.submit(program, regions).wait()
        got = _read(dev, slots, regions, outputs)
        assert got_stats == want_stats
        for s in outputs:
            assert np.array_equal(got[s], want[s]), (name, s)
        t = measure(lambda: dev.submit(program, regions).wait(), 1 if smoke else 9)
    finally:
        for r in regions.values():
            dev.memory.free(r)
    x32 = np.random.default_rng(8).uniform(-6, 6, ELEMENTS).astype(np.float32)
    info = compare(t, ELEMENTS, {"numpy_f32_tanh": (lambda: np.tanh(x32), 1 if smoke else 9)})
    benchmark.extra_info["ms"] = t * 1e3
    note(
        f"corpus {name} over 4M elements ({program.td_count} TDs): {t * 1e3:.1f} ms (target 20 ms; "
        f"np.tanh float32 {info['numpy_f32_tanh_s'] * 1e3:.1f} ms)"
    )
