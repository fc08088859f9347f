"""fastane's op vocabulary for model graphs: for each op, its shape/dtype inference and its
host ("CPU") implementation in float32.

The host implementation is what runs an op that is not placed on the ANE, and the fp32
reference the per-layer report compares the ANE's result with.  It is numpy in float32
(float inputs are widened to float32 first, an integer tensor stays integer); it is *not*
a model of the ANE's arithmetic -- that only ever runs on the emulated device.

Attributes are normalised by the importers (fastane's names, operands as inputs):
``pads`` is a tuple of ``(begin, end)`` pairs, one per spatial axis; ``auto_pad`` is
``None``, ``"same_upper"``, ``"same_lower"`` or ``"valid"``.

This module holds the unary, binary, normalisation and pooling ops; the registry is
:mod:`.opdef`, the MAC ops are in :mod:`.mac`, the layout ops in :mod:`.layout`, the ops
fastane runs only on the host in :mod:`.host`, :mod:`.index` and :mod:`.resize`
(importing :mod:`fastane.model.ops` registers them all).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError
from .opdef import (
    HostCost,
    MilName,
    OnnxName,
    attr_input,
    check_axis,
    broadcast_shape,
    heavy,
    need_const,
    need_float,
    need_input,
    register_op,
    same_number,
    same_type,
    take,
)
from .mac import conv_geometry, conv_windows, onnx_auto_pad, onnx_pads, padded_sizes
from ..tensor import TensorType

__all__ = ["pool_geometry"]


# ------------------------------------------------------------------------ unary
def _unary(name, fn, kind="table", ane="", onnx=(), cost=None, mil=(), infer=same_type):
    register_op(name, infer, kind, ane=ane, onnx=onnx, cost=cost, mil=mil)(lambda node, x: fn(node, x))


def _erf(x):
    import math as _m

    return np.vectorize(_m.erf, otypes=[np.float64])(x).astype(x.dtype)


def _gelu(node, x):
    if node.attrs.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x**3)))
    return (0.5 * x.astype(np.float64) * (1 + _erf(x.astype(np.float64) / math.sqrt(2)))).astype(x.dtype)


_unary(
    "relu",
    lambda n, x: np.maximum(x, 0).astype(x.dtype),
    "exact",
    ane="activation",
    onnx=["Relu"],
    mil=["relu"],
    infer=same_number,
)
_unary(
    "leaky_relu",
    lambda n, x: np.where(x >= 0, x, x * np.float32(n.attrs.get("alpha", 0.01))),
    ane="activation",
    onnx=[OnnxName("LeakyRelu", take(alpha=0.01))],
)
_unary("tanh", lambda n, x: np.tanh(x), ane="activation", onnx=["Tanh"], mil=["tanh"])
_unary(
    "sigmoid",
    lambda n, x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype),
    ane="activation",
    onnx=["Sigmoid"],
    mil=["sigmoid"],
)


def _gelu_cost(node, in_types, out_types):
    # the erf form's float64 and object-array passes (the tanh form has none)
    return HostCost() if node.attrs.get("approximate") == "tanh" else _ERF_COST(node, in_types, out_types)


#: bytes an output element the erf-based host implementations make beyond the common
#: allowance (traced with tracemalloc on 2^22 float16 elements, December 2026: gelu 92,
#: erf 76 bytes an element against relu 16)
_ERF_COST = heavy(80)
_unary("gelu", _gelu, ane="activation", onnx=[OnnxName("Gelu", take(approximate="none"))], cost=_gelu_cost)
_unary("exp", lambda n, x: np.exp(x), ane="activation", onnx=["Exp"], mil=["exp"])
_unary("log", lambda n, x: np.log(x), ane="composed", onnx=["Log"], mil=["log"])
_unary("sqrt", lambda n, x: np.sqrt(x), ane="activation", onnx=["Sqrt"], mil=["sqrt"])
_unary("reciprocal", lambda n, x: np.reciprocal(x), ane="activation", onnx=["Reciprocal"])
_unary("exp2", lambda n, x: np.exp2(x), ane="activation")
_unary("rsqrt", lambda n, x: (1 / np.sqrt(x.astype(np.float64))).astype(x.dtype), ane="activation")
_unary("abs", lambda n, x: np.abs(x), "exact", ane="unary", onnx=["Abs"], mil=["abs"], infer=same_number)
_unary("neg", lambda n, x: np.negative(x), "exact", ane="unary", onnx=["Neg"], infer=same_number)
_unary(
    "sign", lambda n, x: np.sign(x), "exact", ane="activation", onnx=["Sign"], mil=["sign"], infer=same_number
)
_unary("floor", lambda n, x: np.floor(x), "exact", onnx=["Floor"], mil=["floor"])
_unary("ceil", lambda n, x: np.ceil(x), "exact", onnx=["Ceil"], mil=["ceil"])
_unary("erf", lambda n, x: _erf(x), ane="activation", onnx=["Erf"], cost=_ERF_COST, mil=["erf"])
_unary(
    "elu",
    lambda n, x: np.where(x > 0, x, np.float32(n.attrs.get("alpha", 1.0)) * np.expm1(x)),
    ane="activation",
    onnx=[OnnxName("Elu", take(alpha=1.0))],
)
_unary(
    "selu",
    lambda n, x: (
        np.float32(n.attrs.get("gamma", 1.0507009873554805))
        * np.where(x > 0, x, np.float32(n.attrs.get("alpha", 1.6732632423543772)) * np.expm1(x))
    ),
    ane="activation",
    onnx=[OnnxName("Selu", take("alpha", "gamma"))],
)
_unary(
    "hard_sigmoid",
    lambda n, x: np.clip(
        np.float32(n.attrs.get("alpha", 0.2)) * x + np.float32(n.attrs.get("beta", 0.5)), 0, 1
    ),
    ane="activation",
    onnx=[OnnxName("HardSigmoid", take(alpha=0.2, beta=0.5))],
)
_unary(
    "hard_swish",
    lambda n, x: x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1),
    ane="activation",
    onnx=["HardSwish"],
)
_unary("softplus", lambda n, x: np.logaddexp(np.float32(0), x), ane="composed", onnx=["Softplus"])
_unary(
    "identity",
    lambda n, x: x,
    "layout",
    onnx=["Identity", OnnxName("Dropout", lambda c, a, ins: c.mk(inputs=ins[:1]), doc="inference")],
    mil=["identity"],
    infer=lambda node, types, consts: [need_input(types, 0, node)],  # any dtype
)


def _clip_onnx(c, a, ins):
    if c.opset < 11:  # the bounds were attributes
        ins = ins[:1] + [
            c.const(a.get("min", -3.4028234663852886e38), np.float32),
            c.const(a.get("max", 3.4028234663852886e38), np.float32),
        ]
    return c.mk(inputs=ins)


@register_op("clip", same_number, "exact", ane="activation", onnx=[OnnxName("Clip", _clip_onnx)])
def _clip(node, x, lo=None, hi=None):
    if lo is not None:
        x = np.where(x < lo, lo, x)
    if hi is not None:
        x = np.where(x > hi, hi, x)
    return x


def _cast_infer(node, types, consts):
    return [TensorType(np.dtype(node.attrs["to"]), need_input(types, 0, node).shape)]


@register_op(
    "cast", _cast_infer, "exact", onnx=[OnnxName("Cast", lambda c, a, ins: c.mk({"to": c.dtype(a["to"])}))]
)
def _cast(node, x):
    return x.astype(node.attrs["to"])


# ------------------------------------------------------------------------ binary
def _binary_infer(node, types, consts):
    ts = [need_input(types, i, node) for i in range(len(node.inputs))]
    if len({np.dtype(t.dtype) for t in ts}) != 1:
        raise ModelError(f"{node.describe()}: operand dtypes differ: {', '.join(str(t) for t in ts)}")
    return [TensorType(ts[0].dtype, broadcast_shape([t.shape for t in ts], node))]


def _binary(name, fn, ane="binary", onnx=(), mil=()):
    """An elementwise op of two (ONNX: one or more) operands; its MIL names take ``x``, ``y``."""
    mil = [MilName(m, ("x", "y")) for m in mil]
    register_op(name, _binary_infer, "exact", ane=ane, onnx=onnx, mil=mil)(lambda node, *xs: _reduce(fn, xs))


def _reduce(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


def _int_div(a, b):
    """``a / b``; of integers, the quotient truncated toward zero (ONNX's, C's), exactly."""
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise ValueError("integer division by zero")
        q = np.floor_divide(a, b)
        return q + ((q < 0) & (q * b != a)).astype(q.dtype)
    return a / b


_binary("add", np.add, onnx=["Add", "Sum"], mil=["add"])
_binary("sub", np.subtract, onnx=["Sub"], mil=["sub"])
_binary("mul", np.multiply, onnx=["Mul"], mil=["mul"])
_binary("div", _int_div, ane="divide", onnx=["Div"], mil=["real_div"])
_binary("max", np.maximum, onnx=["Max"], mil=["maximum"])
_binary("min", np.minimum, onnx=["Min"], mil=["minimum"])
_binary("pow", lambda a, b: np.power(a, b), ane="unary", onnx=["Pow"], mil=["pow"])  # x ** 2: a planar square
# one slope (a scalar, or all equal): on the ANE as LeakyRelu's block (placement.eltwise)
register_op(
    "prelu", _binary_infer, "exact", ane="activation", onnx=[OnnxName("PRelu", doc="one slope; others: host")]
)(lambda node, x, s: np.where(x >= 0, x, x * s))


def _where_infer(node, types, consts):
    c, a, b = (need_input(types, i, node) for i in range(3))
    return [TensorType(a.dtype, broadcast_shape([c.shape, a.shape, b.shape], node))]


register_op("where", _where_infer, "exact", onnx=["Where"])(lambda node, c, a, b: np.where(c, a, b))


def _cmp_infer(node, types, consts):
    a, b = need_input(types, 0, node), need_input(types, 1, node)
    return [TensorType(np.dtype(np.bool_), broadcast_shape([a.shape, b.shape], node))]


register_op("equal", _cmp_infer, "exact", onnx=["Equal"], mil=[MilName("equal", ("x", "y"))])(
    lambda node, a, b: np.equal(a, b)
)
register_op("less", _cmp_infer, "exact", onnx=["Less"], mil=[MilName("less", ("x", "y"))])(
    lambda node, a, b: np.less(a, b)
)
register_op("greater", _cmp_infer, "exact", onnx=["Greater"], mil=[MilName("greater", ("x", "y"))])(
    lambda node, a, b: np.greater(a, b)
)


# ------------------------------------------------------------------------ normalisation
def _softmax_axes(node, x):
    axis = check_axis(node.attrs.get("axis", -1), x.ndim, node)
    return axis


def _softmax_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    check_axis(node.attrs.get("axis", -1), len(x.shape), node)
    return [x]


def _softmax_core(node, x, log):
    axis = _softmax_axes(node, x)
    shape = x.shape
    if node.attrs.get("legacy"):  # opset < 13: flatten to 2-D at axis
        x = x.reshape(math.prod(shape[:axis]), -1)
        axis = 1
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    ssum = np.sum(e, axis=axis, keepdims=True)
    y = (x - m - np.log(ssum)) if log else e / ssum
    return y.reshape(shape)


def _softmax_onnx(c, a, ins):
    legacy = c.opset < 13  # the input flattened to 2-D at axis
    return c.mk({"axis": a.get("axis", 1 if legacy else -1), "legacy": legacy})


register_op("softmax", _softmax_infer, "table", ane="rows", onnx=[OnnxName("Softmax", _softmax_onnx)])(
    lambda node, x: _softmax_core(node, x, False)
)
register_op("log_softmax", _softmax_infer, "table", ane="rows", onnx=[OnnxName("LogSoftmax", _softmax_onnx)])(
    lambda node, x: _softmax_core(node, x, True)
)


def _ln_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    axis = check_axis(node.attrs.get("axis", -1), len(x.shape), node)
    inner = tuple(x.shape[axis:])
    for i in (1, 2):
        if len(types) > i and types[i] is not None:
            # one value per normalised element: leading 1s aside (no more than x has), the
            # operand broadcasts to them
            s = types[i].shape
            if len(s) > len(x.shape) or math.prod(broadcast_shape([s, inner], node)) != math.prod(inner):
                raise ModelError(
                    f"{node.describe()}: input {i} of shape {types[i].shape} does not broadcast to "
                    f"the normalised shape {inner}"
                )
    # ONNX LayerNormalization's optional Mean and InvStdDev: one value per row, the
    # normalised axes kept as 1s.
    stats = TensorType(x.dtype, x.shape[:axis] + (1,) * (len(x.shape) - axis))
    return [x] + [stats] * (len(node.outputs) - 1)


def _ln_onnx(c, a, ins):
    if a.get("stash_type", 1) != 1:
        raise ModelNotImplementedError(f"{c.where}: stash_type {a['stash_type']} is not supported (only 1)")
    return c.mk({"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)}, n_out=3)


@register_op("layer_norm", _ln_infer, "table", ane="rows", onnx=[OnnxName("LayerNormalization", _ln_onnx)])
def _ln(node, x, scale, bias=None):
    axis = check_axis(node.attrs.get("axis", -1), x.ndim, node)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + np.float32(node.attrs.get("epsilon", 1e-5)))
    y = (x - mean) * inv * scale
    return [y if bias is None else y + bias, mean, inv]


@register_op(
    "rms_norm",
    _ln_infer,
    "table",
    ane="rows",
    onnx=[OnnxName("RMSNormalization", take(axis=-1, epsilon=1e-5))],
)
def _rms(node, x, scale, bias=None):
    axis = check_axis(node.attrs.get("axis", -1), x.ndim, node)
    ms = (x * x).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = x / np.sqrt(ms + np.float32(node.attrs.get("epsilon", 1e-5))) * scale
    return y if bias is None else y + bias


def _instance_infer(node, types, consts):
    """Instance and group normalisation of ``x`` (N x C x spatial) with ``scale`` and
    ``bias`` of one value a channel (:func:`_group_params`: a group for GroupNormalization
    before opset 21)."""
    x = need_float(need_input(types, 0, node), node)
    if len(x.shape) < 2:
        raise ModelError(f"{node.describe()}: input must be N x C x ..., got {x}")
    c, g = x.shape[1], int(node.attrs.get("groups", 0)) or x.shape[1]
    if g < 1 or c % g:
        raise ModelError(f"{node.describe()}: num_groups {g} does not divide the {c} channels")
    n = g if node.attrs.get("per_group") else c
    for i, what in ((1, "scale"), (2, "bias")):
        t = need_float(need_input(types, i, node, what), node, i)
        if tuple(t.shape) != (n,):
            raise ModelError(f"{node.describe()}: {what} must have shape ({n},), got {t}")
    return [x]


def _group_params(node, x, scale, bias):
    """``scale``, ``bias`` shaped to broadcast over ``x`` (one value a channel)."""
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    if node.attrs.get("per_group"):
        rep = x.shape[1] // scale.size
        scale, bias = np.repeat(scale, rep), np.repeat(bias, rep)
    return scale.reshape(shape), bias.reshape(shape)


def _groupnorm_onnx(c, a, ins):
    if a.get("stash_type", 1) != 1:
        raise ModelNotImplementedError(f"{c.where}: stash_type {a['stash_type']} is not supported (only 1)")
    # before opset 21, scale and bias hold one value a group
    return c.mk({"groups": a["num_groups"], "epsilon": a.get("epsilon", 1e-5), "per_group": c.opset < 21})


@register_op(
    "group_norm",
    _instance_infer,
    onnx=[
        OnnxName("InstanceNormalization", take(epsilon=1e-5), doc="a group a channel"),
        OnnxName("GroupNormalization", _groupnorm_onnx, since=18, doc="opset 18's per-group scale too"),
    ],
    cost=heavy(32),  # the float64 passes: the input, its deviations, the result
)
def _group_norm(node, x, scale, bias):
    """``x`` normalised over each group of channels and the spatial axes (mean and
    variance in float64), then scaled and shifted a channel."""
    g = int(node.attrs.get("groups", 0)) or x.shape[1]
    xg = x.astype(np.float64).reshape(x.shape[0], g, x.shape[1] // g * math.prod(x.shape[2:]))
    mean = xg.mean(axis=-1, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + np.float64(np.float32(node.attrs.get("epsilon", 1e-5))))).reshape(
        x.shape
    )
    s, b = _group_params(node, x, scale, bias)
    return (y * s + b).astype(np.float32)


def _reduce_axes(node, rank, consts_axes):
    if consts_axes is None or np.size(consts_axes) == 0:
        if node.attrs.get("noop_with_empty_axes"):
            return ()
        return tuple(range(rank))
    return tuple(sorted({check_axis(a, rank, node) for a in np.asarray(consts_axes).reshape(-1)}))


def _reduce_infer(node, types, consts):
    x = need_input(types, 0, node)
    axes_c = consts[1] if len(consts) > 1 else None
    if len(node.inputs) > 1 and node.inputs[1] and axes_c is None:
        need_const(consts, 1, node, "axes")
    axes = _reduce_axes(node, len(x.shape), axes_c)
    keep = node.attrs.get("keepdims", 1)
    shape = (
        tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        if keep
        else tuple(d for i, d in enumerate(x.shape) if i not in axes)
    )
    return [TensorType(x.dtype, shape)]


def _reduce_onnx(c, a, ins):
    attrs = {"keepdims": a.get("keepdims", 1), "noop_with_empty_axes": a.get("noop_with_empty_axes", 0)}
    return c.mk(attrs, attr_input(c, a, ins, "axes"))


#: reductions of a function, imported by every front end as their plain composition around a
#: ``reduce_sum`` (coremltools' MIL reduce_log_sum_exp, reduce_sum_square, reduce_l2_norm,
#: reduce_log_sum, reduce_l1_norm and ONNX's ReduceLogSumExp, ReduceSumSquare, ReduceL2,
#: ReduceLogSum, ReduceL1): the elementwise op before the sum (``"square"``: ``pow(x, 2)``)
#: and the one after it, each then placed and run as that op is
COMPOSED_REDUCTIONS = {
    "log_sum_exp": ("exp", "log"),
    "sum_square": ("square", None),
    "l2": ("square", "sqrt"),
    "log_sum": (None, "log"),
    "l1": ("abs", None),
}
#: ONNX op type -> its :data:`COMPOSED_REDUCTIONS` key
_ONNX_COMPOSED = {
    "ReduceLogSumExp": "log_sum_exp",
    "ReduceSumSquare": "sum_square",
    "ReduceL2": "l2",
    "ReduceLogSum": "log_sum",
    "ReduceL1": "l1",
}


def compose_reduction(kind: str, x: str, emit, const) -> None:
    """Emit :data:`COMPOSED_REDUCTIONS` ``[kind]`` on tensor ``x``: ``emit(op, inputs, last)``
    adds a node and returns its output (``last``: the node that makes the reduction's
    output; the caller adds the axes and keepdims to the ``reduce_sum``), ``const(value)``
    names a float32 constant."""
    pre, post = COMPOSED_REDUCTIONS[kind]
    if pre == "square":
        x = emit("pow", [x, const(2.0)], False)
    elif pre is not None:
        x = emit(pre, [x], False)
    x = emit("reduce_sum", [x], post is None)
    if post is not None:
        emit(post, [x], True)


def _composed_onnx(c, a, ins):
    """ONNX ReduceLogSumExp, ReduceSumSquare, ReduceL2, ReduceLogSum, ReduceL1: their
    composition (:data:`COMPOSED_REDUCTIONS`), the axes and keepdims on the ``reduce_sum``."""
    attrs = {"keepdims": a.get("keepdims", 1), "noop_with_empty_axes": a.get("noop_with_empty_axes", 0)}
    axes = attr_input(c, a, ins, "axes")[1:]
    made = []

    def emit(op, inputs, last):
        at = attrs if op == "reduce_sum" else {}
        inputs = inputs + axes if op == "reduce_sum" else inputs
        if last:
            made.append(c.mk(at, inputs, op=op))
            return made[-1].outputs[0]
        out = f"{c.name}/{op}:0"
        c.add(op, op, inputs, [out], at)
        return out

    compose_reduction(_ONNX_COMPOSED[c.op], ins[0], emit, lambda v: c.const(v, np.float32))
    return made[0]


def _composed_doc(onnx_op: str) -> str:
    """The docs' words for a composed reduction: ``x^2, then the sum, then sqrt``."""
    pre, post = COMPOSED_REDUCTIONS[_ONNX_COMPOSED[onnx_op]]
    steps = [{"square": "x^2"}.get(pre, pre)] if pre else []
    return ", then ".join(steps + ["the sum"] + ([post] if post else []))


