"""The MAC array's arithmetic (SPEC section 2): fp16 products, a saturating Q16.16
accumulator in a fixed time order, fp16 readout.

Entry points (fixed interface, used by the front end and the device engine)::

    acc, flag = matmul_q16(a, b, ia, ib, trunc)
    readout(acc, flag, out)
    matmul_q16_small(a, b, ia, ib, trunc, acc, flag)  # small work (SMALL_MACS), float64 b
    took = matmul_q16_sums(a, b, ia, ib, trunc, sums, acc, flag)  # int32 sums when it can

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
* **float32 fast path.**  Rows on the fast path whose every product is at most
  ``2**22`` grid units (``max|a_i| * max|b| <= 64``, tested exactly) take the kernel of
  :mod:`fastane.kernels.mac_f32` instead: ``t = fma(a*2**16, b, 1.5*2**23)`` in float32
  is ``1.5*2**23 + rne(p)`` exactly, its bit pattern read as an int32 is
  ``0x4b400000 + rne(p)``, and int32 lanes add those patterns with wrap-around; the
  no-clamp bound keeps the true sum within int32, so subtracting ``K * 0x4b400000``
  (modulo ``2**32``) gives it exactly (the proof, step by step, is that module's
  docstring and docs/numerics.md).  One FMA and one integer add per multiply-add in
  16-lane vectors.  ``b`` may be given as float32 or float16 (resident weights);
  otherwise a copy of its fp16 patterns is made.  When every row takes it,
  :func:`matmul_q16_sums` leaves those int32 sums (no float64 accumulators, no flags:
  nothing clamped or NaN);
* bounds, cheapest first: per row ``sum_k |a_ik| * max|b|``; for rows that fail it, per
  element ``min(sum_k|a_ik| * max_k|b_kj|, max_k|a_ik| * sum_k|b_kj|)``; for elements
  that still fail, ``|A| @ |B|`` with BLAS (single-threaded, so that OpenBLAS's spinning
  threads cannot steal the cores of Numba's threads).  NaN or inf operands make every
  bound NaN or inf, so they always take the exact path;
* **exact path.**  Elements that may clamp are recomputed in the serial order with the
  per-step clamp: whole rows (vectorized across the row) when many of a row's elements
  need it, one element at a time otherwise;
* **small work** (at most ``SMALL_MACS`` multiply-adds in all, e.g. a tiny matmul or one
  small task on the device): :func:`matmul_q16_small` runs the serial definition itself
  for every output, on the calling thread -- planning the split costs more than the
  arithmetic there (one 4 x 4 x 4 task on the loaded 2-core machine: about 30 us through
  ``matmul_q16_into``, about 2 us through ``matmul_q16_small``);
* **threads.**  The parallel kernels hand out tiles through a shared atomic counter (a
  work queue: a thread that loses its core does fewer tiles instead of stalling the
  call); work below ``SERIAL_MACS`` multiply-adds runs on the calling thread alone.
  Numpy's BLAS (for the bound only) runs single-threaded.

Kernels assume valid input (shapes, dtypes, contiguity, index ranges): validation
belongs to the front end.  ``matmul_q16`` is a Python function that plans the work and
calls the Numba kernels (``@njit(cache=True)``, nopython); call it from Python.
"""

import numpy as np

from . import parallel
from .acc import (  # re-exported: the entry points of the docstring
    ACC_MAX,
    ACC_MIN,
    MAGIC,
    SCALE,
    readout,
    readout_counts,
    readout_unrounded,
    readout_value,
    saturate,
)
from .bounds import (  # re-exported: tests use them
    BOUND_MARGIN,
    _abs_max,
    _blas_refine,
    _col_abs_stats,
    _element_unsafe,
    _plan_rows,
    _row_abs_stats,
    _row_abs_stats_par,
)
from .mac_exact import _dot_exact, _exact_all, _exact_elements, _exact_rows, _exact_tile  # noqa: F401 (re-exported)
from .mac_f32 import F32_PRODUCT_LIMIT, _fast32_rows, f16_patterns
from .mac_fast import ITEMS_PER_TASK, _dot_fast, _fast_dots, _fast_rows, _fast_tile  # noqa: F401

