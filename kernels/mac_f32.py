"""The MAC array's float32 fast path (see :mod:`fastane.kernels.mac`, "float32 fast path"):
rows that cannot clamp and whose every product is small, summed exactly in int32 lanes.

Why it is exact (every step, for a row whose products all satisfy ``|p| <= 2**22`` grid
units, where ``p = a * 2**16 * b`` for fp16 values ``a``, ``b``):

1. **operands**: every fp16 value is a float32 (11 significant bits, exponents
   ``-24..15``), and ``a * 2**16`` only moves the exponent (at most ``65504 * 2**16 <
   2**32``): exact;
2. **product**: ``p`` has at most ``11 + 11 = 22`` significant bits, float32 has 24, and
   ``|p|`` lies between ``2**-48 * 2**16 = 2**-32`` and ``2**48``, inside float32's normal
   range: ``p`` is exact (so fusing the next addition into an FMA changes nothing);
3. **rounding to the grid**: ``t = fl32(MAGIC32 + p)`` with ``MAGIC32 = 1.5 * 2**23``.
   For ``|p| <= 2**22``, ``MAGIC32 + p`` lies in ``[2**23, 2**24]``, where the float32
   spacing is 1: the one rounding of the addition is round-half-even to an integer, and
   since ``MAGIC32`` is an even integer, ``t = MAGIC32 + r`` with ``r = rne(p)`` exactly
   (``rne(MAGIC32 + p) = MAGIC32 + rne(p)``: a tie goes to the even neighbour either
   way).  With ``trunc``, ``t = floor(p) + MAGIC32`` (``floor`` is exact and the sum is an
   integer of magnitude below ``2**24``: exact);
4. **bits**: on ``[2**23, 2**24]`` the float32 bit pattern is affine in the value
   (exponent field fixed at 150, the fraction holds ``t - 2**23``; ``2**24`` itself is
   ``0x4b800000``, the same line's end), so ``bits(t) = MAGIC32_BITS + r`` with
   ``MAGIC32_BITS = 0x4b400000``: reading the pattern as an int32 *is* the subtraction
   of ``MAGIC32``, for free;
5. **sum**: the int32 lanes add ``bits(t_k)`` for every ``k`` with wrap-around (modulo
   ``2**32``), so after the ``K`` products a lane holds ``K * MAGIC32_BITS + S`` modulo
   ``2**32``, ``S = sum_k r_k``, in any order.  The row is on the fast path only when the
   no-clamp bound holds, which proves ``|S| <= 2**31 - 1`` (and that no partial sum of the
   serial order leaves the accumulator's range): ``S`` is the int32 that
   ``lane - K * MAGIC32_BITS`` is congruent to, exactly the serial definition's result.

The condition ``|p| <= 2**22`` is checked per row, before: ``max_k |a_ik| * max |b| *
2**16 <= 2**22`` (both maxima are fp16 values, so the product and the scaling are exact
in float64; NaN or inf fails it).  Rows that fail it take the float64 fast path.

Cost: one FMA and one int32 add per multiply-add, in 16-lane vectors (twice the lanes of
float64, and the float64 pairing's subtraction is gone), on float32 operands: ``b`` as
float32 or as fp16 patterns decoded by ``vcvtph2ps`` as they load (the caller's resident
copy, or a float32 copy of a float64 ``b``), each decoded vector feeding four rows (a
row alone where four do not share their ``b``, and at a tile's end of fewer than four);
each ``a`` scalar converted as it is loaded.  On a core whose 512-bit FMA, integer add
and conversion share two vector ports (Intel's), the decode was a third of the loop's
work with two rows a vector; four rows took the kernel at 1024 x 1024 x 256 from
4.37-4.52 to 3.61-3.90 ms, a 1024^3 ``fastane.matmul`` from 22.7-24.5 to 21.0-23.1 ms
(an Intel Xeon, 3 alternated processes, the same bits).
"""

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .acc import SCALE
from .mac_fast import _tile, _tile_count
from .parallel import QUEUE, NoAliasCompiler, call_native, claim, native_entry, new_queue
from .simd import wide_vectors

