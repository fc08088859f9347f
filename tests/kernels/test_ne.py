"""The post-MAC pipeline (bias -> PostScale -> nonlinearity) and compile-time folding."""

import numpy as np
import pytest

from fastane import lut
from fastane.kernels import ne as kne
from tests.helpers.lut_reference import QNAN, ref_lut, ref_ne

SPECIAL = np.array(
    [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        65504.0,
        -65504.0,
        2.0**-24,
        -(2.0**-24),
        6.1e-5,
        0.5,
        1.0,
        -1.0,
        4.0,
        16.0,
        -25.0,
        1000.0,
    ],
    dtype=np.float16,
)


def _fp16_values(rng, shape):
    bits = rng.integers(0, 0x10000, size=shape).astype(np.uint16)
    v = bits.view(np.float16).astype(np.float64)
    mask = rng.random(shape) < 0.5  # half of them in a moderate range
    v[mask] = (rng.standard_normal(mask.sum()) * 4).astype(np.float16)
    flat = v.reshape(-1)
    k = min(SPECIAL.size, flat.size)
    flat[:k] = SPECIAL[:k]
    return v


CASES = [  # (nonlinear, block name, scale, bias?)
    (0, None, 1.0, False),
    (0, None, 0.5, True),
    (0, None, 3.0, True),
    (1, None, 1.0, True),
    (1, None, -1.0, True),
    (2, "tanh", 1.0, True),
    (2, "exp2", float(np.uint16(0x3DC5).view(np.float16)), False),
    (2, "gelu", 1.0, True),
    (2, "reciprocal", 0.25, True),
    (2, "log2", 1.0, False),
    (2, "selu", 2.0, True),
    (2, "sign", 1.0, True),
    (2, "relu6", 60000.0, True),
]


@pytest.mark.parametrize("nonlinear,name,scale,with_bias", CASES)
def test_ne_post_matches_reference(nonlinear, name, scale, with_bias):
    rng = np.random.default_rng(nonlinear * 1000 + int(abs(scale) * 7) + with_bias)
    y = _fp16_values(rng, (2, 3, 40))
    bias = (rng.standard_normal(3) * 2).astype(np.float16).astype(np.float64)
    if with_bias:
        bias[0] = 0.0
    blk = lut.get_block(name) if name else None
    counts = np.zeros(2, np.int64)
    out = lut.ne_post(y, bias if with_bias else None, scale, nonlinear, blk, counts=counts)
    words = blk.to_words() if blk else None
    events = [0, 0]
    for idx in np.ndindex(y.shape):
        b = float(bias[idx[1]]) if with_bias else None
        want = ref_ne(float(y[idx]), b, scale, nonlinear, words)
        got = int(out[idx])
        assert got == want or (want == QNAN and got == QNAN), (idx, y[idx], b, hex(got), hex(want))
        if nonlinear == 2:
            # recompute the LUT input the same way to collect the events
            t = np.float16(y[idx])
            with np.errstate(all="ignore"):
                if with_bias:
                    t = np.float16(np.float64(t) + b)
                if scale != 1.0:
                    t = np.float16(np.float64(t) * scale)
            ev = ref_lut(words, int(np.array(t).view(np.uint16)))[1] if not np.isnan(t) else 0
            if ev < 0:
                events[0] += 1
            elif ev > 0:
                events[1] += 1
    assert counts.tolist() == events


def test_order_is_bias_then_scale_with_two_roundings():
    # y = 1, bias = 2**-11 (half an ulp of 1): 1 + 2**-11 ties to 1 (even);
    # then *3 = 3.  Scale-then-bias would give round(3 + 2**-11) = 3 as well, so use
    # a case that separates them: y = 2049 (not fp16: 2048), bias = 1 -> round(2049) = 2048
    y = np.array([[[2048.0, 1.0]]])
    out = lut.ne_post(y, [1.0], 0.5, 0)
    assert out.view(np.float16).tolist() == [[[1024.0, 1.0]]]  # (2048+1 -> 2048) * 0.5
    out = lut.ne_post(np.array([[[0.5]]]), [2.0**-12], 3.0, 0)
    # 0.5 + 2**-12 rounds to 0.5 (tie to even), * 3 = 1.5 ; unrounded would give 1.50073
    assert out.view(np.float16)[0, 0, 0] == np.float16(1.5)


def test_relu_mode_edge_cases():
    y = np.array([[[-0.0, 0.0, -1.0, 2.0, np.nan, np.inf, -np.inf]]])
    out = lut.ne_post(y, None, 1.0, 1).view(np.float16)[0, 0]
    assert out[:4].tolist() == [0.0, 0.0, 0.0, 2.0] and np.signbit(out[0]) == False  # noqa: E712
    assert np.isnan(out[4]) and out[5] == np.inf and out[6] == 0.0


