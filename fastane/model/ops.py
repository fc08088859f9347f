"""fastane's op vocabulary for model graphs: for each op, its shape/dtype inference and its
host ("CPU") implementation in float32.

The host implementation is what runs an op that is not placed on the ANE, and the fp32
reference the per-layer report compares the ANE's result with.  It is numpy in float32
(float inputs are widened to float32 first, an integer tensor stays integer); it is *not*
a model of the ANE's arithmetic -- that only ever runs on the emulated device.

Attributes are normalised by the importers (fastane's names, operands as inputs):
``pads`` is a tuple of ``(begin, end)`` pairs, one per spatial axis; ``auto_pad`` is
``None``, ``"same_upper"``, ``"same_lower"`` or ``"valid"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ModelError
from .tensor import TensorType, check_size

__all__ = ["OpDef", "OPS", "host_eval", "conv_geometry", "pool_geometry"]

_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class OpDef:
    infer: Callable
    host: Callable
    #: evaluated at bind time when every input is constant
    foldable: bool = True
    #: "layout" (moves data, no arithmetic), "exact" (one rounding of the exact result),
    #: "mac", "table", "host" (no ANE class)
    kind: str = "host"


OPS: dict = {}


def _op(name, infer, kind="host", foldable=True):
    def deco(fn):
        OPS[name] = OpDef(infer, fn, foldable, kind)
        return fn
    return deco


# ------------------------------------------------------------------------ helpers
def _need(types, i, node, what="input"):
    if i >= len(types) or types[i] is None:
        raise ModelError(f"{node.describe()}: missing {what} {i}")
    return types[i]


def _float(t: TensorType, node, i=0):
    if np.dtype(t.dtype).kind != "f":
        raise ModelError(f"{node.describe()}: input {i} must be a float tensor, got {t}")
    return t


def _const(consts, i, node, what):
    if i >= len(consts) or consts[i] is None:
        raise ModelError(f"{node.describe()}: {what} (input {i}) must be a constant (or computable "
                         f"from the input shapes); fastane does not run data-dependent shapes")
    return consts[i]


def _axis(a, rank, node, what="axis"):
    a = int(a)
    if not -rank <= a < max(rank, 1):
        raise ModelError(f"{node.describe()}: {what} {a} is out of range for a {rank}-D tensor")
    return a % rank if rank else 0


def _bshape(shapes, node):
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelError(f"{node.describe()}: shapes {' and '.join(str(tuple(s)) for s in shapes)} "
                         f"do not broadcast") from None


def _same(node, types, consts):
    return [_float(_need(types, 0, node), node)]


def _fl(x):
    """float inputs widened to float32 (integer tensors unchanged)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype != _F32 else x


def host_eval(node, arrays, out_dtypes=None):
    """Run ``node`` on the host (float inputs widened to float32); outputs cast to
    ``out_dtypes`` (the inferred dtypes) when given."""
    op = OPS[node.op]
    args = [None if a is None else _fl(a) for a in arrays]
    with np.errstate(all="ignore"):
        try:
            outs = op.host(node, *args)
        except ModelError:
            raise
        except (ValueError, IndexError, TypeError) as exc:
            raise ModelError(f"{node.describe()}: {exc}") from None
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    res = []
    for i, o in enumerate(outs[:len(node.outputs)]):
        o = np.asarray(o)
        if out_dtypes is not None and o.dtype != out_dtypes[i]:
            o = o.astype(out_dtypes[i])
        res.append(o)
    return res


# ------------------------------------------------------------------------ unary
def _unary(name, fn, kind="table"):
    _op(name, _same, kind)(lambda node, x: fn(node, x))


def _erf(x):
    import math as _m
    return np.vectorize(_m.erf, otypes=[np.float64])(x).astype(x.dtype)


def _gelu(node, x):
    if node.attrs.get("approximate", "none") == "tanh":
        return 0.5 * x * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x ** 3)))
    return (0.5 * x.astype(np.float64) * (1 + _erf(x.astype(np.float64) / math.sqrt(2)))).astype(x.dtype)


