"""The numpy-facing activations: ufunc-like behaviour, values, stats and errstate."""

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastane
from fastane import LUTRangeError, LUTRangeWarning, lut
from fastane import activations as act
from tests.helpers.device import ACTIVATIONS, bits as _bits
from tests.helpers.activations import ref_hard_sigmoid
from tests.helpers.lut_bounds import BOUNDS, elu_bound, hard_sigmoid_bound
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
    with pytest.raises(TypeError, match="alpha"):
        act.elu([0.0], alpha="1")
    with pytest.raises(ValueError, match="NaN"):
        act.elu([0.0], alpha=float("nan"))
    for alpha in (65520.0, 1e6, -float("inf")):
        with pytest.raises(ValueError, match="finite in fp16"):
            act.elu([0.0], alpha=alpha)
    with pytest.raises(TypeError, match="beta"):
        act.hard_sigmoid([0.0], beta=None)
    with pytest.raises(ValueError, match="NaN"):
        act.hard_sigmoid([0.0], alpha=float("nan"))
    for alpha, beta in ((65520.0, 0.5), (0.2, -1e6), (float("inf"), 0.0)):
        with pytest.raises(ValueError, match="finite in fp16"):
            act.hard_sigmoid([0.0], alpha, beta)


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
    for f in (act.tanh, act.exp, act.sqrt, act.log2, act.relu, act.sign, act.sigmoid, act.elu, act.erf):
        assert np.isnan(f(np.nan))


def test_elu_and_erf_out_of_range():
    """docs/lut.md section 6: elu gives -alpha16 below -8 (and at -inf), x above 0, +0 at -0;
    erf gives +-1 beyond |x| = 4 (and at +-inf), -0 at -0; the range events."""
    x = np.array([-np.inf, -9.0, -8.0, -0.0, 0.0, 0.5, 70.0, np.inf])
    assert _bits(act.elu(x)).tolist() == [0xBC00, 0xBC00, 0xBBFF, 0, 0, 0x3800, 0x5460, 0x7C00]
    assert act.elu(-9.0, alpha=0.7) == -np.float16(0.7) and act.elu(-np.inf, alpha=-2.0) == 2.0
    st = act.last_stats()
    assert (st.lut_underflow, st.lut_overflow) == (1, 0)
    act.elu(x)
    assert (act.last_stats().lut_underflow, act.last_stats().lut_overflow) == (2, 3)
    assert _bits(act.erf(x)).tolist() == [0xBC00, 0xBC00, 0xBC00, 0x8000, 0, 0x382A, 0x3C00, 0x3C00]
    assert (act.last_stats().lut_underflow, act.last_stats().lut_overflow) == (0, 5)
    assert act.erf(4.0) == 1.0 and act.erf(-3.0) == np.float16(-1.0)


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
        "elu",
        "erf",
        "hard_sigmoid",
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


ALL_PATTERNS = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)


def _equals_reference(y, words, xbs):
    """Whether ``y`` (the results at the fp16 patterns ``xbs``) is the reference evaluation
    of the block ``words`` (tests/helpers/lut_reference.py) bit for bit (any NaN for NaN)."""
    for got, xb in zip(_bits(y).tolist(), xbs):
        want = ref_lut(words, int(xb))[0]
        nan = np.isnan(np.uint16(got).view(np.float16))
        assert got == want or (nan and want == 0x7E00), (hex(int(xb)), hex(got), hex(want))


@pytest.mark.parametrize("name", ["elu", "erf"])
def test_elu_and_erf_on_every_fp16_pattern_equal_the_reference(name):
    _equals_reference(
        getattr(act, name)(ALL_PATTERNS.view(np.float16)), lut.get_block(name).to_words(), ALL_PATTERNS
    )


_F16_PATTERNS = st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=40)
#: alphas fp16 holds (beyond 65519.99, it rounds to inf)
_ALPHAS = st.floats(-65504.0, 65504.0, allow_nan=False) | st.sampled_from([0.0, -0.0, 1.0, 0.7, 2.0])


@settings(max_examples=40, deadline=None)
@given(alpha=_ALPHAS, xbs=_F16_PATTERNS)
def test_elu_with_any_alpha_equals_the_reference(alpha, xbs):
    """Hypothesis: elu with any alpha on any fp16 inputs is the reference evaluation of
    ``elu_block(alpha)``, whose knots follow selu's chain (tests/test_lut_block.py), and is
    within its bound of ``alpha16 * expm1(x)``."""
    xb = np.array(xbs, np.uint16)
    y = act.elu(xb.view(np.float16), alpha=alpha)
    _equals_reference(y, lut.elu_block(alpha).to_words(), xbs)
    x = xb.view(np.float16).astype(np.float64)
    fin = np.isfinite(x)
    with np.errstate(over="ignore", invalid="ignore"):  # expm1(inf), 0 * inf: not compared
        ref = np.where(x > 0, x, float(np.float16(alpha)) * np.expm1(x))
    assert (np.abs(y.astype(np.float64)[fin] - ref[fin]) <= elu_bound(alpha)).all()


