"""The MAC array's arithmetic (SPEC section 2): fp16 products, a saturating Q16.16
accumulator in a fixed time order, fp16 readout.

Entry points (fixed interface, used by the front end and the device engine)::

    acc, flag = matmul_q16(a, b, ia, ib, trunc)
    readout(acc, flag, out)

``a``: float64[BA, M, K] and ``b``: float64[BB, K, N], C-contiguous, holding exact fp16
values; ``ia``/``ib``: int64[B] map each output batch to its ``a``/``b`` batch (so
broadcasting costs no copies).  ``acc``: float64[B, M, N], the accumulator in grid units
(``2**-16``; integer-valued), NaN where a NaN product occurred; ``flag``: int8[B, M, N],
0 never clamped, +1 most recent clamp at the top, -1 at the bottom.

Arithmetic, exactly as SPEC 2 decides:

* each product ``a*b`` is exact (22 significant bits), then rounded to the Q16.16 grid:
  half to even by default; with ``trunc=True`` by truncation, which here means **floor
  in two's complement** (the low bits are dropped: -1.5 grid steps become -2);
* the accumulator is signed Q16.16: ``[-2**31, 2**31 - 1]`` grid units.  It adds the
  rounded products for ``k = 0..K-1`` in that order and clamps at every step; a clamp
  sets the output's sticky flag to the direction of that clamp (+1 top, -1 bottom);
* a NaN product (NaN operand, or ``inf * 0``) makes the output NaN; an infinite product
  saturates the accumulator in its sign (clamp and flag).

How it is computed (all bit-identical to that serial definition):

* each ``a`` value is scaled by ``2**16`` as the kernels load it (exact, and free: ``a``
  values are broadcast scalars), so a product ``p`` comes out in grid units;
  ``(p + 1.5*2**52) - 1.5*2**52`` rounds ``p`` half to even for ``|p| < 2**51`` (every
  finite fp16 product: ``65504**2 * 2**16 < 2**49``), and with ``fastmath={'contract'}``
  the first addition becomes one FMA, which is exact for the same reason (the product
  ``a*b`` itself is exact, so fusing changes nothing);
* **fast path.**  A row is safe when no partial sum can leave the range:
  ``|partial sum| <= sum_k |round(p_k)| <= sum_k |a_ik||b_kj| * 2**16 + K``, so when that
  bound (with a relative margin of ``2**-20`` for its own float error, which is at most
  about ``K * 2**-53``) stays at most ``2**31 - 1``, no step clamps and every partial sum
  is an integer below ``2**31``: float64 adds them exactly in any order.  The fast kernel
  (ikj order, vectorized across the output row, two rows per pass sharing the loads of
  ``b``, tiles of rows x columns in parallel, depth blocked for cache) adds four
  products per step, paired: ``t0 = fma(a0, b0, MAGIC)`` and ``t1 = fma(-a1, b1, MAGIC)``
  hold ``MAGIC + r0`` and ``MAGIC - r1`` exactly, and ``t0 - t1 = r0 + r1`` exactly
  (Sterbenz: both lie in ``[2**52, 2**53]``), so two products cost two FMAs and one
  subtraction.  Outputs with at most ``NARROW_COLS`` columns use dot products with four
  independent partial sums instead (same pairing).  With ``trunc`` the products are
  floored one by one (``np.floor``), then summed the same way;
* bounds, cheapest first: per row ``sum_k |a_ik| * max|b|``; for rows that fail it, per
  element ``min(sum_k|a_ik| * max_k|b_kj|, max_k|a_ik| * sum_k|b_kj|)``; for elements
  that still fail, ``|A| @ |B|`` with BLAS (single-threaded, so that OpenBLAS's spinning
  threads cannot steal the cores of Numba's threads).  NaN or inf operands make every
  bound NaN or inf, so they always take the exact path;
* **exact path.**  Elements that may clamp are recomputed in the serial order with the
  per-step clamp: whole rows (vectorized across the row) when many of a row's elements
  need it, one element at a time otherwise;
* **threads.**  The parallel kernels hand out tiles through a shared atomic counter (a
  work queue: a thread that loses its core does fewer tiles instead of stalling the
  call); work below ``SERIAL_MACS`` multiply-adds runs on the calling thread alone.
  Numpy's BLAS (for the bound only) runs single-threaded.

Kernels assume valid input (shapes, dtypes, contiguity, index ranges): validation
belongs to the front end.  ``matmul_q16`` is a Python function that plans the work and
calls the Numba kernels (``@njit(cache=True)``, nopython); call it from Python.
"""

