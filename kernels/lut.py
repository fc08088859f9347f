"""The NE's 33-knot piecewise-linear lookup table (NonlinearMode 2), as Numba kernels.

One table evaluation, for an fp16 input ``x`` (a float64 holding an exact fp16 value):

1. NaN in, NaN out (the canonical quiet NaN ``0x7e00``).
2. Odd symmetry (mode word bits 0x60): evaluate at ``|x|``, negate the result for a
   negative ``x`` (``-0`` included).
3. Range check: ``x < lo`` gives the fp16 value ``lo_value``, ``x > hi`` gives
   ``hi_value`` (strict comparisons; a bound itself is evaluated normally).
4. The mode (low nibble of the mode word) maps ``x`` to table coordinates ``u``:

   ========  ===============================================================
   0, 1, 2   ``u = 2**R * x + {0, 16, 32}``; left of the table (``u < 0``) the
             result is ``slope_left * x + icpt_left``, right of it (``u > 32``)
             ``slope_right * x + icpt_right`` (lines through ``x = 0``, not
             through the table ends).
   0xa       exponent (exp2): ``n = floor(x)``, ``u = 2**R * (x - n)``, result
             ``table(u) * 2**n``.
   3, 4      fraction / integer part: ``n = floor(x)``, ``f = x - n``,
             ``u = 2**R * f``; result ``f + table(u)`` (3) or ``n + table(u)`` (4).
   7, 9      mantissa: ``x = m * 2**e``, ``m`` in [0.5, 1), ``u = 2**R * (m - 1/2)``;
             result ``table(u) * 2**-e`` (7, reciprocal) or ``table(u) + e`` (9, log2).
   5, 6      even-exponent mantissa: ``x = m * 4**k``, ``m`` in [0.5, 2),
             ``u = 2**R * m``; result ``table(u) * 2**k`` (5, sqrt) or
             ``table(u) * 2**-k`` (6, rsqrt).
   ========  ===============================================================

   In the mantissa modes a zero input has exponent -inf and an infinite input +inf,
   which gives the limits (1/0 = inf, sqrt(0) = 0, log2(0) = -inf, 1/inf = 0, ...).
5. ``table(u)``: ``i = floor(u)`` (``u = 32`` uses segment 31), ``alpha = u - i``,
   ``T[i] + alpha * (T[i+1] - T[i])``.

**Precision (a decision):** the result is the *exact* value of that expression (knots,
slopes and intercepts are fp16; ``u``, ``alpha``, the products and the sums are taken
exactly) rounded **once** to fp16, round-half-to-even.  The kernels get there in float64
with error-free transformations (two-sum, Dekker's two-product) and fall back to an exact
sign test of a short float expansion only when the float64 estimate lies within a few
float64 ulps of an fp16 rounding boundary.  See docs/lut.md for why.

Range events: an input left of the table (``x < lo``, or ``u < 0`` in modes 0-2) counts
as an underflow, right of it (``x > hi`` or ``u > 32``) as an overflow.  NaN, and zeros
and infinities in the mantissa modes, are not counted.

Parameters are passed packed, so that one signature serves every caller:

* ``lutf`` float64[41]: ``[0:33]`` the knots (fp16 values), then ``lo, hi, lo_value,
  hi_value, slope_left, icpt_left, slope_right, icpt_right`` (all fp16 values);
* ``luti`` int64[3]: ``R``, the mode (low nibble of the mode word), odd symmetry (0/1).
"""

import math

import numpy as np
from numba import njit

from .fp16 import F16_QNAN, f16_to_f64, f64_to_f16

# Index of the scalars in the packed float64 parameter vector.
KNOTS = 33
P_LO, P_HI, P_LO_VALUE, P_HI_VALUE = 33, 34, 35, 36
P_SLOPE_LEFT, P_ICPT_LEFT, P_SLOPE_RIGHT, P_ICPT_RIGHT = 37, 38, 39, 40
NPARAMS = 41

# Modes (low nibble of the mode word).
MODE_TABLE, MODE_OFFSET16, MODE_OFFSET32 = 0, 1, 2
MODE_FRACTION, MODE_INTEGER = 3, 4
MODE_SQRT, MODE_RSQRT, MODE_RECIPROCAL = 5, 6, 7
MODE_LOG2, MODE_EXP2 = 9, 10
KNOWN_MODES = (0, 1, 2, 3, 4, 5, 6, 7, 9, 10)

