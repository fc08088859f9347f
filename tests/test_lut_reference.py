"""The slow LUT and NE reference (tests/helpers/lut_reference.py) checked itself: its
fp16 rounding against numpy on all patterns and midpoints, the tanh knots, the identity block."""

from fractions import Fraction

import numpy as np
import pytest

from tests.helpers.lut_reference import float_to_bits, bits_to_float, ref_lut, round_fraction


def test_round_fraction_matches_numpy_on_all_patterns_and_midpoints():
    rng = np.random.default_rng(1)
    pats = np.arange(0, 0x7C00, 7, dtype=np.uint16)
    for p in pats:
        v = bits_to_float(int(p))
        assert round_fraction(Fraction(v)) == int(p)
        assert round_fraction(-Fraction(v)) == (int(p) | 0x8000 if p else 0)
    # midpoints between neighbours: ties to even
    for p in rng.integers(0, 0x7BFF, 400):
        a, b = Fraction(bits_to_float(int(p))), Fraction(bits_to_float(int(p) + 1))
        mid = (a + b) / 2
        want = int(p) if p % 2 == 0 else int(p) + 1
        assert round_fraction(mid) == want
        assert round_fraction(mid + Fraction(1, 2**60)) == int(p) + 1
        assert round_fraction(mid - Fraction(1, 2**60)) == int(p)
    for x in rng.standard_normal(500) * 1000:
        assert round_fraction(Fraction(float(x))) == float_to_bits(np.float16(x))
    assert round_fraction(Fraction(65519)) == 0x7BFF
    assert round_fraction(Fraction(65520)) == 0x7C00
    assert round_fraction(Fraction(1, 2**25)) == 0  # tie at half the smallest subnormal
    assert round_fraction(Fraction(3, 2**26)) == 1


def test_reference_tanh_knot_points_are_the_knots():
    from fastane.lut import get_block

    words = get_block("tanh").to_words()
    for i in range(33):
        xb = float_to_bits(i / 8)
        assert ref_lut(words, xb)[0] == words[4 + i]
        assert ref_lut(words, xb | 0x8000)[0] == (words[4 + i] | 0x8000 if i else 0x8000)


@pytest.mark.parametrize("x,want", [(0.5, 0x3800), (-3.0, 0xC200), (1e-7, None)])
def test_reference_identity_block(x, want):
    from fastane.lut import get_block

    words = get_block("identity").to_words()
    got, _ = ref_lut(words, float_to_bits(np.float16(x)))
    assert got == (want if want is not None else float_to_bits(np.float16(x)))
