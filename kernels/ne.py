"""The NE block after the MAC array: bias, PostScale, nonlinearity, fp16 out.

For every element of the MAC readout ``y`` (float64 holding exact fp16 values, as the
accumulator readout produces them, +-inf and NaN included), in this order (SPEC 3):

1. ``t = round_fp16(y + bias[c])``      if the bias is enabled (per output channel ``c``);
2. ``t = round_fp16(t * scale)``        ``scale`` is the fp16 PostScale (1.0 = 0x3c00);
3. nonlinearity: 0 identity, 1 ReLU (``t > 0 ? t : +0``, NaN stays NaN),
   2 the 33-knot LUT of :mod:`fastane.kernels.lut`;
4. the fp16 pattern of the result is written to ``out`` (uint16).

Each step rounds once, round-half-to-even, through float64 (a sum or product of two
fp16 values is exact in float64, so this is the correctly rounded fp16 operation).

Entry point for the device engine and the numpy API: :func:`ne_post`.
"""

import numpy as np
from numba import njit, prange

from .fp16 import F16_INF, F16_QNAN, f16_to_f64, f64_to_f16_inline, round_f16_inline
from .lut import count_event, lut_eval
from .mac import readout_counts, readout_unrounded, readout_value
from .mac_f32 import _f16_bits, as_f32, sum_value32
from .parallel import call_native, native_entry, workers
from .simd import wide_vectors

NL_IDENTITY = 0
NL_RELU = 1
NL_LUT = 2


def _affine_py(t, has_bias, b, do_scale, scale):
    """Steps 1-2 for the fp16 value ``t``: ``+ b`` (if ``has_bias``), then ``x scale`` (if
    ``do_scale``), each rounded once to fp16 -- but for the last step's rounding: the result
    is ``round_fp16`` of the value returned, so that a caller who encodes next rounds once
    (``f64_to_f16(round_f16(u)) == f64_to_f16(u)``)."""
    if has_bias:
        t = t + b
        if do_scale:
            t = round_f16_inline(t) * scale
    elif do_scale:
        t = t * scale
    return t


def _encode_py(u, relu):
    """Steps 3-4 without a table: the fp16 pattern of ``u`` (rounded once), then ReLU on the
    pattern when ``relu``: a set sign bit (negative, -0, -inf) gives +0; NaN is already the
    positive quiet NaN 0x7e00 and stays."""
    h = f64_to_f16_inline(u)
    return (0 if (h & 0x8000) != 0 else h) if relu else h


@njit
def _rounded(u, affine):
    """The fp16 value of ``u`` from :func:`_affine` (rounded when a step ran, else ``u`` as
    it is): the input of the table."""
    return round_f16_inline(u) if affine else u


# Each helper compiled twice from its one definition: a plain call for ne_post (whose
# loop compiles faster and runs about 6x faster without Numba's IR-level copies), and an
# IR-inlined copy for the readout rows below, which the call sites specialise with
# constants (about 5% faster there).
_affine, _affine_inline = njit(_affine_py), njit(inline="always")(_affine_py)
_encode, _encode_inline = njit(_encode_py), njit(inline="always")(_encode_py)


@njit(cache=True)
def ne_post(y, bias, scale, nonlinear, lutf, luti, out, counts):
    """Post-MAC pipeline over a (N, C, S) view.

    Parameters
    ----------
    y : float64[N, C, S]
        MAC readout, exact fp16 values (any strides).
    bias : float64[C] or float64[0]
        Per-output-channel bias (exact fp16 values); an empty array disables the bias.
    scale : float
        PostScale as an fp16 value (pass 1.0 for none).
    nonlinear : int
        0 identity, 1 ReLU, 2 LUT.
    lutf, luti : float64[41], int64[3]
        Packed LUT parameters (see :mod:`fastane.kernels.lut`); ignored unless
        ``nonlinear == 2`` (pass the identity block from ``fastane.lut`` or zeros).
    out : uint16[N, C, S]
        fp16 result patterns.
    counts : int64[2]
        ``counts[0] += LUT underflows``, ``counts[1] += LUT overflows``.
    """
    n, c, s = y.shape
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    under = 0
    over = 0
    lut = nonlinear == NL_LUT
    relu = nonlinear == NL_RELU
    for i in range(n):
        for ch in range(c):
            b = bias[ch] if has_bias else 0.0
            for k in range(s):
                u = _affine(y[i, ch, k], has_bias, b, do_scale, scale)
                if lut:
                    h, ev = lut_eval(_rounded(u, has_bias or do_scale), lutf, luti)
                else:
                    h, ev = _encode(u, relu), 0
                out[i, ch, k] = h
                under, over = count_event(ev, under, over)
    counts[0] += under
    counts[1] += over