MAGIC32 = 1.5 * 2.0**23  # float32: rne(MAGIC32 + p) == MAGIC32 + rne(p) for |p| <= 2**22
MAGIC32_BITS = 0x4B400000  # the float32 pattern of MAGIC32; bits(MAGIC32 + r) = MAGIC32_BITS + r
#: the largest product magnitude (grid units) the float32 rounding handles exactly
F32_PRODUCT_LIMIT = 2.0**22


@intrinsic
def f32_bits(typingctx, x):
    """``f32_bits(x)``: the bit pattern of the float32 ``x`` as an int32 (a bitcast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(x), codegen


@intrinsic
def as_f32(typingctx, x):
    """``as_f32(x)``: a float32 ``x`` itself, the float32 value of the fp16 bit pattern
    ``x`` (a uint16; exact: ``fpext half -> float``, one ``vcvtph2ps`` per vector), or a
    float64 ``x`` that holds an fp16 value as a float32 (``fptrunc``: exact for those)."""
    if x == types.float32:

        def codegen(context, builder, signature, args):
            return args[0]

    elif x == types.float64:

        def codegen(context, builder, signature, args):
            return builder.fptrunc(args[0], ir.FloatType())

    elif x == types.uint16:

        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    else:
        return None
    return types.float32(x), codegen


@intrinsic
def _f16_bits(typingctx, x):
    """``_f16_bits(x)``: the fp16 bit pattern (a uint16) of the float32 ``x``, an fp16 value
    (``fptrunc float -> half``, one ``vcvtps2ph`` per vector: exact for fp16 values)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(x), codegen


@njit(cache=True, boundscheck=False)
def f16_patterns(x, out):
    """``out[...] = the fp16 bit patterns of x`` (``out`` uint16 of ``x``'s shape, both
    C-contiguous), by the hardware's ``vcvtps2ph`` (round to nearest, ties to even;
    overflow to +-inf, NaN stays NaN).  ``x`` float32: its one correct rounding to fp16,
    numpy's bits (the rounding of user input, ``fastane.operands``).  ``x`` float64: only
    for fp16 values (the MAC operand the float32 fast path reads in a quarter of
    float64's bytes), which float64 -> float32 -> fp16 moves exactly; other float64
    values would be rounded twice.  numpy's ``astype(np.float16)`` gives the same patterns
    in software, 10-25x slower."""
    xf = x.reshape(-1)
    of = out.reshape(-1)
    for i in range(xf.size):
        of[i] = _f16_bits(np.float32(xf[i]))


@njit(cache=True, boundscheck=False)
def widen_f16(bits, out):
    """``out[...] = the float32 values of the fp16 patterns bits`` (exact; ``vcvtph2ps``)."""
    bf = bits.reshape(-1)
    of = out.reshape(-1)
    for i in range(bf.size):
        of[i] = as_f32(bf[i])


@intrinsic
def _clz32(typingctx, x):
    """``_clz32(x)``: the leading zero bits of the uint32 ``x`` (32 for 0; ``vplzcntd``)."""
    if x != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.uint32(x), codegen


@njit(inline="always")
def sum_value32(s):
    """The fp16 value (a float32) that an exact, unclamped accumulator sum ``s`` (int32 grid
    units, ``|s| < 2**31``: what the int32 lanes above leave) reads out as: ``s / 2**16``
    rounded half to even to fp16, the readout's one rounding (``fastane.kernels.acc.
    readout_value`` of ``float64(s)``).  In integers: ``|s|`` rounded half to even to its
    11 leading significant bits (below ``2**11`` it has no more: exact, fp16 subnormals
    included, since ``s / 2**16`` is then a multiple of ``2**-24``), which float32 then
    holds exactly, as it holds the division by ``2**16``; ``|s / 2**16| < 2**15``, so no
    overflow.  Branch-free, for 16-lane loops (``fastane.kernels.ne.readout_sums``); the
    planar reductions' int64 version (units of ``2**-24``, overflow to inf) is
    ``fastane.kernels.planar._round_units``."""
    m = np.uint32(abs(np.int64(s)))
    e = np.int32(31) - np.int32(_clz32(m))  # the leading bit's index (-1 for 0)
    sh = np.uint32(max(e - 10, 0))  # the bits below the 11 kept
    q = m >> sh
    rem = m - (q << sh)
    half = (np.uint32(1) << sh) >> np.uint32(1)  # 0 when nothing is dropped
    up = (rem > half) | ((rem == half) & (sh > 0) & ((q & np.uint32(1)) == 1))
    v = np.float32((q + np.uint32(up)) << sh) * np.float32(1.0 / SCALE)  # uint32: at most 2**31
    return -v if s < 0 else v


