"""Host-only ops of the vocabulary: ops fastane has no ANE lowering for, which a user's
model still contains (Einsum in attention, TopK/ArgMax at a head, CumSum, Trilu, OneHot,
the logical ops ...).  Each has its shape/dtype inference (inputs checked, sizes computed
from the shapes alone, so a hostile shape is a ModelError before anything is allocated)
and a float32 host implementation (float math in float64, rounded once to the inferred
dtype by :func:`~fastane.model.ops.opdef.host_eval`).  Placement puts them on the host with
the reason "no ANE lowering in fastane yet" (:mod:`fastane.model.placement.place`).

The index ops (gathers, scatters, tile, depth/space) are in :mod:`.index`, Resize in
:mod:`.resize`.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError, quote
from .opdef import HostCost, OnnxName, elements, heavy, same_attrs, same_number
from .opdef import check_axis, broadcast_shape, need_const, need_float, need_input, register_op
from ..tensor import TensorType


_I64 = np.dtype(np.int64)


def _scalar_int(consts, i, node, what, default=None):
    """The constant scalar integer input ``i`` (``default`` when omitted)."""
    if i >= len(node.inputs) or not node.inputs[i]:
        if default is None:
            raise ModelError(f"{node.describe()}: missing {what} (input {i})")
        return default
    v = np.asarray(need_const(consts, i, node, what))
    if v.size != 1 or v.dtype.kind not in "iuf" or (v.dtype.kind == "f" and not np.isfinite(v).all()):
        raise ModelError(f"{node.describe()}: {what} must be one integer, got {v.dtype.name}{list(v.shape)}")
    return int(v.reshape(-1)[0])


def _wide(x):
    return x.astype(np.float64) if x.dtype.kind == "f" else x


# ------------------------------------------------------------------------ einsum
#: how many times a multiply-add of an Einsum of more than two operands is counted: numpy's
#: one nested loop over every label took about 23 ns an iteration (``a,b,c,d->``), against
#: about 0.4 for two operands; the host runs such an equation as greedy pairwise
#: contractions, usually far faster, but falls back to that loop when no pair fits
EINSUM_MULTI_FACTOR = 64


def einsum_spec(node, shapes):
    """``(equation, output shape, work)`` for Einsum over operands of ``shapes``; the
    equation normalised to explicit form (``->`` and the output labels); ``work`` the
    product of every label's size, times :data:`EINSUM_MULTI_FACTOR` for more than two
    operands."""
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "->" in rhs:
        raise ModelError(f"{node.describe()}: equation {quote(eq)} has more than one '->'")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ModelError(
            f"{node.describe()}: equation {quote(eq)} names {len(terms)} operands, the node has {len(shapes)}"
        )
    dims: dict = {}
    ell_shapes = []
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        pre, dots, post = term.partition("...")
        if "." in pre + post or not all(c.isalpha() and c.isascii() for c in pre + post):
            raise ModelError(
                f"{node.describe()}: operand {k}'s subscripts {quote(term)} are not letters (and one '...')"
            )
        n_ell = len(shape) - len(pre) - len(post)
        if n_ell < 0 or (not dots and n_ell):
            raise ModelError(
                f"{node.describe()}: subscripts {quote(term)} do not match operand {k}'s rank {len(shape)}"
            )
        ell_shapes.append(tuple(shape[len(pre) : len(pre) + n_ell]))
        for c, d in zip(pre + post, tuple(shape[: len(pre)]) + tuple(shape[len(shape) - len(post) :])):
            if dims.setdefault(c, d) != d:
                raise ModelError(
                    f"{node.describe()}: label {quote(c)} is {dims[c]} and {d} in equation {quote(eq)}"
                )
    ell = broadcast_shape(ell_shapes, node) if ell_shapes else ()
    has_ell = any("..." in t for t in terms)
    if not arrow:
        once = sorted(c for c in dims if lhs.count(c) == 1)
        rhs = ("..." if has_ell else "") + "".join(once)
    pre, dots, post = rhs.partition("...")
    out_labels = pre + post
    if "." in out_labels or len(set(out_labels)) != len(out_labels) or any(c not in dims for c in out_labels):
        raise ModelError(f"{node.describe()}: output subscripts {quote(rhs)} of {quote(eq)} are invalid")
    if dots and not has_ell:
        raise ModelError(f"{node.describe()}: output has '...' but no operand does ({quote(eq)})")
    if ell and not dots:
        raise ModelError(
            f"{node.describe()}: the operands' '...' dims {ell} are missing from the output of {quote(eq)}"
        )
    out = tuple(dims[c] for c in pre) + (ell if dots else ()) + tuple(dims[c] for c in post)
    work = math.prod(dims.values()) * math.prod(ell) * (EINSUM_MULTI_FACTOR if len(shapes) > 2 else 1)
    return f"{lhs}->{rhs}", out, work


def _einsum_infer(node, types, consts):
    ts = [need_input(types, i, node) for i in range(len(node.inputs))]
    if not ts:
        raise ModelError(f"{node.describe()}: needs at least one operand")
    if len({np.dtype(t.dtype) for t in ts}) != 1:
        raise ModelError(f"{node.describe()}: operand dtypes differ: {', '.join(str(t) for t in ts)}")
    _, out, _ = einsum_spec(node, [t.shape for t in ts])  # the work: cost.check_node
    return [TensorType(ts[0].dtype, out)]


def _einsum_cost(node, in_types, out_types):
    shapes = [t.shape for t in in_types if t is not None]
    # the operands widened to float64
    return HostCost(8 * sum(math.prod(s) for s in shapes), einsum_spec(node, shapes)[2], 0, einsum=True)


@register_op("einsum", _einsum_infer, onnx=[OnnxName("Einsum", same_attrs)], cost=_einsum_cost)
def _einsum(node, *xs):
    eq, _, _ = einsum_spec(node, [x.shape for x in xs])
    # one or two operands: numpy's direct loop; more: greedy pairwise contractions
    return np.einsum(eq, *[_wide(x) for x in xs], optimize="greedy" if len(xs) > 2 else False)


# ------------------------------------------------------------------------ top-k, arg-max/min
def _topk_infer(node, types, consts):
    x = need_input(types, 0, node)
    a = check_axis(node.attrs.get("axis", -1), len(x.shape), node)
    k = _scalar_int(consts, 1, node, "K")
    if not 0 <= k <= x.shape[a]:
        raise ModelError(f"{node.describe()}: K = {k} is outside [0, {x.shape[a]}] (axis {a} of {x})")
    shape = x.shape[:a] + (k,) + x.shape[a + 1 :]
    return [TensorType(x.dtype, shape), TensorType(np.dtype(node.attrs.get("index_dtype", _I64)), shape)]


def _order(x, axis, largest):
    """Indices sorting ``x`` along ``axis`` (descending when ``largest``); equal values
    keep the lower index first either way (ONNX TopK's tie rule)."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")  # ties: higher index first
    return n - 1 - np.flip(rev, axis)


def _top(x, k, largest):
    """Indices along the last axis of the ``k`` first of ``x`` in :func:`_order`'s order,
    without sorting the whole axis when ``k`` is smaller: the ``k``-th value found by a
    partition, the values beyond it and, of those equal to it, the ones of lowest index
    taken (NaN counts as the largest value, as numpy sorts it), then only ``k`` sorted."""
    n = x.shape[-1]
    if k >= n or k == 0:
        return _order(x, -1, largest)[..., :k]
    j = n - k if largest else k - 1
    t = np.partition(x, j, axis=-1)[..., j : j + 1]
    eq, beyond = x == t, (x > t) if largest else (x < t)
    if x.dtype.kind == "f":
        xn, tn = np.isnan(x), np.isnan(t)
        eq |= xn & tn
        beyond |= (xn & ~tn) if largest else (~xn & tn)
    need = k - beyond.sum(-1, keepdims=True)
    sel = beyond | (eq & (np.cumsum(eq, -1, dtype=np.int64 if n >> 31 else np.int32) <= need))
    idx = np.nonzero(sel)[-1].reshape(x.shape[:-1] + (k,))  # ascending index along each row
    return np.take_along_axis(idx, _order(np.take_along_axis(x, idx, -1), -1, largest), -1)


def _topk_onnx(c, a, ins):
    if c.opset < 10:  # k was an attribute
        ins = ins[:1] + [c.const([a.get("k", 1)], np.int64)]
    return c.mk({k: a[k] for k in ("axis", "largest", "sorted") if k in a}, ins, 2, keep=True)


def _topk_cost(node, in_types, out_types):
    x = in_types[0].shape
    n_in, n_out = elements(in_types), elements(out_types)
    k = out_types[0].shape[int(node.attrs.get("axis", -1)) % len(x)]
    # a partition's copy, its masks and running count (or the whole axis's sort with k = n:
    # int64 indices, the flipped copy); then the k sorted
    return HostCost(24 * n_in, 0, 8 * n_in + 16 * n_out * max(1, k.bit_length()))


@register_op("topk", _topk_infer, onnx=[OnnxName("TopK", _topk_onnx)], cost=_topk_cost)
def _topk(node, x, k):
    a = check_axis(node.attrs.get("axis", -1), x.ndim, node)
    k = int(np.asarray(k).reshape(-1)[0])
    idx = np.moveaxis(_top(np.moveaxis(x, a, -1), k, bool(node.attrs.get("largest", 1))), -1, a)
    return [np.take_along_axis(x, idx, a), idx]


def _arg_infer(node, types, consts):
    x = need_input(types, 0, node)
    a = check_axis(node.attrs.get("axis", 0), len(x.shape), node)
    if x.shape[a] == 0:
        raise ModelError(f"{node.describe()}: axis {a} of {x} is empty")
    keep = node.attrs.get("keepdims", 1)
    shape = (
        tuple(1 if i == a else d for i, d in enumerate(x.shape)) if keep else x.shape[:a] + x.shape[a + 1 :]
    )
    return [TensorType(np.dtype(node.attrs.get("index_dtype", _I64)), shape)]


def _arg(fn):
    def host(node, x):
        a = check_axis(node.attrs.get("axis", 0), x.ndim, node)
        if node.attrs.get("select_last_index", 0):
            i = x.shape[a] - 1 - fn(np.flip(x, a), axis=a)
        else:
            i = fn(x, axis=a)
        return np.expand_dims(i, a) if node.attrs.get("keepdims", 1) else i

    return host


register_op("argmax", _arg_infer, onnx=[OnnxName("ArgMax", same_attrs)])(_arg(np.argmax))
register_op("argmin", _arg_infer, onnx=[OnnxName("ArgMin", same_attrs)])(_arg(np.argmin))


def _hardmax_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    check_axis(node.attrs.get("axis", -1), len(x.shape), node)
    return [x]


def _hardmax_onnx(c, a, ins):
    if c.opset < 13:
        raise ModelNotImplementedError(
            f"{c.where}: opset {c.opset}'s 2-D coerced form is not implemented (opset 13+ is)"
        )
    return c.mk(dict(a))


@register_op("hardmax", _hardmax_infer, onnx=[OnnxName("Hardmax", _hardmax_onnx, doc="opset 13+")])
def _hardmax(node, x):
    a = check_axis(node.attrs.get("axis", -1), x.ndim, node)
    if x.shape[a] == 0:
        return x
    i = np.expand_dims(np.argmax(x, axis=a), a)
    y = np.zeros_like(x)
    np.put_along_axis(y, i, 1, a)
    return y


# ------------------------------------------------------------------------ cumsum, trilu, one-hot
def _cumsum_infer(node, types, consts):
    x = need_input(types, 0, node)
    check_axis(_scalar_int(consts, 1, node, "axis"), len(x.shape), node)
    return [x]


@register_op("cumsum", _cumsum_infer, onnx=[OnnxName("CumSum", same_attrs)])
def _cumsum(node, x, axis):
    a = check_axis(np.asarray(axis).reshape(-1)[0], x.ndim, node)
    y = _wide(x)
    if node.attrs.get("reverse", 0):
        y = np.flip(y, a)
    c = np.cumsum(y, axis=a, dtype=y.dtype)
    if node.attrs.get("exclusive", 0):
        c = np.concatenate([np.zeros_like(np.take(c, [0], a)), np.delete(c, -1, a)], a) if c.shape[a] else c
    return np.flip(c, a) if node.attrs.get("reverse", 0) else c


def _trilu_infer(node, types, consts):
    x = need_input(types, 0, node)
    if len(x.shape) < 2:
        raise ModelError(f"{node.describe()}: input must have at least 2 dims, got {x}")
    _scalar_int(consts, 1, node, "k", default=0)
    return [x]


@register_op("trilu", _trilu_infer, "layout", onnx=[OnnxName("Trilu", same_attrs)])
def _trilu(node, x, k=None):
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, k) if node.attrs.get("upper", 1) else np.tril(x, k)


