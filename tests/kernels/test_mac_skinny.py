"""Products with very few rows computed from the fp16 weights in KMem
(fastane.kernels.mac_skinny, taken by fastane.device.mac.accumulate_fp16): bit-identical
to the slow reference on random and adversarial inputs -- subnormals, signed zeros,
products too large for the float32 rounding, sums that clamp, NaN and inf (the last three
must leave this kernel to the general ones) -- with rounded and truncated products."""

import math

import numpy as np
import pytest

import fastane
from fastane.device import kernel_dma
from fastane.device import mac as dmac
from fastane.kernels import bounds, mac, mac_skinny
from tests.helpers.reference import ref_matmul

F16 = np.float16


@pytest.fixture
def skinny_calls(monkeypatch):
    """A list of the tasks whose accumulators the skinny kernel gave (which path ran: the
    kernel may run and have its sums discarded when the weights' bound fails)."""
    calls = []
    real = dmac.skinny

    def spy(*x):
        sums = real(*x)
        if sums is not None:
            calls.append(1)
        return sums

    monkeypatch.setattr(dmac, "skinny", spy)
    return calls


@pytest.fixture
def preps(monkeypatch):
    """A list with one entry for each time the skinny kernel's rows were made (prepare, on
    one thread or on Numba's threads)."""
    made = []
    for name in ("prepare", "prepare_par"):
        real = getattr(mac_skinny, name)
        monkeypatch.setattr(mac_skinny, name, lambda *a, real=real: made.append(1) or real(*a))
    return made


def _operands(kind, m, k, n, rng):
    a = rng.standard_normal((m, k)).astype(F16)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(F16)
    if kind == "tiny":  # subnormal products, signed zeros, exact ties on the grid
        a = (rng.standard_normal((m, k)) * 2.0**-10).astype(F16)
        b = (rng.standard_normal((k, n)) * 2.0**-12).astype(F16)
        a[:, ::7] = -0.0
        b[::5] = F16(2.0**-24)
        a[0, :4] = [2.0**-8, -(2.0**-8), 2.0**-9, 3 * 2.0**-9]  # x * 2**-8 * 2**16: ties
    elif kind == "large":  # products above 2**22 grid units: not for float32
        a[0, 3] = F16(30000.0)
    elif kind == "saturating":  # the sum clamps: inf outputs
        a[:] = F16(200.0)
        b[:] = F16(100.0)
    elif kind == "nan_inf":
        a[-1, 2] = np.nan
        b[5, 1] = np.inf
    elif kind == "nan_weight":
        b[0, 0] = np.uint16(0x7E01).view(F16)  # a NaN with a payload
    return a, b


KINDS = ["random", "tiny", "large", "saturating", "nan_inf", "nan_weight"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "m,k,n",
    [
        (1, 200, 40),
        (3, 130, 33),
        (8, 64, 100),
        (5, 37, 48),
        (13, 40, 33),
        (64, 24, 97),
        (100, 30, 130),
        (49, 40, 32),
        (60, 24, 16),
    ],
)
def test_few_rows_are_the_reference(device, skinny_calls, kind, m, k, n):
    assert m * k * n > mac.SMALL_MACS  # not the serial definition of small work
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = _operands(kind, m, k, n, rng)
    calls = skinny_calls
    with fastane.errstate(saturation="ignore"):
        y = fastane.matmul(a, b)
    assert np.array_equal(y.view(np.uint16), ref_matmul(a, b).view(np.uint16))
    # the bounds decide: these take the skinny kernel, the others the general ones
    assert bool(calls) == (kind in ("random", "tiny")), calls


