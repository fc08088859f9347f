"""The MAC kernels (fastane.kernels.mac) bit for bit against tests/helpers/reference.py."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastane.kernels import mac
from tests.helpers.device import assert_same_f16
from tests.helpers.reference import ACC_MAX, ACC_MIN, ref_matmul, ref_readout_value

F16 = np.float16


# ------------------------------------------------------------------ helpers
def readout16(acc, flag):
    out = np.empty(acc.shape)
    mac.readout(acc, flag, out)
    return out.astype(F16)  # exact: out holds fp16 values


def kernel_matmul(a16, b16, trunc=False):
    """2-D fp16 a @ b through matmul_q16 + readout."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    b = np.ascontiguousarray(b16, np.float64)[None]
    z = np.zeros(1, np.int64)
    acc, flag = mac.matmul_q16(a, b, z, z, trunc)
    return readout16(acc, flag)[0]


def split_matmul(a16, b16, trunc=False):
    """Like kernel_matmul, through matmul_q16_into; also returns how the work was split."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    b = np.ascontiguousarray(b16, np.float64)[None]
    M, N = a.shape[1], b.shape[2]
    acc, flag = np.empty((1, M, N)), np.empty((1, M, N), np.int8)
    z = np.zeros(1, np.int64)
    split = mac.matmul_q16_into(a, b, z, z, trunc, acc, flag)
    return readout16(acc, flag)[0], split


def f16(x):
    return np.asarray(x, np.float64).astype(F16)


# ------------------------------------------------------------------ golden probe
@pytest.mark.parametrize(
    "v, bits", [(127.9375, 0x77FF), (128.0, 0x7C00), (-128.0, 0xF800), (-128.125, 0xFC00)]
)
@pytest.mark.parametrize("trunc", [False, True])
def test_golden_probe(v, bits, trunc):
    a = np.full((1, 256), v, F16)
    b = np.ones((256, 1), F16)
    got = kernel_matmul(a, b, trunc)
    assert int(got.view(np.uint16)[0, 0]) == bits
    assert int(ref_matmul(a, b, trunc).view(np.uint16)[0, 0]) == bits


def test_probe_accumulator_and_flag():
    for v, acc_want, flag_want in [
        (127.9375, 32752 * 65536, 0),
        (128.0, ACC_MAX, 1),
        (-128.0, ACC_MIN, 0),
        (-128.125, ACC_MIN, -1),
    ]:
        a = np.full((1, 1, 256), v)
        b = np.ones((1, 256, 1))
        z = np.zeros(1, np.int64)
        acc, flag = mac.matmul_q16(a, b, z, z, False)
        assert acc.dtype == np.float64 and flag.dtype == np.int8
        assert acc[0, 0, 0] == acc_want and flag[0, 0, 0] == flag_want


# ------------------------------------------------------------------ random inputs, odd shapes
SHAPES = [
    (1, 1, 1),
    (1, 7, 1),
    (3, 1, 5),
    (1, 13, 17),
    (17, 13, 1),
    (5, 4, 8),
    (7, 11, 13),
    (16, 32, 24),
    (31, 37, 29),
    (2, 130, 3),
    (9, 67, 261),
]


@pytest.mark.parametrize("M, K, N", SHAPES)
@pytest.mark.parametrize("trunc", [False, True])
def test_random_normal(M, K, N, trunc):
    rng = np.random.default_rng(M * 10007 + K * 101 + N + trunc)
    a = f16(rng.standard_normal((M, K)) * 2.0 ** rng.integers(-12, 4, (M, K)))
    b = f16(rng.standard_normal((K, N)) * 2.0 ** rng.integers(-12, 4, (K, N)))
    assert_same_f16(kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc))


@pytest.mark.parametrize("M, K, N", [(1, 40, 1), (6, 23, 9), (13, 64, 11), (4, 200, 5)])
@pytest.mark.parametrize("trunc", [False, True])
def test_random_saturating_both_directions(M, K, N, trunc):
    """Large products of both signs: sums leave the range, come back, clamp the other way."""
    rng = np.random.default_rng(K * 31 + M + trunc)
    a = f16(rng.uniform(-2000, 2000, (M, K)))
    b = f16(rng.uniform(-60, 60, (K, N)) * (rng.random((K, N)) < 0.7) * 0.25 ** np.arange(N))
    got, want = kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc)
    assert_same_f16(got, want)
    assert np.isinf(want).any() and (N == 1 or np.isfinite(want).any())


def test_clamp_then_return_reads_inf_in_direction_of_latest_clamp():
    # partial sums: 40000 -> clamp top; -> 0.. -> -40000 clamp bottom; -> back to small
    a = f16([[200, 200, -200, -200, -200, -200, 100]])
    b = f16([[100], [100], [100], [100], [100], [100], [100]])
    assert_same_f16(kernel_matmul(a, b), f16([[-np.inf]]))
    assert_same_f16(ref_matmul(a, b), f16([[-np.inf]]))
    a2 = f16([[-200, -200, 200, 200, 200, 200, -100]])  # mirror: latest clamp at the top
    assert_same_f16(kernel_matmul(a2, b), f16([[np.inf]]))
    a3 = f16([[200, 200, -200, -200]])  # clamps at 32768-2**-16, ends at -7232: still +inf
    assert_same_f16(kernel_matmul(a3, b[:4]), f16([[np.inf]]))


def test_reaching_the_limits_exactly_does_not_saturate():
    # exactly -32768 is representable (the probe); so is the top, 32768 - 2**-16
    a = f16([[-128.0] * 256])
    assert_same_f16(kernel_matmul(a, np.ones((256, 1), F16)), f16([[-32768.0]]))
    top = [16384.0, 16368.0, 8.0, 8.0 - 2.0**-8, 255 * 2.0**-16]  # sums to 2**31 - 1 grid units
    assert all(float(F16(v)) == v for v in top)
    z = np.zeros(1, np.int64)
    for extra, acc_want, flag_want, read_want in [
        ([], ACC_MAX, 0, 32768.0),  # fp16 rounding only
        ([2.0**-16], ACC_MAX, 1, np.inf),
        ([2.0**-16, -1.0], ACC_MAX - 65536, 1, np.inf),
    ]:
        a = np.array([top + extra])
        b = np.ones((a.shape[1], 1))
        acc, flag = mac.matmul_q16(a[None], b[None], z, z, False)
        assert acc[0, 0, 0] == acc_want and flag[0, 0, 0] == flag_want
        assert readout16(acc, flag)[0, 0, 0] == F16(read_want)
        assert_same_f16(ref_matmul(f16(a), f16(b)), f16([[read_want]]))


# ------------------------------------------------------------------ tiny products, ties
def test_tiny_products_half_grid_ties():
    h = 2.0**-17  # half a grid step
    # products: 2**-17 (tie -> 0), 3*2**-17 (tie -> 2 steps), 5*2**-17 (tie -> 2), -2**-17 (tie -> 0)
    a = f16([[2.0**-9, 3 * 2.0**-9, 5 * 2.0**-9, -(2.0**-9), 2.0**-10, -(3 * 2.0**-9)]])
    b = f16([[2.0**-8]] * 6)
    prods = np.asarray(a, np.float64)[0] * 2.0**-8
    assert np.array_equal(prods / h, [1, 3, 5, -1, 0.5, -3])
    for trunc, want_units in [(False, [0, 2, 2, 0, 0, -2]), (True, [0, 1, 2, -1, 0, -2])]:
        for k, units in enumerate(want_units):
            got = kernel_matmul(a[:, k : k + 1], b[k : k + 1], trunc)
            assert got[0, 0] == F16(units * 2.0**-16), (trunc, k)
            assert_same_f16(got, ref_matmul(a[:, k : k + 1], b[k : k + 1], trunc))
    for trunc in (False, True):
        assert_same_f16(kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc))


@pytest.mark.parametrize("trunc", [False, True])
def test_random_tiny(trunc):
    rng = np.random.default_rng(7 + trunc)
    a = f16(rng.uniform(-1, 1, (9, 50)) * 2.0**-7)
    b = f16(rng.uniform(-1, 1, (50, 12)) * 2.0**-7)
    got = kernel_matmul(a, b, trunc)
    assert_same_f16(got, ref_matmul(a, b, trunc))
    assert np.count_nonzero(got) > 0


# ------------------------------------------------------------------ NaN / inf operands
def test_nan_and_inf_operands():
    inf, nan = np.inf, np.nan
    a = f16(
        [
            [inf, 1, 2],  # inf * b: saturate up
            [inf, 0, 0],  # inf * 0 below -> NaN
            [-inf, 5, 0],  # saturate down, then +5*... comes back: still -inf
            [inf, -inf, 0],  # +inf then -inf in one sum: last clamp at the bottom
            [nan, 1, 1],  # NaN operand
            [1, 2, 3],  # finite row meeting the inf column
            [2e4, 2e4, 2e4],
        ]
    )  # saturates, and the NaN column wins over the flag
    b = f16([[1, 0, 1, -2], [1, 1, nan, 1], [1, 1, 1, inf]])
    got, want = kernel_matmul(a, b), ref_matmul(a, b)
    assert_same_f16(got, want)
    assert np.isnan(want[1, 1]) and np.isnan(want[4]).all() and np.isnan(want[:, 2]).all()
    assert want[0, 0] == np.inf and want[2, 0] == -np.inf and want[3, 0] == -np.inf
    assert want[0, 3] == np.inf and want[5, 3] == np.inf and want[6, 0] == np.inf
    for trunc in (False, True):
        assert_same_f16(kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc))


def test_nan_anywhere_in_b_forces_the_exact_path():
    """Regression (found by hypothesis): a NaN followed by smaller values in b must not be
    forgotten by the max|b| bound, or a saturating column slips onto the fast path."""
    a = f16([[0.5024]])
    b = f16([[65250.0, np.nan, 0.0]])  # 0.5024 * 65250 = 32781 > 32768: saturates
    assert_same_f16(kernel_matmul(a, b), f16([[np.inf, np.nan, 0.0]]))
    assert_same_f16(ref_matmul(a, b), f16([[np.inf, np.nan, 0.0]]))
    out = np.empty(1)
    mac._abs_max(np.array([[[np.nan, 0.0, 1.0]]]), out)
    assert np.isnan(out[0])
    rsum, rmax = np.empty((1, 1)), np.empty((1, 1))
    mac._row_abs_stats(np.array([[[1.0, np.nan, 0.0]]]), rsum, rmax)
    assert np.isnan(rsum[0, 0]) and np.isnan(rmax[0, 0])
    csum, cmax = np.empty((1, 1)), np.empty((1, 1))
    mac._col_abs_stats(np.array([[[1.0], [np.nan], [0.0]]]), csum, cmax)
    assert np.isnan(csum[0, 0]) and np.isnan(cmax[0, 0])


# ------------------------------------------------------------------ hypothesis
INTERESTING = [
    0.0,
    -0.0,
    2.0**-24,
    -(2.0**-24),
    2.0**-17,
    2.0**-9,
    0.5,
    -0.75,
    1.0,
    3.0,
    -7.5,
    100.0,
    -255.0,
    1024.0,
    -4096.0,
    65504.0,
    -65504.0,
    np.inf,
    -np.inf,
    np.nan,
]
INTERESTING_BITS = [int(b) for b in np.array(INTERESTING, F16).view(np.uint16)]


@st.composite
def any_f16_matrices(draw, max_side=9):
    """Any fp16 bit patterns (subnormals, inf, NaN included) mixed with chosen values."""
    m, k, n = (draw(st.integers(1, max_side)) for _ in range(3))
    bits = st.one_of(st.integers(0, 0xFFFF), st.sampled_from(INTERESTING_BITS))
    a = draw(hnp.arrays(np.uint16, (m, k), elements=bits)).view(F16)
    b = draw(hnp.arrays(np.uint16, (k, n), elements=bits)).view(F16)
    return a, b


@st.composite
def scaled_f16_matrices(draw, max_side=12):
    """Finite normal values pulled to a random binade: from all-tiny to everything saturating."""
    m, k, n = (draw(st.integers(1, max_side)) for _ in range(3))
    scale = draw(st.integers(-12, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = f16(rng.standard_normal((m, k)) * 2.0 ** (scale + rng.integers(-3, 4, (m, k))))
    b = f16(rng.standard_normal((k, n)) * 2.0 ** (scale + rng.integers(-3, 4, (k, n))))
    return a, b


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ab=any_f16_matrices(), trunc=st.booleans())
def test_hypothesis_any_fp16(ab, trunc):
    a, b = ab
    assert_same_f16(kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ab=scaled_f16_matrices(), trunc=st.booleans())
def test_hypothesis_scaled_finite(ab, trunc):
    a, b = ab
    assert_same_f16(kernel_matmul(a, b, trunc), ref_matmul(a, b, trunc))


# ------------------------------------------------------------------ batch index maps
@pytest.mark.parametrize("trunc", [False, True])
def test_batch_index_maps(trunc):
    rng = np.random.default_rng(11)
    a16 = f16(rng.uniform(-400, 400, (2, 5, 21)))
    b16 = f16(rng.uniform(-400, 400, (3, 21, 6)) * 0.25 ** np.arange(6))
    ia = np.array([0, 1, 1, 0, 1], np.int64)
    ib = np.array([2, 0, 1, 1, 2], np.int64)
    acc, flag = mac.matmul_q16(a16.astype(np.float64), b16.astype(np.float64), ia, ib, trunc)
    assert acc.shape == (5, 5, 6) and flag.shape == (5, 5, 6)
    got = readout16(acc, flag)
    for n in range(5):
        assert_same_f16(got[n], ref_matmul(a16[ia[n]], b16[ib[n]], trunc))
    assert np.isinf(got).any() and np.isfinite(got).any()


def test_into_variant_matches_and_inputs_are_untouched():
    rng = np.random.default_rng(12)
    a = f16(rng.uniform(-200, 200, (1, 3, 40))).astype(np.float64)
    b = f16(rng.uniform(-200, 200, (1, 40, 50))).astype(np.float64)
    a0, b0 = a.copy(), b.copy()
    z = np.zeros(1, np.int64)
    acc1, flag1 = mac.matmul_q16(a, b, z, z, False)
    acc2, flag2 = np.full_like(acc1, 7.0), np.full_like(flag1, 3)  # garbage in the outputs
    mac.matmul_q16_into(a, b, z, z, False, acc2, flag2)
    assert np.array_equal(acc1, acc2, equal_nan=True) and np.array_equal(flag1, flag2)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    assert np.isinf(readout16(acc1, flag1)).any()


# ------------------------------------------------------------------ fast path vs exact paths
def _force(kernel, a16, b16, trunc):
    """Run one of the three kernels on every element (bypassing the planner)."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    b = np.ascontiguousarray(b16, np.float64)[None]
    M, N = a.shape[1], b.shape[2]
    z = np.zeros(1, np.int64)
    acc, flag = np.full((1, M, N), 12345.0), np.zeros((1, M, N), np.int8)
    rb, ri = np.zeros(M, np.int64), np.arange(M, dtype=np.int64)
    if kernel == "fast":
        mac._fast_rows(a, b, z, z, rb, ri, trunc, acc, 4, 8, 8, 3)  # small tiles: many tile edges
    elif kernel == "dots":
        mac._fast_dots(a, b, z, z, rb, ri, trunc, acc, 3)
    elif kernel == "rows":
        mac._exact_rows(a, b, z, z, rb, ri, trunc, acc, flag, 4, 8, 8, 3)
    else:
        eb, ei, ej = (x.astype(np.int64).ravel() for x in np.indices((1, M, N)))
        mac._exact_elements(a, b, z, z, eb, ei, ej, trunc, acc, flag, 3)
    return readout16(acc, flag)[0]