@njit(cache=True)
def ne_post_plain(y, bias, scale, relu, out):
    """:func:`ne_post` without a LUT (identity, or ReLU when ``relu``), from the same
    per-element helpers: the same bits, without the table (most of a cold compile of
    :func:`ne_post`; no table events to count)."""
    n, c, s = y.shape
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    for i in range(n):
        for ch in range(c):
            b = bias[ch] if has_bias else 0.0
            for k in range(s):
                out[i, ch, k] = _encode(_affine(y[i, ch, k], has_bias, b, do_scale, scale), relu)


@njit(cache=True)
def ne_post_bits(x, bias, scale, nonlinear, lutf, luti, out, counts):
    """:func:`ne_post` on fp16 patterns: ``x`` is uint16[N, C, S] (e.g. L2 contents)."""
    n, c, s = x.shape
    y = np.empty((n, c, s))
    for i in range(n):
        for ch in range(c):
            for k in range(s):
                y[i, ch, k] = f16_to_f64(x[i, ch, k])
    ne_post(y, bias, scale, nonlinear, lutf, luti, out, counts)


@njit(inline="always")
def _post_one(a, f, has_bias, b, do_scale, scale, lut, relu, lutf, luti):
    """One accumulator of :func:`readout_post` through the readout and the NE stage:
    ``(fp16 pattern, LUT event)``."""
    u = _affine_inline(readout_value(a, f), has_bias, b, do_scale, scale)
    if lut:
        hb, ev = lut_eval(_rounded(u, has_bias or do_scale), lutf, luti)
    else:
        hb, ev = _encode_inline(u, relu), 0
    return hb, ev


@njit(cache=True, boundscheck=False)
def readout_post(acc, flag, bias, scale, nonlinear, lutf, luti, out16, plane, row, wpad, counts):
    """The accumulator readout and the NE stage in one pass, into the destination layout.

    ``acc`` float64 and ``flag`` int8 ``[C, H, W]`` (C-contiguous): the MAC array's
    accumulators and clamp flags (:func:`fastane.kernels.mac.matmul_q16`).  Each element
    is read out by :func:`fastane.kernels.mac.readout_value` (what
    :func:`fastane.kernels.mac.readout` does), then goes through :func:`ne_post`'s
    pipeline (bias, PostScale, nonlinearity) -- the same bits as those two calls -- and its
    fp16 pattern is stored at ``out16[c*plane + h*row + w]`` (``plane``, ``row`` in
    elements); ``out16[... + w]`` for ``W <= w < wpad`` is zeroed (the tail of the row's
    last DMA burst).

    ``counts`` (int64[4]) ``+=`` NaN outputs, saturated outputs (flagged, not NaN), LUT
    underflows, LUT overflows.
    """
    C, H, W = acc.shape
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    lut = nonlinear == NL_LUT
    relu = nonlinear == NL_RELU
    nans = 0
    sat = 0
    under = 0
    over = 0
    for c in range(C):
        b = bias[c] if has_bias else 0.0
        for h in range(H):
            a = acc[c, h]
            f = flag[c, h]
            o = c * plane + h * row
            dst = out16[o : o + wpad]
            for k in range(W):
                n, st = readout_counts(a[k], f[k])
                nans += n
                sat += st
                hb, ev = _post_one(a[k], f[k], has_bias, b, do_scale, scale, lut, relu, lutf, luti)
                dst[k] = hb
                under, over = count_event(ev, under, over)
            for k in range(W, wpad):
                dst[k] = 0
    counts[0] += nans
    counts[1] += sat
    counts[2] += under
    counts[3] += over


# ---------------------------------------------------------------- without a LUT (vectorizes)
@njit(inline="always")
def _row_readout(a, f, dst, relu):
    """One row of :func:`readout_fast` without bias or PostScale: the readout is the only
    rounding (``f64_to_f16`` of the unrounded readout).  Returns ``(NaN outputs,
    saturated outputs)``."""
    nans = 0
    sat = 0
    for k in range(a.size):
        n, s = readout_counts(a[k], f[k])
        nans += n
        sat += s
        dst[k] = _encode_inline(readout_unrounded(a[k], f[k]), relu)
    return nans, sat


@njit(inline="always")
def _row_affine(a, f, dst, b, do_bias, scale, do_scale, relu):
    """One row of :func:`readout_fast` with a bias and/or a PostScale (the call sites pass
    constants where they can, so each inlined copy is a branch-free loop for its case)."""
    nans = 0
    sat = 0
    for k in range(a.size):
        n, s = readout_counts(a[k], f[k])
        nans += n
        sat += s
        dst[k] = _encode_inline(_affine_inline(readout_value(a[k], f[k]), do_bias, b, do_scale, scale), relu)
    return nans, sat