def _kmem_of(w):
    """A KMem holding ``w`` ([Cout, Cin] fp16) as KernelDMA would (pack_weights' layout)."""
    cout, cin = w.shape
    data, _ = kernel_dma.pack_weights(w.reshape(cout, cin, 1, 1))
    kmem = kernel_dma.KMem()
    stride = kernel_dma.lane_stride(cout, cin, 1, 1)
    raw = np.frombuffer(data, np.uint8)
    for lane in range(len(raw) // stride):
        kmem.data[lane, :stride] = raw[lane * stride : (lane + 1) * stride]
    return kmem


@pytest.mark.parametrize("trunc", [False, True])
@pytest.mark.parametrize("kind", ["random", "tiny"])
@pytest.mark.parametrize("m,k,n", [(4, 75, 37), (7, 50, 20), (1, 33, 9), (9, 8, 2), (23, 12, 37)])
@pytest.mark.parametrize("row_bytes", [mac_skinny.ROW_BLOCK_BYTES, 0])
def test_kernel_rounds_and_truncates_as_the_reference(trunc, kind, m, k, n, row_bytes):
    """Blocks of four rows by two channels, the rows and the odd channel left over; the
    rows all in one block, or (``row_bytes`` 0) in blocks of four, the last one longer,
    the threaded twin's tasks then blocks of CHANNEL_BLOCK channels."""
    rng = np.random.default_rng(7 + trunc + m)
    a, b = _operands(kind, m, k, n, rng)
    kmem = _kmem_of(np.ascontiguousarray(b.T))
    k16, base, per_lane, lanes, sizes = kernel_dma.fp16_channels(kmem, n, k, 1, 1)
    x = a.astype(np.float64)
    xs, rsum, rmax = np.empty((m, k), np.float32), np.empty(m), np.empty(m)
    mac_skinny.prepare(np.ascontiguousarray(a.T).astype(np.float32), xs, rsum, rmax)
    want_sum, want_max = np.empty((1, m)), np.empty((1, m))
    bounds._row_abs_stats(x[None], want_sum, want_max)  # the general kernels' row bound
    assert np.array_equal(rmax, want_max[0])  # sums of so few fp16 values are exact in any order
    assert np.array_equal(rsum, want_sum[0])
    assert np.array_equal(xs, (x * 2.0**16).astype(np.float32))
    acc = np.empty((n, m), np.int32)
    wmax = mac_skinny.skinny_q16(xs, k16, base, per_lane, k, n, trunc, acc, row_bytes)
    assert mac_skinny.pattern_abs(wmax) == np.abs(b.astype(np.float64)).max()
    assert mac_skinny.rows_ok(rsum, rmax, mac_skinny.pattern_abs(wmax), k)
    acc_par = np.full((n, m), -1, np.int32)
    wmax_par = mac_skinny.skinny_q16_par(
        xs, k16, base, per_lane, k, n, trunc, acc_par, row_bytes, 2
    )  # the threaded twin
    assert np.array_equal(acc_par, acc) and wmax_par == wmax
    y = np.empty((m, n))
    mac.readout(np.ascontiguousarray(acc.T).astype(np.float64), np.zeros(y.shape, np.int8), y)
    want = ref_matmul(a, b, trunc=trunc)
    assert np.array_equal(y.astype(F16).view(np.uint16), want.view(np.uint16))


def _rows_reference(x16):
    """The rows the skinny kernel reads, slowly: ``x^T * 2**16`` as float32, and per pixel
    the sum (math.fsum: exact) and max of ``|x|``, NaN when the pixel has one."""
    x = x16.astype(np.float64)
    rsum = np.array([math.fsum(np.abs(x[:, p])) for p in range(x.shape[1])])
    rmax = np.abs(x).max(axis=0)
    return (x.T * 2.0**16).astype(np.float32), rsum, rmax


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("k,p", [(2304, 196), (130, 49), (64, 2), (17, 3), (8192, 5), (9000, 4)])
@pytest.mark.parametrize("kind", ["random", "tiny", "extremes", "nan_inf"])
def test_rows_of_the_product_serial_and_threaded(dtype, k, p, kind):
    """prepare and prepare_par (blocks of PREPARE_ROWS rows of x on the threads, their
    partial sums added in block order) make the rows and row statistics of the slow
    reference; the sums of up to 2**13 fp16 magnitudes are exact in float64 in any order,
    above (9000) they are as good a bound (BOUND_MARGIN) and the same on any thread count."""
    rng = np.random.default_rng(k + p)
    x16 = rng.standard_normal((k, p)).astype(F16)
    if kind == "tiny":
        x16 = (rng.standard_normal((k, p)) * 2.0**-14).astype(F16)  # subnormals
        x16[::3] = -0.0
    elif kind == "extremes":  # 65504 next to 2**-24: the widest span the exact sum needs
        x16[::2, 0] = F16(65504.0)
        x16[1::2, 0] = F16(2.0**-24)
        x16[:, -1] = F16(-65504.0)
    elif kind == "nan_inf":
        x16[k // 2, 0] = np.inf
        x16[-1, p - 1] = np.nan
    x = x16.view(np.uint16) if dtype is np.uint16 else x16.astype(dtype)
    want_xs, want_sum, want_max = _rows_reference(x16)
    for workers in (None, 1, 2):
        xs, rsum, rmax = np.full((p, k), -1, np.float32), np.empty(p), np.empty(p)
        if workers is None:
            mac_skinny.prepare(x, xs, rsum, rmax)
        else:
            mac_skinny.prepare_par(x, xs, rsum, rmax, workers)
        assert np.array_equal(xs, want_xs, equal_nan=True)
        assert np.array_equal(rmax, want_max, equal_nan=True)
        if k <= 1 << 13:
            assert np.array_equal(rsum, want_sum, equal_nan=True)
        else:
            fin = np.isfinite(want_sum)
            assert np.array_equal(np.isnan(rsum), np.isnan(want_sum))
            np.testing.assert_allclose(rsum[fin], want_sum[fin], rtol=k * 2.0**-52)
            if workers == 2:
                one = np.empty(p)
                mac_skinny.prepare_par(x, np.empty((p, k), np.float32), one, np.empty(p), 1)
                assert np.array_equal(rsum, one, equal_nan=True)  # not on the thread count


# one row at a time; four rows together (their channels' largest pattern in a loop of its
# own), alone and followed by one row, and twice
@pytest.mark.parametrize("m", [1, 4, 5, 8])
def test_abs_max_sees_nan_and_inf(m):
    """The kernel's largest weight pattern covers every weight it read, the last channel
    of an odd count, the second channel of a pair and the last weight included; inf and
    NaN read as such."""
    kmem = _kmem_of(np.ones((21, 9), F16))
    k16, base, per_lane, lanes, sizes = kernel_dma.fp16_channels(kmem, 21, 9, 1, 1)
    k16 = k16.reshape(len(base), -1)  # the 16 KMems, a row each (base: the rows' starts)
    xs, acc = np.ones((m, 9), np.float32), np.empty((21, m), np.int32)

    def bmax():
        rb = mac_skinny.ROW_BLOCK_BYTES
        w = mac_skinny.skinny_q16(xs, k16.reshape(-1), base, per_lane, 9, 21, False, acc, rb)
        for r in (rb, 0):
            assert (
                mac_skinny.skinny_q16_par(xs, k16.reshape(-1), base, per_lane, 9, 21, False, acc, r, 2) == w
            )
        return mac_skinny.pattern_abs(w)

    assert bmax() == 1.0
    k16[lanes[-1], sizes[-1] - 1] = np.float16(-np.inf).view(np.uint16)
    assert bmax() == np.inf
    k16[lanes[0], 0] = 0xFC01  # a negative NaN
    assert np.isnan(bmax())
    k16[lanes[0], 0] = k16[lanes[-1], sizes[-1] - 1] = 0x3C00
    k16[lanes[-1], sizes[-1] - 9] = 0x4000  # the first weight of the last (odd) channel: 2.0
    assert bmax() == 2.0
    flat = k16.reshape(-1)

    def weight(n, j):  # where channel n's weight j is (fp16_channels' layout)
        return base[n // per_lane] + (n % per_lane) * 9 + j

    flat[weight(1, 8)] = 0x4400  # the last weight of the first pair's second channel: 4.0
    assert bmax() == 4.0
    flat[weight(3, 4)] = 0x7E00  # a NaN inside the second pair's second channel
    assert np.isnan(bmax())
    assert kernel_dma.fp16_channels(kmem, 20, 9, 1, 1, fmt=1) is None  # int8: not this kernel
    assert dmac.SKINNY_ROWS >= 8


@pytest.mark.parametrize("kind", ["random", "tiny", "nan_inf"])
def test_a_1x1_convolution_of_few_pixels_is_the_reference(device, skinny_calls, kind):
    """Pixels over two dimensions (rows of the input a TileDMA row stride apart)."""
    from tests.helpers.reference import ref_conv2d

    rng = np.random.default_rng(3)
    a, b = _operands(kind, 15, 70, 40, rng)  # 15 pixels (3 x 5), 70 -> 40 channels
    x = np.ascontiguousarray(a.T.reshape(1, 70, 3, 5))
    w = np.ascontiguousarray(b.T.reshape(40, 70, 1, 1))
    calls = skinny_calls
    with fastane.errstate(saturation="ignore"):
        y = fastane.conv2d(x, w)
    assert np.array_equal(y.view(np.uint16), ref_conv2d(x, w).view(np.uint16))
    assert bool(calls) == (kind != "nan_inf")


@pytest.mark.parametrize("kind", ["random", "tiny", "nan_inf", "large"])
@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, 1, 1), (1, 0, 2)])
def test_an_unfolded_convolution_of_few_pixels_is_the_reference(
    device, skinny_calls, kind, stride, padding, dilation
):
    """A 3x3 convolution with fewer pixels than channels (ResNet-50's 7 x 7 and 14 x 14
    layers) reads its im2col columns (fp16 patterns) and the KMem weights; the bounds
    leave NaN, inf and large products to the general kernels."""
    from tests.helpers.reference import ref_conv2d

    rng = np.random.default_rng(stride * 10 + padding + dilation)
    x = rng.standard_normal((1, 24, 9, 9))
    w = rng.standard_normal((96, 24, 3, 3)) / 15
    if kind == "tiny":
        x, w = x * 2.0**-10, w * 2.0**-12
    x, w = x.astype(F16), w.astype(F16)
    if kind == "nan_inf":
        x[0, 3, 4, 4], x[0, 5, 0, 1] = np.nan, np.inf
    elif kind == "large":
        x[0, 0, 4, 4] = F16(30000.0)
    calls = skinny_calls
    with fastane.errstate(saturation="ignore"):
        y = fastane.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    want = ref_conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
    assert bool(calls) == (kind in ("random", "tiny"))


