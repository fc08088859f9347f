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
    return rows, width, None


def place_rows(node, consts, types, add) -> None:
    """Add the layer of ``node`` (one of :data:`ROW_OPS`, or a windowed pooling)."""
    from .. import rowops

    if node.op == "avg_pool":
        from .place_rules import avg_pool_as_conv

        conv, reason = avg_pool_as_conv(node, types)
        if conv is None:
            add([node], "host", reason, "host")
            return
        call, plan, name = conv
        add([node], "ane", reason, "mac", lambda xs: [call(xs[0])], name, plan, pool_weight=True)
        return
    if node.op == "max_pool":
        add([node], "host", POOL_REASON, "host")
        return
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
        return
    x_shape = types[node.inputs[0]].shape
    out_shape = types[node.outputs[0]].shape
    eps = float(node.attrs.get("epsilon", 1e-5)) if op in ("layer_norm", "rms_norm") else 0.0
    scale = bias = None
    if op in ("layer_norm", "rms_norm"):  # constants over the normalized (trailing) axes
        inner = x_shape[len(x_shape) - len(_reduced_axes(node, consts, len(x_shape))) :]
        scale, bias = (
            np.broadcast_to(consts[node.inputs[i]], inner).reshape(width)
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

    from ..lower import rows as _rows

    problem = _rows.RowOp(op, rows, width, eps, scale is not None, bias is not None)
    note = "" if width == x_shape[-1] else "the trailing axes as one row (a reshape: no data movement)"
    add([node], "ane", note, kind, run, op, lambda: _rows.plan(problem), rows=rows, width=width)