# Row/column/depth blocking of the fast and exact kernels (measured on a 2-core Zen 3).
ROWS_PER_TILE = 32
COLS_PER_TILE = 1024
DEPTH_PER_TILE = 16
# ... of the float32 fast path (int32 accumulators: half the bytes per column); its depth
# depends on how b is held: float32, or fp16 patterns (half the bytes: a deeper block of b
# stays in cache).  Measured on the 2-core Zen 5 at 1024^3: fp16 patterns at depth 128 run
# 1.5x the float32 operand at depth 32; tiles of 8 rows and depth 256 then ran ResNet-50's
# layer shapes 1.02-1.16x faster than 32 rows and depth 128 (more tiles to share between
# the threads: a 112-row layer made 4 tiles of 32), 64 x 2048 x 2048 1.12x, 1024^3 the same.
ROWS32_PER_TILE = 8
COLS32_PER_TILE = 512
DEPTH32_PER_TILE = 32
DEPTH16_PER_TILE = 256
# Outputs this narrow (columns) take dot products instead of row tiles on the fast path.
NARROW_COLS = 8
# Work below this many multiply-adds runs on the calling thread alone (see parallel.threads_for).
SERIAL_MACS = 1 << 20
# Work up to this many multiply-adds may take matmul_q16_small (the serial definition on
# the calling thread, no bounds; the device's small tasks take it: fastane.device.mac).
SMALL_MACS = 1 << 12
# Left operands of at least this many elements have their row statistics (the bounds)
# computed across the threads (bounds._row_abs_stats_par), smaller ones on the caller's.
ROW_STATS_PARALLEL = 1 << 18
# A row goes to the vectorized exact kernel when more than 1/FIX_RATIO of its elements
# need the exact path; otherwise those elements are recomputed one at a time.
FIX_RATIO = 8


def _fast(a, b, ia, ib, rb, ri, trunc, acc, ok32, b32, sums=None) -> bool:
    """The fast path for the rows (rb, ri): row tiles, or dot products when N is narrow.

    ``b``: a function returning the float64 ``b`` (made from ``b32`` only when needed);
    ``b32``: the same values as float32 or as fp16 patterns (uint16), or None (then an
    fp16-pattern copy is made here, if a row takes the float32 kernel).  ``ok32``:
    bool[B, M], the rows whose products the float32 kernel rounds exactly
    (:func:`_ok32`); those take it, the others the float64 kernels.  ``sums``: int32
    [B, M, N] or None: when every row takes the float32 kernel, its exact sums are left
    there (``acc`` untouched) and True is returned; otherwise False, ``acc`` written."""
    if (b32 if b32 is not None else b()).shape[2] <= NARROW_COLS:
        _fast_dots(a, b(), ia, ib, rb, ri, trunc, acc, parallel.workers())
        return False
    sel = ok32[rb, ri]
    if sel.all():
        rb32, ri32 = rb, ri
        rb = ri = rb[:0]
    else:
        rb32, ri32, rb, ri = rb[sel], ri[sel], rb[~sel], ri[~sel]
    whole = rb32.size == acc.shape[0] * acc.shape[1]  # every row
    if rb32.size:
        if b32 is None:
            b64 = b()
            b32 = np.empty(b64.shape, np.uint16)
            f16_patterns(np.ascontiguousarray(b64), b32)  # exact: fp16 values (one pass)
        if whole and sums is not None:
            _fast32(a, b32, ia, ib, rb32, ri32, trunc, sums)
            return True
        s32 = np.empty(acc.shape, np.int32)
        _fast32(a, b32, ia, ib, rb32, ri32, trunc, s32)
        if whole:
            acc[...] = s32
        else:
            acc[rb32, ri32] = s32[rb32, ri32]
    if rb.size:
        _fast_rows(
            a,
            b(),
            ia,
            ib,
            rb,
            ri,
            trunc,
            acc,
            ROWS_PER_TILE,
            COLS_PER_TILE,
            DEPTH_PER_TILE,
            parallel.workers(),
        )
    return False


def _fast32(a, b32, ia, ib, rb, ri, trunc, acc):
    """:func:`_fast32_rows` on the rows (rb, ri), its depth blocking by how ``b`` is held."""
    depth = DEPTH16_PER_TILE if b32.dtype == np.uint16 else DEPTH32_PER_TILE
    _fast32_rows(
        a, b32, ia, ib, rb, ri, trunc, acc, ROWS32_PER_TILE, COLS32_PER_TILE, depth, parallel.workers()
    )


