"""The numpy-facing activations: ufunc-like behaviour, values, stats and errstate."""

import warnings
from fractions import Fraction

import numpy as np
import pytest

import fastane
from fastane import LUTRangeError, LUTRangeWarning, lut
from fastane import activations as act
from tests.helpers.device import ACTIVATIONS, bits as _bits
from tests.helpers.lut_reference import bits_to_float, ref_lut, round_fraction

UNARY = ACTIVATIONS


# ---------------------------------------------------------------- ufunc-like surface
@pytest.mark.parametrize("name", UNARY)
def test_shapes_dtypes_and_scalars(name):
    f = getattr(act, name)
    assert f.__doc__
    x = np.linspace(-3, 3, 24).reshape(2, 3, 4)
    y = f(x)
    assert y.dtype == np.float16 and y.shape == (2, 3, 4)
    assert np.array_equal(_bits(f(x.astype(np.float16))), _bits(y))  # rounds to fp16 first
    assert np.array_equal(_bits(f(x.astype(np.float32))), _bits(y))
    s = f(0.75)
    assert isinstance(s, np.float16) and _bits(s) == _bits(f(np.array([0.75]))[0])
    assert f(np.zeros((0, 3))).shape == (0, 3)
    assert f([1, 2, 3]).dtype == np.float16  # lists and ints
    assert f(np.array([True, False])).shape == (2,)


@pytest.mark.parametrize("name", ["tanh", "relu", "silu"])
def test_out_argument(name):
    f = getattr(act, name)
    x = np.linspace(-2, 2, 10)
    want = f(x)
    out = np.empty(10, np.float16)
    assert f(x, out=out) is out and np.array_equal(_bits(out), _bits(want))
    out32 = np.empty(10, np.float32)
    f(x, out=out32)
    assert np.array_equal(out32, want.astype(np.float32))
    big = np.empty((3, 10), np.float16)
    f(x, out=big)  # broadcast into out, like a ufunc
    assert all(np.array_equal(_bits(r), _bits(want)) for r in big)
    f(x, out=(out,))
    with pytest.raises(TypeError, match="dtype int32"):
        f(x, out=np.empty(10, np.int32))
    with pytest.raises(ValueError, match="non-broadcastable"):
        f(x, out=np.empty(9, np.float16))
    with pytest.raises(TypeError, match="numpy array"):
        f(x, out=[0.0] * 10)


def test_bad_inputs():
    with pytest.raises(TypeError, match="complex"):
        act.tanh(np.array([1 + 2j]))
    with pytest.raises(TypeError, match="real numeric"):
        act.sigmoid(np.array(["a"]))
    with pytest.raises(TypeError, match="real numeric"):
        act.exp(np.array([object()]))
    with pytest.raises(ValueError, match="below max_val"):
        act.hardtanh([0.0], min_val=1.0, max_val=1.0)
    with pytest.raises(ValueError, match="below max_val"):
        act.hardtanh([0.0], min_val=1.0, max_val=1.0001)  # equal after fp16 rounding
    with pytest.raises(TypeError, match="negative_slope"):
        act.leaky_relu([0.0], negative_slope="0.1")
    with pytest.raises(ValueError, match="NaN"):
        act.leaky_relu([0.0], negative_slope=float("nan"))
    with pytest.raises(ValueError, match="finite"):
        act.leaky_relu([0.0], negative_slope=float("inf"))


