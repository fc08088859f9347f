"""The INT8 path's kernels against the slow reference (tests/helpers/reference_int8.py), bit for
bit: random operands of every signedness combination, saturation, convolution geometry,
and the NE stage over its whole parameter space (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.reference_int8 import ref_conv2d_int, ref_matmul_int, ref_ne_int

from fastane.device import int8 as decisions
from fastane.kernels import mac_int8

RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
COMBOS = [(a, b) for a in RANGES for b in RANGES]


def _rand(rng, kind, shape):
    lo, hi = RANGES[kind]
    return rng.integers(lo, hi + 1, size=shape).astype(np.float64)


def _matmul(a, b):
    M, N = a.shape[0], b.shape[1]
    acc = np.empty((1, M, N))
    flag = np.empty((1, M, N), np.int8)
    idx = np.zeros(1, np.int64)
    mac_int8.matmul_int_into(a[None], b[None], idx, idx, acc, flag)
    return acc[0], flag[0]


@pytest.mark.parametrize("ka,kb", COMBOS)
def test_matmul_random_every_signedness(ka, kb):
    rng = np.random.default_rng(hash((ka, kb)) & 0xFFFF)
    for M, K, N in ((1, 1, 1), (3, 17, 5), (8, 64, 33), (2, 300, 7)):
        a, b = _rand(rng, ka, (M, K)), _rand(rng, kb, (K, N))
        acc, flag = _matmul(a, b)
        racc, rflag = ref_matmul_int(a, b)
        assert acc.tolist() == [[float(v) for v in row] for row in racc]
        assert flag.tolist() == rflag
        assert not flag.any()  # far from the limits: and the sums are numpy's exact ones
        assert np.array_equal(acc, a @ b)


@pytest.mark.parametrize("ka,kb", COMBOS)
def test_matmul_saturation_every_signedness(ka, kb):
    """Long dot products that clamp at the top, at the bottom, come back inside, or land
    exactly on a limit: acc and sticky flag as the serial reference says."""
    rng = np.random.default_rng(7)
    lo_a, hi_a = RANGES[ka]
    lo_b, hi_b = RANGES[kb]
    K = 140000  # 140000 * 2**14 > 2**31: every combination can clamp
    a = np.empty((4, K))
    b = np.empty((K, 3))
    # the largest product all the way: clamps at the top; the most negative: at the bottom
    a[0], b[:, 0] = max(((hi_a, hi_b), (lo_a, lo_b)), key=lambda p: p[0] * p[1])
    a[1], b[:, 1] = min(((hi_a, lo_b), (lo_a, hi_b)), key=lambda p: p[0] * p[1])
    half = K // 2
    a[2, :half], a[2, half:] = hi_a, lo_a  # up, then down: the flag remembers the latest clamp
    b[:, 2] = hi_b if kb == "uint8" else lo_b
    a[3] = _rand(rng, ka, K)
    acc, flag = _matmul(a, b)
    racc, rflag = ref_matmul_int(a, b)
    assert acc.tolist() == [[float(v) for v in row] for row in racc]
    assert flag.tolist() == rflag
    assert rflag[0][0] == 1  # the test does reach the limits
    assert any(f == -1 for row in rflag for f in row) == (ka == "int8" or kb == "int8")


def test_matmul_exactly_at_the_limits():
    """Sums that land exactly on -2**31 or 2**31 - 1 do not clamp; one unit more does."""
    n = 2**17  # (-128) * (-128) = 2**14: 2**17 of them are 2**31, one over the top
    a = np.full((1, n), -128.0)
    b = np.full((n, 3), -128.0)
    b[:, 1] = 128.0  # uint8 128: -2**31 exactly, no clamp
    b[:, 2] = 127.0
    acc, flag = _matmul(a, b)
    assert flag.tolist() == [[1, 0, 0]]
    assert acc.tolist() == [[2**31 - 1, -(2**31), -128 * 127 * n]]
    racc, rflag = ref_matmul_int(a, b)
    assert acc.tolist() == [[float(v) for v in row] for row in racc] and flag.tolist() == rflag
    # (2**17 - 1) * 2**14 + 127 * 129 = 2**31 - 1 exactly
    a[0, -1], b[-1, 0] = 127.0, 129.0
    acc, flag = _matmul(a, b[:, :1].copy())
    assert flag.tolist() == [[0]] and acc.tolist() == [[2**31 - 1]]


@pytest.mark.parametrize("kx,kw", COMBOS)
@pytest.mark.parametrize(
    "shape,stride,padding,dilation,groups",
    [
        ((1, 4, 5, 6), 1, 0, 1, 1),
        ((2, 6, 7, 5), 2, 1, 1, 2),
        ((1, 3, 9, 8), 1, 2, 2, 1),
        ((1, 4, 6, 6), (2, 1), 1, 1, 4),
    ],
)
def test_conv_random(kx, kw, shape, stride, padding, dilation, groups):
    rng = np.random.default_rng(11)
    N, C, H, W = shape
    CO = 2 * groups
    x = _rand(rng, kx, shape)
    w = _rand(rng, kw, (CO, C // groups, 3, 2))
    sy, sx = (stride, stride) if isinstance(stride, int) else stride
    d = dilation
    oh = (H + 2 * padding - d * 2 - 1) // sy + 1
    ow = (W + 2 * padding - d * 1 - 1) // sx + 1
    acc, flag = mac_int8.conv2d_int(x, w, sy, sx, d, d, padding, padding, oh, ow, groups)
    racc, rflag = ref_conv2d_int(x, w, stride, padding, dilation, groups)
    assert np.array_equal(acc, np.array(racc, dtype=np.float64))
    assert np.array_equal(flag, np.array(rflag))


def test_conv_saturates_like_the_reference():
    x = np.full((1, 1, 1, 40000), 255.0).reshape(1, 40000, 1, 1)
    w = np.full((2, 40000, 1, 1), 255.0)
    w[1] = -128.0
    acc, flag = mac_int8.conv2d_int(x, w, 1, 1, 1, 1, 0, 0, 1, 1, 1)
    racc, rflag = ref_conv2d_int(x, w)
    assert np.array_equal(acc, np.array(racc, dtype=np.float64)) and np.array_equal(flag, np.array(rflag))
    assert flag.ravel().tolist() == [1, 0]


# ----------------------------------------------------------------------------- NE stage
def _ne(acc, flag, bias_bits, bias_shift, scale_bits, shift, relu, out):
    c = len(acc)
    a = np.array(acc, dtype=np.float64).reshape(c, 1)
    f = np.array(flag, dtype=np.int8).reshape(c, 1)
    bias = (
        np.array([decisions.acc_bias(bias_bits, bias_shift)] * c, dtype=np.float64)
        if bias_bits is not None
        else np.zeros(0)
    )
    scale = float(np.uint16(scale_bits).view(np.float16)) * 2.0**-shift
    is_int = out != "fp16"
    lo, hi = decisions.OUTPUT_RANGE[{"uint8": 0, "int8": 1}[out]] if is_int else (0, 0)
    res = np.empty((c, 1))
    counts = np.zeros(2, np.int64)
    mac_int8.ne_int(a, f, bias, scale, relu, is_int, lo, hi, float(decisions.NAN_TO_INT), res, counts)
    if is_int:
        vals = [int(v) for v in res.ravel()]
    else:
        vals = [int(v) for v in res.ravel().astype(np.float16).view(np.uint16)]
    return vals, counts


ACC = st.integers(decisions.ACC_MIN, decisions.ACC_MAX)
NE_CASE = st.tuples(
    st.lists(st.tuples(ACC, st.sampled_from([0, 0, 0, 1, -1])), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(0, 0xFFFF)),
    st.integers(0, 31),
    st.one_of(
        st.integers(0, 0xFFFF),
        st.sampled_from([0x3C00, 0xBC00, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x1C00]),
    ),
    st.integers(0, 31),
    st.booleans(),
    st.sampled_from(["int8", "uint8", "fp16"]),
)


@settings(max_examples=600, deadline=None)
@given(NE_CASE)
def test_ne_stage_matches_reference(case):
    pairs, bias_bits, bias_shift, scale_bits, shift, relu, out = case
    acc = [a for a, _ in pairs]
    flag = [f for _, f in pairs]  # the NE stage reads any flag with any accumulator
    vals, counts = _ne(acc, flag, bias_bits, bias_shift, scale_bits, shift, relu, out)
    ref = [ref_ne_int(a, f, bias_bits, bias_shift, scale_bits, shift, relu, out) for a, f in zip(acc, flag)]
    assert vals == [r[0] for r in ref]
    assert counts.tolist() == [sum(r[1] and not r[2] for r in ref), sum(r[2] for r in ref)]


@pytest.mark.parametrize("out", ["int8", "uint8"])
def test_ne_rounding_and_saturation_decisions(out):
    """Ties go to even; the integer output saturates; flags read as the range's ends."""
    lo, hi = RANGES[out]
    # acc 5 with scale 0.5: 2.5 -> 2; 7 * 0.5 = 3.5 -> 4; -5 * 0.5 = -2.5 -> -2 (int8)
    vals, _ = _ne([5, 7, -5], [0, 0, 0], None, 0, 0x3800, 0, False, out)
    assert vals == [2, 4, max(lo, -2)]
    # PostRightShift 1 is the same exact halving
    assert _ne([5, 7, -5], [0, 0, 0], None, 0, 0x3C00, 1, False, out)[0] == vals
    vals, counts = _ne([1000, -1000, 0, 0], [0, 0, 1, -1], None, 0, 0x3C00, 0, False, out)
    assert vals == [hi, lo, hi, lo]
    assert counts.tolist() == [4, 0]
    # NaN (a flagged accumulator times a zero scale) writes 0 and is not a saturation
    vals, counts = _ne([0], [1], None, 0, 0x0000, 0, False, out)
    assert vals == [decisions.NAN_TO_INT] and counts.tolist() == [0, 1]


def test_bias_is_a_saturating_step():
    """AccBias is a signed int16 shifted by AccBiasShift, added after the last product."""
    assert decisions.acc_bias(0xFFFF, 0) == -1
    assert decisions.acc_bias(0x8000, 3) == -(2**15) * 8
    assert decisions.acc_bias(0x7FFF, 31) == 0x7FFF << 31
    vals, counts = _ne([decisions.ACC_MAX - 1], [0], 0x0002, 0, 0x3C00, 0, False, "fp16")
    assert vals == [0x7C00] and counts.tolist() == [1, 0]  # clamped at the bias step: +inf
    vals, _ = _ne([-3], [0], 0x0001, 2, 0x3C00, 0, False, "int8")
    assert vals == [1]


def test_lanes_per_core():
    from fastane.m1 import CORES

    assert decisions.LANES_PER_CORE == 256 and decisions.LANES_PER_CORE * CORES == 4096
