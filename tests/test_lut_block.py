"""Coefficient block codec, table generators, registry, and error bounds of every table."""

import math
from fractions import Fraction

import numpy as np
import pytest

from fastane import TDError, lut
from fastane import activations as act

from tests.helpers.activations import ref_hard_sigmoid
from tests.helpers.lut_bounds import BOUNDS, elu_bound
from tests.helpers.lut_reference import ref_lut

#: SELU's alpha (ONNX's default)
_SELU_ALPHA = 1.6732632423543772

ALL16 = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
X16 = ALL16[np.isfinite(ALL16)]
XF = X16.astype(np.float64)


# ------------------------------------------------------------------------------ codec
@pytest.mark.parametrize("name", lut.table_names())
def test_roundtrip_words_and_bytes(name):
    blk = lut.get_block(name)
    w = blk.to_words()
    assert w.dtype == np.uint16 and w.size == lut.WORDS
    assert lut.CoeffBlock.from_words(w) == blk
    raw = blk.to_bytes()
    assert len(raw) == lut.BLOCK_BYTES and raw[2 * lut.WORDS :] == bytes(0x80 - 86)
    assert lut.CoeffBlock.from_bytes(b"\xaa" * 0x100 + raw, offset=0x100) == blk


def test_word_positions():
    blk = lut.get_block("selu")
    w = blk.to_words()
    assert (w[0], w[1], w[2], w[3]) == (0xC800, 0x7C00, 0xBF08, 0x7C00)
    assert (w[37], w[38], w[39], w[40], w[41], w[42]) == (0, 0xBF08, 0x3C34, 0, 2, 2)
    atan = lut.get_block("atan_high")
    assert atan.R == -1 and atan.to_words()[41] == 0xFFFF
    assert lut.get_block("relu6").R == 64 and lut.get_block("relu6").to_words()[41] == 0x40


def test_properties_and_describe():
    blk = lut.get_block("reciprocal")
    assert blk.mode == 7 and blk.symmetry == "odd" and blk.mode_word == 0x67
    assert lut.get_block("sqrt").symmetry == "positive"
    assert lut.get_block("exp").symmetry == "none" and lut.get_block("exp").mode == 10
    assert "reciprocal" in blk.describe() and "R=6" in blk.describe()
    assert blk.knot_values[0] == 2.0 and blk.knot_values[32] == 1.0


def test_decode_errors():
    good = lut.get_block("tanh").to_words()
    with pytest.raises(TDError, match="43 words"):
        lut.CoeffBlock.from_words(good[:40])
    with pytest.raises(TDError, match="past the end"):
        lut.CoeffBlock.from_bytes(bytes(50))
    for bad_mode in (0x68, 0x6B, 0x10, 0x160):
        w = good.copy()
        w[42] = bad_mode
        with pytest.raises(TDError, match="unsupported LUT mode"):
            lut.CoeffBlock.from_words(w)
    w = good.copy()
    w[41] = 0x10000 - 30  # R = -30
    with pytest.raises(TDError, match="R = -30"):
        lut.CoeffBlock.from_words(w)


def test_constructor_errors():
    with pytest.raises(ValueError, match="33 knots"):
        lut.CoeffBlock.from_values(0, 1, 0, 1, np.zeros(32))
    with pytest.raises(ValueError, match="symmetry"):
        lut.CoeffBlock.from_values(0, 1, 0, 1, np.zeros(33), symmetry="even")
    with pytest.raises(ValueError, match="unknown LUT mode"):
        lut.CoeffBlock.from_values(0, 1, 0, 1, np.zeros(33), mode=8)
    with pytest.raises(ValueError, match="bit pattern"):
        lut.CoeffBlock(0x10000, 0, 0, 0, (0,) * 33)
    with pytest.raises(ValueError, match="unknown LUT table"):
        lut.get_block("softplus")
    with pytest.raises(TypeError):
        lut.get_block(3)


def test_registry_aliases_and_lut_table():
    assert lut.get_block("silu") is lut.get_block("sigmoid")
    assert lut.get_block("exp") is lut.get_block("exp2")
    assert lut.get_block("inv") is lut.get_block("reciprocal")
    t = lut.lut_table("exp")
    assert t.dtype == np.uint16 and t.shape == (33,)
    assert act.lut_table is lut.lut_table
    assert set(lut.APPLE_IDENTICAL) <= set(lut.table_names())


