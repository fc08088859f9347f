"""fp16 <-> float64 conversions of fastane.kernels.fp16, against numpy (whose float64 ->
float16 cast is correctly rounded) and against the Fraction-based rounding of
tests/helpers/reference.py."""

from fractions import Fraction

import numpy as np
import pytest

from fastane.kernels import fp16
from tests.helpers.reference import decode_f16, f16_bits_of_fraction

ALL = np.arange(65536, dtype=np.uint16)


def encode(x):
    x = np.ascontiguousarray(x, dtype=np.float64).ravel()
    out = np.empty(x.size, np.uint16)
    fp16.f64_to_f16_bits_array(x, out)
    return out


def decode(bits):
    bits = np.ascontiguousarray(bits, dtype=np.uint16).ravel()
    out = np.empty(bits.size)
    fp16.f16_bits_to_f64_array(bits, out)
    return out


def round16(x):
    x = np.ascontiguousarray(x, dtype=np.float64).ravel()
    out = np.empty(x.size)
    fp16.round_f16_array(x, out)
    return out


def numpy_bits(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16).view(np.uint16).ravel()


def check_against_numpy(x):
    """encode and round_f16 agree with numpy on every element (NaN -> canonical 0x7e00)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    got = encode(x)
    want = numpy_bits(x)
    nan = np.isnan(x)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, (
        f"{bad.size} mismatches, e.g. x={x[bad[:5]]!r} got={got[bad[:5]]} want={want[bad[:5]]}"
    )
    assert np.all(got[nan] == 0x7E00)
    r = round16(x)
    rw = want.view(np.float16).astype(np.float64)
    assert np.array_equal(r[~nan].view(np.uint64), rw[~nan].view(np.uint64))
    assert np.isnan(r[nan]).all()


def test_decode_all_patterns_exact():
    got = decode(ALL)
    want = ALL.view(np.float16).astype(np.float64)
    nan = np.isnan(want)
    assert nan.sum() == 2 * 1023
    assert np.array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64))  # incl. -0.0
    assert np.isnan(got[nan]).all()
    assert np.array_equal(np.signbit(got), ALL >= 0x8000)


def test_decode_matches_fraction_reference():
    got = decode(ALL)
    for h in range(0, 65536, 7):  # every 7th pattern through the field-by-field decoder
        kind, v = decode_f16(h)
        if kind == "nan":
            assert np.isnan(got[h])
        elif kind == "inf":
            assert got[h] == v * np.inf
        else:
            assert Fraction(got[h]) == Fraction(v, 2**24)


def test_encode_all_patterns_round_trip():
    values = ALL.view(np.float16).astype(np.float64)
    nan = np.isnan(values)
    got = encode(values)
    assert np.array_equal(got[~nan], ALL[~nan])  # every value, +-0 and +-inf included
    assert np.all(got[nan] == 0x7E00)
    r = round16(values)
    assert np.array_equal(r[~nan].view(np.uint64), values[~nan].view(np.uint64))
    assert np.isnan(r[nan]).all()


def test_random_float64_bit_patterns():
    rng = np.random.default_rng(1)
    check_against_numpy(rng.integers(0, 2**64, 2_000_000, dtype=np.uint64).view(np.float64))


def test_random_float64_in_fp16_range():
    rng = np.random.default_rng(2)
    n = 2_000_000
    mag = 2.0 ** rng.uniform(-27, 17, n)  # below the subnormals to past the overflow
    check_against_numpy(np.where(rng.random(n) < 0.5, -mag, mag))


def test_random_float32_values():
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 2_000_000, dtype=np.uint64).astype(np.uint32)
    x32 = bits.view(np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        x64 = x32.astype(np.float64)
    got = encode(x64)  # float32 -> float64 is exact: one rounding in all
    want = numpy_bits(x32)  # numpy rounds float32 -> float16 directly
    nan = np.isnan(x32)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.all(got[nan] == 0x7E00)


def _finite_positive_pairs():
    lo = np.arange(0x0000, 0x7C00, dtype=np.uint16)  # 0 .. 65504, and the next value up
    lo_v = lo.view(np.float16).astype(np.float64)
    hi_v = np.append(lo_v[1:], 65536.0)  # past 65504 the next step would be 2**16
    return lo, lo_v, hi_v


def test_every_tie_rounds_to_even():
    lo, lo_v, hi_v = _finite_positive_pairs()
    mid = (lo_v + hi_v) / 2  # exact in float64
    even_lo = (lo & 1) == 0
    want = np.where(even_lo, lo, lo + 1).astype(np.uint16)  # 0x7bff's tie goes up to 0x7c00 (inf)
    assert want[-1] == 0x7C00 and mid[-1] == 65520.0
    assert np.array_equal(encode(mid), want)
    assert np.array_equal(encode(-mid), want | 0x8000)
    check_against_numpy(np.concatenate([mid, -mid]))
    # one float64 ulp on either side of each tie decides it
    below, above = np.nextafter(mid, 0), np.nextafter(mid, np.inf)
    assert np.array_equal(encode(below), lo)
    assert np.array_equal(encode(above), lo + 1)
    check_against_numpy(np.concatenate([below, above, -below, -above]))


def test_ties_against_fraction_reference():
    lo, lo_v, hi_v = _finite_positive_pairs()
    rng = np.random.default_rng(4)
    idx = np.concatenate(
        [np.arange(0, 1100), np.arange(lo.size - 50, lo.size), rng.integers(0, lo.size, 2000)]
    )  # subnormals, top, a sample
    mid = (lo_v[idx] + hi_v[idx]) / 2
    got = encode(mid)
    for m, g in zip(mid, got):
        assert f16_bits_of_fraction(Fraction(float(m))) == g


def test_random_values_against_fraction_reference():
    rng = np.random.default_rng(5)
    mag = 2.0 ** rng.uniform(-26, 16.5, 5000)
    x = np.where(rng.random(5000) < 0.5, -mag, mag)
    for v, g in zip(x, encode(x)):
        assert f16_bits_of_fraction(Fraction(float(v))) == g


@pytest.mark.parametrize(
    "x, bits",
    [
        (0.0, 0x0000),
        (-0.0, 0x8000),
        (2.0**-26, 0x0000),
        (-(2.0**-26), 0x8000),  # below half the smallest subnormal
        (2.0**-25, 0x0000),
        (-(2.0**-25), 0x8000),  # exactly half: ties to even (zero)
        (np.nextafter(2.0**-25, 1), 0x0001),
        (3 * 2.0**-25, 0x0002),
        (2.0**-24, 0x0001),
        (2.0**-14 - 2.0**-25, 0x0400),  # tie at the top subnormal -> min normal
        (65504.0, 0x7BFF),
        (np.nextafter(65520.0, 0), 0x7BFF),
        (65520.0, 0x7C00),
        (-65520.0, 0xFC00),
        (1e300, 0x7C00),
        (-1e300, 0xFC00),
        (np.inf, 0x7C00),
        (-np.inf, 0xFC00),
        (5e-324, 0x0000),
        (-5e-324, 0x8000),
        (1.0, 0x3C00),
        (-2.0, 0xC000),
    ],
)
def test_special_values(x, bits):
    assert encode([x])[0] == bits
    assert (
        round16([x]).view(np.uint64)[0]
        == np.array([bits], np.uint16).view(np.float16).astype(np.float64).view(np.uint64)[0]
    )


@pytest.mark.parametrize(
    "pattern",
    [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF, 0x7FF4000000000000],
)
def test_nan_payloads_and_signs(pattern):
    x = np.array([pattern], np.uint64).view(np.float64)
    assert encode(x)[0] == 0x7E00
    assert np.isnan(round16(x)[0])


# ------------------------------------------------------------------ one codec for every kernel
# (moved here from tests/device/test_device_fastpath.py: the branch-free decoder and encoder that
# TileDMA and the fused readout used are now the codec itself, so they are checked against
# the definitions, not against a second copy.)
def test_decode_every_pattern_bit_for_bit_nan_payloads_too():
    got = decode(ALL).view(np.uint64)
    h = ALL.astype(np.uint64)
    sign, exp, frac = h >> np.uint64(15), (h >> np.uint64(10)) & np.uint64(0x1F), h & np.uint64(0x3FF)
    # inf/NaN: float64 exponent all ones, the 10 fraction bits (the payload) at the top
    special = (sign << np.uint64(63)) | np.uint64(0x7FF << 52) | (frac << np.uint64(42))
    values = ALL.view(np.float16).astype(np.float64).view(np.uint64)
    want = np.where(exp == 0x1F, special, values)
    assert np.array_equal(got, want)


def test_encode_near_every_value_and_tie():
    """Every fp16 value, its float64 neighbours, the midpoints between fp16 values and
    random values over the whole float64 exponent range encode as numpy rounds them."""
    rng = np.random.default_rng(0)
    exact = ALL.view(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        nxt = np.nextafter(exact, np.inf)
        prv = np.nextafter(exact, -np.inf)
        mid = (exact[:-1] + exact[1:]) / 2  # ties (and NaN/inf neighbours)
    wide = rng.standard_normal(200000) * np.exp2(rng.integers(-40, 20, 200000))
    check_against_numpy(
        np.concatenate(
            [
                exact,
                nxt,
                prv,
                mid,
                wide,
                [65519.99, 65520.0, 65536.0, 1e300, -1e300, 2.0**-25, -(2.0**-25), 2.0**-26, 5e-324],
            ]
        )
    )


@pytest.mark.parametrize(
    "pattern", [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000123, 0xFFFFFFFFFFFFFFFF]
)
def test_round_keeps_the_nan_it_is_given(pattern):
    x = np.array([pattern], np.uint64).view(np.float64)
    assert round16(x).view(np.uint64)[0] == pattern


def test_every_kernel_converts_through_the_one_codec():
    """The kernels import the codec's functions (no module keeps its own conversion)."""
    from fastane.kernels import acc, dma, lut, ne, planar

    assert dma.f16_to_f64 is fp16.f16_to_f64
    assert lut.f16_to_f64 is fp16.f16_to_f64 and lut.f64_to_f16 is fp16.f64_to_f16
    assert ne.f64_to_f16_inline is fp16.f64_to_f16_inline and ne.round_f16_inline is fp16.round_f16_inline
    assert fp16.f64_to_f16_inline.py_func is fp16.f64_to_f16.py_func  # one definition, two compilations
    assert fp16.round_f16_inline.py_func is fp16.round_f16.py_func
    assert ne.f16_to_f64 is fp16.f16_to_f64
    assert acc.round_f16 is fp16.round_f16  # the MAC readout (kernels/acc.py)
    assert planar.f16_to_f64 is fp16.f16_to_f64 and planar.f64_to_f16 is fp16.f64_to_f16
    assert planar.round_f16 is fp16.round_f16
