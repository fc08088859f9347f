"""The assembler's elementwise and planar side: TDs of NE elementwise tasks, planar
elementwise tasks (with per-row broadcast operands) and planar row reductions.

:func:`eltwise_td` builds the TD of one elementwise task the way Apple's elementwise programs
do (corpus ``unary/tanh.bin``, ``unary/sigmoid.bin``, ``activation/silu.bin``): an NE task
with ``KernelMode = 1`` (the source passes the MAC array to the NE: PostScale, ReLU or the
LUT block from KMem), or a planar task (the four Planar words and the registers the bit map
leaves unnamed, :data:`fastane.td.planar.UNNAMED`), with sources and result in DRAM or
kept in L2, and either source a per-row vector an earlier task left in L2, broadcast along
the row (``Common.Broadcast.Src0/Src1``, as the corpus's ``activation/softmax.bin`` reads
its max and 1/sum).

:func:`reduce_td` builds a planar **row reduction** (``Common.Cfg.TaskType`` 5: sum, max,
sum then reciprocal) as ``activation/softmax.bin`` TD 0 and TD 3 do: ``NumGroups`` rows of
one ``W``-element row each, streamed from DRAM at ``TileDMASrc.GroupStride``, one value
per row kept in L2 as a vector (``ResultType`` 0, ``ResultGroupStride`` 16 bytes apart).

L2 layout overrides (``l2``): a dict of ``L2.*`` stride fields (in the register's 16-byte
units) written last, for the strip layouts Apple's compiler picks for its own shapes; the
defaults are the dense layout (whole 16-byte channel rows) that fastane's device checks.
"""

from __future__ import annotations

import struct

from ..m1 import ALIGN, L2_UNIT, LUT_BLOCK
from ..m1 import round_up as _ru
from .codec import TaskDescriptor
from .planar import PLANAR_BINARY, PLANAR_UNARY, TASK_REDUCE
from .planar import words as planar_words

NONLINEAR_CODES = {"identity": 0, "none": 0, None: 0, "relu": 1, "lut": 2}
#: the row reductions :func:`reduce_td` emits (:data:`fastane.td.planar.OPCODES`)
PLANAR_REDUCE = ("sum", "max-reduce", "recip-sum")
#: the L2 stride fields an ``l2`` override may set (16-byte units)
L2_STRIDES = (
    "L2.SourceChannelStride.Stride",
    "L2.SourceRowStride.Stride",
    "L2.Source1ChannelStride.Stride",
    "L2.Source1RowStride.Stride",
    "L2.ConvResultChannelStride.Stride",
    "L2.ConvResultRowStride.Stride",
    "L2.ResultGroupStride.Stride",
)

# raw bits of unnamed words as Apple's elementwise programs have them (unary/tanh.bin,
# unary/sigmoid.bin TD1): the KernelDMASrc and NE raw bits only on NE tasks
_ELT_RAW = {0x12C: 0x1, 0x140: 0x1, 0x148: 0x2041, 0x15C: 0x1, 0x170: 0x8880, 0x1AC: 0x100}
_ELT_NE_RAW = {0x02C: 0x40, 0x0F4: 0x80, 0x0F8: 0x80, 0x0FC: 0x80, 0x100: 0x80, 0x244: 0x100000}
ALIAS = ("AliasConvSrc", "AliasConvRslt", "DMAFmt", "DMAInterleave", "AliasPlanarSrc", "AliasPlanarRslt")


def fp16_bits(x: float) -> int:
    """The fp16 pattern of ``x``; a ValueError if it does not fit in fp16."""
    try:
        return struct.unpack("<H", struct.pack("<e", float(x)))[0]
    except OverflowError:
        raise ValueError(f"{x!r} does not fit in fp16") from None


def _layout3(shape, strides, what):
    c, h, w = shape
    row, plane = strides or (None, None)
    row = row if row is not None else _ru(2 * w, ALIGN)
    plane = plane if plane is not None else _ru(row * h, ALIGN)
    for name, v in (("row", row), ("plane", plane)):
        if v % 64 or v <= 0:
            raise ValueError(f"{what} {name} stride {v} is not a positive multiple of 64 bytes (SPEC 5)")
    return row, plane


