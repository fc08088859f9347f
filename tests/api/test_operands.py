"""One rounding to fp16 for every operand, through every entry point (SPEC 2, decision 1;
docs/numerics.md "Operands"): the numpy API, the activations, a LUT block, Device.run.

The reference is exact: the value the user gave, as a Fraction, rounded to nearest even
by tests/helpers/reference.py (f16_bits_of_fraction), never fastane's own conversion.  The inputs
sit at fp16 rounding ties, displaced by less than the spacing of float64 (longdouble) or
float32 (float64): a double rounding gets half of them wrong, which the tests check too,
so they can fail."""

import functools
import warnings
from fractions import Fraction

import numpy as np
import pytest
from tests.helpers.device import ACTIVATIONS, F16, bits
from tests.helpers.reference import f16_bits_of_fraction

import fastane
from fastane import activations, lower, lut
from fastane.device import Device
from fastane.operands import fp16_operand

LD = np.longdouble
WIDE = np.finfo(LD).nmant > np.finfo(np.float64).nmant
needs_wide = pytest.mark.skipif(not WIDE, reason="np.longdouble is float64 on this platform")
ACTS = ACTIVATIONS


def exact(v) -> Fraction:
    """The exact value of a numpy scalar (any real dtype) or a Python number."""
    if isinstance(v, (np.floating, float)):
        return Fraction(*v.as_integer_ratio())
    return Fraction(int(v))


def ref16(x) -> np.ndarray:
    """``x`` rounded once to fp16 by exact rational arithmetic (NaN stays NaN)."""
    x = np.asarray(x)
    out = np.empty(x.shape, np.uint16)
    for i, v in np.ndenumerate(x):
        if isinstance(v, np.floating) and np.isnan(v):
            out[i] = 0x7E00
        elif isinstance(v, np.floating) and np.isinf(v):
            out[i] = 0x7C00 if v > 0 else 0xFC00
        else:
            out[i] = f16_bits_of_fraction(exact(v)) | (0x8000 if np.signbit(v) else 0)
    return out.view(F16)


def ties(dtype, lo_exp: int, hi_exp: int, per_binade: int = 6, seed: int = 0) -> np.ndarray:
    """Midpoints between neighbouring fp16 values in the binades [2**e, 2**(e + 1)),
    lo_exp <= e < hi_exp (e = -25: the midpoint of 0 and the least subnormal; e = 15: the
    overflow tie 65520), each exactly and one ``dtype`` step either side, both signs; even
    and odd lower neighbours alike."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(lo_exp, hi_exp):
        if e < -24:
            lows, spacing = [Fraction(0)], Fraction(2) ** -24
        else:
            spacing = Fraction(2) ** (max(e, -14) - 10)
            count = int(Fraction(2) ** e / spacing)
            ms = rng.choice(count, min(per_binade, count), replace=False)
            lows = [Fraction(2) ** e + int(m) * spacing for m in ms]
            if e == 15:
                lows.append(Fraction(65504))
        for low in lows:
            mid = low + spacing / 2
            t = np.asarray(mid.numerator, dtype) / np.asarray(mid.denominator, dtype)  # exact
            assert exact(dtype(t)) == mid
            for v in (np.nextafter(t, dtype(0)), t, np.nextafter(t, dtype(np.inf))):
                out += [v, -v]
    return np.array(out, dtype)


def naive16(x, via) -> np.ndarray:
    """A double rounding, through ``via`` (what the tests must tell apart)."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(via).astype(F16)


# the inputs: longdouble (finer than float64), float64 (finer than float32), float32
CASES = {
    "longdouble": (LD, np.float64),
    "float64": (np.float64, np.float32),
    "float32": (np.float32, None),
}


@functools.cache
def _case(name, lo_exp, hi_exp):
    dtype, via = CASES[name]
    x = ties(dtype, lo_exp, hi_exp)
    return x, via, ref16(x)


def case(name, lo_exp=-6, hi_exp=14):
    """(inputs, the dtype a double rounding would go through, the exact fp16 roundings)."""
    if CASES[name][0] is LD and not WIDE:
        pytest.skip("np.longdouble is float64 on this platform")
    x, via, want = _case(name, lo_exp, hi_exp)
    return x.copy(), via, want


# ------------------------------------------------------------------ the rounding itself
def test_the_issue_example_rounds_once_everywhere():
    x = LD(1) + LD(2) ** -11 + LD(2) ** -60
    if WIDE:
        assert naive16(x, np.float64) == F16(1.0)  # the old double rounding
    assert fp16_operand(x, "f", "x").view(np.uint16) == 0x3C01
    assert bits(fastane.matmul(np.array([[x]]), np.array([[1.0]]))) == 0x3C01
    assert bits(fastane.relu(x)) == 0x3C01
    assert bits(lut.hardtanh_block(-2.0, 2.0)(x)) == 0x3C01


