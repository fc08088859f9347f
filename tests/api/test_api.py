"""The numpy-facing surface: np.matmul semantics, PyTorch conv conventions, errors, errstate, Stats.

Values here are small integers, for which the ANE's arithmetic is exact, so float64
numpy is an independent oracle for shapes and semantics.  Bit-exactness on hard inputs
is tested against tests/helpers/reference.py in test_mac.py / test_conv_kernel.py and below.
"""

import warnings

import numpy as np
import pytest

import fastane
from tests.helpers.device import bits
from tests.helpers.reference import ref_conv2d, ref_matmul

rng = np.random.default_rng(1234)


def small_ints(*shape):
    return rng.integers(-4, 5, size=shape).astype(np.float64)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((3, 4), (2, 4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((1, 3, 4), (6, 4, 2)),
        ((2, 3, 4), (4,)),
        ((4,), (7, 4, 2)),
        ((0, 3), (3, 2)),
        ((3, 0), (0, 2)),
    ],
)
def test_matmul_shapes_and_values_follow_numpy(sa, sb):
    a, b = small_ints(*sa), small_ints(*sb)
    got = fastane.matmul(a, b)
    want = np.matmul(a, b).astype(np.float16)
    assert got.dtype == np.float16
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_matmul_of_two_vectors_is_a_scalar_like_numpy():
    got = fastane.matmul(np.ones(3), np.ones(3))
    assert isinstance(got, np.float16) and got == 3.0
    assert np.isscalar(np.matmul(np.ones(3), np.ones(3)))


def test_extended_precision_inputs_round_once():
    # 1 + 2**-11 + 2**-60 lies just above the tie between fp16 1.0 and 1.0009765625:
    # one correct rounding gives 1.0009765625; rounding to float64 first (the tie) gives 1.0
    x = np.longdouble(1) + np.longdouble(2.0**-11) + np.longdouble(2.0**-60)
    if x == np.longdouble(1) + np.longdouble(2.0**-11):
        pytest.skip("this platform's long double has no more precision than float64")
    assert fastane.matmul(np.array([[x]]), np.array([[1.0]]))[0, 0] == np.float16(1.0009765625)


def test_conv_argument_errors_name_the_function():
    with pytest.raises(ValueError, match=r"conv1d: stride must be >= 1, got 0"):
        fastane.conv1d(np.ones((1, 2, 8)), np.ones((3, 2, 3)), stride=0)
    with pytest.raises(TypeError, match="conv2d: groups must be an int"):
        fastane.conv2d(np.ones((1, 2, 8, 8)), np.ones((2, 1, 3, 3)), groups=2.0)
    with pytest.raises(ValueError, match="at least 1x1"):
        fastane.conv2d(np.ones((1, 2, 8, 8)), np.ones((3, 2, 0, 3)))


@pytest.mark.parametrize(
    "sa,sb,msg",
    [
        ((), (3,), "Input operand 0 does not have enough dimensions"),
        ((3,), (), "Input operand 1 does not have enough dimensions"),
        ((3, 4), (5, 2), "mismatch in its core dimension 0"),
        ((4,), (3,), "mismatch in its core dimension 0"),
        ((2, 3, 4), (3, 4, 5), "could not be broadcast"),
    ],
)
def test_matmul_errors_like_numpy(sa, sb, msg):
    with pytest.raises(ValueError, match=msg):
        fastane.matmul(np.ones(sa), np.ones(sb))
    with pytest.raises(ValueError):  # numpy agrees that these are errors
        np.matmul(np.ones(sa), np.ones(sb))


@pytest.mark.parametrize(
    "bad", [np.ones((2, 2), complex), np.array([["a", "b"]]), np.array([[None]], object)]
)
def test_matmul_rejects_non_real_dtypes(bad):
    with pytest.raises(TypeError):
        fastane.matmul(bad, np.ones((bad.shape[-1], 2)))


def test_inputs_of_any_real_dtype_round_to_fp16_first():
    # 1 + 2**-11 is a tie between fp16 1.0 and 1.0009765625: RNE gives 1.0 (even)
    a = np.array([[1 + 2.0**-11]], np.float64)
    b = np.array([[1.0]], np.float32)
    assert fastane.matmul(a, b)[0, 0] == np.float16(1.0)
    assert fastane.matmul(np.array([[3]], np.int8), np.array([[True]]))[0, 0] == 3
    # values above the fp16 range become inf before the product: an inf product saturates
    with fastane.errstate(saturation="ignore"):
        assert fastane.matmul(np.array([[1e6]]), np.array([[1.0]]))[0, 0] == np.inf


def test_matmul_out_argument():
    a, b = small_ints(3, 4), small_ints(4, 5)
    out = np.empty((3, 5), np.float16)
    assert fastane.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b).astype(np.float16))
    out32 = np.empty((3, 5), np.float32)
    fastane.matmul(a, b, out=out32)
    np.testing.assert_array_equal(out32, np.matmul(a, b))
    with pytest.raises(ValueError, match="shape"):
        fastane.matmul(a, b, out=np.empty((5, 3), np.float16))
    with pytest.raises(TypeError):
        fastane.matmul(a, b, out=np.empty((3, 5), np.int32))


