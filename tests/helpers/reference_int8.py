"""Slow, obviously-correct reference of the ANE's INT8 path (SPEC 2; the decisions of
``fastane.device.int8``, written out again here from docs/numerics.md, INT8 section).

Pure Python integers and ``fractions.Fraction``; no fastane code and no numpy arithmetic
(numpy only carries the arrays in and out).  Literally:

1. operands are integers (uint8 or int8 values); each product ``a*b`` is exact;
2. the accumulator is a signed 32-bit integer, ``[-2**31, 2**31 - 1]``; products are added
   in the time order (matmul ``k = 0..K-1``; conv: input channel of the group, kernel row,
   kernel column), clamping at every step; a sticky flag remembers the direction of the
   latest clamp;
3. the bias (``AccBias`` as a signed 16-bit integer, times ``2**AccBiasShift``) is one more
   saturating step after the last product;
4. a flagged accumulator reads as +inf (top) or -inf (bottom); the value is multiplied
   exactly by ``PostScale`` (an fp16 value) and by ``2**-PostRightShift``; ReLU takes
   ``max(t, 0)``;
5. the result rounds once to nearest, ties to even: to an integer clamped to the output
   range (uint8 [0, 255], int8 [-128, 127]; +inf -> top, -inf -> bottom; NaN -> 0), or to
   fp16 (bit pattern; NaN -> 0x7e00).  An output "saturated" if its accumulator clamped or
   its integer was clamped (and it is not NaN).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from tests.helpers.reference import (
    F16_NAN,
    F16_NEG_INF,
    F16_POS_INF,
    _div_round,
    decode_f16,
    f16_bits_of_fraction,
    conv_terms,
)

ACC_MIN = -(2**31)
ACC_MAX = 2**31 - 1
RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def accumulate_int(products):
    """Serial saturating accumulation of exact integer products: ``(acc, flag)``."""
    acc, flag = 0, 0
    for p in products:
        acc += p
        if acc > ACC_MAX:
            acc, flag = ACC_MAX, 1
        elif acc < ACC_MIN:
            acc, flag = ACC_MIN, -1
    return acc, flag


def ref_matmul_int(a, b):
    """``(acc, flag)`` lists of lists for integer ``a`` (M, K) and ``b`` (K, N)."""
    A = [[int(v) for v in row] for row in np.asarray(a).tolist()]
    B = [[int(v) for v in row] for row in np.asarray(b).tolist()]
    M, K, N = len(A), len(B), len(B[0]) if B else 0
    acc = [[0] * N for _ in range(M)]
    flag = [[0] * N for _ in range(M)]
    for i in range(M):
        for j in range(N):
            acc[i][j], flag[i][j] = accumulate_int(A[i][k] * B[k][j] for k in range(K))
    return acc, flag


def ref_conv2d_int(x, w, stride=1, padding=0, dilation=1, groups=1):
    """``(acc, flag)`` nested lists [N][CO][oh][ow] of an integer NCHW conv (padding: zeros)."""
    X, Wt = np.asarray(x), np.asarray(w)
    shape, terms = conv_terms(X.shape, Wt.shape, stride, padding, dilation, groups)
    states = [
        accumulate_int(0 if xi is None else int(X[xi]) * int(Wt[wi]) for xi, wi in pairs) for pairs in terms
    ]
    acc = np.array([a for a, _ in states], dtype=object).reshape(shape).tolist()
    flag = np.array([f for _, f in states], dtype=object).reshape(shape).tolist()
    return acc, flag


def signed16(bits: int) -> int:
    bits &= 0xFFFF
    return bits - 0x10000 if bits & 0x8000 else bits


def ref_ne_int(
    acc: int, flag: int, bias_bits=None, bias_shift=0, scale_bits=0x3C00, shift=0, relu=False, out="int8"
):
    """One output of the INT8 path's NE stage: ``(value, saturated, nan)``; ``value`` is an
    int for "int8"/"uint8" outputs and an fp16 bit pattern for "fp16"."""
    if bias_bits is not None:
        acc, flag = _bias(acc, flag, bias_bits, bias_shift)
    kind, sv = decode_f16(scale_bits)  # ("num", n * 2**-24) / ("inf", s) / ("nan", 0)
    # t = v * scale * 2**-shift with v = acc, or +-inf when flagged
    if flag:
        vk, vv = "inf", flag
    else:
        vk, vv = "num", Fraction(acc)
    if kind == "nan":
        t = ("nan",)
    elif vk == "inf" or kind == "inf":
        s_v = vv if vk == "inf" else (0 if vv == 0 else (1 if vv > 0 else -1))
        s_s = sv if kind == "inf" else (0 if sv == 0 else (1 if sv > 0 else -1))
        t = ("nan",) if s_v * s_s == 0 else ("inf", s_v * s_s)
    else:
        t = ("num", vv * Fraction(sv, 2**24) / 2**shift)
    if relu:
        if t[0] == "inf" and t[1] < 0:
            t = ("num", Fraction(0))
        elif t[0] == "num" and t[1] <= 0:
            t = ("num", Fraction(0))
    if t[0] == "nan":
        return (0 if out in RANGES else F16_NAN), False, True
    if out in RANGES:
        lo, hi = RANGES[out]
        if t[0] == "inf":  # beyond the range: clamped to its end
            r, clamped = (hi if t[1] > 0 else lo), True
        else:
            r = _div_round(t[1].numerator, t[1].denominator, trunc=False)
            clamped = r < lo or r > hi
        r = min(max(r, lo), hi)
        return r, bool(flag) or clamped, False
    if t[0] == "inf":
        return (F16_POS_INF if t[1] > 0 else F16_NEG_INF), bool(flag), False
    if t[1] == 0 and not relu:  # an exact zero: IEEE's sign of a product, acc 0 being +0
        negative = (acc < 0) != bool(scale_bits & 0x8000)
        return (0x8000 if negative else 0), bool(flag), False
    return f16_bits_of_fraction(t[1]), bool(flag), False  # a tiny negative value rounds to -0


def _bias(acc, flag, bias_bits, bias_shift):
    acc += signed16(bias_bits) << bias_shift
    if acc > ACC_MAX:
        return ACC_MAX, 1
    if acc < ACC_MIN:
        return ACC_MIN, -1
    return acc, flag