def _onehot_infer(node, types, consts):
    idx = need_input(types, 0, node)
    depth = _scalar_int(consts, 1, node, "depth")
    vals = need_input(types, 2, node, "values")
    if len(vals.shape) != 1 or vals.shape[0] != 2:
        raise ModelError(f"{node.describe()}: values must be [off, on], got {vals}")
    if depth < 1:
        raise ModelError(f"{node.describe()}: depth {depth} must be >= 1")
    r = len(idx.shape) + 1
    a = check_axis(node.attrs.get("axis", -1), r, node)
    return [TensorType(vals.dtype, idx.shape[:a] + (depth,) + idx.shape[a:])]


@register_op("onehot", _onehot_infer, onnx=[OnnxName("OneHot", same_attrs)])
def _onehot(node, idx, depth, values):
    d = int(np.asarray(depth).reshape(-1)[0])
    a = check_axis(node.attrs.get("axis", -1), idx.ndim + 1, node)
    i = np.asarray(idx).astype(np.int64)
    i = np.where(i < 0, i + d, i)
    hot = np.expand_dims(i, a) == np.arange(d).reshape((-1,) + (1,) * (idx.ndim - a))
    return np.where(hot, values[1], values[0])


# ------------------------------------------------------------------------ logical, tests, misc
def _bool(t, node):
    if np.dtype(t.dtype) != np.bool_:
        raise ModelError(f"{node.describe()}: operands must be boolean tensors, got {t}")
    return t


