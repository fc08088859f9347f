"""Softmax, normalizations and reductions on the ANE's planar engine, numpy style.

Each call validates and rounds its operands to fp16 (once: :mod:`fastane.operands`),
sees the data as rows along the reduced axis, and runs the program of
:mod:`fastane.lower.rows` (docs/lower.md, section 11) on the default device: the same
engine that runs Apple's ``activation/softmax.bin``.  Results are ``np.float16``;
:func:`fastane.last_stats` gives the device's counts.

* ``softmax(x, axis=-1)``, ``log_softmax(x, axis=-1)``;
* ``reduce_sum``, ``reduce_mean``, ``reduce_max``, ``reduce_min`` ``(x, axis=-1,
  keepdims=False)``;
* ``layer_norm(x, scale=None, bias=None, eps=1e-5)`` and ``rms_norm(x, scale=None,
  bias=None, eps=1e-5)`` over the last axis (``scale``/``bias`` of its length).

``axis`` is one axis; another than the last is moved there first by the host (a
transpose: layout work, no value changes).  A row longer than 16384 elements raises
``NotImplementedError`` (docs/lower.md: the reduction is not split).
"""

from __future__ import annotations

import operator

import numpy as np

from .errstate import report_events
from .lower import rows as _rows
from .operands import fp16_operand, real_operand
from .stats import Stats, record

__all__ = [
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
]


def _axis(axis, ndim: int, func: str) -> int:
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{func}: axis must be an integer, not {type(axis).__name__}") from None
    if not -ndim <= a < ndim:
        raise ValueError(f"{func}: axis {a} is out of bounds for an array of dimension {ndim}")
    return a % ndim


def _input(x, func: str):
    x16 = fp16_operand(x, func, "x")
    if x16.ndim == 0:
        raise ValueError(f"{func}: x must have at least one dimension (the axis it works along)")
    return x16


def _run(op: str, func: str, x16: np.ndarray, scale=None, bias=None, eps: float = 0.0):
    """``op`` over the last axis of ``x16``: the result (rows, width) or (rows,)."""
    width = x16.shape[-1]
    rows = int(np.prod(x16.shape[:-1], dtype=np.int64))
    p = _rows.RowOp(op, rows, width, eps, scale is not None, bias is not None)
    y, stats = _rows.run(p, np.ascontiguousarray(x16).reshape(rows, width), scale, bias)
    record(stats)
    report_events(stats, func)
    return y


def _rowwise(op: str, func: str, x, axis):
    x16 = _input(x, func)
    a = _axis(axis, x16.ndim, func)
    moved = np.moveaxis(x16, a, -1)
    if moved.size == 0:
        record(Stats())
        return np.empty(x16.shape, np.float16)
    y = _run(op, func, moved).reshape(moved.shape)
    return np.moveaxis(y, -1, a)


def softmax(x, axis=-1):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, as Apple's
    ``activation/softmax.bin`` computes it: max-reduce, ``(x - max) * log2(e)``, the exp2
    table, the reciprocal of the row sum, a multiply; each stage rounded to fp16."""
    return _rowwise("softmax", "softmax", x, axis)


def log_softmax(x, axis=-1):
    """``log(softmax(x))`` along ``axis`` as ``activation/logsoftmax.bin``: the softmax,
    the log2 table, times fp16 ln 2 (a softmax that underflows to 0 gives -inf)."""
    return _rowwise("log_softmax", "log_softmax", x, axis)


def _reduce(op: str, x, axis, keepdims: bool):
    func = op
    x16 = _input(x, func)
    a = _axis(axis, x16.ndim, func)
    moved = np.moveaxis(x16, a, -1)
    out_shape = moved.shape[:-1]
    if moved.shape[-1] == 0:
        if op in ("reduce_max", "reduce_min"):
            raise ValueError(f"{func}: zero-size reduction along axis {a}, which has no identity")
        record(Stats())
        y = np.full(out_shape, 0.0 if op == "reduce_sum" else np.nan, np.float16)
    elif moved.size == 0:
        record(Stats())
        y = np.empty(out_shape, np.float16)
    else:
        y = _run(op, func, moved).reshape(out_shape)
    if keepdims:
        y = np.expand_dims(y, a)
    return y[()] if y.ndim == 0 else y


def reduce_sum(x, axis=-1, keepdims=False):
    """The sum along ``axis`` on the planar engine: the exact sum rounded once to fp16
    (beyond 65504 it is inf)."""
    return _reduce("reduce_sum", x, axis, keepdims)


def reduce_mean(x, axis=-1, keepdims=False):
    """The mean along ``axis``: the planar sum (rounded to fp16) times fp16(1 / n),
    rounded again -- the plain composition, no compensated division."""
    return _reduce("reduce_mean", x, axis, keepdims)


def reduce_max(x, axis=-1, keepdims=False):
    """The largest element along ``axis`` (NaN if any is NaN; max(-0, +0) = +0)."""
    return _reduce("reduce_max", x, axis, keepdims)


def reduce_min(x, axis=-1, keepdims=False):
    """The smallest element along ``axis``, as ``-max(-x)`` (exact)."""
    return _reduce("reduce_min", x, axis, keepdims)


def _param(v, width: int, func: str, name: str):
    if v is None:
        return None
    v16 = fp16_operand(v, func, name)
    if v16.shape not in ((width,), (1,), ()):
        raise ValueError(f"{func}: {name} has shape {v16.shape}; it must be ({width},), the last axis of x")
    return np.broadcast_to(v16, (width,))


def _norm(op: str, x, scale, bias, eps):
    func = op
    x16 = _input(x, func)
    e = float(real_operand(eps, func, "eps"))
    if not np.isfinite(e) or e < 0:
        raise ValueError(f"{func}: eps must be a finite number >= 0, got {eps!r}")
    width = x16.shape[-1]
    s16, b16 = _param(scale, width, func, "scale"), _param(bias, width, func, "bias")
    if x16.size == 0:
        record(Stats())
        return np.empty(x16.shape, np.float16)
    return _run(op, func, x16, s16, b16, e).reshape(x16.shape)


def layer_norm(x, scale=None, bias=None, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis, composed of
    planar and table stages as a compiler would (docs/lower.md, section 11): the mean
    and variance as sums times fp16(1 / n), ``eps`` rounded to fp16, the sqrt and
    reciprocal tables, each stage rounded to fp16."""
    return _norm("layer_norm", x, scale, bias, eps)


def rms_norm(x, scale=None, bias=None, eps=1e-5):
    """``x / sqrt(mean(x * x) + eps) * scale (+ bias)`` over the last axis, composed as
    :func:`layer_norm` is."""
    return _norm("rms_norm", x, scale, bias, eps)
