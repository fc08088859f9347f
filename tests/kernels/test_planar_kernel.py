"""The planar engine's Numba kernels against independent references: numpy fp16 for the
elementwise ops (bit for bit, NaN canonical), Python Fractions for the fused output
affine and the row reductions (exact value, rounded once)."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.planar import F16, QNAN, bits, ref_eltwise, round16_exact

from fastane.kernels import planar as k

OPS = {
    "scale": k.OP_PASS,
    "abs": k.OP_ABS,
    "add": k.OP_ADD,
    "sub": k.OP_SUB,
    "mul": k.OP_MUL,
    "max": k.OP_MAX,
    "min": k.OP_MIN,
}
BINARY = ("add", "sub", "mul", "max", "min")

# zeros, subnormals, the normal boundary, ones, halfway cases, the largest finite, inf, NaN
SPECIAL = np.array(
    [
        0x0000,
        0x8000,
        0x0001,
        0x8001,
        0x03FF,
        0x83FF,
        0x0400,
        0x8400,
        0x3C00,
        0xBC00,
        0x3C01,
        0x3E00,
        0xC100,
        0x6800,
        0x6801,
        0x1400,
        0x7BFF,
        0xFBFF,
        0x7C00,
        0xFC00,
        0x7E00,
        0xFE00,
        0x7C01,
        0x5640,
        0x2E66,
    ],
    dtype=np.uint16,
)


def values(bits16):
    return np.asarray(bits16, np.uint16).view(F16)


def run_eltwise(name, a, b=None, in_scale=1.0, out_scale=1.0, offset=0.0, parallel=False):
    a = np.asarray(a, F16).astype(np.float64)
    a2 = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
    if b is None:
        b2 = np.empty((a2.shape[0], 0))
    else:
        b = np.asarray(b, F16).astype(np.float64)
        b2 = np.ascontiguousarray(b.reshape(-1, b.shape[-1]))
    out = np.empty((a2.shape[0], max(a2.shape[1], b2.shape[1])), np.uint16)
    fn = k.eltwise_parallel if parallel else k.eltwise_serial
    nans = fn(a2, b2, OPS[name], in_scale, out_scale, offset, out)
    return out.reshape(a.shape[:-1] + out.shape[-1:]), nans


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize(
    "scales",
    [
        (1.0, 1.0, 0.0),
        (-1.0, 1.0, 0.0),
        (0.5, 1.0, 0.0),
        (1.0, 1.4423828125, 0.0),
        (1.0, 1.0, 0.5),
        (3.0, -0.25, 2.0),
    ],
)
def test_special_values_bit_for_bit(name, scales):
    """Every pair of special fp16 values (and random ones) through every op and scaling."""
    rng = np.random.default_rng(1)
    pool = np.concatenate(
        [
            SPECIAL,
            rng.integers(0, 0x7C00, 40, dtype=np.uint16),
            rng.integers(0x8000, 0xFC00, 40, dtype=np.uint16),
        ]
    )
    a, b = np.meshgrid(values(pool), values(pool), indexing="ij")
    s0, s, c = scales
    got, nans = run_eltwise(name, a, b if name in BINARY else None, s0, s, c)
    ref = ref_eltwise(name, a, b if name in BINARY else None, s0, s, c)
    assert np.array_equal(got, bits(ref)), name
    assert nans == int(np.isnan(ref).sum())
    assert not np.any(np.isnan(got.view(F16)) & (got != QNAN)), "NaN must be the quiet NaN 0x7e00"


def test_signed_zeros_and_ties():
    z, nz, one = F16(0.0), F16(-0.0), F16(1.0)
    got, _ = run_eltwise("max", [[nz, z, nz]], [[z, nz, nz]])
    assert list(got[0]) == [0x0000, 0x0000, 0x8000]
    got, _ = run_eltwise("min", [[nz, z, z]], [[z, nz, z]])
    assert list(got[0]) == [0x8000, 0x8000, 0x0000]
    # an offset of 0 adds nothing: (-1) * 0 stays -0; x + (-x) is +0
    got, _ = run_eltwise("mul", [[-one]], [[z]])
    assert got[0, 0] == 0x8000
    got, _ = run_eltwise("add", [[one]], [[-one]])
    assert got[0, 0] == 0x0000
    # ties round to even: 2048 + 1 -> 2048, 2048 + 3 -> 2052; 65504 + 16 -> inf (>= 65520)
    got, _ = run_eltwise("add", [[2048, 2048, 65504, 65504]], [[1, 3, 8, 16]])
    assert list(got[0].view(F16)) == [2048, 2052, 65504, np.inf]


def test_parallel_kernel_is_the_serial_kernel():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 0x10000, (64, 257), dtype=np.uint16).view(F16)
    b = rng.integers(0, 0x10000, (64, 257), dtype=np.uint16).view(F16)
    for name in OPS:
        ser = run_eltwise(name, a, b if name in BINARY else None, -0.5, 3.0, 1.5)
        par = run_eltwise(name, a, b if name in BINARY else None, -0.5, 3.0, 1.5, parallel=True)
        assert np.array_equal(ser[0], par[0]) and ser[1] == par[1]


def test_broadcast_rows():
    """A (R, 1) operand is broadcast along the row (softmax's per-row max and 1/sum)."""
    rng = np.random.default_rng(3)
    a = rng.uniform(-4, 4, (7, 33)).astype(F16)
    m = rng.uniform(-4, 4, (7, 1)).astype(F16)
    got, _ = run_eltwise("sub", a, m, 1.0, 1.4423828125, 0.0)
    assert np.array_equal(got, bits(ref_eltwise("sub", a, m, 1.0, 1.4423828125, 0.0)))
    got, _ = run_eltwise("mul", m, a)  # broadcast source 0
    assert np.array_equal(got, bits(ref_eltwise("mul", np.broadcast_to(m, a.shape), a)))


finite16 = st.integers(0, 0xFFFF).filter(lambda h: h & 0x7C00 != 0x7C00)


@settings(max_examples=300, deadline=None)
@given(y=finite16, s=finite16, c=finite16)
def test_output_affine_is_rounded_once(y, s, c):
    """``round16(s * y + c)`` in one rounding, checked against exact rationals."""
    yv, sv, cv = (float(values([h])[0]) for h in (y, s, c))
    got, _ = run_eltwise("scale", [[yv]], None, 1.0, sv, cv)
    if (sv, cv) == (1.0, 0.0):
        exp = yv
    elif cv == 0.0:
        exp = round16_exact(Fraction(sv) * Fraction(yv)) if sv * yv != 0 else sv * yv
    else:
        q = Fraction(sv) * Fraction(yv) + Fraction(cv)
        exp = round16_exact(q) if q != 0 else 0.0
    assert got[0, 0] == bits([exp])[0], (hex(y), hex(s), hex(c))


def run_reduce(kind, a, recip=False, in_scale=1.0, out_scale=1.0, offset=0.0, parallel=False):
    a = np.ascontiguousarray(np.asarray(a, F16).astype(np.float64))
    out = np.empty(a.shape[0], np.uint16)
    fn = k.reduce_parallel if parallel else k.reduce_serial
    nans = fn(a, kind, in_scale, recip, out_scale, offset, out)
    return out, nans


def ref_sum(row, recip=False):
    row = [float(v) for v in np.asarray(row, F16)]
    if any(np.isnan(row)) or (np.inf in row and -np.inf in row):
        return np.nan
    if np.inf in row or -np.inf in row:
        s = np.inf if np.inf in row else -np.inf
    else:
        q = sum((Fraction(v) for v in row), Fraction(0))
        s = round16_exact(q) if q != 0 else 0.0
    if recip:
        with np.errstate(divide="ignore"):
            s = (
                np.copysign(np.inf, s)
                if s == 0
                else (round16_exact(1 / Fraction(s)) if np.isfinite(s) else 1 / s)
            )
    return s


def test_sum_is_exact_then_rounded_once():
    rows = [
        [2048, 1],
        [2048, 1, 2.0**-24],
        [65504, 65504, -65504],
        [0.1] * 1600,
        [2.0**-24] * 3,
        [-0.0, -0.0],
        [1, -1],
        [np.inf, 1],
        [np.inf, -np.inf],
        [np.nan, 1],
        [60000, 6000],
    ]
    width = max(len(r) for r in rows)
    a = np.zeros((len(rows), width), F16)
    for i, r in enumerate(rows):
        a[i, : len(r)] = r
    for recip in (False, True):
        got, nans = run_reduce(k.RED_SUM, a, recip)
        exp = [ref_sum(a[i], recip) for i in range(len(rows))]
        assert np.array_equal(got, bits(exp)), (recip, got.view(F16), exp)
        assert nans == sum(np.isnan(e) for e in exp)
    got, _ = run_reduce(k.RED_SUM, a)
    # cancellation happens exactly (no intermediate overflow), and ties go to even
    assert list(got[:3].view(F16)) == [2048, 2050, 65504]


def test_random_sums_and_maxima():
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((40, 301)) * rng.choice([1e-3, 1, 100], (40, 1))).astype(F16)
    got, _ = run_reduce(k.RED_SUM, a)
    assert np.array_equal(got, bits([ref_sum(r) for r in a]))
    got, _ = run_reduce(k.RED_SUM, a, recip=True)
    assert np.array_equal(got, bits([ref_sum(r, True) for r in a]))
    got, _ = run_reduce(k.RED_MAX, a)
    assert np.array_equal(got, bits(a.max(axis=1)))
    par, _ = run_reduce(k.RED_MAX, a, parallel=True)
    assert np.array_equal(got, par)
    # the operand scale applies to each element first; the output affine to the result
    got, _ = run_reduce(k.RED_MAX, a, in_scale=-1.0, out_scale=2.0, offset=0.5)
    exp = ((-a.astype(np.float64)).max(axis=1) * 2 + 0.5).astype(F16)
    assert np.array_equal(got, bits(exp))


def test_max_reduction_special_values():
    a = np.array([[-0.0, 0.0], [-0.0, -0.0], [1, np.nan], [-np.inf, -np.inf], [3, np.inf]], F16)
    got, nans = run_reduce(k.RED_MAX, a)
    assert list(got) == [0x0000, 0x8000, QNAN, 0xFC00, 0x7C00] and nans == 1
