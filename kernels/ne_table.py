"""The NE stage as a table of the fp16 input patterns (elementwise tasks).

A kernel-less NE task (``KernelMode = 1``: the MAC passes its fp16 input through) with one
bias for every channel computes a pure function of each input's fp16 pattern.  So its
result is :func:`fastane.kernels.ne.ne_post` evaluated once per pattern
(:func:`ne_table`, the same kernel on the same float64 values: the same bits and the same
LUT range events) and then looked up per element (:func:`ne_lookup`).
"""

import numpy as np
from numba import njit, prange

from .fp16 import f64_to_f16
from .ne import ne_post
from .parallel import claim, new_queue
from .simd import wide_vectors


@njit(cache=True)
def ne_table(values, bias, scale, nonlinear, lutf, luti, out, events):
    """For each ``values[k]`` (float64[n], exact fp16 values) alone: ``out[k]`` the fp16
    pattern :func:`~fastane.kernels.ne.ne_post` gives it (one channel, bias ``bias[0]``
    if ``bias`` is not empty), ``events[k]`` 1 if it counted a LUT underflow, 2 an
    overflow, else 0."""
    y = np.empty((1, 1, 1))
    o = np.empty((1, 1, 1), np.uint16)
    c = np.zeros(2, np.int64)
    for k in range(values.size):
        y[0, 0, 0] = values[k]
        c[0] = 0
        c[1] = 0
        ne_post(y, bias, scale, nonlinear, lutf, luti, o, c)
        out[k] = o[0, 0, 0]
        events[k] = 1 if c[0] else (2 if c[1] else 0)


@njit(cache=True)
def ne_lookup(values, table, events, out, counts):
    """``out[k] = table[pattern of values[k]]`` (``values`` float64, exact fp16 values;
    ``out`` uint16; both flat), ``counts[0] +=`` underflows and ``counts[1] +=`` overflows
    of the looked-up patterns (``events`` as :func:`ne_table`).  Returns False, having
    counted nothing, as soon as a value is NaN (its payload is for the kernel itself)."""
    under = 0
    over = 0
    for k in range(values.size):
        v = values[k]
        if v != v:
            return False
        b = f64_to_f16(v)
        out[k] = table[b]
        e = events[b]
        under += e & 1
        over += e >> 1
    counts[0] += under
    counts[1] += over
    return True


#: elements of a row :func:`lookup_window` counts in one packed sum (each count then fits
#: its 16-bit field)
CHUNK = 1 << 15
#: where an entry of :func:`lookup_window`'s table holds its LUT underflow, overflow and
#: NaN-output bits: one bit at the bottom of each 16-bit field above the result, so that
#: ``entry >> 16`` adds all three counts at once
UNDER_SHIFT, OVER_SHIFT, NAN_SHIFT = 16, 32, 48
_RESULT = np.uint64(0xFFFF)
_FIELD = np.uint64(0xFFFF)


@njit(cache=True, boundscheck=False)
def _lookup_span(src, so, table, dst, do, k0, k1, W, wpad):
    """Elements ``k0:k1`` of the row at ``src[so:]`` -> ``dst[do:]`` of
    :func:`lookup_window`, in pieces of :data:`CHUNK`; the row's padding ``W:wpad`` is
    zeroed when ``k1 == W``.  Returns the counts ``(nan, under, over)``."""
    wide_vectors()
    nan = 0
    under = 0
    over = 0
    for c0 in range(k0, k1, CHUNK):
        m = min(CHUNK, k1 - c0)
        s = src[so + c0 : so + c0 + m]
        d = dst[do + c0 : do + c0 + m]
        acc = np.uint64(0)
        for k in range(m):
            v = table[s[k]]
            d[k] = np.uint16(v & _RESULT)
            acc += v >> np.uint64(UNDER_SHIFT)
        under += np.int64(acc & _FIELD)  # int64 counts (int64 + uint64 is float64)
        over += np.int64((acc >> np.uint64(OVER_SHIFT - UNDER_SHIFT)) & _FIELD)
        nan += np.int64(acc >> np.uint64(NAN_SHIFT - UNDER_SHIFT))
    if k1 == W:
        for k in range(W, wpad):
            dst[do + k] = 0
    return nan, under, over


@njit(cache=True, boundscheck=False)
def lookup_window(src, splane, srow, C, H, W, table, dst, dplane, drow, wpad, counts):
    """A kernel-less NE task on fp16 patterns, TileDMA window to TileDMA window: for every
    ``(c, h, w)`` of the ``C x H x W`` tensor, ``v = table[src[c*splane + h*srow + w]]``
    and ``dst[c*dplane + h*drow + w] = v & 0xffff`` (``src``, ``dst`` flat uint16, strides
    in elements); ``dst[... + w]`` for ``W <= w < wpad`` is zeroed (the row's last burst).
    ``table`` (uint64, all 65536 patterns, NaN ones included) holds the result pattern in
    its low 16 bits, then a LUT underflow bit (:data:`UNDER_SHIFT`), an overflow bit
    (:data:`OVER_SHIFT`) and a NaN-output bit (:data:`NAN_SHIFT`: for an NE task a NaN
    input, which the pass-through MAC counts).  ``counts`` (int64[3]) ``+=`` NaN outputs,
    LUT underflows, LUT overflows.

    One memory-bound pass (:func:`lookup_window_par` hands its rows to Numba's threads).
    One loop per row does the gather, the store and the counting: the event bits sit in
    their own 16-bit fields of the entry, so ``entry >> 16`` is added into one uint64
    sum, split every :data:`CHUNK` elements -- one gather and one add an element (a
    uint32 entry whose event bits indexed a table of their spread took a second gather:
    0.31 vs 0.26 ms at 2^20 elements)."""
    nan = 0
    under = 0
    over = 0
    for c in range(C):
        for h in range(H):
            n, u, o = _lookup_span(
                src, c * splane + h * srow, table, dst, c * dplane + h * drow, 0, W, W, wpad
            )
            nan += n
            under += u
            over += o
    counts[0] += nan
    counts[1] += under
    counts[2] += over


