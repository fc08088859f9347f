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
from .lower.problems import check_addressable
from .operands import fp16_operand
from .stats import Stats, last_stats, record

__all__ = [
    "relu",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "exp",
    "exp2",
    "relu6",
    "hardtanh",
    "leaky_relu",
    "selu",
    "sign",
    "reciprocal",
    "rsqrt",
    "sqrt",
    "log2",
    "lut_table",
    "last_stats",
]


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
def relu(x, /, out=None):
    """max(x, 0) through the NE's ReLU (NonlinearMode 1; NaN stays NaN, -0 gives +0)."""
    return _run("relu", x, out, "relu")


def tanh(x, /, out=None):
    """tanh(x) by Apple's table: knots round_fp16(tanh(i/8)), odd, 1.0 beyond |x| = 4."""
    return _run("tanh", x, out, "tanh")


def sigmoid(x, /, out=None):
    """1/(1 + exp(-x)): the odd table of sigmoid - 0.5 (R = 2), then a planar +0.5."""
    return _run("sigmoid", x, out, "sigmoid")


def silu(x, /, out=None):
    """x * sigmoid(x) as Apple computes it: round(x * round(L(x) + 0.5)), three tasks."""
    return _run("silu", x, out, "silu")


def gelu(x, /, out=None):
    """GELU (erf form) by Apple's 33-knot table over [-4, 4]; 0 below -4.4, x above 4.

    Note: Apple's knot at 0 is -7.54e-4 (a least-squares table), so ``gelu(0)`` is not 0.
    """
    return _run("gelu", x, out, "gelu")


def exp(x, /, out=None):
    """e**x: PostScale by fp16 log2(e) (0x3dc5, rounded to fp16), then the exp2 table.

    The fp16 rounding of ``x * log2(e)`` limits the relative accuracy for large ``|x|``
    (about ``|x| * 2**-11 * ln 2``), as on the ANE.
    """
    return _run("exp", x, out, "exp")


def exp2(x, /, out=None):
    """2**x by the exponent-mode table 2**(i/32): 0 below -25, inf above 16."""
    return _run("exp2", x, out, "exp2")


def relu6(x, /, out=None):
    """min(max(x, 0), 6) by Apple's relu6 block (range clamp, no table)."""
    return _run("relu6", x, out, "relu6")


def hardtanh(x, /, min_val=-1.0, max_val=1.0, out=None):
    """clamp(x, min_val, max_val) (bounds rounded to fp16) by a range-clamp block."""
    lo = _real_param(min_val, "hardtanh", "min_val")
    hi = _real_param(max_val, "hardtanh", "max_val")
    if not float(np.float16(lo)) < float(np.float16(hi)):
        raise ValueError(
            f"hardtanh: min_val ({min_val}) must be below max_val ({max_val}) after rounding to fp16"
        )
    blk = "hardtanh" if (lo, hi) == (-1.0, 1.0) else _lut.hardtanh_block(lo, hi)
    return _run("hardtanh", x, out, blk)


def leaky_relu(x, /, negative_slope=0.01, out=None):
    """x for x >= 0, negative_slope * x below (slope rounded to fp16; 0.01 -> 0x211f)."""
    slope = _real_param(negative_slope, "leaky_relu", "negative_slope")
    if not math.isfinite(slope):
        raise ValueError(f"leaky_relu: negative_slope must be finite, got {negative_slope}")
    blk = "leaky_relu" if slope == 0.01 else _lut.leaky_relu_block(slope)
    return _run("leaky_relu", x, out, blk)


def selu(x, /, out=None):
    """SELU by Apple's block: table over [-8, 0] (fp16 chain), 1.0508 * x above 0."""
    return _run("selu", x, out, "selu")


def sign(x, /, out=None):
    """sign(x): -1, 0 (keeping the sign of zero), 1; NaN stays NaN."""
    return _run("sign", x, out, "sign")


def reciprocal(x, /, out=None):
    """1/x by the mantissa-mode table (odd): 1/(+-0) = +-inf, 1/inf = 0."""
    return _run("reciprocal", x, out, "reciprocal")


def rsqrt(x, /, out=None):
    """1/sqrt(x) by the even-exponent mantissa table; negative inputs give +inf (Apple's
    block maps x < 0 to its value at 0)."""
    return _run("rsqrt", x, out, "rsqrt")


def sqrt(x, /, out=None):
    """sqrt(x) by the even-exponent mantissa table; negative inputs give 0."""
    return _run("sqrt", x, out, "sqrt")


def log2(x, /, out=None):
    """log2(x) = exponent + table(mantissa); log2(0) = -inf, negative inputs give -inf."""
    return _run("log2", x, out, "log2")