@pytest.mark.parametrize("name", list(CASES))
def test_fp16_operand_is_the_exact_rounding(name):
    x, via, want = case(name, -25, 16)  # subnormals, normals, overflow to inf
    got = fp16_operand(x, "f", "x")
    assert got.dtype == F16 and np.array_equal(bits(got), bits(want))
    if via is not None:  # a double rounding would be caught here
        assert not np.array_equal(bits(naive16(x, via)), bits(want))


@needs_wide
def test_longdouble_edges():
    e = LD(2) ** -85  # below float64's precision at 2**-25
    x = np.array(
        [
            LD(65520) - LD(2) ** -40,
            LD(65520),
            LD(2) ** -25 + e,
            LD(2) ** -25,
            -(LD(2) ** -25) - e,
            LD(np.inf),
            -LD(np.inf),
            LD(np.nan),
            LD(-0.0),
            LD(2) ** 16383,
            LD(np.finfo(np.float64).max) * 4,
            LD(2) ** -16400,
        ]
    )
    got = fp16_operand(x, "f", "x")
    assert np.array_equal(bits(got[:3]), np.array([0x7BFF, 0x7C00, 0x0001], np.uint16))
    assert np.array_equal(bits(got), bits(ref16(x)))
    assert np.array_equal(bits(got[:3]) == bits(naive16(x[:3], np.float64)), [False, True, False])


def test_integers_bools_python_scalars_and_sequences():
    ints = np.array([0, 1, -1, 2049, 2051, -2051, 65504, 65519, 65520, -65520, 2**40, -(2**62)], np.int64)
    for arr in (
        ints,
        ints.astype(np.int32).clip(-(2**31), 2**31 - 1),
        np.array([0, 255], np.uint8),
        np.array([2**64 - 1, 2**63], np.uint64),
        np.array([True, False]),
    ):
        assert np.array_equal(bits(fp16_operand(arr, "f", "x")), bits(ref16(arr)))
    assert bits(fp16_operand(2051, "f", "x")) == 0x6802  # 2052: the tie goes to even
    assert bits(fp16_operand(True, "f", "x")) == 0x3C00
    seq = [1 + 2.0**-11, 1 + 3 * 2.0**-11, 7, True, -0.0]
    assert np.array_equal(bits(fp16_operand(seq, "f", "x")), bits(ref16(np.array(seq))))


@pytest.mark.parametrize(
    "bad, what",
    [
        (np.ones(3, complex), "complex"),
        (np.array(["1"]), "real numeric"),
        (np.array([b"1"]), "real numeric"),
        (np.array([None], object), "real numeric"),
        (2**70, "Python int beyond 64 bits"),
        (np.array(["2020-01-01"], "M8[D]"), "real numeric"),
    ],
)
def test_non_real_operands_are_refused(bad, what):
    with pytest.raises(TypeError, match=what):
        fp16_operand(bad, "matmul", "a")
    with pytest.raises(TypeError, match=f"relu: input .*{what}"):
        fastane.relu(bad)
    with pytest.raises(TypeError, match=f"matmul: a .*{what}"):
        fastane.matmul(bad, np.ones((1, 1)))


def test_ragged_sequences_are_refused():
    with pytest.raises(ValueError, match="matmul: a is not a rectangular array"):
        fastane.matmul([[1.0], [1.0, 2.0]], np.ones((1, 1)))
    with pytest.raises(ValueError, match="rectangular"):
        fp16_operand([[1.0], [1.0, 2.0]], "f", "x")


# ------------------------------------------------------------------ every entry point
# Inputs in [2**-6, 2**14): their fp16 roundings are on the Q16.16 grid and inside the
# accumulator, so a product with 1 reads out as the operand itself.
@pytest.mark.parametrize("name", list(CASES))
def test_matmul_linear_conv_round_once(name, device):
    x, via, want = case(name)
    n = x.size
    one = np.ones((1, 1))
    results = {
        "matmul a": fastane.matmul(x[:, None], one)[:, 0],
        "matmul b": fastane.matmul(one, x[None, :])[0],
        "linear x": fastane.linear(x[:, None], one)[:, 0],
        "linear weight": fastane.linear(one, x[:, None])[0],
        "linear bias": fastane.linear(np.zeros((1, 1)), np.zeros((n, 1)), x)[0],
        "conv1d input": fastane.conv1d(x[None, None, :], np.ones((1, 1, 1)))[0, 0],
        "conv1d weight": fastane.conv1d(np.ones((1, 1, 1)), x[:, None, None])[0, :, 0],
        "conv2d input": fastane.conv2d(x.reshape(1, 1, 1, n), np.ones((1, 1, 1, 1))).reshape(n),
        "conv2d weight": fastane.conv2d(np.ones((1, 1, 1, 1)), x.reshape(n, 1, 1, 1)).reshape(n),
        "conv2d bias": fastane.conv2d(np.zeros((1, 1, 1, 1)), np.zeros((n, 1, 1, 1)), x).reshape(n),
    }
    for where, got in results.items():
        assert np.array_equal(bits(got), bits(want)), where
    if via is not None:
        assert not np.array_equal(bits(naive16(x, via)), bits(want))


