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
from .bounds import _abs_stats, _safe
from .fp16 import F16_INF
from .mac_f32 import MAGIC32, MAGIC32_BITS, as_f32, f32_bits, f32_row_ok
from .parallel import claim, nan_max, new_queue
from .simd import wide_vectors

_NAN_MAG = F16_INF  # fp16 magnitudes above this pattern are NaN
#: the rows of ``xs`` a block holds at most (bytes): a block is read again for every
#: channel pair, from L2 (1 MiB a core on the 2-core Zen 5) when it fits.  Measured on
#: that machine, threaded, against one block of every row: 196 x 2304 x 224 (ResNet-50's
#: 14 x 14 3 x 3 tasks, 1.8 MB of rows) 83-87 -> 91-93 GMAC/s, 256 x 1152 x 448 89 -> 92;
#: at 256 KiB, 49 x 4608 x 112 (0.9 MB, one block at 512 KiB) lost 71 -> 65
ROW_BLOCK_BYTES = 1 << 19
#: the channels a task of :func:`skinny_q16_par` computes when the rows are in blocks (even:
#: a block starts a channel pair)
CHANNEL_BLOCK = 16
_MAG = np.uint16(0x7FFF)  # the magnitude bits of an fp16 pattern


@njit(cache=True)
def pattern_abs(m):
    """``|w|`` (float64) of the largest magnitude pattern ``m`` (``bits & 0x7fff``) of fp16
    weights, NaN above 0x7c00 (a NaN weight): the largest magnitude pattern is the pattern
    of the largest magnitude (fp16 is sign-magnitude, and its magnitudes order as their
    patterns do)."""
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
    """The exact sum ``S`` (int32) from an int32 lane sum ``s = K * MAGIC32_BITS + S``
    (mod 2**32): the difference truncated to 32 bits is ``S`` modulo ``2**32``, the int32
    it is."""
    return np.int32(np.int64(s) - offset)


@njit(fastmath={"contract"}, inline="always")
def _dot1(x, w, K, m, trunc, wmax):
    """One row against one channel; ``wmax`` on with the channel's magnitude patterns."""
    s = np.int32(0)
    mag = np.uint16(0)  # in 16-bit lanes: twice as many a vector as int32's
    for k in range(K):
        v = w[k]
        s = np.int32(s + _q(x[k], as_f32(v), m, trunc))
        mag = max(mag, np.uint16(v & _MAG))
    return s, max(wmax, np.int32(mag))


@njit(inline="always")
def _mag(w, wmax):
    """``max(wmax, the largest magnitude pattern of w)`` (int32), in a loop of its own: for
    rows four together, whose loop it would slow by a sixth (two masks and two maxima for
    eight FMAs)."""
    mag = np.uint16(0)
    for k in range(w.size):
        mag = max(mag, np.uint16(w[k] & _MAG))
    return max(wmax, np.int32(mag))


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


#: the rows of ``x`` (16 a block) a task of :func:`prepare_par` decodes and transposes
PREPARE_ROWS = 64
#: the elements ``K x P`` from which fastane.device.mac.skinny makes the rows on Numba's
#: threads (:func:`prepare_par`); below, one thread (ResNet-50's tasks, in a forward:
#: 512 x 196 57 -> 34 us, 1024 x 196 141 -> 71, 2304 x 196 422 -> 156)
PREPARE_PARALLEL = 1 << 16


@njit(cache=True, boundscheck=False)
def _prepare_rows(x, xs, rsum, rmax, k0, k1):
    """Rows ``k0:k1`` of ``x`` into columns ``k0:k1`` of ``xs`` (16 rows of ``x`` at a time
    decoded along the pixels, then transposed in L1), their ``|x|`` added into ``rsum``
    and maxed into ``rmax`` (both times ``2**16``)."""
    P = x.shape[1]
    tmp = np.empty((16, P), np.float32)
    for b in range(k0, k1, 16):
        n = min(k1, b + 16) - b
        for j in range(n):
            row = x[b + j]
            t = tmp[j]
            for p in range(P):
                v = as_f32(row[p]) * np.float32(SCALE)
                t[p] = v
                a = abs(np.float64(v))
                rsum[p] += a
                rmax[p] = nan_max(rmax[p], a)
        for p in range(P):
            dst = xs[p, b : b + n]
            for j in range(n):
                dst[j] = tmp[j, p]