@njit(inline="always")
def f32_row_ok(amax, bmax):
    """True when every product of a row with ``max|a| = amax`` against ``max|b| = bmax``
    (fp16 values in float64) is at most :data:`F32_PRODUCT_LIMIT` in grid units (exact in
    float64; False for NaN)."""
    return amax * bmax * SCALE <= F32_PRODUCT_LIMIT


# ---------------------------------------------------------------- inner loops (inlined)
# Numba's IR-level copies: left to LLVM (plain calls), they compiled in 2.7 s instead of
# 3.5 s, but the products ran 6-12% slower (1024^3, 256 x 4096 x 1024; 88dff01, 2026-12-04,
# on an AMD EPYC, when the tile took two rows at a time).
@njit(fastmath={"contract"}, inline="always")
def _bits4(c, b0, b1, b2, b3, a0, a1, a2, a3):
    m = np.float32(MAGIC32)
    for j in range(c.size):
        c[j] += (f32_bits(a0 * as_f32(b0[j]) + m) + f32_bits(a1 * as_f32(b1[j]) + m)) + (
            f32_bits(a2 * as_f32(b2[j]) + m) + f32_bits(a3 * as_f32(b3[j]) + m)
        )


@njit(fastmath={"contract"}, inline="always")
def _bits1(c, b0, a0):
    m = np.float32(MAGIC32)
    for j in range(c.size):
        c[j] += f32_bits(a0 * as_f32(b0[j]) + m)


@njit(fastmath={"contract"}, inline="always")
def _bits2x4(c, d, e, f, b0, b1, a0, a1, g0, g1, h0, h1, u0, u1):
    """Four int32 rows += the patterns of MAGIC32 + rne(product), two products each (each
    decoded ``b`` value feeds four rows)."""
    m = np.float32(MAGIC32)
    for j in range(c.size):
        x0 = as_f32(b0[j])
        x1 = as_f32(b1[j])
        c[j] += f32_bits(a0 * x0 + m) + f32_bits(a1 * x1 + m)
        d[j] += f32_bits(g0 * x0 + m) + f32_bits(g1 * x1 + m)
        e[j] += f32_bits(h0 * x0 + m) + f32_bits(h1 * x1 + m)
        f[j] += f32_bits(u0 * x0 + m) + f32_bits(u1 * x1 + m)


@njit(inline="always")
def _floor_bits2x4(c, d, e, f, b0, b1, a0, a1, g0, g1, h0, h1, u0, u1):
    """As :func:`_bits2x4` with the products floored (``trunc``)."""
    m = np.float32(MAGIC32)
    for j in range(c.size):
        x0 = as_f32(b0[j])
        x1 = as_f32(b1[j])
        c[j] += f32_bits(np.floor(a0 * x0) + m) + f32_bits(np.floor(a1 * x1) + m)
        d[j] += f32_bits(np.floor(g0 * x0) + m) + f32_bits(np.floor(g1 * x1) + m)
        e[j] += f32_bits(np.floor(h0 * x0) + m) + f32_bits(np.floor(h1 * x1) + m)
        f[j] += f32_bits(np.floor(u0 * x0) + m) + f32_bits(np.floor(u1 * x1) + m)


@njit(inline="always")
def _floor_bits4(c, b0, b1, b2, b3, a0, a1, a2, a3):
    m = np.float32(MAGIC32)
    for j in range(c.size):
        c[j] += (f32_bits(np.floor(a0 * as_f32(b0[j])) + m) + f32_bits(np.floor(a1 * as_f32(b1[j])) + m)) + (
            f32_bits(np.floor(a2 * as_f32(b2[j])) + m) + f32_bits(np.floor(a3 * as_f32(b3[j])) + m)
        )


@njit(inline="always")
def _floor_bits1(c, b0, a0):
    m = np.float32(MAGIC32)
    for j in range(c.size):
        c[j] += f32_bits(np.floor(a0 * as_f32(b0[j])) + m)