# Above this R every nonzero fp16 input lies outside the 32-segment table.
R_BYPASS = 64

QNAN = F16_QNAN
_SPLIT = 134217729.0  # 2**27 + 1, Veltkamp's splitter
_INF = math.inf


# --------------------------------------------------------------------------- exact sums
@njit(cache=True, inline="always")
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(cache=True, inline="always")
def _two_prod(a, b):
    """``a * b == p + e`` exactly (Dekker; no overflow/underflow in our ranges)."""
    p = a * b
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


@njit(cache=True)
def _exact_sign(t0, t1, t2, t3, t4):
    """Sign (-1, 0, 1) of the exact sum of five finite doubles (distillation)."""
    x = np.empty(5)
    x[0] = t0
    x[1] = t1
    x[2] = t2
    x[3] = t3
    x[4] = t4
    for _ in range(40):
        for i in range(4):
            s, e = _two_sum(x[i], x[i + 1])
            x[i + 1] = s
            x[i] = e
        rest = abs(x[0]) + abs(x[1]) + abs(x[2]) + abs(x[3])
        if rest == 0.0:
            break
        if rest * (1.0 + 2.0**-40) < abs(x[4]):
            break
    top = x[4]
    if top == 0.0:  # everything cancelled (rest == 0 too, or the loop ran out)
        for i in range(3, -1, -1):
            if x[i] != 0.0:
                return 1 if x[i] > 0.0 else -1
        return 0
    return 1 if top > 0.0 else -1


@njit(cache=True, inline="always")
def _mag_value(h):
    """Value of a non-negative fp16 magnitude pattern; 0x7c00 stands for 2**16."""
    if h >= 0x7C00:
        return 65536.0
    return f16_to_f64(h)


@njit(cache=True)
def _round_exact(t0, t1, t2, t3, sgn):
    """fp16 pattern of the exact sum (sign ``sgn`` != 0 already known), by exact tests."""
    if sgn < 0:
        t0, t1, t2, t3 = -t0, -t1, -t2, -t3
    a = abs(((t0 + t1) + t2) + t3)
    h = f64_to_f16(a) & 0x7FFF
    for _ in range(8):
        v = _mag_value(h)
        c = _exact_sign(t0, t1, t2, t3, -v)
        if c == 0:
            break
        if c > 0:
            if h >= 0x7C00:
                break
            m = 0.5 * (v + _mag_value(h + 1))
            cm = _exact_sign(t0, t1, t2, t3, -m)
            if cm > 0:
                h += 1
                continue
            if cm == 0 and (h & 1):
                h += 1
            break
        else:
            if h == 0:
                break
            m = 0.5 * (v + _mag_value(h - 1))
            cm = _exact_sign(t0, t1, t2, t3, -m)
            if cm < 0:
                h -= 1
                continue
            if cm == 0 and (h & 1):
                h -= 1
            break
    if h > 0x7C00:
        h = 0x7C00
    return (h | 0x8000) if sgn < 0 else h


@njit(cache=True)
def _round_sum_slow(t0, t1, t2, t3):
    """:func:`round_sum_f16` when the float64 estimate is close to an fp16 tie."""
    s = ((t0 + t1) + t2) + t3
    m = max(max(abs(t0), abs(t1)), max(abs(t2), abs(t3)))
    if m == 0.0:
        return np.int64(0)
    tol = m * 2.0**-48  # bounds |s - exact| for three float64 additions
    a = abs(s)
    h = f64_to_f16(a) & 0x7FFF
    v = _mag_value(h)
    if s != 0.0:
        if a == v:
            lo_gap = v - _mag_value(h - 1) if h > 0 else 2.0**-24
            if 4.0 * tol < lo_gap:
                return np.int64(f64_to_f16(s))
        else:
            if v > a:
                other = _mag_value(h - 1)
            else:
                other = _mag_value(h + 1)
            mid = 0.5 * (v + other)
            gap = abs(v - other)
            if 4.0 * tol < gap and abs(a - mid) > tol:
                return np.int64(f64_to_f16(s))
    sgn = _exact_sign(t0, t1, t2, t3, 0.0)
    if sgn == 0:
        return np.int64(0)
    return np.int64(_round_exact(t0, t1, t2, t3, sgn))


