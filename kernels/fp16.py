"""IEEE binary16 <-> float64 conversions for Numba (which has no float16 on the CPU).

Every fp16 value is exactly representable as a float64, so ``f16_to_f64`` is exact and
``f64_to_f16`` rounds once (to nearest, ties to even), handling subnormals, overflow
to infinity, signed zero and NaN.  float32 inputs convert to float64 first, which is
exact, so one rounding suffices for them too.  Verified on all 65,536 patterns and on
random and tie values in tests/test_fp16.py.
"""
import math

import numpy as np
from numba import njit

F16_MAX = 65504.0
# Halfway between F16_MAX and 2**16: at or above it, round-to-nearest gives infinity.
F16_OVERFLOW = 65520.0
F16_QNAN = 0x7E00


@njit(cache=True, inline="always")
def f16_to_f64(h):
    """Exact value of the fp16 bit pattern ``h`` (an integer 0..0xffff)."""
    h = np.int64(h)
    sign = -1.0 if (h & 0x8000) else 1.0
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0x1F:
        if m:
            return np.nan
        return sign * np.inf
    if e == 0:
        return sign * m * 2.0**-24
    return sign * (1024 + m) * 2.0 ** (e - 25)


@njit(cache=True, inline="always")
def f64_to_f16(x):
    """fp16 bit pattern nearest to ``x`` (round half to even), as an int64."""
    if x != x:
        return np.int64(F16_QNAN)
    sign = np.int64(0x8000) if (x < 0.0 or (x == 0.0 and math.copysign(1.0, x) < 0.0)) else np.int64(0)
    a = abs(x)
    if a >= F16_OVERFLOW:
        return sign | 0x7C00
    if a < 2.0**-14:
        # Subnormal range: the grid is 2**-24.  A result of 1024 is the smallest
        # normal (0x0400), so the carry needs no special case.
        return sign | np.int64(np.rint(a * 2.0**24))
    m, e = math.frexp(a)  # a = m * 2**e, 0.5 <= m < 1
    q = np.int64(np.rint(m * 2048.0))  # 11 significant bits, exact scaling
    exp = e + 14  # biased exponent of 2**(e-1)
    if q == 2048:
        q = 1024
        exp += 1
    return sign | (np.int64(exp) << 10) | (q - 1024)


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
    """``x`` rounded to the nearest fp16 value, returned as a float64."""
    return f16_to_f64(f64_to_f16(x))