def test_tasks_of_one_layer_share_the_rows_of_their_columns(device, skinny_calls, preps, monkeypatch):
    """A 3x3 convolution split by output channels into tasks (KMem holds at most 224 of
    its 512 channels) unfolds its input once and transposes the columns once for all its
    tasks; a new call (new input) prepares them again; the bits are those of the general kernels
    (the skinny kernel off), which the tests above hold to the reference."""
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((512, 256, 3, 3)) / 48).astype(F16)
    xs = [rng.standard_normal((1, 256, 10, 10)).astype(F16) for _ in range(2)]
    got = []
    for x in xs:
        preps.clear()
        skinny_calls.clear()
        got.append(fastane.conv2d(x, w, padding=1))
        assert len(skinny_calls) >= 2 and len(preps) == 1, (len(skinny_calls), len(preps))
    monkeypatch.setattr(dmac, "SKINNY_ROWS", 0)
    for x, y in zip(xs, got):
        skinny_calls.clear()
        assert np.array_equal(y.view(np.uint16), fastane.conv2d(x, w, padding=1).view(np.uint16))
        assert not skinny_calls


def test_a_narrow_tail_task_reads_the_rows_its_layer_made(device, skinny_calls, preps, monkeypatch):
    """The last task of a split layer (16 of 240 channels, 196 pixels: more pixels than
    channels) takes the skinny kernel too, on the rows of the columns the first task
    made; the bits are those of the general kernels."""
    rng = np.random.default_rng(10)
    w = (rng.standard_normal((240, 256, 3, 3)) / 48).astype(F16)
    x = rng.standard_normal((1, 256, 14, 14)).astype(F16)
    y = fastane.conv2d(x, w, padding=1)
    assert len(skinny_calls) == 2 and len(preps) == 1, (len(skinny_calls), len(preps))
    monkeypatch.setattr(dmac, "SKINNY_ROWS", 0)
    skinny_calls.clear()
    assert np.array_equal(y.view(np.uint16), fastane.conv2d(x, w, padding=1).view(np.uint16))
    assert not skinny_calls


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "tanh"])
@pytest.mark.parametrize("m", [1, 6])
def test_fused_bias_and_activation_after_the_kernel(device, skinny_calls, activation, m):
    """The skinny kernel's int32 sums through the NE stage (bias, the activation; a LUT
    reads them as unflagged accumulators): each output the slow reference's readout, then
    its bias and activation element by element (tests/helpers/lut_reference.ref_ne)."""
    from fastane.lower.problems import ne_stage
    from tests.helpers.lut_reference import ref_ne

    rng = np.random.default_rng(m + len(activation or ""))
    k, n = 300, 40
    a, b = _operands("random", m, k, n, rng)
    a[0, :3] = [2.0**-8, -(2.0**-8), 3 * 2.0**-9]  # ties on the grid
    bias = (rng.standard_normal(n) * 2).astype(F16)
    bias[:2] = [0.0, -0.0]
    y = fastane.linear(a, np.ascontiguousarray(b.T), bias, activation)
    assert skinny_calls  # the int32 sums were read out
    stage = ne_stage(activation)
    nonlinear = {"identity": 0, "relu": 1, "lut": 2}[stage.nonlinear]
    words = stage.block.to_words() if stage.block is not None else None
    readout = ref_matmul(a, b)
    for i in range(m):
        for j in range(n):
            want = ref_ne(float(readout[i, j]), float(bias[j]), stage.post_scale, nonlinear, words)
            assert int(y[i, j].view(np.uint16)) == want, (i, j, activation)


