"""Slow, obviously-correct reference of the ANE MAC numerics (SPEC section 2).

Written for clarity, independently of the kernels: pure Python loops over exact
integers and ``fractions.Fraction``; fp16 rounding is done here from first principles
(no numpy float16 casts, no fastane code).  Follows SPEC 2 literally:

1. operands are fp16 values (callers pass ``np.float16`` arrays);
2. each product is exact and is rounded to the Q16.16 grid (steps of ``2**-16``):
   half to even, or with ``trunc=True`` floor (two's-complement truncation);
3. the accumulator is a signed integer in grid units, range ``[-2**31, 2**31 - 1]``;
   products are added in the fixed time order (matmul: ``k = 0..K-1``; conv: input
   channel within the group, then kernel row, then kernel column) and the accumulator
   clamps at every step; the sticky flag remembers the direction of the latest clamp;
4. readout: NaN if any product was NaN; else +inf / -inf if the flag is up / down;
   else ``acc / 2**16`` rounded to fp16 half to even;
5. a NaN product comes from a NaN operand or ``inf * 0``; an infinite product saturates
   the accumulator in its sign (clamp and flag).

Convolution padding is zero *operands*: a padded pixel is an fp16 zero that is
multiplied like any other, so an infinite weight over padding gives a NaN product.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

ACC_MIN = -(2**31)
ACC_MAX = 2**31 - 1
GRID = 2**16  # grid steps per unit

# An fp16 operand, decoded: ("num", n) for the finite value n * 2**-24 (n an integer),
# ("inf", +1 / -1), or ("nan", 0).


def decode_f16(bits: int):
    """Decode an fp16 bit pattern from its fields (sign, 5-bit exponent, 10-bit fraction)."""
    sign = -1 if bits & 0x8000 else 1
    exp = (bits >> 10) & 0x1F
    frac = bits & 0x3FF
    if exp == 0x1F:
        return ("nan", 0) if frac else ("inf", sign)
    if exp == 0:
        return ("num", sign * frac)  # subnormal: frac * 2**-24
    return ("num", sign * (1024 + frac) << (exp - 1))  # (1024 + frac) * 2**(exp - 25)


def _div_round(num: int, den: int, trunc: bool) -> int:
    """num / den (den > 0) rounded to an integer: floor, or half to even."""
    q, r = divmod(num, den)  # floor division: q = floor(num / den), 0 <= r < den
    if trunc:
        return q
    if 2 * r > den or (2 * r == den and q % 2 == 1):
        q += 1
    return q


def product_on_grid(x, y, trunc: bool):
    """The product of two decoded fp16 operands, on the Q16.16 grid.

    Returns ("num", integer grid units), ("inf", sign) or ("nan", 0).
    """
    (kx, vx), (ky, vy) = x, y
    if kx == "nan" or ky == "nan":
        return ("nan", 0)
    if kx == "inf" or ky == "inf":
        sx = vx if kx == "inf" else (0 if vx == 0 else (1 if vx > 0 else -1))
        sy = vy if ky == "inf" else (0 if vy == 0 else (1 if vy > 0 else -1))
        if sx == 0 or sy == 0:
            return ("nan", 0)  # inf * 0
        return ("inf", sx * sy)
    # (vx * 2**-24) * (vy * 2**-24) = vx*vy * 2**-48 = vx*vy / 2**32 grid units
    return ("num", _div_round(vx * vy, 2**32, trunc))


def accumulate(products):
    """Serial saturating accumulation; returns (acc, flag, nan)."""
    acc, flag, nan = 0, 0, False
    for kind, v in products:
        if kind == "nan":
            nan = True
            continue
        if kind == "inf":
            acc, flag = (ACC_MAX, 1) if v > 0 else (ACC_MIN, -1)
            continue
        acc += v
        if acc > ACC_MAX:
            acc, flag = ACC_MAX, 1
        elif acc < ACC_MIN:
            acc, flag = ACC_MIN, -1
    return acc, flag, nan


F16_NAN = 0x7E00
F16_POS_INF = 0x7C00
F16_NEG_INF = 0xFC00


def f16_bits_of_fraction(x: Fraction) -> int:
    """fp16 bit pattern of the rational ``x`` rounded to nearest, ties to even."""
    if x == 0:
        return 0
    sign = 0x8000 if x < 0 else 0
    a = abs(x)
    # Find e with 2**e <= a < 2**(e + 1); fp16 spacing is 2**(max(e, -14) - 10).
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    spacing = Fraction(2) ** (max(e, -14) - 10)
    q = a / spacing
    n = _div_round(q.numerator, q.denominator, trunc=False)  # n * spacing, n <= 2048
    value = n * spacing
    if value > 65504:
        return sign | F16_POS_INF
    if value < Fraction(1, 2**14):  # subnormal (or zero): fraction field = value / 2**-24
        return sign | int(value * 2**24)
    # normal: value = (1024 + frac) * 2**(exp - 25)
    ve = value.numerator.bit_length() - value.denominator.bit_length()
    if Fraction(2) ** ve > value:
        ve -= 1
    exp = ve + 15
    frac = int(value / Fraction(2) ** (ve - 10)) - 1024
    return sign | (exp << 10) | frac


def readout_bits(acc: int, flag: int, nan: bool) -> int:
    if nan:
        return F16_NAN
    if flag > 0:
        return F16_POS_INF
    if flag < 0:
        return F16_NEG_INF
    return f16_bits_of_fraction(Fraction(acc, GRID))


def _bits16(x16: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x16, dtype=np.float16).view(np.uint16)


def _to_f16_array(bits, shape) -> np.ndarray:
    return np.array(bits, dtype=np.uint16).reshape(shape).view(np.float16)


def ref_matmul(a16, b16, trunc: bool = False) -> np.ndarray:
    """``a @ b`` for 2-D fp16 ``a`` (M, K) and ``b`` (K, N), as the ANE computes it."""
    A, B = _bits16(a16), _bits16(b16)
    M, K = A.shape
    K2, N = B.shape
    assert K == K2
    da = [[decode_f16(int(A[i, k])) for k in range(K)] for i in range(M)]
    db = [[decode_f16(int(B[k, j])) for j in range(N)] for k in range(K)]
    out = []
    for i in range(M):
        for j in range(N):
            prods = (product_on_grid(da[i][k], db[k][j], trunc) for k in range(K))
            out.append(readout_bits(*accumulate(prods)))
    return _to_f16_array(out, (M, N))


def pad_pairs(padding):
    """int | (ph, pw) | ((top, bottom), (left, right)) -> ((top, bottom), (left, right))."""
    if isinstance(padding, int):
        return (padding, padding), (padding, padding)
    ph, pw = padding
    ph = (ph, ph) if isinstance(ph, int) else tuple(ph)
    pw = (pw, pw) if isinstance(pw, int) else tuple(pw)
    return ph, pw


def conv_terms(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1):
    """``(output shape, terms)`` of an NCHW conv (cross-correlation, PyTorch conventions):
    ``terms`` lists, per output ``(n, co, oy, ox)`` in C order, the pairs ``(input index
    or None for a padded pixel, weight index)`` of its sum in the time order (channel of
    the group, kernel row, kernel column).  ``stride``/``dilation``: int or (y, x);
    ``padding``: int, (ph, pw) or ((top, bottom), (left, right))."""
    N, C, H, Wd = x_shape
    CO, CG, KH, KW = w_shape
    sy, sx = (stride, stride) if isinstance(stride, int) else stride
    dy, dx = (dilation, dilation) if isinstance(dilation, int) else dilation
    (pt, pb), (pl, pr) = pad_pairs(padding)
    oh = (H + pt + pb - dy * (KH - 1) - 1) // sy + 1
    ow = (Wd + pl + pr - dx * (KW - 1) - 1) // sx + 1
    cog = CO // groups
    terms = []
    for n in range(N):
        for co in range(CO):
            g = co // cog
            for oy in range(oh):
                for ox in range(ow):
                    pairs = []
                    for c in range(CG):  # time order: channel, kernel row, kernel column
                        for ky in range(KH):
                            for kx in range(KW):
                                y = oy * sy + ky * dy - pt
                                xx = ox * sx + kx * dx - pl
                                inside = 0 <= y < H and 0 <= xx < Wd
                                pairs.append(((n, g * CG + c, y, xx) if inside else None, (co, c, ky, kx)))
                    terms.append(pairs)
    return (N, CO, oh, ow), terms


def ref_conv2d(x16, w16, stride=1, padding=0, dilation=1, groups=1, trunc: bool = False) -> np.ndarray:
    """NCHW conv2d (cross-correlation, PyTorch conventions) as the ANE computes it.

    ``x16``: (N, C, H, W), ``w16``: (CO, C // groups, KH, KW), both fp16.  ``stride`` and
    ``dilation``: int or (y, x); ``padding``: int, (ph, pw) or ((top, bottom), (left, right)).
    Padded pixels are fp16 zero operands.
    """
    X, Wt = _bits16(x16), _bits16(w16)
    shape, terms = conv_terms(X.shape, Wt.shape, stride, padding, dilation, groups)
    zero = ("num", 0)
    out = []
    for pairs in terms:
        prods = [
            product_on_grid(zero if xi is None else decode_f16(int(X[xi])), decode_f16(int(Wt[wi])), trunc)
            for xi, wi in pairs
        ]
        out.append(readout_bits(*accumulate(prods)))
    return _to_f16_array(out, shape)


def ref_readout_value(acc: int, flag: int = 0, nan: bool = False) -> np.float16:
    """The fp16 readout of one accumulator state (for direct readout tests)."""
    return _to_f16_array([readout_bits(acc, flag, nan)], (1,))[0]


__all__ = [
    "decode_f16",
    "product_on_grid",
    "accumulate",
    "f16_bits_of_fraction",
    "readout_bits",
    "ref_matmul",
    "ref_conv2d",
    "ref_readout_value",
    "pad_pairs",
    "conv_terms",
    "ACC_MIN",
    "ACC_MAX",
    "GRID",
]
