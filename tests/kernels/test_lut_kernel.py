"""The LUT kernel against SPEC goldens and the Fraction reference, bit for bit."""

from fractions import Fraction

import numpy as np
import pytest

from fastane import lut
from fastane.kernels import lut as klut
from tests.helpers.lut_reference import QNAN, bits_to_float, float_to_bits, ref_lut, round_fraction

SPEC_TANH = (
    "0000 2ff5 33d6 35bc 3765 3870 3915 39a2 3a18 3a79 3ac9 3b0a 3b3e 3b67 3b88 "
    "3ba2 3bb6 3bc6 3bd3 3bdd 3be5 3beb 3bef 3bf3 3bf6 3bf8 3bfa 3bfb 3bfc 3bfd "
    "3bfe 3bfe 3bff"
)


def run(block, xbits):
    """Kernel results (bits, events) for fp16 patterns ``xbits``."""
    xb = np.asarray(xbits, dtype=np.uint16)
    x = xb.view(np.float16).astype(np.float64)
    lutf, luti = block.kernel_args()
    bits = np.empty(x.size, dtype=np.int64)
    ev = np.empty(x.size, dtype=np.int64)
    for j in range(x.size):
        bits[j], ev[j] = klut.lut_eval(x[j], lutf, luti)
    return bits, ev


def adversarial_inputs(block, rng, n_random=200):
    """Knot points, midpoints and neighbours, bounds, specials, and random patterns."""
    R = min(block.R, 30)
    off = 16 * block.mode if block.mode <= 2 else 0
    pts = set()
    for i in range(33):
        for frac in (0.0, 0.5, 0.25):
            x = (i + frac - off) * 2.0**-R
            if abs(x) < 65504:
                pts.add(float_to_bits(np.float16(x)))
    for b in (block.lo, block.hi):
        pts.add(b)
    for p in list(pts):
        for d in (-1, 1):
            pts.add((p + d) & 0xFFFF)
        pts.add(p ^ 0x8000)
    pts |= {
        0x0000,
        0x8000,
        0x0001,
        0x8001,
        0x03FF,
        0x0400,
        0x3C00,
        0xBC00,
        0x7BFF,
        0xFBFF,
        0x7C00,
        0xFC00,
        0x7E00,
        0x3555,
        0x4248,
        0xC248,
    }
    pts |= {int(v) for v in rng.integers(0, 0x10000, n_random)}
    return np.array(sorted(pts), dtype=np.uint16)


def assert_matches_reference(block, xbits):
    words = block.to_words()
    bits, ev = run(block, xbits)
    for j, xb in enumerate(np.asarray(xbits)):
        want, want_ev = ref_lut(words, int(xb))
        got = int(bits[j])
        if want == QNAN:
            assert got == QNAN, (hex(int(xb)), hex(got))
        else:
            assert got == want, (block.describe(), hex(int(xb)), bits_to_float(int(xb)), hex(got), hex(want))
        assert ev[j] == want_ev, (hex(int(xb)), ev[j], want_ev)


# ----------------------------------------------------------------------------- goldens
def test_tanh_knots_are_spec_golden():
    want = [int(h, 16) for h in SPEC_TANH.split()]
    assert lut.lut_table("tanh").tolist() == want
    assert np.tanh(np.arange(33) / 8).astype(np.float16).view(np.uint16).tolist() == want


def test_tanh_at_knots_returns_knots():
    blk = lut.get_block("tanh")
    xs = (np.arange(33) / 8).astype(np.float16).view(np.uint16)
    bits, _ = run(blk, xs)
    assert bits.tolist() == list(blk.knots)
    bits, _ = run(blk, xs | 0x8000)
    assert bits.tolist() == [k | 0x8000 for k in blk.knots]


def test_impulse_table_triangle():
    """T[8] = 1, R = 3: 0 at |x| = 7/8, 1 at 1, 0 at 9/8, linear in between (seed)."""
    knots = np.zeros(33)
    knots[8] = 1.0
    blk = lut.CoeffBlock.from_values(0.0, 4.0, 0.0, 0.0, knots, R=3, mode=0, symmetry="odd")
    xs = np.arange(0.75, 1.25, 1 / 1024).astype(np.float16)
    bits, _ = run(blk, xs.view(np.uint16))
    got = bits.astype(np.uint16).view(np.float16).astype(np.float64)
    want = np.maximum(0.0, 1.0 - np.abs(8 * xs.astype(np.float64) - 8)).astype(np.float16)
    assert np.array_equal(got, want.astype(np.float64))
    at = {0.875: 0.0, 0.9375: 0.5, 1.0: 1.0, 1.0625: 0.5, 1.125: 0.0}
    for x, y in at.items():
        b, _ = run(blk, [float_to_bits(x), float_to_bits(-x)])
        assert bits_to_float(int(b[0])) == y and bits_to_float(int(b[1])) == -y


# ------------------------------------------------------------------- vs the reference
@pytest.mark.parametrize("name", sorted(lut.APPLE_IDENTICAL))
def test_registry_blocks_match_reference(name):
    blk = lut.get_block(name)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    assert_matches_reference(blk, adversarial_inputs(blk, rng))