import numpy as np
from numba import njit, prange

from . import parallel
from .acc import (
    ACC_MAX,
    ACC_MIN,
    SCALE,
    readout,
    readout_counts,  # re-exported: the entry
    readout_unrounded,
    readout_value,
)  # points of the docstring
from .bounds import (
    BOUND_MARGIN,
    _abs_max,
    _blas_refine,
    _col_abs_stats,  # tests use them
    _element_unsafe,
    _plan_rows,
    _row_abs_stats,
)
from .parallel import claim

MAGIC = 1.5 * 2.0**52  # (t + MAGIC) - MAGIC == round-half-even(t) for |t| < 2**51
# Row/column/depth blocking of the fast and exact kernels (measured on a 2-core Zen 3).
ROWS_PER_TILE = 32
COLS_PER_TILE = 1024
DEPTH_PER_TILE = 16
# Outputs this narrow (columns) take dot products instead of row tiles on the fast path.
NARROW_COLS = 8
# Work below this many multiply-adds runs on the calling thread alone (see parallel.threads_for).
SERIAL_MACS = 1 << 20
# Tasks of the per-element kernels (_fast_dots: rows, _exact_elements: elements).
ITEMS_PER_TASK = 16
# A row goes to the vectorized exact kernel when more than 1/FIX_RATIO of its elements
# need the exact path; otherwise those elements are recomputed one at a time.
FIX_RATIO = 8


# ---------------------------------------------------------------- inner loops (inlined)
@njit(fastmath={"contract"}, inline="always")
def _rne4x2(c, d, b0, b1, b2, b3, a0, a1, a2, a3, e0, e1, e2, e3):
    """Two rows += four products each, rounded half to even (a1, a3, e1, e3 negated)."""
    for j in range(c.size):
        x0 = b0[j]
        x1 = b1[j]
        x2 = b2[j]
        x3 = b3[j]
        c[j] += ((a0 * x0 + MAGIC) - (a1 * x1 + MAGIC)) + ((a2 * x2 + MAGIC) - (a3 * x3 + MAGIC))
        d[j] += ((e0 * x0 + MAGIC) - (e1 * x1 + MAGIC)) + ((e2 * x2 + MAGIC) - (e3 * x3 + MAGIC))


@njit(fastmath={"contract"}, inline="always")
def _rne4(c, b0, b1, b2, b3, a0, a1, a2, a3):
    """One row += four products, rounded half to even (a1, a3 negated)."""
    for j in range(c.size):
        c[j] += ((a0 * b0[j] + MAGIC) - (a1 * b1[j] + MAGIC)) + ((a2 * b2[j] + MAGIC) - (a3 * b3[j] + MAGIC))


@njit(fastmath={"contract"}, inline="always")
def _rne1(c, b0, a0):
    for j in range(c.size):
        c[j] += (a0 * b0[j] + MAGIC) - MAGIC


@njit(inline="always")
def _floor4x2(c, d, b0, b1, b2, b3, a0, a1, a2, a3, e0, e1, e2, e3):
    for j in range(c.size):
        x0 = b0[j]
        x1 = b1[j]
        x2 = b2[j]
        x3 = b3[j]
        c[j] += (np.floor(a0 * x0) + np.floor(a1 * x1)) + (np.floor(a2 * x2) + np.floor(a3 * x3))
        d[j] += (np.floor(e0 * x0) + np.floor(e1 * x1)) + (np.floor(e2 * x2) + np.floor(e3 * x3))


@njit(inline="always")
def _floor4(c, b0, b1, b2, b3, a0, a1, a2, a3):
    for j in range(c.size):
        c[j] += (np.floor(a0 * b0[j]) + np.floor(a1 * b1[j])) + (np.floor(a2 * b2[j]) + np.floor(a3 * b3[j]))


@njit(inline="always")
def _floor1(c, b0, a0):
    for j in range(c.size):
        c[j] += np.floor(a0 * b0[j])


@njit(fastmath={"contract"}, inline="always")
def _round_product(p, trunc):
    """``p`` (a product in grid units) rounded to the grid: floor or half to even."""
    if trunc:
        return np.floor(p)
    return (p + MAGIC) - MAGIC


