"""A slow, obviously correct reference of the LUT and the NE pipeline (Fractions).

Written from the semantics in docs/lut.md, independently of the Numba kernels: exact
rational arithmetic and a rounding routine of its own.  The tests import it;
tests/test_lut_reference.py checks the reference itself.
"""

from fractions import Fraction
import math

import numpy as np

QNAN = 0x7E00


# ------------------------------------------------------------------------ fp16 helpers
def bits_to_float(b: int) -> float:
    return float(np.array(b, dtype=np.uint16).view(np.float16))


def float_to_bits(x: float) -> int:
    """Bits of a float that is exactly an fp16 value (or inf)."""
    return int(np.array(x, dtype=np.float16).view(np.uint16))


def round_fraction(q: Fraction) -> int:
    """fp16 pattern of the rational ``q``, round half to even; 0 gives +0."""
    if q == 0:
        return 0
    sign = 0x8000 if q < 0 else 0
    a = abs(q)
    if a >= 65520:
        return sign | 0x7C00
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -14)
    ulp = Fraction(2) ** (e - 10)
    n = a / ulp
    r = n.numerator // n.denominator
    rem = n - r
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and r % 2 == 1):
        r += 1
    return sign | float_to_bits(float(r * ulp))


def value(b: int):
    """Fraction of a finite fp16 pattern, or the float inf/nan."""
    f = bits_to_float(b)
    return Fraction(f) if math.isfinite(f) else f


# ------------------------------------------------------------------------ LUT reference
def ref_lut(words, xb: int):
    """Evaluate a coefficient block (43 u16 words) at the fp16 pattern ``xb``.

    Returns ``(result_bits, event)`` with event -1 (left of the table), +1 (right) or 0.
    """
    w = [int(v) for v in words]
    lo, hi = bits_to_float(w[0]), bits_to_float(w[1])
    knots = [Fraction(bits_to_float(k)) for k in w[4:37]]
    R = w[41] - 0x10000 if w[41] >= 0x8000 else w[41]
    mode = w[42] & 0xF
    odd = (w[42] & 0xF0) == 0x60
    x = bits_to_float(xb)
    if math.isnan(x):
        return QNAN, 0
    negative = odd and bool(xb & 0x8000)
    if odd:
        x = abs(x)

    def table(u: Fraction) -> Fraction:
        i = min(max(math.floor(u), 0), 31)
        alpha = u - i
        return knots[i] + alpha * (knots[i + 1] - knots[i])

    def line(slope_word, icpt_word, xv):
        s, c = bits_to_float(slope_word), bits_to_float(icpt_word)
        if s == 0:
            return float_to_bits(c)
        if math.isinf(xv):
            return float_to_bits(math.copysign(math.inf, s * xv))
        return round_fraction(Fraction(s) * Fraction(xv) + Fraction(c))

    event = 0
    if x < lo:
        res, event = w[2], -1
    elif x > hi:
        res, event = w[3], 1
    elif mode in (0, 1, 2):
        offset = 16 * mode
        if x == 0:
            u = Fraction(offset)
        elif R >= 64 or math.isinf(x):
            u = math.inf if x > 0 else -math.inf
        else:
            u = Fraction(x) * Fraction(2) ** R + offset
        if u < 0:
            res, event = line(w[37], w[38], x), -1
        elif u > 32:
            res, event = line(w[39], w[40], x), 1
        else:
            res = round_fraction(table(Fraction(u)))
    elif mode == 10:  # exp2
        if math.isinf(x):
            res = 0x7C00 if x > 0 else 0
        else:
            q = Fraction(x)
            n = math.floor(q)
            v = table((q - n) * Fraction(2) ** R) * Fraction(2) ** n
            res = round_fraction(v)
    elif mode in (3, 4):
        if math.isinf(x):
            res = float_to_bits(x) if mode == 4 else 0
        else:
            q = Fraction(x)
            n = math.floor(q)
            f = q - n
            res = round_fraction((n if mode == 4 else f) + table(f * Fraction(2) ** R))
    else:  # mantissa modes
        limits = {5: (0, 0x7C00), 6: (0x7C00, 0), 7: (0x7C00, 0), 9: (0xFC00, 0x7C00)}
        if x < 0:
            res = QNAN
        elif x == 0:
            res = limits[mode][0]
        elif math.isinf(x):
            res = limits[mode][1]
        else:
            q = Fraction(x)
            e = 0
            while q >= 1:
                q /= 2
                e += 1
            while q < Fraction(1, 2):
                q *= 2
                e -= 1
            # x = q * 2**e, q in [1/2, 1)
            if mode in (7, 9):
                t = table((q - Fraction(1, 2)) * Fraction(2) ** R)
                res = round_fraction(t * Fraction(2) ** -e if mode == 7 else t + e)
            else:
                if e % 2:
                    q, k = 2 * q, (e - 1) // 2
                else:
                    k = e // 2
                t = table(q * Fraction(2) ** R)
                res = round_fraction(t * Fraction(2) ** (k if mode == 5 else -k))
    if negative and res != QNAN:
        res ^= 0x8000
    return res, event


# ----------------------------------------------------------------------- NE reference
def round_float(x: float) -> float:
    """fp16 rounding of a float (IEEE semantics for inf/nan), via Fractions."""
    if math.isnan(x) or math.isinf(x):
        return x
    return bits_to_float(round_fraction(Fraction(x)))


def ref_ne(y: float, bias, scale: float, nonlinear: int, words):
    """One element through bias -> PostScale -> nonlinearity; returns fp16 bits."""
    t = y
    # an exact zero result takes IEEE 754's sign (x * -0, -0 + -0), which the float
    # operation gives exactly; a rational 0 has none
    if bias is not None:
        s = t + bias  # IEEE: inf - inf = nan; finite sums handled exactly below
        if not (math.isfinite(t) and math.isfinite(bias)):
            t = round_float(s)
        else:
            q = Fraction(t) + Fraction(bias)
            t = s if q == 0 else bits_to_float(round_fraction(q))
    if scale != 1.0:
        if math.isfinite(t) and math.isfinite(scale):
            q = Fraction(t) * Fraction(scale)
            t = t * scale if q == 0 else bits_to_float(round_fraction(q))
        else:
            t = t * scale
    if nonlinear == 2:
        return ref_lut(words, float_to_bits(t) if not math.isnan(t) else QNAN)[0]
    if math.isnan(t):
        return QNAN
    if nonlinear == 1:
        return float_to_bits(t) if t > 0 else 0
    return float_to_bits(t)
