"""The NE lookup table: the coefficient block codec, table generators and registry.

A LUT program's KMem payload starts with a 43-word coefficient block (little-endian
u16; the block occupies 0x80 bytes, words 43..63 are zero).  Layout, as recovered from
the 20 distinct blocks of the corpus (see docs/lut.md for the evidence):

====== =====================================================================
word   meaning
====== =====================================================================
0, 1   fp16 input range ``lo``, ``hi`` (compared with ``|x|`` on odd tables)
2, 3   fp16 outputs for ``x < lo`` and ``x > hi``
4..36  the 33 fp16 knots ``T[0..32]``
37, 38 fp16 slope and intercept of the line used left of the table
39, 40 fp16 slope and intercept of the line used right of the table
       (lines ``y = slope * x + intercept``, through ``x = 0``)
41     ``R`` as a signed 16-bit integer: knot spacing ``2**-R``; R = 64 (0x40) leaves
       every nonzero input outside the table (the pure piecewise-linear ops)
42     mode word: low nibble = mode (0 table at ``|x|``/``x``, 1 table centred on 0,
       2 table ending at 0, 3 fraction, 4 integer part, 5 sqrt, 6 rsqrt,
       7 reciprocal, 9 log2, 0xa exp2); bits 0x60 = odd symmetry; 0xc0 = the
       positive-domain ops (sqrt, rsqrt, log2; negative inputs fall below ``lo``)
====== =====================================================================

:class:`CoeffBlock` decodes and encodes that block and packs it for the kernels;
``*_block()`` functions generate fastane's own tables (identical to Apple's where the
corpus has one: see :data:`APPLE_IDENTICAL`); :func:`get_block` is the registry.
:func:`ne_post` is the Python front of the post-MAC pipeline kernel, and
:func:`fold_affine` the compile-time folding of an affine op into a convolution.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .kernels import ne as _kne
from .lut_codec import (
    BLOCK_BYTES,
    MODE_NAMES,
    SYMMETRY_NONE,
    SYMMETRY_ODD,
    SYMMETRY_POSITIVE,
    WORDS,
    CoeffBlock,
    _h,
    _v,
)

__all__ = [
    "BLOCK_BYTES",
    "WORDS",
    "CoeffBlock",
    "from_words",
    "get_block",
    "table_names",
    "lut_table",
    "tanh_block",
    "sigmoid_block",
    "gelu_block",
    "exp2_block",
    "reciprocal_block",
    "rsqrt_block",
    "sqrt_block",
    "log2_block",
    "relu6_block",
    "hardtanh_block",
    "leaky_relu_block",
    "rrelu_block",
    "selu_block",
    "sign_block",
    "relu_block",
    "step_block",
    "fraction_block",
    "integer_block",
    "atan_low_block",
    "atan_high_block",
    "identity_block",
    "ne_post",
    "fold_affine",
    "APPLE_IDENTICAL",
    "PLANAR_STAGES",
]


# =============================================================================
# Table generators.  Each returns the block Apple's compiler produced where the corpus
# has one (APPLE_IDENTICAL says which are bit-identical); formulas in docs/lut.md.
# =============================================================================
_I = np.arange(33)
_INF = math.inf
_ZERO = (0.0,) * 33


def tanh_block() -> CoeffBlock:
    """tanh: knots ``round_fp16(tanh(i/8))``, R = 3, odd, saturating to 1 beyond 4."""
    return CoeffBlock.from_values(
        0.0, 4.0, 0.0, 1.0, np.tanh(_I / 8), 0, 0, 0, 1.0, R=3, mode=0, symmetry=SYMMETRY_ODD
    )


def sigmoid_block() -> CoeffBlock:
    """The LUT stage of sigmoid: ``sigmoid(x) - 0.5`` (odd) over [0, 8], R = 2.

    Beyond the table, the line through (8, T[32]) and (10, 0.5); 0.5 above 10.  A planar
    task adds the 0.5 (see :data:`PLANAR_STAGES`).  Apple stores -1.0 as the (unused)
    lower bound.
    """
    knots = 1.0 / (1.0 + np.exp(-_I / 4)) - 0.5
    t32 = _v(_h(knots[32]))
    slope = (0.5 - t32) / (10.0 - 8.0)
    return CoeffBlock.from_values(
        -1.0, 10.0, 0.0, 0.5, knots, 0, 0, slope, t32 - 8.0 * slope, R=2, mode=0, symmetry=SYMMETRY_ODD
    )


def _gelu_exact(x):
    erf = np.vectorize(math.erf, otypes=[float])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


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


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu_block() -> CoeffBlock:
    """SELU: table over [-8, 0] (R = 2, mode 2), ``scale * x`` above 0.

    Knots follow Apple's fp16 chain: ``round(scale16 * round(alpha16 * expm1(x)))``
    with alpha and scale themselves rounded to fp16; ``-scale16 * alpha16`` below -8.
    """
    a16 = _v(_h(_SELU_ALPHA))
    s16 = _v(_h(_SELU_SCALE))
    x = -8.0 + _I / 4.0
    elu16 = np.array([_v(_h(a16 * math.expm1(v))) for v in x])
    knots = np.array([_v(_h(s16 * e)) for e in elu16])
    low = -s16 * a16
    return CoeffBlock.from_values(-8.0, _INF, low, _INF, knots, 0, low, s16, 0, R=2, mode=2)


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


# =============================================================================
# Registry
# =============================================================================
_GENERATORS = {
    "tanh": tanh_block,
    "sigmoid": sigmoid_block,
    "gelu": gelu_block,
    "exp2": exp2_block,
    "reciprocal": reciprocal_block,
    "rsqrt": rsqrt_block,
    "sqrt": sqrt_block,
    "log2": log2_block,
    "relu6": relu6_block,
    "hardtanh": hardtanh_block,
    "leaky_relu": leaky_relu_block,
    "rrelu": rrelu_block,
    "selu": selu_block,
    "sign": sign_block,
    "relu": relu_block,
    "step": step_block,
    "fraction": fraction_block,
    "integer": integer_block,
    "atan_low": atan_low_block,
    "atan_high": atan_high_block,
    "identity": identity_block,
}
_ALIASES = {"silu": "sigmoid", "exp": "exp2", "inv": "reciprocal", "leakyrelu": "leaky_relu"}

#: registry name -> whether the generated block is bit-identical to the corpus block
#: (all 43 words).  gelu: the registry block is Apple's; fastane's own fit differs.
APPLE_IDENTICAL = {
    "tanh": True,
    "sigmoid": True,
    "exp2": True,
    "reciprocal": True,
    "rsqrt": True,
    "sqrt": True,
    "log2": True,
    "relu6": True,
    "hardtanh": True,
    "leaky_relu": True,
    "rrelu": True,
    "selu": True,
    "sign": True,
    "relu": True,
    "step": True,
    "fraction": True,
    "integer": True,
    "atan_low": True,
    "atan_high": True,
    "gelu": False,
}

#: planar-engine arithmetic that Apple's programs put around a LUT task (docs/lut.md):
#: name -> (PostScale before the LUT, description of the planar tasks after it)
PLANAR_STAGES = {
    "sigmoid": (1.0, "+0.5: round_fp16(lut + 0.5)"),
    "silu": (1.0, "+0.5, then *x: round_fp16(x * round_fp16(lut + 0.5))"),
    "exp": (_v(0x3DC5), "PostScale log2(e) = 0x3dc5 before the exp2 table"),
}


def from_words(words):
    """Packed kernel arguments ``(lutf, luti)`` of a raw coefficient block (>= 43 u16 words).

    The device engine's entry point: ``ne_post(y, bias, scale, 2, *from_words(kmem_words),
    out, counts)``.  Raises :class:`~fastane.TDError` for a block fastane cannot evaluate.
    """
    return CoeffBlock.from_words(words).kernel_args()


def table_names() -> tuple:
    """Names accepted by :func:`get_block` (aliases included)."""
    return tuple(sorted({*_GENERATORS, *_ALIASES}))


def get_block(name: str) -> CoeffBlock:
    """The registered coefficient block ``name`` (e.g. ``"tanh"``, ``"silu"``, ``"exp"``)."""
    if not isinstance(name, str):
        raise TypeError(f"table name must be a str, got {type(name).__name__}")
    key = _ALIASES.get(name, name)
    if key not in _GENERATORS:
        raise ValueError(f"unknown LUT table {name!r}; known: {', '.join(table_names())}")
    return _generated(key)


@functools.cache
def _generated(key: str) -> CoeffBlock:
    return _GENERATORS[key]()


def lut_table(name: str) -> np.ndarray:
    """The 33 knots of table ``name`` as fp16 patterns (uint16), e.g. ``lut_table("tanh")``."""
    return np.array(get_block(name).knots, dtype=np.uint16)


# =============================================================================
# Post-MAC pipeline front end
# =============================================================================
_NO_BIAS = np.zeros(0)


def ne_post(y, bias=None, scale=1.0, nonlinear=0, block=None, out=None, counts=None):
    """Run the NE block on a MAC readout ``y`` of shape (N, C, S) (float64, fp16 values).

    ``bias``: per-channel fp16 values (length C) or None; ``scale``: the PostScale value;
    ``nonlinear``: 0 identity, 1 ReLU, 2 LUT (``block`` a :class:`CoeffBlock`).
    Returns ``out`` (uint16 fp16 patterns, shape (N, C, S)); ``counts`` (int64[2]) receives
    the LUT underflow/overflow counts.  Inputs must already be exact fp16 values.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 3:
        raise ValueError(f"ne_post expects a (N, C, S) array, got shape {y.shape}")
    b = _NO_BIAS if bias is None else np.ascontiguousarray(bias, dtype=np.float64).reshape(-1)
    if b.size not in (0, y.shape[1]):
        raise ValueError(f"bias has {b.size} values for {y.shape[1]} channels")
    if nonlinear not in (0, 1, 2):
        raise ValueError(f"nonlinear mode must be 0, 1 or 2, got {nonlinear!r}")
    if nonlinear == 2 and block is None:
        raise ValueError("nonlinear mode 2 (LUT) needs a coefficient block")
    lutf, luti = (block or get_block("identity")).kernel_args()
    if out is None:
        out = np.empty(y.shape, dtype=np.uint16)
    elif not (
        isinstance(out, np.ndarray)
        and out.shape == y.shape
        and out.dtype == np.uint16
        and out.flags.writeable
    ):
        raise ValueError(f"out must be a writeable uint16 array of shape {y.shape}")
    if counts is None:
        counts = np.zeros(2, dtype=np.int64)
    elif not (
        isinstance(counts, np.ndarray)
        and counts.dtype == np.int64
        and counts.ndim == 1
        and counts.size >= 2
        and counts.flags.writeable
    ):
        raise ValueError("counts must be a writeable 1-D int64 array of at least 2 elements")
    _kne.ne_post(y, b, float(scale), int(nonlinear), lutf, luti, out, counts)
    return out


