"""fastane's own NE lookup tables: one generator of a :class:`~fastane.lut_codec.CoeffBlock`
per table (identical to Apple's where the corpus has one: see
:data:`fastane.lut.APPLE_IDENTICAL`).  :mod:`fastane.lut` (the registry) re-exports them;
the formulas and the evidence are in docs/lut.md.
"""

from __future__ import annotations

import math

import numpy as np

from .lut_codec import SYMMETRY_ODD, SYMMETRY_POSITIVE, CoeffBlock, fp16_pattern, fp16_value

__all__ = [
    "tanh_block",
    "sigmoid_block",
    "gelu_block",
    "exp2_block",
    "reciprocal_block",
    "rsqrt_block",
    "sqrt_block",
    "log2_block",
    "hardtanh_block",
    "relu6_block",
    "leaky_relu_block",
    "rrelu_block",
    "selu_block",
    "elu_block",
    "erf_block",
    "hard_sigmoid_block",
    "hard_swish_block",
    "sign_block",
    "relu_block",
    "step_block",
    "fraction_block",
    "integer_block",
    "atan_low_block",
    "atan_high_block",
    "identity_block",
]


# =============================================================================
# Table generators.  Each returns the block Apple's compiler produced where the corpus
# has one (APPLE_IDENTICAL says which are bit-identical); formulas in docs/lut.md.
# =============================================================================
_I = np.arange(33)
_INF = math.inf
_ZERO = (0.0,) * 33


def _odd_saturating_block(fn) -> CoeffBlock:
    """tanh's layout: odd, knots ``round_fp16(fn(i/8))`` over [0, 4] (R = 3), 1 beyond 4
    (and the right line ``0 x + 1``)."""
    return CoeffBlock.from_values(
        0.0, 4.0, 0.0, 1.0, fn(_I / 8), 0, 0, 0, 1.0, R=3, mode=0, symmetry=SYMMETRY_ODD
    )


def tanh_block() -> CoeffBlock:
    """tanh: knots ``round_fp16(tanh(i/8))``, R = 3, odd, saturating to 1 beyond 4."""
    return _odd_saturating_block(np.tanh)


def sigmoid_block() -> CoeffBlock:
    """The LUT stage of sigmoid: ``sigmoid(x) - 0.5`` (odd) over [0, 8], R = 2.

    Beyond the table, the line through (8, T[32]) and (10, 0.5); 0.5 above 10.  A planar
    task adds the 0.5 (see :data:`PLANAR_STAGES`).  Apple stores -1.0 as the (unused)
    lower bound.
    """
    knots = 1.0 / (1.0 + np.exp(-_I / 4)) - 0.5
    t32 = fp16_value(fp16_pattern(knots[32]))
    slope = (0.5 - t32) / (10.0 - 8.0)
    return CoeffBlock.from_values(
        -1.0, 10.0, 0.0, 0.5, knots, 0, 0, slope, t32 - 8.0 * slope, R=2, mode=0, symmetry=SYMMETRY_ODD
    )


def _erf(x):
    """``math.erf`` of each element of ``x`` (float64)."""
    return np.vectorize(math.erf, otypes=[float])(x)