# ------------------------------------------------------------------------ generators
def test_generated_knots_follow_their_formulas():
    i = np.arange(33)
    r16 = lambda v: np.asarray(v, np.float64).astype(np.float16).view(np.uint16).tolist()
    assert lut.lut_table("tanh").tolist() == r16(np.tanh(i / 8))
    # sigmoid(x) - 0.5 = tanh(x/2)/2: the same patterns, one binade lower
    sig, th = lut.lut_table("sigmoid"), lut.lut_table("tanh")
    assert sig[0] == 0 and (sig[1:].astype(int) == th[1:].astype(int) - 0x400).all()
    assert lut.lut_table("exp2").tolist() == r16(2.0 ** (i / 32))
    assert lut.lut_table("reciprocal").tolist() == r16(1.0 / (0.5 + i / 64))
    assert lut.lut_table("log2").tolist() == r16(np.log2(0.5 + i / 64))
    assert lut.lut_table("sqrt")[8:].tolist() == r16(np.sqrt(i[8:] / 16))
    assert lut.lut_table("rsqrt")[8:].tolist() == r16(1 / np.sqrt(i[8:] / 16))
    assert (lut.lut_table("rsqrt")[:8] == 0).all()
    assert lut.get_block("leaky_relu").slope_left == 0x211F  # fp16(0.01)
    assert lut.get_block("rrelu").slope_left == 0x3355  # fp16((1/8 + 1/3) / 2)
    sig_blk = lut.get_block("sigmoid")
    assert (sig_blk.slope_right, sig_blk.icpt_right) == (0x0800, 0x37FB)


#: the words of a block besides its 33 knots (range, out-of-range values, lines, R, mode)
_FRAME = [0, 1, 2, 3, 37, 38, 39, 40, 41, 42]


def test_erf_is_built_in_tanhs_layout():
    i = np.arange(33)
    erf = np.vectorize(math.erf)(i / 8)
    blk = lut.get_block("erf")
    assert lut.lut_table("erf").tolist() == np.asarray(erf).astype(np.float16).view(np.uint16).tolist()
    assert blk.to_words()[_FRAME].tolist() == lut.get_block("tanh").to_words()[_FRAME].tolist()
    assert (blk.R, blk.mode_word, blk.hi_value) == (3, 0x60, 0x3C00)


@pytest.mark.parametrize("alpha", [1.0, 0.7, 2.0, -1.3, 0.0, 1e-3, 65504.0, _SELU_ALPHA])
def test_elu_is_built_in_selus_layout(alpha):
    """Knots ``round16(alpha16 * expm1(-8 + i/4))`` (selu's chain, scale 1), -alpha16 below -8,
    ``y = x`` above 0; ``elu_block(alpha)`` with SELU's alpha differs from Apple's selu
    block only by the scale."""
    a16 = float(np.float16(alpha))
    blk = lut.elu_block(alpha)
    want = [float(np.float16(a16 * math.expm1(-8 + j / 4))) for j in range(33)]
    assert blk.knot_values.tolist() == want
    w = blk.to_words()
    low = int(np.float16(-a16).view(np.uint16))
    assert (w[0], w[1], w[2], w[3]) == (0xC800, 0x7C00, low, 0x7C00)
    assert (w[37], w[38], w[39], w[40], w[41], w[42]) == (0, low, 0x3C00, 0, 2, 2)
    assert (
        w[[0, 1, 3, 37, 40, 41, 42]].tolist()
        == lut.get_block("selu").to_words()[[0, 1, 3, 37, 40, 41, 42]].tolist()
    )
    if alpha == 1.0:
        assert blk == lut.get_block("elu")


@pytest.mark.parametrize("alpha", [65520.0, 1e6, -np.inf, np.nan])
def test_elu_block_refuses_an_alpha_fp16_cannot_hold(alpha):
    with pytest.raises(ValueError, match="finite in fp16"):
        lut.elu_block(alpha)


def test_gelu_fit_is_close_to_apple():
    fit = lut.gelu_block(fit=True)
    apple = lut.get_block("gelu")
    same = sum(a == b for a, b in zip(fit.knots, apple.knots))
    assert same == 23
    diff = np.abs(fit.knot_values - apple.knot_values).max()
    assert diff < 8e-5
    assert (
        fit.to_words()[[0, 1, 2, 3, 37, 38, 39, 40, 41, 42]].tolist()
        == apple.to_words()[[0, 1, 2, 3, 37, 38, 39, 40, 41, 42]].tolist()
    )


