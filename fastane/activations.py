"""Activations on numpy arrays, computed the way the ANE computes them: on the device.

Every function behaves like a unary numpy ufunc: any shape, any real dtype (rounded to
fp16 first, round half to even, as Core ML does for an fp16 model), ``out=`` supported,
an ``np.float16`` result (a scalar for a scalar input).  Nothing is computed here: each
call is lowered to an elementwise program of task descriptors (cached by size and
activation) and run on the default device, the engine that runs Apple's programs
(:func:`fastane.lower.run_eltwise`, docs/lower.md "Elementwise programs"), as
Apple's compiler builds them (corpus ``unary/tanh.bin``, ``unary/sigmoid.bin``,
``activation/silu.bin``):

* ``relu`` and every one-table activation: one NE task per tile (``KernelMode = 1``: the
  input passes the MAC array unchanged), ``NonlinearMode`` 1 (ReLU) or 2 (the 33-knot
  LUT with the coefficient block Apple's compiler uses, :mod:`fastane.lut`) after
  ``PostScale`` -- ``exp(x) = exp2_table(round(x * 0x3dc5))`` (PostScale = fp16 log2 e);
* ``sigmoid(x) = round(L(x) + 0.5)``: the NE task with ``L``, the odd table of
  ``sigmoid - 0.5``, then a planar task adding 0.5;
* ``silu(x) = round(x * round(L(x) + 0.5))``: the same, then a planar multiply by ``x``.

Each step rounds once to fp16.  The Stats (:func:`last_stats`) are the device's: tasks,
DMA bytes, ``planar_ops``, and the inputs outside a table's range
(``lut_underflow``/``lut_overflow``), which are also surfaced through
``fastane.errstate(lut_range=...)`` (ignored by default).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import lower as _lower
from . import lut as _lut
from .lut import lut_table
from .errstate import report_events
from .activation_table import ACTIVATIONS
from .lower.problems import check_addressable
from .operands import fp16_operand
from .stats import Stats, last_stats, record

#: the activations (:data:`fastane.activation_table.ACTIVATIONS`), then the table accessor
#: and the counters
__all__ = [*ACTIVATIONS, "lut_table", "last_stats"]


# ------------------------------------------------------------------------- plumbing
def _check_out(out, shape, func: str):
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError(f"{func}: out must be an array or a 1-tuple, got {len(out)} items")
        out = out[0]
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{func}: out must be a numpy array, got {type(out).__name__}")
    if out.dtype.kind != "f":
        raise TypeError(
            f"{func}: cannot write the float16 result to out of dtype {out.dtype} (casting rule 'same_kind')"
        )
    try:
        full = np.broadcast_shapes(shape, out.shape)
    except ValueError:
        full = None
    if full != out.shape:
        raise ValueError(
            f"{func}: non-broadcastable output operand with shape {out.shape} "
            f"doesn't match the broadcast shape {shape}"
        )
    return out


def _finish(func, res16, out, stats):
    record(stats)
    report_events(stats, func)
    if out is not None:
        out[...] = res16
        return out
    return res16[()] if res16.ndim == 0 else res16


def _run(func, x, out, activation):
    """``activation`` of ``x`` through its elementwise program on the default device."""
    check_addressable(x, func, "the input")  # before the fp16 copy
    x16 = fp16_operand(x, func, "input")
    out = _check_out(out, x16.shape, func)
    if x16.size == 0:
        return _finish(func, np.empty(x16.shape, np.float16), out, Stats())
    r, stats, _ = _lower.run_eltwise(x16, activation)
    return _finish(func, r, out, stats)


def _real_param(v, func: str, name: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"{func}: {name} must be a real number, got {type(v).__name__}")
    if isinstance(v, np.floating) and v.dtype.itemsize > 8:  # rounded once, not via float64
        v = fp16_operand(v, func, name)
    v = float(v)
    if math.isnan(v):
        raise ValueError(f"{func}: {name} must not be NaN")
    return v


# ---------------------------------------------------------------------- activations
def _unary(name: str):
    """The public function ``name(x, /, out=None)`` of a parameterless activation."""

    def f(x, /, out=None):
        return _run(name, x, out, name)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = ACTIVATIONS[name].doc
    return f


def _documented(f):
    """``f`` with the docstring of its :data:`ACTIVATIONS` record (an activation with parameters)."""
    f.__doc__ = ACTIVATIONS[f.__name__].doc
    return f


# relu, tanh, sigmoid, ...: one module-level function per record without parameters
globals().update({a.name: _unary(a.name) for a in ACTIVATIONS.values() if not a.params})


@_documented
def hardtanh(x, /, min_val=-1.0, max_val=1.0, out=None):
    lo = _real_param(min_val, "hardtanh", "min_val")
    hi = _real_param(max_val, "hardtanh", "max_val")
    if not float(np.float16(lo)) < float(np.float16(hi)):
        raise ValueError(
            f"hardtanh: min_val ({min_val}) must be below max_val ({max_val}) after rounding to fp16"
        )
    blk = "hardtanh" if (lo, hi) == (-1.0, 1.0) else _lut.hardtanh_block(lo, hi)
    return _run("hardtanh", x, out, blk)


@_documented
def leaky_relu(x, /, negative_slope=0.01, out=None):
    slope = _real_param(negative_slope, "leaky_relu", "negative_slope")
    if not math.isfinite(slope):
        raise ValueError(f"leaky_relu: negative_slope must be finite, got {negative_slope}")
    blk = "leaky_relu" if slope == 0.01 else _lut.leaky_relu_block(slope)
    return _run("leaky_relu", x, out, blk)


@_documented
def elu(x, /, alpha=1.0, out=None):
    a = _real_param(alpha, "elu", "alpha")
    with np.errstate(over="ignore"):
        a16 = float(np.float16(a))
    if not math.isfinite(a16):
        raise ValueError(f"elu: alpha must be finite in fp16 (|alpha| < 65520), got {alpha}")
    blk = "elu" if a == 1.0 else _lut.elu_block(a)
    return _run("elu", x, out, blk)


@_documented
def hard_sigmoid(x, /, alpha=0.2, beta=0.5, out=None):
    a = _real_param(alpha, "hard_sigmoid", "alpha")
    b = _real_param(beta, "hard_sigmoid", "beta")
    with np.errstate(over="ignore"):
        a16, b16 = np.float16(a), np.float16(b)
    if not (math.isfinite(a16) and math.isfinite(b16)):
        raise ValueError(
            f"hard_sigmoid: alpha and beta must be finite in fp16 (|v| < 65520), got {alpha}, {beta}"
        )
    # the block holds the fp16 parameters: ONNX's defaults in float32 find the registry's
    default = (a16, b16) == (np.float16(0.2), np.float16(0.5))
    blk = "hard_sigmoid" if default else _lut.hard_sigmoid_block(a, b)
    return _run("hard_sigmoid", x, out, blk)
