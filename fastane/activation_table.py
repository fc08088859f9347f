"""The NE activations and the lookup tables behind them: one record each.

:data:`TABLES` holds every coefficient block fastane generates (:class:`Table`: its
generator, whether it is bit-identical to Apple's corpus block, the corpus names it also
goes by); :data:`ACTIVATIONS` every activation of :mod:`fastane.activations`
(:class:`Activation`: its table, the PostScale before it, the chain Apple's programs run
after the NE stage, the docstring of its public function).  The rest derives from them:
:func:`fastane.lut.get_block` and :data:`fastane.lut.APPLE_IDENTICAL`,
:data:`fastane.lower.problems.SINGLE_STAGE`/``MULTI_STAGE`` and
:func:`~fastane.lower.problems.ne_stage`, and the public functions of
:mod:`fastane.activations` (and so of :mod:`fastane`).  docs/lut.md has the evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .lut_codec import CoeffBlock, fp16_value
from . import lut_tables

__all__ = ["Table", "Activation", "TABLES", "ACTIVATIONS", "EXP_SCALE"]


@dataclass(frozen=True)
class Table:
    """A coefficient block fastane generates, registered as ``name``."""

    name: str
    generator: Callable[[], CoeffBlock]
    #: the generated block equals the corpus block in all 43 words (True), differs
    #: (False), or the corpus has none (None)
    apple: bool | None
    #: other names :func:`fastane.lut.get_block` accepts for it (the corpus file names)
    aliases: tuple = ()


@dataclass(frozen=True)
class Activation:
    """An activation of :mod:`fastane.activations`, computed as Apple's programs do."""

    name: str
    #: the docstring of the public function
    doc: str
    #: the :data:`TABLES` entry the activation reads (None: no table)
    table: str | None
    #: what the NE stage does after the PostScale: "lut" (the table), "relu"
    #: (NonlinearMode 1) or "identity" (the chain does the rest)
    nonlinear: str = "lut"
    #: the fp16 PostScale applied to the input before the NE stage's nonlinearity
    scale: float = 1.0
    #: None for a single NE stage; else the tasks the lowering emits after the NE stage
    #: (corpus unary/sigmoid.bin, activation/silu.bin)
    chain: str | None = None
    #: the offset a planar task adds to the table's output in the chain (sigmoid, silu: 0.5,
    #: the table holding sigmoid - 0.5); 0: no such task
    offset: float = 0.0
    #: the keyword parameters of the public function beyond ``x`` and ``out`` (the
    #: function is written out in :mod:`fastane.activations`); () for ``f(x, /, out=None)``
    params: tuple = ()

    @property
    def single_stage(self) -> bool:
        """One NE task computes it (a table, or NonlinearMode 1)."""
        return self.chain is None


#: fp16 log2(e) (0x3dc5): the PostScale of exp before the exp2 table
EXP_SCALE = fp16_value(0x3DC5)

#: registry name -> :class:`Table`
TABLES = {
    t.name: t
    for t in (
        Table("tanh", lut_tables.tanh_block, True),
        Table("sigmoid", lut_tables.sigmoid_block, True),
        # the registry block holds Apple's recovered knots; fastane's own fit differs
        Table("gelu", lut_tables.gelu_block, False),
        Table("exp2", lut_tables.exp2_block, True),
        Table("reciprocal", lut_tables.reciprocal_block, True, aliases=("inv",)),
        Table("rsqrt", lut_tables.rsqrt_block, True),
        Table("sqrt", lut_tables.sqrt_block, True),
        Table("log2", lut_tables.log2_block, True),
        Table("relu6", lut_tables.relu6_block, True),
        Table("hardtanh", lut_tables.hardtanh_block, True),
        Table("leaky_relu", lut_tables.leaky_relu_block, True, aliases=("leakyrelu",)),
        Table("rrelu", lut_tables.rrelu_block, True),
        Table("selu", lut_tables.selu_block, True),
        # no corpus block: selu's layout with scale 1 (alpha 1), tanh's layout (erf),
        # hardtanh's layout with the lines alpha x + beta (ONNX's default 0.2, 0.5; hard_swish's
        # gate: 1/6, 1/2)
        Table("elu", lut_tables.elu_block, None),
        Table("erf", lut_tables.erf_block, None),
        Table("hard_sigmoid", lut_tables.hard_sigmoid_block, None),
        Table("hard_swish", lut_tables.hard_swish_block, None),
        Table("sign", lut_tables.sign_block, True),
        Table("relu", lut_tables.relu_block, True),
        Table("step", lut_tables.step_block, True),
        Table("fraction", lut_tables.fraction_block, True),
        Table("integer", lut_tables.integer_block, True),
        Table("atan_low", lut_tables.atan_low_block, True),
        Table("atan_high", lut_tables.atan_high_block, True),
        Table("identity", lut_tables.identity_block, None),
    )
}

