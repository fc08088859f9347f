"""IEEE binary16 <-> float64 conversions for Numba (which has no float16 on the CPU).

Every fp16 value is exactly representable as a float64, so ``f16_to_f64`` is exact and
``f64_to_f16`` rounds once (to nearest, ties to even), handling subnormals, overflow
to infinity, signed zero and NaN.  float32 inputs convert to float64 first, which is
exact, so one rounding suffices for them too.

The conversions work on the float64 bit pattern (``x.view(np.int64)``), no ``frexp``:

* normal fp16 range (``|x| >= 2**-14``): the float64 pattern without its sign is
  ``exponent << 52 | fraction``; adding ``2**41 - 1`` plus the lowest kept bit and
  dropping the 42 low bits rounds the fraction to 10 bits, ties to even, and a carry
  out of the fraction moves into the exponent, as it must.  The float64 exponent bias
  1023 becomes fp16's 15 by subtracting ``1008 << 10``; anything at or above
  ``0x7c00`` after rounding (``|x| >= 65520``) is infinity.
* subnormal fp16 range (``|x| < 2**-14``): the grid is ``2**-24``; ``|x| * 2**24`` is
  exact and ``rint`` rounds it half to even.  A result of 1024 is the smallest normal
  (``0x0400``), so the carry needs no special case.

Verified on all 65,536 patterns both ways, on millions of random float64 and float32
values, and on every tie, in tests/test_fp16.py.
"""
import numpy as np
from numba import njit

F16_MAX = 65504.0
# Halfway between F16_MAX and 2**16: at or above it, round-to-nearest gives infinity.
F16_OVERFLOW = 65520.0
F16_QNAN = 0x7E00

_ABS = 0x7FFFFFFFFFFFFFFF
_SIGN = -0x8000000000000000  # bit 63 of an int64
_EXP_INF = 0x7FF0000000000000  # float64 +inf pattern; larger patterns (no sign) are NaN
_MIN_NORMAL16 = 0x3F10000000000000  # float64 pattern of 2**-14
_HALF_MINUS_1 = (1 << 41) - 1  # half of the 42 dropped fraction bits, minus one
_LOW42 = (1 << 42) - 1
_BIAS_SHIFT = 1008 << 10  # (1023 - 15) << 10
_INF64 = 0x7FF0000000000000
_TWO16 = 0x40F0000000000000  # float64 pattern of 2**16: rounded magnitudes >= it overflow
_SUB_MAGIC = 1.5 * 2.0**28  # (t + M) - M rounds t to a multiple of 2**-24 (|t| < 2**27)


@njit(cache=True, inline="always")
def f16_to_f64(h):
    """Exact value of the fp16 bit pattern ``h`` (an integer 0..0xffff)."""
    h = np.int64(h)
    sign = (h & 0x8000) << 48
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0:  # zero and subnormals: m * 2**-24, exact
        v = np.float64(m) * 2.0**-24
        return -v if sign else v
    if e == 0x1F:  # inf (m == 0) or NaN (fraction kept in the top bits)
        return np.int64(sign | _INF64 | (m << 42)).view(np.float64)
    return np.int64(sign | ((e + 1008) << 52) | (m << 42)).view(np.float64)


@njit(cache=True, inline="always")
def f64_to_f16(x):
    """fp16 bit pattern nearest to ``x`` (round half to even), as an int64."""
    u = np.float64(x).view(np.int64)
    sign = (u >> 48) & 0x8000
    au = u & _ABS
    if au > _EXP_INF:
        return np.int64(F16_QNAN)
    if au >= _MIN_NORMAL16:
        h = ((au + _HALF_MINUS_1 + ((au >> 42) & 1)) >> 42) - _BIAS_SHIFT
        if h > 0x7C00:
            h = np.int64(0x7C00)
        return sign | h
    return sign | np.int64(np.rint(np.int64(au).view(np.float64) * 2.0**24))


@njit(cache=True)
def f16_bits_to_f64_array(bits, out):
    """Decode a flat uint16 array of fp16 patterns into float64 ``out``."""
    for i in range(bits.size):
        out[i] = f16_to_f64(bits[i])


@njit(cache=True)
def f64_to_f16_bits_array(x, out):
    """Round a flat float64 array to fp16 patterns in uint16 ``out``."""
    for i in range(x.size):
        out[i] = f64_to_f16(x[i])


@njit(cache=True, inline="always")
def round_f16(x):
    """``x`` rounded to the nearest fp16 value (half to even), returned as a float64.

    The same rounding as ``f16_to_f64(f64_to_f16(x))`` without leaving float64: in the
    normal range the 42 low fraction bits are rounded away in place; below ``2**-14``
    the magic-number trick rounds to the ``2**-24`` grid.  NaN stays NaN.
    """
    u = np.float64(x).view(np.int64)
    au = u & _ABS
    if au > _EXP_INF:
        return x
    if au >= _MIN_NORMAL16:
        r = (au + _HALF_MINUS_1 + ((au >> 42) & 1)) & ~_LOW42
        if r >= _TWO16:
            r = np.int64(_INF64)
        return np.int64((u & _SIGN) | r).view(np.float64)
    v = (np.int64(au).view(np.float64) + _SUB_MAGIC) - _SUB_MAGIC
    return np.int64((u & _SIGN) | np.float64(v).view(np.int64)).view(np.float64)


@njit(cache=True)
def round_f16_array(x, out):
    """``out[i] = round_f16(x[i])`` over flat float64 arrays."""
    for i in range(x.size):
        out[i] = round_f16(x[i])
