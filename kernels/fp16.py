"""The fp16 codec of the kernels: IEEE binary16 <-> float64 for Numba (which has no
float16 on the CPU).  Every kernel converts through these functions, and only these.

Scalar (nopython; compiled once each and inlined by LLVM where they are called, not by
Numba's IR-level ``inline="always"``, whose copy at every call site cost seconds of a cold
compile: about half of ``scripts/compile_profile.py``'s total, for the same machine code;
``f64_to_f16_inline`` and ``round_f16_inline`` are IR-inlined copies for the NE)::

    f16_to_f64(h)   exact float64 value of the fp16 pattern h (an integer 0..0xffff)
    f64_to_f16(x)   the fp16 pattern nearest to x (half to even), an int64; NaN -> 0x7e00
    round_f16(x)    x rounded to fp16 (half to even), kept as a float64: the value of
                    f64_to_f16(x) (NaN stays the NaN it is)

Arrays: :func:`f16_bits_to_f64_array`, :func:`f64_to_f16_bits_array`,
:func:`round_f16_array` (flat arrays, ``out`` given).

Every fp16 value is exactly representable as a float64, so decoding is exact and
encoding rounds once, handling subnormals, overflow to infinity, signed zero and NaN.
float32 inputs convert to float64 first, which is exact, so one rounding suffices for
them too.  They work on the float64 bit pattern (``x.view(np.int64)``), no ``frexp``:

* decode (**branch-free**: every case computed, one selected, so that loops over it
  vectorize even beside other work, e.g. TileDMA's gather and its running maximum):
  normal numbers are the 15 magnitude bits shifted into place plus the exponent rebias
  (15 -> 1023, ``1008 << 52``); inf/NaN (exponent 31) get the rebias twice
  (31 + 2 x 1008 = 2047, the payload kept in the top fraction bits); subnormals:
  ``2**-14 x (1 + m/1024) - 2**-14 = m x 2**-24`` (exact);
* encode and round, normal fp16 range (``|x| >= 2**-14``): the float64 pattern without
  its sign is ``exponent << 52 | fraction``; adding ``2**41 - 1`` plus the lowest kept bit
  and dropping the 42 low bits rounds the fraction to 10 bits, ties
  to even, and a carry out of the fraction moves into the exponent, as it must.  The
  encoder rebiases by subtracting ``1008 << 10``; anything at or above ``0x7c00`` after
  rounding (``|x| >= 65520``) is infinity; ``round_f16`` clears the 42 bits in place;
* subnormal fp16 range (``|x| < 2**-14``): the grid is ``2**-24``; ``|x| * 2**24`` is
  exact and ``rint`` rounds it half to even (a result of 1024 is the smallest normal,
  ``0x0400``, so the carry needs no special case); ``round_f16`` rounds on the grid in
  place, ``(t + 1.5*2**28) - 1.5*2**28``.

The encoder and ``round_f16`` branch on the range: in the scalar chains of the NE and
the LUT the common normal case then takes the fewest dependent steps, and inside simple
loops (the fused readout, ``mac.readout``) LLVM still turns the branches into selects
and vectorizes (measured against the branch-free forms: same or faster there, slower in
the scalar chains).

Verified on all 65,536 patterns both ways (NaN payloads included), on millions of random
float64 and float32 values, and on every tie, in tests/kernels/test_fp16.py.
"""

import numpy as np
from numba import njit

F16_MAX = 65504.0
# Halfway between F16_MAX and 2**16: at or above it, round-to-nearest gives infinity.
F16_OVERFLOW = 65520.0
F16_QNAN = 0x7E00
F16_INF = 0x7C00  # +inf; -inf is 0xfc00