_unary("relu", lambda n, x: np.maximum(x, 0).astype(x.dtype), "exact")
_unary("leaky_relu", lambda n, x: np.where(x >= 0, x, x * np.float32(n.attrs.get("alpha", 0.01))))
_unary("tanh", lambda n, x: np.tanh(x))
_unary("sigmoid", lambda n, x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype))
_unary("gelu", _gelu)
_unary("exp", lambda n, x: np.exp(x))
_unary("log", lambda n, x: np.log(x))
_unary("sqrt", lambda n, x: np.sqrt(x))
_unary("reciprocal", lambda n, x: np.reciprocal(x))
_unary("exp2", lambda n, x: np.exp2(x))
_unary("rsqrt", lambda n, x: (1 / np.sqrt(x.astype(np.float64))).astype(x.dtype))
_unary("abs", lambda n, x: np.abs(x), "exact")
_unary("neg", lambda n, x: np.negative(x), "exact")
_unary("sign", lambda n, x: np.sign(x), "exact")
_unary("floor", lambda n, x: np.floor(x), "exact")
_unary("ceil", lambda n, x: np.ceil(x), "exact")
_unary("erf", lambda n, x: _erf(x))
_unary("elu", lambda n, x: np.where(x > 0, x, np.float32(n.attrs.get("alpha", 1.0)) * np.expm1(x)))
_unary("selu", lambda n, x: np.float32(n.attrs.get("gamma", 1.0507009873554805)) * np.where(
    x > 0, x, np.float32(n.attrs.get("alpha", 1.6732632423543772)) * np.expm1(x)))
_unary("hard_sigmoid", lambda n, x: np.clip(np.float32(n.attrs.get("alpha", 0.2)) * x
                                            + np.float32(n.attrs.get("beta", 0.5)), 0, 1))
_unary("hard_swish", lambda n, x: x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1))
_unary("softplus", lambda n, x: np.logaddexp(np.float32(0), x))
_unary("identity", lambda n, x: x, "layout")
OPS["identity"] = OpDef(lambda node, types, consts: [_need(types, 0, node)], OPS["identity"].host,
                        True, "layout")


def _clip_infer(node, types, consts):
    return [_float(_need(types, 0, node), node)]


@_op("clip", _clip_infer, "exact")
def _clip(node, x, lo=None, hi=None):
    if lo is not None:
        x = np.where(x < lo, lo, x)
    if hi is not None:
        x = np.where(x > hi, hi, x)
    return x


def _cast_infer(node, types, consts):
    return [TensorType(np.dtype(node.attrs["to"]), _need(types, 0, node).shape)]


@_op("cast", _cast_infer, "exact")
def _cast(node, x):
    return x.astype(node.attrs["to"])


# ------------------------------------------------------------------------ binary
def _binary_infer(node, types, consts):
    ts = [_need(types, i, node) for i in range(len(node.inputs))]
    if len({np.dtype(t.dtype) for t in ts}) != 1:
        raise ModelError(f"{node.describe()}: operand dtypes differ: {', '.join(str(t) for t in ts)}")
    return [TensorType(ts[0].dtype, _bshape([t.shape for t in ts], node))]


def _binary(name, fn):
    _op(name, _binary_infer, "exact")(lambda node, *xs: _reduce(fn, xs))