def _ok32(rmax, bmax, ia, ib):
    """bool[B, M]: the rows the float32 fast path may take (every product small)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (rmax[ia] * bmax[ib][:, None]) * SCALE <= F32_PRODUCT_LIMIT  # exact; NaN: False


_NO_B64 = np.zeros((1, 1, 1))  # the b of _plan_rows when it is not read (bmax given)


# ---------------------------------------------------------------- entry points
def matmul_q16_into(a, b, ia, ib, trunc, acc, flag, bmax=None):
    """:func:`matmul_q16` writing into ``acc`` (float64[B, M, N]) and ``flag`` (int8).

    ``bmax``: optional float64[BB], ``max |b[n]|`` per ``b`` batch (NaN if ``b[n]`` holds a
    NaN) when the caller already has it (the conv kernel computes it while unfolding).
    ``b`` may also be float32 or float16 (the same values: resident weights kept in half
    or a quarter of the bytes), which the float32 fast path reads directly (float16 as
    its bit patterns, decoded as they are loaded); the other paths then work on a float64
    copy made when (and only if) they run.

    Returns how the work was split: ``(fast rows, exact rows, exact single elements)``
    (a row on the fast path may also have single elements recomputed exactly).
    """
    return _matmul(a, b, ia, ib, trunc, acc, flag, bmax, None)


def matmul_q16_sums(a, b, ia, ib, trunc, sums, acc, flag, bmax=None) -> bool:
    """:func:`matmul_q16_into` that leaves the float32 fast path's int32 sums when every
    output takes it: True when so, the exact, unclamped sums (grid units) then in
    ``sums`` (int32[B, M, N]; ``acc`` and ``flag`` untouched: no output is NaN or
    clamped), to be read out by :func:`fastane.kernels.ne.readout_sums` (half the bytes
    of ``acc``, and no flags); False when not, the result then in ``acc`` and ``flag``.
    ``sums`` must not overlap ``a`` or ``b`` (the fast path's threads write it as a
    ``noalias`` argument, ``fastane.kernels.mac_f32``)."""
    return _matmul(a, b, ia, ib, trunc, acc, flag, bmax, sums) is None


def _matmul(a, b, ia, ib, trunc, acc, flag, bmax, sums):
    B = ia.shape[0]
    BA, M, K = a.shape
    N = b.shape[2]
    trunc = bool(trunc)
    if B * M * N == 0 or K == 0:
        flag[...] = 0
        acc[...] = 0.0
        return (B * M if K == 0 else 0), 0, 0
    with parallel.threads_for(B * M * N * K, SERIAL_MACS):
        return _matmul_planned(a, b, ia, ib, trunc, acc, flag, bmax, sums)


def _matmul_planned(a, b_in, ia, ib, trunc, acc, flag, bmax, sums):
    """The plan and the kernels of :func:`_matmul`; None when the sums were left in ``sums``."""
    B = ia.shape[0]
    BA, M, K = a.shape
    N = b_in.shape[2]
    if b_in.dtype == np.float64:
        b32 = None
    else:  # float32, or float16 read as its bit patterns
        b32 = b_in.view(np.uint16) if b_in.dtype == np.float16 else b_in
    kept = [None if b32 is not None else b_in]

    def b64():
        if kept[0] is None:
            kept[0] = b_in.astype(np.float64)  # exact
        return kept[0]

    rsum = np.empty((BA, M))
    rmax = np.empty((BA, M))
    have_bmax = bmax is not None
    if not have_bmax:
        bmax = np.empty(b_in.shape[0])
    unsafe_rows = np.empty((B, M), np.bool_)
    have_rows = a.size >= ROW_STATS_PARALLEL and parallel.workers() > 1
    if have_rows:
        _row_abs_stats_par(a, rsum, rmax)
    b_rows = _NO_B64 if have_bmax else b64()
    if _plan_rows(a, b_rows, ia, ib, bmax, have_bmax, rsum, rmax, unsafe_rows, have_rows) == 0:
        rb, ri = np.divmod(np.arange(B * M, dtype=np.int64), M)
        if _fast(a, b64, ia, ib, rb, ri, trunc, acc, _ok32(rmax, bmax, ia, ib), b32, sums):
            return None
        flag[...] = 0  # the fast path clamps nowhere
        return B * M, 0, 0
    flag[...] = 0  # the exact paths set the flags of what they recompute
    b = b64()
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
        _fast(
            a,
            b64,
            ia,
            ib,
            rb.astype(np.int64),
            ri.astype(np.int64),
            trunc,
            acc,
            _ok32(rmax, bmax, ia, ib),
            b32,
        )
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


def matmul_q16_small(a, b, ia, ib, trunc, acc, flag) -> None:
    """:func:`matmul_q16_into` for small work (``SMALL_MACS``): the serial definition,
    ``k = 0..K-1`` with the clamp and the flag at every step, for every output, on the
    calling thread -- by definition the same bits as every other path.  ``b`` is
    float64 here (the device's decoded weights or its unfolded columns)."""
    _exact_all(a, b, ia, ib, bool(trunc), acc, flag)


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