#: public name -> :class:`Activation`, in the order of ``fastane.activations.__all__``
ACTIVATIONS = {
    a.name: a
    for a in (
        Activation(
            "relu",
            "max(x, 0) through the NE's ReLU (NonlinearMode 1; NaN stays NaN, -0 gives +0).",
            None,
            nonlinear="relu",
        ),
        Activation(
            "tanh", "tanh(x) by Apple's table: knots round_fp16(tanh(i/8)), odd, 1.0 beyond |x| = 4.", "tanh"
        ),
        Activation(
            "sigmoid",
            "1/(1 + exp(-x)): the odd table of sigmoid - 0.5 (R = 2), then a planar +0.5.",
            "sigmoid",
            chain="the sigmoid - 0.5 table in the NE stage, then a planar task adding 0.5",
            offset=0.5,
        ),
        Activation(
            "silu",
            "x * sigmoid(x) as Apple computes it: round(x * round(L(x) + 0.5)), three tasks.",
            "sigmoid",
            nonlinear="identity",
            chain="the NE stage's output z kept in L2, the sigmoid - 0.5 table on z (an elementwise NE "
            "task), a planar task adding 0.5, and a planar multiply by z",
            offset=0.5,
        ),
        Activation(
            "gelu",
            "GELU (erf form) by Apple's 33-knot table over [-4, 4]; 0 below -4.4, x above 4.\n\n"
            "Note: Apple's knot at 0 is -7.54e-4 (a least-squares table), so ``gelu(0)`` is not 0.",
            "gelu",
        ),
        Activation(
            "exp",
            "e**x: PostScale by fp16 log2(e) (0x3dc5, rounded to fp16), then the exp2 table.\n\n"
            "The fp16 rounding of ``x * log2(e)`` limits the relative accuracy for large ``|x|``\n"
            "(about ``|x| * 2**-11 * ln 2``), as on the ANE.",
            "exp2",
            scale=EXP_SCALE,
        ),
        Activation("exp2", "2**x by the exponent-mode table 2**(i/32): 0 below -25, inf above 16.", "exp2"),
        Activation("relu6", "min(max(x, 0), 6) by Apple's relu6 block (range clamp, no table).", "relu6"),
        Activation(
            "hardtanh",
            "clamp(x, min_val, max_val) (bounds rounded to fp16) by a range-clamp block.",
            "hardtanh",
            params=("min_val", "max_val"),
        ),
        Activation(
            "leaky_relu",
            "x for x >= 0, negative_slope * x below (slope rounded to fp16; 0.01 -> 0x211f).",
            "leaky_relu",
            params=("negative_slope",),
        ),
        Activation(
            "selu", "SELU by Apple's block: table over [-8, 0] (fp16 chain), 1.0508 * x above 0.", "selu"
        ),
        Activation(
            "elu",
            "x for x > 0, alpha * (exp(x) - 1) below (alpha rounded to fp16): selu's layout with\n"
            "scale 1, knots round_fp16(alpha * expm1(x)) over [-8, 0] (R = 2), -alpha below -8.",
            "elu",
            params=("alpha",),
        ),
        Activation(
            "erf",
            "erf(x) by tanh's layout: odd, knots round_fp16(erf(i/8)) over [0, 4], 1.0 beyond |x| = 4.",
            "erf",
        ),
        Activation(
            "hard_sigmoid",
            "clamp(alpha * x + beta, 0, 1) (alpha, beta rounded to fp16) by one range-clamp block:\n"
            "hardtanh's layout with the lines alpha * x + beta, so each result is the exact value\n"
            "rounded once to fp16.",
            "hard_sigmoid",
            params=("alpha", "beta"),
        ),
        Activation(
            "hard_swish",
            "x * clamp(x/6 + 1/2, 0, 1) as silu's chain with the hard-sigmoid block in place of\n"
            "the sigmoid: round(x * H(x)), H = hard_sigmoid(x, 1/6, 1/2); two tasks.",
            "hard_swish",
            nonlinear="identity",
            chain="the NE stage's output z kept in L2, the hard-sigmoid block (1/6, 1/2) on z (an "
            "elementwise NE task), and a planar multiply by z",
        ),
        Activation("sign", "sign(x): -1, 0 (keeping the sign of zero), 1; NaN stays NaN.", "sign"),
        Activation(
            "reciprocal", "1/x by the mantissa-mode table (odd): 1/(+-0) = +-inf, 1/inf = 0.", "reciprocal"
        ),
        Activation(
            "rsqrt",
            "1/sqrt(x) by the even-exponent mantissa table; negative inputs give +inf (Apple's\n"
            "block maps x < 0 to its value at 0).",
            "rsqrt",
        ),
        Activation("sqrt", "sqrt(x) by the even-exponent mantissa table; negative inputs give 0.", "sqrt"),
        Activation(
            "log2", "log2(x) = exponent + table(mantissa); log2(0) = -inf, negative inputs give -inf.", "log2"
        ),
    )
}