_LOW42 = (1 << 42) - 1
_HALF42 = 1 << 41
_MIN_NORMAL16 = 2.0**-14


@njit(cache=True, inline="always")
def round_sum_f16(t0, t1, t2, t3):
    """fp16 pattern (RNE) of the exact sum ``t0 + t1 + t2 + t3`` of finite doubles.

    An exact zero sum gives +0, a tiny negative one -0.  Magnitudes must stay below
    ~2**40 (they do: knots are fp16, scale factors are applied to the terms first).
    Fast path: the float64 sum ``s`` is within ``32 * max|t| / |s|`` float64 ulps of the
    exact sum; if the fp16 tie nearest to ``s`` is farther than that, ``s`` rounds like
    the exact sum.  Otherwise :func:`_round_sum_slow` decides exactly.
    """
    s = ((t0 + t1) + t2) + t3
    a = abs(s)
    m = max(max(abs(t0), abs(t1)), max(abs(t2), abs(t3)))
    if a >= _MIN_NORMAL16:
        if a < 1e300:
            d = abs((np.float64(a).view(np.int64) & _LOW42) - _HALF42)
            if (d - 4.0) * a > 32.0 * m:
                return np.int64(f64_to_f16(s))
    elif a > 0.0:
        v = a * 2.0**24  # exact; fp16 subnormals are the integers of this grid
        f = v - math.floor(v)
        if abs(f - 0.5) > m * 2.0**-23 + 2.0**-30:
            return np.int64(f64_to_f16(s))
    elif m == 0.0:
        return np.int64(0)
    return _round_sum_slow(t0, t1, t2, t3)


@njit(cache=True, inline="always")
def _pow2(n):
    """2.0**n for -1022 <= n <= 1023, from the bit pattern."""
    return np.int64((n + 1023) << 52).view(np.float64)


# --------------------------------------------------------------------- table evaluation
@njit(cache=True, inline="always")
def _segment(knots, u):
    """(T[i], alpha, T[i+1] - T[i]) for table coordinate ``u`` (segment clamped to 0..31)."""
    fu = math.floor(u)
    i = int(min(max(fu, 0.0), 31.0))
    alpha = u - i
    t0 = knots[i]
    return t0, alpha, knots[i + 1] - t0


@njit(cache=True, inline="always")
def _table_terms(knots, u):
    """Exact terms (a, b, c) with a + b + c = T[i] + alpha * (T[i+1] - T[i])."""
    t0, alpha, d = _segment(knots, u)
    p, pe = _two_prod(alpha, d)
    return t0, p, pe


@njit(cache=True)
def _line(slope, icpt, x):
    """fp16 pattern of ``slope * x + icpt``; a zero slope contributes 0 (also at inf)."""
    if slope == 0.0:
        return f64_to_f16(icpt)
    p = slope * x
    if not math.isfinite(p) or not math.isfinite(icpt):
        return f64_to_f16(p + icpt)
    return round_sum_f16(p, icpt, 0.0, 0.0)  # slope * x is exact (22 bits)


@njit(cache=True)
def _scaled(t0, t1, t2, n):
    """fp16 pattern of (t0 + t1 + t2) * 2**n, exact then rounded once."""
    if n > 60:
        s = t0 + t1 + t2
        if s == 0.0:
            return np.int64(0)
        return np.int64(0x7C00) if s > 0 else np.int64(0xFC00)
    if n < -80:
        s = t0 + t1 + t2
        return np.int64(0x8000) if s < 0 else np.int64(0)
    f = _pow2(n)
    return round_sum_f16(t0 * f, t1 * f, t2 * f, 0.0)