@njit(cache=True, boundscheck=False)
def prepare(x, xs, rsum, rmax):
    """From the input ``x`` [K, P] (input channels, or unfolded columns, by pixels) as
    float64 or float32 fp16 values or as fp16 patterns (uint16: im2col's columns), the
    rows of the product: ``xs[p, k] = x[k, p] * 2**16`` as float32 (exact), and
    ``rsum[p]``/``rmax[p]``, the sum and the max of ``|x[:, p]|`` (NaN propagates): one
    row, by ``fastane.kernels.bounds._abs_stats`` (the general kernels' row statistics);
    more, along ``k`` for every pixel at once.  Any order is as good a bound
    (BOUND_MARGIN), and up to ``K = 2**13`` every order gives the same sum: fp16
    magnitudes are multiples of ``2**-24`` below ``2**16``, so such a sum and every
    partial sum is a multiple of ``2**-24`` below ``2**29``, exact in float64.  Both are
    computed on the rows of ``xs`` and scaled back by ``2**-16``, exactly (a power of
    two)."""
    K, P = x.shape
    if P == 1:
        x1 = x.reshape(K)
        r = xs.reshape(K)
        for k in range(K):
            r[k] = as_f32(x1[k]) * np.float32(SCALE)
        s, m = _abs_stats(r)
        rsum[0] = s * (1.0 / SCALE)
        rmax[0] = m * (1.0 / SCALE)
        return
    rsum[:] = 0.0
    rmax[:] = 0.0
    _prepare_rows(x, xs, rsum, rmax, 0, K)
    for p in range(P):
        rsum[p] *= 1.0 / SCALE
        rmax[p] *= 1.0 / SCALE


@njit(cache=True, boundscheck=False)
def _prepare_task(x, xs, psum, pmax, t):
    """Task ``t`` of :func:`prepare_par`: rows ``t * PREPARE_ROWS`` on of ``x``, their
    sums and maxima into row ``t`` of the partials."""
    k0 = t * PREPARE_ROWS
    psum[t] = 0.0
    pmax[t] = 0.0
    _prepare_rows(x, xs, psum[t], pmax[t], k0, min(x.shape[0], k0 + PREPARE_ROWS))


@njit(parallel=True, cache=True, boundscheck=False)
def prepare_par(x, xs, rsum, rmax, workers):
    """:func:`prepare` of ``P > 1`` pixels with the rows of ``x`` in blocks of
    :data:`PREPARE_ROWS` handed out to Numba's threads (the work queue of
    :mod:`fastane.kernels.parallel`), each block's sums and maxima kept apart, then added
    and maxed in block order: the same ``xs`` and ``rmax``, and the same ``rsum`` as
    :func:`prepare` (exact in any order) up to ``K = 2**13``; above, as good a bound, and
    the same on any thread count."""
    K, P = x.shape
    ntasks = (K + PREPARE_ROWS - 1) // PREPARE_ROWS
    psum = np.empty((ntasks, P))
    pmax = np.empty((ntasks, P))
    counter = new_queue()
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            _prepare_task(x, xs, psum, pmax, t)
    for p in range(P):
        s = 0.0
        m = 0.0
        for t in range(ntasks):
            s += psum[t, p]
            m = nan_max(m, pmax[t, p])
        rsum[p] = s * (1.0 / SCALE)
        rmax[p] = m * (1.0 / SCALE)


