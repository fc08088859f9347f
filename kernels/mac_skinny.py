"""The MAC array for a product with very few rows (a decode step: ``x @ W`` with ``x`` one
to a few rows), reading the fp16 weights where KernelDMA put them: each core's KMem holds
whole output channels, ``Cin`` fp16 values each, so one channel's weights are contiguous
and the dot product vectorizes along ``k``.  No transposed or decoded copy of the weights
is made or kept, and the weights are read once per call, from KMem (which KernelDMA has
just filled, so they are in cache).

The arithmetic is :mod:`fastane.kernels.mac_f32`'s, along ``k`` instead of along the
output row: for rows whose every product is at most ``F32_PRODUCT_LIMIT`` grid units and
whose no-clamp bound holds (:func:`rows_ok`, the same tests as the general kernels'), each
product ``x * 2**16 * w`` is exact in float32, ``bits(MAGIC32 + p)`` is ``MAGIC32_BITS +
rne(p)`` (or ``floor`` with ``trunc``), and the int32 lanes sum those patterns with
wrap-around in any order; subtracting ``K * MAGIC32_BITS`` modulo ``2**32`` leaves the
serial definition's exact sum (see that module's docstring for the proof of each step).
"""

import numpy as np
from numba import njit

from .acc import SCALE
from .bounds import _safe
from .mac_f32 import MAGIC32, MAGIC32_BITS, as_f32, f32_bits, f32_row_ok

_NAN_MAG = 0x7C00  # fp16 magnitudes above this pattern are NaN


@njit(cache=True, boundscheck=False)
def kmem_abs_max(k16, lanes, sizes):
    """``max |w|`` (float64; NaN if a weight is NaN) over ``k16[lanes[i], :sizes[i]]``:
    the fp16 patterns of the weights in KMem (``k16`` a uint16 view of the 16 KMems).  The
    largest magnitude pattern is the pattern of the largest magnitude (fp16 is
    sign-magnitude, and its magnitudes order as their patterns do)."""
    m = np.int32(0)
    for i in range(lanes.size):
        w = k16[lanes[i], : sizes[i]]
        for k in range(w.size):
            m = max(m, np.int32(w[k] & 0x7FFF))
    if m > _NAN_MAG:
        return np.nan
    return np.float64(as_f32(np.uint16(m)))


@njit(cache=True)
def rows_ok(rsum, rmax, bmax, K):
    """Whether every row (``rsum``, ``rmax``: sum and max of ``|x|`` per row) takes this
    kernel: its products are small enough for float32 (:func:`f32_row_ok`) and the cheap
    bound ``sum |x| * max |w|`` proves no step clamps (:func:`fastane.kernels.bounds._safe`,
    the test of ``_plan_rows``).  False for NaN or inf anywhere."""
    for i in range(rsum.size):
        if not (f32_row_ok(rmax[i], bmax) and _safe(rsum[i] * bmax, K)):
            return False
    return True


@njit(fastmath={"contract"}, cache=True, boundscheck=False)
def skinny_q16(x, k16, per_lane, K, N, trunc, acc):
    """``acc[p, n] = sum_k round(x[p, k] * w[n, k])`` in grid units (float64), for rows
    :func:`rows_ok` admits; ``w[n, k]`` is the fp16 pattern ``k16[n // per_lane, (n %
    per_lane) * K + k]`` (the KMem layout: ``per_lane`` channels a core).  ``x``:
    float64[P, K], fp16 values.  ``trunc``: products floored instead of rounded."""
    P = x.shape[0]
    xs = np.empty((P, K), np.float32)
    for p in range(P):
        for k in range(K):
            xs[p, k] = np.float32(x[p, k]) * np.float32(SCALE)  # exact: an fp16 value * 2**16
    m = np.float32(MAGIC32)
    offset = np.int64(K) * MAGIC32_BITS
    for n in range(N):
        o = (n % per_lane) * K
        w = k16[n // per_lane, o : o + K]
        for p in range(P):
            xp = xs[p]
            s = np.int32(0)
            if trunc:
                for k in range(K):
                    s = np.int32(s + f32_bits(np.floor(xp[k] * as_f32(w[k])) + m))
            else:
                for k in range(K):
                    s = np.int32(s + f32_bits(xp[k] * as_f32(w[k]) + m))
            t = (np.int64(s) - offset) & 0xFFFFFFFF  # S modulo 2**32 ...
            acc[p, n] = np.float64(t - ((t & 0x80000000) << 1))  # ... as the int32 it is