# ------------------------------------------------------------- error bounds (all fp16)
# BOUNDS (tests/helpers/lut_bounds.py): every table's measured error, checked here
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_error_bound_over_all_finite_fp16(name):
    fn, meaning, dom, abs_bound, rel_bound = BOUNDS[name]
    with np.errstate(all="ignore"):
        y = np.asarray(fn(X16)).astype(np.float64)
        ref = meaning(XF)
        m = np.isfinite(ref) & (np.ones_like(XF, bool) if dom is None else dom(XF))
        # where the meaning rounds to an fp16 infinity, the table must give it too
        ref16 = ref.astype(np.float16).astype(np.float64)
        big = m & ~np.isfinite(ref16)
        assert np.array_equal(y[big], ref16[big])
        m &= np.isfinite(ref16)
        assert np.isfinite(y[m]).all()
        err = np.abs(y[m] - ref[m])
        if abs_bound is not None:
            assert err.max() <= abs_bound, (name, err.max(), XF[m][np.argmax(err)])
        if rel_bound is not None:
            r = m & (np.abs(ref) >= 2.0**-14)
            rel = np.abs(y[r] - ref[r]) / np.abs(ref[r])
            assert rel.max() <= rel_bound, (name, rel.max(), XF[r][np.argmax(rel)])


@pytest.mark.parametrize("alpha", [0.7, 2.0, -1.3, 1e-3, 10.0, _SELU_ALPHA])
def test_elu_error_bound_for_other_alphas(alpha):
    """ELU with another alpha over all finite fp16 inputs, against ``alpha16 * expm1(x)``
    (x <= 0) and ``x`` (exact above 0): within :func:`~tests.helpers.lut_bounds.elu_bound`."""
    a16 = float(np.float16(alpha))
    y = act.elu(X16, alpha=alpha).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = np.where(XF > 0, XF, a16 * np.expm1(XF))
    assert np.array_equal(y[XF > 0], XF[XF > 0])
    err = np.abs(y - ref)
    assert err.max() <= elu_bound(alpha), (alpha, err.max(), XF[np.argmax(err)])


def _f16(v) -> float:
    return float(np.float16(v))


#: (alpha, beta): the defaults (ONNX's, hard_swish's gate), the ONNX node test's, a negative
#: slope, beta -0, a subnormal slope, one input inside; then lines that step over [0, 1]
#: between two fp16 inputs, lines on one side of it over every finite input, a zero slope
_HARD_SIGMOIDS = [
    (0.2, 0.5),
    (1 / 6, 0.5),
    (0.5, 0.6),
    (-0.3, 0.2),
    (3.0, -0.0),
    (2.0**-24, 0.0),
    (65504.0, 2000.0),
]
_STEPS = [(65504.0, 60000.0), (-65504.0, -60000.0), (1e-7, 5.0), (1e-7, -5.0), (0.0, 3.0), (-1e-9, 0.25)]


def _neighbour(x: float, toward: float):
    """The fp16 value next to ``x`` toward ``toward``; None past the finite values."""
    with np.errstate(over="ignore"):
        v = float(np.nextafter(np.float16(x), np.float16(toward)))
    return v if np.isfinite(v) else None


@pytest.mark.parametrize("alpha, beta", _HARD_SIGMOIDS)
def test_hard_sigmoid_is_built_in_hardtanhs_layout(alpha, beta):
    """R = 64 and the centred mode (hardtanh's words 41 and 42), both lines ``alpha16 x +
    beta16``, the range the first and last fp16 inputs whose line lies in [0, 1] (their
    neighbours outside lie beyond it), the clamp's values outside the range."""
    a16, b16 = _f16(alpha), _f16(beta)
    w = lut.hard_sigmoid_block(alpha, beta).to_words()
    assert w[41:43].tolist() == lut.get_block("hardtanh").to_words()[41:43].tolist() == [64, 1]
    f = [float(v) for v in w[[0, 1, 2, 3, 37, 38, 39, 40]].view(np.float16)]
    lo, hi, below, above, s0, c0, s1, c1 = f
    assert (s0, c0, s1, c1) == (a16, b16, a16, b16) and (below, above) == (
        (0.0, 1.0) if a16 > 0 else (1.0, 0.0)
    )

    def inside(x):
        if x is None:  # past the finite values: nothing to check
            return False
        v = Fraction(a16) * Fraction(x) + Fraction(b16)
        return 0 <= v <= 1

    before, after = _neighbour(lo, -np.inf), _neighbour(hi, np.inf)
    assert inside(lo) and inside(hi) and not inside(before) and not inside(after)
    assert set(w[4:37].tolist()) == {int(np.float16(min(max(b16, 0.0), 1.0) + 0.0).view(np.uint16))}


