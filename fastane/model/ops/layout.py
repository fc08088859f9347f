"""The layout ops of the vocabulary (flatten, reshape, transpose, squeeze, concat, slice,
pad, shape, gather, expand, range ...): shape inference and host implementations
(see :mod:`fastane.model.ops`)."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError, quote
from ..budget import MAX_RANK, beyond
from .opdef import (
    MOVED_DOC,
    OnnxName,
    attr_input,
    check_axis,
    broadcast_shape,
    need_const,
    need_input,
    register_op,
    take,
)
from ..tensor import TensorType, check_size


# ------------------------------------------------------------------------ layout
def _flatten_infer(node, types, consts):
    x = need_input(types, 0, node)
    r = len(x.shape)
    a = int(node.attrs.get("axis", 1))
    if not -r <= a <= r:
        raise ModelError(f"{node.describe()}: axis {a} out of range for a {r}-D tensor")
    a = a + r if a < 0 else a
    return [TensorType(x.dtype, (math.prod(x.shape[:a]), math.prod(x.shape[a:])))]


register_op("flatten", _flatten_infer, "layout", onnx=[OnnxName("Flatten", take(axis=1))])(
    lambda node, x: x.reshape(_flatten_infer(node, [TensorType(x.dtype, x.shape)], [None])[0].shape)
)


def _reshape_target(node, shape, target):
    target = np.asarray(target).reshape(-1)
    if target.size > MAX_RANK:  # before any int(): a constant can hold millions
        raise beyond(f"{node.describe()}: target shape", target.size, "dimensions", "MAX_RANK")
    target = [int(v) for v in target]
    allowzero = node.attrs.get("allowzero", 0)
    out = []
    for i, v in enumerate(target):
        if v == 0 and not allowzero:
            if i >= len(shape):
                raise ModelError(
                    f"{node.describe()}: target dim {i} is 0 (copy) but the input has {len(shape)} dims"
                )
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
        raise ModelError(f"{node.describe()}: cannot reshape {tuple(shape)} ({n} elements) to {tuple(out)}")
    return tuple(out)


def _reshape_infer(node, types, consts):
    x = need_input(types, 0, node)
    return [TensorType(x.dtype, _reshape_target(node, x.shape, need_const(consts, 1, node, "shape")))]


def _reshape_onnx(c, a, ins):
    if c.opset < 5:
        if "shape" not in a:
            raise ModelError(f"{c.where}: has no shape attribute (Reshape-1 takes the shape as one)")
        ins = ins[:1] + [c.const(a["shape"], np.int64)]
    return c.mk({"allowzero": a.get("allowzero", 0)}, ins)


register_op("reshape", _reshape_infer, "layout", onnx=[OnnxName("Reshape", _reshape_onnx)])(
    lambda node, x, t: x.reshape(_reshape_target(node, x.shape, t))
)


def transpose_perm(node, rank) -> tuple:
    """The permutation of the transpose ``node`` of a ``rank``-D tensor (reversed axes by default)."""
    perm = node.attrs.get("perm")
    perm = tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(rank)):
        raise ModelError(f"{node.describe()}: perm {perm} is not a permutation of {rank} axes")
    return perm


def _transpose_infer(node, types, consts):
    x = need_input(types, 0, node)
    return [TensorType(x.dtype, tuple(x.shape[p] for p in transpose_perm(node, len(x.shape))))]


register_op(
    "transpose", _transpose_infer, "layout", onnx=[OnnxName("Transpose", take(perm=None), doc=MOVED_DOC)]
)(lambda node, x: np.asarray(np.transpose(x, transpose_perm(node, x.ndim)), order="C"))


def _squeeze_axes(node, shape, axes):
    if axes is None:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    ax = tuple(sorted({check_axis(a, len(shape), node) for a in np.asarray(axes).reshape(-1)}))
    for a in ax:
        if shape[a] != 1:
            raise ModelError(f"{node.describe()}: cannot squeeze axis {a} of size {shape[a]}")
    return ax


def _squeeze_infer(node, types, consts):
    x = need_input(types, 0, node)
    axes = None
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = need_const(consts, 1, node, "axes")
    ax = _squeeze_axes(node, x.shape, axes)
    return [TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in ax))]


def _axes_onnx(c, a, ins):
    return c.mk(inputs=attr_input(c, a, ins, "axes"))


register_op("squeeze", _squeeze_infer, "layout", onnx=[OnnxName("Squeeze", _axes_onnx)])(
    lambda node, x, axes=None: np.squeeze(x, _squeeze_axes(node, x.shape, axes))
)


def _unsqueeze_shape(node, shape, axes):
    r = len(shape) + np.size(axes)
    ax = sorted({check_axis(a, r, node) for a in np.asarray(axes).reshape(-1)})
    if len(ax) != np.size(axes):
        raise ModelError(f"{node.describe()}: repeated axes {list(np.asarray(axes).reshape(-1))}")
    it = iter(shape)
    return tuple(1 if i in ax else next(it) for i in range(r))


def _unsqueeze_infer(node, types, consts):
    x = need_input(types, 0, node)
    return [TensorType(x.dtype, _unsqueeze_shape(node, x.shape, need_const(consts, 1, node, "axes")))]


register_op("unsqueeze", _unsqueeze_infer, "layout", onnx=[OnnxName("Unsqueeze", _axes_onnx)])(
    lambda node, x, axes: x.reshape(_unsqueeze_shape(node, x.shape, axes))
)


def _concat_infer(node, types, consts):
    ts = [need_input(types, i, node) for i in range(len(node.inputs))]
    r = len(ts[0].shape)
    a = check_axis(node.attrs.get("axis", 0), r, node)
    for t in ts[1:]:
        if len(t.shape) != r or any(x != y for i, (x, y) in enumerate(zip(t.shape, ts[0].shape)) if i != a):
            raise ModelError(
                f"{node.describe()}: cannot concatenate {', '.join(str(t) for t in ts)} along axis {a}"
            )
        if t.dtype != ts[0].dtype:
            raise ModelError(f"{node.describe()}: operand dtypes differ: {ts[0]} and {t}")
    shape = list(ts[0].shape)
    shape[a] = sum(t.shape[a] for t in ts)
    return [TensorType(ts[0].dtype, tuple(shape))]


@register_op("concat", _concat_infer, "layout", onnx=[OnnxName("Concat", take(axis=0), doc=MOVED_DOC)])
def _concat(node, *xs):
    # ANE tensors arrive as fp16, host ones as float32: concatenate in the wider dtype
    return np.concatenate(xs, axis=check_axis(node.attrs.get("axis", 0), xs[0].ndim, node))


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
        a = check_axis(ax, len(shape), node)
        big = 1 << 62
        sl[a] = slice(int(np.clip(st, -big, big)), int(np.clip(en, -big, big)), int(sp))
    return tuple(sl)


def slice_windows(node, shape, starts, ends, axes=None, steps=None) -> tuple:
    """``(start, stop, step)`` per axis of ``shape`` that the slice ``node`` (its constant
    inputs given) takes, clamped as numpy clamps it; ``(0, n, 1)`` on an axis it leaves whole."""
    return tuple(s.indices(d) for s, d in zip(_slices(node, shape, starts, ends, axes, steps), shape))


def last_axis_window(node, shape, starts, ends, axes=None, steps=None) -> tuple:
    """``(start, stop, step)`` the slice ``node`` (its constant inputs given) takes on the last
    axis of ``shape`` (:func:`slice_windows`)."""
    return slice_windows(node, shape, starts, ends, axes, steps)[-1]


def _slice_infer(node, types, consts):
    x = need_input(types, 0, node)
    args = [need_const(consts, i, node, n) for i, n in ((1, "starts"), (2, "ends"))]
    for i, n in ((3, "axes"), (4, "steps")):
        args.append(need_const(consts, i, node, n) if len(node.inputs) > i and node.inputs[i] else None)
    sl = _slices(node, x.shape, *args)
    return [TensorType(x.dtype, tuple(len(range(*s.indices(d))) for s, d in zip(sl, x.shape)))]


def _slice_onnx(c, a, ins):
    if c.opset < 10:  # starts, ends and axes were attributes
        ins = ins[:1] + [c.const(a["starts"], np.int64), c.const(a["ends"], np.int64)]
        if "axes" in a:
            ins.append(c.const(a["axes"], np.int64))
    return c.mk(inputs=ins)


register_op("slice", _slice_infer, "layout", onnx=[OnnxName("Slice", _slice_onnx, doc=MOVED_DOC)])(
    lambda node, x, st, en, ax=None, sp=None: np.asarray(x[_slices(node, x.shape, st, en, ax, sp)], order="C")
)


def pad_widths(node, shape, pads, axes) -> list:
    """``[(before, after), ...]`` per axis of the pad ``node`` of a tensor of ``shape``."""
    pads = np.asarray(pads).reshape(-1)
    n_axes = len(shape) if axes is None else np.size(axes)
    if n_axes > len(shape):
        raise ModelError(f"{node.describe()}: axes has {n_axes} values for a {len(shape)}-D tensor")
    if pads.size != 2 * n_axes:  # before any int(): a constant can hold millions
        raise ModelError(f"{node.describe()}: pads has {pads.size} values for {n_axes} axes")
    pads = [int(v) for v in pads]
    axes = (
        list(range(len(shape)))
        if axes is None
        else [check_axis(a, len(shape), node) for a in np.asarray(axes).reshape(-1)]
    )
    if min(pads, default=0) < 0:
        raise ModelNotImplementedError(f"{node.describe()}: negative pads (cropping) are not supported yet")
    w = [(0, 0)] * len(shape)
    for i, a in enumerate(axes):
        w[a] = (pads[i], pads[i + len(axes)])
    return w


def _pad_infer(node, types, consts):
    x = need_input(types, 0, node)
    axes = need_const(consts, 3, node, "axes") if len(node.inputs) > 3 and node.inputs[3] else None
    w = pad_widths(node, x.shape, need_const(consts, 1, node, "pads"), axes)
    if node.attrs.get("mode", "constant") not in ("constant", "reflect", "edge"):
        raise ModelError(f"{node.describe()}: unknown pad mode {quote(node.attrs.get('mode'))}")
    return [TensorType(x.dtype, tuple(d + a + b for d, (a, b) in zip(x.shape, w)))]


def _pad_onnx(c, a, ins):
    if c.opset < 11:  # pads and value were attributes
        ins = ins[:1] + [c.const(a["pads"], np.int64), c.const(a.get("value", 0.0), np.float32)]
    return c.mk({"mode": a.get("mode", "constant")}, ins)


@register_op("pad", _pad_infer, "layout", onnx=[OnnxName("Pad", _pad_onnx, doc=MOVED_DOC)])
def _pad(node, x, pads, value=None, axes=None):
    w = pad_widths(node, x.shape, pads, axes)
    mode = node.attrs.get("mode", "constant")
    if mode == "constant":
        v = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
        return np.pad(x, w, constant_values=v)
    return np.pad(x, w, mode=mode)


def _shape_infer(node, types, consts):
    x = need_input(types, 0, node)
    r = len(x.shape)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", r)
    n = len(range(*slice(start, end).indices(r)))
    return [TensorType(np.dtype(np.int64), (n,))]


@register_op(
    "shape", _shape_infer, "layout", onnx=[OnnxName("Shape", take("start", "end"))], shapes_only=True
)
def _shape(node, x, *_):
    return np.array(x.shape[slice(node.attrs.get("start", 0), node.attrs.get("end", x.ndim))], np.int64)


def _size_infer(node, types, consts):
    need_input(types, 0, node)
    return [TensorType(np.dtype(np.int64), ())]


@register_op("size", _size_infer, "layout", onnx=["Size"], shapes_only=True)
def _size(node, x):
    return np.array(x.size, np.int64)


def _gather_infer(node, types, consts):
    x, i = need_input(types, 0, node), need_input(types, 1, node)
    if np.dtype(i.dtype).kind not in "iu":
        raise ModelError(f"{node.describe()}: indices must be integers, got {i}")
    a = check_axis(node.attrs.get("axis", 0), len(x.shape), node)
    return [TensorType(x.dtype, x.shape[:a] + i.shape + x.shape[a + 1 :])]


@register_op("gather", _gather_infer, "layout", onnx=[OnnxName("Gather", take(axis=0))])
def _gather(node, x, idx):
    a = check_axis(node.attrs.get("axis", 0), x.ndim, node)
    n = x.shape[a]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"gather index out of range [-{n}, {n}) on axis {a}")
    return np.take(x, np.where(idx < 0, idx + n, idx), axis=a)


def _expand_infer(node, types, consts):
    x = need_input(types, 0, node)
    shape = tuple(int(v) for v in np.asarray(need_const(consts, 1, node, "shape")).reshape(-1))
    out = broadcast_shape([x.shape, shape], node)
    check_size(out, node.describe())
    return [TensorType(x.dtype, out)]


def _constant_of_shape_onnx(c, a, ins):
    """ConstantOfShape as its value (one element, float32 0 when absent) expanded to the
    shape: a constant when the shape is (at bind: the exporters' ``Shape ->
    ConstantOfShape`` masks fold)."""
    v = c.tensor(a["value"]) if "value" in a else np.zeros(1, np.float32)
    if v.size != 1:
        raise ModelError(f"{c.where}: value must hold one element, has {v.size}")
    return c.mk(inputs=[c.const(v.reshape(()), v.dtype), ins[0]])


register_op(
    "expand",
    _expand_infer,
    "layout",
    onnx=["Expand", OnnxName("ConstantOfShape", _constant_of_shape_onnx, doc="its value expanded")],
)(
    lambda node, x, shape: np.asarray(
        np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(v) for v in shape.reshape(-1)))), order="C"
    )
)


def _range_infer(node, types, consts):
    st, li, de = (need_const(consts, i, node, n) for i, n in ((0, "start"), (1, "limit"), (2, "delta")))
    if float(de) == 0:
        raise ModelError(f"{node.describe()}: delta is 0")
    steps = (float(li) - float(st)) / float(de)
    if not math.isfinite(steps):
        raise ModelError(f"{node.describe()}: start {st}, limit {li}, delta {de} give no finite length")
    n = max(int(math.ceil(steps)), 0)
    check_size((n,), node.describe())
    return [TensorType(np.asarray(st).dtype, (n,))]


register_op("range", _range_infer, "layout", onnx=["Range"])(
    lambda node, s, l, d: np.arange(s, l, d).astype(np.asarray(s).dtype)
)
