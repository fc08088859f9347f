"""Palettized kernels in the NE (``NE.KernelCfg.PalettizedEn``): what Core ML's palettized
weights become on the device, and how fastane keeps them compressed in KMem.

**Decisions** (nothing of the silicon's palette format is known beyond the field names;
docs/numerics.md, "Compressed kernels"):

* ``PalettizedEn = 1`` with ``PalettizedBits = b`` (1..8; other values are refused): every
  weight is a ``b``-bit code into a palette of ``2**b`` entries in ``KernelFmt``, which must
  be fp16 (2) -- the FP16 path; the INT8 path refuses palettes.
* Each core's kernel buffer in KMem starts with its palette: ``2**b`` fp16 values,
  ``2**(b+1)`` bytes padded to 64 (:func:`prefix_bytes`; a core may have its own palette,
  as Core ML's per-grouped-channel palettes need).  Then come its channels' codes in the
  KernelDMA order (channel by channel; in a channel, input channel, kernel row, kernel
  column), each channel's ``Cin/groups x Kh x Kw`` codes packed LSB first into
  ``ceil(n x b / 8)`` bytes (:func:`fastane.m1.packed_bytes`: a channel starts on a byte),
  then the biases and the LUT block as usual (:func:`fastane.m1.kernel_layout` with the
  palette as its ``prefix``).
* The MAC reads the fp16 weight ``palette[code]``: a palettized convolution is, bit for bit,
  the same convolution with the looked-up fp16 weights.  KernelDMA moves the compressed
  bytes (palette + codes), which is what the Stats and the roofline count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..m1 import ALIGN, CORES, DTYPES, FP16, kernel_layout, packed_bytes, round_up
from .faults import UnsupportedTask

__all__ = [
    "Palettized",
    "MAX_BITS",
    "kernel_format",
    "prefix_bytes",
    "channel_bytes",
    "pack",
    "decode",
]

#: the widest code (``PalettizedBits`` is 4 bits wide; codes index at most 256 entries)
MAX_BITS = 8


@dataclass(frozen=True)
class Palettized:
    """A palettized kernel format: ``bits``-bit codes into an fp16 palette (what
    :func:`kernel_format` returns in place of a ``KernelFmt`` code)."""

    bits: int

    @property
    def entries(self) -> int:
        return 1 << self.bits


def kernel_format(regs: dict, what: str):
    """The kernel format of a task: its ``KernelFmt`` code, or a :class:`Palettized` when
    ``PalettizedEn`` is set (checked: 1-8 bits, fp16 entries)."""
    fmt = regs["NE.KernelCfg.KernelFmt"]
    if not regs["NE.KernelCfg.PalettizedEn"]:
        return fmt
    bits = regs["NE.KernelCfg.PalettizedBits"]
    if not 1 <= bits <= MAX_BITS:
        raise UnsupportedTask(
            f"{what}: NE.KernelCfg.PalettizedBits = {bits}: palettized codes have 1 to 8 bits"
        )
    if fmt != FP16:
        raise UnsupportedTask(
            f"{what}: a palette of KernelFmt {fmt} entries is not emulated (palettes hold fp16 values, KernelFmt 2)"
        )
    return Palettized(bits)


def prefix_bytes(fmt) -> int:
    """Bytes before a core's kernels: a palette (padded to 64), or 0 for a plain format."""
    return round_up(2 * fmt.entries, ALIGN) if isinstance(fmt, Palettized) else 0


def channel_bytes(fmt, n: int) -> int:
    """Bytes of one output channel's ``n`` weights in the kernel format ``fmt``."""
    bits = fmt.bits if isinstance(fmt, Palettized) else 8 * DTYPES[fmt].itemsize
    return packed_bytes(n, bits)


