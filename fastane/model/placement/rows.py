"""Placement of the row operations (:mod:`fastane.rowops`, the planar engine): Softmax,
LogSoftmax, LayerNormalization, RMSNormalization, ReduceSum/Mean/Max/Min and the global
poolings run on the ANE when what they reduce is the innermost (row-major trailing) part
of the tensor; else, and for windowed pooling, on the host with the reason.

The rows: the reduced axes must be the last ones (``axis = -1``, or trailing axes
together: LayerNormalization over ``axis..end``, a ReduceMean over ``(2, 3)`` of NCHW,
GlobalAveragePool), which in the row-major layout are one contiguous row per outer index:
a reshape (no data movement) gives ``rows x width``.  Another axis would need a transpose
first; fastane leaves such a layer on the host and says so.
"""

from __future__ import annotations

import math

import numpy as np

from ... import api as _api
from . import plan as _plan
from .context import Context
from ..ops import conv_geometry

#: graph ops placed here -> the row operation of fastane.lower.rows
ROW_OPS = {
    "softmax": "softmax",
    "log_softmax": "log_softmax",
    "layer_norm": "layer_norm",
    "rms_norm": "rms_norm",
    "reduce_sum": "reduce_sum",
    "reduce_mean": "reduce_mean",
    "reduce_max": "reduce_max",
    "reduce_min": "reduce_min",
    "global_avg_pool": "reduce_mean",
    "global_max_pool": "reduce_max",
}
#: the tolerance class of each (the model's per-layer error report)
KIND = {"reduce_sum": "exact", "reduce_max": "exact", "reduce_min": "exact"}
MAX_ROW = 16384  # a planar task's row (Common.InDim.Win); fastane.lower.rows refuses longer
POOL_REASON = (
    "windowed pooling: the planar engine's known operations reduce whole rows only "
    "(Common.Cfg.TaskType 5), and TileDMA cannot read a window's shifted or strided "
    "columns (bases are 64-byte units, the element stride is fixed): no ANE lowering"
)


def _axis(a, rank):
    a = int(a)
    return a + rank if a < 0 else a


def _reduced_axes(node, consts, rank):
    """The axes ``node`` reduces (sorted), or None when they are not constant."""
    op = node.op
    if op in ("global_avg_pool", "global_max_pool"):
        return tuple(range(2, rank))
    if op in ("softmax", "log_softmax"):
        a = _axis(node.attrs.get("axis", -1), rank)
        return tuple(range(a, rank)) if node.attrs.get("legacy") else (a,)
    if op in ("layer_norm", "rms_norm"):
        return tuple(range(_axis(node.attrs.get("axis", -1), rank), rank))
    axes = consts.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if len(node.inputs) > 1 and node.inputs[1] and axes is None:
        return None
    if axes is None or np.size(axes) == 0:
        return () if node.attrs.get("noop_with_empty_axes") else tuple(range(rank))
    return tuple(sorted({_axis(a, rank) for a in np.asarray(axes).reshape(-1)}))


def why_not(node, consts, types):
    """``(rows, width, None)`` when ``node`` runs on the ANE as a row operation, else
    ``(0, 0, reason)``."""
    x = types[node.inputs[0]]
    if np.dtype(x.dtype).kind != "f":
        return 0, 0, "integer operands: the planar engine computes fp16"
    rank = len(x.shape)
    axes = _reduced_axes(node, consts, rank)
    if axes is None:
        return 0, 0, "the reduction axes are not constant"
    if not axes:
        return 0, 0, "no axis to reduce (a copy: nothing for the ANE to compute)"
    if rank == 0 or axes != tuple(range(rank - len(axes), rank)):
        return (
            0,
            0,
            (
                f"reduces axes {list(axes)} of a {rank}-D tensor: fastane lowers a reduction over the "
                f"last (trailing) axes only; the others would need a transpose first"
            ),
        )
    width = math.prod(x.shape[rank - len(axes) :])
    rows = math.prod(x.shape[: rank - len(axes)])
    if rows * width == 0:
        return 0, 0, "an empty tensor: nothing to compute"
    if width > MAX_ROW:
        return (
            0,
            0,
            (
                f"a row of {width} elements: a planar task reads at most {MAX_ROW}, and fastane does not "
                f"split a row's reduction (the partial results would be rounded to fp16)"
            ),
        )
    if node.op in ("layer_norm", "rms_norm"):
        for i in (1, 2):
            if len(node.inputs) > i and node.inputs[i] and node.inputs[i] not in consts:
                return 0, 0, "scale or bias is not constant: the program holds them as compile-time data"
        eps = float(node.attrs.get("epsilon", 1e-5))
        if not 0.0 <= eps <= 65504.0:  # the lowering's epsilon: an fp16 number >= 0 (NaN fails too)
            return 0, 0, f"epsilon {eps} is not an fp16 number >= 0, which the planar engine adds"
    return rows, width, None


