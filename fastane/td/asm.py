"""The assembler side: TDs from a high-level description.

:func:`conv_td` builds the TD of one convolution task (one image, one tile: by default the whole
tensors, or a tile of larger ones through base offsets and strides) the way Apple's compiler lays out the seed's 1x1 convolution (``corpus/seed-conv1x1.td``):
strides from SPEC 5 (row = round_up(W * bytes, 64), plane = round_up(row * H, 64), depth =
plane * C), output channels spread over the 16 NE cores (KernelDMASrc channel k feeds core k),
the L2 source followed by the L2 result.  Defaults not implied by the description (event masks,
cache hints, L2 aliasing, words the bit map leaves unnamed) are the seed's values.

The elementwise and planar builders (:func:`eltwise_td`, :func:`reduce_td`) live in
:mod:`fastane.td.asm_planar` and are re-exported here.
"""

from __future__ import annotations

import math

from ..m1 import ALIGN, CORES, FORMATS, L2_UNIT, kernel_layout
from ..m1 import round_up as _ru
from .codec import TaskDescriptor
from .asm_planar import ALIAS, NONLINEAR_CODES, dst_dma, fp16_bits, header, src_dma
from .asm_planar import eltwise_td, reduce_td  # noqa: F401 (re-exported: the builders live in one place)

FMT_CODES = {"uint8": 0, "u8": 0, "int8": 1, "i8": 1, "fp16": 2, "float16": 2, "f16": 2}

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
        **header(eon, log_events),
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
        "L2.SourceCfg.SourceType": 2,
        "L2.SourceChannelStride.Stride": l2_ch,
        "L2.SourceRowStride.Stride": l2_row,
        "L2.ResultCfg.ResultType": 2,
        "L2.ResultBase.Addr": h * l2_row,
        "NE.KernelCfg.KernelFmt": fk,
        "NE.KernelCfg.PalettizedBits": 8,
        "NE.MACCfg.BinaryPoint": 28,
        "NE.MACCfg.BiasMode": int(bias is not None),
        "NE.MACCfg.MatrixBiasEn": int(vector),
        "NE.AccBias.AccBias": fp16_bits(bias) if bias is not None and not vector else 0,
        "NE.MACCfg.NonlinearMode": NONLINEAR_CODES[nonlinear],
        "NE.PostScale.PostScale": fp16_bits(post_scale),
    }
    src_dma(v, c, in_row, in_plane, src_base, fi)
    dst_dma(v, cout, out_row, out_plane, dst_base, fo)
    for cfg in ("SourceCfg", "ResultCfg"):  # L2 source and result: DMA format/interleave, aliasing
        for k in ALIAS:
            v[f"L2.{cfg}.{k}"] = 1
    rest = lay.wbytes + lay.bbytes
    for k in range(CORES):  # KernelDMASrc channel k feeds NE core k
        v[f"KernelDMASrc.CoeffDMAConfig[{k}].CacheHint"] = 2
        v[f"KernelDMASrc.CoeffBfrSize[{k}].MemBfrSize"] = (lay.sizes[0] if k == 0 else rest) >> 6
        if k < lay.lanes:
            v[f"KernelDMASrc.CoeffDMAConfig[{k}].En"] = 1
            v[f"KernelDMASrc.CoeffBaseAddr[{k}].Addr"] = (kernel_base + lay.offsets[k]) >> 6
    return td.update(v)