@pytest.mark.parametrize("name", list(CASES))
def test_lowering_rounds_once(name, device):
    """The lowering's own entry (``lower.execute``, ``Lowered.with_weights``) rounds its
    input, weights and bias once, as the numpy API does."""
    x, via, want = case(name)
    n = x.size
    low = lower.build(lower.Conv(1, 1, 1, n, 1))  # 1 -> 1 channel over n pixels
    got, _ = lower.execute(low, x.reshape(1, 1, 1, n), np.ones((1, 1, 1, 1)))
    assert np.array_equal(bits(got.reshape(n)), bits(want)), "input"
    low = lower.build(lower.Conv(1, 1, 1, 1, n))  # 1 -> n channels
    got, _ = lower.execute(low, np.ones((1, 1, 1, 1)), x.reshape(n, 1, 1, 1))
    assert np.array_equal(bits(got.reshape(n)), bits(want)), "weight"
    low = lower.build(lower.Conv(1, 1, 1, 1, n, bias=True))
    got, _ = lower.execute(low, np.zeros((1, 1, 1, 1)), np.zeros((n, 1, 1, 1)), x)
    assert np.array_equal(bits(got.reshape(n)), bits(want)), "bias"


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("act", ACTS)
def test_activations_round_once(name, act, device):
    """Each activation of ``x`` is the activation of the exactly rounded ``x``; over these
    inputs each activation tells the rounded ``x`` from the double rounded one."""
    x, via, want16 = case(name, -25, 16)
    f = getattr(activations, act)
    with fastane.errstate(lut_range="ignore"):
        got, want = f(x), f(want16)
        assert np.array_equal(bits(got), bits(want))
        if via is not None:
            assert not np.array_equal(bits(f(naive16(x, via))), bits(want))


@needs_wide
def test_activation_parameters_round_once():
    e = LD(2) ** -60
    lo = -(LD(0.5) + LD(2) ** -12 + e)  # a tie of fp16 spacing 2**-11, and a bit more
    x = np.array([-1.0, 0.75], F16)
    assert bits(activations.hardtanh(x, min_val=lo)[0]) == ref16(lo).view(np.uint16)
    slope = LD(2) ** -7 * (1 + LD(2) ** -11 + e)
    got = activations.leaky_relu(np.array([-1.0], F16), negative_slope=slope)
    assert bits(got[0]) == bits(-ref16(slope))


@pytest.mark.parametrize("name", list(CASES))
def test_device_run_rounds_once(name):
    """Device.run of a lowered 1x1 convolution with weight 1 (an fp16 input slot)."""
    x, via, want = case(name)
    n = x.size
    (program,) = lower.build(lower.Conv(1, 1, 1, n, 1)).with_weights(np.ones((1, 1, 1, 1), F16))
    out = Device(memory_size=16 << 20).run(program, {lower.lowered.SLOT_INPUT: x.reshape(1, 1, 1, n)})
    assert np.array_equal(bits(out[lower.lowered.SLOT_OUTPUT].reshape(n)), bits(want))
    with pytest.raises(TypeError, match="Device.run: input for slot 5 must be a real numeric"):
        Device(memory_size=16 << 20).run(program, {lower.lowered.SLOT_INPUT: x.reshape(1, 1, 1, n) * 1j})


def test_float32_arrays_take_the_hardware_rounding_with_numpys_bits():
    """float32 arrays of every size are rounded by the hardware conversion: numpy's bits
    on random patterns (subnormals, inf, overflow included), on every fp16 value's halfway
    points and neighbours, on a non-contiguous view, and on arrays of a few elements (a
    tiny call's operands, 0-d included), with no warning on overflow."""
    rng = np.random.default_rng(5)
    rand = rng.integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).astype(np.float32).view(np.uint32)
    near = np.concatenate([(h.astype(np.int64) + d) % 2**32 for d in (-1, 0, 1, 4095, 4096, 4097)])
    near32 = near.astype(np.uint32).view(np.float32)
    small = (
        rand[:1],
        near32[:7].reshape(7, 1),
        near32[-4095:],
        np.float32(1e9) * np.ones((4, 4), np.float32),
    )
    for x in (rand, near32, rand.reshape(512, 512)[:, ::3], np.array(np.float32(65520.0)), *small):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = fp16_operand(x, "f", "x")
        with np.errstate(all="ignore"):
            want = x.astype(F16)
        nan = np.isnan(x)
        assert got.dtype == F16 and got.shape == x.shape
        assert np.array_equal(bits(got)[~nan], bits(want)[~nan])
        assert np.isnan(got[nan]).all()


def test_widen_fp16_every_pattern():
    from fastane import operands

    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).reshape(256, 256)
    got, want = operands.widen_fp16(x[:, ::2]), x[:, ::2].astype(np.float32)
    nan = np.isnan(want)
    assert got.dtype == np.float32 and np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()
