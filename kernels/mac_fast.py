"""The MAC array's fast path (see :mod:`fastane.kernels.mac`, "fast path"): the any-order,
float64 sums of rows that cannot clamp -- row tiles vectorized across the output row
(:func:`_fast_rows`) and dot products for narrow outputs (:func:`_fast_dots`), and the
tile geometry the row kernels share."""

import numpy as np
from numba import njit, prange

from .acc import MAGIC, SCALE
from .parallel import claim, new_queue
from .simd import wide_vectors

# Tasks of the per-element kernels (_fast_dots: rows; mac_exact._exact_elements: elements).
ITEMS_PER_TASK = 16


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


@njit(inline="always")
def _item_tasks(L):
    """Tasks of the per-element kernels over ``L`` items: ITEMS_PER_TASK items each."""
    return (L + ITEMS_PER_TASK - 1) // ITEMS_PER_TASK


@njit(inline="always")
def _items(t, L):
    """Task ``t`` of :func:`_item_tasks`: items ``q0:q1``."""
    return t * ITEMS_PER_TASK, min(L, (t + 1) * ITEMS_PER_TASK)


@njit(inline="always")
def _pairs_next(p, p1, rb, ib):
    """True when listed row ``p + 1`` is in the tile (``p1``: its end) and shares row ``p``'s
    ``b`` batch: the row kernels compute the two together (one load of ``b`` feeds both)."""
    return p + 1 < p1 and ib[rb[p + 1]] == ib[rb[p]]


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
            pair = _pairs_next(p, p1, rb, ib)
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
    counter = new_queue()
    for _ in prange(workers):
        wide_vectors()
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
    ntasks = _item_tasks(L)
    counter = new_queue()
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            q0, q1 = _items(t, L)
            for p in range(q0, q1):
                n = rb[p]
                i = ri[p]
                ar = a[ia[n], i]
                bb = b[ib[n]]
                for j in range(N):
                    acc[n, i, j] = _dot_fast(ar, bb, j, trunc)