def test_per_channel_bias_and_strided_view():
    rng = np.random.default_rng(3)
    big = (rng.standard_normal((2, 8, 10)) * 3).astype(np.float16).astype(np.float64)
    view = big[:, ::2, 1::3]  # non-contiguous (2, 4, 3)
    bias = np.array([0.5, -1.0, 2.0, 0.0])
    out = lut.ne_post(view, bias, 1.0, 0)
    want = (view + bias[None, :, None]).astype(np.float16)
    assert np.array_equal(out.view(np.float16), want)


def test_ne_post_bits_equals_float_path():
    rng = np.random.default_rng(9)
    bits = rng.integers(0, 0x10000, (1, 2, 64)).astype(np.uint16)
    lutf, luti = lut.get_block("tanh").kernel_args()
    a = np.empty(bits.shape, np.uint16)
    b = np.empty(bits.shape, np.uint16)
    c1, c2 = np.zeros(2, np.int64), np.zeros(2, np.int64)
    kne.ne_post_bits(bits, np.array([0.25, -0.5]), 2.0, 2, lutf, luti, a, c1)
    kne.ne_post(bits.view(np.float16).astype(np.float64), np.array([0.25, -0.5]), 2.0, 2, lutf, luti, b, c2)
    assert np.array_equal(a, b) and c1.tolist() == c2.tolist()


@pytest.mark.parametrize("nonlinear", [0, 1])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.5, -3.0, 2.0**-20])
def test_ne_post_plain_equals_ne_post(nonlinear, with_bias, scale):
    """ne_post_plain (no table compiled) gives ne_post's bits on every fp16 pattern
    (NaNs, infinities, subnormals, -0), with and without bias and PostScale."""
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    y = pats.view(np.float16).astype(np.float64).reshape(1, 4, -1)
    bias = np.array([0.0, -0.0, 65504.0, -(2.0**-24)]) if with_bias else np.zeros(0)
    lutf, luti = np.zeros(41), np.zeros(3, np.int64)
    want = np.empty(y.shape, np.uint16)
    kne.ne_post(y, bias, scale, nonlinear, lutf, luti, want, np.zeros(2, np.int64))
    got = np.empty(y.shape, np.uint16)
    kne.ne_post_plain(y, bias, scale, nonlinear == 1, got)
    assert np.array_equal(got, want)


def test_ne_post_front_end_errors():
    y = np.zeros((1, 2, 3))
    with pytest.raises(ValueError, match="N, C, S"):
        lut.ne_post(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="bias has 3 values for 2 channels"):
        lut.ne_post(y, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="nonlinear mode"):
        lut.ne_post(y, nonlinear=3)
    with pytest.raises(ValueError, match="coefficient block"):
        lut.ne_post(y, nonlinear=2)


# ------------------------------------------------------------------------ folding
def test_fold_affine_seed_golden():
    w, b = lut.fold_affine(4.0, -2.0, 0.5, 1.0)
    assert float(w) == 2.0 and float(b) == 0.0
    assert w.dtype == np.float16 and b.dtype == np.float16


def test_fold_affine_relu_equivalence():
    """ReLU((4x - 2)/2 + 1) == ReLU(2x) through the pipeline, for every test x."""
    x = np.linspace(-3, 3, 97).astype(np.float16).astype(np.float64)
    w, b = lut.fold_affine(np.array([[4.0]]), np.array([-2.0]), 0.5, 1.0)
    y = (x * float(w[0, 0])).astype(np.float16).astype(np.float64)  # the conv, one tap
    out = lut.ne_post(y.reshape(1, 1, -1), b.astype(np.float64), 1.0, 1).view(np.float16)
    assert np.array_equal(out.ravel(), np.maximum(2 * x, 0).astype(np.float16))


def test_fold_affine_per_channel_and_errors():
    W = np.arange(12, dtype=np.float64).reshape(3, 2, 2)
    w, b = lut.fold_affine(W, [1.0, 2.0, 3.0], [1.0, 0.5, 2.0], [0.0, 1.0, -1.0])
    assert np.array_equal(w, (W * np.array([1.0, 0.5, 2.0])[:, None, None]).astype(np.float16))
    assert b.tolist() == [1.0, 2.0, 5.0]
    _, b0 = lut.fold_affine(W, None, 2.0, 1.0)
    assert b0.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="per output channel"):
        lut.fold_affine(W, None, [1.0, 2.0], 0.0)
    assert float(lut.fold_affine(1.0, 0.0, 1.0, 1e-9)[1]) == 0.0  # b' rounds to fp16 once


def test_front_end_checks_out_and_counts_before_the_kernel_writes():
    y = np.zeros((1, 1, 4096))
    small = np.zeros(8, np.uint16)
    with pytest.raises(ValueError, match="out must be"):
        lut.ne_post(y, out=small)
    with pytest.raises(ValueError, match="out must be"):
        lut.ne_post(y, out=np.zeros((1, 1, 4096), np.float16))
    with pytest.raises(ValueError, match="counts must be"):
        lut.ne_post(y, counts=np.zeros(4, np.int64)[:1])
    assert not small.any()