@settings(max_examples=40, deadline=None)
@given(xbs=_F16_PATTERNS)
def test_erf_on_any_input_equals_the_reference(xbs):
    """Hypothesis: erf on any fp16 inputs is the reference evaluation of its block, within
    its bound of ``math.erf``."""
    y = act.erf(np.array(xbs, np.uint16).view(np.float16))
    _equals_reference(y, lut.get_block("erf").to_words(), xbs)
    x = np.array(xbs, np.uint16).view(np.float16).astype(np.float64)
    fin = np.isfinite(x)
    err = np.abs(y.astype(np.float64)[fin] - np.vectorize(math.erf, otypes=[float])(x[fin]))
    assert (err <= BOUNDS["erf"][3]).all()


def test_hard_sigmoid_and_hard_swish_on_every_fp16_pattern_equal_the_reference():
    """All 65536 inputs: hard_sigmoid (ONNX's defaults) is the Fraction evaluation of its
    block; hard_swish is ``round_fp16(x * g)``, g that evaluation of its gate's block (the
    hard-sigmoid block, 1/6, 1/2), with IEEE's zero sign and ``inf * 0 = NaN``; two tasks."""
    x = ALL_PATTERNS.view(np.float16)
    _equals_reference(act.hard_sigmoid(x), lut.get_block("hard_sigmoid").to_words(), ALL_PATTERNS)
    y = act.hard_swish(x)
    assert act.last_stats().tasks == 2
    gate = lut.get_block("hard_swish").to_words()
    for got, xb in zip(_bits(y).tolist(), ALL_PATTERNS.tolist()):
        xv, g = bits_to_float(xb), bits_to_float(ref_lut(gate, xb)[0])
        if math.isnan(xv) or (math.isinf(xv) and g == 0):
            assert np.isnan(np.uint16(got).view(np.float16)), hex(xb)
            continue
        want = xb if math.isinf(xv) else round_fraction(Fraction(xv) * Fraction(g))
        want = 0x8000 if want == 0 and xb & 0x8000 else want  # x * (+0 or more) keeps x's sign at 0
        assert got == want, (hex(xb), hex(got), hex(want))


#: alphas and betas fp16 holds, and the edge cases: zero slopes, a subnormal slope, steps
#: over [0, 1] between two fp16 inputs
_PARAMS = st.floats(-65504.0, 65504.0, allow_nan=False) | st.sampled_from(
    [0.0, -0.0, 0.2, 0.5, 1 / 6, 2.0**-24, 1e-7, 65504.0, 60000.0, -65504.0]
)


@settings(max_examples=40, deadline=None)
@given(alpha=_PARAMS, beta=_PARAMS, xbs=_F16_PATTERNS)
def test_hard_sigmoid_with_any_parameters_is_the_clamp(alpha, beta, xbs):
    """Hypothesis: hard_sigmoid with any alpha, beta fp16 holds, on any fp16 inputs and where
    its block decides (its range's ends and their neighbours), is the reference evaluation
    of ``hard_sigmoid_block(alpha, beta)`` and ``round_fp16(clamp(alpha16 x + beta16, 0, 1))``
    in exact rationals, within :func:`~tests.helpers.lut_bounds.hard_sigmoid_bound` of the
    clamp with the parameters themselves."""
    words = lut.hard_sigmoid_block(alpha, beta).to_words()
    ends = [b for v in words[:2].view(np.float16) if np.isfinite(v) for b in (int(v.view(np.uint16)),)]
    near = [(b + d) & 0xFFFF for b in ends for d in (-1, 0, 1)]
    pats = np.array(xbs + near + [0, 0x8000, 0x7C00, 0xFC00], np.uint16)
    y = act.hard_sigmoid(pats.view(np.float16), alpha=alpha, beta=beta)
    _equals_reference(y, words, pats.tolist())
    assert _bits(y).tolist() == [ref_hard_sigmoid(alpha, beta, int(b)) for b in pats]
    x = pats.view(np.float16).astype(np.float64)
    fin = np.isfinite(x)
    ref = np.clip(alpha * x[fin] + beta, 0, 1)
    assert (np.abs(y.astype(np.float64)[fin] - ref) <= hard_sigmoid_bound(alpha, beta)).all()


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