@pytest.mark.parametrize(
    "M, K, N", [(1, 1, 1), (3, 5, 7), (5, 19, 23), (10, 37, 9), (2, 64, 17), (4, 8, 2), (3, 17, 1)]
)
@pytest.mark.parametrize("trunc", [False, True])
def test_each_kernel_alone_matches_reference_on_safe_inputs(M, K, N, trunc):
    """The fast kernel's any-order sums (paired products) equal the serial definition."""
    rng = np.random.default_rng(M + K + N + trunc)
    a = f16(rng.standard_normal((M, K)) * 2.0 ** rng.integers(-14, 3, (M, K)))
    b = f16(rng.standard_normal((K, N)) * 2.0 ** rng.integers(-14, 3, (K, N)))
    want = ref_matmul(a, b, trunc)
    for kernel in ("fast", "dots", "rows", "elements"):
        assert_same_f16(_force(kernel, a, b, trunc), want)


@pytest.mark.parametrize("trunc", [False, True])
def test_exact_kernels_alone_match_reference_on_saturating_inputs(trunc):
    rng = np.random.default_rng(21 + trunc)
    a = f16(rng.uniform(-300, 300, (6, 30)))
    b = f16(rng.uniform(-60, 60, (30, 11)))
    b[3, 4], b[5, 5], a[2, 7] = np.inf, np.nan, -np.inf
    want = ref_matmul(a, b, trunc)
    assert np.isinf(want).any() and np.isnan(want).any() and np.isfinite(want).any()
    for kernel in ("rows", "elements"):
        assert_same_f16(_force(kernel, a, b, trunc), want)


