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
from numba import njit

from .fp16 import f16_to_f64, f64_to_f16, round_f16
from .lut import QNAN, lut_eval

NL_IDENTITY = 0
NL_RELU = 1
NL_LUT = 2


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
    for i in range(n):
        for ch in range(c):
            b = bias[ch] if has_bias else 0.0
            for k in range(s):
                t = y[i, ch, k]
                if has_bias:
                    t = round_f16(t + b)
                if do_scale:
                    t = round_f16(t * scale)
                if nonlinear == NL_LUT:
                    h, ev = lut_eval(t, lutf, luti)
                    out[i, ch, k] = h
                    if ev < 0:
                        under += 1
                    elif ev > 0:
                        over += 1
                elif nonlinear == NL_RELU:
                    if t > 0.0:
                        out[i, ch, k] = f64_to_f16(t)
                    elif t != t:
                        out[i, ch, k] = QNAN
                    else:
                        out[i, ch, k] = 0
                else:
                    out[i, ch, k] = f64_to_f16(t)
    counts[0] += under
    counts[1] += over


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
def _post(t, has_bias, b, do_scale, scale, nonlinear, lutf, luti):
    """One element of :func:`ne_post`: ``(fp16 pattern, LUT event)``."""
    if has_bias:
        t = round_f16(t + b)
    if do_scale:
        t = round_f16(t * scale)
    if nonlinear == NL_LUT:
        return lut_eval(t, lutf, luti)
    if nonlinear == NL_RELU:
        if t > 0.0:
            return f64_to_f16(t), 0
        if t != t:
            return np.int64(QNAN), 0
        return np.int64(0), 0
    return f64_to_f16(t), 0


@njit(cache=True, boundscheck=False)
def readout_post(acc, flag, bias, scale, nonlinear, lutf, luti, out16, plane, row, wpad, counts):
    """The accumulator readout and the NE stage in one pass, into the destination layout.

    ``acc`` float64 and ``flag`` int8 ``[C, H, W]`` (C-contiguous): the MAC array's
    accumulators and clamp flags (:func:`fastane.kernels.mac.matmul_q16`).  Each element
    is read out exactly as :func:`fastane.kernels.mac.readout` does (NaN stays NaN, a
    flagged accumulator reads +-inf, else ``acc / 2**16`` rounded to fp16), then goes
    through :func:`ne_post`'s pipeline (bias, PostScale, nonlinearity) -- the same bits as
    those two calls -- and its fp16 pattern is stored at ``out16[c*plane + h*row + w]``
    (``plane``, ``row`` in elements); ``out16[... + w]`` for ``W <= w < wpad`` is zeroed
    (the tail of the row's last DMA burst).

    ``counts`` (int64[4]) ``+=`` NaN outputs, saturated outputs (flagged, not NaN), LUT
    underflows, LUT overflows.
    """
    C, H, W = acc.shape
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    inv = 1.0 / 65536.0
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
            dst = out16[o:o + wpad]
            for k in range(W):
                v = a[k]
                if v != v:
                    t = v
                    nans += 1
                elif f[k] > 0:
                    t = np.inf
                    sat += 1
                elif f[k] < 0:
                    t = -np.inf
                    sat += 1
                else:
                    t = round_f16(v * inv)
                hb, ev = _post(t, has_bias, b, do_scale, scale, nonlinear, lutf, luti)
                dst[k] = hb
                if ev < 0:
                    under += 1
                elif ev > 0:
                    over += 1
            for k in range(W, wpad):
                dst[k] = 0
    counts[0] += nans
    counts[1] += sat
    counts[2] += under
    counts[3] += over


# ---------------------------------------------------------------- branch-free fp16 (vectorizes)
_ABS = 0x7FFFFFFFFFFFFFFF
_EXP_INF = 0x7FF0000000000000          # float64 +inf pattern; larger magnitudes are NaN
_MIN_NORMAL16 = 0x3F10000000000000     # float64 pattern of 2**-14
_HALF_MINUS_1 = (1 << 41) - 1
_BIAS_SHIFT = 1008 << 10
_TWO52_BITS = 0x4330000000000000       # float64 pattern of 2**52
_QNAN16 = 0x7E00


@njit(inline="always")
def f64_to_f16_nb(x):
    """:func:`fastane.kernels.fp16.f64_to_f16` without branches (every case computed, one
    selected), so that loops over it vectorize: the fp16 pattern nearest to ``x`` (half to
    even), 0x7e00 for NaN.  Subnormals: ``|x| * 2**24 + 2**52`` rounds ``|x| * 2**24`` to an
    integer (half to even), which the low bits of that sum then hold."""
    u = np.float64(x).view(np.int64)
    sign = (u >> 48) & 0x8000
    au = u & _ABS
    hn = min(((au + _HALF_MINUS_1 + ((au >> 42) & 1)) >> 42) - _BIAS_SHIFT, 0x7C00)
    ax = np.int64(au).view(np.float64)
    hs = np.float64(ax * 16777216.0 + 4503599627370496.0).view(np.int64) - _TWO52_BITS
    h = (hs if au < _MIN_NORMAL16 else hn) | sign
    return np.int64(_QNAN16) if au > _EXP_INF else h