def _one_to_one(c: int, h: int, w: int, groups: int, tile_height: int, nid: int) -> dict:
    """The Common registers of a task mapping each fp16 element of ``groups`` x (C, H, W)
    to one (a 1x1 kernel, stride and dilation 1)."""
    return {
        "Common.InDim.Win": w,
        "Common.InDim.Hin": h,
        "Common.OutDim.Wout": w,
        "Common.OutDim.Hout": h,
        "Common.Cin.Cin": c,
        "Common.Cout.Cout": c,
        "Common.ChCfg.InFmt": 2,
        "Common.ChCfg.OutFmt": 2,
        "Common.ConvCfg.Kw": 1,
        "Common.ConvCfg.Kh": 1,
        "Common.ConvCfg.Sx": 1,
        "Common.ConvCfg.Sy": 1,
        "Common.ConvCfg.Ox": 1,
        "Common.ConvCfg.Oy": 1,
        "Common.GroupConvCfg.NumGroups": groups,
        "Common.GroupConvCfg.UnicastCin": 1,
        "Common.TileCfg.TileHeight": tile_height,
        "Common.TaskInfo.NID": nid,
    }


def _check_bases(*items):
    for name, base, m in items:
        if base < 0 or base % m:
            raise ValueError(f"{name} must be a non-negative multiple of {m}, got {base}")


def _l2_override(td: TaskDescriptor, l2) -> None:
    if not l2:
        return
    bad = [k for k in l2 if k not in L2_STRIDES]
    if bad:
        raise ValueError(f"l2 overrides only the L2 strides ({', '.join(L2_STRIDES)}), not {bad}")
    td.update(dict(l2))


def header(eon: bool, log_events: int) -> dict:
    """The Header words a convolution or elementwise task carries (the seed's and the
    corpus's values; a row reduction's differ, :func:`reduce_td`)."""
    return {
        "Header.EON": int(eon),
        "Header.LogEvents": log_events,
        "Header.DebugLogEvents": 0xFFF86A,
        "Header.SPL": 1,
        "Header.TSR": 1,
        "Header.TSE": 1,
        "Header.SrcLoc": 1,
        "Header.DstLoc": 1,
    }


def _dma_window(prefix: str, base: int, row: int, plane: int, depth: int, fmt: int) -> dict:
    """Where a tile DMA (``TileDMASrc``, ``TileDMASrc1``, ``TileDMADst``) reads or writes:
    its base and strides in 64-byte units (the depth and group strides span the ``depth``
    bytes of one tensor) and the memory format (the destination names its stride fields
    after the register)."""
    dst = prefix == "TileDMADst"
    r, d, g = ("RowStride", "DepthStride", "GroupStride") if dst else ("Stride",) * 3
    return {
        f"{prefix}.BaseAddr.Addr": base >> 6,
        f"{prefix}.RowStride.{r}": row >> 6,
        f"{prefix}.PlaneStride.PlaneStride": plane >> 6,
        f"{prefix}.DepthStride.{d}": depth >> 6,
        f"{prefix}.GroupStride.{g}": depth >> 6,
        f"{prefix}.Fmt.MemFmt": fmt,
    }


def src_dma(v: dict, c: int, row: int, plane: int, base: int, fmt: int = 2) -> None:
    """TileDMASrc streaming ``c`` planes (``row``/``plane`` bytes apart) from ``base``."""
    v.update(
        {
            "TileDMASrc.DMAConfig.En": 1,
            "TileDMASrc.DMAConfig.CacheHint": 2,
            "TileDMASrc.DMAConfig.CacheHintReuse": 14,
            "TileDMASrc.DMAConfig.CacheHintNoReuse": 12,
            **_dma_window("TileDMASrc", base, row, plane, c * plane, fmt),
            "TileDMASrc.Fmt.FmtMode": 1,
            "TileDMASrc.Fmt.Truncate": 3,
            "TileDMASrc.Fmt.Interleave": 1,
        }
    )


