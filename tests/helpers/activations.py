"""The exact reference of an activation run as an elementwise program (fastane.lower's
Eltwise): the NE stage, then the planar chain of sigmoid/silu/hard_swish, each step rounded once.
Shared by tests/lower/test_lower_eltwise.py and tests/device/test_eltwise_lane.py."""

import math
from fractions import Fraction

import numpy as np

from fastane import lut

from tests.helpers.device import bits
from tests.helpers.lut_reference import QNAN, bits_to_float, ref_ne, round_fraction
from tests.helpers.planar import ref_eltwise

F16 = np.float16
#: the NE stage of each activation: (NonlinearMode, registry table, PostScale)
NE_STAGE = {
    "relu": (1, None, 1.0),
    "exp": (2, "exp2", bits_to_float(0x3DC5)),
    "sigmoid": (2, "sigmoid", 1.0),
    "silu": (2, "sigmoid", 1.0),
}


def ref_bits(name, xb: int) -> int:
    """The independent reference (exact rationals, tests/helpers/lut_reference.py): the NE
    stage, then the planar chain of sigmoid/silu (+0.5; silu: times x) or hard_swish (the
    hard-sigmoid block's gate times x), each step rounded once."""
    nl, table, scale = NE_STAGE.get(name, (2, name, 1.0))
    words = None if table is None else lut.get_block(table).to_words()
    r = ref_ne(bits_to_float(xb), None, scale, nl, words)
    if name not in ("sigmoid", "silu", "hard_swish") or r == QNAN:
        return r
    s = r
    if name != "hard_swish":
        s = round_fraction(Fraction(bits_to_float(r)) + Fraction(1, 2))  # planar: + 0.5
    if name == "sigmoid":
        return s
    prod = ref_eltwise("mul", np.uint16(xb).view(F16), bits_to_float(s))
    return QNAN if np.isnan(prod) else int(bits(prod)[()])


def ref_hard_sigmoid(alpha, beta, xb: int) -> int:
    """``round_fp16(clamp(a16 x + b16, 0, 1))`` at the fp16 pattern ``xb`` in exact rationals,
    ``a16``, ``b16`` the parameters rounded to fp16 (what the hard-sigmoid block holds): the
    limit at +-inf, ``clamp(b16, 0, 1)`` everywhere when ``a16 = 0``; NaN canonical."""
    a16, b16 = float(F16(alpha)), float(F16(beta))
    x = bits_to_float(xb)
    if math.isnan(x):
        return QNAN
    if a16 != 0 and math.isinf(x):
        return 0x3C00 if (x > 0) == (a16 > 0) else 0
    v = Fraction(a16) * Fraction(0 if math.isinf(x) else x) + Fraction(b16)
    return round_fraction(min(max(v, Fraction(0)), Fraction(1)))


def ref_hard_swish(xb: int) -> int:
    """``round_fp16(x * g)``, ``g`` = :func:`ref_hard_sigmoid` (1/6, 1/2) at ``x``: exact
    rationals, IEEE's sign of a zero product (``g >= +0``) and ``inf * 0 = NaN``."""
    x = bits_to_float(xb)
    g = bits_to_float(ref_hard_sigmoid(1 / 6, 1 / 2, xb))
    if math.isnan(x) or (math.isinf(x) and g == 0):
        return QNAN
    if math.isinf(x):
        return xb
    p = round_fraction(Fraction(x) * Fraction(g))
    return 0x8000 if p == 0 and (xb & 0x8000) else p
