"""Unified memory: the DRAM the ANE shares with the CPU, seen through its IOMMU.

* :class:`UnifiedMemory` is a real byte space: one 64-byte-aligned ``uint8`` numpy
  array, addressed by IOVA (``base + offset``).  An allocator hands out whole
  0x4000-byte tiles (the unit of the IOMMU mappings and of the BAR plans in the corpus).
* :class:`Region` is one allocation (or a window of one): ``iova`` and ``size``.
* :class:`BARTable` maps the 32 BAR slots a task names to regions.  Tasks never hold
  absolute addresses: every DMA is ``slot + offset``, resolved and bounds-checked here
  before any kernel touches the bytes.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceMemoryError
from ..m1 import ALIGN, NUM_BARS, TILE, round_up
from .faults import BARFault, DMARangeFault

#: default size of the emulated DRAM window (pages are only committed when touched)
DEFAULT_SIZE = 256 << 20
#: IOVA of the first byte (non-zero, so that address 0 is never valid)
DEFAULT_BASE = 0x1000_0000


def aligned_bytes(nbytes: int, align: int = ALIGN, zero: bool = True) -> np.ndarray:
    """A 1-D ``uint8`` array of ``nbytes`` whose first byte is ``align``-aligned."""
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"negative size {nbytes}")
    raw = (np.zeros if zero else np.empty)(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip : skip + nbytes]


@dataclass(frozen=True)
class Region:
    """``size`` bytes of unified memory starting at ``iova``."""

    iova: int
    size: int
    name: str = ""

    @property
    def end(self) -> int:
        return self.iova + self.size

    def contains(self, iova: int, nbytes: int = 1) -> bool:
        return self.iova <= iova and iova + nbytes <= self.end

    def window(self, offset: int, size: int, name: str | None = None) -> "Region":
        """A sub-region ``[offset, offset + size)`` (checked)."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(f"window [{offset:#x}, {offset + size:#x}) outside {self}")
        return Region(self.iova + offset, size, self.name if name is None else name)

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"Region({self.iova:#x}+{self.size:#x}{label})"


class UnifiedMemory:
    """The emulated DRAM: a byte array plus a tile allocator over IOVAs."""

    def __init__(self, size: int = DEFAULT_SIZE, base: int = DEFAULT_BASE):
        if size <= 0 or size % TILE:
            raise ValueError(f"memory size must be a positive multiple of {TILE:#x}, got {size:#x}")
        if base % TILE or base <= 0 or base + size > 1 << 32:
            raise ValueError("base must be a non-zero tile multiple and the window fit 32-bit IOVAs")
        self.base = base
        self.size = size
        self.data = aligned_bytes(size)
        self._lock = threading.Lock()
        self._free = [(0, size // TILE)]  # (first tile, tile count), sorted, coalesced
        self._allocs: dict[int, Region] = {}  # iova -> Region
        self._starts: list[int] = []  # the allocations' iovas, sorted (they do not overlap)

    # -- allocation --------------------------------------------------------------------
    def alloc(self, nbytes: int, name: str = "", zero: bool = True) -> Region:
        """Allocate ``nbytes`` rounded up to whole tiles (first fit)."""
        if nbytes <= 0:
            raise ValueError(f"allocation size must be positive, got {nbytes}")
        tiles = round_up(nbytes, TILE) // TILE
        with self._lock:
            for i, (start, count) in enumerate(self._free):
                if count >= tiles:
                    if count == tiles:
                        del self._free[i]
                    else:
                        self._free[i] = (start + tiles, count - tiles)
                    region = Region(self.base + start * TILE, tiles * TILE, name)
                    self._allocs[region.iova] = region
                    bisect.insort(self._starts, region.iova)
                    break
            else:
                free = sum(c for _, c in self._free)
                raise DeviceMemoryError(
                    f"unified memory exhausted: {tiles} tiles requested, "
                    f"{free} free in {len(self._free)} fragments"
                )
        if zero:
            self.data[region.iova - self.base : region.end - self.base] = 0
        return region

    def free(self, region: Region) -> None:
        """Return an allocation to the allocator."""
        with self._lock:
            if self._allocs.get(region.iova) != region:
                raise ValueError(f"{region} is not a live allocation")
            del self._allocs[region.iova]
            del self._starts[bisect.bisect_left(self._starts, region.iova)]
            start, count = (region.iova - self.base) // TILE, region.size // TILE
            self._free.append((start, count))
            self._free.sort()
            merged = []
            for s, c in self._free:
                if merged and merged[-1][0] + merged[-1][1] == s:
                    merged[-1] = (merged[-1][0], merged[-1][1] + c)
                else:
                    merged.append((s, c))
            self._free = merged

    @property
    def allocations(self) -> list[Region]:
        with self._lock:
            return sorted(self._allocs.values(), key=lambda r: r.iova)

    @property
    def available(self) -> int:
        with self._lock:
            return sum(c for _, c in self._free) * TILE

    def region_of(self, iova: int) -> Region | None:
        """The part of the allocation holding ``iova`` from ``iova`` to its end, or None."""
        region = self.allocation_of(iova)
        return None if region is None else Region(iova, region.end - iova, region.name)

    def allocation_of(self, iova: int) -> Region | None:
        """The live allocation holding ``iova`` (the whole of it), or None: the one starting
        last at or below ``iova`` (a bisection of the sorted starts)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, iova) - 1
            region = self._allocs[self._starts[i]] if i >= 0 else None
        return region if region is not None and region.contains(iova) else None

    def is_live(self, region: Region) -> bool:
        """Whether ``region`` (an allocation :meth:`allocation_of` returned) is still allocated."""
        return self._allocs.get(region.iova) is region

    # -- access --------------------------------------------------------------------------
    def offset(self, iova: int, nbytes: int, what: str = "access") -> int:
        """Index into :attr:`data` of ``[iova, iova + nbytes)``; faults outside the window."""
        off = int(iova) - self.base
        if nbytes < 0 or off < 0 or off + nbytes > self.size:
            raise DMARangeFault(
                f"{what}: [{int(iova):#x}, {int(iova) + nbytes:#x}) is outside "
                f"unified memory [{self.base:#x}, {self.base + self.size:#x})",
                iova=int(iova),
                nbytes=nbytes,
            )
        return off

    def view(self, iova: int, nbytes: int) -> np.ndarray:
        """A writable ``uint8`` view of ``[iova, iova + nbytes)`` (no copy)."""
        off = self.offset(iova, nbytes)
        return self.data[off : off + nbytes]

    def read(self, iova: int, nbytes: int) -> bytes:
        return self.view(iova, nbytes).tobytes()

    def write(self, iova: int, payload) -> None:
        src = np.frombuffer(memoryview(payload).cast("B"), dtype=np.uint8)
        self.view(iova, src.size)[:] = src

    def __repr__(self) -> str:
        return (
            f"UnifiedMemory({self.size >> 20} MiB at {self.base:#x}, "
            f"{len(self._allocs)} allocations, {self.available >> 10} KiB free)"
        )


class BARTable:
    """BAR slots 0..31 -> regions of unified memory (None = unmapped)."""

    def __init__(self, memory: UnifiedMemory, slots=None):
        self.memory = memory
        self.slots: list[Region | None] = [None] * NUM_BARS
        for slot, region in (slots or {}).items():
            self.map(slot, region)

    @classmethod
    def from_iovas(cls, memory: UnifiedMemory, iovas) -> "BARTable":
        """Rebuild a table from the 32 BAR registers of a task queue (0 = unmapped).

        Registers hold an IOVA only; the region extends to the end of the allocation
        holding it (the extent of the IOMMU mapping).  An IOVA inside no allocation
        leaves the slot unmapped, and a task naming it faults.
        """
        table = cls(memory)
        for slot, iova in enumerate(iovas):
            if iova:
                table.slots[slot] = memory.region_of(iova)
        return table

    def map(self, slot: int, region: Region) -> None:
        self._check_slot(slot)
        if not isinstance(region, Region):
            raise TypeError(f"BAR {slot}: expected a Region, got {type(region).__name__}")
        self.memory.offset(region.iova, region.size, f"BAR {slot}")
        self.slots[slot] = region

    def unmap(self, slot: int) -> None:
        self._check_slot(slot)
        self.slots[slot] = None

    def iovas(self) -> list[int]:
        """The values a driver writes to the TQ BAR registers."""
        return [r.iova if r is not None else 0 for r in self.slots]

    def __getitem__(self, slot: int) -> Region | None:
        self._check_slot(slot)
        return self.slots[slot]

    def __setitem__(self, slot: int, region: Region) -> None:
        self.map(slot, region)

    def resolve(self, slot: int, offset: int, nbytes: int, what: str = "DMA") -> int:
        """Index into ``memory.data`` of ``nbytes`` at ``offset`` in BAR ``slot``.

        Raises :class:`BARFault` if the slot is unmapped and :class:`DMARangeFault` if
        the range leaves the slot's region.
        """
        region = self.slots[slot] if 0 <= slot < NUM_BARS else None
        if region is None:
            raise BARFault(f"{what}: BAR slot {slot} is not mapped", slot=slot)
        if offset < 0 or nbytes < 0 or offset + nbytes > region.size:
            raise DMARangeFault(
                f"{what}: bytes [{offset:#x}, {offset + nbytes:#x}) of BAR slot {slot} reach "
                f"past its region {region} (size {region.size:#x})",
                slot=slot,
                offset=offset,
                nbytes=nbytes,
                region=region,
            )
        return self.memory.offset(region.iova + offset, nbytes, what)

    @staticmethod
    def _check_slot(slot: int) -> None:
        if not isinstance(slot, (int, np.integer)) or not 0 <= slot < NUM_BARS:
            raise ValueError(f"BAR slot must be an integer in 0..{NUM_BARS - 1}, got {slot!r}")

    def __repr__(self) -> str:
        mapped = ", ".join(f"{i}: {r}" for i, r in enumerate(self.slots) if r is not None)
        return f"BARTable({{{mapped}}})"
