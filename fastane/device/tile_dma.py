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

from ..m1 import FP16
from ..td.planar import TASK_REDUCE, is_planar
from . import int8
from .buffers import FORMATS
from .faults import BARFault, UnsupportedTask
from .memory import ALIGN, round_up

_STRIDES = {
    "TileDMASrc": ("RowStride.Stride", "PlaneStride.PlaneStride", "DepthStride.Stride", "GroupStride.Stride"),
    "TileDMADst": (
        "RowStride.RowStride",
        "PlaneStride.PlaneStride",
        "DepthStride.DepthStride",
        "GroupStride.GroupStride",
    ),
}
#: TileDMASrc's second register set (a planar task's second operand, from RBase1): the
#: first set's layout 0x14 bytes on, unnamed in the bit map (see fastane.device.planar)
_STRIDES["TileDMASrc1"] = _STRIDES["TileDMASrc"]


@dataclass(frozen=True)
class TileDMAPlan:
    engine: str  # "TileDMASrc" or "TileDMADst"
    slot: int
    base: int  # byte offset in the slot
    shape: tuple  # (C, H, W)
    strides: tuple  # bytes: (plane, row, element)
    fmt: int
    index: int  # absolute index of `base` in unified memory (checked)
    extent: int  # bytes spanned from `base` (whole bursts)
    zero_tail: bool = True

    @property
    def dtype(self) -> np.dtype:
        return FORMATS[self.fmt]

    @property
    def nbytes(self) -> int:
        """Bytes moved: every row in whole 64-byte bursts."""
        *outer, w = self.shape
        return int(np.prod(outer)) * round_up(w * self.dtype.itemsize, ALIGN)


def plan(
    regs: dict,
    bars,
    engine: str,
    slot_field: str,
    enable_field: str,
    c: int,
    h: int,
    w: int,
    what: str,
    groups: int = 1,
) -> TileDMAPlan:
    """Decode and bounds-check one TileDMA transfer of a C x H x W tensor (``groups`` > 1:
    that many tensors ``GroupStride`` apart, shape ``(groups, C, H, W)``; planar row
    reductions read their rows this way)."""
    if not regs[enable_field]:
        raise BARFault(
            f"{what}: {engine} uses BAR slot {regs[slot_field]}, which the TD does not "
            f"enable ({enable_field} = 0)",
            slot=regs[slot_field],
        )
    fmt = regs[f"{engine}.Fmt.MemFmt"]
    if fmt not in FORMATS:
        raise UnsupportedTask(f"{what}: {engine}.Fmt.MemFmt = {fmt} is not a known format", fmt=fmt)
    want = FP16 if is_planar(regs) else int8.dma_format(regs, engine)  # the planar engine: fp16 only
    if fmt != want:  # the DMA converts no format (fastane.device.int8, decision 7)
        name = int8.format_name(want)
        raise UnsupportedTask(
            f"{what}: {engine}.Fmt.MemFmt = {fmt} ({FORMATS[fmt]}), but the task computes "
            f"{name} (format {want}): the DMA converts no format: the task moves only {name} tensors",
            fmt=fmt,
        )
    row, plane = (regs[f"{engine}.{k}"] * ALIGN for k in _STRIDES[engine][:2])
    itemsize = FORMATS[fmt].itemsize
    shape = (c, h, w)
    strides = (plane, row, itemsize)
    if groups > 1:
        shape = (groups,) + shape
        strides = (regs[f"{engine}.{_STRIDES[engine][3]}"] * ALIGN,) + strides
    base = regs[f"{engine}.BaseAddr.Addr"] * ALIGN
    span = dma.extent(shape, strides, itemsize, ALIGN)
    slot = regs[slot_field]
    index = bars.resolve(
        slot, base, span, f"{what}: {engine} ({'x'.join(map(str, shape))}, row {row:#x} plane {plane:#x})"
    )
    return TileDMAPlan(
        engine,
        slot,
        base,
        shape,
        strides,
        fmt,
        index,
        span,
        bool(regs.get("TileDMADst.Fmt.ZeroPadLast", 1)) if engine == "TileDMADst" else True,
    )


def plan_src(
    regs: dict, bars, c: int, h: int, w: int, what: str, second: bool = False, groups: int = 1
) -> TileDMAPlan:
    """TileDMASrc from ``RBase0``, or from ``RBase1`` through the second register set
    (``TileDMASrc1.*``: a planar task's second operand)."""
    if second:
        return plan(regs, bars, "TileDMASrc1", "Header.RBase1", "Header.RBE1", c, h, w, what, groups)
    return plan(regs, bars, "TileDMASrc", "Header.RBase0", "Header.RBE0", c, h, w, what, groups)


def dram_reads(regs: dict) -> list:
    """What TileDMASrc reads from DRAM for one TD: ``[(slot, engine, (C, H, W), groups)]``.

    Source 0 when ``SourceType`` is 2 (DRAM); a planar task's second operand whenever
    ``RBE1`` is set (it has its own register set, ``TileDMASrc1``).  A planar row
    reduction reads ``NumGroups`` rows at ``GroupStride``.
    """
    shape = (regs["Common.Cin.Cin"], regs["Common.InDim.Hin"], regs["Common.InDim.Win"])
    planar = is_planar(regs)
    reduce = planar and regs.get("Common.Cfg.TaskType", 0) == TASK_REDUCE
    groups = max(regs["Common.GroupConvCfg.NumGroups"], 1) if reduce else 1
    reads = []
    if regs["L2.SourceCfg.SourceType"] == 2 and regs["Header.RBE0"]:
        reads.append((regs["Header.RBase0"], "TileDMASrc", shape, groups))
    if regs["Header.RBE1"]:
        if planar:
            reads.append((regs["Header.RBase1"], "TileDMASrc1", shape, 1))
        elif regs["L2.SourceCfg.SourceType"] == 2:
            reads.append((regs["Header.RBase1"], "TileDMASrc", shape, 1))
    return reads


