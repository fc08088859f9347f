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
from numba import njit, prange

from .acc import SCALE
from .bounds import _safe
from .mac_f32 import MAGIC32, MAGIC32_BITS, as_f32, f32_bits, f32_row_ok
from .parallel import claim, nan_max

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


@njit(fastmath={"contract"}, inline="always")
def _q(xk, wk, m, trunc):
    """``bits(MAGIC32 + round(xk * wk))`` (``floor`` with ``trunc``) as an int32."""
    if trunc:
        return f32_bits(np.floor(xk * wk) + m)
    return f32_bits(xk * wk + m)


@njit(fastmath={"contract"}, inline="always")
def _sum(s, offset):
    """The exact sum ``S`` from an int32 lane sum ``s = K * MAGIC32_BITS + S`` (mod 2**32)."""
    t = (np.int64(s) - offset) & 0xFFFFFFFF  # S modulo 2**32 ...
    return np.float64(t - ((t & 0x80000000) << 1))  # ... as the int32 it is


@njit(fastmath={"contract"}, inline="always")
def _dot1(x, w, K, m, trunc):
    s = np.int32(0)
    for k in range(K):
        s = np.int32(s + _q(x[k], as_f32(w[k]), m, trunc))
    return s


@njit(fastmath={"contract"}, inline="always")
def _dot4x2(x0, x1, x2, x3, wa, wb, K, m, trunc):
    """Four rows against two channels: each weight is loaded and decoded once for four
    rows, each input once for two channels (eight int32 lane sums)."""
    s0 = s1 = s2 = s3 = t0 = t1 = t2 = t3 = np.int32(0)
    for k in range(K):
        a = as_f32(wa[k])
        b = as_f32(wb[k])
        s0 = np.int32(s0 + _q(x0[k], a, m, trunc))
        s1 = np.int32(s1 + _q(x1[k], a, m, trunc))
        s2 = np.int32(s2 + _q(x2[k], a, m, trunc))
        s3 = np.int32(s3 + _q(x3[k], a, m, trunc))
        t0 = np.int32(t0 + _q(x0[k], b, m, trunc))
        t1 = np.int32(t1 + _q(x1[k], b, m, trunc))
        t2 = np.int32(t2 + _q(x2[k], b, m, trunc))
        t3 = np.int32(t3 + _q(x3[k], b, m, trunc))
    return s0, s1, s2, s3, t0, t1, t2, t3


@njit(cache=True, boundscheck=False)
def prepare(x, xs, rsum, rmax):
    """From the input as the gather leaves it, ``x`` float64[K, P] (fp16 values; channels
    by pixels), the rows of the product: ``xs[p, k] = x[k, p] * 2**16`` as float32 (exact),
    and ``rsum[p]``/``rmax[p]``, the sum and the max of ``|x[:, p]|`` (NaN propagates),
    summed in the order of ``k`` (``fastane.kernels.bounds._row_abs_stats`` sums in
    another fixed order; either is a valid bound, BOUND_MARGIN covering any order)."""
    K, P = x.shape
    rsum[:] = 0.0
    rmax[:] = 0.0
    for k0 in range(0, K, 16):  # a cache line of each row of xs at a time
        k1 = min(K, k0 + 16)
        for p in range(P):
            s = rsum[p]
            m = rmax[p]
            for k in range(k0, k1):
                v = x[k, p]
                xs[p, k] = np.float32(v) * np.float32(SCALE)
                a = abs(v)
                s += a
                m = nan_max(m, a)
            rsum[p] = s
            rmax[p] = m


@njit(fastmath={"contract"}, inline="always")
def _channels(xs, k16, per_lane, K, N, trunc, acc, n, m, offset):
    """Output channels ``n`` and ``n + 1`` (only ``n`` when it is the last of an odd
    ``N``) of :func:`skinny_q16`: blocks of four rows, the rows left over one by one."""
    P = xs.shape[0]
    P4 = P - P % 4
    o = (n % per_lane) * K
    wa = k16[n // per_lane, o : o + K]
    if n + 1 == N:  # the last channel of an odd count
        for p in range(P):
            acc[n, p] = _sum(_dot1(xs[p], wa, K, m, trunc), offset)
        return
    o = ((n + 1) % per_lane) * K
    wb = k16[(n + 1) // per_lane, o : o + K]
    for p in range(0, P4, 4):
        s = _dot4x2(xs[p], xs[p + 1], xs[p + 2], xs[p + 3], wa, wb, K, m, trunc)
        for q in range(4):
            acc[n, p + q] = _sum(s[q], offset)
            acc[n + 1, p + q] = _sum(s[4 + q], offset)
    for p in range(P4, P):
        acc[n, p] = _sum(_dot1(xs[p], wa, K, m, trunc), offset)
        acc[n + 1, p] = _sum(_dot1(xs[p], wb, K, m, trunc), offset)


@njit(fastmath={"contract"}, cache=True, boundscheck=False)
def skinny_q16(xs, k16, per_lane, K, N, trunc, acc):
    """``acc[n, p] = sum_k round(x[p, k] * w[n, k])`` in grid units (float64), for rows
    :func:`rows_ok` admits; ``w[n, k]`` is the fp16 pattern ``k16[n // per_lane, (n %
    per_lane) * K + k]`` (the KMem layout: ``per_lane`` channels a core).  ``xs``:
    float32[P, K], the rows times ``2**16`` (:func:`prepare`).  ``trunc``: products floored
    instead of rounded.  Blocks of four rows by two channels; the rows and the channel
    left over one by one."""
    m = np.float32(MAGIC32)
    offset = np.int64(K) * MAGIC32_BITS
    for n in range(0, N, 2):
        _channels(xs, k16, per_lane, K, N, trunc, acc, n, m, offset)


@njit(fastmath={"contract"}, parallel=True, cache=True, boundscheck=False)
def skinny_q16_par(xs, k16, per_lane, K, N, trunc, acc, workers):
    """:func:`skinny_q16` with the channel pairs handed out to Numba's threads through
    the work queue of :mod:`fastane.kernels.parallel` (each output computed as there: the
    same bits), for tasks large enough to pay a parallel region."""
    m = np.float32(MAGIC32)
    offset = np.int64(K) * MAGIC32_BITS
    ntasks = (N + 1) // 2
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            _channels(xs, k16, per_lane, K, N, trunc, acc, 2 * t, m, offset)
