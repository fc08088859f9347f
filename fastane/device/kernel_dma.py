"""KernelDMA: the 16 coefficient lanes, DRAM -> the 16 x 64 KiB kernel memories (KMem).

Lane ``l`` (``KernelDMASrc.CoeffDMAConfig[l].En``) copies ``CoeffBfrSize[l].MemBfrSize``
x 64 bytes from byte ``CoeffBaseAddr[l].Addr`` x 64 of its kernel BAR slot into the KMem
of core ``l``.  **Decision**: the lane's 2-bit ``CrH`` field selects which of the TD's four
kernel slots it reads (``Header.KBase{CrH}``, which must be enabled by ``KBE{CrH}``).

**Decision: the weight layout in KMem** (shared with the TD builder,
:func:`fastane.td.conv_td`; the seed 1x1 convolution, Cout = 3, Cin = 8, enables lanes
0, 1, 2 with one 64-byte buffer each at kernel offsets 0, 64, 128):

* the output channels are dealt to the cores in blocks: with ``m = ceil(Cout / 16)``,
  core/lane ``l`` holds channels ``[l*m, min((l+1)*m, Cout))``; ``ceil(Cout / m)`` lanes
  are enabled, the rest disabled;
* a lane's bytes are its channels' kernels one after another, each ``Cin / groups x Kh
  x Kw`` weights in the TD's ``NE.KernelCfg.KernelFmt`` (fp16, int8 or uint8) in (input
  channel, kernel row, kernel column) order -- the MAC's accumulation order; the lane's
  buffer is zero-padded to a multiple of 64 bytes, ``coeff = round_up(m * Cin/groups *
  Kh * Kw * bytes, 64)``;
* lane ``l`` reads ``coeff`` bytes at kernel-slot offset ``l * coeff``
  (``CoeffBaseAddr[l] = l * coeff / 64``, ``CoeffBfrSize[l] = coeff / 64``).

:func:`pack_weights` produces those bytes and the lane registers for a TD builder;
:func:`unpack_weights` is what the MAC block reads back out of KMem.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from fastane.kernels import dma as _kdma
from fastane.kernels.fp16 import f16_bits_to_f64_array

from ..m1 import ALIGN, CORES, DTYPES, KMEM_CORE_BYTES, channels_per_core, kernel_layout
from . import palette
from .faults import BARFault, KMemOverflow

#: KernelDMA lanes (one per NE core) and the kernel memory of each core (fastane.m1)
LANES = CORES
KMEM_BYTES = KMEM_CORE_BYTES
_KMEM_WORDS = np.arange(LANES, dtype=np.int64) * (KMEM_BYTES // 2)  # core l's first fp16 word


@dataclass(frozen=True)
class Lane:
    """One enabled coefficient lane: where it reads (slot, byte offset) and how much."""

    lane: int
    slot: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class KernelDMAPlan:
    lanes: tuple  # of Lane
    #: absolute indices into unified memory, one per lane (checked)
    sources: tuple
    #: (lanes, sources, sizes) in int64 words for the copy kernel, or False (first load)
    _arrays: object = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def nbytes(self) -> int:
        return sum(lane.nbytes for lane in self.lanes)

    @functools.cached_property
    def halfwords(self):
        """Where each core's lane reads, in fp16 words of unified memory (int64[16]; 0 for a
        lane not loaded), or None when a source is at an odd byte."""
        if any(src % 2 for src in self.sources):
            return None
        out = np.zeros(LANES, np.int64)
        for lane, src in zip(self.lanes, self.sources):
            out[lane.lane] = src // 2
        return out

    @functools.cached_property
    def loaded(self) -> tuple:
        """The bytes each core's KMem holds after these lanes ran (0: not loaded)."""
        out = [0] * LANES
        for lane in self.lanes:
            out[lane.lane] = lane.nbytes
        return tuple(out)