@njit(cache=True, inline="always")
def lut_eval(x, lutf, luti):
    """Evaluate one table at the fp16 value ``x`` (a float64).

    Returns ``(bits, event)``: the fp16 result pattern and -1 (input left of the table),
    +1 (right of it) or 0.
    """
    if math.isnan(x):
        return np.int64(QNAN), 0
    R = luti[0]
    mode = luti[1]
    neg = False
    if luti[2] != 0:
        if x < 0.0 or (x == 0.0 and math.copysign(1.0, x) < 0.0):
            neg = True
            x = -x
    event = 0
    if x < lutf[P_LO]:
        h = f64_to_f16(lutf[P_LO_VALUE])
        event = -1
    elif x > lutf[P_HI]:
        h = f64_to_f16(lutf[P_HI_VALUE])
        event = 1
    elif mode <= MODE_OFFSET32:
        off = 16.0 * mode
        if x == 0.0:
            u = off
        elif R >= R_BYPASS:
            u = -_INF if x < 0.0 else _INF
        else:
            u = x * _pow2(R) + off
        if u < 0.0:
            h = _line(lutf[P_SLOPE_LEFT], lutf[P_ICPT_LEFT], x)
            event = -1
        elif u > 32.0:
            h = _line(lutf[P_SLOPE_RIGHT], lutf[P_ICPT_RIGHT], x)
            event = 1
        else:
            a, b, c = _table_terms(lutf, u)
            h = round_sum_f16(a, b, c, 0.0)
    elif mode == MODE_EXP2:
        if math.isinf(x):
            h = np.int64(0x7C00) if x > 0 else np.int64(0)
        else:
            n = math.floor(x)
            a, b, c = _table_terms(lutf, (x - n) * _pow2(min(R, 40)))
            h = _scaled(a, b, c, int(n))
    elif mode == MODE_FRACTION or mode == MODE_INTEGER:
        if math.isinf(x):
            h = f64_to_f16(x) if mode == MODE_INTEGER else np.int64(0)
        else:
            n = math.floor(x)
            f = x - n
            a, b, c = _table_terms(lutf, f * _pow2(min(R, 40)))
            h = round_sum_f16(n if mode == MODE_INTEGER else f, a, b, c)
    else:  # mantissa modes 5, 6, 7, 9
        if x < 0.0:
            h = np.int64(QNAN)  # only reachable with a negative lower bound
        elif x == 0.0 or math.isinf(x):
            big = math.isinf(x)
            if mode == MODE_LOG2:
                h = np.int64(0x7C00) if big else np.int64(0xFC00)
            elif mode == MODE_SQRT:
                h = np.int64(0x7C00) if big else np.int64(0)
            else:  # reciprocal, rsqrt
                h = np.int64(0) if big else np.int64(0x7C00)
        else:
            bits = np.float64(x).view(np.int64)  # x = m * 2**e, m in [0.5, 1)
            e = ((bits >> 52) & 0x7FF) - 1022
            m = np.int64((bits & 0xFFFFFFFFFFFFF) | (1022 << 52)).view(np.float64)
            if mode == MODE_RECIPROCAL or mode == MODE_LOG2:
                a, b, c = _table_terms(lutf, (m - 0.5) * _pow2(min(R, 40)))
                if mode == MODE_RECIPROCAL:
                    h = _scaled(a, b, c, -e)
                else:
                    h = round_sum_f16(float(e), a, b, c)
            else:
                if e % 2 == 0:
                    k = e // 2
                else:
                    m = 2.0 * m
                    k = (e - 1) // 2
                a, b, c = _table_terms(lutf, m * _pow2(min(R, 40)))
                h = _scaled(a, b, c, k if mode == MODE_SQRT else -k)
    if neg and h != QNAN:
        h = h ^ 0x8000
    return np.int64(h), event


@njit(inline="always")
def count_event(ev, under, over):
    """``(under, over)`` counted on with one evaluation's event ``ev`` (:func:`lut_eval`:
    negative below the table's range, positive above it, 0 inside)."""
    if ev < 0:
        return under + 1, over
    if ev > 0:
        return under, over + 1
    return under, over


@njit(cache=True)
def lut_apply(x, out, lutf, luti, counts):
    """Evaluate a table over a flat float64 array into uint16 fp16 patterns ``out``.

    ``counts[0] += underflows``, ``counts[1] += overflows``.
    """
    under = 0
    over = 0
    for j in range(x.size):
        h, ev = lut_eval(x[j], lutf, luti)
        out[j] = h
        under, over = count_event(ev, under, over)
    counts[0] += under
    counts[1] += over
