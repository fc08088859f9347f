"""Per-TD dispatch overhead of the device (pytest-benchmark).

    .venv/bin/python -m pytest bench/bench_device.py --benchmark-only

The TD is the seed's tiny 1x1 convolution (8 -> 3 channels, 4 pixels: 96 MACs), built
with the TD builder, so the time is almost all dispatch: the TM registers, ControlDMA
(the decode is cached by TD content), the checks of every block, the DMAs and the
kernel calls.  ``chain16`` runs 16 such TDs in one push, for the per-TD cost inside a
chain (the figure divided by 16).  The numbers are absolute microseconds on a shared
machine: compare them within one run.
"""

import numpy as np
import pytest

from fastane.device import AneLayout, Device, pack_weights
from fastane.td import Program, conv_td

X_SHAPE, Y_SHAPE = (1, 8, 4, 1), (1, 3, 4, 1)


def _program(n_tds=1):
    w = np.ones((3, 8, 1, 1), np.float16)
    kernel, _ = pack_weights(w)
    tds = [conv_td(X_SHAPE, Y_SHAPE, nid=i + 1) for i in range(n_tds)]
    return Program.from_tds(tds, kernel=kernel, name=f"tiny{n_tds}")


@pytest.fixture(scope="module")
def setup():
    dev = Device(memory_size=16 << 20)
    x = np.ones(X_SHAPE, np.float16)
    src, dst = dev.alloc(0x4000, "x"), dev.alloc(0x4000, "y")
    AneLayout.of(X_SHAPE).tile(x, out=dev.memory.view(src.iova, src.size))
    return dev, {4: src, 5: dst}, x


def _per_td(benchmark, note, what, n_tds=1):
    stats = getattr(benchmark, "stats", None)
    if stats is not None and stats.stats.rounds > 1:
        med = stats.stats.median / n_tds * 1e6
        benchmark.extra_info["us_per_td"] = med
        note(f"device dispatch, {what}: {med:.0f} us per TD (median)")


@pytest.mark.parametrize("stats_only", [False, True], ids=["compute", "stats-only"])
def test_submit_one_td(benchmark, setup, note, stats_only):
    dev, bars, _ = setup
    loaded = dev.load(_program())
    dev.submit(loaded, bars, stats_only=stats_only).wait()  # warm: JIT, decode cache
    stats = benchmark(lambda: dev.submit(loaded, bars, stats_only=stats_only).wait())
    assert stats.tasks == 1 and stats.macs == 96
    _per_td(benchmark, note, "submit+wait, " + ("stats-only" if stats_only else "compute"))


def test_submit_chain16(benchmark, setup, note):
    dev, bars, _ = setup
    loaded = dev.load(_program(16))
    dev.submit(loaded, bars).wait()
    stats = benchmark(lambda: dev.submit(loaded, bars).wait())
    assert stats.tasks == 16
    _per_td(benchmark, note, "inside a 16-TD chain, compute", 16)


def test_run_one_td(benchmark, setup, note):
    """``Device.run``: allocation, tiling of the input and untiling of the output included."""
    dev, _, x = setup
    program = _program()
    dev.run(program, {4: x})
    out = benchmark(lambda: dev.run(program, {4: x}))
    assert np.all(out[5] == 8)
    _per_td(benchmark, note, "Device.run (tile/untile included)")
