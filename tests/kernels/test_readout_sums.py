"""The NE readout of exact int32 sums (fastane.kernels.ne.readout_sums, what the skinny
kernel's outputs take): bit for bit the slow reference's readout and NE stage
(tests/helpers/reference.py, tests/helpers/lut_reference.py), and the general fused kernel's
(readout_post of the same sums as float64 accumulators, no flag set), on every rounding
position's ties, the extremes, and NaN/inf biases and PostScales."""

import numpy as np
import pytest
from numba import njit

from fastane.kernels import mac_f32
from fastane.kernels import ne as kne
from tests.helpers.reference import ref_readout_value
from tests.helpers.lut_reference import ref_ne

F16 = np.float16
NO_LUT = np.zeros(41), np.zeros(3, np.int64)


def _adversarial_sums():
    """Every tie of the readout's rounding (11 leading bits kept of up to 31), its
    neighbours, both signs; the extremes; small values (fp16 subnormals)."""
    s = [0, 1, -1, 2, 3, 4, 2047, 2048, 2049, 4095, 4097, 2**31 - 1, -(2**31 - 1), -(2**31)]
    for sh in range(1, 21):
        for q in (1024, 1025, 1536, 2046, 2047):
            for d in (-1, 0, 1):
                v = (q << sh) + (1 << (sh - 1)) + d  # the midpoint between q and q + 1
                if v < 2**31:
                    s += [v, -v]
    return np.array(s, np.int64).astype(np.int32)


def test_sum_value_is_the_reference_readout():
    s = _adversarial_sums()
    rng = np.random.default_rng(0)
    s = np.concatenate([s, rng.integers(-(2**31) + 1, 2**31, 4000).astype(np.int32)])
    got = np.empty(s.size, np.float32)
    _values(s, got)
    want = np.array([ref_readout_value(int(v)) for v in s], F16)
    assert np.array_equal(got.astype(F16).view(np.uint16), want.view(np.uint16))


@njit
def _values(s, out):
    for i in range(s.size):
        out[i] = mac_f32.sum_value32(s[i])


BIASES = [None, "random", "special"]
SCALES = [1.0, 0.5, -3.0, 0.0, np.inf, np.nan]


def _bias(kind, c, rng):
    if kind is None:
        return np.zeros(0)
    b = rng.integers(0, 1 << 16, c).astype(np.uint16).view(F16).astype(np.float64)
    b = np.where(np.isnan(b), 0.5, b)
    if kind == "special":
        b[: min(c, 4)] = [np.inf, -np.inf, np.nan, -0.0][: min(c, 4)]
    return b


@pytest.mark.parametrize("bias_kind", BIASES)
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("relu", [False, True])
def test_readout_sums_is_the_reference(bias_kind, scale, relu):
    """Element by element against the slow reference (readout, then bias, PostScale and
    ReLU in exact rational arithmetic)."""
    rng = np.random.default_rng(int(relu) + 7)
    sums = _adversarial_sums()[:60].reshape(4, 15)  # 4 channels, rows of 5 (3 rows)
    C, W = 4, 5
    bias = _bias(bias_kind, C, rng)
    plane, row = 3 * 32, 32
    out = np.full(C * plane, 0xABCD, np.uint16)
    kne.readout_sums(sums, bias, scale, relu, out, plane, row, 16, W, threads=False)
    grid = out.reshape(C, 3, row)
    for c in range(C):
        for h in range(3):
            for k in range(W):
                y = float(ref_readout_value(int(sums[c, h * W + k])))
                b = None if bias.size == 0 else float(bias[c])
                want = ref_ne(y, b, scale, int(relu), None)
                assert grid[c, h, k] == want, (c, h, k, hex(grid[c, h, k]), hex(want))
    assert np.all(grid[:, :, W:16] == 0) and np.all(grid[:, :, 16:] == 0xABCD)


@pytest.mark.parametrize(
    "W,wpad,threads", [(1, 32, False), (7, 32, True), (14, 32, False), (37, 37, True), (64, 64, True)]
)
@pytest.mark.parametrize("bias_kind", BIASES)
@pytest.mark.parametrize("scale", SCALES)
def test_readout_sums_is_the_general_readout(W, wpad, threads, bias_kind, scale):
    """Against readout_post of the same sums as float64 accumulators without flags (the
    general fused kernel), short rows and their zeroed tails, on one thread or across
    them."""
    rng = np.random.default_rng(W + wpad)
    C, H = 9, 3
    pool = _adversarial_sums()
    sums = np.where(
        rng.random((C, H * W)) < 0.5,
        rng.choice(pool, (C, H * W)),
        rng.integers(-(2**31) + 1, 2**31, (C, H * W)) >> rng.integers(0, 31, (C, H * W)),
    ).astype(np.int32)
    bias = _bias(bias_kind, C, rng)
    row = max(wpad, 32)
    plane = (H + 1) * row
    for relu in (False, True):
        got = np.full(C * plane, 0xABCD, np.uint16)
        kne.readout_sums(sums, bias, scale, relu, got, plane, row, wpad, W, threads=threads)
        want = np.full(C * plane, 0xABCD, np.uint16)
        counts = np.zeros(4, np.int64)
        acc = sums.astype(np.float64).reshape(C, H, W)
        kne.readout_post(
            acc, np.zeros(acc.shape, np.int8), bias, scale, int(relu), *NO_LUT, want, plane, row, wpad, counts
        )
        assert np.array_equal(got, want)
        assert counts[0] == 0 and counts[1] == 0  # nothing to count: none NaN, none flagged
