"""The MAC kernels' float32 fast path (fastane.kernels.mac_f32) bit for bit against
tests/helpers/reference.py: the accumulators themselves (grid units), not only their fp16
readout, on random and adversarial inputs (ties, subnormals, signed zeros, the product
limit, sums next to the accumulator's range and the int32 wrap-around, rows that must
not take the path: large products, inf, NaN)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastane.kernels import mac, mac_f32
from tests.helpers.device import assert_same_f16
from tests.helpers.reference import accumulate, decode_f16, product_on_grid, ref_matmul

F16 = np.float16
LIMIT = 64.0  # |a| * |b| <= 64 <=> |product| <= 2**22 grid units: the float32 path's limit


def f16(x):
    return np.asarray(x, np.float64).astype(F16)


def ref_acc(a16, b16, trunc=False):
    """(acc, flag) by the reference: the serial, per-step clamped sum of grid products."""
    ab = [[decode_f16(int(v)) for v in row] for row in np.asarray(a16, F16).view(np.uint16)]
    bb = [[decode_f16(int(v)) for v in row] for row in np.asarray(b16, F16).view(np.uint16)]
    M, K, N = len(ab), len(bb), len(bb[0]) if bb else 0
    acc = np.zeros((M, N))
    flag = np.zeros((M, N), np.int8)
    for i in range(M):
        for j in range(N):
            s, f, nan = accumulate(product_on_grid(ab[i][k], bb[k][j], trunc) for k in range(K))
            acc[i, j] = np.nan if nan else s
            flag[i, j] = f
    return acc, flag


def operand_b(b16, mode):
    """``b`` as the float32 kernel reads it: float32, or (``mode="f16"``) fp16 bit patterns."""
    if mode == "f16":
        return np.ascontiguousarray(b16, F16).view(np.uint16)
    return np.ascontiguousarray(b16, np.float32)


def force32(a16, b16, trunc, mode="f32", tiles=(3, 16, 5)):
    """The float32 kernel alone on every row (bypassing the planner), reading ``b`` as
    float32 or (``mode="f16"``) as fp16 bit patterns; small tiles by default, so that
    tile edges and depth blocks all occur."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    bq = operand_b(b16, mode)[None]
    M, N = a.shape[1], bq.shape[2]
    z = np.zeros(1, np.int64)
    acc = np.full((1, M, N), 12345, np.int32)
    rb, ri = np.zeros(M, np.int64), np.arange(M, dtype=np.int64)
    rows, cols, depth = tiles
    mac_f32._fast32_rows(a, bq, z, z, rb, ri, trunc, acc, rows, cols, depth, 3)
    return acc[0]


def readout16(acc, flag):
    out = np.empty(acc.shape)
    mac.readout(acc, flag, out)
    return out.astype(F16)


def assert_acc(got, a16, b16, trunc):
    want, flag = ref_acc(a16, b16, trunc)
    assert not flag.any()
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


def eligible(rng, shape, lo=-24, hi=3):
    """fp16 values with magnitudes 2**lo .. 8 (subnormals included), both signs, zeros."""
    x = rng.uniform(1, 2, shape) * 2.0 ** rng.integers(lo, hi, shape) * rng.choice([-1, 1], shape)
    x[rng.random(shape) < 0.05] = 0.0
    x = f16(np.clip(x, -8, 8))
    x[rng.random(shape) < 0.03] = F16(-0.0)
    return x


# ------------------------------------------------------------------ the kernel alone
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (3, 5, 17), (5, 19, 23), (4, 64, 40), (7, 13, 33)])
@pytest.mark.parametrize("trunc", [False, True])
@pytest.mark.parametrize("mode", ["f32", "f16"])
@pytest.mark.parametrize("tiles", [(3, 16, 5), (8, 16, 6)])
def test_kernel_alone_matches_reference(M, K, N, trunc, mode, tiles):
    """Tiles of 3 rows (every row alone) and of 8 (rows four together), depth blocks of
    odd and even length."""
    rng = np.random.default_rng(M * 100 + K * 10 + N + trunc)
    a, b = eligible(rng, (M, K)), eligible(rng, (K, N))
    assert_acc(force32(a, b, trunc, mode, tiles), a, b, trunc)