def dst_dma(v: dict, c: int, row: int, plane: int, base: int, fmt: int = 2) -> None:
    """TileDMADst writing ``c`` planes (``row``/``plane`` bytes apart) at ``base``."""
    v.update(
        {
            "TileDMADst.DMAConfig.En": 1,
            "TileDMADst.DMAConfig.CacheHint": 3,
            "TileDMADst.DMAConfig.L2BfrMode": 1,
            **_dma_window("TileDMADst", base, row, plane, c * plane, fmt),
            "TileDMADst.Fmt.FmtMode": 1,
            "TileDMADst.Fmt.Truncate": 3,
            "TileDMADst.Fmt.ZeroPadLast": 1,
            "TileDMADst.Fmt.ZeroPadFirst": 1,
            "TileDMADst.Fmt.Interleave": 1,
            "L2.ResultCfg.L2BfrMode": 1,
        }
    )


def eltwise_td(
    shape,
    *,
    op=None,
    out_scale: float = 1.0,
    offset: float = 0.0,
    in_scale: float = 1.0,
    nonlinear="identity",
    post_scale: float = 1.0,
    kernel_slot: int = 1,
    kernel_base: int = 0,
    src: int = 5,
    src_base: int = 0,
    src_strides=None,
    src1: int | None = None,
    src1_base: int = 0,
    src1_strides=None,
    dst: int = 4,
    dst_base: int = 0,
    dst_strides=None,
    l2_src: int = 0,
    l2_src1: int | None = None,
    l2_dst: int | None = None,
    src_in_l2: bool = False,
    src1_in_l2: bool = False,
    keep: bool = False,
    src_vector: bool = False,
    src_broadcast: bool = False,
    src1_broadcast: bool = False,
    vector_out: bool = False,
    l2: dict | None = None,
    tile_height: int | None = None,
    nid: int = 1,
    eon: bool = True,
    log_events: int = 0x422,
) -> TaskDescriptor:
    """The TD of one elementwise task on an fp16 tensor of ``shape`` = (C, H, W).

    Two kinds, as in Apple's elementwise programs (corpus ``unary/tanh.bin``,
    ``unary/sigmoid.bin``, ``activation/silu.bin``):

    * ``op=None``: an **NE task**.  ``NE.MACCfg.KernelMode = 1`` (``OpMode = 4``): the
      source passes the MAC array unchanged to the NE, which applies ``post_scale``
      (``NE.PostScale``) and ``nonlinear`` ('identity', 'relu' = NonlinearMode 1, or 'lut' =
      NonlinearMode 2 with the 0x80-byte coefficient block that KernelDMA lane 0 loads from
      ``kernel_base`` of ``kernel_slot`` to the start of core 0's KMem).
    * ``op`` a planar operation (:data:`PLANAR_UNARY`, :data:`PLANAR_BINARY`): a **planar
      task**, ``out = out_scale * op(in_scale * a, b) + offset`` (the four Planar words of
      :func:`fastane.td.planar.words`, and the registers the bit map leaves unnamed:
      ``Common.Cfg.TaskType`` 2 or 3, the second operand's format and its TileDMASrc/L2
      registers; docs/device.md, "Planar engine").

    Operands: source 0 comes from BAR slot ``src`` (``src_base`` bytes in, ``src_strides``
    = (row, plane) bytes, default dense) through TileDMASrc and L2 at byte ``l2_src``, or,
    with ``src_in_l2``, is the result an earlier task kept in L2 at ``l2_src``
    (``SourceType`` 3; with ``src_vector``, an L2 vector: ``SourceType`` 0).  A binary op's
    source 1 likewise from slot ``src1`` (TileDMASrc's second register set, L2 window at
    ``l2_src1``) or, with ``src1_in_l2``, from L2 at ``l2_src1`` (``RBE1`` = 0).
    ``src_broadcast``/``src1_broadcast``: that source is a ``(C, H, 1)`` per-row vector in
    L2 read along every row (``Common.Broadcast.Src0/Src1``; a planar task only).  The
    result goes to slot ``dst`` through TileDMADst (L2 staging at ``l2_dst``), or, with
    ``keep``, stays in L2 at ``l2_dst`` for a later task (``ResultType`` 3; with
    ``vector_out``, an L2 vector, ``ResultType`` 0).  L2 addresses are bytes (multiples of
    16); by default the windows follow each other from ``l2_src`` (one whole tensor each:
    ``TileHeight`` = H).
    """
    c, h, w = shape
    if min(c, h, w) < 1:
        raise ValueError(f"an elementwise task needs C, H, W >= 1, got {shape}")
    binary = op in PLANAR_BINARY
    if op is not None and op not in PLANAR_UNARY + PLANAR_BINARY:
        raise ValueError(
            f"unknown planar operation {op!r} (one of {', '.join(PLANAR_UNARY + PLANAR_BINARY)})"
        )
    if op is None and nonlinear not in NONLINEAR_CODES:
        raise ValueError(f"nonlinear must be one of 'identity', 'relu', 'lut', not {nonlinear!r}")
    if binary and src1 is None and not src1_in_l2:
        raise ValueError(f"{op} takes two operands: give src1 (a BAR slot) or src1_in_l2")
    if not binary and (src1 is not None or src1_in_l2 or src1_broadcast):
        raise ValueError("a second operand needs a binary planar operation")
    if (src_broadcast or src1_broadcast) and op is None:
        raise ValueError("a broadcast operand needs a planar task (op), not an NE task")
    src_in_l2 = src_in_l2 or src_vector
    if src_broadcast and not src_in_l2:
        raise ValueError("a broadcast source 0 is a vector an earlier task left in L2: give src_in_l2")
    if src1_broadcast and not src1_in_l2:
        raise ValueError("a broadcast source 1 is a vector an earlier task left in L2: give src1_in_l2")
    keep = keep or vector_out
    _check_bases(
        ("src_base", src_base, 64),
        ("src1_base", src1_base, 64),
        ("dst_base", dst_base, 64),
        ("kernel_base", kernel_base, 64),
        ("l2_src", l2_src, 16),
        ("l2_src1", l2_src1 or 0, 16),
        ("l2_dst", l2_dst or 0, 16),
    )
    ch16 = _ru(2 * w, L2_UNIT)  # one channel row in L2 (16-byte units below)
    tensor_l2 = c * h * ch16
    if l2_src1 is None:
        l2_src1 = l2_src + (c * h * L2_UNIT if src_broadcast else tensor_l2)
    if l2_dst is None:
        l2_dst = (
            (l2_src1 + (c * h * L2_UNIT if src1_broadcast else tensor_l2)) if binary else l2_src + tensor_l2
        )
    lut = op is None and NONLINEAR_CODES[nonlinear] == 2
    td = TaskDescriptor()
    for off, bits in {**_ELT_RAW, **(_ELT_NE_RAW if op is None else {})}.items():
        td.words[off // 4] |= bits
    # a broadcast vector in L2: one 16-byte unit per row, its channels one after the other
    s0_ch, s0_row = (h, 1) if src_broadcast else (ch16 // L2_UNIT, c * ch16 // L2_UNIT)
    v = {
        **header(eon, log_events),
        "Header.RBase0": 0 if src_in_l2 else src,
        "Header.RBE0": int(not src_in_l2),
        "Header.WBase": 0 if keep else dst,
        "Header.WBE": int(not keep),
        "Header.ENE": 1,
        **_one_to_one(c, h, w, 1, tile_height or h, nid),
        "Header.NID": nid,
        "L2.SourceCfg.SourceType": (0 if src_vector else 3) if src_in_l2 else 2,
        "L2.SourceBase.Addr": l2_src // L2_UNIT,
        "L2.SourceChannelStride.Stride": s0_ch,
        "L2.SourceRowStride.Stride": s0_row,
        "L2.ResultCfg.ResultType": (0 if vector_out else 3) if keep else 2,
        "L2.ResultBase.Addr": l2_dst // L2_UNIT,
        "L2.ConvResultChannelStride.Stride": ch16 // L2_UNIT,
        "L2.ConvResultRowStride.Stride": c * ch16 // L2_UNIT,
    }
    if op is None:
        v.update(
            {
                "Common.Cfg.ShPref": 4,
                "Common.Cfg.ShMin": 4,
                "Common.Cfg.ShMax": 4,
                "Common.Cfg.AccDoubleBufEn": 1,
                "NE.KernelCfg.KernelFmt": 2,
                "NE.KernelCfg.PalettizedBits": 8,
                "NE.MACCfg.OpMode": 4,
                "NE.MACCfg.KernelMode": 1,
                "NE.MACCfg.BinaryPoint": 28,
                "NE.MACCfg.NonlinearMode": NONLINEAR_CODES[nonlinear],
                "NE.PostScale.PostScale": fp16_bits(post_scale),
            }
        )
        if lut:
            v.update(
                {
                    "Header.KBase0": kernel_slot,
                    "Header.KBE0": 1,
                    "KernelDMASrc.CoeffDMAConfig[0].En": 1,
                    "KernelDMASrc.CoeffDMAConfig[0].CacheHint": 2,
                    "KernelDMASrc.CoeffBaseAddr[0].Addr": kernel_base >> 6,
                    "KernelDMASrc.CoeffBfrSize[0].MemBfrSize": LUT_BLOCK >> 6,
                }
            )
    else:
        for i, word in enumerate(planar_words(op, out_scale, offset, in_scale)):
            v[f"Planar.Word[{i}]"] = word
    if not src_in_l2:
        src_dma(v, c, *_layout3(shape, src_strides, "src"), src_base)
        for cfg in ALIAS:
            v[f"L2.SourceCfg.{cfg}"] = 1
    if not keep:
        dst_dma(v, c, *_layout3(shape, dst_strides, "dst"), dst_base)
    for cfg in ("DMAFmt", "DMAInterleave"):
        v[f"L2.ResultCfg.{cfg}"] = 1
    td.update(v)
    if op is not None:
        unnamed = {
            "Common.Cfg.TaskType": 3 if binary else 2,
            "Common.ChCfg.Src1InFmt": 2 if binary else 0,
            "Common.Broadcast.Src0": int(src_broadcast),
            "Common.Broadcast.Src1": int(src1_broadcast),
        }
        if binary:
            s1_ch, s1_row = (h, 1) if src1_broadcast else (ch16 // L2_UNIT, c * ch16 // L2_UNIT)
            unnamed.update(
                {
                    "L2.Source1Base.Addr": l2_src1 // L2_UNIT,
                    "L2.Source1ChannelStride.Stride": s1_ch,
                    "L2.Source1RowStride.Stride": s1_row,
                }
            )
            if not src1_in_l2:  # streamed: the L2 source takes DMA-formatted data
                row, plane = _layout3(shape, src1_strides, "src1")
                td.update({"Header.RBase1": src1, "Header.RBE1": 1, "L2.SourceCfg.DMAFmt": 1})
                unnamed.update(_dma_window("TileDMASrc1", src1_base, row, plane, c * plane, 2))
        td.update(unnamed)
    _l2_override(td, l2)
    return td


def reduce_td(
    rows: int,
    width: int,
    *,
    op: str = "sum",
    in_scale: float = 1.0,
    out_scale: float = 1.0,
    offset: float = 0.0,
    src: int = 5,
    src_base: int = 0,
    row_stride: int | None = None,
    l2_src: int | None = None,
    l2_dst: int = 0,
    group_stride: int = L2_UNIT,
    l2: dict | None = None,
    nid: int = 1,
    eon: bool = True,
    log_events: int = 0x400,
) -> TaskDescriptor:
    """The TD of a planar row reduction of ``rows`` rows of ``width`` fp16 values.

    ``op``: ``'sum'``, ``'max-reduce'`` or ``'recip-sum'`` (sum, then ``1/sum``); each
    element is first scaled by ``in_scale``, the reduced value then mapped to ``out_scale
    * y + offset`` (the Planar words; every stage rounded once to fp16, docs/device.md).
    The rows come from BAR slot ``src`` at ``src_base``, ``row_stride`` bytes apart
    (default: dense rows, ``round_up(2 * width, 64)``), through TileDMASrc as ``rows``
    groups of one row (``NumGroups`` = rows, ``GroupStride`` = the row stride, Cin = Hin =
    1, as ``activation/softmax.bin`` TD 0); their L2 window starts at ``l2_src`` (default:
    right after the vector).  The result is one value per row kept in L2 as a vector
    (``ResultType`` 0) at ``l2_dst``, ``group_stride`` bytes apart (16: one unit per row),
    a ``(1, 1, rows, 1)`` tensor for the tasks that read it (``Common.Broadcast``).
    """
    if op not in PLANAR_REDUCE:
        raise ValueError(f"unknown row reduction {op!r} (one of {', '.join(PLANAR_REDUCE)})")
    if rows < 1 or width < 1:
        raise ValueError(f"a row reduction needs rows, width >= 1, got {rows} x {width}")
    if group_stride < L2_UNIT or group_stride % L2_UNIT:
        raise ValueError(f"group_stride must be a positive multiple of 16 bytes, got {group_stride}")
    row = row_stride if row_stride is not None else _ru(2 * width, ALIGN)
    if row % ALIGN or row < 2 * width:
        raise ValueError(
            f"row_stride {row} must be a multiple of 64 bytes holding a {width}-element row ({2 * width} bytes)"
        )
    vec = rows * group_stride
    if l2_src is None:
        l2_src = _ru(l2_dst + vec, L2_UNIT)
    _check_bases(("src_base", src_base, 64), ("l2_src", l2_src, 16), ("l2_dst", l2_dst, 16))
    ch16 = _ru(2 * width, L2_UNIT) // L2_UNIT
    whole = rows * row >> 6  # the row, plane and depth strides span the whole tensor
    td = TaskDescriptor()
    for off, bits in _ELT_RAW.items():
        td.words[off // 4] |= bits
    v = {
        "Header.EON": int(eon),
        "Header.LogEvents": log_events,
        "Header.DebugLogEvents": 0xFFF868,
        "Header.SPL": 1,
        "Header.SrcLoc": 1,
        "Header.RBase0": src,
        "Header.RBE0": 1,
        "Header.NID": nid,
        **_one_to_one(1, 1, width, rows, 1, nid),
        "L2.L2Cfg.PaddingMode": 1,
        "L2.SourceCfg.SourceType": 2,
        "L2.SourceBase.Addr": l2_src // L2_UNIT,
        "L2.SourceChannelStride.Stride": ch16,
        "L2.SourceRowStride.Stride": ch16,
        "L2.ResultCfg.ResultType": 0,
        "L2.ResultBase.Addr": l2_dst // L2_UNIT,
        "L2.ConvResultChannelStride.Stride": 1,
        "L2.ConvResultRowStride.Stride": -(-vec // L2_UNIT),
        "TileDMASrc.DMAConfig.En": 1,
        "TileDMASrc.DMAConfig.CacheHint": 14,
        "TileDMASrc.DMAConfig.CacheHintReuse": 14,
        "TileDMASrc.DMAConfig.CacheHintNoReuse": 14,
        "TileDMASrc.BaseAddr.Addr": src_base >> 6,
        "TileDMASrc.RowStride.Stride": whole,
        "TileDMASrc.PlaneStride.PlaneStride": whole,
        "TileDMASrc.DepthStride.Stride": whole,
        "TileDMASrc.GroupStride.Stride": row >> 6,
        "TileDMASrc.Fmt.FmtMode": 1,
        "TileDMASrc.Fmt.Truncate": 3,
        "TileDMASrc.Fmt.MemFmt": 2,
        "TileDMASrc.Fmt.Interleave": 1,
        "TileDMADst.DMAConfig.CacheHint": 3,
        "TileDMADst.Fmt.Interleave": 1,
    }
    for cfg in ("AliasConvSrc", "AliasConvRslt", "DMAFmt", "DMAInterleave", "AliasPlanarRslt"):
        v[f"L2.SourceCfg.{cfg}"] = 1
    for cfg in ("AliasConvSrc", "AliasConvRslt", "DMAFmt", "DMAInterleave"):
        v[f"L2.ResultCfg.{cfg}"] = 1
    for i, word in enumerate(planar_words(op, out_scale, offset, in_scale)):
        v[f"Planar.Word[{i}]"] = word
    td.update(v)
    td.update(
        {
            "Common.Cfg.TaskType": TASK_REDUCE,
            "L2.ResultGroupStride.Stride": group_stride // L2_UNIT,
        }
    )
    _l2_override(td, l2)
    return td


__all__ = ["NONLINEAR_CODES", "PLANAR_REDUCE", "L2_STRIDES", "eltwise_td", "reduce_td"]