def test_probe_through_the_api():
    """SPEC 2's accumulator probe: 256 equal products v summed against ones."""
    expected = {127.9375: 0x77FF, 128.0: 0x7C00, -128.0: 0xF800, -128.125: 0xFC00}
    with fastane.errstate(saturation="ignore"):
        for v, want in expected.items():
            got = fastane.matmul(np.full(256, v), np.ones(256))
            assert int(bits(got)) == want, v


def test_errstate_warn_raise_ignore_and_stats():
    a = np.full((2, 256), 128.0)
    b = np.ones((256, 3))
    with pytest.warns(fastane.SaturationWarning, match="6 of 6 outputs saturated"):
        fastane.matmul(a, b)  # warn is the default
    st = fastane.last_stats()
    assert (st.macs, st.saturated, st.nan_outputs) == (2 * 3 * 256, 6, 0)
    with fastane.errstate(saturation="raise"):
        with pytest.raises(fastane.SaturationError):
            fastane.matmul(a, b)
    with fastane.errstate(saturation="ignore"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fastane.matmul(a, b)
    assert fastane.geterr()["saturation"] == "warn"
    with pytest.raises(ValueError):
        fastane.errstate(saturation="explode")
    with pytest.raises(TypeError):
        fastane.errstate(overflow="raise")


def test_raise_leaves_out_untouched():
    out = np.full((1, 1), 7, np.float16)
    with fastane.errstate(saturation="raise"), pytest.raises(fastane.SaturationError):
        fastane.matmul(np.full((1, 256), 128.0), np.ones((256, 1)), out=out)
    assert out[0, 0] == 7


def test_nan_outputs_counted():
    a = np.array([[np.inf, 1.0]])
    b = np.array([[0.0], [1.0]])
    y = fastane.matmul(a, b)
    assert np.isnan(y[0, 0]) and fastane.last_stats().nan_outputs == 1


def test_linear_matches_matmul_plus_bias():
    x, w, bias = small_ints(2, 3, 4), small_ints(5, 4), small_ints(5)
    got = fastane.linear(x, w, bias)
    np.testing.assert_array_equal(got, (x @ w.T + bias).astype(np.float16))
    with pytest.raises(ValueError, match="weight"):
        fastane.linear(x, w[0])
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
        fastane.linear(small_ints(2, 3), w)
    with pytest.raises(ValueError, match="bias"):
        fastane.linear(x, w, small_ints(4))


def test_bias_is_added_in_fp16_after_readout():
    # fp16 values in [2048, 4096) are 2 apart: readout 2050 + bias 1 = 2051 is a tie
    # between 2050 (odd significand) and 2052 (even): RNE gives 2052
    x = np.array([[2050.0]])
    w = np.array([[1.0]])
    assert fastane.linear(x, w, np.array([1.0]))[0, 0] == 2052
    # a tiny bias is lost against a large readout, as in fp16
    assert fastane.linear(x, w, np.array([0.5]))[0, 0] == 2050


def _np_conv2d(x, w, stride, pad, dil, groups):
    """Direct float64 convolution (exact for small integers): an oracle for shapes."""
    N, C, H, W = x.shape
    CO, CG, KH, KW = w.shape
    (pt, pb), (pl, pr) = pad
    xp = np.zeros((N, C, H + pt + pb, W + pl + pr))
    xp[:, :, pt : pt + H, pl : pl + W] = x
    oh = (H + pt + pb - dil[0] * (KH - 1) - 1) // stride[0] + 1
    ow = (W + pl + pr - dil[1] * (KW - 1) - 1) // stride[1] + 1
    y = np.zeros((N, CO, oh, ow))
    cpg = CO // groups
    for co in range(CO):
        g = co // cpg
        for ky in range(KH):
            for kx in range(KW):
                patch = xp[
                    :,
                    g * CG : (g + 1) * CG,
                    ky * dil[0] : ky * dil[0] + stride[0] * oh : stride[0],
                    kx * dil[1] : kx * dil[1] + stride[1] * ow : stride[1],
                ]
                y[:, co] += np.einsum("nchw,c->nhw", patch, w[co, :, ky, kx])
    return y


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=2),
        dict(padding=1),
        dict(padding=(2, 0)),
        dict(dilation=2, padding=2),
        dict(groups=2),
        dict(groups=4),
        dict(stride=(1, 2), padding="valid"),
        dict(padding="same"),
        dict(padding="same", dilation=(2, 1)),
    ],
)
def test_conv2d_conventions(kw):
    groups = kw.get("groups", 1)
    x = small_ints(2, 4, 7, 6)
    w = small_ints(8, 4 // groups, 3, 2)
    got = fastane.conv2d(x, w, **kw)
    s = kw.get("stride", 1)
    s = (s, s) if np.ndim(s) == 0 else s
    d = kw.get("dilation", 1)
    d = (d, d) if np.ndim(d) == 0 else d
    p = kw.get("padding", 0)
    if p == "same":
        tot = (d[0] * 2, d[1] * 1)
        pad = ((tot[0] // 2, tot[0] - tot[0] // 2), (tot[1] // 2, tot[1] - tot[1] // 2))
    elif p == "valid":
        pad = ((0, 0), (0, 0))
    else:
        p = (p, p) if np.ndim(p) == 0 else p
        pad = ((p[0], p[0]), (p[1], p[1]))
    want = _np_conv2d(x, w, s, pad, d, groups).astype(np.float16)
    assert got.shape == want.shape and got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    if p == "same":
        assert got.shape[2:] == x.shape[2:]


def test_conv2d_unbatched_bias_relu_and_conv1d():
    x, w, bias = small_ints(3, 5, 5), small_ints(4, 3, 3, 3), small_ints(4)
    y = fastane.conv2d(x, w, bias, padding=1, activation="relu")
    want = np.maximum(
        _np_conv2d(x[None], w, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)[0] + bias[:, None, None], 0
    ).astype(np.float16)
    np.testing.assert_array_equal(y, want)
    x1, w1 = small_ints(2, 3, 9), small_ints(4, 3, 3)
    y1 = fastane.conv1d(x1, w1, stride=2, padding=1)
    want1 = _np_conv2d(x1[:, :, None], w1[:, :, None], (1, 2), ((0, 0), (1, 1)), (1, 1), 1)[:, :, 0]
    np.testing.assert_array_equal(y1, want1.astype(np.float16))
    assert fastane.conv1d(x1[0], w1, padding="same").shape == (4, 9)


@pytest.mark.parametrize(
    "args,exc,msg",
    [
        (((1, 4, 5, 5), (8, 3, 3, 3), {}), ValueError, "expected input\\[1, 4, 5, 5\\] to have 3 channels"),
        (((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 4}), ValueError, "divisible by groups"),
        (((1, 4, 2, 2), (8, 4, 3, 3), {}), ValueError, "smaller than the dilated kernel"),
        (((4, 5), (8, 4, 3, 3), {}), ValueError, "3-D \\(unbatched\\) or 4-D"),
        (((1, 4, 5, 5), (8, 4, 3), {}), ValueError, "4-D weight"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"stride": 0}), ValueError, "stride must be >= 1"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"padding": -1}), ValueError, "padding must be >= 0"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"padding": "full"}), ValueError, "invalid padding string"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"padding": "same", "stride": 2}), ValueError, "'same'"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"stride": 1.5}), TypeError, "stride"),
        (((1, 4, 5, 5), (8, 4, 3, 3), {"groups": 0}), ValueError, "groups"),
    ],
)
def test_conv2d_errors(args, exc, msg):
    xs, ws, kw = args
    with pytest.raises(exc, match=msg):
        fastane.conv2d(np.ones(xs), np.ones(ws), **kw)


