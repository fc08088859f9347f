"""KernelDMA's deferred loads (fastane.device.kernel_dma.KMem, ``load(..., lazy=True)``):
a task whose MAC reads its fp16 weights where KernelDMA reads them does not copy them
into KMem first, and KMem still ends up holding, byte for byte, what the eager copy
would have put there -- whatever mix of deferred and eager loads, lane sets and sizes
come in between, and whenever it is read."""

import numpy as np
import pytest

import fastane
from fastane import lower
from fastane.device import Device
from fastane.device import kernel_dma
from fastane.device import mac as dmac
from fastane.device.engine import _writes_kernel
from fastane.device.kernel_dma import KMEM_BYTES, LANES, KernelDMAPlan, KMem, Lane
from tests.helpers.reference import ref_matmul

F16 = np.float16
MEM = 1 << 22


def _plan(rng, lanes=None):
    """A checked-looking plan: random enabled lanes, sizes and 64-byte aligned sources."""
    if lanes is None:
        lanes = sorted(rng.choice(LANES, rng.integers(1, LANES + 1), replace=False))
    ls, srcs = [], []
    for lane in lanes:
        n = 64 * int(rng.integers(1, KMEM_BYTES // 64 // 8))
        src = 64 * int(rng.integers(0, (MEM - n) // 64))
        ls.append(Lane(int(lane), 0, src, n))
        srcs.append(src)
    return KernelDMAPlan(tuple(ls), tuple(srcs))


def test_any_mix_of_deferred_and_eager_loads_holds_the_eager_bytes():
    rng = np.random.default_rng(0)
    memory = rng.integers(0, 256, MEM, dtype=np.uint8)
    lazy, eager = KMem(), KMem()
    for step in range(300):
        p = _plan(rng, lanes=None if step % 3 else range(LANES))
        deferred = bool(rng.integers(0, 2))
        assert lazy.load(p, memory, lazy=deferred) == eager.load(p, memory) == p.nbytes
        assert lazy.loaded == eager.loaded
        # what the MAC reads for every loaded lane is what KMem would hold
        k16, base = lazy.fp16_lanes()
        for lane in p.lanes:
            got = k16[base[lane.lane] : base[lane.lane] + lane.nbytes // 2]
            want = eager._data[lane.lane, : lane.nbytes].view(np.uint16)
            assert np.array_equal(got, want)
        lanes, off = int(rng.integers(1, LANES + 1)), 64 * int(rng.integers(0, 64))
        n = int(rng.integers(1, 4096))
        assert np.array_equal(lazy.read(lanes, off, n), eager._data[:lanes, off : off + n])
        if rng.random() < 0.2:  # a reader of the bytes: the copy is made
            assert np.array_equal(lazy.data, eager.data)
        if rng.random() < 0.1:  # the end of a run: settled, then the host writes memory
            lazy.settle()
            memory[rng.integers(0, MEM, 4096)] = rng.integers(0, 256, 4096, dtype=np.uint8)
    assert np.array_equal(lazy.data, eager.data)


def test_a_deferred_load_counts_as_a_change_and_an_unchanged_eager_one_does_not():
    rng = np.random.default_rng(1)
    memory = rng.integers(0, 256, MEM, dtype=np.uint8)
    k = KMem()
    p = _plan(rng)
    k.load(p, memory)
    g = k.generation
    k.load(p, memory)  # the same bytes, compared: no change
    assert k.generation == g
    k.load(p, memory, lazy=True)  # not compared
    assert k.generation == g + 1
    k.load(p, memory)  # settled first, then compared: the same bytes
    assert k.generation == g + 1


def test_odd_sources_are_copied_at_once():
    memory = np.arange(MEM, dtype=np.uint64).astype(np.uint8)
    p = KernelDMAPlan((Lane(0, 0, 1, 64),), (1,))
    k = KMem()
    k.load(p, memory, lazy=True)
    assert k._deferred is None
    assert np.array_equal(k.data[0, :64], memory[1:65])


def test_destination_over_its_own_kernel_bytes_is_not_deferred():
    class Dst:
        def __init__(self, index, extent):
            self.index, self.extent = index, extent

    p = KernelDMAPlan((Lane(3, 0, 0, 128), Lane(5, 0, 0, 64)), (4096, 8192))
    assert not _writes_kernel(Dst(0, 4096), p)  # ends where lane 3 starts
    assert _writes_kernel(Dst(0, 4097), p)
    assert _writes_kernel(Dst(8192 + 63, 64), p)
    assert not _writes_kernel(Dst(8192 + 64, 64), p)


def test_a_decode_step_reads_its_weights_where_kernel_dma_does(device, monkeypatch):
    """M = 1 through the device: every task defers its KernelDMA, the bits are the
    reference's, and after the run KMem holds what the same program's eager loads leave."""
    loads = []
    real = KMem.load
    monkeypatch.setattr(
        KMem, "load", lambda self, p, m, lazy=False: loads.append(lazy) or real(self, p, m, lazy)
    )
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1024)).astype(F16)
    w = (rng.standard_normal((1024, 1024)) / 32).astype(F16)  # 2 MB of weights: tasks in turn
    y = fastane.matmul(x, w)
    assert np.array_equal(y.view(np.uint16), ref_matmul(x, w).view(np.uint16))
    assert len(loads) >= 2 and all(loads)
    kmem = device.engine.kmem
    assert kmem._deferred is None  # settled at the end of the run
    after = kmem.data.copy()
    assert after.any()
    monkeypatch.setattr(dmac, "SKINNY_ROWS", 0)  # not a skinny task: loaded at once
    loads.clear()
    fresh = Device(memory_size=64 << 20)  # the fixture restores the default device
    lower.set_default_device(fresh)
    assert np.array_equal(fastane.matmul(x, w).view(np.uint16), y.view(np.uint16))
    assert len(loads) >= 2 and not any(loads)
    assert np.array_equal(fresh.engine.kmem.data, after)


@pytest.mark.parametrize("kind", ["large", "nan_weight"])
def test_a_deferred_task_whose_bound_fails_decodes_the_same_bytes(device, kind):
    """The skinny kernel's sums discarded: the general kernels decode KMem (the deferred
    copy made then) and give the reference's bits."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 300)).astype(F16)
    w = (rng.standard_normal((300, 600)) / 16).astype(F16)
    if kind == "large":
        x[0, 3] = F16(30000.0)
    else:
        w[7, 500] = np.uint16(0x7E01).view(F16)
    with fastane.errstate(saturation="ignore"):
        y = fastane.matmul(x, w)
    assert np.array_equal(y.view(np.uint16), ref_matmul(x, w).view(np.uint16))
    assert kernel_dma.fp16_channels(device.engine.kmem, 600, 300, 1, 1) is not None