def _random_block(rng):
    mode = int(rng.choice(klut.KNOWN_MODES))
    sym = "odd" if rng.random() < 0.4 else "none"
    kind = rng.integers(4)
    if kind == 0:
        knots = rng.standard_normal(33)
    elif kind == 1:  # mixed magnitudes: huge and tiny neighbours
        knots = rng.choice([-1.0, 1.0], 33) * 2.0 ** rng.integers(-24, 15, 33) * rng.random(33)
    elif kind == 2:
        knots = np.cumsum(rng.random(33)) * 100
    else:
        knots = rng.integers(-3, 4, 33) * 0.25
    if mode in (0, 1, 2):
        R = int(rng.choice([-2, -1, 0, 1, 2, 3, 5, 8, 64]))
    elif mode in (5, 6):
        R = 4
    elif mode in (7, 9):
        R = 6
    else:
        R = int(rng.choice([0, 3, 5]))
    lo, hi = sorted(rng.choice([-np.inf, -30.0, -4.0, -1.0, 0.0, 1.0, 2.5, 60.0, np.inf], 2))
    if mode in (5, 6, 7, 9):
        lo = 0.0
    vals = rng.standard_normal(6) * 3
    return lut.CoeffBlock.from_values(
        lo, hi, vals[0], vals[1], knots, vals[2], vals[3], vals[4], vals[5], R=R, mode=mode, symmetry=sym
    )


def test_random_blocks_match_reference():
    rng = np.random.default_rng(20240607)
    for _ in range(60):
        blk = _random_block(rng)
        assert_matches_reference(blk, adversarial_inputs(blk, rng, n_random=40))


def test_tanh_exhaustive_matches_reference():
    blk = lut.get_block("tanh")
    xs = np.arange(0, 0x10000, 3, dtype=np.uint32).astype(np.uint16)
    assert_matches_reference(blk, xs)


# ------------------------------------------------------------ exact rounding of sums
def test_round_sum_f16_on_midpoints_and_cancellation():
    rng = np.random.default_rng(5)
    cases = []
    for p in rng.integers(0, 0x7BFF, 300):
        a, b = bits_to_float(int(p)), bits_to_float(int(p) + 1)
        mid = (a + b) / 2
        tiny = mid * 2.0**-60 if mid else 2.0**-90
        cases += [
            (mid, 0.0, 0.0, 0.0),
            (mid, tiny, 0.0, 0.0),
            (mid, -tiny, 0.0, 0.0),
            (mid + 1000.0, -1000.0, tiny, -tiny / 4),
            (-mid, tiny, 0.0, 0.0),
            (mid, 3.0, -3.0, tiny),
        ]
    cases += [
        (65520.0, 0.0, 0.0, 0.0),
        (65520.0, -(2.0**-40), 0.0, 0.0),
        (1.0, -1.0, 0.0, 0.0),
        (1.0, -1.0, 2.0**-80, 0.0),
        (1.0, -1.0, -(2.0**-80), 0.0),
        (2.0**-25, 0.0, 0, 0),
        (2.0**-25, 2.0**-90, 0.0, 0.0),
        (-(2.0**-25), -(2.0**-90), 0.0, 0.0),
    ]
    for p in list(rng.integers(0, 0x7BFF, 150)) + list(rng.integers(0, 0x400, 50)):
        mid = (bits_to_float(int(p)) + bits_to_float(int(p) + 1)) / 2
        for k in (1, 2, 5, 17, 33, 64, 1000):
            for sgn in (1.0, -1.0):
                d = sgn * k * float(np.spacing(mid))
                cases += [(mid + d, 0.0, 0.0, 0.0), (mid + 1024.0, -1024.0, d, 0.0), (d, mid, 3.0e4, -3.0e4)]
    for t in cases:
        want = round_fraction(sum(Fraction(v) for v in t))
        got = int(klut.round_sum_f16(*t))
        if want == 0 and sum(Fraction(v) for v in t) < 0:
            want = 0x8000  # a tiny negative sum rounds to -0
        assert got == want, (t, hex(got), hex(want))


# ---------------------------------------------------------------------- range events
def test_lut_apply_counts_range_events():
    blk = lut.get_block("exp2")
    x = np.array([-30.0, -25.0, 0.0, 15.0, 16.0, 17.0, np.inf, -np.inf, np.nan])
    out = np.empty(x.size, dtype=np.uint16)
    counts = np.zeros(2, dtype=np.int64)
    lutf, luti = blk.kernel_args()
    klut.lut_apply(x, out, lutf, luti, counts)
    assert counts.tolist() == [2, 2]  # -30, -inf below -25; 17, inf above 16
    assert out.view(np.float16)[[0, 2, 4, 5]].tolist() == [0.0, 1.0, np.inf, np.inf]
    assert out[8] == QNAN
    klut.lut_apply(x, out, lutf, luti, counts)
    assert counts.tolist() == [4, 4]  # accumulates


def test_events_left_and_right_of_table():
    gelu = lut.get_block("gelu")
    x = np.array([-5.0, -4.25, -4.0, 0.0, 4.0, 4.5, np.inf])
    bits, ev = run(gelu, x.astype(np.float16).view(np.uint16))
    assert ev.tolist() == [-1, -1, 0, 0, 0, 1, 1]
    y = bits.astype(np.uint16).view(np.float16)
    assert y[0] == 0 and y[1] == 0 and y[5] == np.float16(4.5) and np.isinf(y[6])
    tanh = lut.get_block("tanh")
    _, ev = run(tanh, np.array([-5.0, 5.0, 3.0], np.float16).view(np.uint16))
    assert ev.tolist() == [1, 1, 0]  # odd tables see |x|: never an underflow
