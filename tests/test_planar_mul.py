"""The planar multiply through the CPU's fp16 conversions (fastane.kernels.planar_mul)
gives the bits and the NaN count of the float64 planar kernel (eltwise_window, itself
checked against the slow reference in tests/test_planar*.py): every fp16 pattern against
a spread of partners (subnormals, signed zeros, inf, NaN with payloads, products that
overflow or round into the subnormals), rows broadcast either way, the burst tail."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastane
from fastane.device import eltwise
from fastane.kernels import planar, planar_mul

ALL = np.arange(1 << 16, dtype=np.uint16)
SPECIAL = np.array(
    [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3800, 0x1C00, 0x2000, 0x5BFF, 0x5C00]
    + [0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE01, 0x0200, 0x4000, 0x57FF, 0x2400],
    np.uint16,
)


def _both(a, ap, ar, aw, b, bp, br, bw, C, H, W, wpad):
    n = C * H * wpad + 64
    d1 = np.full(n, 0xABCD, np.uint16)
    d2 = d1.copy()
    n1 = planar.eltwise_window(
        a, ap, ar, aw, b, bp, br, bw, C, H, W, planar.OP_MUL, 1.0, 1.0, 0.0, d1, H * wpad, wpad, wpad
    )
    n2 = planar_mul.mul_window(a, ap, ar, aw, b, bp, br, bw, C, H, W, d2, H * wpad, wpad, wpad)
    return d1, n1, d2, n2


def test_every_pattern_against_special_and_random_partners():
    rng = np.random.default_rng(0)
    partners = np.concatenate([SPECIAL, rng.integers(0, 1 << 16, 40).astype(np.uint16)])
    for q in partners:
        b = np.full(ALL.size, q, np.uint16)
        d1, n1, d2, n2 = _both(ALL, 0, 0, 1, b, 0, 0, 1, 1, 1, ALL.size, ALL.size)
        assert n1 == n2
        assert np.array_equal(d1, d2), hex(q)


@pytest.mark.parametrize("aw,bw", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_strided_rows_broadcasts_and_the_burst_tail(aw, bw):
    rng = np.random.default_rng(aw * 2 + bw)
    C, H, W, wpad = 3, 5, 37, 48
    a = rng.integers(0, 1 << 16, C * H * 64).astype(np.uint16)
    b = rng.integers(0, 1 << 16, C * H * 64).astype(np.uint16)
    d1, n1, d2, n2 = _both(a, H * 64, 64, aw, b, H * 64, 64, bw, C, H, W, wpad)
    assert n1 == n2 and np.array_equal(d1, d2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=300), st.integers(0, 0xFFFF))
def test_random_rows(xs, seed):
    a = np.array(xs, np.uint16)
    b = np.random.default_rng(seed).permutation(a)
    d1, n1, d2, n2 = _both(a, 0, 0, 1, b, 0, 0, 1, 1, 1, a.size, a.size + 5)
    assert n1 == n2 and np.array_equal(d1, d2)


def test_silu_through_the_device_takes_it_with_the_same_bits(device, monkeypatch):
    """silu of every fp16 pattern: its planar multiply takes this kernel, and the whole
    program's bits are those with the float64 kernel in its place (tests/test_activations.py
    checks silu against exact arithmetic)."""
    calls = []
    real = planar_mul.mul_window
    monkeypatch.setattr(planar_mul, "mul_window", lambda *a: calls.append(1) or real(*a))
    x = ALL.view(np.float16)
    with fastane.errstate(lut_range="ignore"):
        y = fastane.silu(x)
        assert calls
        monkeypatch.setattr(eltwise, "_unit_mul", lambda cfg: False)
        calls.clear()
        want = fastane.silu(x)
        assert not calls
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