def place_rows(node, ctx: Context) -> bool:
    """Add the layer of ``node`` (one of :data:`ROW_OPS`, or a windowed pooling); True."""
    consts, types, add = ctx.bound.consts, ctx.bound.types, ctx.add
    from ... import rowops

    if node.op == "avg_pool":
        conv, reason = avg_pool_as_conv(node, types)
        if conv is None:
            add([node], "host", reason, "host")
            return True
        call, plan, name = conv
        add([node], "ane", reason, "mac", lambda xs: [call(xs[0])], name, plan, pool_weight=True)
        return True
    if node.op == "max_pool":
        add([node], "host", POOL_REASON, "host")
        return True
    rows, width, reason = why_not(node, consts, types)
    if reason is None and len(node.outputs) > 1:
        reason = (
            "the Mean and InvStdDev outputs are used: the ANE's layer-norm chain keeps its mean and "
            "1/std vectors in L2 and writes only the normalised rows (fastane has no lowering that "
            "writes them out)"
        )
    op = ROW_OPS[node.op]
    kind = KIND.get(op, "table")
    if reason is not None:
        add([node], "host", reason, kind)
        return True
    x_shape = types[node.inputs[0]].shape
    out_shape = types[node.outputs[0]].shape
    eps = float(node.attrs.get("epsilon", 1e-5)) if op in ("layer_norm", "rms_norm") else 0.0
    scale = bias = None
    if op in ("layer_norm", "rms_norm"):  # constants over the normalized (trailing) axes
        inner = x_shape[len(x_shape) - len(_reduced_axes(node, consts, len(x_shape))) :]
        scale, bias = (
            # leading 1s beyond the normalised axes dropped (the shape inference checked them)
            np.broadcast_to(_trailing(consts[node.inputs[i]], len(inner)), inner).reshape(width)
            if len(node.inputs) > i and node.inputs[i]
            else None
            for i in (1, 2)
        )
        if scale is not None and np.all(np.asarray(scale, np.float64) == 1.0):
            scale = None  # x * 1 is x, bit for bit (instance_norm's unit scale): no task

    def run(xs):
        x = np.asarray(xs[0]).reshape(rows, width)
        fn = getattr(rowops, op)
        y = fn(x, scale, bias, eps) if op in ("layer_norm", "rms_norm") else fn(x)
        return [np.asarray(y).reshape(out_shape)]

    from ...lower import rows as _rows

    problem = _rows.RowOp(op, rows, width, eps, scale is not None, bias is not None)
    note = "" if width == x_shape[-1] else "the trailing axes as one row (a reshape: no data movement)"
    add([node], "ane", note, kind, run, op, lambda: _rows.plan(problem), rows=rows, width=width)
    return True


# ------------------------------------------------------------------------ average pooling
def avg_pool_as_conv(node, types):
    """``(call, reason)``: an AveragePool is a depthwise convolution with every weight
    fp16(1 / window) when each output divides by the whole window (no padding, or
    ``count_include_pad``) and no ceil-mode window runs past the padding; ``call(x)``
    runs it through ``fastane.conv1d/conv2d`` (the MAC's numerics: the weight rounded
    once to fp16, each product on the Q16.16 grid, one fp16 readout).  ``(None, reason)``
    otherwise.  No corpus program shows Apple's pooling; this is the plain lowering onto
    the one ANE unit fastane knows that sums windows (docs/lower.md, section 12)."""
    x_shape = types[node.inputs[0]].shape
    if np.dtype(types[node.inputs[0]].dtype).kind != "f":
        return None, "integer operands: the MAC array computes fp16"
    if len(x_shape) not in (3, 4):
        return None, f"{len(x_shape) - 2}-D pooling: the ANE's convolution has one or two spatial axes"
    k = tuple(int(v) for v in node.attrs["kernel"])
    s, d, pads, out = conv_geometry(node, x_shape, k)
    past = any(
        (o - 1) * st + (kk - 1) * dd + 1 > n + pb + pe
        for o, st, kk, dd, n, (pb, pe) in zip(out, s, k, d, x_shape[2:], pads)
    )
    padded = any(pb or pe for pb, pe in pads)
    if past or (padded and not node.attrs.get("count_include_pad", 0)):
        return None, (
            "an average whose divisor changes at the border (padding not counted, or ceil-mode "
            "windows past the end): not one convolution; " + "windowed pooling has no other ANE lowering"
        )
    c = x_shape[1]
    w16 = np.full((c, 1) + k, 1.0 / math.prod(k), np.float16)
    one_d = len(x_shape) == 3
    sym = all(pb == pe for pb, pe in pads)

    def call(x):
        pad = tuple(pb for pb, _ in pads)
        if not sym:
            x = np.pad(np.asarray(x), ((0, 0), (0, 0)) + tuple(pads))
            pad = (0,) * len(pads)
        if one_d:
            return _api.conv1d(x, w16, None, s[0], pad[0], d[0], c)
        return _api.conv2d(x, w16, None, s, pad, d, c)

    def plan():
        xs = tuple(x_shape)
        if not sym:
            xs = xs[:2] + tuple(n + pb + pe for n, (pb, pe) in zip(xs[2:], pads))
        return _plan.conv(xs, w16.shape, s, pads if sym else ((0, 0),) * len(pads), d, c, False, None)

    note = (
        f"average pooling as a depthwise convolution with weights fp16(1/{math.prod(k)}) = "
        f"{float(w16.flat[0])!r} (no pooling program in the corpus)"
    )
    return (call, plan, "conv1d" if one_d else "conv2d"), note


def _trailing(c, rank: int) -> np.ndarray:
    """``c`` without the leading dimensions beyond ``rank`` (all 1s)."""
    c = np.asarray(c)
    return c.reshape(c.shape[max(c.ndim - rank, 0) :])