_ABS = 0x7FFFFFFFFFFFFFFF
_SIGN = -0x8000000000000000  # bit 63 of an int64
_EXP_INF = 0x7FF0000000000000  # float64 +inf pattern; larger patterns (no sign) are NaN
_MIN_NORMAL16 = 0x3F10000000000000  # float64 pattern of 2**-14
_HALF_MINUS_1 = (1 << 41) - 1  # half of the 42 dropped fraction bits, minus one
_LOW42 = (1 << 42) - 1
_BIAS_SHIFT = 1008 << 10  # (1023 - 15) << 10
_REBIAS = 1008 << 52  # fp16 exponent bias 15 -> float64's 1023, in place
_SUB_BASE = 1009 << 52  # float64 pattern of 2**-14
_TWO_M14 = 2.0**-14
_TWO16 = 0x40F0000000000000  # float64 pattern of 2**16: rounded magnitudes >= it overflow
_SUB_MAGIC = 1.5 * 2.0**28  # (t + M) - M rounds t to a multiple of 2**-24 (|t| < 2**27)


def _f16_to_f64(h):
    """Exact float64 value of the fp16 bit pattern ``h`` (an integer 0..0xffff)."""
    h = np.int64(h)
    a = h & 0x7FFF
    sign = (h & 0x8000) << 48
    bits = (a << 42) + np.int64(_REBIAS) + (np.int64(a >= 0x7C00) * np.int64(_REBIAS))
    sub = np.float64(np.int64(np.int64(_SUB_BASE) | (a << 42)).view(np.float64) - _TWO_M14).view(np.int64)
    return np.int64((sub if a < 0x400 else bits) | sign).view(np.float64)


def _f64_to_f16(x):
    """fp16 bit pattern nearest to ``x`` (round half to even), as an int64; NaN gives the
    quiet NaN 0x7e00."""
    u = np.float64(x).view(np.int64)
    sign = (u >> 48) & 0x8000
    au = u & _ABS
    if au > _EXP_INF:
        return np.int64(F16_QNAN)
    if au >= _MIN_NORMAL16:
        h = ((au + _HALF_MINUS_1 + ((au >> 42) & 1)) >> 42) - _BIAS_SHIFT
        if h > F16_INF:
            h = np.int64(F16_INF)
        return sign | h
    return sign | np.int64(np.rint(np.int64(au).view(np.float64) * 2.0**24))


def _round_f16(x):
    """``x`` rounded to the nearest fp16 value (half to even), returned as a float64.

    The value of ``f64_to_f16(x)`` without leaving float64: in the normal range the 42 low
    fraction bits are rounded away in place; below ``2**-14`` the magic-number trick rounds
    to the ``2**-24`` grid.  NaN stays the NaN ``x`` is.
    """
    u = np.float64(x).view(np.int64)
    au = u & _ABS
    if au > _EXP_INF:
        return x
    if au >= _MIN_NORMAL16:
        r = (au + _HALF_MINUS_1 + ((au >> 42) & 1)) & ~_LOW42
        if r >= _TWO16:
            r = np.int64(_EXP_INF)
        return np.int64((u & _SIGN) | r).view(np.float64)
    v = (np.int64(au).view(np.float64) + _SUB_MAGIC) - _SUB_MAGIC
    return np.int64((u & _SIGN) | np.float64(v).view(np.int64)).view(np.float64)


# Each a plain call (compiled once; LLVM inlines it), and the encoder and the rounding also
# as an IR-inlined copy of the same definition for the NE's per-element helpers
# (fastane.kernels.ne): chains of plain calls there (helper -> codec) ran 10-40% slower.
f16_to_f64 = njit(cache=True)(_f16_to_f64)
f64_to_f16, f64_to_f16_inline = njit(cache=True)(_f64_to_f16), njit(inline="always")(_f64_to_f16)
round_f16, round_f16_inline = njit(cache=True)(_round_f16), njit(inline="always")(_round_f16)


@njit(cache=True)
def f16_bits_to_f64_array(bits, out):
    """Decode a flat array of fp16 patterns (uint16) into float64 ``out``."""
    for i in range(bits.size):
        out[i] = f16_to_f64(bits[i])


@njit(cache=True)
def f64_to_f16_bits_array(x, out):
    """Round a flat float64 array to fp16 patterns in uint16 ``out``."""
    for i in range(x.size):
        out[i] = f64_to_f16(x[i])


@njit(cache=True)
def round_f16_array(x, out):
    """``out[i] = round_f16(x[i])`` over flat float64 arrays."""
    for i in range(x.size):
        out[i] = round_f16(x[i])