@pytest.mark.parametrize("trunc", [False, True])
@pytest.mark.parametrize("mode", ["f32", "f16"])
@pytest.mark.parametrize("tiles", [(4, 16, 5), (8, 9, 6), (7, 21, 3)])
@pytest.mark.parametrize("maps", [([0, 1, 2], [2, 0, 1]), ([0, 1, 2], [0, 0, 1]), ([1, 1, 0], [0, 1, 1])])
def test_kernel_alone_rows_of_mixed_batches(trunc, mode, tiles, maps):
    """Listed rows whose output batch changes after 5, 1, 3, 2, 10, 8 and 4 rows, the
    batches' ``a`` and ``b`` given by ``maps`` (a permutation; a ``b`` shared by outputs
    of different ``a``; an ``a`` shared by outputs of different ``b``): rows go four
    together only while they share their ``b``, each with its own ``a``."""
    rng = np.random.default_rng(17 + trunc)
    B, M, K, N = 3, 11, 13, 21
    a, b = eligible(rng, (B, M, K)), eligible(rng, (B, K, N))
    ia, ib = (np.array(m) for m in maps)
    runs = [(0, 0, 5), (1, 0, 1), (2, 0, 3), (0, 5, 7), (1, 1, 11), (2, 3, 11), (0, 7, 11)]
    rb = np.concatenate([np.full(i1 - i0, n) for n, i0, i1 in runs]).astype(np.int64)
    ri = np.concatenate([np.arange(i0, i1) for n, i0, i1 in runs]).astype(np.int64)
    bq = operand_b(b, mode)
    acc = np.full((B, M, N), 12345, np.int32)
    rows, cols, depth = tiles
    a64 = np.ascontiguousarray(a, np.float64)
    mac_f32._fast32_rows(a64, bq, ia, ib, rb, ri, trunc, acc, rows, cols, depth, 3)
    for n in range(B):
        want, flag = ref_acc(a[ia[n]], b[ib[n]], trunc)
        assert not flag.any()
        assert np.array_equal(acc[n], want), (n, np.argwhere(acc[n] != want)[:5])


@pytest.mark.parametrize("trunc", [False, True])
def test_every_fp16_pattern_times_chosen_values(trunc):
    """Every finite fp16 ``b`` with ``|a b| <= 64`` (subnormals and -0 included) times a
    few ``a`` values, each product rounded alone (K = 1), against the reference's integer
    rounding; the converted-block variant on every fourth pattern."""
    vals = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(F16)
    for av in (1.0, -1.0, 2.0**-24, 3 * 2.0**-10, -(2.0**-14), 1.5, 7.99, -8.0, 0.0):
        b = vals[np.isfinite(vals) & (np.abs(vals.astype(np.float64)) * abs(av) <= LIMIT)][None]
        a = f16([[av]])
        da = decode_f16(int(a.view(np.uint16)[0, 0]))
        want = np.array([product_on_grid(da, decode_f16(int(v)), trunc)[1] for v in b.view(np.uint16)[0]])
        assert np.array_equal(force32(a, b, trunc, "f32", tiles=(2, 4096, 4))[0], want), av
        assert np.array_equal(force32(a, b, trunc, "f16", tiles=(2, 4096, 4))[0], want), av


def test_half_grid_ties_both_parities():
    """Products that are exact ties (n + 1/2 grid steps) with n even and odd, positive and
    negative, alone and summed: half to even per product, floor with trunc."""
    k = np.arange(1, 41)
    a = f16(np.where(k % 3 == 0, -1, 1) * (2 * k - 1) * 2.0**-9)[None]  # odd multiples
    b = f16(np.full((40, 9), 2.0**-8))  # a * b = (2k - 1) * 2**-17: a tie in every product
    b[:, 1::2] = F16(-(2.0**-8))
    b[::5, 3] = F16(3 * 2.0**-8)  # 3 x a tie: another tie, or not
    for trunc in (False, True):
        for mode in ("f32", "f16"):
            assert_acc(force32(a, b, trunc, mode), a, b, trunc)
            assert_acc(force32(a.T.copy(), b[:1], trunc, mode), a.T, b[:1], trunc)  # K = 1 each


@pytest.mark.parametrize("trunc", [False, True])
def test_the_product_limit_itself(trunc):
    """|a b| = 64 exactly (product 2**22 grid units, the top of MAGIC32's binade) and the
    values right below it, with both signs."""
    top = f16([8.0, -8.0, 7.996, 4.0, -2.0, 1.0])
    b = f16([[8.0, -8.0, 8.0, 16.0, 32.0, -64.0, 7.996]])
    for i in range(top.size):
        a = top[i : i + 1, None]
        ok = np.abs(b.astype(np.float64)) * abs(float(a[0, 0])) <= LIMIT
        bb = b[:, ok[0]]
        assert_acc(force32(a, bb, trunc), a, bb, trunc)
    assert mac_f32.f32_row_ok(8.0, 8.0) and not mac_f32.f32_row_ok(8.0, 8.0078125)