def _logic_infer(node, types, consts):
    ts = [_bool(need_input(types, i, node), node) for i in range(len(node.inputs))]
    return [TensorType(np.dtype(np.bool_), broadcast_shape([t.shape for t in ts], node))]


register_op("logical_and", _logic_infer, "exact", onnx=[OnnxName("And", same_attrs)])(
    lambda node, a, b: np.logical_and(a, b)
)
register_op("logical_or", _logic_infer, "exact", onnx=[OnnxName("Or", same_attrs)])(
    lambda node, a, b: np.logical_or(a, b)
)
register_op("logical_xor", _logic_infer, "exact", onnx=[OnnxName("Xor", same_attrs)])(
    lambda node, a, b: np.logical_xor(a, b)
)
register_op("logical_not", _logic_infer, "exact", onnx=[OnnxName("Not", same_attrs)])(
    lambda node, a: np.logical_not(a)
)


def _cmp2_infer(node, types, consts):
    a, b = need_input(types, 0, node), need_input(types, 1, node)
    return [TensorType(np.dtype(np.bool_), broadcast_shape([a.shape, b.shape], node))]


register_op("greater_equal", _cmp2_infer, "exact", onnx=[OnnxName("GreaterOrEqual", same_attrs)])(
    lambda node, a, b: np.greater_equal(a, b)
)
register_op("less_equal", _cmp2_infer, "exact", onnx=[OnnxName("LessOrEqual", same_attrs)])(
    lambda node, a, b: np.less_equal(a, b)
)