# ----------------------------------------------------------------------------- values
def test_golden_values():
    assert _bits(act.tanh(0.125)) == 0x2FF5 and act.tanh(10.0) == 1.0 and act.tanh(-10.0) == -1.0
    assert act.sigmoid(0.0) == 0.5 and act.sigmoid(20.0) == 1.0 and act.sigmoid(-20.0) == 0.0
    assert act.exp(0.0) == 1.0 and act.exp2(3.0) == 8.0 and act.exp2(-3.0) == 0.125
    assert act.exp2(16.5) == np.inf and act.exp2(-26.0) == 0.0
    assert act.log2(8.0) == 3.0 and act.log2(0.0) == -np.inf and act.log2(1.0) == 0.0
    assert act.sqrt(4.0) == 2.0 and act.sqrt(0.0) == 0.0 and act.sqrt(-1.0) == 0.0
    assert act.rsqrt(4.0) == 0.5 and act.rsqrt(0.0) == np.inf and act.rsqrt(np.inf) == 0.0
    assert act.reciprocal(0.0) == np.inf and act.reciprocal(-0.0) == -np.inf
    assert act.reciprocal(4.0) == 0.25 and act.reciprocal(-0.5) == -2.0
    assert _bits(act.sign(-0.0)) == 0x8000 and act.sign(-3.0) == -1.0 and act.sign(1e-7) == 1.0
    assert act.relu6(7.0) == 6.0 and act.relu6(-1.0) == 0.0 and act.relu6(2.5) == 2.5
    assert act.hardtanh(3.0, min_val=-2.0, max_val=2.0) == 2.0
    assert act.leaky_relu(-100.0) == np.float16(-100.0 * float(np.float16(0.01)))
    assert act.leaky_relu(-100.0, negative_slope=0.2) == np.float16(-20.0)
    assert act.relu(-2.0) == 0.0 and act.relu(3.0) == 3.0
    assert act.gelu(0.0) == np.float16(-7.539e-4) and act.gelu(10.0) == 10.0
    assert act.selu(1.0) == np.float16(1.05078125) and act.selu(-100.0) == np.float16(-1.7578125)
    for f in (act.tanh, act.exp, act.sqrt, act.log2, act.relu, act.sign, act.sigmoid):
        assert np.isnan(f(np.nan))


def _ref_bits(name, xb):
    return ref_lut(lut.get_block(name).to_words(), int(xb))[0]


def test_composite_chains_match_reference():
    """sigmoid = round(L + 0.5), silu = round(x * sigmoid), exp = exp2(round(x * 0x3dc5))."""
    rng = np.random.default_rng(11)
    xs = np.concatenate([rng.standard_normal(150) * 6, [0, -0.0, 8, -8, 10, -10, 11.1, 12]])
    x16 = xs.astype(np.float16)
    sig, silu, ex = act.sigmoid(x16), act.silu(x16), act.exp(x16)
    log2e = Fraction(bits_to_float(0x3DC5))
    for j, xb in enumerate(_bits(x16)):
        x = Fraction(bits_to_float(int(xb)))
        L = Fraction(bits_to_float(_ref_bits("sigmoid", xb)))
        s = round_fraction(L + Fraction(1, 2))
        assert _bits(sig[j]) == s
        prod = round_fraction(x * Fraction(bits_to_float(s)))
        if prod == 0 and (x < 0 or xb == 0x8000):
            prod = 0x8000  # IEEE: a zero product takes the sign of x (s >= +0)
        assert _bits(silu[j]) == prod
        t = round_fraction(x * log2e)
        assert _bits(ex[j]) == _ref_bits("exp2", t)


@pytest.mark.parametrize(
    "name",
    [
        "tanh",
        "gelu",
        "selu",
        "reciprocal",
        "rsqrt",
        "sqrt",
        "log2",
        "exp2",
        "sign",
        "relu6",
        "hardtanh",
        "leaky_relu",
    ],
)
def test_single_table_functions_match_reference(name):
    rng = np.random.default_rng(len(name))
    xb = np.concatenate([rng.integers(0, 0x10000, 120), [0, 0x8000, 0x7C00, 0xFC00, 0x0001]])
    y = getattr(act, name)(xb.astype(np.uint16).view(np.float16))
    for j, b in enumerate(xb):
        want = _ref_bits(name, b)
        got = int(_bits(y[j]))
        assert got == want or (np.isnan(y[j]) and want == 0x7E00), (name, hex(int(b)))


# ----------------------------------------------------------------- stats and errstate
def test_last_stats_counts_range_events():
    act.tanh(np.array([5.0, -5.0, 0.5, 4.0]))
    st = act.last_stats()
    assert (st.lut_underflow, st.lut_overflow, st.tasks) == (0, 2, 1)
    act.exp2(np.array([-30.0, 0.0, 20.0, 17.0]))
    assert (act.last_stats().lut_underflow, act.last_stats().lut_overflow) == (1, 2)
    act.silu(np.arange(5.0))
    assert act.last_stats().tasks == 3 and act.last_stats().planar_ops == 10
    act.relu(np.arange(5.0))
    assert act.last_stats().tasks == 1 and act.last_stats().lut_overflow == 0


def test_errstate_lut_range():
    x = np.array([5.0, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        act.tanh(x)  # default: ignored
    with fastane.errstate(lut_range="warn"):
        with pytest.warns(LUTRangeWarning, match="tanh: 1 input"):
            act.tanh(x)
    with fastane.errstate(lut_range="raise"):
        with pytest.raises(LUTRangeError, match="1 above"):
            act.tanh(x)
        act.tanh(np.array([0.5]))  # in range: nothing raised