def _reduce(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


def _int_div(a, b):
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise ValueError("integer division by zero")
        return np.trunc(a / b).astype(a.dtype)
    return a / b


_binary("add", np.add)
_binary("sub", np.subtract)
_binary("mul", np.multiply)
_binary("div", _int_div)
_binary("max", np.maximum)
_binary("min", np.minimum)
_binary("pow", lambda a, b: np.power(a, b))
_op("prelu", _binary_infer, "exact")(lambda node, x, s: np.where(x >= 0, x, x * s))


def _where_infer(node, types, consts):
    c, a, b = (_need(types, i, node) for i in range(3))
    return [TensorType(a.dtype, _bshape([c.shape, a.shape, b.shape], node))]


_op("where", _where_infer, "exact")(lambda node, c, a, b: np.where(c, a, b))


def _cmp_infer(node, types, consts):
    a, b = _need(types, 0, node), _need(types, 1, node)
    return [TensorType(np.dtype(np.bool_), _bshape([a.shape, b.shape], node))]


_op("equal", _cmp_infer, "exact")(lambda node, a, b: np.equal(a, b))
_op("less", _cmp_infer, "exact")(lambda node, a, b: np.less(a, b))
_op("greater", _cmp_infer, "exact")(lambda node, a, b: np.greater(a, b))


# ------------------------------------------------------------------------ MAC ops
def _matmul_infer(node, types, consts):
    a, b = _float(_need(types, 0, node), node), _float(_need(types, 1, node), node, 1)
    if a.dtype != b.dtype:
        raise ModelError(f"{node.describe()}: operand dtypes differ: {a} and {b}")
    sa, sb = a.shape, b.shape
    if not sa or not sb:
        raise ModelError(f"{node.describe()}: MatMul operands must be at least 1-D, got {a} and {b}")
    A = (1,) + sa if len(sa) == 1 else sa
    B = sb + (1,) if len(sb) == 1 else sb
    if A[-1] != B[-2]:
        raise ModelError(f"{node.describe()}: inner dimensions differ: {a} @ {b}")
    batch = _bshape([A[:-2], B[:-2]], node)
    out = batch + (A[-2], B[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return [TensorType(a.dtype, out)]


@_op("matmul", _matmul_infer, "mac")
def _matmul(node, a, b):
    return np.matmul(a, b)


def _gemm_dims(node, types):
    a, b = _float(_need(types, 0, node), node), _float(_need(types, 1, node), node, 1)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ModelError(f"{node.describe()}: Gemm operands must be 2-D, got {a} and {b}")
    M, K = a.shape[::-1] if node.attrs.get("trans_a") else a.shape
    K2, N = b.shape[::-1] if node.attrs.get("trans_b") else b.shape
    if K != K2:
        raise ModelError(f"{node.describe()}: inner dimensions differ: {a} and {b} "
                         f"(trans_a={node.attrs.get('trans_a', 0)}, trans_b={node.attrs.get('trans_b', 0)})")
    return a, M, K, N


def _gemm_infer(node, types, consts):
    a, M, K, N = _gemm_dims(node, types)
    if len(types) > 2 and types[2] is not None:
        c = types[2].shape
        if _bshape([c, (M, N)], node) != (M, N):
            raise ModelError(f"{node.describe()}: C of shape {c} does not broadcast to ({M}, {N})")
    return [TensorType(a.dtype, (M, N))]


@_op("gemm", _gemm_infer, "mac")
def _gemm(node, a, b, c=None):
    if node.attrs.get("trans_a"):
        a = a.T
    if node.attrs.get("trans_b"):
        b = b.T
    y = np.float32(node.attrs.get("alpha", 1.0)) * (a @ b)
    if c is not None:
        y = y + np.float32(node.attrs.get("beta", 1.0)) * c
    return y


def conv_geometry(node, x_shape, w_shape, transpose=False):
    """``(strides, dilations, pads ((b, e) per axis), out_spatial)`` of a conv or pool over
    ``x_shape`` with kernel spatial shape ``w_shape``; ``auto_pad`` resolved here."""
    nsp = len(x_shape) - 2
    k = tuple(int(v) for v in w_shape)
    s = tuple(int(v) for v in node.attrs.get("strides") or (1,) * nsp)
    d = tuple(int(v) for v in node.attrs.get("dilations") or (1,) * nsp)
    if len(k) != nsp or len(s) != nsp or len(d) != nsp:
        raise ModelError(f"{node.describe()}: kernel {k}, strides {s}, dilations {d} do not match "
                         f"the input's {nsp} spatial axes")
    if min(s + d + k, default=1) < 1:
        raise ModelError(f"{node.describe()}: kernel {k}, strides {s} and dilations {d} must be >= 1")
    auto = node.attrs.get("auto_pad")
    pads = tuple(tuple(int(v) for v in p) for p in node.attrs.get("pads") or ((0, 0),) * nsp)
    if len(pads) != nsp or any(min(p) < 0 for p in pads):
        raise ModelError(f"{node.describe()}: pads {pads} invalid for {nsp} spatial axes")
    sp = x_shape[2:]
    ceil = bool(node.attrs.get("ceil_mode", 0))
    if auto in ("same_upper", "same_lower"):
        out = tuple(-(-n // st) for n, st in zip(sp, s))
        pads = []
        for n, o, st, kk, dd in zip(sp, out, s, k, d):
            tot = max(0, (o - 1) * st + (kk - 1) * dd + 1 - n)
            lo = tot // 2 if auto == "same_upper" else tot - tot // 2
            pads.append((lo, tot - lo))
        pads = tuple(pads)
    elif auto == "valid":
        pads = ((0, 0),) * nsp
    out = []
    for n, (pb, pe), st, kk, dd in zip(sp, pads, s, k, d):
        span = (kk - 1) * dd + 1
        num = n + pb + pe - span
        if num < 0:
            raise ModelError(f"{node.describe()}: the padded input ({n + pb + pe}) is smaller than "
                             f"the dilated kernel ({span})")
        o = (-(-num // st) if ceil else num // st) + 1
        if ceil and (o - 1) * st >= n + pb:     # the last window must start inside the input
            o -= 1
        out.append(o)
    return s, d, pads, tuple(out)


def _conv_operands(node, types, what: str):
    """The input and weight types of a conv-like node (1-D or 2-D) and its groups."""
    x, w = _float(_need(types, 0, node), node), _float(_need(types, 1, node), node, 1)
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise ModelError(f"{node.describe()}: fastane supports 1-D and 2-D {what} (input N x C x "
                         f"[H x] W, weight of the same rank), got input {x} and weight {w}")
    return x, w, int(node.attrs.get("groups", 1))


def _conv_infer(node, types, consts):
    x, w, g = _conv_operands(node, types, "convolutions")
    C, CO, CG = x.shape[1], w.shape[0], w.shape[1]
    if g < 1 or CO % g or C != CG * g:
        raise ModelError(f"{node.describe()}: group={g}: input has {C} channels, weight {w} expects "
                         f"{CG} per group and {CO} outputs divisible by the groups")
    if len(types) > 2 and types[2] is not None and types[2].shape != (CO,):
        raise ModelError(f"{node.describe()}: bias must have shape ({CO},), got {types[2]}")
    *_, out = conv_geometry(node, x.shape, w.shape[2:])
    return [TensorType(x.dtype, (x.shape[0], CO) + out)]


def _windows(xp, k, s, d, out):
    """Yield ``(kernel index, window view)`` over a padded N x C x spatial array."""
    import itertools
    for idx in itertools.product(*(range(kk) for kk in k)):
        sl = tuple(slice(i * dd, i * dd + (o - 1) * st + 1, st) for i, dd, st, o in zip(idx, d, s, out))
        yield idx, xp[(slice(None), slice(None)) + sl]


@_op("conv", _conv_infer, "mac")
def _conv(node, x, w, b=None):
    s, d, pads, out = conv_geometry(node, x.shape, w.shape[2:])
    g = int(node.attrs.get("groups", 1))
    N, C = x.shape[:2]
    CO, CG = w.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    y = np.zeros((N, g, CO // g) + out, np.float32)
    wg = w.reshape((g, CO // g, CG) + w.shape[2:])
    for idx, win in _windows(xp, w.shape[2:], s, d, out):
        patch = win.reshape((N, g, CG) + out)
        y += np.einsum("ngc...,goc->ngo...", patch, wg[(Ellipsis,) + idx], optimize=True)
    y = y.reshape((N, CO) + out)
    if b is not None:
        y += b.reshape((1, CO) + (1,) * len(out))
    return y


def _bn_infer(node, types, consts):
    x = _float(_need(types, 0, node), node)
    if len(x.shape) < 2:
        raise ModelError(f"{node.describe()}: input must be at least 2-D, got {x}")
    for i in range(1, 5):
        t = _need(types, i, node)
        if t.shape != (x.shape[1],):
            raise ModelError(f"{node.describe()}: input {i} must have shape ({x.shape[1]},), got {t}")
    return [x]


def bn_affine(node, scale, bias, mean, var):
    """BatchNormalization as ``a * x + c`` per channel (float64)."""
    eps = float(node.attrs.get("epsilon", 1e-5))
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return a, bias.astype(np.float64) - a * mean.astype(np.float64)


@_op("batchnorm", _bn_infer, "mac")
def _bn(node, x, scale, bias, mean, var):
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) * scale.reshape(sh)
            + bias.reshape(sh))


# ------------------------------------------------------------------------ normalisation
def _softmax_axes(node, x):
    axis = _axis(node.attrs.get("axis", -1), x.ndim, node)
    return axis


def _softmax_infer(node, types, consts):
    x = _float(_need(types, 0, node), node)
    _axis(node.attrs.get("axis", -1), len(x.shape), node)
    return [x]


def _softmax_core(node, x, log):
    axis = _softmax_axes(node, x)
    shape = x.shape
    if node.attrs.get("legacy"):          # opset < 13: flatten to 2-D at axis
        x = x.reshape(math.prod(shape[:axis]), -1)
        axis = 1
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    ssum = np.sum(e, axis=axis, keepdims=True)
    y = (x - m - np.log(ssum)) if log else e / ssum
    return y.reshape(shape)


_op("softmax", _softmax_infer, "table")(lambda node, x: _softmax_core(node, x, False))
_op("log_softmax", _softmax_infer, "table")(lambda node, x: _softmax_core(node, x, True))


def _ln_infer(node, types, consts):
    x = _float(_need(types, 0, node), node)
    axis = _axis(node.attrs.get("axis", -1), len(x.shape), node)
    for i in (1, 2):
        if len(types) > i and types[i] is not None:
            _bshape([types[i].shape, x.shape[axis:]], node)
    return [x]


@_op("layer_norm", _ln_infer, "table")
def _ln(node, x, scale, bias=None):
    axis = _axis(node.attrs.get("axis", -1), x.ndim, node)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(node.attrs.get("epsilon", 1e-5))) * scale
    return y if bias is None else y + bias


def _reduce_axes(node, rank, consts_axes):
    if consts_axes is None or np.size(consts_axes) == 0:
        if node.attrs.get("noop_with_empty_axes"):
            return ()
        return tuple(range(rank))
    return tuple(sorted({_axis(a, rank, node) for a in np.asarray(consts_axes).reshape(-1)}))


def _reduce_infer(node, types, consts):
    x = _need(types, 0, node)
    axes_c = consts[1] if len(consts) > 1 else None
    if len(node.inputs) > 1 and node.inputs[1] and axes_c is None:
        _const(consts, 1, node, "axes")
    axes = _reduce_axes(node, len(x.shape), axes_c)
    keep = node.attrs.get("keepdims", 1)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(x.dtype, shape)]


def _reducer(name, fn):
    def host(node, x, axes=None):
        ax = _reduce_axes(node, x.ndim, axes)
        if not ax:
            return x
        return fn(x, axis=ax, keepdims=bool(node.attrs.get("keepdims", 1)))
    _op(name, _reduce_infer, "host")(host)


_reducer("reduce_mean", np.mean)
_reducer("reduce_sum", np.sum)
_reducer("reduce_max", np.max)
_reducer("reduce_min", np.min)


# ------------------------------------------------------------------------ pooling
def pool_geometry(node, x_shape):
    k = tuple(int(v) for v in node.attrs["kernel"])
    return conv_geometry(node, x_shape, k)


def _pool_infer(node, types, consts):
    x = _float(_need(types, 0, node), node)
    if len(x.shape) < 3:
        raise ModelError(f"{node.describe()}: input must be N x C x spatial, got {x}")
    if len(node.attrs.get("kernel", ())) != len(x.shape) - 2:
        raise ModelError(f"{node.describe()}: kernel_shape {node.attrs.get('kernel')} does not "
                         f"match the input's {len(x.shape) - 2} spatial axes")
    *_, out = pool_geometry(node, x.shape)
    return [TensorType(x.dtype, x.shape[:2] + out)]


def _pool(node, x, kind):
    s, d, pads, out = pool_geometry(node, x.shape)
    k = tuple(int(v) for v in node.attrs["kernel"])
    # room for ceil_mode windows that run past the end padding
    extra = [max(0, (o - 1) * st + (kk - 1) * dd + 1 - (n + pb + pe))
             for o, st, kk, dd, n, (pb, pe) in zip(out, s, k, d, x.shape[2:], pads)]
    full = ((0, 0), (0, 0)) + tuple((pb, pe + e) for (pb, pe), e in zip(pads, extra))
    if kind == "max":
        xp = np.pad(x, full, constant_values=-np.inf)
        y = np.full(x.shape[:2] + out, -np.inf, np.float32)
        for _, win in _windows(xp, k, s, d, out):
            y = np.maximum(y, win)
        return y
    xp = np.pad(x, full)
    inside = np.pad(np.ones(x.shape[2:], np.float32),
                    tuple((pb, pe + e) for (pb, pe), e in zip(pads, extra)))
    if node.attrs.get("count_include_pad"):
        inside = np.pad(np.ones(tuple(n + pb + pe for n, (pb, pe) in zip(x.shape[2:], pads)), np.float32),
                        tuple((0, e) for e in extra))
    y = np.zeros(x.shape[:2] + out, np.float32)
    cnt = np.zeros(out, np.float32)
    for _, win in _windows(xp, k, s, d, out):
        y += win
    for _, win in _windows(inside[None, None], k, s, d, out):
        cnt += win[0, 0]
    return y / cnt


_op("max_pool", _pool_infer)(lambda node, x: _pool(node, x, "max"))
_op("avg_pool", _pool_infer)(lambda node, x: _pool(node, x, "avg"))


def _gpool_infer(node, types, consts):
    x = _float(_need(types, 0, node), node)
    if len(x.shape) < 3:
        raise ModelError(f"{node.describe()}: input must be N x C x spatial, got {x}")
    return [TensorType(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


_op("global_avg_pool", _gpool_infer)(
    lambda node, x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True))
_op("global_max_pool", _gpool_infer)(
    lambda node, x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True))


# ------------------------------------------------------------------------ layout
def _flatten_infer(node, types, consts):
    x = _need(types, 0, node)
    r = len(x.shape)
    a = int(node.attrs.get("axis", 1))
    if not -r <= a <= r:
        raise ModelError(f"{node.describe()}: axis {a} out of range for a {r}-D tensor")
    a = a + r if a < 0 else a
    return [TensorType(x.dtype, (math.prod(x.shape[:a]), math.prod(x.shape[a:])))]


_op("flatten", _flatten_infer, "layout")(
    lambda node, x: x.reshape(_flatten_infer(node, [TensorType(x.dtype, x.shape)], [None])[0].shape))


def _reshape_target(node, shape, target):
    target = [int(v) for v in np.asarray(target).reshape(-1)]
    allowzero = node.attrs.get("allowzero", 0)
    out = []
    for i, v in enumerate(target):
        if v == 0 and not allowzero:
            if i >= len(shape):
                raise ModelError(f"{node.describe()}: target dim {i} is 0 (copy) but the input "
                                 f"has {len(shape)} dims")
            out.append(shape[i])
        else:
            out.append(v)
    if out.count(-1) > 1 or any(v < -1 for v in out):
        raise ModelError(f"{node.describe()}: invalid target shape {target}")
    n = math.prod(shape)
    if -1 in out:
        rest = math.prod(v for v in out if v != -1)
        if rest == 0 or n % rest:
            raise ModelError(f"{node.describe()}: cannot reshape {tuple(shape)} to {target}")
        out[out.index(-1)] = n // rest
    if math.prod(out) != n:
        raise ModelError(f"{node.describe()}: cannot reshape {tuple(shape)} ({n} elements) to "
                         f"{tuple(out)}")
    return tuple(out)


def _reshape_infer(node, types, consts):
    x = _need(types, 0, node)
    return [TensorType(x.dtype, _reshape_target(node, x.shape, _const(consts, 1, node, "shape")))]


_op("reshape", _reshape_infer, "layout")(
    lambda node, x, t: x.reshape(_reshape_target(node, x.shape, t)))


def _perm(node, rank):
    perm = node.attrs.get("perm")
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"{node.describe()}: perm {perm} is not a permutation of {rank} axes")
    return perm


def _transpose_infer(node, types, consts):
    x = _need(types, 0, node)
    return [TensorType(x.dtype, tuple(x.shape[p] for p in _perm(node, len(x.shape))))]


_op("transpose", _transpose_infer, "layout")(
    lambda node, x: np.asarray(np.transpose(x, _perm(node, x.ndim)), order="C"))


def _squeeze_axes(node, shape, axes):
    if axes is None:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    ax = tuple(sorted({_axis(a, len(shape), node) for a in np.asarray(axes).reshape(-1)}))
    for a in ax:
        if shape[a] != 1:
            raise ModelError(f"{node.describe()}: cannot squeeze axis {a} of size {shape[a]}")
    return ax


def _squeeze_infer(node, types, consts):
    x = _need(types, 0, node)
    axes = None
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = _const(consts, 1, node, "axes")
    ax = _squeeze_axes(node, x.shape, axes)
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in ax))]


_op("squeeze", _squeeze_infer, "layout")(
    lambda node, x, axes=None: np.squeeze(x, _squeeze_axes(node, x.shape, axes)))


def _unsqueeze_shape(node, shape, axes):
    r = len(shape) + np.size(axes)
    ax = sorted({_axis(a, r, node) for a in np.asarray(axes).reshape(-1)})
    if len(ax) != np.size(axes):
        raise ModelError(f"{node.describe()}: repeated axes {list(np.asarray(axes).reshape(-1))}")
    it = iter(shape)
    return tuple(1 if i in ax else next(it) for i in range(r))


def _unsqueeze_infer(node, types, consts):
    x = _need(types, 0, node)
    return [TensorType(x.dtype, _unsqueeze_shape(node, x.shape, _const(consts, 1, node, "axes")))]


_op("unsqueeze", _unsqueeze_infer, "layout")(
    lambda node, x, axes: x.reshape(_unsqueeze_shape(node, x.shape, axes)))


def _concat_infer(node, types, consts):
    ts = [_need(types, i, node) for i in range(len(node.inputs))]
    r = len(ts[0].shape)
    a = _axis(node.attrs.get("axis", 0), r, node)
    for t in ts[1:]:
        if len(t.shape) != r or any(x != y for i, (x, y) in enumerate(zip(t.shape, ts[0].shape)) if i != a):
            raise ModelError(f"{node.describe()}: cannot concatenate {', '.join(str(t) for t in ts)} "
                             f"along axis {a}")
        if t.dtype != ts[0].dtype:
            raise ModelError(f"{node.describe()}: operand dtypes differ: {ts[0]} and {t}")
    shape = list(ts[0].shape)
    shape[a] = sum(t.shape[a] for t in ts)
    return [TensorType(ts[0].dtype, tuple(shape))]


@_op("concat", _concat_infer, "layout")
def _concat(node, *xs):
    # ANE tensors arrive as fp16, host ones as float32: concatenate in the wider dtype
    return np.concatenate(xs, axis=_axis(node.attrs.get("axis", 0), xs[0].ndim, node))


def _slices(node, shape, starts, ends, axes, steps):
    starts = np.asarray(starts).reshape(-1)
    ends = np.asarray(ends).reshape(-1)
    axes = np.arange(len(starts)) if axes is None else np.asarray(axes).reshape(-1)
    steps = np.ones(len(starts), np.int64) if steps is None else np.asarray(steps).reshape(-1)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"{node.describe()}: starts, ends, axes and steps differ in length")
    sl = [slice(None)] * len(shape)
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        if sp == 0:
            raise ModelError(f"{node.describe()}: a slice step is 0")
        a = _axis(ax, len(shape), node)
        big = 1 << 62
        sl[a] = slice(int(np.clip(st, -big, big)), int(np.clip(en, -big, big)), int(sp))
    return tuple(sl)


def _slice_infer(node, types, consts):
    x = _need(types, 0, node)
    args = [_const(consts, i, node, n) for i, n in ((1, "starts"), (2, "ends"))]
    for i, n in ((3, "axes"), (4, "steps")):
        args.append(_const(consts, i, node, n) if len(node.inputs) > i and node.inputs[i] else None)
    sl = _slices(node, x.shape, *args)
    return [TensorType(x.dtype, tuple(len(range(*s.indices(d))) for s, d in zip(sl, x.shape)))]


_op("slice", _slice_infer, "layout")(
    lambda node, x, st, en, ax=None, sp=None: np.asarray(x[_slices(node, x.shape, st, en, ax, sp)], order="C"))


def _pad_widths(node, shape, pads, axes):
    pads = [int(v) for v in np.asarray(pads).reshape(-1)]
    axes = list(range(len(shape))) if axes is None else [_axis(a, len(shape), node) for a in np.asarray(axes).reshape(-1)]
    if len(pads) != 2 * len(axes):
        raise ModelError(f"{node.describe()}: pads has {len(pads)} values for {len(axes)} axes")
    if min(pads, default=0) < 0:
        raise NotImplementedError(f"{node.describe()}: negative pads (cropping) are not supported yet")
    w = [(0, 0)] * len(shape)
    for i, a in enumerate(axes):
        w[a] = (pads[i], pads[i + len(axes)])
    return w


def _pad_infer(node, types, consts):
    x = _need(types, 0, node)
    axes = _const(consts, 3, node, "axes") if len(node.inputs) > 3 and node.inputs[3] else None
    w = _pad_widths(node, x.shape, _const(consts, 1, node, "pads"), axes)
    if node.attrs.get("mode", "constant") not in ("constant", "reflect", "edge"):
        raise ModelError(f"{node.describe()}: unknown pad mode {node.attrs.get('mode')!r}")
    return [TensorType(x.dtype, tuple(d + a + b for d, (a, b) in zip(x.shape, w)))]


@_op("pad", _pad_infer, "layout")
def _pad(node, x, pads, value=None, axes=None):
    w = _pad_widths(node, x.shape, pads, axes)
    mode = node.attrs.get("mode", "constant")
    if mode == "constant":
        v = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
        return np.pad(x, w, constant_values=v)
    return np.pad(x, w, mode=mode)


def _shape_infer(node, types, consts):
    x = _need(types, 0, node)
    r = len(x.shape)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", r)
    n = len(range(*slice(start, end).indices(r)))
    return [TensorType(np.dtype(np.int64), (n,))]


@_op("shape", _shape_infer, "layout")
def _shape(node, x, *_):
    raise AssertionError("shape is folded at bind time")


def _gather_infer(node, types, consts):
    x, i = _need(types, 0, node), _need(types, 1, node)
    if np.dtype(i.dtype).kind not in "iu":
        raise ModelError(f"{node.describe()}: indices must be integers, got {i}")
    a = _axis(node.attrs.get("axis", 0), len(x.shape), node)
    return [TensorType(x.dtype, x.shape[:a] + i.shape + x.shape[a + 1:])]


@_op("gather", _gather_infer, "layout")
def _gather(node, x, idx):
    a = _axis(node.attrs.get("axis", 0), x.ndim, node)
    n = x.shape[a]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"gather index out of range [-{n}, {n}) on axis {a}")
    return np.take(x, np.where(idx < 0, idx + n, idx), axis=a)


def _expand_infer(node, types, consts):
    x = _need(types, 0, node)
    shape = tuple(int(v) for v in np.asarray(_const(consts, 1, node, "shape")).reshape(-1))
    out = _bshape([x.shape, shape], node)
    check_size(out, node.describe())
    return [TensorType(x.dtype, out)]


_op("expand", _expand_infer, "layout")(
    lambda node, x, shape: np.asarray(np.broadcast_to(
        x, np.broadcast_shapes(x.shape, tuple(int(v) for v in shape.reshape(-1)))), order="C"))


def _range_infer(node, types, consts):
    st, li, de = (_const(consts, i, node, n) for i, n in ((0, "start"), (1, "limit"), (2, "delta")))
    if float(de) == 0:
        raise ModelError(f"{node.describe()}: delta is 0")
    n = max(int(math.ceil((float(li) - float(st)) / float(de))), 0)
    check_size((n,), node.describe())
    return [TensorType(np.asarray(st).dtype, (n,))]


_op("range", _range_infer, "layout")(lambda node, s, l, d: np.arange(s, l, d).astype(np.asarray(s).dtype))


# ------------------------------------------------------------------------ transposed conv
def deconv_geometry(node, x_shape, w_shape):
    """``(strides, dilations, pads ((b, e) per axis), output_padding, out_spatial)`` of a
    transposed convolution (ONNX ConvTranspose semantics; ``output_shape`` and ``auto_pad``
    resolved here)."""
    nsp = len(x_shape) - 2
    k = tuple(int(v) for v in w_shape[2:])
    s = tuple(int(v) for v in node.attrs.get("strides") or (1,) * nsp)
    d = tuple(int(v) for v in node.attrs.get("dilations") or (1,) * nsp)
    op = tuple(int(v) for v in node.attrs.get("output_padding") or (0,) * nsp)
    if not len(k) == len(s) == len(d) == len(op) == nsp or min(s + d + k, default=1) < 1:
        raise ModelError(f"{node.describe()}: kernel {k}, strides {s}, dilations {d}, output_padding "
                         f"{op} do not fit the input's {nsp} spatial axes")
    if any(o >= max(st, dd) for o, st, dd in zip(op, s, d)):
        raise ModelError(f"{node.describe()}: output_padding {op} must be smaller than the stride "
                         f"or the dilation")
    sp = x_shape[2:]
    full = tuple(st * (n - 1) + o + (kk - 1) * dd + 1 for n, st, o, kk, dd in zip(sp, s, op, k, d))
    out_shape = node.attrs.get("output_shape")
    auto = node.attrs.get("auto_pad")
    if out_shape is None and auto in ("same_upper", "same_lower"):
        out_shape = tuple(n * st for n, st in zip(sp, s))
    if out_shape is not None:
        out_shape = tuple(int(v) for v in out_shape)[-nsp:]
        if len(out_shape) != nsp:
            raise ModelError(f"{node.describe()}: output_shape {out_shape} does not fit {nsp} spatial axes")
        pads = []
        for f, o in zip(full, out_shape):
            tot = f - o                 # < 0: the output extends past the full result (zeros)
            pads.append((tot // 2, tot - tot // 2) if auto == "same_upper" else (tot - tot // 2, tot // 2))
        pads = tuple(pads)
        check_size(tuple(x_shape[:1]) + out_shape, node.describe())
    elif auto == "valid" or node.attrs.get("pads") is None:
        pads = ((0, 0),) * nsp
    else:
        pads = tuple(tuple(int(v) for v in p) for p in node.attrs["pads"])
        if len(pads) != nsp or any(min(p) < 0 for p in pads):
            raise ModelError(f"{node.describe()}: pads {pads} invalid for {nsp} spatial axes")
    out = tuple(f - pb - pe for f, (pb, pe) in zip(full, pads))
    if min(out, default=1) < 1:
        raise ModelError(f"{node.describe()}: the output would be empty ({out})")
    return s, d, pads, op, out


def _deconv_infer(node, types, consts):
    x, w, g = _conv_operands(node, types, "transposed convolutions")
    if g < 1 or x.shape[1] != w.shape[0] or x.shape[1] % g:
        raise ModelError(f"{node.describe()}: group={g}: input has {x.shape[1]} channels, weight {w} "
                         f"expects {w.shape[0]} (divisible by the groups)")
    co = w.shape[1] * g
    if len(types) > 2 and types[2] is not None and types[2].shape != (co,):
        raise ModelError(f"{node.describe()}: bias must have shape ({co},), got {types[2]}")
    *_, out = deconv_geometry(node, x.shape, w.shape)
    return [TensorType(x.dtype, (x.shape[0], co) + out)]


@_op("conv_transpose", _deconv_infer, "mac")
def _deconv(node, x, w, b=None):
    """Scatter form: every input pixel adds its kernel-weighted contribution to the output
    (the definition; independent of the ANE lowering's zero-insertion form)."""
    import itertools
    s, d, pads, op, out = deconv_geometry(node, x.shape, w.shape)
    g = int(node.attrs.get("groups", 1))
    N, C = x.shape[:2]
    cg, mg = C // g, w.shape[1]
    sp = x.shape[2:]
    full = tuple(st * (n - 1) + o + (kk - 1) * dd + 1
                 for n, st, o, kk, dd in zip(sp, s, op, w.shape[2:], d))
    y = np.zeros((N, g, mg) + full, np.float32)
    xg = x.reshape((N, g, cg) + sp)
    wg = w.reshape((g, cg, mg) + w.shape[2:])
    for idx in itertools.product(*(range(kk) for kk in w.shape[2:])):
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + idx], optimize=True)
        sl = tuple(slice(i * dd, i * dd + st * (n - 1) + 1, st) for i, dd, st, n in zip(idx, d, s, sp))
        y[(slice(None), slice(None), slice(None)) + sl] += contrib
    y = y.reshape((N, g * mg) + full)
    y = np.pad(y, ((0, 0), (0, 0)) + tuple((max(-pb, 0), max(-pe, 0)) for pb, pe in pads))
    y = y[(slice(None), slice(None)) + tuple(slice(max(pb, 0), max(pb, 0) + o)
                                             for (pb, _), o in zip(pads, out))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * len(out))
    return y
