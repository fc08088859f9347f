"""Unified memory: the byte space, the tile allocator, BAR tables."""

import numpy as np
import pytest

from fastane.device.faults import BARFault, DMARangeFault
from fastane.errors import DeviceMemoryError, FastaneError
from fastane.device.memory import ALIGN, NUM_BARS, TILE, BARTable, Region, UnifiedMemory, aligned_bytes


@pytest.fixture
def mem():
    return UnifiedMemory(size=16 * TILE)


def test_backing_store_is_aligned_bytes(mem):
    assert mem.data.dtype == np.uint8 and mem.data.size == 16 * TILE
    assert mem.data.ctypes.data % ALIGN == 0
    for n in (1, 63, 64, 1000):
        assert aligned_bytes(n).ctypes.data % ALIGN == 0 and aligned_bytes(n).size == n


def test_alloc_rounds_to_whole_tiles(mem):
    a = mem.alloc(1, "a")
    b = mem.alloc(TILE + 1, "b")
    assert (a.size, b.size) == (TILE, 2 * TILE)
    assert a.iova % TILE == 0 and b.iova == a.end
    assert mem.available == 13 * TILE
    assert mem.allocations == [a, b]


def test_alloc_rejects_bad_sizes(mem):
    with pytest.raises(ValueError):
        mem.alloc(0)
    with pytest.raises(MemoryError):
        mem.alloc(17 * TILE)


def test_exhaustion_is_the_devices_own_error(mem):
    # a precise fastane error (the emulated DRAM is full), still a MemoryError for callers,
    # and distinguishable from a host allocation failure (the fuzzing harness relies on it)
    with pytest.raises(DeviceMemoryError, match="unified memory exhausted") as info:
        mem.alloc(17 * TILE)
    assert isinstance(info.value, FastaneError) and isinstance(info.value, MemoryError)
    assert mem.available == 16 * TILE  # nothing was taken


def test_free_coalesces_and_reuses(mem):
    regions = [mem.alloc(TILE) for _ in range(16)]
    with pytest.raises(MemoryError):
        mem.alloc(1)
    for r in regions[4:8]:
        mem.free(r)
    big = mem.alloc(4 * TILE)  # fits only if the four frees coalesced
    assert big.iova == regions[4].iova
    with pytest.raises(ValueError):
        mem.free(regions[4])  # no longer a live allocation


def test_alloc_zeroes_reused_memory(mem):
    r = mem.alloc(TILE)
    mem.write(r.iova, b"\xff" * 100)
    mem.free(r)
    r2 = mem.alloc(TILE)
    assert r2.iova == r.iova and not mem.view(r2.iova, TILE).any()


def test_read_write_and_window_faults(mem):
    r = mem.alloc(TILE)
    mem.write(r.iova + 10, b"abc")
    assert mem.read(r.iova + 10, 3) == b"abc"
    with pytest.raises(DMARangeFault):
        mem.view(mem.base - 1, 1)
    with pytest.raises(DMARangeFault):
        mem.view(mem.base + mem.size - 1, 2)


def test_region_of_spans_to_the_allocation_end(mem):
    r = mem.alloc(2 * TILE)
    assert mem.region_of(r.iova + 100) == Region(r.iova + 100, 2 * TILE - 100, r.name)
    assert mem.region_of(r.end) is None
    assert r.window(64, 128) == Region(r.iova + 64, 128)
    with pytest.raises(ValueError):
        r.window(TILE, 2 * TILE)


def test_bar_table_resolves_and_faults(mem):
    r = mem.alloc(TILE)
    bars = BARTable(mem, {3: r})
    assert bars.resolve(3, 64, 128) == r.iova - mem.base + 64
    with pytest.raises(BARFault) as e:
        bars.resolve(4, 0, 1)
    assert e.value.slot == 4
    with pytest.raises(DMARangeFault) as e:
        bars.resolve(3, TILE - 64, 65)
    assert e.value.slot == 3 and e.value.nbytes == 65
    with pytest.raises(BARFault):
        bars.resolve(NUM_BARS, 0, 1)
    with pytest.raises(ValueError):
        bars.map(32, r)
    with pytest.raises(TypeError):
        bars.map(2, r.iova)


def test_bar_table_from_registers(mem):
    a, b = mem.alloc(TILE), mem.alloc(3 * TILE)
    iovas = [0] * NUM_BARS
    iovas[1], iovas[5], iovas[7] = a.iova, b.iova + TILE, 0xDEAD0000
    bars = BARTable.from_iovas(mem, iovas)
    assert bars[1] == a and bars[5].size == 2 * TILE
    assert bars[7] is None  # an IOVA outside every allocation maps nothing
    assert bars.iovas()[1] == a.iova


def test_window_bar_bounds_are_the_window(mem):
    r = mem.alloc(TILE)
    bars = BARTable(mem, {0: r.window(0, 256)})
    bars.resolve(0, 0, 256)
    with pytest.raises(DMARangeFault):
        bars.resolve(0, 0, 257)