@njit(fastmath={"contract"}, inline="always")
def _block(xs, k16, base, per_lane, K, N, trunc, acc, c0, c1, r0, r1, m, offset):
    """Output channels ``c0:c1`` (``c0`` even) of rows ``r0:r1`` of :func:`skinny_q16`:
    channel pairs by blocks of four rows, the rows left over (fewer than four, at the
    end) and the last channel of an odd ``N`` one by one.  Returns the largest magnitude
    pattern of the channels' weights."""
    q1 = r0 + (r1 - r0) // 4 * 4
    wmax = np.int32(0)
    for n in range(c0, c1, 2):
        o = base[n // per_lane] + (n % per_lane) * K
        wa = k16[o : o + K]
        if n + 1 == N:  # the last channel of an odd count
            for p in range(r0, r1):
                s, wmax = _dot1(xs[p], wa, K, m, trunc, wmax)
                acc[n, p] = _sum(s, offset)
            continue
        o = base[(n + 1) // per_lane] + ((n + 1) % per_lane) * K
        wb = k16[o : o + K]
        if q1 > r0:
            wmax = _mag(wb, _mag(wa, wmax))
        for p in range(r0, q1, 4):
            s = _dot4x2(xs[p], xs[p + 1], xs[p + 2], xs[p + 3], wa, wb, K, m, trunc)
            for q in range(4):
                acc[n, p + q] = _sum(s[q], offset)
                acc[n + 1, p + q] = _sum(s[4 + q], offset)
        for p in range(q1, r1):
            s, wmax = _dot1(xs[p], wa, K, m, trunc, wmax)
            acc[n, p] = _sum(s, offset)
            s, wmax = _dot1(xs[p], wb, K, m, trunc, wmax)
            acc[n + 1, p] = _sum(s, offset)
    return wmax


@njit(inline="always")
def _row_blocks(P, K, row_bytes):
    """``(rows a block, blocks)``: blocks of a multiple of four rows whose ``xs`` (``K``
    float32 a row) take at most ``row_bytes`` (the last block takes the rows left over);
    one block when all the rows do."""
    rows = max(4, row_bytes // (4 * K) // 4 * 4)
    if rows >= P:
        return P, 1
    return rows, P // rows


@njit(fastmath={"contract"}, cache=True, boundscheck=False)
def skinny_q16(xs, k16, base, per_lane, K, N, trunc, acc, row_bytes):
    """``acc[n, p] = sum_k round(x[p, k] * w[n, k])`` in grid units (int32), for rows
    :func:`rows_ok` admits; ``w[n, k]`` is the fp16 pattern ``k16[base[n // per_lane] + (n
    % per_lane) * K + k]`` (the KMem layout: ``per_lane`` channels a core, core ``l``'s
    first word at ``base[l]``; ``k16`` 1-D: KMem, or unified memory where KernelDMA reads
    the same bytes, ``fastane.device.kernel_dma.KMem.fp16_lanes``).  ``xs``:
    float32[P, K], the rows times ``2**16`` (:func:`prepare`).  ``trunc``: products floored
    instead of rounded.  The rows in blocks of at most ``row_bytes`` of ``xs``
    (:data:`ROW_BLOCK_BYTES`), each block read from cache for every channel pair; within
    a block four rows by two channels, the rows and the channel left over one by one.

    Returns the largest magnitude pattern (``bits & 0x7fff``) of the weights it read:
    :func:`pattern_abs` of it is the ``max |w|`` that :func:`rows_ok` must admit for the
    sums to be exact (the caller checks it after the one pass over the weights, and
    discards ``acc`` when it fails)."""
    wide_vectors()
    m = np.float32(MAGIC32)
    offset = np.int64(K) * MAGIC32_BITS
    P = xs.shape[0]
    rows, blocks = _row_blocks(P, K, row_bytes)
    wmax = np.int32(0)
    for b in range(blocks):
        r1 = P if b == blocks - 1 else (b + 1) * rows
        wmax = max(wmax, _block(xs, k16, base, per_lane, K, N, trunc, acc, 0, N, b * rows, r1, m, offset))
    return wmax


@njit(fastmath={"contract"}, parallel=True, cache=True, boundscheck=False)
def skinny_q16_par(xs, k16, base, per_lane, K, N, trunc, acc, row_bytes, workers):
    """:func:`skinny_q16` with blocks of channels by blocks of rows handed out to Numba's
    threads through the work queue of :mod:`fastane.kernels.parallel` (each output
    computed as there: the same bits, the same largest pattern returned), for tasks
    large enough to pay a parallel region.  One block of rows: a task is a channel pair;
    more: :data:`CHANNEL_BLOCK` channels, so that a block of rows is read from cache for
    as many channels."""
    m = np.float32(MAGIC32)
    offset = np.int64(K) * MAGIC32_BITS
    P = xs.shape[0]
    rows, blocks = _row_blocks(P, K, row_bytes)
    width = 2 if blocks == 1 else CHANNEL_BLOCK
    ntasks = (N + width - 1) // width * blocks
    counter = new_queue()
    wmax = np.empty(workers, np.int32)  # not np.zeros: that is a parallel region of its own
    for i in prange(workers):
        wide_vectors()
        wmax[i] = 0
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            b = t % blocks
            c0 = t // blocks * width
            r1 = P if b == blocks - 1 else (b + 1) * rows
            w = _block(
                xs, k16, base, per_lane, K, N, trunc, acc, c0, min(N, c0 + width), b * rows, r1, m, offset
            )
            if w > wmax[i]:
                wmax[i] = w
    r = np.int32(0)
    for i in range(workers):
        r = max(r, wmax[i])
    return r