@njit(inline="always")
def _quad(p, rb, ib):
    """True when listed rows ``p + 1``, ``p + 2``, ``p + 3`` share row ``p``'s ``b`` batch
    (the caller checks that they are in the tile)."""
    q = ib[rb[p]]
    return ib[rb[p + 1]] == q and ib[rb[p + 2]] == q and ib[rb[p + 3]] == q


@njit(inline="always")
def _s32(x):
    """``x`` (an fp16 value in float64 or float32) times 2**16, as a float32 (exact)."""
    return np.float32(x) * np.float32(SCALE)


# ---------------------------------------------------------------- the tile
def _make_tile32(trunc: bool):
    """The tile of one rounding (``trunc``: products floored, else half to even), the
    rounding a constant of the closure: Numba prunes the other rounding's branches before
    typing them (as an argument, both were typed and lowered: 0.5 s of a cold compile)."""

    @njit(fastmath={"contract"}, inline="always")
    def tile32(a, bq, ia, ib, rb, ri, acc, p0, p1, j0, j1, depth, ci):
        """Rows rb/ri[p0:p1], columns j0:j1 (see :func:`_fast32_rows`); ``ci``: int32 scratch
        of at least (p1 - p0, j1 - j0)."""
        K = a.shape[2]
        w = j1 - j0
        for p in range(p0, p1):
            ci[p - p0, :w] = 0
        for k0 in range(0, K, depth):
            k1 = min(K, k0 + depth)
            p = p0
            while p < p1:
                bb = bq[ib[rb[p]]]
                k = k0
                if p + 4 <= p1 and _quad(p, rb, ib):
                    r0 = a[ia[rb[p]], ri[p]]
                    r1 = a[ia[rb[p + 1]], ri[p + 1]]
                    r2 = a[ia[rb[p + 2]], ri[p + 2]]
                    r3 = a[ia[rb[p + 3]], ri[p + 3]]
                    c0 = ci[p - p0, :w]
                    c1 = ci[p + 1 - p0, :w]
                    c2 = ci[p + 2 - p0, :w]
                    c3 = ci[p + 3 - p0, :w]
                    while k + 2 <= k1:
                        b0 = bb[k, j0:j1]
                        b1 = bb[k + 1, j0:j1]
                        a0, a1 = _s32(r0[k]), _s32(r0[k + 1])
                        g0, g1 = _s32(r1[k]), _s32(r1[k + 1])
                        h0, h1 = _s32(r2[k]), _s32(r2[k + 1])
                        u0, u1 = _s32(r3[k]), _s32(r3[k + 1])
                        if trunc:
                            _floor_bits2x4(c0, c1, c2, c3, b0, b1, a0, a1, g0, g1, h0, h1, u0, u1)
                        else:
                            _bits2x4(c0, c1, c2, c3, b0, b1, a0, a1, g0, g1, h0, h1, u0, u1)
                        k += 2
                    q1 = p + 4
                else:  # one row alone
                    ar = a[ia[rb[p]], ri[p]]
                    c = ci[p - p0, :w]
                    while k + 4 <= k1:
                        b0 = bb[k, j0:j1]
                        b1 = bb[k + 1, j0:j1]
                        b2 = bb[k + 2, j0:j1]
                        b3 = bb[k + 3, j0:j1]
                        a0, a1, a2, a3 = _s32(ar[k]), _s32(ar[k + 1]), _s32(ar[k + 2]), _s32(ar[k + 3])
                        if trunc:
                            _floor_bits4(c, b0, b1, b2, b3, a0, a1, a2, a3)
                        else:
                            _bits4(c, b0, b1, b2, b3, a0, a1, a2, a3)
                        k += 4
                    q1 = p + 1
                for kr in range(k, k1):  # what the steps above left: each row by itself
                    b0 = bb[kr, j0:j1]
                    for q in range(p, q1):
                        x = _s32(a[ia[rb[q]], ri[q], kr])
                        if trunc:
                            _floor_bits1(ci[q - p0, :w], b0, x)
                        else:
                            _bits1(ci[q - p0, :w], b0, x)
                p = q1
        offset = np.int64(K) * MAGIC32_BITS
        for p in range(p0, p1):
            c = ci[p - p0, :w]
            out = acc[rb[p], ri[p], j0:j1]
            for j in range(w):
                s = (np.int64(c[j]) - offset) & 0xFFFFFFFF  # S modulo 2**32 ...
                out[j] = np.int32(s - ((s & 0x80000000) << 1))  # ... as the int32 it is

    return tile32