def test_planner_uses_every_path_near_the_bound(monkeypatch):
    """Rows whose cheap bound fails: some safe by |A|@|B|, some need single elements, some whole rows."""
    cleared = []
    real_refine = mac._blas_refine

    def spy(a, b, ia, ib, K, unsafe):
        before = int(unsafe.sum())
        real_refine(a, b, ia, ib, K, unsafe)
        cleared.append(before - int(unsafe.sum()))

    monkeypatch.setattr(mac, "_blas_refine", spy)
    rng = np.random.default_rng(5)
    M, K, N = 12, 64, 40
    a = f16(rng.uniform(-1, 1, (M, K)) * 8)
    b = f16(rng.uniform(-1, 1, (K, N)) * 8)
    b[0, :] = 900.0  # one big entry per column at k=0: the row bound sum|a| * max|b| fails
    a[:, 0] = f16(rng.uniform(-0.05, 0.05, M))  # ... but these rows barely use it
    a[3, 0] = 40.0  # row 3: 40 * 900 = 36000 > 32768 in every column: whole row exact
    b[5, 7] = 4000.0  # column 7 meets a[:, 5]: single elements of some rows
    a[:, 5] = f16(rng.uniform(4, 9, M))
    for trunc in (False, True):
        got, (n_fast, n_exact, n_elements) = split_matmul(a, b, trunc)
        want = ref_matmul(a, b, trunc)
        assert_same_f16(got, want)
        assert n_exact >= 1 and n_fast >= 1 and n_elements >= 1, (n_fast, n_exact, n_elements)
        assert np.isinf(want).any() and np.isfinite(want).any()
        assert cleared[-1] > 0  # |A| @ |B| proved some elements safe that the cheap bounds did not