@njit(fastmath={"contract"}, inline="always")
def _clamp_rne(c, f, b0, a0):
    """One exact, clamped step for a row segment: c += round(a0*b0), flags in f (float)."""
    for j in range(c.size):
        s = c[j] + ((a0 * b0[j] + MAGIC) - MAGIC)
        f[j] = 1.0 if s > ACC_MAX else (-1.0 if s < ACC_MIN else f[j])
        c[j] = min(max(s, ACC_MIN), ACC_MAX) if s == s else s


@njit(inline="always")
def _clamp_floor(c, f, b0, a0):
    for j in range(c.size):
        s = c[j] + np.floor(a0 * b0[j])
        f[j] = 1.0 if s > ACC_MAX else (-1.0 if s < ACC_MIN else f[j])
        c[j] = min(max(s, ACC_MIN), ACC_MAX) if s == s else s


# ---------------------------------------------------------------- work queue
# The parallel kernels below hand their tasks out through the work queue of
# :mod:`fastane.kernels.parallel` (one prange iteration per thread, each claiming the next
# task until none are left); every task writes its own outputs only.


# ---------------------------------------------------------------- kernels
@njit(inline="always")
def _tile_count(L, N, rows_per_tile, cols_per_tile):
    """Tasks of the row kernels: tiles of ``rows_per_tile`` listed rows x ``cols_per_tile``
    columns over ``L`` rows and ``N`` columns."""
    return ((L + rows_per_tile - 1) // rows_per_tile) * ((N + cols_per_tile - 1) // cols_per_tile)


@njit(inline="always")
def _tile(t, L, N, rows_per_tile, cols_per_tile):
    """Task ``t`` of :func:`_tile_count`'s tiles: ``(p0, p1, j0, j1)``, rows ``p0:p1`` of
    the list, columns ``j0:j1`` (row-major over the tiles)."""
    nj = (N + cols_per_tile - 1) // cols_per_tile
    p0 = (t // nj) * rows_per_tile
    j0 = (t % nj) * cols_per_tile
    return p0, min(L, p0 + rows_per_tile), j0, min(N, j0 + cols_per_tile)


@njit(fastmath={"contract"}, inline="always")
def _fast_tile(a, b, ia, ib, rb, ri, trunc, acc, p0, p1, j0, j1, depth_per_tile):
    """Rows rb/ri[p0:p1], columns j0:j1 of the fast path (see _fast_rows)."""
    K = a.shape[2]
    for p in range(p0, p1):
        acc[rb[p], ri[p], j0:j1] = 0.0
    for k0 in range(0, K, depth_per_tile):
        k1 = min(K, k0 + depth_per_tile)
        p = p0
        while p < p1:
            n = rb[p]
            bb = b[ib[n]]
            ar = a[ia[n], ri[p]]
            c = acc[n, ri[p], j0:j1]
            pair = p + 1 < p1 and ib[rb[p + 1]] == ib[n]
            er = ar
            d = c
            if pair:
                n2 = rb[p + 1]
                er = a[ia[n2], ri[p + 1]]
                d = acc[n2, ri[p + 1], j0:j1]
            k = k0
            while k + 4 <= k1:
                b0 = bb[k, j0:j1]
                b1 = bb[k + 1, j0:j1]
                b2 = bb[k + 2, j0:j1]
                b3 = bb[k + 3, j0:j1]
                if trunc:
                    if pair:
                        _floor4x2(
                            c,
                            d,
                            b0,
                            b1,
                            b2,
                            b3,
                            ar[k] * SCALE,
                            ar[k + 1] * SCALE,
                            ar[k + 2] * SCALE,
                            ar[k + 3] * SCALE,
                            er[k] * SCALE,
                            er[k + 1] * SCALE,
                            er[k + 2] * SCALE,
                            er[k + 3] * SCALE,
                        )
                    else:
                        _floor4(
                            c,
                            b0,
                            b1,
                            b2,
                            b3,
                            ar[k] * SCALE,
                            ar[k + 1] * SCALE,
                            ar[k + 2] * SCALE,
                            ar[k + 3] * SCALE,
                        )
                else:
                    if pair:
                        _rne4x2(
                            c,
                            d,
                            b0,
                            b1,
                            b2,
                            b3,
                            ar[k] * SCALE,
                            ar[k + 1] * -SCALE,
                            ar[k + 2] * SCALE,
                            ar[k + 3] * -SCALE,
                            er[k] * SCALE,
                            er[k + 1] * -SCALE,
                            er[k + 2] * SCALE,
                            er[k + 3] * -SCALE,
                        )
                    else:
                        _rne4(
                            c,
                            b0,
                            b1,
                            b2,
                            b3,
                            ar[k] * SCALE,
                            ar[k + 1] * -SCALE,
                            ar[k + 2] * SCALE,
                            ar[k + 3] * -SCALE,
                        )
                k += 4
            while k < k1:
                b0 = bb[k, j0:j1]
                if trunc:
                    _floor1(c, b0, ar[k] * SCALE)
                    if pair:
                        _floor1(d, b0, er[k] * SCALE)
                else:
                    _rne1(c, b0, ar[k] * SCALE)
                    if pair:
                        _rne1(d, b0, er[k] * SCALE)
                k += 1
            p += 2 if pair else 1


@njit(parallel=True, fastmath={"contract"}, cache=True)
def _fast_rows(a, b, ia, ib, rb, ri, trunc, acc, rows_per_tile, cols_per_tile, depth_per_tile, workers):
    """acc[rb[p], ri[p], :] = sum_k round(a*b) in any order, for rows that cannot clamp.

    Each ``a`` scalar is scaled by 2**16 as it is loaded (exact), so products come out in
    grid units.  Rows are taken from the list (rb, ri); two consecutive rows sharing their
    ``b`` batch are computed together (one load of ``b`` feeds both).  Tiles of rows x
    columns are the tasks of the work queue; depth is blocked for cache.
    """
    L, N = rb.size, b.shape[2]
    ntasks = _tile_count(L, N, rows_per_tile, cols_per_tile)
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            p0, p1, j0, j1 = _tile(t, L, N, rows_per_tile, cols_per_tile)
            _fast_tile(a, b, ia, ib, rb, ri, trunc, acc, p0, p1, j0, j1, depth_per_tile)


@njit(fastmath={"contract"}, inline="always")
def _dot_fast(ar, bb, j, trunc):
    """sum_k round(ar[k] * 2**16 * bb[k, j]) in any order: four independent partial sums."""
    K = ar.size
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    k = 0
    if trunc:
        while k + 8 <= K:
            s0 += np.floor(ar[k] * SCALE * bb[k, j]) + np.floor(ar[k + 1] * SCALE * bb[k + 1, j])
            s1 += np.floor(ar[k + 2] * SCALE * bb[k + 2, j]) + np.floor(ar[k + 3] * SCALE * bb[k + 3, j])
            s2 += np.floor(ar[k + 4] * SCALE * bb[k + 4, j]) + np.floor(ar[k + 5] * SCALE * bb[k + 5, j])
            s3 += np.floor(ar[k + 6] * SCALE * bb[k + 6, j]) + np.floor(ar[k + 7] * SCALE * bb[k + 7, j])
            k += 8
        while k < K:
            s0 += np.floor(ar[k] * SCALE * bb[k, j])
            k += 1
    else:
        while k + 8 <= K:
            s0 += (ar[k] * SCALE * bb[k, j] + MAGIC) - (ar[k + 1] * -SCALE * bb[k + 1, j] + MAGIC)
            s1 += (ar[k + 2] * SCALE * bb[k + 2, j] + MAGIC) - (ar[k + 3] * -SCALE * bb[k + 3, j] + MAGIC)
            s2 += (ar[k + 4] * SCALE * bb[k + 4, j] + MAGIC) - (ar[k + 5] * -SCALE * bb[k + 5, j] + MAGIC)
            s3 += (ar[k + 6] * SCALE * bb[k + 6, j] + MAGIC) - (ar[k + 7] * -SCALE * bb[k + 7, j] + MAGIC)
            k += 8
        while k < K:
            s0 += (ar[k] * SCALE * bb[k, j] + MAGIC) - MAGIC
            k += 1
    return (s0 + s1) + (s2 + s3)


@njit(parallel=True, fastmath={"contract"}, cache=True)
def _fast_dots(a, b, ia, ib, rb, ri, trunc, acc, workers):
    """:func:`_fast_rows` for narrow outputs (few columns): one dot product per element
    (four independent partial sums, the same pairing).  Tasks: ITEMS_PER_TASK rows.  Only
    for rows that cannot clamp (any order is exact)."""
    N = b.shape[2]
    L = rb.size
    ntasks = (L + ITEMS_PER_TASK - 1) // ITEMS_PER_TASK
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            for p in range(t * ITEMS_PER_TASK, min(L, (t + 1) * ITEMS_PER_TASK)):
                n = rb[p]
                i = ri[p]
                ar = a[ia[n], i]
                bb = b[ib[n]]
                for j in range(N):
                    acc[n, i, j] = _dot_fast(ar, bb, j, trunc)


def _fast(a, b, ia, ib, rb, ri, trunc, acc):
    """The fast path for the rows (rb, ri): row tiles, or dot products when N is narrow."""
    if b.shape[2] <= NARROW_COLS:
        _fast_dots(a, b, ia, ib, rb, ri, trunc, acc, parallel.workers())
    else:
        _fast_rows(
            a, b, ia, ib, rb, ri, trunc, acc, ROWS_PER_TILE, COLS_PER_TILE, DEPTH_PER_TILE, parallel.workers()
        )


@njit(fastmath={"contract"}, inline="always")
def _exact_tile(a, b, ia, ib, rb, ri, trunc, acc, flag, p0, p1, j0, j1, depth_per_tile):
    """Rows rb/ri[p0:p1], columns j0:j1 of the exact row path (see _exact_rows)."""
    K = a.shape[2]
    fb = np.zeros((p1 - p0, j1 - j0))
    for p in range(p0, p1):
        acc[rb[p], ri[p], j0:j1] = 0.0
    for k0 in range(0, K, depth_per_tile):
        k1 = min(K, k0 + depth_per_tile)
        for p in range(p0, p1):
            n = rb[p]
            bb = b[ib[n]]
            ar = a[ia[n], ri[p]]
            c = acc[n, ri[p], j0:j1]
            f = fb[p - p0]
            for k in range(k0, k1):
                if trunc:
                    _clamp_floor(c, f, bb[k, j0:j1], ar[k] * SCALE)
                else:
                    _clamp_rne(c, f, bb[k, j0:j1], ar[k] * SCALE)
    for p in range(p0, p1):
        fl = flag[rb[p], ri[p], j0:j1]
        f = fb[p - p0]
        for j in range(fl.size):
            fl[j] = np.int8(f[j])


@njit(parallel=True, fastmath={"contract"}, cache=True)
def _exact_rows(
    a, b, ia, ib, rb, ri, trunc, acc, flag, rows_per_tile, cols_per_tile, depth_per_tile, workers
):
    """The serial definition for whole rows: k = 0..K-1, clamp and flag at every step.

    Vectorized across the row (each column is an independent accumulator); the flags
    live in a float64 tile buffer so the step vectorizes, and are stored as int8 at the
    end.  Tiles of rows x columns are the tasks of the work queue.
    """
    L, N = rb.size, b.shape[2]
    ntasks = _tile_count(L, N, rows_per_tile, cols_per_tile)
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            p0, p1, j0, j1 = _tile(t, L, N, rows_per_tile, cols_per_tile)
            _exact_tile(a, b, ia, ib, rb, ri, trunc, acc, flag, p0, p1, j0, j1, depth_per_tile)


@njit(fastmath={"contract"}, inline="always")
def _dot_exact(ar, bb, j, trunc):
    """The serial definition for one output: returns (accumulator, flag)."""
    s = 0.0
    f = 0
    for k in range(ar.size):
        s += _round_product((ar[k] * SCALE) * bb[k, j], trunc)
        if s > ACC_MAX:
            s = ACC_MAX
            f = 1
        elif s < ACC_MIN:
            s = ACC_MIN
            f = -1
    return s, f


@njit(parallel=True, fastmath={"contract"}, cache=True)
def _exact_elements(a, b, ia, ib, eb, ei, ej, trunc, acc, flag, workers):
    """The serial definition, one output element at a time: (eb[q], ei[q], ej[q]).
    Tasks: ITEMS_PER_TASK elements."""
    L = eb.size
    ntasks = (L + ITEMS_PER_TASK - 1) // ITEMS_PER_TASK
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            for q in range(t * ITEMS_PER_TASK, min(L, (t + 1) * ITEMS_PER_TASK)):
                n = eb[q]
                s, f = _dot_exact(a[ia[n], ei[q]], b[ib[n]], ej[q], trunc)
                acc[n, ei[q], ej[q]] = s
                flag[n, ei[q], ej[q]] = f


# ---------------------------------------------------------------- entry points
def matmul_q16_into(a, b, ia, ib, trunc, acc, flag, bmax=None):
    """:func:`matmul_q16` writing into ``acc`` (float64[B, M, N]) and ``flag`` (int8).

    ``bmax``: optional float64[BB], ``max |b[n]|`` per ``b`` batch (NaN if ``b[n]`` holds a
    NaN) when the caller already has it (the conv kernel computes it while unfolding).

    Returns how the work was split: ``(fast rows, exact rows, exact single elements)``
    (a row on the fast path may also have single elements recomputed exactly).
    """
    B = ia.shape[0]
    BA, M, K = a.shape
    N = b.shape[2]
    trunc = bool(trunc)
    flag[...] = 0
    if B * M * N == 0:
        return 0, 0, 0
    if K == 0:
        acc[...] = 0.0
        return B * M, 0, 0
    with parallel.threads_for(B * M * N * K, SERIAL_MACS):
        return _matmul_planned(a, b, ia, ib, trunc, acc, flag, bmax)


def _matmul_planned(a, b, ia, ib, trunc, acc, flag, bmax):
    B = ia.shape[0]
    BA, M, K = a.shape
    N = b.shape[2]
    rsum = np.empty((BA, M))
    rmax = np.empty((BA, M))
    have_bmax = bmax is not None
    if not have_bmax:
        bmax = np.empty(b.shape[0])
    unsafe_rows = np.empty((B, M), np.bool_)
    if _plan_rows(a, b, ia, ib, bmax, have_bmax, rsum, rmax, unsafe_rows) == 0:
        rb, ri = np.divmod(np.arange(B * M, dtype=np.int64), M)
        _fast(a, b, ia, ib, rb, ri, trunc, acc)
        return B * M, 0, 0
    csum = np.empty((b.shape[0], N))
    cmax = np.empty((b.shape[0], N))
    _col_abs_stats(b, csum, cmax)
    unsafe = np.zeros((B, M, N), np.bool_)
    _element_unsafe(rsum, rmax, csum, cmax, ia, ib, K, unsafe_rows, unsafe)
    if unsafe.any():
        _blas_refine(a, b, ia, ib, K, unsafe)
    count = unsafe.sum(axis=2)
    exact_row = count * FIX_RATIO > N
    rb, ri = np.nonzero(~exact_row)
    n_fast = rb.size
    if rb.size:
        _fast(a, b, ia, ib, rb.astype(np.int64), ri.astype(np.int64), trunc, acc)
    rb, ri = np.nonzero(exact_row)
    n_exact = rb.size
    if rb.size:
        _exact_rows(
            a,
            b,
            ia,
            ib,
            rb.astype(np.int64),
            ri.astype(np.int64),
            trunc,
            acc,
            flag,
            ROWS_PER_TILE,
            COLS_PER_TILE,
            DEPTH_PER_TILE,
            parallel.workers(),
        )
    eb, ei, ej = np.nonzero(unsafe & ~exact_row[:, :, None])
    if eb.size:
        _exact_elements(
            a,
            b,
            ia,
            ib,
            eb.astype(np.int64),
            ei.astype(np.int64),
            ej.astype(np.int64),
            trunc,
            acc,
            flag,
            parallel.workers(),
        )
    return n_fast, n_exact, eb.size


def matmul_q16(a, b, ia, ib, trunc):
    """Batched fp16 matmul on the Q16.16 accumulator; returns ``(acc, flag)``.

    ``a``: float64[BA, M, K], ``b``: float64[BB, K, N] (C-contiguous, exact fp16 values);
    ``ia``, ``ib``: int64[B], output batch -> ``a`` / ``b`` batch; ``trunc``: round the
    products by floor instead of half to even.  ``acc``: float64[B, M, N] in grid units
    (integer-valued; NaN where a NaN product occurred); ``flag``: int8[B, M, N]
    (0 never clamped, +1 / -1 most recent clamp at the top / bottom).
    """
    B = ia.shape[0]
    M = a.shape[1]
    N = b.shape[2]
    acc = np.empty((B, M, N))
    flag = np.empty((B, M, N), np.int8)
    matmul_q16_into(a, b, ia, ib, trunc, acc, flag)
    return acc, flag
