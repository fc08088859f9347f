"""Tile DMA: TileDMASrc (DRAM -> L2) and TileDMADst (L2 -> DRAM).

Both address a C x H x W tensor in a BAR slot with strides in 64-byte units:

    byte(c, h, w) = BaseAddr + c * PlaneStride + h * RowStride + w * bytes

**Decision**: ``DepthStride`` and ``GroupStride`` do not take part in the addressing.
They step the depth dimension D and tensor groups of 5-D tensors; fastane's tasks have
one depth slice and one group (the seed and the TD builder set both to the whole tensor,
``C x PlaneStride``), and a grouped convolution's groups are ranges of channels.

The DMA moves whole 64-byte bursts: each row of ``W * bytes``
costs ``round_up(W * bytes, 64)`` bytes, which is what the Stats count, and the
destination zero-fills the tail of each row's last burst when ``Fmt.ZeroPadLast`` is set
(otherwise those bytes are left untouched).  Every range is checked against the BAR
region before a byte moves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastane.kernels import dma

from .buffers import FORMATS
from .faults import BARFault, UnsupportedTask
from .memory import ALIGN, round_up

_STRIDES = {
    "TileDMASrc": ("RowStride.Stride", "PlaneStride.PlaneStride", "DepthStride.Stride",
                   "GroupStride.Stride"),
    "TileDMADst": ("RowStride.RowStride", "PlaneStride.PlaneStride", "DepthStride.DepthStride",
                   "GroupStride.GroupStride"),
}


@dataclass(frozen=True)
class TileDMAPlan:
    engine: str            # "TileDMASrc" or "TileDMADst"
    slot: int
    base: int              # byte offset in the slot
    shape: tuple           # (C, H, W)
    strides: tuple         # bytes: (plane, row, element)
    fmt: int
    index: int             # absolute index of `base` in unified memory (checked)
    extent: int            # bytes spanned from `base` (whole bursts)
    zero_tail: bool = True

    @property
    def dtype(self) -> np.dtype:
        return FORMATS[self.fmt]

    @property
    def nbytes(self) -> int:
        """Bytes moved: every row in whole 64-byte bursts."""
        c, h, w = self.shape
        return c * h * round_up(w * self.dtype.itemsize, ALIGN)


def plan(regs: dict, bars, engine: str, slot_field: str, enable_field: str,
         c: int, h: int, w: int, what: str) -> TileDMAPlan:
    """Decode and bounds-check one TileDMA transfer of a C x H x W tensor."""
    if not regs[enable_field]:
        raise BARFault(f"{what}: {engine} uses BAR slot {regs[slot_field]}, which the TD does not "
                       f"enable ({enable_field} = 0)", slot=regs[slot_field])
    fmt = regs[f"{engine}.Fmt.MemFmt"]
    if fmt not in FORMATS:
        raise UnsupportedTask(f"{what}: {engine}.Fmt.MemFmt = {fmt} is not a known format", fmt=fmt)
    row, plane = (regs[f"{engine}.{k}"] * ALIGN for k in _STRIDES[engine][:2])
    itemsize = FORMATS[fmt].itemsize
    shape = (c, h, w)
    strides = (plane, row, itemsize)
    base = regs[f"{engine}.BaseAddr.Addr"] * ALIGN
    span = dma.extent(shape, strides, itemsize, ALIGN)
    slot = regs[slot_field]
    index = bars.resolve(slot, base, span, f"{what}: {engine} ({c}x{h}x{w}, "
                                           f"row {row:#x} plane {plane:#x})")
    return TileDMAPlan(engine, slot, base, shape, strides, fmt, index, span,
                       bool(regs.get("TileDMADst.Fmt.ZeroPadLast", 1)) if engine == "TileDMADst" else True)


def plan_src(regs: dict, bars, c: int, h: int, w: int, what: str, second: bool = False) -> TileDMAPlan:
    """TileDMASrc from ``RBase0`` (or ``RBase1``, a planar task's second operand)."""
    k = "1" if second else "0"
    return plan(regs, bars, "TileDMASrc", f"Header.RBase{k}", f"Header.RBE{k}", c, h, w, what)


def plan_dst(regs: dict, bars, c: int, h: int, w: int, what: str) -> TileDMAPlan:
    return plan(regs, bars, "TileDMADst", "Header.WBase", "Header.WBE", c, h, w, what)


def read(p: TileDMAPlan, memory: np.ndarray) -> np.ndarray:
    """TileDMASrc: the tensor as float64 ``[1, C, H, W]`` (exact for every format)."""
    return dma.gather(memory, p.index, p.shape, p.strides, p.dtype)[None]


def write(p: TileDMAPlan, memory: np.ndarray, values: np.ndarray) -> None:
    """TileDMADst: write ``values`` ``[1, C, H, W]`` (exact in the format) to DRAM."""
    dma.scatter(memory, p.index, values.reshape(p.shape), p.strides, p.dtype,
                zero_tail=p.zero_tail, burst=ALIGN)