def plan(regs: dict, bars, what: str = "KernelDMA") -> KernelDMAPlan:
    """Decode and bounds-check the lanes of a TD's register file (no data moves)."""
    lanes, sources = [], []
    for lane in range(LANES):
        if not regs[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"]:
            continue
        k = regs[f"KernelDMASrc.CoeffDMAConfig[{lane}].CrH"]
        if not regs[f"Header.KBE{k}"]:
            raise BARFault(
                f"{what} lane {lane} reads kernel slot KBase{k}, which is not enabled (Header.KBE{k} = 0)",
                lane=lane,
                slot=regs[f"Header.KBase{k}"],
            )
        slot = regs[f"Header.KBase{k}"]
        offset = regs[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] * ALIGN
        nbytes = regs[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] * ALIGN
        if nbytes > KMEM_BYTES:
            raise KMemOverflow(
                f"{what} lane {lane} loads {nbytes:#x} bytes into a {KMEM_BYTES:#x}-byte KMem",
                lane=lane,
                nbytes=nbytes,
            )
        sources.append(bars.resolve(slot, offset, nbytes, f"{what} lane {lane}"))
        lanes.append(Lane(lane, slot, offset, nbytes))
    return KernelDMAPlan(tuple(lanes), tuple(sources))


class KMem:
    """The 16 kernel memories, with what each lane last loaded.

    ``generation`` counts the loads that changed a byte of KMem: what was read out of it
    (the decoded weights) is still what it holds while the generation is the same.

    A *deferred* load (``load(..., lazy=True)``) records its plan instead of copying, for a
    task whose MAC reads the fp16 weights where KernelDMA reads them (:meth:`fp16_lanes`,
    and the NE its bias or table, :meth:`read`: the same bytes).  The copy is made when
    anything reads :attr:`data`, when the next
    load would leave some of its bytes in place, or at :meth:`settle`; the engine settles
    at the end of every run and defers only tasks whose TileDMADst does not write over
    their own kernel bytes, so nothing writes the bytes a deferred load reads before they
    are copied.  A deferred load counts as a change of generation (it is not compared)."""

    def __init__(self):
        self._data = np.zeros((LANES, KMEM_BYTES), dtype=np.uint8)
        self._data64 = self._data.view(np.int64)
        self._words = (None, None)  # (unified memory, its int64 view): checked aligned once
        self.loaded = (0,) * LANES  # bytes valid in each core's KMem
        self.generation = 0
        self._deferred = None  # (plan, unified memory) of a load not yet copied

    @property
    def data(self) -> np.ndarray:
        """The bytes of the 16 KMems, uint8[16, 64 KiB] (a deferred load copied in first)."""
        if self._deferred is not None:
            self.settle()
        return self._data

    def settle(self) -> None:
        """Copy a deferred load's bytes into KMem (nothing when there is none)."""
        d, self._deferred = self._deferred, None
        if d is not None:
            p, memory = d
            for lane, src in zip(p.lanes, p.sources):
                self._data[lane.lane, : lane.nbytes] = memory[src : src + lane.nbytes]

    def read(self, lanes: int, offset: int, nbytes: int) -> np.ndarray:
        """A copy of bytes ``[offset, offset + nbytes)`` of the first ``lanes`` cores' KMem
        (uint8 ``[lanes, nbytes]``; a deferred load's bytes read where it reads them)."""
        out = self._data[:lanes, offset : offset + nbytes].copy()
        d = self._deferred
        if d is not None:
            p, memory = d
            for lane, src in zip(p.lanes, p.sources):
                n = min(nbytes, lane.nbytes - offset)
                if lane.lane < lanes and n > 0:
                    out[lane.lane, :n] = memory[src + offset : src + offset + n]
        return out

    def fp16_lanes(self) -> tuple:
        """``(k16, base)``: the fp16 patterns core ``l``'s KMem holds start at ``k16[base[l]]``
        (``k16`` uint16, 1-D): unified memory where a deferred load reads them, else KMem."""
        d = self._deferred
        if d is None:
            return self._data.reshape(-1).view(np.uint16), _KMEM_WORDS
        p, memory = d
        return memory.view(np.uint16), p.halfwords

    def load(self, p: KernelDMAPlan, memory: np.ndarray, lazy: bool = False) -> int:
        """Run the lanes of plan ``p`` against the unified-memory bytes; bytes moved.
        ``lazy``: defer the copy (see the class), when the lanes are at even bytes."""
        d = self._deferred
        if lazy and p.lanes and memory.size % 2 == 0 and p.halfwords is not None:
            if (
                d is not None
                and d[0].loaded != p.loaded
                and any(n > m for n, m in zip(d[0].loaded, p.loaded))
            ):
                self.settle()  # bytes the new load leaves in place: copied first
            self._deferred = (p, memory)
            self.loaded = p.loaded
            self.generation += 1
            return p.nbytes
        if d is not None:
            self.settle()
        self.loaded = p.loaded
        if not p.lanes:
            return 0
        arrays = p._arrays
        if arrays is None:  # the lanes in int64 words, if they are whole words
            words = all(src % 8 == 0 and lane.nbytes % 8 == 0 for lane, src in zip(p.lanes, p.sources))
            arrays = words and (
                np.array([lane.lane for lane in p.lanes], np.int64),
                np.array(p.sources, np.int64) // 8,
                np.array([lane.nbytes for lane in p.lanes], np.int64) // 8,
            )
            object.__setattr__(p, "_arrays", arrays)
        words = self._words[1] if self._words[0] is memory else None
        if arrays and words is None and memory.ctypes.data % 8 == 0 and memory.size % 8 == 0:
            words = memory.view(np.int64)
            self._words = (memory, words)  # a device's unified memory: the same array each task
        if arrays and words is not None:
            # every lane is 64-byte aligned and sized: one pass that copies and compares
            if _kdma.load_lanes(words, *arrays, self._data64):
                self.generation += 1
        else:
            for lane, src in zip(p.lanes, p.sources):
                self._data[lane.lane, : lane.nbytes] = memory[src : src + lane.nbytes]
            self.generation += 1
        return p.nbytes


# -- the weight layout --------------------------------------------------------------------
def lane_channels(cout: int, lane: int) -> range:
    """The output channels core ``lane`` holds."""
    m = channels_per_core(cout)
    return range(lane * m, min((lane + 1) * m, cout))


def lane_stride(cout: int, cin_per_group: int, kh: int, kw: int, fmt=2) -> int:
    """``coeff``: the bytes of one lane's buffer, padded to 64 (``fmt``: a ``KernelFmt``
    code, or a :class:`fastane.device.palette.Palettized` kernel, palette included)."""
    if cout <= 0:
        return 0
    n = cin_per_group * kh * kw
    return kernel_layout(cout, palette.channel_bytes(fmt, n), prefix=palette.prefix_bytes(fmt)).wbytes


def lane_bytes(cout: int, cin_per_group: int, kh: int, kw: int, fmt=2) -> list[int]:
    """Bytes of kernel each of the 16 cores reads from its KMem (0 = lane unused; a
    palettized kernel's palette counts)."""
    per = palette.channel_bytes(fmt, cin_per_group * kh * kw)
    pre = palette.prefix_bytes(fmt)
    m = channels_per_core(cout)
    return [
        (pre + k * per if k > 0 else 0) for k in (max(0, min(m, cout - lane * m)) for lane in range(LANES))
    ]


def check_fits(cout: int, cin_per_group: int, kh: int, kw: int, fmt=2) -> None:
    """Raise :class:`KMemOverflow` if a lane's share of the kernel exceeds its 64 KiB."""
    need = lane_stride(cout, cin_per_group, kh, kw, fmt)
    if need > KMEM_BYTES:
        raise KMemOverflow(
            f"a kernel of {cout} x {cin_per_group} x {kh} x {kw} needs {need:#x} "
            f"bytes in one core's KMem (capacity {KMEM_BYTES:#x}); split Cout "
            f"or Cin across tasks",
            nbytes=need,
        )


def pack_weights(w, fmt: int = 2, base: int = 0) -> tuple[bytes, dict]:
    """Weights ``[Cout, Cin/groups, Kh, Kw]`` -> (kernel bytes, TD field values of the lanes).

    ``base`` is the byte offset of these bytes in the kernel BAR slot (a multiple of 64).
    Returns the bytes (``coeff`` bytes per enabled lane) and the ``KernelDMASrc`` fields
    (``CoeffDMAConfig[l].En``, ``CoeffBaseAddr[l].Addr``, ``CoeffBfrSize[l].MemBfrSize``)
    to write into the TD; every lane's ``MemBfrSize`` is ``coeff / 64``, as in the
    compiler's TDs.
    """
    w = np.asarray(w)
    if w.ndim != 4 or min(w.shape) < 1:
        raise ValueError(f"weights must be a non-empty [Cout, Cin/groups, Kh, Kw], got shape {w.shape}")
    if base % ALIGN:
        raise ValueError(f"kernel base offset {base} is not a multiple of {ALIGN}")
    cout, cin_g, kh, kw = w.shape
    check_fits(cout, cin_g, kh, kw, fmt)
    coeff = lane_stride(cout, cin_g, kh, kw, fmt)
    flat = np.ascontiguousarray(w.astype(DTYPES[fmt]))
    out = bytearray()
    fields = {}
    for lane in range(LANES):
        chans = lane_channels(cout, lane)
        fields[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"] = int(len(chans) > 0)
        fields[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] = (base + len(out)) // ALIGN if chans else 0
        fields[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] = coeff // ALIGN
        if chans:
            block = flat[chans.start : chans.stop].tobytes()
            out += block + bytes(coeff - len(block))
    return bytes(out), fields


def unpack_weights(kmem: KMem, cout: int, cin_g: int, kh: int, kw: int, fmt=2, out=None) -> np.ndarray:
    """The ``[Cout, Cin/groups, Kh, Kw]`` weights (float64, exact) the cores hold in KMem
    (a palettized kernel: each core's palette at its codes); decoded into ``out`` (a
    C-contiguous float64 array of ``Cout*Cin/groups*Kh*Kw`` elements) when given."""
    if out is None:
        out = np.empty(cout * cin_g * kh * kw, dtype=np.float64)
    if isinstance(fmt, palette.Palettized):
        w = out.reshape(cout, cin_g * kh * kw)
        palette.decode(kmem.data, fmt, cout, cin_g * kh * kw, w)
        return w.reshape(cout, cin_g, kh, kw)
    dtype = DTYPES[fmt]
    per = cin_g * kh * kw * dtype.itemsize
    w = out.reshape(cout, cin_g * kh * kw)
    m = channels_per_core(cout)
    flat = w.reshape(-1)
    n = per // dtype.itemsize
    if fmt == 2:  # fp16: the Numba decoder is about twice numpy's cast; one call for the
        # full lanes (their channels gathered in lane order, a copy of the fp16 bytes), one
        # for the last lane's rest
        full = cout // m
        if full:
            bits = np.ascontiguousarray(kmem.data[:full, : m * per]).view(np.uint16).reshape(-1)
            f16_bits_to_f64_array(bits, flat[: full * m * n])
        if full * m < cout:
            f16_bits_to_f64_array(
                kmem.data[full, : (cout - full * m) * per].view(np.uint16), flat[full * m * n :]
            )
        return w.reshape(cout, cin_g, kh, kw)
    for lane in range(-(-cout // m)):
        lo, hi = lane * m, min((lane + 1) * m, cout)
        w[lo:hi] = kmem.data[lane, : (hi - lo) * per].view(dtype).reshape(hi - lo, -1)
    return w.reshape(cout, cin_g, kh, kw)


def _used_lanes(cout: int, cin_g: int, kh: int, kw: int, fmt=2) -> list[tuple[int, int]]:
    """``(lane, bytes)`` of the KMem bytes the MAC reads for a ``[Cout, Cin/groups, Kh, Kw]``
    kernel (each lane's channels, or a palettized kernel's palette and codes), lane order."""
    if isinstance(fmt, palette.Palettized):
        return [(lane, n) for lane, n in enumerate(lane_bytes(cout, cin_g, kh, kw, fmt)) if n]
    per = cin_g * kh * kw * DTYPES[fmt].itemsize
    m = channels_per_core(cout)
    full = cout // m
    rest = (cout - full * m) * per
    return [(lane, m * per) for lane in range(full)] + ([(full, rest)] if rest else [])


def fp16_channels(kmem: KMem, cout: int, cin_g: int, kh: int, kw: int, fmt=2):
    """``(k16, base, per_lane, lanes, sizes)``: a plain fp16 kernel where KMem holds it --
    output channel ``n`` at ``k16[base[n // per_lane] + (n % per_lane) * c:][:c]`` (``c =
    Cin/groups * Kh * Kw``; ``k16``, ``base``: :meth:`KMem.fp16_lanes`), and the lanes the
    MAC reads with their sizes in fp16 values -- or None for another format (palettized,
    int8)."""
    if isinstance(fmt, palette.Palettized) or DTYPES[fmt] != np.float16:
        return None
    return (*kmem.fp16_lanes(), channels_per_core(cout), *_fp16_lanes(cout, cin_g, kh, kw))


@functools.lru_cache(maxsize=256)
def _fp16_lanes(cout: int, cin_g: int, kh: int, kw: int) -> tuple:
    """``(lanes, sizes)`` of :func:`fp16_channels` (int64 arrays, read-only; kept per shape)."""
    lanes = _used_lanes(cout, cin_g, kh, kw, 2)
    out = np.array([lane for lane, _ in lanes], np.int64), np.array([n // 2 for _, n in lanes], np.int64)
    for a in out:
        a.flags.writeable = False
    return out


def used_bytes(kmem: KMem, cout: int, cin_g: int, kh: int, kw: int, fmt=2) -> np.ndarray:
    """A copy (uint8, 1-D) of the KMem bytes the MAC reads for a ``[Cout, Cin/groups, Kh,
    Kw]`` kernel (each lane's channels, lane after lane): what its decoded weights depend
    on.  :func:`holds` compares KMem with such a copy in place."""
    lanes = _used_lanes(cout, cin_g, kh, kw, fmt)
    out = np.empty(sum(n for _, n in lanes), np.uint8)
    o = 0
    for lane, n in lanes:
        out[o : o + n] = kmem.data[lane, :n]
        o += n
    return out


def holds(kmem: KMem, cout: int, cin_g: int, kh: int, kw: int, fmt, used: np.ndarray) -> bool:
    """Whether KMem holds exactly the bytes :func:`used_bytes` copied into ``used`` for this
    kernel (compared byte for byte, in place: no copy of KMem is made)."""
    lanes = _used_lanes(cout, cin_g, kh, kw, fmt)
    if sum(n for _, n in lanes) != used.size:
        return False
    word = 8 if all(n % 8 == 0 for _, n in lanes) else 1  # KMem rows and the copy: 8-aligned
    dt = np.int64 if word == 8 else np.uint8
    idx = np.array([lane for lane, _ in lanes], np.int64)
    sizes = np.array([n // word for _, n in lanes], np.int64)
    return _kdma.lanes_equal(kmem.data.view(dt), idx, sizes, used.view(dt))


def check_loaded(p: KernelDMAPlan, cout: int, cin_g: int, kh: int, kw: int, fmt=2, what: str = "MAC") -> None:
    """Fault unless every core the convolution uses had its kernel loaded by KernelDMA."""
    loaded = {lane.lane: lane.nbytes for lane in p.lanes}
    for lane, need in enumerate(lane_bytes(cout, cin_g, kh, kw, fmt)):
        if need > KMEM_BYTES:
            raise KMemOverflow(
                f"{what}: core {lane} needs {need:#x} bytes of kernel, more than "
                f"its {KMEM_BYTES:#x}-byte KMem",
                lane=lane,
                nbytes=need,
            )
        if need and loaded.get(lane, 0) < need:
            raise KMemOverflow(
                f"{what}: core {lane} reads {need:#x} bytes of kernel "
                f"({cout} x {cin_g} x {kh} x {kw}), but KernelDMA loaded only "
                f"{loaded.get(lane, 0):#x} into its KMem",
                lane=lane,
                nbytes=need,
            )