def pack(codes, palettes, bits: int, base: int = 0, bias=None, lut=None) -> tuple[bytes, dict]:
    """A palettized kernel's KernelDMA bytes and lane registers (the counterpart of
    :func:`fastane.device.kernel_dma.pack_weights`).

    ``codes``: integers ``[Cout, Cin/groups, Kh, Kw]`` in ``[0, 2**bits)``; ``palettes``:
    fp16 ``[2**bits]`` (one palette for every core) or ``[cores used, 2**bits]`` (one per
    core); ``bias``: optional fp16 ``[Cout]`` (``MatrixBiasEn``: stored after each core's
    codes); ``lut``: optional 0x80-byte LUT coefficient block (after core 0's biases);
    ``base``: the bytes' offset in the kernel slot (a multiple of 64)."""
    codes = np.asarray(codes)
    if codes.ndim != 4 or min(codes.shape) < 1:
        raise ValueError(f"codes must be a non-empty [Cout, Cin/groups, Kh, Kw], got shape {codes.shape}")
    if not 1 <= bits <= MAX_BITS:
        raise ValueError(f"bits must be 1..{MAX_BITS}, got {bits}")
    if codes.dtype.kind not in "iu" or codes.min() < 0 or codes.max() >= 1 << bits:
        raise ValueError(f"codes must be integers in [0, {1 << bits}) for {bits}-bit codes")
    if base % ALIGN:
        raise ValueError(f"kernel base offset {base} is not a multiple of {ALIGN}")
    fmt = Palettized(bits)
    cout = codes.shape[0]
    n = int(np.prod(codes.shape[1:]))
    lay = kernel_layout(cout, channel_bytes(fmt, n), bias is not None, lut is not None, prefix_bytes(fmt))
    pal = np.asarray(palettes)
    if pal.dtype != np.float16:
        raise TypeError(f"palettes must be float16, got {pal.dtype}")
    pal = np.broadcast_to(pal.reshape(-1, fmt.entries) if pal.ndim == 2 else pal, (lay.lanes, fmt.entries))
    flat = codes.reshape(cout, n).astype(np.uint16)
    out = bytearray()
    fields = {}
    for lane in range(CORES):
        lo, hi = lane * lay.m, min((lane + 1) * lay.m, cout)
        used = lane < lay.lanes
        fields[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"] = int(used)
        fields[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] = (base + len(out)) // ALIGN if used else 0
        fields[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] = lay.sizes[min(lane, lay.lanes - 1)] // ALIGN
        if not used:
            continue
        buf = bytearray(lay.sizes[lane])
        table = np.ascontiguousarray(pal[lane]).view(np.uint16).astype("<u2").tobytes()
        buf[: len(table)] = table
        off = prefix_bytes(fmt)
        for ch in range(lo, hi):
            bits_le = ((flat[ch][:, None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(-1)
            packed = np.packbits(bits_le, bitorder="little").tobytes()
            buf[off : off + len(packed)] = packed
            off += lay.per_channel
        if bias is not None:
            b = np.asarray(bias, np.float16)[lo:hi].astype("<f2").tobytes()
            buf[lay.bias_offset : lay.bias_offset + len(b)] = b
        if lut is not None and lane == 0:
            buf[lay.lut_offset : lay.lut_offset + len(lut)] = lut
        out += buf
    return bytes(out), fields


def decode(kmem_data: np.ndarray, fmt: Palettized, cout: int, n: int, out: np.ndarray) -> None:
    """The MAC's read of a palettized kernel: ``out`` (float64 ``[Cout, n]``) = each core's
    palette at its channels' codes (exact fp16 values)."""
    lay = kernel_layout(cout, channel_bytes(fmt, n), prefix=prefix_bytes(fmt))
    weights = np.arange(fmt.bits, dtype=np.int64)
    for lane in range(lay.lanes):
        lo, hi = lane * lay.m, min((lane + 1) * lay.m, cout)
        row = kmem_data[lane]
        table = row[: 2 * fmt.entries].copy().view("<f2").astype(np.float64)
        body = row[prefix_bytes(fmt) : prefix_bytes(fmt) + (hi - lo) * lay.per_channel]
        bits_le = np.unpackbits(body.reshape(hi - lo, lay.per_channel), axis=1, bitorder="little")
        bits_le = bits_le[:, : n * fmt.bits].reshape(hi - lo, n, fmt.bits).astype(np.int64)
        out[lo:hi] = table[(bits_le << weights).sum(axis=2)]