@pytest.mark.parametrize("activation", [None, "relu", "tanh"])
def test_general_kernels_int32_sums_through_the_ne(device, skinny_calls, monkeypatch, activation):
    """A convolution with more pixels than the skinny kernel takes, every product small:
    the general kernels leave int32 sums (``matmul_q16_sums``), which the NE reads out
    with the bias and the activation; with one weight too large for the float32 path
    they leave float64 accumulators instead.  Both the bits of the slow reference
    (its readout, bias and activation) and of each other where nothing differs."""
    from tests.helpers.reference import ref_conv2d

    took = []
    real = mac.matmul_q16_sums
    monkeypatch.setattr(mac, "matmul_q16_sums", lambda *a: took.append(real(*a)) or took[-1])
    rng = np.random.default_rng(len(activation or ""))
    x = rng.standard_normal((1, 8, 12, 12)).astype(F16)
    w = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(F16)
    y = fastane.conv2d(x, w, padding=1)
    assert took == [True] and not skinny_calls
    assert np.array_equal(y.view(np.uint16), ref_conv2d(x, w, padding=1).view(np.uint16))
    w[3, 2, 1, 1] = F16(100.0)  # 100 * max|x| > 64: that row leaves the float32 path
    y = fastane.conv2d(x, w, padding=1)
    assert took[-1] is False
    assert np.array_equal(y.view(np.uint16), ref_conv2d(x, w, padding=1).view(np.uint16))
    w[3, 2, 1, 1] = F16(0.5)
    bias = rng.standard_normal(16).astype(F16)
    took.clear()
    fused = fastane.conv2d(x, w, bias, padding=1, activation=activation)
    into = mac.matmul_q16_into

    def float64_acc(a, b, ia, ib, trunc, sums, acc, flag, bmax):  # matmul_q16_into's bits
        into(a, b, ia, ib, trunc, acc, flag, bmax)
        return False

    monkeypatch.setattr(mac, "matmul_q16_sums", float64_acc)
    plain = fastane.conv2d(x, w, bias, padding=1, activation=activation)
    assert took == [True]
    assert np.array_equal(fused.view(np.uint16), plain.view(np.uint16))
    # and the slow reference: its readout, then the bias and the activation element by element
    from fastane.lower.problems import ne_stage
    from tests.helpers.lut_reference import ref_ne

    stage = ne_stage(activation)
    nonlinear = {"identity": 0, "relu": 1, "lut": 2}[stage.nonlinear]
    words = stage.block.to_words() if stage.block is not None else None
    readout = ref_conv2d(x, w, padding=1)[0]
    for c in range(16):
        for i, v in enumerate(readout[c].reshape(-1)):
            want = ref_ne(float(v), float(bias[c]), stage.post_scale, nonlinear, words)
            assert int(fused[0, c].reshape(-1)[i].view(np.uint16)) == want, (c, i, activation)