def _reducer(name, fn, ane="rows", onnx="", composed=()):
    def host(node, x, axes=None):
        ax = _reduce_axes(node, x.ndim, axes)
        if not ax:
            return x
        return fn(x, axis=ax, keepdims=bool(node.attrs.get("keepdims", 1)))

    names = [OnnxName(onnx, _reduce_onnx)] + [
        OnnxName(k, _composed_onnx, doc=_composed_doc(k)) for k in composed
    ]
    register_op(name, _reduce_infer, "host", ane=ane, onnx=names)(host)


_reducer("reduce_mean", np.mean, onnx="ReduceMean")
_reducer("reduce_sum", np.sum, onnx="ReduceSum", composed=tuple(_ONNX_COMPOSED))
_reducer("reduce_max", np.max, onnx="ReduceMax")
_reducer("reduce_min", np.min, onnx="ReduceMin")
_reducer("reduce_prod", np.prod, ane="", onnx="ReduceProd")  # host only (no ANE lowering)


# ------------------------------------------------------------------------ pooling
def pool_geometry(node, x_shape):
    k = tuple(int(v) for v in node.attrs["kernel"])
    return conv_geometry(node, x_shape, k)


def _pool_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    if len(x.shape) < 3:
        raise ModelError(f"{node.describe()}: input must be N x C x spatial, got {x}")
    if len(node.attrs.get("kernel", ())) != len(x.shape) - 2:
        raise ModelError(
            f"{node.describe()}: kernel_shape {node.attrs.get('kernel')} does not "
            f"match the input's {len(x.shape) - 2} spatial axes"
        )
    *_, out = pool_geometry(node, x.shape)
    return [TensorType(x.dtype, x.shape[:2] + out)]