# The row loop's three cases (the bias and the PostScale of a stage), each its own kernel,
# compiled on first use (one kernel over the three compiled them all; Numba's IR-level copies
# of the inlined rows cost most of a cold compile).
_PLAIN, _BIAS, _AFFINE = 0, 1, 2


def _case(bias, scale):
    """The row loop's case: PostScale (with or without a bias), a bias alone, or neither."""
    return _AFFINE if scale != 1.0 else _BIAS if bias.size > 0 else _PLAIN


def readout_fast(acc, flag, bias, scale, relu, out16, plane, row, wpad, counts):
    """:func:`readout_post` for the NE stages without a LUT (identity or ReLU), as loops
    that vectorize (no table in the loop; LLVM turns the readout's and the codec's
    branches into selects), the channels split across Numba's threads (each writes its
    own outputs; the caller runs small outputs on one thread, ``parallel.threads_for``).
    Same bits and counts as :func:`readout_post` (``counts[2:4]``, the LUT events, stay
    0)."""
    kernel = _READOUT_PARALLEL[_case(bias, scale)]
    kernel(acc, flag, bias, scale, relu, out16, plane, row, wpad, counts, workers())


def readout_serial(acc, flag, bias, scale, relu, out16, plane, row, wpad, counts):
    """:func:`readout_fast` on the calling thread (no parallel region: for small outputs)."""
    kernel = _READOUT_CHANNELS[_case(bias, scale)]
    n, s = kernel(acc, flag, bias, scale, relu, out16, plane, row, wpad, 0, acc.shape[0])
    counts[0] += n
    counts[1] += s


def _readout_channels_for(case):
    """Channels ``c0:c1`` of :func:`readout_fast` for one case (:func:`_case`, a constant:
    only its row loop compiles): ``(NaN outputs, saturated outputs)``."""

    @njit(cache=True, boundscheck=False)
    def readout_channels(acc, flag, bias, scale, relu, out16, plane, row, wpad, c0, c1):
        wide_vectors()
        C, H, W = acc.shape
        nans = 0
        sat = 0
        for c in range(c0, c1):
            b = bias[c] if bias.size > 0 else 0.0
            for h in range(H):
                o = c * plane + h * row
                dst = out16[o : o + W]
                if case == _PLAIN:
                    n, s = _row_readout(acc[c, h], flag[c, h], dst, relu)
                elif case == _BIAS:
                    n, s = _row_affine(acc[c, h], flag[c, h], dst, b, True, 1.0, False, relu)
                else:
                    n, s = _row_affine(acc[c, h], flag[c, h], dst, b, bias.size > 0, scale, True, relu)
                nans += n
                sat += s
                for k in range(o + W, o + wpad):
                    out16[k] = 0
        return nans, sat

    return readout_channels


# module globals, which the parallel kernels call (a closure's captured dispatcher would
# not let Numba cache them)
_readout_plain = _readout_channels_for(_PLAIN)
_readout_bias = _readout_channels_for(_BIAS)
_readout_affine = _readout_channels_for(_AFFINE)
_READOUT_CHANNELS = {_PLAIN: _readout_plain, _BIAS: _readout_bias, _AFFINE: _readout_affine}


def _readout_parallel_for(case):
    """:func:`readout_fast`'s kernel for one case (:func:`_case`, a constant): ``workers``
    threads, one block of channels each (as ``prange`` over the channels splits them); the
    parallel loop only calls the case's channel kernel (:mod:`fastane.kernels.parallel`: a
    parallel region's body is compiled again, with everything inlined into it)."""

    @njit(parallel=True, cache=True)
    def readout_parallel(acc, flag, bias, scale, relu, out16, plane, row, wpad, counts, workers):
        C = acc.shape[0]
        parts = max(1, min(C, workers))
        nans = 0
        sat = 0
        for t in prange(parts):
            c0 = np.int64(t) * C // parts  # int64, as readout_serial passes them (a prange
            c1 = (np.int64(t) + 1) * C // parts  # index is unsigned: a second compilation)
            if case == _PLAIN:
                n, s = _readout_plain(acc, flag, bias, scale, relu, out16, plane, row, wpad, c0, c1)
            elif case == _BIAS:
                n, s = _readout_bias(acc, flag, bias, scale, relu, out16, plane, row, wpad, c0, c1)
            else:
                n, s = _readout_affine(acc, flag, bias, scale, relu, out16, plane, row, wpad, c0, c1)
            nans += n
            sat += s
        counts[0] += nans
        counts[1] += sat

    return readout_parallel


_READOUT_PARALLEL = {case: _readout_parallel_for(case) for case in (_PLAIN, _BIAS, _AFFINE)}


