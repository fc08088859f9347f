"""The MAC array's no-clamp bounds (see :mod:`fastane.kernels.mac`, "bounds, cheapest
first"): row and column statistics of ``|a|`` and ``|b|``, the per-row and per-element
bounds, and their BLAS refinement.  A bound that holds proves that no accumulation step
clamps, so the fast path's sum is exact."""

import contextlib

import numpy as np
from numba import njit, prange

from .acc import ACC_MAX, SCALE
from .parallel import nan_max

BOUND_MARGIN = 1.0 + 2.0**-20  # covers the float error of the bounds for K < 2**30


@njit
def _abs_stats(r):
    """``(sum |r[k]|, max |r[k]|)`` of one row (NaN propagates): the one definition both
    row kernels below use, so they give the same values.  The sum runs in eight
    interleaved partial sums (``k mod 8``), added pairwise at the end: a fixed order, so
    the same values on every call, and eight independent chains instead of one, so it is
    not bound by the add's latency.  Any order is as good a bound: BOUND_MARGIN covers
    the float error of a sum of K terms in any order."""
    n = r.size
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    m0 = m1 = m2 = m3 = 0.0
    k = 0
    while k + 8 <= n:
        v0, v1, v2, v3 = abs(r[k]), abs(r[k + 1]), abs(r[k + 2]), abs(r[k + 3])
        v4, v5, v6, v7 = abs(r[k + 4]), abs(r[k + 5]), abs(r[k + 6]), abs(r[k + 7])
        s0 += v0
        s1 += v1
        s2 += v2
        s3 += v3
        s4 += v4
        s5 += v5
        s6 += v6
        s7 += v7
        m0 = nan_max(m0, nan_max(v0, v4))
        m1 = nan_max(m1, nan_max(v1, v5))
        m2 = nan_max(m2, nan_max(v2, v6))
        m3 = nan_max(m3, nan_max(v3, v7))
        k += 8
    while k < n:
        v = abs(r[k])
        s0 += v
        m0 = nan_max(m0, v)
        k += 1
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    return s, nan_max(nan_max(m0, m1), nan_max(m2, m3))


@njit(cache=True)
def _row_abs_stats(a, rsum, rmax):
    """rsum[n, i] = sum_k |a[n, i, k]|, rmax[n, i] = max_k |a[n, i, k]| (NaN propagates).

    Serial on purpose: one pass over ``a`` is cheap next to the matmul, and a parallel
    region costs a thread hand-off (and, on a busy machine, a scheduler slice)."""
    BA, M, K = a.shape
    for n in range(BA):
        for i in range(M):
            rsum[n, i], rmax[n, i] = _abs_stats(a[n, i])


@njit(parallel=True, cache=True)
def _row_abs_stats_par(a, rsum, rmax):
    """:func:`_row_abs_stats` with the rows split across Numba's threads (each row summed
    in the same order: the same values), for a large ``a`` (``ROW_STATS_PARALLEL``)."""
    BA, M, K = a.shape
    for t in prange(BA * M):
        n = t // M
        i = t - n * M
        rsum[n, i], rmax[n, i] = _abs_stats(a[n, i])


@njit(parallel=True, cache=True)
def _col_abs_stats(b, csum, cmax):
    """csum[n, j] = sum_k |b[n, k, j]|, cmax[n, j] = max_k |b[n, k, j]| (NaN propagates)."""
    BB, K, N = b.shape
    for n in prange(BB):
        s = csum[n]
        m = cmax[n]
        s[:] = 0.0
        m[:] = 0.0
        for k in range(K):
            r = b[n, k]
            for j in range(N):
                v = abs(r[j])
                s[j] += v
                m[j] = nan_max(m[j], v)


@njit(cache=True)
def _abs_max(b, out):
    """out[n] = max |b[n]| (NaN propagates)."""
    for n in range(b.shape[0]):
        x = b[n].ravel()
        m = 0.0
        for t in range(x.size):
            v = abs(x[t])
            m = nan_max(m, v)
        out[n] = m


@njit(cache=True)
def _safe(bound, K):
    """True when ``bound`` >= sum_k |a_k b_k| (in value units) proves that no step clamps:
    the rounded products then sum to at most ``bound * 2**16 + K`` grid units."""
    return bound * (SCALE * BOUND_MARGIN) + K <= ACC_MAX  # False for NaN


@njit(cache=True)
def _plan_rows(a, b, ia, ib, bmax, have_bmax, rsum, rmax, unsafe_rows, have_rows=False):
    """Row statistics of ``a`` (unless ``have_rows``: the caller filled ``rsum``/``rmax``),
    ``max|b|`` per batch (unless given), and the cheap row bound: unsafe_rows[n, i] when
    sum_k|a_ik| * max|b| does not prove that no step clamps.  Returns the number of
    unsafe rows.  (One call: a tiny matmul pays one dispatch.)"""
    if not have_rows:
        _row_abs_stats(a, rsum, rmax)
    if not have_bmax:
        _abs_max(b, bmax)
    K = a.shape[2]
    count = 0
    for n in range(unsafe_rows.shape[0]):
        for i in range(unsafe_rows.shape[1]):
            u = not _safe(rsum[ia[n], i] * bmax[ib[n]], K)
            unsafe_rows[n, i] = u
            count += u
    return count


@njit(cache=True)
def _element_unsafe(rsum, rmax, csum, cmax, ia, ib, K, unsafe_rows, unsafe):
    """unsafe[n, i, j] for the rows flagged in unsafe_rows, by the two per-element bounds."""
    N = unsafe.shape[2]
    for n in range(unsafe.shape[0]):
        for i in range(unsafe.shape[1]):
            if not unsafe_rows[n, i]:
                continue
            rs = rsum[ia[n], i]
            rm = rmax[ia[n], i]
            cs = csum[ib[n]]
            cm = cmax[ib[n]]
            for j in range(N):
                unsafe[n, i, j] = not (_safe(rs * cm[j], K) or _safe(rm * cs[j], K))


_BLAS_CONTROLLER = []  # [threadpoolctl.ThreadpoolController] once created (or [None])


def _blas_single_thread():
    """A context manager limiting numpy's BLAS to one thread (no-op without threadpoolctl)."""
    if not _BLAS_CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROLLER.append(ThreadpoolController())
        except ImportError:  # pragma: no cover - speed only, never correctness
            _BLAS_CONTROLLER.append(None)
    ctl = _BLAS_CONTROLLER[0]
    return contextlib.nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")


def _blas_refine(a, b, ia, ib, K, unsafe):
    """Clear unsafe[n, i, j] where the exact-order bound (|A| @ |B|)[i, j] proves safety.

    Runs numpy's BLAS single-threaded (threadpoolctl): OpenBLAS threads keep spinning
    after a call and would take both cores from Numba's threads.
    """
    with _blas_single_thread():
        abs_b = {}
        for n in range(unsafe.shape[0]):
            rows = np.flatnonzero(unsafe[n].any(axis=1))
            if rows.size == 0:
                continue
            key = int(ib[n])
            if key not in abs_b:
                abs_b[key] = np.abs(b[key])
            with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 -> NaN: unsafe
                bound = np.abs(a[ia[n]][rows]) @ abs_b[key]
                safe = bound * (SCALE * BOUND_MARGIN) + K <= ACC_MAX
            unsafe[n, rows] &= ~safe
