"""A slow, obviously correct reference of the row operations (fastane.lower.rows), written
from their definition as chains of ANE stages (docs/lower.md, section 11), independently
of the kernels and of the lowering:

* a planar row reduction: the exact sum (Python integers on the 2**-24 grid every fp16
  value sits on) or the max, rounded once to fp16 (``round16_exact``), IEEE for NaN/inf;
  the reciprocal rounded once again;
* a planar output affine ``round16(s * y + c)`` in exact rationals;
* an elementwise planar op: ``tests.helpers.planar.ref_eltwise`` (float64 is exact for one
  fp16 add, subtract or multiply; numpy's fp16 conversion rounds it once);
* a table: ``tests.helpers.lut_reference.ref_lut`` (Fractions), on every distinct input pattern.
"""

from fractions import Fraction
import math

import numpy as np
from tests.helpers.planar import F16, ref_eltwise, round16_exact
from tests.helpers.lut_reference import QNAN, ref_lut

from fastane import lut

LOG2E = float(np.float16(1.4426950408889634))
LN2 = float(np.float16(0.6931471805599453))
_GRID = 2**24


def f16(x) -> float:
    return float(np.float16(x))


def red_sum(row) -> float:
    v = [float(a) for a in np.asarray(row, F16).astype(np.float64)]
    if any(math.isnan(a) for a in v):
        return math.nan
    pinf, ninf = math.inf in v, -math.inf in v
    if pinf and ninf:
        return math.nan
    if pinf or ninf:
        return math.inf if pinf else -math.inf
    total = sum(int(a * _GRID) for a in v)  # exact: fp16 values are multiples of 2**-24
    return round16_exact(Fraction(total, _GRID))


def red_max(row) -> float:
    v = [float(a) for a in np.asarray(row, F16).astype(np.float64)]
    if any(math.isnan(a) for a in v):
        return math.nan
    m = max(v)
    if m == 0 and any(a == 0 and math.copysign(1, a) > 0 for a in v):
        return 0.0  # max(-0, +0) = +0
    return m


def recip(y: float) -> float:
    if math.isnan(y):
        return math.nan
    if y == 0:
        return math.copysign(math.inf, y)
    if math.isinf(y):
        return math.copysign(0.0, y)
    return round16_exact(1 / Fraction(y))


def affine(y: float, s: float, c: float = 0.0) -> float:
    if (s, c) == (1.0, 0.0):
        return y
    if not math.isfinite(y):
        return float(np.float16(s * y + c))
    if c == 0:
        return math.copysign(1, s * y) * abs(round16_exact(Fraction(s) * Fraction(y)))
    return round16_exact(Fraction(s) * Fraction(y) + Fraction(c))


def table(name: str, x) -> np.ndarray:
    """The NE's table ``name`` on every element of ``x`` (fp16)."""
    words = lut.get_block(name).to_words()
    xb = np.asarray(x, F16).view(np.uint16)
    uniq, inv = np.unique(xb, return_inverse=True)
    out = np.array(
        [ref_lut(words, int(b) if (b & 0x7C00) != 0x7C00 or not b & 0x3FF else QNAN)[0] for b in uniq]
    )
    return out.astype(np.uint16)[inv].reshape(xb.shape).view(F16)


def _per_row(fn, x) -> np.ndarray:
    return np.array([fn(r) for r in x], np.float64).astype(F16)[:, None]


def ref_softmax(x) -> np.ndarray:
    x = np.asarray(x, F16)
    m = _per_row(red_max, x)
    t = ref_eltwise("sub", x, m, out_scale=LOG2E)
    e = table("exp2", t)
    r = np.array([recip(red_sum(row)) for row in e], np.float64).astype(F16)[:, None]
    return ref_eltwise("mul", np.broadcast_to(r, e.shape), e)


def ref_log_softmax(x) -> np.ndarray:
    return ref_eltwise("scale", table("log2", ref_softmax(x)), out_scale=LN2)


def ref_reduce(op: str, x) -> np.ndarray:
    x = np.asarray(x, F16)
    w = x.shape[-1]
    if op == "reduce_sum":
        return np.array([red_sum(r) for r in x]).astype(F16)
    if op == "reduce_mean":
        return np.array([affine(red_sum(r), f16(1 / w)) for r in x]).astype(F16)
    if op == "reduce_max":
        return np.array([red_max(r) for r in x]).astype(F16)
    # reduce_min: -max(-x), both negations exact
    return np.array([-red_max(-r.astype(np.float64)) for r in x]).astype(F16)


def _rstd(v, eps):
    v = ref_eltwise("scale", v, offset=f16(eps))
    return table("reciprocal", table("sqrt", v))


def ref_layer_norm(x, scale=None, bias=None, eps=1e-5) -> np.ndarray:
    x = np.asarray(x, F16)
    inv = f16(1 / x.shape[-1])
    mean = np.array([affine(red_sum(r), inv) for r in x]).astype(F16)[:, None]
    d = ref_eltwise("sub", x, mean)
    q = ref_eltwise("mul", d, d)
    var = np.array([affine(red_sum(r), inv) for r in q]).astype(F16)[:, None]
    y = ref_eltwise("mul", np.broadcast_to(_rstd(var, eps), d.shape), d)
    return _affine(y, scale, bias)


def ref_rms_norm(x, scale=None, bias=None, eps=1e-5) -> np.ndarray:
    x = np.asarray(x, F16)
    inv = f16(1 / x.shape[-1])
    q = ref_eltwise("mul", x, x)
    ms = np.array([affine(red_sum(r), inv) for r in q]).astype(F16)[:, None]
    y = ref_eltwise("mul", np.broadcast_to(_rstd(ms, eps), x.shape), x)
    return _affine(y, scale, bias)


def _affine(y, scale, bias):
    if scale is not None:
        y = ref_eltwise("mul", y, np.asarray(scale, F16))
    if bias is not None:
        y = ref_eltwise("add", y, np.asarray(bias, F16))
    return y
