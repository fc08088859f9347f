"""The planar add, subtract and multiply through the CPU's fp16 conversions
(fastane.kernels.planar_f32) give the bits and the NaN count of the float64 planar kernel
(eltwise_window, itself checked against the slow reference in
tests/kernels/test_planar_kernel.py and tests/device/test_planar*.py): every fp16 pattern
against a spread of partners (subnormals, signed zeros, inf, NaN with payloads, sums and
products that overflow, cancel or round into the subnormals), with operand and output
scales, rows broadcast either way, the burst tail; and, without scales, every pair of
patterns (2**32 an operation, a few seconds each)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastane
from fastane.device import eltwise
from fastane.kernels import planar, planar_f32

ALL = np.arange(1 << 16, dtype=np.uint16)
SPECIAL = np.array(
    [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3800, 0x1C00, 0x2000, 0x5BFF, 0x5C00]
    + [0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE01, 0x0200, 0x4000, 0x57FF, 0x2400, 0x3C01],
    np.uint16,
)
OPS = [planar.OP_ADD, planar.OP_SUB, planar.OP_MUL]
# fp16 scales: the identity, sub's -1, ave's 0.5, softmax's log2(e), and odd ones
SCALES = [
    (1.0, 1.0),
    (-1.0, 1.0),
    (1.0, 0.5),
    (1.0, 1.4423828125),
    (-3.0, 0.0999755859375),
    (2.0**-14, 1024.0),
]


def _both(a, ap, ar, aw, b, bp, br, bw, C, H, W, wpad, op, s0=1.0, s=1.0):
    n = C * H * wpad + 64
    d1 = np.full(n, 0xABCD, np.uint16)
    d2 = d1.copy()
    args = (a, ap, ar, aw, b, bp, br, bw, C, H, W)
    n1 = planar.eltwise_window(*args, op, s0, s, 0.0, d1, H * wpad, wpad, wpad)
    mul, sub = op == planar.OP_MUL, op == planar.OP_SUB
    n2 = planar_f32.binary_window(*args, mul, sub, s0, s, d2, H * wpad, wpad, wpad)
    return d1, n1, d2, n2


@pytest.mark.parametrize("op", OPS)
def test_every_pattern_against_special_and_random_partners(op):
    rng = np.random.default_rng(op)
    partners = np.concatenate([SPECIAL, rng.integers(0, 1 << 16, 40).astype(np.uint16)])
    for q in partners:
        b = np.full(ALL.size, q, np.uint16)
        d1, n1, d2, n2 = _both(ALL, 0, 0, 1, b, 0, 0, 1, 1, 1, ALL.size, ALL.size, op)
        assert n1 == n2
        assert np.array_equal(d1, d2), hex(q)


@pytest.mark.parametrize("op", OPS)
def test_every_pair_of_patterns(op):
    a = ALL
    d1, d2 = np.empty_like(a), np.empty_like(a)
    mul, sub = op == planar.OP_MUL, op == planar.OP_SUB
    bad = 0
    for q in range(1 << 16):
        b = np.full(a.size, q, np.uint16)
        n1 = planar.eltwise_window(a, 0, 0, 1, b, 0, 0, 1, 1, 1, a.size, op, 1.0, 1.0, 0.0, d1, 0, 0, a.size)
        n2 = planar_f32.binary_window(
            a, 0, 0, 1, b, 0, 0, 1, 1, 1, a.size, mul, sub, 1.0, 1.0, d2, 0, 0, a.size
        )
        bad += int(np.count_nonzero(d1 != d2)) + (n1 != n2)
    assert bad == 0


@pytest.mark.parametrize("s0,s", SCALES)
@pytest.mark.parametrize("op", OPS)
def test_scales(op, s0, s):
    rng = np.random.default_rng(7)
    b = rng.permutation(ALL)
    d1, n1, d2, n2 = _both(ALL, 0, 0, 1, b, 0, 0, 1, 1, 1, ALL.size, ALL.size, op, s0, s)
    assert n1 == n2 and np.array_equal(d1, d2)


@pytest.mark.parametrize("aw,bw", [(1, 1), (0, 1), (1, 0), (0, 0)])
@pytest.mark.parametrize("op", OPS)
def test_strided_rows_broadcasts_and_the_burst_tail(op, aw, bw):
    rng = np.random.default_rng(aw * 2 + bw)
    C, H, W, wpad = 3, 5, 37, 48
    a = rng.integers(0, 1 << 16, C * H * 64).astype(np.uint16)
    b = rng.integers(0, 1 << 16, C * H * 64).astype(np.uint16)
    d1, n1, d2, n2 = _both(a, H * 64, 64, aw, b, H * 64, 64, bw, C, H, W, wpad, op, -1.0, 0.5)
    assert n1 == n2 and np.array_equal(d1, d2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=300),
    st.integers(0, 0xFFFF),
    st.sampled_from(OPS),
    st.sampled_from(SCALES),
)
def test_random_rows(xs, seed, op, scales):
    a = np.array(xs, np.uint16)
    b = np.random.default_rng(seed).permutation(a)
    d1, n1, d2, n2 = _both(a, 0, 0, 1, b, 0, 0, 1, 1, 1, a.size, a.size + 5, op, *scales)
    assert n1 == n2 and np.array_equal(d1, d2)


def test_silu_through_the_device_takes_it_with_the_same_bits(device, monkeypatch):
    """silu of every fp16 pattern: its planar multiply takes this kernel, and the whole
    program's bits are those with the float64 kernel in its place (tests/api/test_activations.py
    checks silu against exact arithmetic)."""
    calls = []
    real = planar_f32.binary_window
    monkeypatch.setattr(planar_f32, "binary_window", lambda *a: calls.append(1) or real(*a))
    x = ALL.view(np.float16)
    with fastane.errstate(lut_range="ignore"):
        y = fastane.silu(x)
        assert calls
        monkeypatch.setattr(eltwise, "_float32", lambda cfg: False)
        calls.clear()
        want = fastane.silu(x)
        assert not calls
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