@pytest.mark.parametrize("trunc", [False, True])
@pytest.mark.parametrize("K", [511, 512, 515, 1000])
def test_sums_next_to_the_accumulator_range_and_the_wrap(K, trunc):
    """Lanes that wrap around int32 many times (K * MAGIC32_BITS) with sums S close to the
    top and the bottom of the accumulator (as close as the no-clamp bound lets a row be
    on a fast path), cancellation to zero, and mixtures."""
    big = min(K, 511)
    a = np.zeros((4, K), F16)
    a[:, :big] = F16(8.0)
    a[:, big:] = F16(2.0**-9)  # tiny products beyond the big ones: ties and below
    b = np.zeros((K, 12), F16)
    b[:, 0] = F16(8.0)  # S = 511 * 2**22 + small: 2**31 - 2**22 + ...
    b[:, 1] = F16(-8.0)  # the bottom side
    b[:, 2] = np.where(np.arange(K) % 2 == 0, F16(8.0), F16(-8.0))  # cancellation
    b[:, 3] = F16(7.996)
    b[:, 4:] = f16(np.random.default_rng(K).uniform(-8, 8, (K, 8)))
    a[1] = -a[1]
    a[2, ::3] = F16(-8.0)
    got = force32(a, b, trunc, tiles=(4, 16, 64))
    assert_acc(got, a, b, trunc)
    assert np.array_equal(force32(a, b, trunc, "f16", tiles=(3, 32, 100)), got)
    assert abs(got[0, 0]) > 2**31 - 2**23 and abs(got[1, 0]) > 2**31 - 2**23


# ------------------------------------------------------------------ through the planner
def _spy(monkeypatch):
    seen = []
    real = mac._fast32_rows

    def spy(a, bq, ia, ib, rb, ri, *rest):
        seen.append((rb.copy(), ri.copy(), bq.dtype))
        return real(a, bq, ia, ib, rb, ri, *rest)

    monkeypatch.setattr(mac, "_fast32_rows", spy)
    return seen