def _pool(node, x, kind):
    s, d, pads, out = pool_geometry(node, x.shape)
    k = tuple(int(v) for v in node.attrs["kernel"])
    # room for ceil_mode windows that run past the end padding
    extra = [
        max(0, (o - 1) * st + (kk - 1) * dd + 1 - (n + pb + pe))
        for o, st, kk, dd, n, (pb, pe) in zip(out, s, k, d, x.shape[2:], pads)
    ]
    full = ((0, 0), (0, 0)) + tuple((pb, pe + e) for (pb, pe), e in zip(pads, extra))
    if kind == "max":
        xp = np.pad(x, full, constant_values=-np.inf)
        y = np.full(x.shape[:2] + out, -np.inf, np.float32)
        for _, win in conv_windows(xp, k, s, d, out):
            np.maximum(y, win, out=y)  # in place: no array per window
        return y
    xp = np.pad(x, full)
    inside = np.pad(np.ones(x.shape[2:], np.float32), tuple((pb, pe + e) for (pb, pe), e in zip(pads, extra)))
    if node.attrs.get("count_include_pad"):
        inside = np.pad(
            np.ones(tuple(n + pb + pe for n, (pb, pe) in zip(x.shape[2:], pads)), np.float32),
            tuple((0, e) for e in extra),
        )
    y = np.zeros(x.shape[:2] + out, np.float32)
    cnt = np.zeros(out, np.float32)
    for _, win in conv_windows(xp, k, s, d, out):
        y += win
    for _, win in conv_windows(inside[None, None], k, s, d, out):
        cnt += win[0, 0]
    return y / cnt


