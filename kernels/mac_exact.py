"""The MAC array's exact path (see :mod:`fastane.kernels.mac`, "exact path"): the serial
definition, k = 0..K-1 with the clamp and the flag at every step, for whole rows
(:func:`_exact_rows`, vectorized across the row) and single elements
(:func:`_exact_elements`)."""

import numpy as np
from numba import njit, prange

from .acc import ACC_MAX, ACC_MIN, MAGIC, SCALE, saturate
from .mac_fast import _item_tasks, _items, _tile, _tile_count
from .parallel import claim, new_queue


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
    counter = new_queue()
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
        s, f = saturate(s + _round_product((ar[k] * SCALE) * bb[k, j], trunc), f)
    return s, f


@njit(parallel=True, fastmath={"contract"}, cache=True)
def _exact_elements(a, b, ia, ib, eb, ei, ej, trunc, acc, flag, workers):
    """The serial definition, one output element at a time: (eb[q], ei[q], ej[q]).
    Tasks: ITEMS_PER_TASK elements."""
    L = eb.size
    ntasks = _item_tasks(L)
    counter = new_queue()
    for _ in prange(workers):
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            q0, q1 = _items(t, L)
            for q in range(q0, q1):
                n = eb[q]
                s, f = _dot_exact(a[ia[n], ei[q]], b[ib[n]], ej[q], trunc)
                acc[n, ei[q], ej[q]] = s
                flag[n, ei[q], ej[q]] = f


@njit(fastmath={"contract"}, cache=True)
def _exact_all(a, b, ia, ib, trunc, acc, flag):
    """The serial definition for every output, on the calling thread (small work: no
    bounds to plan, no parallel region; :func:`fastane.kernels.mac.matmul_q16_small`)."""
    for n in range(ia.size):
        aa = a[ia[n]]
        bb = b[ib[n]]
        for i in range(aa.shape[0]):
            for j in range(bb.shape[1]):
                s, f = _dot_exact(aa[i], bb, j, trunc)
                acc[n, i, j] = s
                flag[n, i, j] = f
