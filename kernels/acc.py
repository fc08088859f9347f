"""The MAC array's Q16.16 accumulator: its range, its grid, and its readout to fp16
(SPEC section 2; the arithmetic that fills it is :mod:`fastane.kernels.mac`, which
re-exports every name of this module)."""

import numpy as np
from numba import njit

from .fp16 import round_f16

ACC_MAX = 2.0**31 - 1.0  # grid units (2**-16): 32768 - 2**-16
ACC_MIN = -(2.0**31)  # -32768
SCALE = 65536.0  # 2**16: a values are scaled by it so products come out in grid units
MAGIC = 1.5 * 2.0**52  # (t + MAGIC) - MAGIC == round-half-even(t) for |t| < 2**51


@njit(inline="always")
def saturate(s, fl):
    """One saturating step of the accumulator (the sum ``s`` after an addition, grid or
    integer units) with its sticky clamp flag ``fl``: returns ``(s, fl)``, ``s`` clamped to
    ``[ACC_MIN, ACC_MAX]`` and ``fl`` +1 / -1 where it clamps at the top / bottom, else
    unchanged (a NaN sum passes unclamped)."""
    if s > ACC_MAX:
        return ACC_MAX, 1
    if s < ACC_MIN:
        return ACC_MIN, -1
    return s, fl


@njit(inline="always")
def readout_unrounded(v, fl):
    """The readout of the accumulator ``v`` (grid units) with clamp flag ``fl``, before its
    one rounding to fp16 (``round_f16`` of it is the value, ``f64_to_f16`` the pattern):
    NaN stays NaN (it wins over the flag); a flagged accumulator reads +inf (most recent
    clamp at the top) or -inf (at the bottom) whatever it holds; otherwise ``v / 2**16``
    (exact).  Branch-free (loops over it vectorize)."""
    return np.inf * fl if (fl != 0) & (v == v) else v * (1.0 / SCALE)  # fl is +1 or -1


@njit(inline="always")
def readout_value(v, fl):
    """The fp16 value (a float64) the accumulator ``v`` with flag ``fl`` reads out as:
    ``v / 2**16`` rounded to fp16 half to even, in float64 (never float32, which would
    round twice); +-inf when flagged; NaN stays the NaN it is."""
    return round_f16(readout_unrounded(v, fl))


@njit(inline="always")
def readout_counts(v, fl):
    """``(NaN output, saturated output)`` of one readout, 0 or 1 each: a flagged
    accumulator that holds NaN reads NaN and is not counted as a saturation."""
    ok = v == v
    return np.int64(not ok), np.int64((fl != 0) & ok)


@njit(cache=True)
def readout(acc, flag, out):
    """Accumulators to exact fp16 values (as float64) in ``out`` (C-contiguous, any ndim):
    ``out[t] = readout_value(acc[t], flag[t])``."""
    x = acc.reshape(acc.size)
    f = flag.reshape(flag.size)
    y = out.reshape(out.size)
    for t in range(x.size):
        y[t] = readout_value(x[t], f[t])