def plan_dst(regs: dict, bars, c: int, h: int, w: int, what: str) -> TileDMAPlan:
    return plan(regs, bars, "TileDMADst", "Header.WBase", "Header.WBE", c, h, w, what)


def read(p: TileDMAPlan, memory: np.ndarray) -> np.ndarray:
    """TileDMASrc: the tensor as float64 ``[1, C, H, W]`` (exact for every format)."""
    return read_max(p, memory)[0]


def read_max(p: TileDMAPlan, memory: np.ndarray):
    """TileDMASrc: ``(values float64 [1, C, H, W], cmax)``.  For an fp16 tensor the
    values are decoded in one pass (``fastane.kernels.dma.gather_fp16``) and ``cmax`` is
    each channel's largest magnitude pattern (``bits & 0x7fff``: the MAC kernels' bound on
    max |x| comes with it, see :func:`fastane.device.mac.accumulate`); otherwise numpy's
    cast and ``cmax`` None."""
    if p.fmt == 2 and len(p.shape) == 3:
        got = dma.gather_fp16(memory, p.index, p.shape, p.strides)
        if got is not None:
            return got[0][None], got[1]
    return dma.gather(memory, p.index, p.shape, p.strides, p.dtype)[None], None


def write(p: TileDMAPlan, memory: np.ndarray, values: np.ndarray) -> None:
    """TileDMADst: write ``values`` ``[1, C, H, W]`` (exact in the format) to DRAM."""
    dma.scatter(
        memory, p.index, values.reshape(p.shape), p.strides, p.dtype, zero_tail=p.zero_tail, burst=ALIGN
    )


def fp16_window(p: TileDMAPlan, memory: np.ndarray):
    """TileDMADst of an fp16 ``(C, H, W)`` tensor as the NE writes it directly:
    ``(uint16 window, plane, row, wpad)`` -- the checked bytes ``[index, index + extent)``
    as fp16 patterns, the strides in elements, and the row length the DMA writes
    (``W`` rounded up to whole bursts with ``ZeroPadLast``, else ``W``) -- or None when the
    layout does not allow it (another format, odd strides)."""
    if p.fmt != 2 or len(p.shape) != 3:
        return None
    c, h, w = p.shape
    plane, row, item = p.strides
    if item != 2 or p.index % 2 or plane % 2 or row % 2:
        return None
    wpad = round_up(w * 2, ALIGN) // 2 if p.zero_tail else w
    plane, row = plane // 2, row // 2
    # rows (with their burst tails) that overlap each other depend on the order of the
    # writes: those go through write(), which keeps numpy's order
    if (h > 1 and row < wpad) or (c > 1 and plane < (h - 1) * row + wpad):
        return None
    win = memory[p.index : p.index + p.extent].view(np.uint16)
    # the plan's extent covers every row's last burst: check the kernel's indexing
    if c and h and (c - 1) * plane + (h - 1) * row + wpad > win.size:
        return None
    return win, plane, row, wpad


def fp16_source(p: TileDMAPlan, memory: np.ndarray):
    """TileDMASrc of an fp16 ``(C, H, W)`` tensor as the kernels read it in place:
    ``(uint16 window, plane, row)`` -- the checked bytes ``[index, index + extent)`` as
    fp16 patterns and the strides in elements -- or None when the layout does not allow
    it (another format, odd offset or strides)."""
    if p.fmt != 2 or len(p.shape) != 3:
        return None
    plane, row, item = p.strides
    if item != 2 or p.index % 2 or plane % 2 or row % 2:
        return None
    win = memory[p.index : p.index + p.extent].view(np.uint16)
    c, h, w = p.shape
    plane, row = plane // 2, row // 2
    if c and h and (c - 1) * plane + (h - 1) * row + w > win.size:
        return None
    return win, plane, row


def fp16_rows(p: TileDMAPlan, memory: np.ndarray):
    """TileDMASrc of a planar row reduction's fp16 rows (``(groups, 1, 1, W)`` at
    ``GroupStride``, or one ``(1, 1, W)`` row) as the kernels read them in place:
    ``(uint16 window, row stride in elements, rows, W)``, or None when the layout does not
    allow it (another format, odd offset or stride, several rows per group)."""
    if p.fmt != 2 or p.shape[-3:-1] != (1, 1) or len(p.shape) not in (3, 4):
        return None
    rows, w = (p.shape[0], p.shape[-1]) if len(p.shape) == 4 else (1, p.shape[-1])
    stride = p.strides[0] if len(p.shape) == 4 else 0
    if p.strides[-1] != 2 or p.index % 2 or stride % 2:
        return None
    win = memory[p.index : p.index + p.extent].view(np.uint16)
    stride //= 2
    if rows and (rows - 1) * stride + w > win.size:
        return None
    return win, stride, rows, w