def _gelu_exact(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


#: GELU knots of Apple's compiled gelu (corpus activation/gelu.bin), fp16 patterns.
#: fastane's own fit (``gelu_block(fit=True)``) reproduces 23 of the 33; the registry uses
#: these so that fastane.gelu matches an Apple-compiled gelu bit for bit.
_GELU_APPLE = (
    0x0000,
    0x8E8A,
    0x9230,
    0x9757,
    0x9BF0,
    0xA011,
    0xA3BF,
    0xA6EC,
    0xA9BF,
    0xAC75,
    0xAE67,
    0xB03D,
    0xB11E,
    0xB184,
    0xB104,
    0xAECF,
    0x922D,
    0x3098,
    0x357E,
    0x389F,
    0x3AB8,
    0x3C78,
    0x3D9A,
    0x3EB9,
    0x3FD2,
    0x4072,
    0x40F8,
    0x417C,
    0x41FE,
    0x427F,
    0x4300,
    0x4380,
    0x4400,
)


def gelu_fit_knots() -> np.ndarray:
    """fastane's GELU knots: least squares over every fp16 x in [-4, 4], ends pinned.

    Continuous piecewise-linear fit of ``x * Phi(x)`` (erf form) with knots at
    ``-4 + i/4``, ``T[0] = 0`` and ``T[32] = 4`` fixed to meet the lines outside the table.
    """
    allx = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = allx[np.isfinite(allx)].astype(np.float64)
    x = np.unique(x[(x >= -4.0) & (x <= 4.0)])
    u = (x + 4.0) * 4.0
    i = np.minimum(np.floor(u).astype(int), 31)
    a = u - i
    A = np.zeros((x.size, 33))
    A[np.arange(x.size), i] = 1.0 - a
    A[np.arange(x.size), i + 1] += a
    y = _gelu_exact(x) - 4.0 * A[:, 32]
    inner = np.linalg.lstsq(A[:, 1:32], y, rcond=None)[0]
    return np.concatenate([[0.0], inner, [4.0]])


def gelu_block(fit: bool = False) -> CoeffBlock:
    """GELU: table over [-4, 4] (R = 2, centred), 0 below -4.4, ``x`` above 4.

    ``fit=False`` (the registry's choice) uses the knots recovered from Apple's compiled
    gelu; ``fit=True`` uses fastane's own least-squares fit (:func:`gelu_fit_knots`).
    """
    blk = CoeffBlock.from_values(
        -4.4, _INF, 0.0, _INF, gelu_fit_knots() if fit else _ZERO, 0, 0, 1.0, 0, R=2, mode=1
    )
    if not fit:
        blk = CoeffBlock(**{**blk.__dict__, "knots": _GELU_APPLE})
    return blk


def exp2_block() -> CoeffBlock:
    """exp2 (exponent mode): knots ``2**(i/32)``, R = 5; 0 below -25, inf above 16.

    ``exp`` is the same table behind a PostScale of ``round_fp16(log2(e))`` (0x3dc5).
    """
    return CoeffBlock.from_values(-25.0, 16.0, 0.0, _INF, 2.0 ** (_I / 32), R=5, mode=10)


def reciprocal_block() -> CoeffBlock:
    """1/x (mantissa mode, odd): knots ``1/m`` for m = 0.5 + i/64, R = 6."""
    return CoeffBlock.from_values(0.0, _INF, _INF, 0.0, 64.0 / (32 + _I), R=6, mode=7, symmetry=SYMMETRY_ODD)


def _even_mantissa(fn):
    with np.errstate(divide="ignore"):
        k = fn(_I / 16.0)
    k[:8] = 0.0  # m = i/16 < 0.5 never occurs; Apple stores zeros
    return k


def rsqrt_block() -> CoeffBlock:
    """1/sqrt(x) (even-exponent mantissa mode): knots ``1/sqrt(i/16)`` for i >= 8, R = 4."""
    return CoeffBlock.from_values(
        0.0,
        _INF,
        _INF,
        0.0,
        _even_mantissa(lambda m: 1 / np.sqrt(m)),
        R=4,
        mode=6,
        symmetry=SYMMETRY_POSITIVE,
    )


def sqrt_block() -> CoeffBlock:
    """sqrt(x) (even-exponent mantissa mode): knots ``sqrt(i/16)`` for i >= 8, R = 4."""
    return CoeffBlock.from_values(
        0.0, _INF, 0.0, _INF, _even_mantissa(np.sqrt), R=4, mode=5, symmetry=SYMMETRY_POSITIVE
    )


def log2_block() -> CoeffBlock:
    """log2(x) (mantissa mode, adds the exponent): knots ``log2(0.5 + i/64)``, R = 6."""
    return CoeffBlock.from_values(
        0.0, _INF, -_INF, 0.0, np.log2((32 + _I) / 64.0), R=6, mode=9, symmetry=SYMMETRY_POSITIVE
    )


def hardtanh_block(min_val: float = -1.0, max_val: float = 1.0) -> CoeffBlock:
    """clamp(x, min_val, max_val): no table (R = 64), lines of slope 1, centred mode."""
    return CoeffBlock.from_values(min_val, max_val, min_val, max_val, _ZERO, 1.0, 0, 1.0, 0, R=64, mode=1)


def relu6_block() -> CoeffBlock:
    """min(max(x, 0), 6): :func:`hardtanh_block` (0, 6)."""
    return hardtanh_block(0.0, 6.0)


def leaky_relu_block(negative_slope: float = 0.01) -> CoeffBlock:
    """``x`` for x >= 0, ``negative_slope * x`` below: two lines, no table (R = 64)."""
    return CoeffBlock.from_values(-_INF, _INF, -_INF, _INF, _ZERO, negative_slope, 0, 1.0, 0, R=64, mode=1)


def rrelu_block(lower: float = 1.0 / 8, upper: float = 1.0 / 3) -> CoeffBlock:
    """RReLU in inference: a leaky ReLU of slope ``(lower + upper) / 2``."""
    return leaky_relu_block((lower + upper) / 2.0)


def _coefficients16(**values) -> list:
    """Each of ``values`` rounded to fp16, as a block holds it; a ValueError naming them all
    if one is not finite there."""
    with np.errstate(over="ignore", invalid="ignore"):  # refused below
        out = [fp16_value(fp16_pattern(v)) for v in values.values()]
    if not all(math.isfinite(v) for v in out):
        names = " and ".join(f"{k} {v}" for k, v in values.items())
        raise ValueError(f"{names} must be finite in fp16 (the block's coefficients)")
    return out


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _scaled_elu_block(alpha: float, scale: float) -> CoeffBlock:
    """``scale * (x if x > 0 else alpha * expm1(x))``: table over [-8, 0] (R = 2, mode 2),
    ``scale16 * x`` above 0, ``-scale16 * alpha16`` below -8.

    Knots follow Apple's fp16 chain (selu): ``round(scale16 * round(alpha16 * expm1(x)))``
    with alpha and scale themselves rounded to fp16.
    """
    a16, s16 = _coefficients16(alpha=alpha, scale=scale)
    x = -8.0 + _I / 4.0
    elu16 = np.array([fp16_value(fp16_pattern(a16 * math.expm1(v))) for v in x])
    knots = np.array([fp16_value(fp16_pattern(s16 * e)) for e in elu16])
    low = -s16 * a16
    return CoeffBlock.from_values(-8.0, _INF, low, _INF, knots, 0, low, s16, 0, R=2, mode=2)


def selu_block() -> CoeffBlock:
    """SELU: :func:`_scaled_elu_block` with SELU's alpha and scale (Apple's selu block)."""
    return _scaled_elu_block(_SELU_ALPHA, _SELU_SCALE)


def elu_block(alpha: float = 1.0) -> CoeffBlock:
    """ELU: selu's layout with scale 1 (no corpus block): knots ``round(alpha16 * expm1(x))``
    over [-8, 0] (R = 2, mode 2), ``x`` above 0, ``-alpha16`` below -8.

    ``alpha`` is rounded to fp16 (ValueError if it is not finite there).
    """
    return _scaled_elu_block(alpha, 1.0)


def erf_block() -> CoeffBlock:
    """erf: tanh's layout (no corpus block): knots ``round_fp16(erf(i/8))``, R = 3, odd,
    saturating to 1 beyond 4."""
    return _odd_saturating_block(_erf)


#: every finite fp16 value (-0 as +0), ascending, float64: the patterns 0xfbff down to 0x8001,
#: then 0x0000 up to 0x7bff
_FINITE16 = (
    np.concatenate([np.arange(0xFBFF, 0x8000, -1), np.arange(0, 0x7C00)])
    .astype(np.uint16)
    .view(np.float16)
    .astype(np.float64)
)


def hard_sigmoid_block(alpha: float = 0.2, beta: float = 0.5) -> CoeffBlock:
    """``clamp(alpha16 x + beta16, 0, 1)`` (no corpus block): hardtanh's layout (no table,
    R = 64, centred mode) with both lines ``alpha16 x + beta16`` (one rounding of the exact
    value), the range ``[lo, hi]`` the finite fp16 inputs whose line lies in [0, 1], and the
    clamp's values outside it (0 and 1; 1 and 0 for a negative alpha); the knot at x = 0
    ``clamp(beta16, 0, 1)``.  Every fp16 input then gives ``round_fp16(clamp(alpha16 x +
    beta16, 0, 1))`` exactly (+-inf the limits; NaN stays NaN).

    Where no fp16 input has its line in [0, 1] (the line steps over it between two
    neighbouring inputs, or stays on one side), ``lo`` is the first input past the step and
    the lines are the constant beyond it; with ``alpha16 = 0``, ``clamp(beta16, 0, 1)``
    everywhere.  ``alpha`` and ``beta`` are rounded to fp16 (ValueError if one is not
    finite there).  docs/lut.md section 6.
    """
    a16, b16 = _coefficients16(alpha=alpha, beta=beta)
    c = min(max(b16, 0.0), 1.0) + 0.0  # the clamp at x = 0 (+0 for beta16 = -0)
    if a16 == 0.0:
        return CoeffBlock.from_values(-_INF, _INF, c, c, (c,) * 33, 0, c, 0, c, R=64, mode=1)
    below, above = (0.0, 1.0) if a16 > 0 else (1.0, 0.0)  # the clamp's values at -inf, +inf
    p = a16 * _FINITE16  # exact: two fp16 significands
    inside = (p >= -b16) & (p <= 1.0 - b16)  # exact: 1 - b16 spans at most 41 bits
    if inside.any():
        xs = _FINITE16[inside]
        return CoeffBlock.from_values(
            xs[0], xs[-1], below, above, (c,) * 33, a16, b16, a16, b16, R=64, mode=1
        )
    past = (p > 1.0 - b16) if a16 > 0 else (p < -b16)  # the inputs on the +inf side of the step
    lo = _FINITE16[past][0] if past.any() else _INF
    return CoeffBlock.from_values(lo, _INF, below, above, (above,) * 33, 0, above, 0, above, R=64, mode=1)


def hard_swish_block() -> CoeffBlock:
    """The gate of hard_swish ``x * clamp(x/6 + 1/2, 0, 1)`` (and PyTorch's Hardsigmoid):
    :func:`hard_sigmoid_block` (1/6, 1/2), alpha16 = 0x3155."""
    return hard_sigmoid_block(1.0 / 6.0, 0.5)


def sign_block() -> CoeffBlock:
    """sign(x): odd, no table (R = 64): 0 at 0, 1 for |x| > 0."""
    return CoeffBlock.from_values(
        0.0, 1.0, 0.0, 1.0, _ZERO, 0, 0, 0, 1.0, R=64, mode=0, symmetry=SYMMETRY_ODD
    )


def relu_block() -> CoeffBlock:
    """ReLU as a LUT (corpus unary/norm.bin): 0 below 0, ``x`` above, no table."""
    return CoeffBlock.from_values(0.0, _INF, 0.0, _INF, _ZERO, 1.0, 0, 1.0, 0, R=64, mode=1)


def step_block() -> CoeffBlock:
    """Heaviside step ``x > 0`` (ceil's middle stage): 1 above 2**-24, 0 below -2**-24."""
    tiny = 2.0**-24
    return CoeffBlock.from_values(-tiny, tiny, 0.0, 1.0, _ZERO, 0, 0, 0, 1.0, R=64, mode=1)


def fraction_block() -> CoeffBlock:
    """``x - trunc(x)`` (fraction mode, odd; ceil's first stage)."""
    return CoeffBlock.from_values(-_INF, _INF, 0.0, 0.0, _ZERO, R=0, mode=3, symmetry=SYMMETRY_ODD)


def integer_block() -> CoeffBlock:
    """``trunc(x)`` (integer mode, odd, R = 5; ceil's last stage)."""
    return CoeffBlock.from_values(-_INF, _INF, -_INF, _INF, _ZERO, R=5, mode=4, symmetry=SYMMETRY_ODD)


def atan_low_block() -> CoeffBlock:
    """atan's first term: ``atan(min(|x|, 2))`` (odd), knots ``atan(i/16)``, R = 4."""
    a2 = math.atan(2.0)
    return CoeffBlock.from_values(
        0.0, 2.0, 0.0, a2, np.arctan(_I / 16), 1.0, 0, 0, a2, R=4, mode=0, symmetry=SYMMETRY_ODD
    )


def atan_high_block() -> CoeffBlock:
    """atan's second term: ``atan(|x|) - atan(2)`` for |x| >= 2 (odd), R = -1 (spacing 2).

    Knots ``atan(2i) - atan(2)``; between 64 and 2000 the secant slope
    ``(atan(2000) - atan(64)) / 1936`` with intercept ``T[32]`` (Apple's choice: a 2-ulp
    step at 64); ``atan(2000) - atan(2)`` above 2000.
    """
    a2 = math.atan(2.0)
    knots = np.arctan(2.0 * _I) - a2
    slope = (math.atan(2000.0) - math.atan(64.0)) / (2000.0 - 64.0)
    return CoeffBlock.from_values(
        2.0,
        2000.0,
        0.0,
        math.atan(2000.0) - a2,
        knots,
        0,
        0,
        slope,
        knots[32],
        R=-1,
        mode=0,
        symmetry=SYMMETRY_ODD,
    )


def identity_block() -> CoeffBlock:
    """``x`` everywhere (two lines of slope 1); a neutral block for NonlinearMode != 2."""
    return CoeffBlock.from_values(-_INF, _INF, -_INF, _INF, _ZERO, 1.0, 0, 1.0, 0, R=64, mode=1)