_tile32_rne = _make_tile32(False)
_tile32_floor = _make_tile32(True)


def _fast32_rows(a, bq, ia, ib, rb, ri, trunc, acc, rows_per_tile, cols_per_tile, depth, workers):
    """acc[rb[p], ri[p], :] = sum_k round(a*b) in any order, for rows that cannot clamp and
    whose products are at most :data:`F32_PRODUCT_LIMIT` (module docstring: why exact).
    ``acc``: int32[B, M, N], the exact sums in grid units (int32 only: one compiled
    specialization per rounding).

    ``a``: float64[BA, M, K]; ``bq``: the ``b`` values as float32[BB, K, N] or as fp16 bit
    patterns, uint16[BB, K, N] (decoded as they are loaded: a quarter of float64's bytes,
    for products that stream their weights).  Tiles of rows x columns are the tasks of the
    work queue; depth is blocked for cache; four consecutive rows sharing their ``b`` batch
    are computed together (one load of ``b`` feeds the four), other rows one by one.
    """
    rows = _rows32_floor if trunc else _rows32_rne
    kernel = _fast32_floor if trunc else _fast32_rne
    args = (a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth)
    kernel(native_entry(rows, *args, QUEUE), *args, workers)


# One thread body per rounding, the rounding a constant of each (its tiles compile only their
# own inner loops; the first use of the other rounding compiles that one).  The parallel
# kernels call them through their address (fastane.kernels.parallel.call_native): compiled
# once, with their arrays noalias and numpy's error model as in a parallel region
# (parallel.NoAliasCompiler), the tile loops run as fast as inlined into the region (1024^3,
# 256 x 4096 x 1024, alternated: within the noise), and _fast32_rne's cold compile went from
# 3.5 to 1.7 s (its tile was compiled three times over: the region, its gufunc wrapper, the
# kernel).
def _rows32_for(trunc: bool):
    """One thread of :func:`_fast32_rows` for one rounding (``trunc``: the products floored,
    else half to even; a constant): tiles claimed from ``counter`` until none are left."""

    @njit(
        fastmath={"contract"},
        boundscheck=False,
        error_model="numpy",
        pipeline_class=NoAliasCompiler,
        cache=True,
    )
    def rows32(a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth, counter):
        wide_vectors()
        L, N = rb.size, bq.shape[2]
        ntasks = _tile_count(L, N, rows_per_tile, cols_per_tile)
        ci = np.empty((rows_per_tile, min(N, cols_per_tile)), np.int32)
        while True:
            t = claim(counter)
            if t >= ntasks:
                break
            p0, p1, j0, j1 = _tile(t, L, N, rows_per_tile, cols_per_tile)
            if trunc:
                _tile32_floor(a, bq, ia, ib, rb, ri, acc, p0, p1, j0, j1, depth, ci)
            else:
                _tile32_rne(a, bq, ia, ib, rb, ri, acc, p0, p1, j0, j1, depth, ci)

    return rows32


# module globals, which the parallel kernels call (a closure's captured dispatcher would
# not let Numba cache them)
_rows32_rne = _rows32_for(False)
_rows32_floor = _rows32_for(True)


@njit(parallel=True, cache=True)
def _fast32_rne(entry, a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth, workers):
    """:func:`_fast32_rows` rounding the products half to even (``entry``: the address of
    :func:`_rows32_rne` for these arguments)."""
    counter = new_queue()
    for _ in prange(workers):
        call_native(
            _rows32_rne, entry, (a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth, counter)
        )


@njit(parallel=True, cache=True)
def _fast32_floor(entry, a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth, workers):
    """:func:`_fast32_rows` with the products floored (``entry``: of :func:`_rows32_floor`)."""
    counter = new_queue()
    for _ in prange(workers):
        call_native(
            _rows32_floor, entry, (a, bq, ia, ib, rb, ri, acc, rows_per_tile, cols_per_tile, depth, counter)
        )
