"""Helpers of the planar-engine tests: small planar TDs and an independent numpy reference.

The TDs come from fastane's own assembler (fastane.td.asm), in the corpus's conventions:
source 0 from ``RBase0`` through TileDMASrc, source 1 from ``RBase1`` through TileDMASrc's
second register set, the result through TileDMADst; L2 windows one after the other
(source 0, source 1, result).
"""

from fractions import Fraction

import numpy as np

from fastane.device import planar
from fastane.td.asm import eltwise_td, reduce_td

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
    ``shape`` = (C, H, W), built by fastane's assembler (:func:`fastane.td.asm.eltwise_td`,
    :func:`~fastane.td.asm.reduce_td`; a reduction's rows are ``groups`` rows of ``W``).
    Layouts are ``(base, row, plane)`` bytes (default: dense).  What the builders refuse
    to emit -- the malformed or never-observed configurations the fault tests need
    (``task_type``, ``words``, grouped elementwise tasks, reductions of several rows per
    group, from L2 or to DRAM, a broadcast unary operand) -- is
    written over the built TD afterwards."""
    c, h, w = shape
    binary = name in ("add", "sub", "mul", "max", "min")
    reduce = name in ("sum", "max-reduce", "recip-sum")
    rbe1 = binary if rbe1 is None else rbe1
    s0 = src_layout or dense(shape)
    s1 = src1_layout or dense(shape)
    d = dst_layout or dense(shape)
    scales = dict(in_scale=in_scale, out_scale=out_scale, offset=offset)
    if reduce:
        td = reduce_td(
            groups,
            w,
            op=name,
            src=src,
            src_base=s0[0],
            row_stride=s0[1],
            l2_src=source_base,
            l2_dst=result_base or 0,
            nid=nid,
            **scales,
        )
        td.update(
            {"Common.Cin.Cin": c, "Common.Cout.Cout": c, "Common.InDim.Hin": h, "Common.OutDim.Hout": h}
        )
        if result_type != 0:
            td["L2.ResultCfg.ResultType"] = result_type
        if source_type != 2:  # rows from L2: no layout is known for them (refused by the device)
            td.update({"L2.SourceCfg.SourceType": source_type, "Header.RBE0": 0})
    else:
        kw = {}
        if binary and rbe1:
            kw = dict(src1=src1, src1_base=s1[0], src1_strides=s1[1:])
        elif binary:
            kw = dict(src1_in_l2=True, src1_broadcast=bool(broadcast[1]))
        td = eltwise_td(
            shape,
            op=name,
            src=src,
            src_base=s0[0],
            src_strides=s0[1:],
            dst=dst,
            dst_base=d[0],
            dst_strides=d[1:],
            l2_src=source_base,
            l2_src1=source1_base,
            l2_dst=result_base,
            src_in_l2=source_type in (0, 3),
            src_vector=source_type == 0,
            src_broadcast=bool(broadcast[0]),
            keep=result_type in (0, 3),
            vector_out=result_type == 0,
            tile_height=min(h, 32),
            nid=nid,
            **kw,
            **scales,
        )
        if groups != 1:
            td["Common.GroupConvCfg.NumGroups"] = groups
        if broadcast[1] and not binary:
            planar.set_unnamed(td, {"Common.Broadcast.Src1": 1})
    if words is not None:
        td.update({f"Planar.Word[{i}]": v for i, v in enumerate(words)})
    if task_type is not None:
        planar.set_unnamed(td, {"Common.Cfg.TaskType": task_type})
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
