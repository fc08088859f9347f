"""Helpers of the planar-engine tests: small planar TDs and an independent numpy reference.

The TDs set exactly the registers fastane's planar engine reads (docs/device.md, "Planar
engine"), in the corpus's conventions: source 0 from ``RBase0`` through TileDMASrc,
source 1 from ``RBase1`` through TileDMASrc's second register set, the result through
TileDMADst; L2 windows laid out as the corpus does (source 0, source 1, result).
"""

from fractions import Fraction

import numpy as np

from fastane.device import planar
from fastane.td import TaskDescriptor

F16 = np.float16
QNAN = 0x7E00


def ru(x, m):
    return -(-x // m) * m


def dense(shape, base=0, pad_rows=0):
    """(base, row, plane) byte layout of a (C, H, W) fp16 tensor, rows padded by
    ``pad_rows`` extra 64-byte bursts."""
    c, h, w = shape
    row = ru(w * 2, 64) + 64 * pad_rows
    return base, row, ru(row * h, 64)


def planar_td(
    name,
    shape,
    *,
    out_scale=1.0,
    offset=0.0,
    in_scale=1.0,
    src=5,
    src1=6,
    dst=4,
    src_layout=None,
    src1_layout=None,
    dst_layout=None,
    source_type=2,
    result_type=2,
    source_base=0,
    source1_base=None,
    result_base=None,
    task_type=None,
    groups=1,
    broadcast=(0, 0),
    rbe1=None,
    words=None,
    nid=1,
):
    """A planar TD computing ``name`` (a :data:`fastane.device.planar.OPCODES` key) on
    ``shape`` = (C, H, W).  Layouts are ``(base, row, plane)`` bytes (default: dense)."""
    c, h, w = shape
    binary = name in ("add", "sub", "mul", "max", "min")
    reduce = name in ("sum", "max-reduce", "recip-sum")
    rbe1 = binary if rbe1 is None else rbe1
    s0 = src_layout or dense(shape)
    s1 = src1_layout or dense(shape)
    d = dst_layout or dense(shape)
    strip = ru(w * 2, 16)
    tile = min(h, 32)
    src1_l2 = ru(tile * c * strip, 64) if source1_base is None else source1_base
    res_l2 = src1_l2 + (tile * c * strip if binary else 0) if result_base is None else result_base
    td = TaskDescriptor.build(
        {
            "Header.EON": 1,
            "Header.NID": nid,
            "Header.RBase0": src,
            "Header.RBE0": int(source_type == 2),
            "Header.RBase1": src1 if rbe1 else 0,
            "Header.RBE1": int(bool(rbe1)),
            "Header.WBase": dst,
            "Header.WBE": int(result_type == 2),
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
            "Common.GroupConvCfg.NumGroups": groups,
            "Common.TileCfg.TileHeight": tile,
            "TileDMASrc.DMAConfig.En": 1,
            "TileDMASrc.BaseAddr.Addr": s0[0] >> 6,
            "TileDMASrc.RowStride.Stride": s0[1] >> 6,
            "TileDMASrc.PlaneStride.PlaneStride": s0[2] >> 6,
            "TileDMASrc.DepthStride.Stride": c * s0[2] >> 6,
            "TileDMASrc.GroupStride.Stride": (s0[1] if groups > 1 else c * s0[2]) >> 6,
            "TileDMASrc.Fmt.MemFmt": 2,
            "L2.SourceCfg.SourceType": source_type,
            "L2.SourceBase.Addr": source_base >> 4,
            "L2.SourceChannelStride.Stride": strip >> 4,
            "L2.SourceRowStride.Stride": c * strip >> 4,
            "L2.ResultCfg.ResultType": result_type,
            "L2.ResultBase.Addr": res_l2 >> 4,
            "TileDMADst.DMAConfig.En": int(result_type == 2),
            "TileDMADst.BaseAddr.Addr": d[0] >> 6,
            "TileDMADst.RowStride.RowStride": d[1] >> 6,
            "TileDMADst.PlaneStride.PlaneStride": d[2] >> 6,
            "TileDMADst.DepthStride.DepthStride": c * d[2] >> 6,
            "TileDMADst.GroupStride.GroupStride": c * d[2] >> 6,
            "TileDMADst.Fmt.MemFmt": 2,
            "TileDMADst.Fmt.ZeroPadLast": 1,
        }
    )
    ws = words or planar.words(name, out_scale, offset, in_scale)
    td.update({f"Planar.Word[{i}]": v for i, v in enumerate(ws)})
    planar.set_unnamed(
        td,
        {
            "Common.Cfg.TaskType": task_type
            if task_type is not None
            else 5
            if reduce
            else 3
            if binary
            else 2,
            "Common.ChCfg.Src1InFmt": 2 if binary else 0,
            "Common.Broadcast.Src0": broadcast[0],
            "Common.Broadcast.Src1": broadcast[1],
            "TileDMASrc1.BaseAddr.Addr": s1[0] >> 6,
            "TileDMASrc1.RowStride.Stride": s1[1] >> 6,
            "TileDMASrc1.PlaneStride.PlaneStride": s1[2] >> 6,
            "TileDMASrc1.DepthStride.Stride": c * s1[2] >> 6,
            "TileDMASrc1.GroupStride.Stride": c * s1[2] >> 6,
            "TileDMASrc1.Fmt.MemFmt": 2 if binary else 0,
            "L2.Source1Base.Addr": src1_l2 >> 4 if binary else 0,
            "L2.Source1ChannelStride.Stride": strip >> 4 if binary else 0,
            "L2.Source1RowStride.Stride": c * strip >> 4 if binary else 0,
            "L2.ResultGroupStride.Stride": 1 if reduce else 0,
        },
    )
    return td


# ---------------------------------------------------------------------------- references
def bits(a):
    """fp16 patterns with every NaN as the quiet NaN 0x7e00 (fastane's canonical NaN)."""
    b = np.asarray(a, F16).view(np.uint16).copy()
    b[np.isnan(np.asarray(a, F16))] = QNAN
    return b


def _f16(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float64).astype(F16).astype(np.float64)


def ref_eltwise(name, a, b=None, in_scale=1.0, out_scale=1.0, offset=0.0):
    """The meaning of each elementwise op in numpy, each stage rounded once to fp16:
    ``round16(s * round16(op(round16(s0 * a), b)) + c)`` (float64 is exact for every stage
    but the last, where it is exact whenever the result is finite)."""
    a = np.asarray(a, F16).astype(np.float64)
    b = None if b is None else np.broadcast_to(np.asarray(b, F16).astype(np.float64), a.shape)
    with np.errstate(all="ignore"):
        if in_scale != 1.0:
            a = _f16(a * in_scale)
        zero = None if b is None else (a == 0) & (b == 0)
        if name == "add":
            y = a + b
        elif name == "sub":
            y = a - b
        elif name == "mul":
            y = a * b
        elif name == "max":
            y = np.maximum(a, b)
            y[zero] = np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0)[zero]
        elif name == "min":
            y = np.minimum(a, b)
            y[zero] = np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0)[zero]
        elif name == "abs":
            y = np.abs(a)
        elif name == "scale":
            y = a.copy()
        else:
            raise ValueError(name)
        y = _f16(y)
        if (out_scale, offset) != (1.0, 0.0):
            y = _f16(out_scale * y if offset == 0 else out_scale * y + offset)
    return y.astype(F16)


def round16_exact(q: Fraction) -> float:
    """The fp16 value nearest to the rational ``q`` (ties to even), as a float."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -14) - 10)
    n = q / ulp
    k = n.numerator // n.denominator
    rest = n - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2):
        k += 1
    v = k * ulp
    return sign * (float("inf") if v >= 65520 else float(v))