def _pool_onnx(c, a, ins):
    k = a.get("kernel_shape")
    if not k:
        raise ModelError(f"{c.where}: kernel_shape is required")
    if c.op == "MaxPool" and a.get("storage_order", 0):
        raise ModelNotImplementedError(f"{c.where}: storage_order=1 is not supported")
    return c.mk(
        {
            "kernel": tuple(k),
            "strides": a.get("strides"),
            "dilations": a.get("dilations"),
            "pads": onnx_pads(a, len(k), c.where),
            "auto_pad": onnx_auto_pad(a, c.where),
            "ceil_mode": a.get("ceil_mode", 0),
            "count_include_pad": a.get("count_include_pad", 0),
        }
    )


def _pool_cost(node, in_types, out_types):
    x = in_types[0].shape
    k = tuple(int(v) for v in node.attrs["kernel"])
    padded, out = padded_sizes(node, x, k)
    temp = (math.prod(x[:2]) * padded + 2 * padded + out) * 4  # padded input, window counts
    return HostCost(temp, elem_ops=math.prod(out_types[0].shape) * math.prod(k), taps=math.prod(k))


register_op(
    "max_pool",
    _pool_infer,
    ane="rows",
    onnx=[OnnxName("MaxPool", _pool_onnx, doc="windowed: host")],
    cost=_pool_cost,
)(lambda node, x: _pool(node, x, "max"))
register_op(
    "avg_pool",
    _pool_infer,
    ane="rows",
    onnx=[OnnxName("AveragePool", _pool_onnx, doc="a depthwise conv")],
    cost=_pool_cost,
)(lambda node, x: _pool(node, x, "avg"))


def _gpool_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    if len(x.shape) < 3:
        raise ModelError(f"{node.describe()}: input must be N x C x spatial, got {x}")
    return [TensorType(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


register_op("global_avg_pool", _gpool_infer, ane="rows", onnx=["GlobalAveragePool"])(
    lambda node, x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
)
register_op("global_max_pool", _gpool_infer, ane="rows", onnx=["GlobalMaxPool"])(
    lambda node, x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
)
