"""The machine's numbers, once: the M1 ANE as fastane models it (SPEC 1, 5 and 6).

Every other module takes these from here (the TD emitter, KernelDMA, the NE's bias/LUT
placement, L2, the lowering and the roofline).  This module is the bottom layer: it
imports nothing of fastane.

* :data:`CORES` NE cores, each with :data:`KMEM_CORE_BYTES` of kernel memory (KMem) fed by
  one KernelDMA lane; :data:`L2_BYTES` of L2, addressed in :data:`L2_UNIT`-byte units.
* DRAM: every DMA base and stride is a multiple of :data:`ALIGN` bytes; unified memory is
  allocated in :data:`TILE`-byte tiles; a task sees :data:`NUM_BARS` BAR slots.
* A TD is :data:`TD_SIZE` bytes, chained :data:`TD_STRIDE` apart; one submission runs at
  most :data:`MAX_CHAIN` TDs (TM_INFO's 16-bit count).
* A LUT coefficient block is :data:`LUT_WORDS` u16 words in :data:`LUT_BLOCK` bytes of
  core 0's KMem.
* :data:`FORMATS`: the TD's format codes and their element bytes.
* :class:`Limits`: what one task may hold, with the widths of the TD fields;
  :func:`kernel_layout`: **the** KMem layout rule (``m = ceil(Cout / 16)`` output
  channels per core; each core's kernels -- after a palettized kernel's palette --, then its
  biases, then on core 0 the LUT block); :func:`packed_bytes`: a channel's kernel bytes
  for an element size in bits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CORES",
    "KMEM_CORE_BYTES",
    "L2_BYTES",
    "L2_UNIT",
    "ALIGN",
    "TILE",
    "NUM_BARS",
    "TD_SIZE",
    "TD_STRIDE",
    "MAX_CHAIN",
    "LUT_WORDS",
    "LUT_BLOCK",
    "DTYPES",
    "FORMATS",
    "FP16",
    "round_up",
    "Limits",
    "LIMITS",
    "KernelLayout",
    "kernel_layout",
    "channels_per_core",
    "core_bytes",
    "packed_bytes",
    "size_str",
]

#: NE cores (and KernelDMA lanes: lane k feeds core k's KMem)
CORES = 16
#: bytes of kernel memory per core
KMEM_CORE_BYTES = 64 << 10
#: bytes of L2, and the unit its addresses and strides count in
L2_BYTES = 2 << 20
L2_UNIT = 16
#: DMA alignment: every DRAM base address and stride is a multiple of it (SPEC 5)
ALIGN = 64
#: allocation unit of unified memory (and of a corpus program's buffers)
TILE = 0x4000
#: BAR slots a task addresses
NUM_BARS = 32
#: bytes of one task descriptor (157 words), and the distance between chained TDs
TD_SIZE = 0x274
TD_STRIDE = 0x300
#: most TDs in one submitted chain (TM_INFO's 16-bit count)
MAX_CHAIN = 0xFFFF
#: a LUT coefficient block: 43 u16 words, zero padded to 0x80 bytes of KMem
LUT_WORDS = 43
LUT_BLOCK = 0x80
#: TD format codes (``ChCfg.InFmt``/``OutFmt``, ``KernelFmt``, ``Fmt.MemFmt``) -> element type,
#: and -> bytes per element
DTYPES = {0: np.dtype(np.uint8), 1: np.dtype(np.int8), 2: np.dtype(np.float16)}
FORMATS = {code: dt.itemsize for code, dt in DTYPES.items()}
#: the fp16 format code
FP16 = 2


def round_up(n: int, m: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``m`` (default: the DMA alignment)."""
    return -(-int(n) // m) * m


def size_str(n: int) -> str:
    """``n`` bytes as "2 MiB", "64 KiB" or "100-byte" (for messages)."""
    if n >= 1 << 20 and not n % (1 << 20):
        return f"{n >> 20} MiB"
    return f"{n >> 10} KiB" if n >= 1024 and not n % 1024 else f"{n}-byte"


@dataclass(frozen=True)
class Limits:
    """What one task may hold (SPEC 1 and 5, and the widths of the TD fields).  The
    lowering tiles by it; smaller values make small tests tile."""

    cores: int = CORES
    kmem_core_bytes: int = KMEM_CORE_BYTES
    l2_bytes: int = L2_BYTES
    max_channels: int = 65536  # SPEC 5: C
    max_hw: int = 16384  # SPEC 5: H, W
    max_groups: int = 8191  # Common.GroupConvCfg.NumGroups: 13 bits
    max_kernel: int = 31  # ConvCfg.Kh/Kw: 5 bits
    max_stride: int = 3  # ConvCfg.Sy/Sx: 2 bits
    max_dilation: int = 3  # ConvCfg.Oy/Ox: 2 bits
    max_padding: int = 31  # ConvCfg.Py/Px: 5 bits
    min_group: int = 16  # smallest kernel group the tiler tries
    col_align: int = ALIGN // FORMATS[FP16]  # fp16 columns in one 64-byte DMA burst
    max_chain: int = MAX_CHAIN  # TDs in one submitted chain
    #: fastane's decision, not the hardware's: the largest input it unfolds on the host
    #: (im2col) for a kernel, stride or dilation beyond the TD's fields (docs/lower.md,
    #: section 2); a larger one stays off the ANE (a 32 x 32 pooling window over a
    #: 64 x 256 x 256 map would unfold to 6.6 GB)
    max_unfold_bytes: int = 1 << 28

    @property
    def kmem_bytes(self) -> int:
        """KMem of all cores together."""
        return self.cores * self.kmem_core_bytes


LIMITS = Limits()


# ------------------------------------------------------------------ the KMem layout rule
def channels_per_core(cout: int, cores: int = CORES) -> int:
    """``m = ceil(cout / 16)``: the block of output channels each core holds."""
    return -(-cout // cores)


def packed_bytes(n: int, bits: int) -> int:
    """Bytes of ``n`` kernel elements of ``bits`` bits each (16 fp16, 8 int8/uint8, 1-8 a
    palettized kernel's codes), packed back to back (whole bytes): one output channel's
    kernel, the ``per_channel`` of :func:`kernel_layout`."""
    return -(-int(n) * int(bits) // 8)


def core_bytes(
    m: int, per_channel: int, bias_vector: bool = False, lut: bool = False, prefix: int = 0
) -> int:
    """KMem bytes of one core holding ``m`` output channels of ``per_channel`` kernel bytes:
    ``prefix`` bytes before them (a palettized kernel's palette, a multiple of 64) and the
    kernels (padded to 64), then ``m`` fp16 biases (padded to 64), then the LUT block."""
    return (
        round_up(prefix + m * per_channel)
        + (round_up(FORMATS[FP16] * m) if bias_vector else 0)
        + (LUT_BLOCK if lut else 0)
    )


@dataclass(frozen=True)
class KernelLayout:
    """Where one task's coefficients sit in its kernel BAR slot, and so in KMem: output
    channels dealt to the cores in blocks of ``m``; core ``l``'s buffer is its channels'
    kernels (``wbytes``, padded to 64), then the bias vector (``bbytes``: ``m`` fp16 values
    padded to 64, with a per-channel bias), then, on core 0 only, the 0x80-byte LUT
    coefficient block (``lut_bytes``).  Core ``l`` reads ``sizes[l]`` bytes at
    ``base + offsets[l]``."""

    cout: int
    per_channel: int  # kernel bytes of one output channel (packed_bytes(Cin/groups x Kh x Kw, bits))
    m: int  # output channels per core
    lanes: int  # cores used
    wbytes: int
    bbytes: int
    lut_bytes: int
    offsets: tuple
    sizes: tuple

    @property
    def nbytes(self) -> int:
        """Bytes of the whole layout in the kernel slot."""
        return self.offsets[-1] + self.sizes[-1]

    @property
    def core_bytes(self) -> int:
        """The most any core loads (core 0: it holds the LUT block)."""
        return max(self.sizes)

    @property
    def bias_offset(self) -> int:
        """Where a core's biases start in its KMem."""
        return self.wbytes

    @property
    def lut_offset(self) -> int:
        """Where the LUT block starts in core 0's KMem."""
        return self.wbytes + self.bbytes


@functools.lru_cache(maxsize=1024)
def kernel_layout(
    cout: int, per_channel: int, bias_vector: bool = False, lut: bool = False, prefix: int = 0
) -> KernelLayout:
    """The :class:`KernelLayout` of ``cout`` (>= 1) output channels of ``per_channel`` bytes
    each (:func:`packed_bytes`: the element size is the caller's), after ``prefix`` bytes
    of each core's kernel buffer (a palette; ``wbytes`` includes it)."""
    m = channels_per_core(cout)
    lanes = -(-cout // m)
    wbytes = round_up(prefix + m * per_channel)
    first = core_bytes(m, per_channel, bias_vector, lut, prefix)
    rest = core_bytes(m, per_channel, bias_vector, prefix=prefix)
    offsets = tuple(0 if k == 0 else first + (k - 1) * rest for k in range(lanes))
    sizes = tuple(first if k == 0 else rest for k in range(lanes))
    return KernelLayout(cout, per_channel, m, lanes, wbytes, rest - wbytes, first - rest, offsets, sizes)
