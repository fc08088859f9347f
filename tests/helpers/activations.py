"""The exact reference of an activation run as an elementwise program (fastane.lower's
Eltwise): the NE stage, then the planar chain of sigmoid/silu, each step rounded once.
Shared by tests/lower/test_lower_eltwise.py and tests/device/test_eltwise_lane.py."""

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
    stage, then the planar chain of sigmoid/silu, each step rounded once."""
    nl, table, scale = NE_STAGE.get(name, (2, name, 1.0))
    words = None if table is None else lut.get_block(table).to_words()
    r = ref_ne(bits_to_float(xb), None, scale, nl, words)
    if name not in ("sigmoid", "silu") or r == QNAN:
        return r
    s = round_fraction(Fraction(bits_to_float(r)) + Fraction(1, 2))  # planar: + 0.5
    if name == "sigmoid":
        return s
    prod = ref_eltwise("mul", np.uint16(xb).view(F16), bits_to_float(s))
    return QNAN if np.isnan(prod) else int(bits(prod)[()])
