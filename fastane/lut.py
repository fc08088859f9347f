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

:class:`CoeffBlock` (:mod:`fastane.lut_codec`) decodes and encodes that block and packs it
for the kernels; the ``*_block()`` functions (:mod:`fastane.lut_tables`, re-exported here)
generate fastane's own tables (identical to Apple's where the corpus has one: see
:data:`APPLE_IDENTICAL`); :func:`get_block` is the registry, over the records of
:mod:`fastane.activation_table`.
:func:`ne_post` is the Python front of the post-MAC pipeline kernel, and
:func:`fold_affine` the compile-time folding of an affine op into a convolution.
"""

from __future__ import annotations

import functools

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
    fp16_value,
)
from . import lut_tables as _tables
from .activation_table import ACTIVATIONS, TABLES
from .lut_tables import (
    atan_high_block,
    atan_low_block,
    elu_block,
    erf_block,
    exp2_block,
    fraction_block,
    gelu_block,
    gelu_fit_knots,
    hard_sigmoid_block,
    hard_swish_block,
    hardtanh_block,
    identity_block,
    integer_block,
    leaky_relu_block,
    log2_block,
    reciprocal_block,
    relu6_block,
    relu_block,
    rrelu_block,
    rsqrt_block,
    selu_block,
    sigmoid_block,
    sign_block,
    sqrt_block,
    step_block,
    tanh_block,
)

__all__ = [
    "BLOCK_BYTES",
    "WORDS",
    "CoeffBlock",
    "from_words",
    "get_block",
    "table_names",
    "lut_table",
    *_tables.__all__,
    "ne_post",
    "fold_affine",
    "APPLE_IDENTICAL",
    "PLANAR_STAGES",
]


# =============================================================================
# Registry
# =============================================================================
#: table name -> whether the generated block is bit-identical to the corpus block
#: (all 43 words); tables the corpus does not hold are left out
APPLE_IDENTICAL = {t.name: t.apple for t in TABLES.values() if t.apple is not None}

#: another name -> the table it reads: the corpus names, and the activations that use
#: another's table (silu: sigmoid's, exp: exp2's)
_ALIASES = {
    **{alias: t.name for t in TABLES.values() for alias in t.aliases},
    **{a.name: a.table for a in ACTIVATIONS.values() if a.table not in (None, a.name)},
}

#: planar-engine arithmetic that Apple's programs put around a LUT task (docs/lut.md):
#: name -> (PostScale before the LUT, description of the planar tasks after it)
PLANAR_STAGES = {
    a.name: (a.scale, a.chain or f"PostScale {a.scale} before the {a.table} table")
    for a in ACTIVATIONS.values()
    if a.chain or a.scale != 1.0
}


def from_words(words):
    """Packed kernel arguments ``(lutf, luti)`` of a raw coefficient block (>= 43 u16 words).

    The device engine's entry point: ``ne_post(y, bias, scale, 2, *from_words(kmem_words),
    out, counts)``.  Raises :class:`~fastane.TDError` for a block fastane cannot evaluate.
    """
    return CoeffBlock.from_words(words).kernel_args()


def table_names() -> tuple:
    """Names accepted by :func:`get_block` (aliases included)."""
    return tuple(sorted({*TABLES, *_ALIASES}))


def get_block(name: str) -> CoeffBlock:
    """The registered coefficient block ``name`` (e.g. ``"tanh"``, ``"silu"``, ``"exp"``)."""
    if not isinstance(name, str):
        raise TypeError(f"table name must be a str, got {type(name).__name__}")
    key = _ALIASES.get(name, name)
    if key not in TABLES:
        raise ValueError(f"unknown LUT table {name!r}; known: {', '.join(table_names())}")
    return _generated(key)


@functools.cache
def _generated(key: str) -> CoeffBlock:
    return TABLES[key].generator()


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
