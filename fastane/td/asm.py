"""The assembler side: TDs from a high-level description.

:func:`conv_td` builds the TD of one convolution task (one image, one tile: by default the whole
tensors, or a tile of larger ones through base offsets and strides) the way Apple's compiler lays out the seed's 1x1 convolution (``corpus/seed-conv1x1.td``):
strides from SPEC 5 (row = round_up(W * bytes, 64), plane = round_up(row * H, 64), depth =
plane * C), output channels spread over the 16 NE cores (KernelDMASrc channel k feeds core k),
the L2 source followed by the L2 result.  Defaults not implied by the description (event masks,
cache hints, L2 aliasing, words the bit map leaves unnamed) are the seed's values.

:func:`eltwise_td` builds the TD of one elementwise task the way Apple's elementwise programs
do (corpus ``unary/tanh.bin``, ``unary/sigmoid.bin``, ``activation/silu.bin``): an NE task
with ``KernelMode = 1`` (the source passes the MAC array to the NE: PostScale, ReLU or the
LUT block from KMem), or a planar task (the four Planar words and the registers the bit map
leaves unnamed, :data:`fastane.td.planar.UNNAMED`), with sources and result in DRAM or
kept in L2.
"""

from __future__ import annotations

import math
import struct

from ..m1 import ALIGN, CORES, FORMATS, L2_UNIT, LUT_BLOCK, kernel_layout
from ..m1 import round_up as _ru
from .codec import TaskDescriptor
from .planar import PLANAR_BINARY, PLANAR_UNARY
from .planar import words as planar_words

FMT_CODES = {"uint8": 0, "u8": 0, "int8": 1, "i8": 1, "fp16": 2, "float16": 2, "f16": 2}
NONLINEAR_CODES = {"identity": 0, "none": 0, None: 0, "relu": 1, "lut": 2}

# raw bits of words the bit map names no field for, as the seed's conv TD has them
# (0x12c and 0x140 are 1 in every corpus TD, 0x148 0x2041, 0x170 0x8880: probably 3-D
# dimensions/kernel sizes and DMA settings; 0x2c and 0xf4..0x120: KernelDMASrc settings).
_SEED_RAW = {
    0x02C: 0x40,
    0x0F4: 0x80,
    0x0F8: 0x80,
    0x0FC: 0x80,
    0x100: 0x80,
    0x114: 0x40,
    0x118: 0x40,
    0x11C: 0x40,
    0x120: 0x40,
    0x12C: 0x1,
    0x140: 0x1,
    0x148: 0x2041,
    0x15C: 0x1,
    0x170: 0x8880,
    0x1AC: 0x100,
    0x244: 0x100000,
}


def _fmt(f) -> int:
    if isinstance(f, int) and f in FORMATS:
        return f
    code = FMT_CODES.get(str(f).lower())
    if code is None:
        raise ValueError(f"unknown format {f!r}: use 'uint8', 'int8' or 'fp16' (codes 0, 1, 2)")
    return code


def _fp16_bits(x: float) -> int:
    try:
        return struct.unpack("<H", struct.pack("<e", float(x)))[0]
    except OverflowError:
        raise ValueError(f"{x!r} does not fit in fp16") from None


def _pair(v, what: str) -> tuple[int, int]:
    a, b = (v, v) if isinstance(v, int) else tuple(v)
    if a < 1 or b < 1:
        raise ValueError(f"{what} must be >= 1, got {v!r}")
    return a, b


def _pads(padding, what: str = "padding") -> tuple[tuple[int, int], tuple[int, int]]:
    """``((top, bottom), (left, right))`` from an int, ``(py, px)`` or the full form."""
    if isinstance(padding, int):
        padding = (padding, padding)
    a, b = padding
    if isinstance(a, int) and isinstance(b, int):
        pads = ((a, a), (b, b))
    else:
        pads = (tuple(a), tuple(b))
    if any(len(p) != 2 for p in pads) or min(min(p) for p in pads) < 0:
        raise ValueError(
            f"{what} must be >= 0: an int, (py, px) or ((top, bottom), (left, right)), got {padding!r}"
        )
    return pads