@pytest.mark.parametrize("alpha, beta", _STEPS)
def test_hard_sigmoid_without_an_input_inside_the_clamp(alpha, beta):
    """No finite fp16 input has its line in [0, 1]: the range starts at the first input
    past the step (inf: none), constant lines and knots give the far side's value."""
    a16, b16 = _f16(alpha), _f16(beta)
    blk = lut.hard_sigmoid_block(alpha, beta)
    w = blk.to_words()
    lo, hi, below, above, s0, c0, s1, c1 = (
        float(v) for v in w[[0, 1, 2, 3, 37, 38, 39, 40]].view(np.float16)
    )
    far = below if a16 == 0 else above
    assert (hi, s0, s1, c0, c1) == (np.inf, 0.0, 0.0, far, far) and set(blk.knot_values.tolist()) == {far}
    line = Fraction(a16) * Fraction(lo) + Fraction(b16) if np.isfinite(lo) else None
    if a16 == 0:
        assert (lo, below) == (-np.inf, min(max(b16, 0.0), 1.0))
    elif line is not None:  # the first input past the step, its neighbour before it
        assert (line > 1) if a16 > 0 else (line < 0)
        before = _neighbour(lo, -np.inf)
        if before is not None:
            back = Fraction(a16) * Fraction(before) + Fraction(b16)
            assert (back < 0) if a16 > 0 else (back > 1)


def test_hard_sigmoid_registry_blocks():
    assert lut.get_block("hard_sigmoid") == lut.hard_sigmoid_block(0.2, 0.5)
    assert lut.get_block("hard_swish") == lut.hard_swish_block() == lut.hard_sigmoid_block(1 / 6, 0.5)
    assert lut.get_block("hard_swish").slope_left == 0x3155  # round_fp16(1/6)


@pytest.mark.parametrize("alpha, beta", [(65520.0, 0.5), (0.2, -np.inf), (np.nan, 0.5), (0.2, 1e6)])
def test_hard_sigmoid_block_refuses_parameters_fp16_cannot_hold(alpha, beta):
    with pytest.raises(ValueError, match="finite in fp16"):
        lut.hard_sigmoid_block(alpha, beta)


def _decisive(words) -> list:
    """The fp16 patterns where a hard-sigmoid block decides: its range's ends and their
    neighbours, +-0, +-inf, a NaN, and every 61st pattern."""
    lo, hi = (float(v) for v in words[:2].view(np.float16))
    near = [v for x in (lo, hi) if np.isfinite(x) for v in (x, _neighbour(x, -np.inf), _neighbour(x, np.inf))]
    pats = {int(np.float16(v).view(np.uint16)) for v in near if v is not None}
    return sorted(pats | {0, 0x8000, 0x7C00, 0xFC00, 0x7E00} | set(range(0, 0x10000, 61)))


@pytest.mark.parametrize("alpha, beta", _HARD_SIGMOIDS + _STEPS)
def test_hard_sigmoid_block_is_the_clamp(alpha, beta):
    """The Fraction evaluation of the block (tests/helpers/lut_reference.py) is
    ``round_fp16(clamp(alpha16 x + beta16, 0, 1))`` in exact rationals
    (tests/helpers/activations.py): on all 65536 patterns for ONNX's default parameters,
    where the block decides for the others."""
    words = lut.hard_sigmoid_block(alpha, beta).to_words()
    pats = range(0x10000) if (alpha, beta) == (0.2, 0.5) else _decisive(words)
    bad = [hex(b) for b in pats if ref_lut(words, b)[0] != ref_hard_sigmoid(alpha, beta, b)]
    assert not bad, bad[:5]
