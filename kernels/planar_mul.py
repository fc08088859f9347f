"""The planar engine's multiply without its scales (``s0 = s = 1``, ``c = 0``: silu's
``x * sigmoid(x)``, the corpus ``mul`` programs) on fp16 patterns, through the CPU's
fp16 conversions: the same bits and NaN count as :func:`fastane.kernels.planar.
eltwise_window`, in one vectorized pass.

Why the same bits: the product of two fp16 values has at most 22 significant bits and a
magnitude between ``2**-48`` and ``65504**2 < 2**32``, so it is exact in float32 (24
bits, normal range); widening fp16 to float32 is exact (``vcvtph2ps``), and narrowing the
exact product to fp16 (``vcvtps2ph``, round to nearest even, overflow to inf,
subnormals kept) is its one correct rounding -- the planar engine's stage 2.  IEEE
float32 gives NaN for NaN operands and ``0 * inf``, as the float64 path does; every NaN
result is written as the quiet NaN 0x7e00 and counted.  (Add and subtract would not be
exact in float32, so they stay with the float64 path.)
"""

import numpy as np
from numba import njit

from .mac_f32 import _f16_bits, as_f32

_QNAN = np.uint16(0x7E00)
_INF = np.uint16(0x7C00)
_MAG = np.uint16(0x7FFF)


@njit(inline="always")
def _store(p, d, w):
    """``d[w]`` = the fp16 pattern of the float32 ``p`` (0x7e00 for NaN); 1 if NaN."""
    h = _f16_bits(p)
    nan = (h & _MAG) > _INF
    d[w] = _QNAN if nan else h
    return np.int64(nan)


@njit(cache=True, boundscheck=False)
def mul_window(a, ap, ar, aw, b, bp, br, bw, C, H, W, dst, dp, dr, wpad):
    """``dst[ch*dp + h*dr + w]`` = the fp16 pattern of ``a[ch*ap + h*ar + w*aw] * b[ch*bp +
    h*br + w*bw]`` for the ``C x H x W`` tensor (flat uint16 patterns; ``aw``, ``bw`` 1, or
    0 for an operand broadcast along the row), ``dst[... + w]`` for ``W <= w < wpad``
    zeroed; returns the NaN outputs (the arguments of ``eltwise_window`` without its op
    and scales).  Destination rows must not overlap."""
    nans = 0
    for t in range(C * H):
        ch = t // H
        h = t - ch * H
        x = a[ch * ap + h * ar :]
        y = b[ch * bp + h * br :]
        d = dst[ch * dp + h * dr : ch * dp + h * dr + wpad]
        if aw == 1 and bw == 1:
            x = x[:W]
            y = y[:W]
            for w in range(W):
                nans += _store(as_f32(x[w]) * as_f32(y[w]), d, w)
        elif aw == 1:
            y0 = as_f32(y[0])
            x = x[:W]
            for w in range(W):
                nans += _store(as_f32(x[w]) * y0, d, w)
        elif bw == 1:
            x0 = as_f32(x[0])
            y = y[:W]
            for w in range(W):
                nans += _store(x0 * as_f32(y[w]), d, w)
        else:
            p = as_f32(x[0]) * as_f32(y[0])
            for w in range(W):
                nans += _store(p, d, w)
        for w in range(W, wpad):
            d[w] = 0
    return nans