# =============================================================================
# Compile-time folding
# =============================================================================
def fold_affine(weight, bias, s, c):
    """Fold ``s * z + c`` applied after a convolution ``z = W * x + b`` into the conv.

    Returns ``(W', b')`` with ``W' = s * W`` and ``b' = s * b + c`` (per output channel
    when ``s``/``c`` are arrays of length ``W.shape[0]``), computed in float64 and rounded
    once to fp16, the weight format.  ``bias=None`` means zero.  Golden (seed): W = 4,
    b = -2, s = 0.5, c = 1 -> W' = 2, b' = 0, so ``ReLU((4x - 2)/2 + 1)`` is ``ReLU(2x)``.
    """
    w = np.asarray(weight, dtype=np.float64)
    cout = w.shape[0] if w.ndim else 1
    if bias is None:
        b = np.zeros(cout) if w.ndim else np.zeros(())
    else:
        b = np.asarray(bias, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    for name, v in (("s", s), ("c", c), ("bias", b)):
        if v.ndim > 1 or (v.ndim == 1 and v.size not in (1, cout)):
            raise ValueError(
                f"{name} must be a scalar or have one value per output channel ({cout}), got shape {v.shape}"
            )
    s_w = s.reshape((-1,) + (1,) * (w.ndim - 1)) if s.ndim == 1 and w.ndim > 1 else s
    w2 = (s_w * w).astype(np.float16)
    b2 = (s * b + c).astype(np.float16)
    return w2, b2
