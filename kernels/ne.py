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
