"""Index ops of the vocabulary, run on the host: GatherND, GatherElements, ScatterND,
ScatterElements, Tile, Split, DepthToSpace/SpaceToDepth, NonZero of a constant (see
:mod:`.host`).

Shapes are checked at inference; index values (which only exist at run time) are
bounds-checked before any array is indexed: an out-of-range index is a ModelError naming
the node, never a wrap-around or a write outside the tensor."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError, quote
from .opdef import MOVED_DOC, OnnxName, check_axis, need_const, need_input, register_op, same_attrs
from ..tensor import TensorType, check_size, shape_text


def _int_index(t, node, what="indices"):
    if np.dtype(t.dtype).kind not in "iu":
        raise ModelError(f"{node.describe()}: {what} must be integers, got {t}")
    return t


def _wrap(idx, n, node, what):
    """``idx`` with negative entries counted from the end; ValueError outside ``[-n, n)``."""
    idx = np.asarray(idx).astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"{what} out of range [-{n}, {n})")
    return np.where(idx < 0, idx + n, idx)


# ------------------------------------------------------------------------ gathers
def _gnd_infer(node, types, consts):
    x, i = need_input(types, 0, node), _int_index(need_input(types, 1, node), node)
    r, q, b = len(x.shape), len(i.shape), int(node.attrs.get("batch_dims", 0))
    if q < 1 or r < 1 or not 0 <= b < min(q, r):
        raise ModelError(f"{node.describe()}: batch_dims {b} for data {x} and indices {i}")
    m = i.shape[-1]
    if not 1 <= m <= r - b:
        raise ModelError(f"{node.describe()}: indices' last dim {m} must be in [1, {r - b}] for data {x}")
    if x.shape[:b] != i.shape[:b]:
        raise ModelError(f"{node.describe()}: batch dims of data {x} and indices {i} differ")
    return [TensorType(x.dtype, i.shape[:-1] + x.shape[b + m :])]


@register_op("gather_nd", _gnd_infer, "layout", onnx=[OnnxName("GatherND", same_attrs)])
def _gather_nd(node, x, idx):
    b = int(node.attrs.get("batch_dims", 0))
    m = idx.shape[-1]
    nb = math.prod(x.shape[:b])
    if idx.size == 0 or nb == 0:
        return np.zeros(idx.shape[:-1] + x.shape[b + m :], x.dtype)
    xb = x.reshape((nb,) + x.shape[b:])
    ib = idx.reshape(nb, -1, m)
    cols = [_wrap(ib[..., j], x.shape[b + j], node, f"index (column {j})") for j in range(m)]
    y = xb[(np.arange(nb)[:, None], *cols)]
    return y.reshape(idx.shape[:-1] + x.shape[b + m :])


def _elements_check(node, x, i, axis, what="indices"):
    if len(x.shape) != len(i.shape):
        raise ModelError(f"{node.describe()}: data {x} and {what} {i} differ in rank")
    for d, (a, b) in enumerate(zip(x.shape, i.shape)):
        if d != axis and b > a:
            raise ModelError(f"{node.describe()}: {what} {i} are larger than data {x} on axis {d}")


def _ge_infer(node, types, consts):
    x, i = need_input(types, 0, node), _int_index(need_input(types, 1, node), node)
    a = check_axis(node.attrs.get("axis", 0), len(x.shape), node)
    _elements_check(node, x, i, a)
    return [TensorType(x.dtype, i.shape)]


@register_op("gather_elements", _ge_infer, "layout", onnx=[OnnxName("GatherElements", same_attrs)])
def _gather_elements(node, x, idx):
    a = check_axis(node.attrs.get("axis", 0), x.ndim, node)
    part = tuple(slice(None) if d == a else slice(0, n) for d, n in enumerate(idx.shape))
    return np.take_along_axis(x[part], _wrap(idx, x.shape[a], node, "index"), a)


# ------------------------------------------------------------------------ scatters
#: reduction attribute -> numpy ufunc (None: plain assignment, the last write wins)
_REDUCTIONS = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "sub": np.subtract,  # MIL scatter modes
    "div": np.divide,
}


def _reduction(node):
    r = str(node.attrs.get("reduction", "none"))
    if r not in _REDUCTIONS:
        raise ModelError(f"{node.describe()}: unknown reduction {quote(r)}")
    return _REDUCTIONS[r]


def _same_dtype(node, x, u):
    if np.dtype(x.dtype) != np.dtype(u.dtype):
        raise ModelError(f"{node.describe()}: data {x} and updates {u} differ in dtype")


def _scatter_types(node, types):
    """The types of a scatter's data, indices and updates, with its reduction and the
    data's and updates' dtypes checked."""
    x, i, u = (
        need_input(types, 0, node),
        _int_index(need_input(types, 1, node), node),
        need_input(types, 2, node),
    )
    _reduction(node)
    _same_dtype(node, x, u)
    return x, i, u


def _snd_infer(node, types, consts):
    x, i, u = _scatter_types(node, types)
    if len(i.shape) < 1 or not 1 <= i.shape[-1] <= len(x.shape):
        raise ModelError(f"{node.describe()}: indices {i} do not index data {x}")
    want = i.shape[:-1] + x.shape[i.shape[-1] :]
    if tuple(u.shape) != want:
        raise ModelError(
            f"{node.describe()}: updates {u} must have shape {want} for data {x} and indices {i}"
        )
    return [x]


@register_op("scatter_nd", _snd_infer, onnx=[OnnxName("ScatterND", same_attrs)])
def _scatter_nd(node, x, idx, upd):
    m = idx.shape[-1]
    flat = idx.reshape(-1, m)
    key = tuple(_wrap(flat[:, j], x.shape[j], node, f"index (column {j})") for j in range(m))
    upd = upd.reshape((flat.shape[0],) + x.shape[m:])
    return _scatter(node, x, key, upd)


def _scatter(node, x, key, upd):
    y = np.array(x, copy=True)
    fn = _reduction(node)
    if fn is None:
        y[key] = upd
    else:
        fn.at(y, key, upd.astype(y.dtype, copy=False))
    return y


def _se_infer(node, types, consts):
    x, i, u = _scatter_types(node, types)
    a = check_axis(node.attrs.get("axis", 0), len(x.shape), node)
    _elements_check(node, x, i, a)
    if tuple(u.shape) != tuple(i.shape):
        raise ModelError(f"{node.describe()}: updates {u} and indices {i} differ in shape")
    return [x]


def _scatter_onnx(c, a, ins):
    if c.op == "Scatter" or c.opset < 16:  # no reduction before ScatterElements-16
        a = {k: v for k, v in a.items() if k != "reduction"}
    return c.mk(dict(a))


@register_op(
    "scatter_elements",
    _se_infer,
    onnx=[OnnxName("ScatterElements", _scatter_onnx), OnnxName("Scatter", _scatter_onnx)],
)
def _scatter_elements(node, x, idx, upd):
    a = check_axis(node.attrs.get("axis", 0), x.ndim, node)
    key = list(np.indices(idx.shape, sparse=True))
    key[a] = _wrap(idx, x.shape[a], node, "index")
    return _scatter(node, x, tuple(key), upd)


# ------------------------------------------------------------------------ tile, split, depth/space
def _reps(node, rank, reps):
    reps = np.asarray(reps).reshape(-1)
    if reps.size != rank:  # before any int(): a constant can hold millions
        raise ModelError(
            f"{node.describe()}: repeats has {reps.size} values, must be {rank} non-negative integers"
        )
    reps = [int(v) for v in reps]
    if min(reps, default=0) < 0:
        raise ModelError(
            f"{node.describe()}: repeats {shape_text(reps)} must be {rank} non-negative integers"
        )
    return reps


def _tile_infer(node, types, consts):
    x = need_input(types, 0, node)
    reps = _reps(node, len(x.shape), need_const(consts, 1, node, "repeats"))
    out = tuple(d * r for d, r in zip(x.shape, reps))
    check_size(out, node.describe())
    return [TensorType(x.dtype, out)]


register_op("tile", _tile_infer, "layout", onnx=[OnnxName("Tile", same_attrs)])(
    lambda node, x, reps: np.tile(x, _reps(node, x.ndim, reps))
)


def split_sizes(node, shape, sizes) -> tuple:
    """``(axis, sizes)`` of the split ``node`` of a tensor of ``shape`` (``sizes``: its constant input)."""
    a = check_axis(node.attrs.get("axis", 0), len(shape), node)
    n, k = shape[a], len(node.outputs)
    given = sizes if sizes is not None and np.size(sizes) else node.attrs.get("split")
    if given is not None and np.size(given):
        if np.size(given) != k:  # before any int(): a constant can hold millions
            raise ModelError(f"{node.describe()}: {np.size(given)} split sizes for {k} outputs")
        sizes = [int(v) for v in np.asarray(given).reshape(-1)]
    else:
        parts = int(node.attrs.get("num_outputs", k))
        if parts < 1:
            raise ModelError(f"{node.describe()}: cannot split into {parts} parts")
        if parts != k:  # before the list of parts is made
            raise ModelError(f"{node.describe()}: num_outputs = {parts}, the node has {k} outputs")
        step = -(-n // parts)
        sizes = [min(step, max(n - step * j, 0)) for j in range(parts)]
    if len(sizes) != k or min(sizes, default=0) < 0 or sum(sizes) != n:
        raise ModelError(
            f"{node.describe()}: split sizes {shape_text(sizes)} do not cover axis {a} ({n}) in {k} outputs"
        )
    return a, sizes


def _split_infer(node, types, consts):
    x = need_input(types, 0, node)
    sizes = need_const(consts, 1, node, "split") if len(node.inputs) > 1 and node.inputs[1] else None
    a, sizes = split_sizes(node, x.shape, sizes)
    return [TensorType(x.dtype, x.shape[:a] + (s,) + x.shape[a + 1 :]) for s in sizes]


def _split_onnx(c, a, ins):
    attrs = {"axis": a.get("axis", 0)}
    if "split" in a:  # opset < 13: an attribute
        ins = ins[:1] + [c.const(a["split"], np.int64)]
    if "num_outputs" in a:
        attrs["num_outputs"] = a["num_outputs"]
    return c.mk(attrs, ins, max(len(c.outs), 1), keep=True)


@register_op("split", _split_infer, "layout", onnx=[OnnxName("Split", _split_onnx, doc=MOVED_DOC)])
def _split(node, x, sizes=None):
    a, sizes = split_sizes(node, x.shape, sizes)
    return np.split(x, np.cumsum(sizes)[:-1], axis=a)


def _d2s_geometry(node, shape):
    if len(shape) != 4:
        raise ModelError(f"{node.describe()}: input must be N x C x H x W, got {shape}")
    b = int(node.attrs.get("blocksize", 0))
    mode = str(node.attrs.get("mode", "DCR")).upper()
    if b < 1 or mode not in ("DCR", "CRD"):
        raise ModelError(f"{node.describe()}: blocksize {b} / mode {quote(mode)} invalid")
    n, c, h, w = shape
    if node.op == "depth_to_space":
        if c % (b * b):
            raise ModelError(f"{node.describe()}: channels {c} not divisible by blocksize^2 {b * b}")
        return b, mode, (n, c // (b * b), h * b, w * b)
    if h % b or w % b:
        raise ModelError(f"{node.describe()}: H, W = {h}, {w} not divisible by blocksize {b}")
    return b, mode, (n, c * b * b, h // b, w // b)


def _d2s_infer(node, types, consts):
    x = need_input(types, 0, node)
    return [TensorType(x.dtype, _d2s_geometry(node, x.shape)[2])]


@register_op("depth_to_space", _d2s_infer, "layout", onnx=[OnnxName("DepthToSpace", same_attrs)])
def _depth_to_space(node, x):
    b, mode, out = _d2s_geometry(node, x.shape)
    n, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(t).reshape(out)


@register_op("space_to_depth", _d2s_infer, "layout", onnx=[OnnxName("SpaceToDepth", same_attrs)])
def _space_to_depth(node, x):
    b, mode, out = _d2s_geometry(node, x.shape)
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return np.ascontiguousarray(t).reshape(out)


# ------------------------------------------------------------------------ nonzero
def _nonzero_infer(node, types, consts):
    x = need_input(types, 0, node)
    if consts[0] is None:
        raise ModelNotImplementedError(
            f"{node.describe()}: NonZero's output shape is the count of its input's nonzero "
            f"values, known only at run time; fastane runs static shapes (a NonZero of a "
            f"constant is folded)"
        )
    if not x.shape:
        raise ModelNotImplementedError(f"{node.describe()}: NonZero of a 0-D tensor is not supported")
    return [TensorType(np.dtype(np.int64), (len(x.shape), int(np.count_nonzero(consts[0]))))]


@register_op("nonzero", _nonzero_infer, onnx=["NonZero"])
def _nonzero(node, x):
    return np.array(np.nonzero(x), np.int64)