def planned(a16, b16, trunc, bdtype=np.float64):
    """Through matmul_q16_into, with ``b`` as float64, float32 or float16 (resident weights)."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    b = np.ascontiguousarray(b16, np.float64)[None].astype(bdtype)
    M, N = a.shape[1], b.shape[2]
    acc, flag = np.empty((1, M, N)), np.empty((1, M, N), np.int8)
    z = np.zeros(1, np.int64)
    mac.matmul_q16_into(a, b, z, z, trunc, acc, flag)
    return acc[0], flag[0]


def test_f16_patterns_every_pattern():
    """f16_patterns (the float64 operand's copy the float32 path reads) gives numpy's
    float16 bit pattern for every fp16 value, in any shape; NaNs stay NaNs."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(F16).astype(np.float64).reshape(256, 256)
    out = np.empty(x.shape, np.uint16)
    mac_f32.f16_patterns(x, out)
    nan = np.isnan(x)
    assert np.array_equal(out[~nan], bits.reshape(256, 256)[~nan])
    assert np.isnan(out[nan].view(F16)).all()


@pytest.mark.parametrize("bdtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("trunc", [False, True])
def test_planner_sends_only_eligible_rows(monkeypatch, bdtype, trunc):
    """Rows with small products take the float32 path; rows with a product above the
    limit, an inf or a NaN, or that may clamp, do not; the result is the reference's."""
    seen = _spy(monkeypatch)
    rng = np.random.default_rng(3 + 2 * trunc)
    M, K, N = 40, 48, 37
    a, b = eligible(rng, (M, K)), eligible(rng, (K, N), -20, 2)  # max |b| <= 4
    a[5, 3] = F16(40.0)  # 40 * 4 > 64: float64 fast path
    a[6, 7] = F16(np.inf)
    a[7, 1] = F16(np.nan)
    a[8, :] = F16(8000.0)  # saturates: exact rows
    acc, flag = planned(a, b, trunc, bdtype)
    want, wflag = ref_acc(a, b, trunc)
    assert np.array_equal(acc, want, equal_nan=True) and np.array_equal(flag, wflag)
    rows = np.concatenate([ri for _, ri, _ in seen])
    assert set(rows.tolist()) == set(range(M)) - {5, 6, 7, 8}, sorted(rows.tolist())
    # float16: its bit patterns; float64: a copy of its patterns (f16_patterns)
    want_dtype = np.float32 if bdtype == np.float32 else np.uint16
    assert all(dt == want_dtype for *_, dt in seen), [dt for *_, dt in seen]


@pytest.mark.parametrize("bdtype", [np.float32, np.float16])
def test_resident_right_operand_on_every_path(bdtype):
    """``b`` given as float32 or float16 (resident weights): the float32 path reads it, the
    other paths (large products, saturation, inf and NaN, narrow outputs) a float64 copy."""
    rng = np.random.default_rng(11)
    a = f16(rng.uniform(-300, 300, (9, 30)))
    a[:3] = eligible(rng, (3, 30))
    b = eligible(rng, (30, 21))
    b[3, 4], b[5, 5] = np.inf, np.nan
    for trunc in (False, True):
        acc, flag = planned(a, b, trunc, bdtype)
        want, wflag = ref_acc(a, b, trunc)
        assert np.array_equal(acc, want, equal_nan=True) and np.array_equal(flag, wflag)
        acc, flag = planned(a, b[:, :5], trunc, bdtype)  # narrow: the dot-product kernel
        want, wflag = ref_acc(a, b[:, :5], trunc)
        assert np.array_equal(acc, want, equal_nan=True) and np.array_equal(flag, wflag)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(st.integers(1, 9), st.integers(1, 40), st.integers(9, 40)),
    lo=st.integers(-24, 2),
    seed=st.integers(0, 2**32 - 1),
    trunc=st.booleans(),
    bdtype=st.sampled_from([np.float64, np.float32, np.float16]),
)
def test_hypothesis_small_products(shape, lo, seed, trunc, bdtype):
    """Random eligible operands of every scale from subnormal up to the limit; through
    matmul_q16_sums (every row on the float32 path) the int32 sums are the reference's
    accumulators, ``acc``/``flag`` not touched."""
    M, K, N = shape
    rng = np.random.default_rng(seed)
    a, b = eligible(rng, (M, K), lo), eligible(rng, (K, N), lo)
    acc, flag = planned(a, b, trunc, bdtype)
    want, wflag = ref_acc(a, b, trunc)
    assert np.array_equal(acc, want) and np.array_equal(flag, wflag)
    assert_same_f16(readout16(acc, flag), ref_matmul(a, b, trunc))
    took, sums, acc, flag = summed(a, b, trunc, bdtype)
    assert took and np.array_equal(sums, want) and (acc == 555.0).all() and (flag == 3).all()


# ------------------------------------------------------------------ the int32 sums left
def summed(a16, b16, trunc, bdtype=np.float16):
    """Through matmul_q16_sums: ``(took, sums, acc, flag)``; the arrays start as sentinels,
    so what was not written shows."""
    a = np.ascontiguousarray(a16, np.float64)[None]
    b = np.ascontiguousarray(b16, np.float64)[None].astype(bdtype)
    M, N = a.shape[1], b.shape[2]
    sums = np.full((1, M, N), 777, np.int32)
    acc, flag = np.full((1, M, N), 555.0), np.full((1, M, N), 3, np.int8)
    z = np.zeros(1, np.int64)
    took = mac.matmul_q16_sums(a, b, z, z, trunc, sums, acc, flag)
    return took, sums[0], acc[0], flag[0]


@pytest.mark.parametrize("trunc", [False, True])
@pytest.mark.parametrize("case", ["large", "inf", "nan", "clamps", "narrow", "empty"])
def test_sums_not_left_when_a_row_leaves_the_path(case, trunc):
    """A product above the float32 limit, an inf, a NaN, a row that may clamp, an output
    too narrow for the row kernels, or no depth: no sums (``sums`` untouched), and
    ``acc``/``flag`` hold the reference's result, as from matmul_q16_into."""
    rng = np.random.default_rng(5)
    a, b = eligible(rng, (6, 24)), eligible(rng, (24, 19), -20, 2)
    if case == "large":
        a[2, 3] = F16(40.0)
    elif case == "inf":
        b[4, 4] = F16(-np.inf)
    elif case == "nan":
        a[0, 0] = F16(np.nan)
    elif case == "clamps":
        a[1, :], b[:, 2] = F16(8000.0), F16(8000.0)
    elif case == "narrow":
        b = b[:, : mac.NARROW_COLS]
    else:
        a, b = a[:, :0], b[:0]
    took, sums, acc, flag = summed(a, b, trunc)
    want, wflag = ref_acc(a, b, trunc) if b.size else (np.zeros(acc.shape), np.zeros(acc.shape, np.int8))
    assert not took and (sums == 777).all()
    assert np.array_equal(acc, want, equal_nan=True) and np.array_equal(flag, wflag)