def test_fast_path_right_below_the_bound():
    """Inputs whose exact |A|@|B| bound sits just below 2**31: all on the fast path, no clamp."""
    K = 256
    a = f16(np.full((2, K), 127.875))
    b = np.ones((K, 3), F16)
    b[:, 1] = F16(-1.0)
    got, (n_fast, n_exact, n_elements) = split_matmul(a, b)
    assert (n_fast, n_exact, n_elements) == (2, 0, 0)
    assert_same_f16(got, ref_matmul(a, b))
    assert got[0, 0] == F16(32736.0) and got[0, 1] == F16(-32736.0)


@pytest.mark.parametrize("threshold", [0, 1 << 62])  # always threads / never threads
def test_threaded_and_single_thread_runs_agree(monkeypatch, threshold):
    """Small work runs on one thread (SERIAL_MACS); force both ways on mixed inputs."""
    monkeypatch.setattr(mac, "SERIAL_MACS", threshold)
    rng = np.random.default_rng(77)
    a16 = f16(rng.uniform(-1, 1, (3, 37, 70)) * 2.0 ** rng.integers(-10, 9, (3, 37, 70)))
    b16 = f16(rng.uniform(-1, 1, (2, 70, 45)) * 2.0 ** rng.integers(-10, 7, (2, 70, 45)))
    b16[1, 3, 4] = np.inf
    ia, ib = np.array([0, 1, 2, 2], np.int64), np.array([1, 0, 0, 1], np.int64)
    for trunc in (False, True):
        acc, flag = mac.matmul_q16(a16.astype(np.float64), b16.astype(np.float64), ia, ib, trunc)
        got = readout16(acc, flag)
        for n in range(4):
            assert_same_f16(got[n], ref_matmul(a16[ia[n]], b16[ib[n]], trunc))
    assert np.isinf(got).any() and np.isfinite(got).any()
    narrow = f16(rng.uniform(-3, 3, (1, 70, 3)))  # the dot-product kernel
    acc, flag = mac.matmul_q16(
        a16[:1].astype(np.float64),
        narrow.astype(np.float64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        False,
    )
    assert_same_f16(readout16(acc, flag)[0], ref_matmul(a16[0], narrow[0]))


# ------------------------------------------------------------------ readout
def test_readout_against_reference_rounding():
    rng = np.random.default_rng(9)
    accs = np.concatenate(
        [
            rng.integers(ACC_MIN, ACC_MAX + 1, 3000),
            rng.integers(-5000, 5000, 500),
            [0, 1, -1, 2, 3, 4, ACC_MAX, ACC_MIN, ACC_MAX - 1, ACC_MIN + 1],
            # fp16 ties: (2k + 1) half-steps at spacing 2**(e-10) for values in [2**e, 2**(e+1))
            [(2 * k + 1) * 2 ** (e + 16 - 11) for e in range(-3, 15) for k in (1024, 1025, 2046, 2047)],
            [-(2 * k + 1) * 2 ** (e + 16 - 11) for e in range(-3, 15) for k in (1024, 1025)],
        ]
    ).astype(np.int64)
    acc = accs.astype(np.float64)
    flag = np.zeros(acc.size, np.int8)
    got = readout16(acc, flag)
    for x, g in zip(accs, got):
        assert g.view(np.uint16) == ref_readout_value(int(x)).view(np.uint16), x


def test_readout_flags_and_nan():
    acc = np.array([5.0, 5.0, 5.0, np.nan, np.nan, ACC_MAX, ACC_MIN, 0.0])
    flag = np.array([0, 1, -1, 1, 0, 0, 0, 0], np.int8)
    out = np.empty(8)
    mac.readout(acc, flag, out)
    assert out[0] == 5 * 2.0**-16 and out[1] == np.inf and out[2] == -np.inf
    assert np.isnan(out[3]) and np.isnan(out[4])
    assert out[5] == 32768.0 and out[6] == -32768.0  # unflagged limits: fp16 rounding only
    assert out[7] == 0 and not np.signbit(out[7])
    out2 = np.empty((2, 4))  # any ndim, C-contiguous
    mac.readout(acc.reshape(2, 4), flag.reshape(2, 4), out2)
    assert np.array_equal(out2.ravel(), out, equal_nan=True)


def test_zero_sized_inputs():
    z = np.zeros(1, np.int64)
    acc, flag = mac.matmul_q16(np.zeros((1, 3, 0)), np.zeros((1, 0, 4)), z, z, False)
    assert acc.shape == (1, 3, 4) and not acc.any() and not flag.any()
    acc, flag = mac.matmul_q16(np.zeros((1, 0, 5)), np.zeros((1, 5, 4)), z, z, False)
    assert acc.shape == (1, 0, 4)


def test_readout_value_bits_and_counts_are_one_readout():
    """The one readout: the value (mac.readout), the pattern (the fused NE path) and the
    NaN/saturation counts agree on every kind of accumulator; a NaN accumulator reads as
    the NaN it holds (payload and sign kept), whatever its flag."""
    from numba import njit

    from fastane.kernels import fp16

    @njit
    def per_element(acc, flag, vals, bits, counts):
        for t in range(acc.size):
            vals[t] = mac.readout_value(acc[t], flag[t])
            bits[t] = fp16.f64_to_f16(mac.readout_unrounded(acc[t], flag[t]))
            n, s = mac.readout_counts(acc[t], flag[t])
            counts[t, 0] = n
            counts[t, 1] = s

    nans = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000ABC], np.uint64).view(np.float64)
    rng = np.random.default_rng(10)
    base = np.concatenate(
        [
            rng.integers(ACC_MIN, ACC_MAX + 1, 200).astype(np.float64),
            [0.0, ACC_MAX, ACC_MIN, 65520.0 * 65536, 65504.0 * 65536],
            nans,
        ]
    )
    acc = np.repeat(base, 3)
    flag = np.tile(np.array([0, 1, -1], np.int8), base.size)
    vals, bits = np.empty(acc.size), np.empty(acc.size, np.uint16)
    counts = np.empty((acc.size, 2), np.int64)
    per_element(acc, flag, vals, bits, counts)
    out = np.empty(acc.size)
    mac.readout(acc, flag, out)
    assert np.array_equal(out.view(np.uint64), vals.view(np.uint64))
    nan = np.isnan(acc)
    assert np.array_equal(vals[nan].view(np.uint64), acc[nan].view(np.uint64))
    assert np.all(bits[nan] == 0x7E00)
    with np.errstate(over="ignore"):
        want = vals[~nan].astype(F16).view(np.uint16)  # exact: vals hold fp16 values
    assert np.array_equal(bits[~nan], want)
    assert np.array_equal(counts[:, 0], nan.astype(np.int64))
    assert np.array_equal(counts[:, 1], ((flag != 0) & ~nan).astype(np.int64))
    from tests.helpers.reference import readout_bits

    ref = [readout_bits(int(a), int(f), False) for a, f in zip(acc[~nan], flag[~nan])]
    assert np.array_equal(bits[~nan], np.array(ref, np.uint16))