# ------------------------------------------------- exact int32 sums (the skinny kernel's)
_QNAN16 = np.uint16(F16_QNAN)
_INF16 = np.uint16(F16_INF)


@njit(inline="always")
def _sum_post(s, b, has_bias, scale, do_scale, relu):
    """The fp16 pattern the exact sum ``s`` (int32 grid units) leaves the NE with, without
    a LUT: :func:`fastane.kernels.mac_f32.sum_value32` (the readout), then ``+ b`` and
    ``x scale`` each rounded to fp16 in float32 (a product of two fp16 values is exact in
    float32; a sum is rounded to float32 first, which is innocuous before fp16: Figueroa's
    ``2p + 2`` bound, see :mod:`fastane.kernels.planar_f32`), NaN written 0x7e00, then ReLU
    on the pattern -- :func:`_affine_py` and :func:`_encode_py`'s steps and bits."""
    t = sum_value32(s)
    if has_bias:
        t = t + b
        if do_scale:
            t = as_f32(_f16_bits(t)) * scale
    elif do_scale:
        t = t * scale
    h = _f16_bits(t)
    h = _QNAN16 if (h & np.uint16(0x7FFF)) > _INF16 else h
    if relu:
        h = np.uint16(0) if (h & np.uint16(0x8000)) != 0 else h
    return h


@njit(inline="always")
def _sums_line(src, dst, b, has_bias, scale, do_scale, relu):
    """``dst[k]`` = the pattern of ``src[k]`` for every ``k`` (one 16-lane loop)."""
    for k in range(dst.size):
        dst[k] = _sum_post(src[k], b, has_bias, scale, do_scale, relu)


@njit(cache=True, boundscheck=False)
def _sums_channels(sums, bias, scale, relu, out16, plane, row, wpad, W, c0, c1):
    """Channels ``c0:c1`` of :func:`readout_sums`.  A channel's ``H * W`` sums are read out
    in one loop (a loop over each padded row computes its padding too: 32 lanes for 7
    outputs), into the output when its rows are unpadded, else into a scratch line whose
    rows are then copied out, each padded with zeros to ``wpad``."""
    wide_vectors()
    H = sums.shape[1] // W
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    sc = np.float32(scale)  # fp16 values: exact in float32
    direct = W == wpad and row == W
    line = np.empty(0 if direct else H * W + wpad, np.uint16)  # a row's padded read stays inside
    for c in range(c0, c1):
        b = np.float32(bias[c]) if has_bias else np.float32(0.0)
        dst = out16[c * plane : c * plane + H * W] if direct else line
        if has_bias and not do_scale:
            _sums_line(sums[c], dst, b, True, sc, False, relu)
        else:
            _sums_line(sums[c], dst, b, has_bias, sc, do_scale, relu)
        if direct:
            continue
        for h in range(H):
            o = c * plane + h * row
            out = out16[o : o + wpad]
            src = line[h * W : h * W + wpad]
            for k in range(wpad):  # one masked loop (a row of 7 is too short for two)
                out[k] = src[k] if k < W else np.uint16(0)


@njit(parallel=True, cache=True)
def _sums_parallel(entry, sums, bias, scale, relu, out16, plane, row, wpad, W, workers):
    """:func:`readout_sums` on ``workers`` threads, one block of channels each, each
    calling :func:`_sums_channels` through its address ``entry`` (``fastane.kernels.
    parallel.call_native``)."""
    C = sums.shape[0]
    parts = max(1, min(C, workers))
    for t in prange(parts):
        c0 = np.int64(t) * C // parts
        c1 = (np.int64(t) + 1) * C // parts
        call_native(_sums_channels, entry, (sums, bias, scale, relu, out16, plane, row, wpad, W, c0, c1))


_I64 = np.int64(0)  # of the type of _sums_parallel's channel bounds


def readout_sums(sums, bias, scale, relu, out16, plane, row, wpad, W, threads=True):
    """:func:`readout_fast` of exact, unclamped sums: ``sums`` int32 ``[C, H * W]`` (grid
    units; the skinny kernel's, which leaves only rows whose bound proves no step clamps),
    rows ``W`` long.  No accumulator is NaN or flagged, so there is nothing to count.
    Identity or ReLU, bias and PostScale as :func:`readout_post` (the same bits), in 16
    lanes of int32 and float32 instead of 8 of float64; ``threads``: across the channels,
    else on the calling thread."""
    if threads:
        args = (sums, bias, scale, relu, out16, plane, row, wpad, W)
        _sums_parallel(native_entry(_sums_channels, *args, _I64, _I64), *args, workers())
    else:
        _sums_channels(sums, bias, scale, relu, out16, plane, row, wpad, W, np.int64(0), sums.shape[0])
