"""The conv kernel (fastane.kernels.conv) bit for bit against tests/helpers/reference.py."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastane.kernels import conv, mac
from tests.helpers.device import assert_same_f16
from tests.helpers.reference import pad_pairs, ref_conv2d

F16 = np.float16


def f16(x):
    return np.asarray(x, np.float64).astype(F16)


def kernel_conv(x16, w16, stride=1, padding=0, dilation=1, groups=1, trunc=False, with_acc=False):
    sy, sx = (stride, stride) if isinstance(stride, int) else stride
    dy, dx = (dilation, dilation) if isinstance(dilation, int) else dilation
    (pt, pb), (pl, pr) = pad_pairs(padding)
    _, _, H, W = x16.shape
    _, _, KH, KW = w16.shape
    oh = (H + pt + pb - dy * (KH - 1) - 1) // sy + 1
    ow = (W + pl + pr - dx * (KW - 1) - 1) // sx + 1
    acc, flag = conv.conv2d_q16(
        np.ascontiguousarray(x16, np.float64),
        np.ascontiguousarray(w16, np.float64),
        sy,
        sx,
        dy,
        dx,
        pt,
        pl,
        oh,
        ow,
        groups,
        trunc,
    )
    assert acc.shape == flag.shape == (x16.shape[0], w16.shape[0], oh, ow)
    assert acc.dtype == np.float64 and flag.dtype == np.int8
    out = np.empty(acc.shape)
    mac.readout(acc, flag, out)
    return (out.astype(F16), acc, flag) if with_acc else out.astype(F16)


def check(x16, w16, trunc=False, **kw):
    want = ref_conv2d(x16, w16, trunc=trunc, **kw)
    got = kernel_conv(x16, w16, trunc=trunc, **kw)
    assert_same_f16(got, want)
    return want


@pytest.mark.parametrize(
    "v, bits", [(127.9375, 0x77FF), (128.0, 0x7C00), (-128.0, 0xF800), (-128.125, 0xFC00)]
)
def test_golden_probe_as_a_1x1_conv(v, bits):
    x = np.full((1, 256, 1, 1), v, F16)  # 256 channels of v, weights of one
    w = np.ones((1, 256, 1, 1), F16)
    assert int(kernel_conv(x, w).view(np.uint16).ravel()[0]) == bits
    x3 = np.full((1, 256, 3, 3), v, F16)  # the same through im2col (3x3 kernel: only the centre is 1)
    w3 = np.zeros((1, 256, 3, 3), F16)
    w3[:, :, 1, 1] = 1
    assert int(kernel_conv(x3, w3, padding=1).view(np.uint16)[0, 0, 1, 1]) == bits


CASES = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 1), padding=1),
    dict(padding=1),
    dict(padding=(2, 0)),
    dict(padding=((0, 2), (1, 0))),  # asymmetric
    dict(padding=((2, 1), (0, 3)), stride=(1, 2)),
    dict(dilation=2, padding=2),
    dict(dilation=(1, 2), padding=(0, 1), stride=2),
    dict(groups=2, padding=1),
]


@pytest.mark.parametrize("kw", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("trunc", [False, True])
def test_random_conv(kw, trunc):
    rng = np.random.default_rng(len(str(kw)) + 100 * trunc)
    x = f16(rng.standard_normal((2, 4, 7, 6)) * 2.0 ** rng.integers(-8, 3, (2, 4, 7, 6)))
    w = f16(
        rng.standard_normal((6, 4 // kw.get("groups", 1), 3, 3))
        * 2.0 ** rng.integers(-8, 3, (6, 4 // kw.get("groups", 1), 3, 3))
    )
    check(x, w, trunc, **kw)


@pytest.mark.parametrize(
    "shape_w, kw",
    [
        ((3, 3, 1, 1), dict()),  # 1x1, stride 1, no padding: no unfolding
        ((3, 3, 1, 1), dict(stride=2)),
        ((3, 3, 1, 1), dict(padding=1)),
        ((2, 3, 1, 3), dict(padding=(0, 1))),
        ((2, 3, 3, 1), dict(stride=(2, 1))),
        ((2, 3, 5, 4), dict(padding=((3, 1), (0, 2)))),  # kernel larger than the input in one dim
        ((2, 3, 6, 5), dict()),  # kernel as large as the input: one output pixel
    ],
)
@pytest.mark.parametrize("trunc", [False, True])
def test_kernel_shapes(shape_w, kw, trunc):
    rng = np.random.default_rng(sum(shape_w) + trunc)
    x = f16(rng.uniform(-3, 3, (2, 3, 6, 5)))
    w = f16(rng.uniform(-3, 3, shape_w))
    check(x, w, trunc, **kw)


@pytest.mark.parametrize("C, CO, groups", [(4, 4, 4), (3, 6, 3), (6, 4, 2), (6, 6, 3)])
@pytest.mark.parametrize("trunc", [False, True])
def test_groups_and_depthwise(C, CO, groups, trunc):
    rng = np.random.default_rng(C * CO + groups + trunc)
    x = f16(rng.uniform(-20, 20, (2, C, 6, 7)))
    w = f16(rng.uniform(-20, 20, (CO, C // groups, 3, 3)))
    check(x, w, trunc, padding=1, groups=groups)
    check(x, w, trunc, stride=2, dilation=(2, 1), padding=((1, 0), (2, 1)), groups=groups)


@pytest.mark.parametrize("trunc", [False, True])
def test_saturating_conv(trunc):
    rng = np.random.default_rng(31 + trunc)
    x = f16(rng.uniform(-300, 300, (2, 5, 6, 6)))
    w = f16(rng.uniform(-30, 30, (4, 5, 3, 3)) * np.array([1, 0.5, 0.05, 0.01])[:, None, None, None])
    want = check(x, w, trunc, padding=1)
    assert np.isposinf(want).any() and np.isneginf(want).any() and np.isfinite(want).any()


def test_nan_and_inf_in_conv():
    rng = np.random.default_rng(41)
    x = f16(rng.uniform(-2, 2, (1, 2, 5, 5)))
    w = f16(rng.uniform(-2, 2, (3, 2, 3, 3)))
    x[0, 0, 2, 2] = np.inf
    x[0, 1, 0, 4] = np.nan
    w[1, 0, 0, 0] = -np.inf  # over padding (zero operands) this gives inf * 0 = NaN
    w[2, 1, 1, 1] = 0.0  # zero weight at the centre: inf pixel * 0 -> NaN where it lands
    for trunc in (False, True):
        want = check(x, w, trunc, padding=1)
        assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    # an infinite weight over padding is a NaN product: padded pixels are zero operands
    assert np.isnan(ref_conv2d(x, w, padding=1)[0, 1, 0, 0])


def test_unread_pixels_do_not_matter():
    """Stride 2 with a 1x1 kernel skips odd pixels: a NaN or huge value there never meets a
    weight, so it must not change the result (nor push the bound to the exact path)."""
    rng = np.random.default_rng(43)
    x = f16(rng.uniform(-2, 2, (1, 2, 5, 5)))
    w = f16(rng.uniform(-2, 2, (3, 2, 1, 1)))
    clean = kernel_conv(x, w, stride=2)
    x[0, 0, 1, 1], x[0, 1, 3, 2] = np.nan, 65504.0
    assert_same_f16(kernel_conv(x, w, stride=2), clean)
    assert_same_f16(ref_conv2d(x, w, stride=2), clean)
    assert np.isfinite(clean).all()


def test_chunked_unfolding_matches_one_chunk(monkeypatch):
    rng = np.random.default_rng(51)
    x = f16(rng.uniform(-200, 200, (5, 4, 8, 7)))
    w = f16(rng.uniform(-20, 20, (6, 2, 3, 2)))
    whole, acc1, flag1 = kernel_conv(x, w, padding=1, stride=(1, 2), groups=2, with_acc=True)
    monkeypatch.setattr(conv, "CHUNK_ELEMENTS", 1)  # one image per chunk
    parts, acc2, flag2 = kernel_conv(x, w, padding=1, stride=(1, 2), groups=2, with_acc=True)
    assert np.array_equal(acc1, acc2, equal_nan=True) and np.array_equal(flag1, flag2)
    assert_same_f16(parts, whole)
    assert_same_f16(whole[:2], ref_conv2d(x[:2], w, padding=1, stride=(1, 2), groups=2))


def test_conv_near_the_bound_uses_fast_and_exact_paths(monkeypatch):
    """A conv whose cheap bound fails for some filters: both paths, still bit-exact."""
    calls = []
    real = mac.matmul_q16_into

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(conv, "matmul_q16_into", spy)
    rng = np.random.default_rng(61)
    x = f16(rng.uniform(-1, 1, (1, 3, 6, 6)) * 30)
    x[0, 1, 3, 3] = 2000.0  # one big pixel
    w = f16(rng.uniform(-1, 1, (4, 3, 3, 3)))
    w[0] *= 20  # filter 0 saturates where it meets the big pixel; others stay safe
    check(x, w, padding=1)
    n_fast, n_exact, n_elements = calls[0]
    assert n_fast > 0 and n_exact + n_elements > 0, calls


@pytest.mark.parametrize("threshold", [0, 1 << 62])  # always threads / never threads
def test_threaded_and_single_thread_conv_agree(monkeypatch, threshold):
    monkeypatch.setattr(mac, "SERIAL_MACS", threshold)
    rng = np.random.default_rng(71)
    x = f16(rng.uniform(-1, 1, (2, 6, 9, 8)) * 2.0 ** rng.integers(-6, 11, (2, 6, 9, 8)))
    w = f16(rng.uniform(-1, 1, (4, 3, 3, 3)) * 2.0 ** rng.integers(-6, 9, (4, 3, 3, 3)))
    want = check(x, w, padding=((1, 0), (2, 1)), stride=(2, 1), groups=2)
    assert np.isinf(want).any() and np.isfinite(want).any()


@st.composite
def conv_problem(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 3))
    cog = draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sy, sx = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dy, dx = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = (
        (draw(st.integers(0, 2)), draw(st.integers(0, 2))),
        (draw(st.integers(0, 2)), draw(st.integers(0, 2))),
    )
    h = draw(st.integers(max(1, dy * (kh - 1) + 1 - sum(pad[0])), 7))
    w = draw(st.integers(max(1, dx * (kw - 1) + 1 - sum(pad[1])), 7))
    n = draw(st.integers(1, 2))
    scale = draw(st.integers(-10, 9))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = f16(rng.standard_normal((n, cg * groups, h, w)) * 2.0**scale)
    wt = f16(rng.standard_normal((cog * groups, cg, kh, kw)) * 2.0**scale)
    if draw(st.booleans()):  # sprinkle specials
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size)] = draw(st.sampled_from([np.inf, -np.inf, np.nan, 0.0]))
    return x, wt, dict(stride=(sy, sx), dilation=(dy, dx), padding=pad, groups=groups)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problem(), trunc=st.booleans())
def test_hypothesis_conv(problem, trunc):
    x, w, kw = problem
    check(x, w, trunc, **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 9),
    st.integers(1, 9),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 2),
    st.integers(0, 2**32 - 1),
)
def test_unfold_columns_and_their_max(H, W, KH, KW, s, d, pad, seed):
    """_im2col (fp16 patterns) against numpy's unfolding of the same patterns, and its
    per-channel max |value| (taken on the source over the pixels read: read_masks)
    against the max over the columns it wrote, with NaNs and huge values both on read and
    on skipped pixels."""
    span_y, span_x = (KH - 1) * d + 1, (KW - 1) * d + 1
    if H + 2 * pad < span_y or W + 2 * pad < span_x:
        return
    oh, ow = (H + 2 * pad - span_y) // s + 1, (W + 2 * pad - span_x) // s + 1
    rng = np.random.default_rng(seed)
    C = 3
    x = f16(rng.uniform(-4, 4, (1, C, H, W)))
    x.reshape(-1)[rng.integers(0, x.size, 2)] = [np.nan, 60000.0]
    bits = x.view(np.uint16)
    padded = np.zeros((C, H + 2 * pad, W + 2 * pad), np.uint16)
    padded[:, pad : pad + H, pad : pad + W] = bits[0]
    want = np.empty((C * KH * KW, oh * ow), np.uint16)
    for c in range(C):
        for ky in range(KH):
            for kx in range(KW):
                win = padded[
                    c, ky * d : ky * d + (oh - 1) * s + 1 : s, kx * d : kx * d + (ow - 1) * s + 1 : s
                ]
                want[(c * KH + ky) * KW + kx] = win.reshape(-1)
    cols = np.empty((1, 1, C * KH * KW, oh * ow), np.uint16)
    tmax = np.empty(C)
    win = conv.window(KH, KW, s, s, d, d, pad, pad, oh, ow)
    conv._im2col(bits, 0, 1, 1, win, *conv.read_masks(H, W, win), cols, tmax, 2)
    assert np.array_equal(cols[0, 0], want)
    vals = np.abs(want.view(F16).astype(np.float64)).reshape(C, -1)
    nan = np.isnan(vals).any(axis=1)
    assert np.array_equal(np.isnan(tmax), nan)
    assert np.array_equal(tmax[~nan], vals[~nan].max(axis=1))
