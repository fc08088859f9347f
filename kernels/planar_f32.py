"""The planar engine's add, subtract and multiply without an output offset (``c = 0``:
silu's ``x * sigmoid(x)``, ResNet's residual adds, every corpus binary task) on fp16
patterns, through the CPU's fp16 conversions: the same bits and NaN count as
:func:`fastane.kernels.planar.eltwise_window`, in one vectorized pass.

Why the same bits.  Each stage of the planar arithmetic (``fastane.kernels.planar``:
``round16(s0 * a)``, ``round16(op(a', b))``, ``round16(s * y)``) is one operation on two
fp16 values, rounded once to fp16.  Widening fp16 to float32 is exact (``vcvtph2ps``),
and so is the float32 product of two fp16 values (22 significant bits, magnitudes from
``2**-48`` to below ``2**32``).  A float32 sum is rounded once to float32 (24 bits) and
then to fp16 (11 bits, ``vcvtps2ph``, round to nearest even, overflow to inf,
subnormals kept): rounding twice is innocuous when the wider format has at least
``2p + 2`` bits for a ``p``-bit result (S. A. Figueroa, "When is double rounding
innocuous?", ACM SIGNUM Newsletter 30(3), 1995), and ``2 * 11 + 2 = 24``.  IEEE float32
gives NaN where the float64 path does (NaN in, ``inf - inf``, ``0 * inf``); every NaN
result is written as the quiet NaN 0x7e00 and counted.  An output offset ``c`` makes the
last stage ``round16(s * y + c)``, two operations in one rounding: that stays with the
float64 path.  ``tests/kernels/test_planar_f32.py`` compares the two on every pair of patterns
(without scales) and on every pattern against spreads of partners with scales.
"""

import numpy as np
from numba import njit

from .fp16 import F16_INF, F16_QNAN
from .mac_f32 import _f16_bits, as_f32
from .simd import wide_vectors

_QNAN = np.uint16(F16_QNAN)
_INF = np.uint16(F16_INF)
_MAG = np.uint16(0x7FFF)
_SIGN = np.uint16(0x8000)


@njit(inline="always")
def _r16(v):
    """``v`` (float32) rounded once to fp16, as a float32."""
    return as_f32(_f16_bits(v))


@njit(inline="always")
def _store(v, d, w):
    """``d[w]`` = the fp16 pattern of the float32 ``v`` (0x7e00 for NaN); 1 if NaN."""
    h = _f16_bits(v)
    nan = (h & _MAG) > _INF
    d[w] = _QNAN if nan else h
    return np.int64(nan)


@njit(inline="always")
def _add_row(x, y, flip, s0, s, d, W, unit):
    """``round16(s * round16(round16(s0 * x) + (y ^ flip)))`` along a row (``flip``
    0x8000: subtract); ``unit`` (a constant at each call): ``s0 = s = 1``, whose two
    roundings are the identity on fp16 values, left out."""
    n = 0
    for w in range(W):
        if unit:
            n += _store(as_f32(x[w]) + as_f32(np.uint16(y[w] ^ flip)), d, w)
        else:
            v = _r16(s0 * as_f32(x[w])) + as_f32(np.uint16(y[w] ^ flip))
            n += _store(s * _r16(v), d, w)
    return n


@njit(inline="always")
def _mul_row(x, y, s0, s, d, W, unit):
    """``round16(s * round16(round16(s0 * x) * y))`` along a row (``unit`` as above)."""
    n = 0
    for w in range(W):
        if unit:
            n += _store(as_f32(x[w]) * as_f32(y[w]), d, w)
        else:
            v = _r16(s0 * as_f32(x[w])) * as_f32(y[w])
            n += _store(s * _r16(v), d, w)
    return n


def binary_window(a, ap, ar, aw, b, bp, br, bw, C, H, W, mul, sub, s0, s, dst, dp, dr, wpad):
    """``dst[ch*dp + h*dr + w]`` = the fp16 pattern of ``round16(s * round16(op(round16(s0
    * a[...]), b[...])))`` for the ``C x H x W`` tensor, ``op`` the product (``mul``), else
    the difference (``sub``) or the sum; ``a[ch*ap + h*ar + w*aw]``, ``b`` likewise (flat
    uint16 patterns; ``aw``, ``bw`` 1, or 0 for an operand broadcast along the row, read
    from a row filled with it); ``dst[... + w]`` for ``W <= w < wpad`` zeroed.  Returns
    the NaN outputs (``eltwise_window``'s arguments with ``c = 0``).  Destination rows
    must not overlap.  One kernel per operation (product or sum) and scale case
    (:func:`_binary_window_for`), compiled on its first use."""
    kernel = _BINARY_WINDOW[bool(mul), s0 == 1.0 and s == 1.0]
    return kernel(a, ap, ar, aw, b, bp, br, bw, C, H, W, sub, s0, s, dst, dp, dr, wpad)


def _binary_window_for(mul, unit):
    """:func:`binary_window`'s kernel for the product (``mul``) or the sum, with unit
    scales (``unit``: ``s0 = s = 1``) or not, both constants: its one row loop (one kernel
    over the four compiled them all: ResNet's adds took ~0.6 s of a cold compile)."""

    @njit(cache=True, boundscheck=False)
    def window(a, ap, ar, aw, b, bp, br, bw, C, H, W, sub, s0, s, dst, dp, dr, wpad):
        wide_vectors()
        s0f = np.float32(s0)
        sf = np.float32(s)
        flip = _SIGN if sub else np.uint16(0)
        ra = np.empty(W if aw == 0 else 0, np.uint16)
        rb = np.empty(W if bw == 0 else 0, np.uint16)
        nans = 0
        for t in range(C * H):
            ch = t // H
            h = t - ch * H
            x = a[ch * ap + h * ar :]
            y = b[ch * bp + h * br :]
            if aw == 0:
                ra[:] = x[0]
                x = ra
            if bw == 0:
                rb[:] = y[0]
                y = rb
            d = dst[ch * dp + h * dr : ch * dp + h * dr + wpad]
            if mul:
                nans += _mul_row(x[:W], y[:W], s0f, sf, d, W, unit)
            else:
                nans += _add_row(x[:W], y[:W], flip, s0f, sf, d, W, unit)
            for w in range(W, wpad):
                d[w] = 0
        return nans

    return window


#: binary_window's kernel for each (mul, unit scales), each compiled on first use
_BINARY_WINDOW = {
    (mul, unit): _binary_window_for(mul, unit) for mul in (False, True) for unit in (False, True)
}
