"""The INT8 path of the MAC array and its NE stage (SPEC 2, "INT8 path"; the decisions are
named in :mod:`fastane.device.int8` and docs/numerics.md).

Entry points::

    matmul_int_into(a, b, ia, ib, acc, flag)          # int8/uint8 operands, as float64
    acc, flag = conv2d_int(x, w, sy, sx, dy, dx, pad_top, pad_left, oh, ow, groups)
    ne_int(acc, flag, bias, scale, relu, is_int, lo, hi, nan_value, out, counts)

**The accumulation is the FP16 path's.**  An integer operand ``a`` (int8 or uint8) enters
the MAC kernels as the exact value ``a * OPERAND_SCALE`` (``2**-8``): the product of two
such values is ``a*b * 2**-16``, i.e. exactly ``a*b`` units of the Q16.16 grid, so the
product needs no rounding, and the 32-bit accumulator of
:func:`fastane.kernels.mac.matmul_q16_into` -- its range ``[-2**31, 2**31 - 1]``, the
per-step clamp, the sticky direction flag, the time order, the fast path's proof -- is the
integer accumulator of the INT8 path, unit for unit.  (``|a*b| <= 65025 < 2**16``: every
partial sum is an integer far below 2**53.)  ``acc`` comes back in accumulator units,
the integer sum.

:func:`ne_int` is the NE stage of the INT8 path, per output: the bias as one more
saturating accumulator step, the readout of a flagged accumulator as +-inf, ``x scale``
(``PostScale * 2**-PostRightShift``, exact), ReLU, then one rounding to nearest (ties to
even) onto the output grid: the integers, clamped to ``[lo, hi]`` (uint8/int8), or fp16.
"""

import numpy as np
from numba import njit

from .acc import saturate
from .conv import conv2d_q16
from .fp16 import round_f16
from .mac import matmul_q16_into

#: the exact value of an integer operand in the MAC kernels: ``a * 2**-8``
OPERAND_SCALE = 2.0**-8


def operand(x):
    """An integer tensor (any integer or exact float64 values) as the MAC kernels' float64
    operand ``x * 2**-8`` (C-contiguous; exact)."""
    return np.ascontiguousarray(x, dtype=np.float64) * OPERAND_SCALE


def matmul_int_into(a, b, ia, ib, acc, flag, bmax=None):
    """Integer ``a @ b`` per batch into ``acc`` (float64[B, M, N], accumulator units) and
    ``flag`` (int8): ``a`` float64[BA, M, K], ``b`` float64[BB, K, N] holding integer values
    in the int8/uint8 ranges; ``ia``/``ib`` map output batches to operand batches (as
    :func:`fastane.kernels.mac.matmul_q16_into`).  ``bmax``: optional ``max |b[n]|`` per
    batch in integer units."""
    got = matmul_q16_into(
        operand(a), operand(b), ia, ib, False, acc, flag, None if bmax is None else bmax * OPERAND_SCALE
    )
    return got


def conv2d_int(x, w, sy, sx, dy, dx, pad_top, pad_left, oh, ow, groups):
    """NCHW integer convolution (as :func:`fastane.kernels.conv.conv2d_q16`: the same
    unfolding, time order and accumulator); ``x`` float64[N, C, H, W] and ``w``
    float64[CO, C // groups, KH, KW] hold integer values; returns ``(acc, flag)`` with
    ``acc`` in accumulator units."""
    return conv2d_q16(operand(x), operand(w), sy, sx, dy, dx, pad_top, pad_left, oh, ow, groups, False)


@njit(cache=True)
def ne_int(acc, flag, bias, scale, relu, is_int, lo, hi, nan_value, out, counts):
    """The NE stage of the INT8 path over ``(C, S)`` arrays.

    Parameters
    ----------
    acc : float64[C, S]
        Accumulators in units of one integer product (integer values).
    flag : int8[C, S]
        Their sticky clamp flags (+1 top, -1 bottom, 0 none).
    bias : float64[C] or float64[0]
        Per output channel, the accumulator units the bias adds (``AccBias << AccBiasShift``);
        empty: no bias.  Added as one saturating step (it may clamp and set the flag).
    scale : float
        ``PostScale * 2**-PostRightShift`` (an exact float64).
    relu : bool
        ReLU (``t <= 0`` gives +0; NaN stays NaN).
    is_int : bool
        The output is an integer format: round to an integer and clamp to ``[lo, hi]``;
        else round to fp16 (half to even; beyond the fp16 range +-inf).
    nan_value : float
        What a NaN result writes to an integer output.
    out : float64[C, S]
        The output values (integers, or exact fp16 values; NaN for fp16 as the quiet NaN).
    counts : int64[2]
        ``counts[0] += saturated outputs`` (accumulator clamped, or clamped to ``[lo, hi]``;
        not NaN), ``counts[1] += NaN outputs``.
    """
    c, s = acc.shape
    has_bias = bias.size > 0
    sat = 0
    nans = 0
    for ch in range(c):
        b = bias[ch] if has_bias else 0.0
        for k in range(s):
            a = acc[ch, k]
            f = flag[ch, k]
            if has_bias:
                a, f = saturate(a + b, f)  # the sum is exact: |a| <= 2**31, |b| <= 2**46
            if f > 0:
                v = np.inf
            elif f < 0:
                v = -np.inf
            else:
                v = a + 0.0  # an accumulator of -0.0 is the integer 0: +0
            t = v * scale  # exact: a 32-bit integer times an 11-bit significand (x 2**-s)
            if relu and t <= 0.0:
                t = 0.0
            if t != t:
                out[ch, k] = nan_value if is_int else np.nan
                nans += 1
                continue
            clamped = f != 0
            if is_int:
                r = np.rint(t)  # half to even
                if r < lo:
                    r = lo
                    clamped = True
                elif r > hi:
                    r = hi
                    clamped = True
                out[ch, k] = r
            else:
                out[ch, k] = round_f16(t)
            if clamped:
                sat += 1
    counts[0] += sat
    counts[1] += nans