@njit(inline="always")
def _f16_to_f64_nb(h):
    """Exact value of the fp16 pattern ``h`` (branch-free; as fastane.kernels.dma)."""
    a = h & 0x7FFF
    sign = (h & 0x8000) << 48
    bits = (a << 42) + np.int64(1008 << 52) + (np.int64(a >= 0x7C00) * np.int64(1008 << 52))
    sub = np.float64(np.int64(np.int64(1009 << 52) | (a << 42)).view(np.float64) - 2.0 ** -14).view(np.int64)
    return np.int64((sub if a < 0x400 else bits) | sign).view(np.float64)


@njit(inline="always")
def _readout_nb(v, fl, inv):
    """The readout of one accumulator as an fp16 pattern (branch-free)."""
    ok = v == v
    hb = f64_to_f16_nb(v * inv)
    hb = 0x7C00 if (fl > 0) & ok else hb
    return 0xFC00 if (fl < 0) & ok else hb


@njit(inline="always")
def _row_plain(a, f, dst, relu, inv):
    """One row, no bias, no scale: ``(NaN outputs, saturated outputs)``."""
    nans = 0
    sat = 0
    for k in range(a.size):
        v = a[k]
        fl = f[k]
        ok = v == v
        nans += np.int64(not ok)
        sat += np.int64((fl != 0) & ok)
        hb = _readout_nb(v, fl, inv)
        if relu:
            hb = 0 if (hb & 0x8000) != 0 else hb
        dst[k] = hb
    return nans, sat


@njit(inline="always")
def _row_bias(a, f, dst, b, relu, inv):
    """One row with a bias (rounded to fp16), no PostScale."""
    nans = 0
    sat = 0
    for k in range(a.size):
        v = a[k]
        fl = f[k]
        ok = v == v
        nans += np.int64(not ok)
        sat += np.int64((fl != 0) & ok)
        hb = f64_to_f16_nb(_f16_to_f64_nb(_readout_nb(v, fl, inv)) + b)
        if relu:
            hb = 0 if (hb & 0x8000) != 0 else hb
        dst[k] = hb
    return nans, sat


@njit(inline="always")
def _row_affine(a, f, dst, b, do_bias, scale, do_scale, relu, inv):
    """One row with a bias and/or a PostScale, each rounded to fp16."""
    nans = 0
    sat = 0
    for k in range(a.size):
        v = a[k]
        fl = f[k]
        ok = v == v
        nans += np.int64(not ok)
        sat += np.int64((fl != 0) & ok)
        hb = _readout_nb(v, fl, inv)
        if do_bias:
            hb = f64_to_f16_nb(_f16_to_f64_nb(hb) + b)
        if do_scale:
            hb = f64_to_f16_nb(_f16_to_f64_nb(hb) * scale)
        if relu:
            hb = 0 if (hb & 0x8000) != 0 else hb
        dst[k] = hb
    return nans, sat


@njit(cache=True, boundscheck=False)
def readout_fast(acc, flag, bias, scale, relu, out16, plane, row, wpad, counts):
    """:func:`readout_post` for the NE stages without a LUT (identity or ReLU), in
    branch-free arithmetic that vectorizes.  Each step rounds to fp16 as ``round_f16``
    does (``round_f16(x)`` is the value of the pattern ``f64_to_f16(x)``): the readout
    ``acc / 2**16`` (NaN stays NaN, a flag gives +-inf), ``+ bias[c]``, ``x scale``, then
    ReLU on the pattern (a set sign bit gives +0; NaN is already 0x7e00).  Same bits and
    counts as :func:`readout_post` (``counts[2:4]``, the LUT events, stay 0)."""
    C, H, W = acc.shape
    has_bias = bias.size > 0
    do_scale = scale != 1.0
    inv = 1.0 / 65536.0
    nans = 0
    sat = 0
    for c in range(C):
        b = bias[c] if has_bias else 0.0
        for h in range(H):
            o = c * plane + h * row
            dst = out16[o:o + W]
            if has_bias and not do_scale:
                n, s = _row_bias(acc[c, h], flag[c, h], dst, b, relu, inv)
            elif has_bias or do_scale:
                n, s = _row_affine(acc[c, h], flag[c, h], dst, b, has_bias, scale, do_scale, relu, inv)
            else:
                n, s = _row_plain(acc[c, h], flag[c, h], dst, relu, inv)
            nans += n
            sat += s
            for k in range(o + W, o + wpad):
                out16[k] = 0
    counts[0] += nans
    counts[1] += sat