@pytest.mark.parametrize("trunc", [False, True])
def test_small_kernel_is_the_reference(trunc):
    """matmul_q16_small (the serial definition for small work) on random, saturating,
    NaN and inf operands, batched with index maps: the reference's and matmul_q16's bits."""
    rng = np.random.default_rng(11)
    for M, K, N, scale in [(4, 4, 4, 1.0), (3, 40, 5, 200.0), (1, 300, 2, 128.0), (6, 9, 7, 1e-3)]:
        a16 = (rng.standard_normal((2, M, K)) * scale).astype(F16)
        b16 = (rng.standard_normal((3, K, N)) * scale).astype(F16)
        a16[0, 0, 0], b16[1, -1, -1] = np.nan, np.inf
        a = a16.astype(np.float64)
        b = b16.astype(np.float64)
        ia, ib = np.array([0, 1, 1], np.int64), np.array([2, 0, 1], np.int64)
        acc, flag = np.empty((3, M, N)), np.empty((3, M, N), np.int8)
        mac.matmul_q16_small(a, b, ia, ib, trunc, acc, flag)
        want_acc, want_flag = mac.matmul_q16(a, b, ia, ib, trunc)
        assert np.array_equal(acc, want_acc, equal_nan=True) and np.array_equal(flag, want_flag)
        for n in range(3):
            assert_same_f16(readout16(acc, flag)[n], ref_matmul(a16[ia[n]], b16[ib[n]], trunc))