def conv_td(
    x_shape,
    y_shape,
    *,
    kernel=(1, 1),
    stride=(1, 1),
    padding=0,
    dilation=(1, 1),
    groups: int = 1,
    src: int = 4,
    dst: int = 5,
    kernel_slot: int = 1,
    in_fmt="fp16",
    out_fmt="fp16",
    kernel_fmt="fp16",
    bias=None,
    post_scale: float = 1.0,
    nonlinear="identity",
    tile_height: int | None = None,
    src_base: int = 0,
    src_strides=None,
    dst_base: int = 0,
    dst_strides=None,
    kernel_base: int = 0,
    nid: int = 1,
    eon: bool = True,
    log_events: int = 0x42A,
) -> TaskDescriptor:
    """The TD of a convolution ``x_shape`` (N, C, H, W) -> ``y_shape`` (N, Cout, Hout, Wout).

    ``kernel``/``stride``/``dilation`` are (height, width) or an int.  ``padding``: an int,
    ``(py, px)`` (symmetric) or ``((top, bottom), (left, right))`` zeros; the TD holds the
    top/left padding (``ConvCfg.Py/Px``) and the bottom/right padding follows from the
    output size; dilation goes to ``ConvCfg.Oy/Ox``.  ``src``, ``dst`` and ``kernel_slot``
    are the BAR slots of the input, output and weights; the weights are laid out per core
    (:func:`kernel_layout`: core k holds output channels [k*m, (k+1)*m), m = ceil(Cout / 16))
    at ``kernel_base`` in the kernel slot.  Formats: 'uint8', 'int8', 'fp16' (or 0, 1, 2).

    The NE stage: ``bias`` None (no bias), a number (``AccBias``, one value for every
    channel) or ``"channel"`` (``MatrixBiasEn``: one fp16 value per output channel, stored
    in KMem after each core's kernels); ``post_scale`` goes to ``NE.PostScale`` as fp16;
    ``nonlinear``: 'identity', 'relu' or 'lut' (the 0x80-byte coefficient block follows
    core 0's kernels and biases in KMem).

    The tensors: ``src_base``/``dst_base`` are byte offsets in their slots and
    ``src_strides``/``dst_strides`` ``(row, plane)`` byte strides (multiples of 64; default:
    SPEC 5's dense layout of the shapes given), so a task can read or write one tile of a
    larger tensor.  ``conv_td((1, 8, 4, 1), (1, 3, 4, 1))`` is the seed's 1x1 convolution,
    byte for byte.
    """
    n, c, h, w = x_shape
    n2, cout, hout, wout = y_shape
    kh, kw = _pair(kernel, "kernel")
    sy, sx = _pair(stride, "stride")
    dy, dx = _pair(dilation, "dilation")
    (pt, pb), (pl, pr) = _pads(padding)
    if n != 1 or n2 != 1:
        raise ValueError(f"one TD convolves one image (N = 1), got N = {n} -> {n2}")
    if min(c, h, w, cout) < 1 or groups < 1 or c % groups or cout % groups:
        raise ValueError(f"bad channels/groups: C={c}, Cout={cout}, groups={groups}")
    span_h, span_w = (kh - 1) * dy + 1, (kw - 1) * dx + 1
    exp_h = (h + pt + pb - span_h) // sy + 1
    exp_w = (w + pl + pr - span_w) // sx + 1
    if h + pt + pb < span_h or w + pl + pr < span_w or (hout, wout) != (exp_h, exp_w):
        raise ValueError(
            f"output {hout}x{wout} does not follow from input {h}x{w}, kernel "
            f"{kh}x{kw}, stride {sy}x{sx}, dilation {dy}x{dx}, padding "
            f"{((pt, pb), (pl, pr))} (expected {exp_h}x{exp_w})"
        )
    fi, fo, fk = _fmt(in_fmt), _fmt(out_fmt), _fmt(kernel_fmt)
    if nonlinear not in NONLINEAR_CODES:
        raise ValueError(f"nonlinear must be one of 'identity', 'relu', 'lut', not {nonlinear!r}")
    vector = isinstance(bias, str)
    if vector and bias != "channel":
        raise ValueError(f"bias must be None, a number or 'channel', not {bias!r}")
    for name, base in (("src_base", src_base), ("dst_base", dst_base), ("kernel_base", kernel_base)):
        if base < 0 or base % 64:
            raise ValueError(f"{name} must be a non-negative multiple of 64, got {base}")

    lay = kernel_layout(cout, (c // groups) * kh * kw * FORMATS[fk], vector, NONLINEAR_CODES[nonlinear] == 2)
    active_ne = math.ceil(math.log2(lay.lanes))
    in_row, in_plane = src_strides or (None, None)
    in_row = in_row if in_row is not None else _ru(w * FORMATS[fi], ALIGN)
    in_plane = in_plane if in_plane is not None else _ru(in_row * h, ALIGN)
    out_row, out_plane = dst_strides or (None, None)
    out_row = out_row if out_row is not None else _ru(wout * FORMATS[fo], ALIGN)
    out_plane = out_plane if out_plane is not None else _ru(out_row * hout, ALIGN)
    for name, v in (
        ("src row", in_row),
        ("src plane", in_plane),
        ("dst row", out_row),
        ("dst plane", out_plane),
    ):
        if v % 64 or v <= 0:
            raise ValueError(f"{name} stride {v} is not a positive multiple of 64 bytes (SPEC 5)")
    l2_ch = -(-w * FORMATS[fi] // L2_UNIT)  # L2 strides and addresses count 16-byte units
    l2_row = c * l2_ch

    td = TaskDescriptor()
    for off, bits in _SEED_RAW.items():
        td.words[off // 4] |= bits
    td.words[0x1F4 // 4] = td.words[0x1F8 // 4] = l2_row << 4
    v = {
        "Header.EON": int(eon),
        "Header.LogEvents": log_events,
        "Header.DebugLogEvents": 0xFFF86A,
        "Header.SPL": 1,
        "Header.TSR": 1,
        "Header.TSE": 1,
        "Header.SrcLoc": 1,
        "Header.DstLoc": 1,
        "Header.RBase0": src,
        "Header.RBE0": 1,
        "Header.WBase": dst,
        "Header.WBE": 1,
        "Header.ENE": active_ne + 1,
        "Header.KBase0": kernel_slot,
        "Header.KBE0": 1,
        "Common.InDim.Win": w,
        "Common.InDim.Hin": h,
        "Common.ChCfg.InFmt": fi,
        "Common.ChCfg.OutFmt": fo,
        "Common.Cin.Cin": c,
        "Common.Cout.Cout": cout,
        "Common.OutDim.Wout": wout,
        "Common.OutDim.Hout": hout,
        "Common.ConvCfg.Kw": kw,
        "Common.ConvCfg.Kh": kh,
        "Common.ConvCfg.Sx": sx,
        "Common.ConvCfg.Sy": sy,
        "Common.ConvCfg.Px": pl,
        "Common.ConvCfg.Py": pt,
        "Common.ConvCfg.Ox": dx,
        "Common.ConvCfg.Oy": dy,
        "Common.GroupConvCfg.NumGroups": groups,
        "Common.GroupConvCfg.UnicastCin": 1,
        "Common.TileCfg.TileHeight": tile_height or hout,
        "Common.Cfg.SmallSourceMode": 1,
        "Common.Cfg.ShPref": 4,
        "Common.Cfg.ShMin": 4,
        "Common.Cfg.ShMax": 4,
        "Common.Cfg.ActiveNE": active_ne,
        "Common.Cfg.AccDoubleBufEn": 1,
        "Common.TaskInfo.NID": nid,
        "TileDMASrc.DMAConfig.En": 1,
        "TileDMASrc.DMAConfig.CacheHint": 2,
        "TileDMASrc.DMAConfig.CacheHintReuse": 14,
        "TileDMASrc.DMAConfig.CacheHintNoReuse": 12,
        "TileDMASrc.BaseAddr.Addr": src_base >> 6,
        "TileDMASrc.RowStride.Stride": in_row >> 6,
        "TileDMASrc.PlaneStride.PlaneStride": in_plane >> 6,
        "TileDMASrc.DepthStride.Stride": c * in_plane >> 6,
        "TileDMASrc.GroupStride.Stride": c * in_plane >> 6,
        "TileDMASrc.Fmt.FmtMode": 1,
        "TileDMASrc.Fmt.Truncate": 3,
        "TileDMASrc.Fmt.MemFmt": fi,
        "TileDMASrc.Fmt.Interleave": 1,
        "L2.SourceCfg.SourceType": 2,
        "L2.SourceChannelStride.Stride": l2_ch,
        "L2.SourceRowStride.Stride": l2_row,
        "L2.ResultCfg.ResultType": 2,
        "L2.ResultCfg.L2BfrMode": 1,
        "L2.ResultBase.Addr": h * l2_row,
        "NE.KernelCfg.KernelFmt": fk,
        "NE.KernelCfg.PalettizedBits": 8,
        "NE.MACCfg.BinaryPoint": 28,
        "NE.MACCfg.BiasMode": int(bias is not None),
        "NE.MACCfg.MatrixBiasEn": int(vector),
        "NE.AccBias.AccBias": _fp16_bits(bias) if bias is not None and not vector else 0,
        "NE.MACCfg.NonlinearMode": NONLINEAR_CODES[nonlinear],
        "NE.PostScale.PostScale": _fp16_bits(post_scale),
        "TileDMADst.DMAConfig.En": 1,
        "TileDMADst.DMAConfig.CacheHint": 3,
        "TileDMADst.DMAConfig.L2BfrMode": 1,
        "TileDMADst.BaseAddr.Addr": dst_base >> 6,
        "TileDMADst.RowStride.RowStride": out_row >> 6,
        "TileDMADst.PlaneStride.PlaneStride": out_plane >> 6,
        "TileDMADst.DepthStride.DepthStride": cout * out_plane >> 6,
        "TileDMADst.GroupStride.GroupStride": cout * out_plane >> 6,
        "TileDMADst.Fmt.FmtMode": 1,
        "TileDMADst.Fmt.Truncate": 3,
        "TileDMADst.Fmt.MemFmt": fo,
        "TileDMADst.Fmt.ZeroPadLast": 1,
        "TileDMADst.Fmt.ZeroPadFirst": 1,
        "TileDMADst.Fmt.Interleave": 1,
    }
    for cfg in ("SourceCfg", "ResultCfg"):  # L2 source and result: DMA format/interleave, aliasing
        for k in (
            "AliasConvSrc",
            "AliasConvRslt",
            "DMAFmt",
            "DMAInterleave",
            "AliasPlanarSrc",
            "AliasPlanarRslt",
        ):
            v[f"L2.{cfg}.{k}"] = 1
    rest = lay.wbytes + lay.bbytes
    for k in range(CORES):  # KernelDMASrc channel k feeds NE core k
        v[f"KernelDMASrc.CoeffDMAConfig[{k}].CacheHint"] = 2
        v[f"KernelDMASrc.CoeffBfrSize[{k}].MemBfrSize"] = (lay.sizes[0] if k == 0 else rest) >> 6
        if k < lay.lanes:
            v[f"KernelDMASrc.CoeffDMAConfig[{k}].En"] = 1
            v[f"KernelDMASrc.CoeffBaseAddr[{k}].Addr"] = (kernel_base + lay.offsets[k]) >> 6
    return td.update(v)


# raw bits of unnamed words as Apple's elementwise programs have them (unary/tanh.bin,
# unary/sigmoid.bin TD1): the KernelDMASrc and NE raw bits only on NE tasks
_ELT_RAW = {0x12C: 0x1, 0x140: 0x1, 0x148: 0x2041, 0x15C: 0x1, 0x170: 0x8880, 0x1AC: 0x100}
_ELT_NE_RAW = {0x02C: 0x40, 0x0F4: 0x80, 0x0F8: 0x80, 0x0FC: 0x80, 0x100: 0x80, 0x244: 0x100000}


def _layout3(shape, strides, what):
    c, h, w = shape
    row, plane = strides or (None, None)
    row = row if row is not None else _ru(2 * w, ALIGN)
    plane = plane if plane is not None else _ru(row * h, ALIGN)
    for name, v in (("row", row), ("plane", plane)):
        if v % 64 or v <= 0:
            raise ValueError(f"{what} {name} stride {v} is not a positive multiple of 64 bytes (SPEC 5)")
    return row, plane


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
    (``SourceType`` 3).  A binary op's source 1 likewise from slot ``src1`` (TileDMASrc's
    second register set, L2 window at ``l2_src1``) or, with ``src1_in_l2``, from L2 at
    ``l2_src1`` (``RBE1`` = 0).  The result goes to slot ``dst`` through TileDMADst (L2
    staging at ``l2_dst``), or, with ``keep``, stays in L2 at ``l2_dst`` for a later task
    (``ResultType`` 3).  L2 addresses are bytes (multiples of 16); by default the windows
    follow each other from ``l2_src`` (one whole tensor each: ``TileHeight`` = H).
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
    if not binary and (src1 is not None or src1_in_l2):
        raise ValueError("a second operand needs a binary planar operation")
    for name, base, m in (
        ("src_base", src_base, 64),
        ("src1_base", src1_base, 64),
        ("dst_base", dst_base, 64),
        ("kernel_base", kernel_base, 64),
        ("l2_src", l2_src, 16),
        ("l2_src1", l2_src1 or 0, 16),
        ("l2_dst", l2_dst or 0, 16),
    ):
        if base < 0 or base % m:
            raise ValueError(f"{name} must be a non-negative multiple of {m}, got {base}")
    ch16 = _ru(2 * w, L2_UNIT)  # one channel row in L2 (16-byte units below)
    tensor_l2 = c * h * ch16
    if l2_src1 is None:
        l2_src1 = l2_src + tensor_l2
    if l2_dst is None:
        l2_dst = (l2_src1 if binary else l2_src) + tensor_l2
    lut = op is None and NONLINEAR_CODES[nonlinear] == 2
    td = TaskDescriptor()
    for off, bits in {**_ELT_RAW, **(_ELT_NE_RAW if op is None else {})}.items():
        td.words[off // 4] |= bits
    v = {
        "Header.EON": int(eon),
        "Header.LogEvents": log_events,
        "Header.DebugLogEvents": 0xFFF86A,
        "Header.SPL": 1,
        "Header.TSR": 1,
        "Header.TSE": 1,
        "Header.SrcLoc": 1,
        "Header.DstLoc": 1,
        "Header.RBase0": 0 if src_in_l2 else src,
        "Header.RBE0": int(not src_in_l2),
        "Header.WBase": 0 if keep else dst,
        "Header.WBE": int(not keep),
        "Header.ENE": 1,
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
        "Common.GroupConvCfg.NumGroups": 1,
        "Common.GroupConvCfg.UnicastCin": 1,
        "Common.TileCfg.TileHeight": tile_height or h,
        "Common.TaskInfo.NID": nid,
        "Header.NID": nid,
        "L2.SourceCfg.SourceType": 3 if src_in_l2 else 2,
        "L2.SourceBase.Addr": l2_src // L2_UNIT,
        "L2.SourceChannelStride.Stride": ch16 // L2_UNIT,
        "L2.SourceRowStride.Stride": c * ch16 // L2_UNIT,
        "L2.ResultCfg.ResultType": 3 if keep else 2,
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
                "NE.PostScale.PostScale": _fp16_bits(post_scale),
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
        row, plane = _layout3(shape, src_strides, "src")
        v.update(
            {
                "TileDMASrc.DMAConfig.En": 1,
                "TileDMASrc.DMAConfig.CacheHint": 2,
                "TileDMASrc.DMAConfig.CacheHintReuse": 14,
                "TileDMASrc.DMAConfig.CacheHintNoReuse": 12,
                "TileDMASrc.BaseAddr.Addr": src_base >> 6,
                "TileDMASrc.RowStride.Stride": row >> 6,
                "TileDMASrc.PlaneStride.PlaneStride": plane >> 6,
                "TileDMASrc.DepthStride.Stride": c * plane >> 6,
                "TileDMASrc.GroupStride.Stride": c * plane >> 6,
                "TileDMASrc.Fmt.FmtMode": 1,
                "TileDMASrc.Fmt.Truncate": 3,
                "TileDMASrc.Fmt.MemFmt": 2,
                "TileDMASrc.Fmt.Interleave": 1,
            }
        )
        for cfg in (
            "AliasConvSrc",
            "AliasConvRslt",
            "DMAFmt",
            "DMAInterleave",
            "AliasPlanarSrc",
            "AliasPlanarRslt",
        ):
            v[f"L2.SourceCfg.{cfg}"] = 1
    if not keep:
        row, plane = _layout3(shape, dst_strides, "dst")
        v.update(
            {
                "TileDMADst.DMAConfig.En": 1,
                "TileDMADst.DMAConfig.CacheHint": 3,
                "TileDMADst.DMAConfig.L2BfrMode": 1,
                "TileDMADst.BaseAddr.Addr": dst_base >> 6,
                "TileDMADst.RowStride.RowStride": row >> 6,
                "TileDMADst.PlaneStride.PlaneStride": plane >> 6,
                "TileDMADst.DepthStride.DepthStride": c * plane >> 6,
                "TileDMADst.GroupStride.GroupStride": c * plane >> 6,
                "TileDMADst.Fmt.FmtMode": 1,
                "TileDMADst.Fmt.Truncate": 3,
                "TileDMADst.Fmt.MemFmt": 2,
                "TileDMADst.Fmt.ZeroPadLast": 1,
                "TileDMADst.Fmt.ZeroPadFirst": 1,
                "TileDMADst.Fmt.Interleave": 1,
                "L2.ResultCfg.L2BfrMode": 1,
            }
        )
    for cfg in ("DMAFmt", "DMAInterleave"):
        v[f"L2.ResultCfg.{cfg}"] = 1
    td.update(v)
    if op is not None:
        unnamed = {"Common.Cfg.TaskType": 3 if binary else 2, "Common.ChCfg.Src1InFmt": 2 if binary else 0}
        if binary:
            unnamed.update(
                {
                    "L2.Source1Base.Addr": l2_src1 // L2_UNIT,
                    "L2.Source1ChannelStride.Stride": ch16 // L2_UNIT,
                    "L2.Source1RowStride.Stride": c * ch16 // L2_UNIT,
                }
            )
            if not src1_in_l2:
                row, plane = _layout3(shape, src1_strides, "src1")
                td.update({"Header.RBase1": src1, "Header.RBE1": 1})
                unnamed.update(
                    {
                        "TileDMASrc1.BaseAddr.Addr": src1_base >> 6,
                        "TileDMASrc1.RowStride.Stride": row >> 6,
                        "TileDMASrc1.PlaneStride.PlaneStride": plane >> 6,
                        "TileDMASrc1.DepthStride.Stride": c * plane >> 6,
                        "TileDMASrc1.GroupStride.Stride": c * plane >> 6,
                        "TileDMASrc1.Fmt.MemFmt": 2,
                    }
                )
        td.update(unnamed)
    return td