#: elements a task of :func:`lookup_window_par` looks up: whole rows, or a part of one
LOOKUP_TASK = 1 << 14
#: the elements (``C x H x W``) from which a caller runs :func:`lookup_window_par`
#: instead of :func:`lookup_window` (medians on two threads, uniformly random patterns:
#: 2^16 elements 46 -> 27 us, 2^17 105 -> 45, 2^19 356 -> 132; each core reads the table
#: from its own L2)
LOOKUP_PARALLEL = 1 << 17


@njit(cache=True, boundscheck=False)
def _lookup_task(src, splane, srow, R, H, W, table, dst, dplane, drow, wpad, t, per_row, rows):
    """Task ``t`` of :func:`lookup_window_par`: part ``t % per_row`` of row ``t // per_row``
    (``per_row`` parts of :data:`LOOKUP_TASK` a row), or, with ``per_row`` 0, rows ``t *
    rows`` on (``rows`` whole rows a task, of the ``R = C x H`` rows); its counts."""
    if per_row:
        r = t // per_row
        k0 = (t % per_row) * LOOKUP_TASK
        r0, r1, k1 = r, r + 1, min(W, k0 + LOOKUP_TASK)
    else:
        r0, r1, k0, k1 = t * rows, min(t * rows + rows, R), 0, W
    nan = 0
    under = 0
    over = 0
    for r in range(r0, r1):
        c, h = r // H, r % H
        n, u, o = _lookup_span(src, c * splane + h * srow, table, dst, c * dplane + h * drow, k0, k1, W, wpad)
        nan += n
        under += u
        over += o
    return nan, under, over


@njit(parallel=True, cache=True, boundscheck=False)
def lookup_window_par(src, splane, srow, C, H, W, table, dst, dplane, drow, wpad, counts, workers):
    """:func:`lookup_window` with its rows (or parts of :data:`LOOKUP_TASK` elements of
    long rows) handed out to Numba's threads (the work queue of
    :mod:`fastane.kernels.parallel`): the same patterns, and the same counts (integers:
    added in any order)."""
    R = C * H
    per_row = (W + LOOKUP_TASK - 1) // LOOKUP_TASK if W >= LOOKUP_TASK else 0
    rows = max(1, LOOKUP_TASK // max(W, 1))
    ntasks = R * per_row if per_row else (R + rows - 1) // rows
    tally = np.empty((workers, 3), np.int64)  # not np.zeros: a parallel region of its own
    counter = new_queue()
    for i in prange(workers):
        tally[i, 0] = tally[i, 1] = tally[i, 2] = 0
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            n, u, o = _lookup_task(
                src, splane, srow, R, H, W, table, dst, dplane, drow, wpad, t, per_row, rows
            )
            tally[i, 0] += n
            tally[i, 1] += u
            tally[i, 2] += o
    for i in range(workers):
        for j in range(3):
            counts[j] += tally[i, j]


@njit(cache=True)
def lane_table(table, events, out):
    """The uint64 table of :func:`lookup_window` from :func:`ne_table`'s ``table`` and
    ``events`` (1 underflow, 2 overflow) of every pattern ``p``."""
    for p in range(out.size):
        e = events[p]
        nan = 1 if (p & 0x7FFF) > 0x7C00 else 0
        out[p] = (
            np.uint64(table[p])
            | (np.uint64(e & 1) << np.uint64(UNDER_SHIFT))
            | (np.uint64(e >> 1) << np.uint64(OVER_SHIFT))
            | (np.uint64(nan) << np.uint64(NAN_SHIFT))
        )


_MAG = np.uint16(0x7FFF)
_SIGN = np.uint16(0x8000)
_INF = np.uint16(0x7C00)
_QNAN = np.uint16(0x7E00)


@njit(inline="always")
def _plain_row(s, d, relu):
    """One row of :func:`plain_window`: the NaN count."""
    nan = 0
    for k in range(s.size):
        v = s[k]
        isnan = (v & _MAG) > _INF
        r = _QNAN if isnan else v
        if relu:
            r = np.uint16(0) if (r & _SIGN) != 0 else r
        d[k] = r
        nan += isnan
    return nan


@njit(cache=True, boundscheck=False)
def plain_window(src, splane, srow, C, H, W, relu, dst, dplane, drow, wpad):
    """:func:`lookup_window` of the NE stage without a bias, a PostScale or a LUT (identity
    or ReLU): each pattern as it is, a NaN written 0x7e00 (the quiet NaN every NaN reads out
    as) and counted, ReLU clearing the negative ones (-0 and -inf included) -- what the
    table of that stage holds for every pattern, with no table: a vector loop of compares
    and selects.  Returns the NaN count."""
    wide_vectors()
    nan = 0
    for c in range(C):
        for h in range(H):
            so = c * splane + h * srow
            do = c * dplane + h * drow
            s = src[so : so + W]
            d = dst[do : do + W]
            if relu:
                nan += _plain_row(s, d, True)
            else:
                nan += _plain_row(s, d, False)
            for k in range(W, wpad):
                dst[do + k] = 0
    return nan