def test_api_matches_reference_on_hard_inputs():
    """Through the public API (rounding, readout, batching): bit-identical to the reference."""
    r = np.random.default_rng(7)
    a = (r.standard_normal((2, 5, 300)) * r.choice([1e-4, 1, 30, 200], (2, 5, 300))).astype(np.float16)
    b = (r.standard_normal((300, 6)) * r.choice([1e-3, 1, 10], (300, 6))).astype(np.float16)
    a[0, 0, 0] = np.inf
    a[1, 1, 3] = np.nan
    with fastane.errstate(saturation="ignore"):
        got = fastane.matmul(a, b)
    want = np.stack([ref_matmul(a[i], b) for i in range(2)])
    np.testing.assert_array_equal(bits(got), bits(want))

    x = (r.standard_normal((1, 4, 6, 5)) * 50).astype(np.float16)
    w = (r.standard_normal((6, 2, 3, 3)) * 8).astype(np.float16)
    with fastane.errstate(saturation="ignore"):
        got = fastane.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    want = ref_conv2d(x, w, stride=(2, 1), padding=((1, 1), (1, 1)), dilation=(1, 2), groups=2)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_reduction_too_long_for_one_core_is_refused_with_the_function_name():
    with pytest.raises(NotImplementedError, match="^matmul: .*64 KiB"):
        fastane.matmul(np.ones((2, 40000)), np.ones((40000, 3)))


@pytest.mark.parametrize("kw", [dict(padding=10**6), dict(dilation=2**40, padding=2**40)])
def test_absurd_geometry_is_refused_before_any_allocation(kw):
    with pytest.raises(ValueError, match="GiB the ANE can address"):
        fastane.conv2d(np.ones((1, 2, 8, 8)), np.ones((3, 2, 3, 3)), **kw)


def test_import_makes_numba_threads_sleep_when_idle():
    """fastane asks the OpenMP layer for passive waiting unless the user chose (docs/architecture.md)."""
    import os
    import subprocess
    import sys

    code = "import fastane, os; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ACTIVE"