def _test_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    return [TensorType(np.dtype(np.bool_), x.shape)]


register_op("isnan", _test_infer, "exact", onnx=[OnnxName("IsNaN", same_attrs)])(lambda node, x: np.isnan(x))


@register_op("isinf", _test_infer, "exact", onnx=[OnnxName("IsInf", same_attrs)])
def _isinf(node, x):
    pos, neg = node.attrs.get("detect_positive", 1), node.attrs.get("detect_negative", 1)
    return np.isinf(x) & ((x > 0) if pos and not neg else (x < 0) if neg and not pos else (pos and neg))


def _same_float(node, types, consts):
    return [need_float(need_input(types, 0, node), node)]


def _unary_host(name, fn, onnx, cost=None, infer=_same_float):
    register_op(name, infer, onnx=[OnnxName(onnx, same_attrs)], cost=cost)(lambda node, x: fn(node, _wide(x)))


_unary_host("round", lambda n, x: np.round(x), "Round")  # half to even, as ONNX Round
_unary_host("sin", lambda n, x: np.sin(x), "Sin")
_unary_host("cos", lambda n, x: np.cos(x), "Cos")
_unary_host("tan", lambda n, x: np.tan(x), "Tan")
_unary_host("asin", lambda n, x: np.arcsin(x), "Asin")
_unary_host("acos", lambda n, x: np.arccos(x), "Acos")
_unary_host("atan", lambda n, x: np.arctan(x), "Atan")
_unary_host("sinh", lambda n, x: np.sinh(x), "Sinh")
_unary_host("asinh", lambda n, x: np.arcsinh(x), "Asinh")
_unary_host("acosh", lambda n, x: np.arccosh(x), "Acosh")
_unary_host("atanh", lambda n, x: np.arctanh(x), "Atanh")
_unary_host("cosh", lambda n, x: np.cosh(x), "Cosh")
_unary_host("softsign", lambda n, x: x / (1 + np.abs(x)), "Softsign")
# the heavy ones: bytes an output element beyond the common allowance (tracemalloc on 2^22
# float16 elements, December 2026: celu 36, mish 28 bytes an element against relu 16)
_unary_host("mish", lambda n, x: x * np.tanh(np.logaddexp(0, x)), "Mish", heavy(16))
_unary_host(
    "thresholded_relu", lambda n, x: np.where(x > n.attrs.get("alpha", 1.0), x, 0.0), "ThresholdedRelu"
)
_unary_host(
    "shrink",
    lambda n, x: np.where(
        x < -n.attrs.get("lambd", 0.5),
        x + n.attrs.get("bias", 0.0),
        np.where(x > n.attrs.get("lambd", 0.5), x - n.attrs.get("bias", 0.0), 0.0),
    ),
    "Shrink",
    infer=same_number,
)
_unary_host(
    "celu",
    lambda n, x: (
        np.maximum(x, 0) + np.minimum(0, n.attrs.get("alpha", 1.0) * np.expm1(x / n.attrs.get("alpha", 1.0)))
    ),
    "Celu",
    heavy(24),
)


def _mean_infer(node, types, consts):
    ts = [need_float(need_input(types, i, node), node, i) for i in range(len(node.inputs))]
    if not ts:
        raise ModelError(f"{node.describe()}: needs at least one operand")
    return [TensorType(ts[0].dtype, broadcast_shape([t.shape for t in ts], node))]


register_op("mean", _mean_infer, onnx=[OnnxName("Mean", same_attrs)])(
    lambda node, *xs: sum(_wide(x) for x in xs) / len(xs)
)


def _mod_infer(node, types, consts):
    a, b = need_input(types, 0, node), need_input(types, 1, node)
    if np.dtype(a.dtype) != np.dtype(b.dtype):
        raise ModelError(f"{node.describe()}: operand dtypes differ: {a}, {b}")
    return [TensorType(a.dtype, broadcast_shape([a.shape, b.shape], node))]


@register_op("mod", _mod_infer, onnx=[OnnxName("Mod", same_attrs)])
def _mod(node, a, b):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise ValueError("integer modulo by zero")
    return np.fmod(_wide(a), _wide(b)) if node.attrs.get("fmod", 0) else np.mod(a, b)
