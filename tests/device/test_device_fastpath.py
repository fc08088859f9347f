"""The device's fused fast paths are bit-identical to the unfused kernels they replace:
the readout + NE stage writing fp16 patterns straight into the destination layout, the
fp16 gather of TileDMASrc, the blocked layout transposes, the KMem weight cache, and the
plain 1x1 accumulation with the bound taken from the gather.  (The branch-free fp16
codec they use is checked on every pattern in tests/kernels/test_fp16.py.)"""

import numpy as np
import pytest

import fastane
from fastane import lut
from fastane.device import mac as dmac
from fastane.kernels import dma, fp16, layout, mac
from fastane.kernels import ne as kne

F16 = np.float16


def _acc(rng, shape):
    """Accumulators as the MAC kernels return them: grid units, NaN, clamps; flags."""
    acc = np.round(rng.standard_normal(shape) * np.exp2(rng.integers(0, 31, shape)))
    acc = np.clip(acc, -(2.0**31), 2.0**31 - 1)
    flat = acc.reshape(-1)
    flat[:8] = [np.nan, 0.0, -0.0, 2.0**31 - 1, -(2.0**31), 1.0, -1.0, 65520.0 * 65536]
    flag = np.where(rng.random(shape) < 0.05, rng.choice([-1, 1], shape), 0).astype(np.int8)
    flag.reshape(-1)[:4] = [1, -1, 1, -1]  # a flagged NaN is not a saturation
    return acc, flag


CASES = [
    (0, None, 1.0, False),
    (0, None, 1.0, True),
    (1, None, 1.0, False),
    (1, None, 1.0, True),
    (0, None, 0.5, True),
    (1, None, -3.0, True),
    (0, None, 0.0, False),
    (1, None, np.inf, True),
    (2, "gelu", 1.0, True),
    (2, "exp2", 1.4423828125, False),
    (2, "reciprocal", 0.25, True),
]


@pytest.mark.parametrize("nonlinear,name,scale,with_bias", CASES)
@pytest.mark.parametrize("zero_tail", [True, False])
def test_fused_readout_ne_is_readout_then_ne(nonlinear, name, scale, with_bias, zero_tail):
    rng = np.random.default_rng(nonlinear * 10 + with_bias)
    C, H, W = 5, 3, 37
    acc, flag = _acc(rng, (C, H, W))
    bias = np.zeros(0)
    if with_bias:
        bias = rng.integers(0, 1 << 16, C).astype(np.uint16).view(F16).astype(np.float64)
        bias[:2] = [np.inf, 0.5]
    lutf, luti = lut.get_block(name).kernel_args() if name else (np.zeros(41), np.zeros(3, np.int64))
    # the unfused pipeline
    vals = np.empty(acc.shape)
    mac.readout(acc, flag, vals)
    want = np.empty((C, H, W), np.uint16)
    c2 = np.zeros(2, np.int64)
    kne.ne_post(vals.reshape(1, C, H * W), bias, scale, nonlinear, lutf, luti, want.reshape(1, C, H * W), c2)
    nans = int(np.isnan(vals).sum())
    sat = int(((flag != 0) & ~np.isnan(vals)).sum())
    # the fused kernels, into a strided destination (rows of 64 bytes, planes of 4 rows)
    plane, row = 4 * 64 // 2 * 2, 64 // 2 * 2
    wpad = 64 if zero_tail else W
    out = np.full(C * plane, 0xABCD, np.uint16)
    counts = np.zeros(4, np.int64)
    if nonlinear == 2:
        kne.readout_post(acc, flag, bias, scale, nonlinear, lutf, luti, out, plane, row, wpad, counts)
    else:
        kne.readout_fast(acc, flag, bias, scale, nonlinear == 1, out, plane, row, wpad, counts)
        p = np.full(C * plane, 0xABCD, np.uint16)
        c3 = np.zeros(4, np.int64)
        kne.readout_post(acc, flag, bias, scale, nonlinear, lutf, luti, p, plane, row, wpad, c3)
        assert np.array_equal(p, out) and np.array_equal(c3, counts)
        s = np.full(C * plane, 0xABCD, np.uint16)  # the small outputs' kernel (no threads)
        c4 = np.zeros(4, np.int64)
        kne.readout_serial(acc, flag, bias, scale, nonlinear == 1, s, plane, row, wpad, c4)
        assert np.array_equal(s, out) and np.array_equal(c4, counts)
    grid = out.reshape(C, plane // row, row)
    assert np.array_equal(grid[:, :H, :W], want)
    assert np.all(grid[:, :H, W:wpad] == 0) and np.all(grid[:, :H, wpad:] == 0xABCD)
    assert np.all(grid[:, H:] == 0xABCD)
    assert list(counts) == [nans, sat, int(c2[0]), int(c2[1])]


def test_gather_decodes_and_bounds():
    rng = np.random.default_rng(3)
    mem = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    mem[1000:1002] = [0x00, 0x7E]  # a NaN in channel 0
    shape, strides = (3, 4, 20), (512, 128, 2)
    x, cmax = dma.gather_fp16(mem, 128, shape, strides)
    view = np.ndarray(shape, np.uint16, buffer=mem[128:], strides=strides)
    want = np.empty(view.size)
    fp16.f16_bits_to_f64_array(np.ascontiguousarray(view).reshape(-1), want)
    assert np.array_equal(x.reshape(-1).view(np.int64), want.view(np.int64))
    assert np.array_equal(cmax, (view & 0x7FFF).reshape(3, -1).max(axis=1))
    assert dma.gather_fp16(mem, 127, shape, strides) is None  # odd: the numpy path
    # the same window as patterns (the float32 fast path's operand), with the same bound
    bits, cmax16 = np.empty(shape, np.uint16), np.empty(3, np.int64)
    dma.gather_bits(mem[128:].view(np.uint16), 256, 64, bits, cmax16)
    assert np.array_equal(bits, view) and np.array_equal(cmax16, cmax)


@pytest.mark.parametrize("shape", [(4, 8), (3, 5), (64, 36), (2, 12, 20), (40, 1030)])
def test_transpose_all_paths(shape, monkeypatch):
    rng = np.random.default_rng(4)
    src = rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(F16)
    want = np.swapaxes(src, -1, -2).view(np.uint16)
    for parallel_min in (1 << 30, 1):
        monkeypatch.setattr(layout, "PARALLEL_MIN", parallel_min)
        monkeypatch.setattr(layout, "KERNEL_MIN", 1)
        dst = np.empty(want.shape, F16)
        layout.transpose(src, dst)
        assert np.array_equal(dst.view(np.uint16), want)
        # into 64-byte rows (the slot layout), from a transposed view
        buf = np.zeros(want.shape[:-1] + (want.shape[-1] + 32,), F16)
        layout.transpose(
            np.swapaxes(np.ascontiguousarray(np.swapaxes(src, -1, -2)), -1, -2), buf[..., : want.shape[-1]]
        )
        assert np.array_equal(buf[..., : want.shape[-1]].view(np.uint16), want)
        assert not buf[..., want.shape[-1] :].view(np.uint16).any()


def test_weight_cache_sees_new_weights(device, monkeypatch):
    monkeypatch.setattr(dmac, "SKINNY_ROWS", 0)  # the kept w^T, not the KMem kernel
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 40)).astype(F16)
    b = rng.standard_normal((40, 24)).astype(F16)
    y1 = fastane.matmul(a, b)
    assert device.engine._wcache  # decoded once, kept
    b2 = b.copy()
    b2[39, 23] = -b2[39, 23] if b2[39, 23] else F16(1)  # one weight, last lane's last byte
    y2 = fastane.matmul(a, b2)
    y3 = fastane.matmul(a, b)
    ref = lambda u, v: (u.astype(np.float64) @ v.astype(np.float64)).astype(F16)  # noqa: E731
    assert np.array_equal(y1, y3) and not np.array_equal(y1, y2)
    assert np.array_equal(y2[:, :23], y1[:, :23])
    assert np.allclose(y2.astype(float), ref(a, b2).astype(float), rtol=1e-2, atol=1e-2)


def test_plain_accumulation_with_nan_and_saturation(device):
    a = np.ones((3, 300), F16)
    b = np.full((300, 5), 128.0, F16)
    a[1, 7] = np.nan
    b[3, 4] = np.inf
    with fastane.errstate(saturation="ignore"):
        y = fastane.matmul(a, b)
    st = fastane.last_stats()
    assert np.isnan(y[1]).all() and np.isinf(y[0]).all()
    assert st.nan_outputs == 5 and st.saturated == 10


CONVS = [  # (N, C, H, W), (CO, C/groups, KH, KW), stride, padding, dilation, groups
    ((1, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 8, 7), (6, 2, 3, 2), (2, 1), (1, 0), 1, 2),
    ((1, 6, 10, 10), (6, 1, 3, 3), 1, 2, 2, 6),  # depthwise, dilated
    ((1, 5, 12, 9), (3, 5, 5, 1), (3, 2), (2, 0), (1, 1), 1),
    ((1, 8, 4, 4), (5, 8, 1, 1), 2, 0, 1, 1),  # 1x1 with a stride: unfolded
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONVS)
def test_unfolded_conv_from_fp16_is_the_reference(device, xs, ws, stride, padding, dilation, groups):
    from tests.helpers.reference import ref_conv2d

    rng = np.random.default_rng(sum(xs) + sum(ws))
    x = (rng.standard_normal(xs) * 30).astype(F16)
    w = (rng.standard_normal(ws) * 30).astype(F16)
    x.reshape(-1)[[3, 17]] = [np.inf, np.nan]
    with fastane.errstate(saturation="ignore"):
        got = fastane.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    pad = (padding, padding) if isinstance(padding, int) else padding
    want = ref_conv2d(
        x, w, stride=stride, padding=tuple((p, p) for p in pad), dilation=dilation, groups=groups
    )
    assert np.array_equal(got.view(np.uint16), np.asarray(want, F16).view(np.uint16))


@pytest.mark.parametrize("shape", [(4, 4, 4), (3, 250, 5), (1, 64, 64), (7, 9, 3)])
def test_small_tasks_take_the_serial_definition_with_the_same_bits(device, monkeypatch, shape):
    """A task of at most SMALL_MACS multiply-adds runs the serial definition (no bounds);
    with the threshold at 0 the same call takes the planned path: same bits, same Stats."""
    M, K, N = shape
    rng = np.random.default_rng(M * K * N)
    a = (rng.standard_normal((M, K)) * 60).astype(F16)
    b = (rng.standard_normal((K, N)) * 60).astype(F16)
    a[0, 0], b[-1, -1] = np.nan, np.inf
    runs = []
    for small in (1 << 12, 0):
        monkeypatch.setattr(mac, "SMALL_MACS", small)
        with fastane.errstate(saturation="ignore"):
            y = fastane.matmul(a, b)
        runs.append((y.view(np.uint16).copy(), fastane.last_stats()))
    assert M * K * N <= 1 << 12
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


@pytest.mark.parametrize("cout,cin", [(24, 40), (40, 7), (256, 2048), (3, 1)])
def test_kmem_holds_compares_every_used_byte_in_place(cout, cin):
    """The engine's transposed-weight cache reuses an entry only when KMem holds exactly
    its bytes: every byte the MAC reads is compared (one flipped bit anywhere, a sign bit
    -- a signed zero -- or a NaN payload's low bit), and bytes it does not read are not."""
    from fastane.device import kernel_dma

    rng = np.random.default_rng(cout + cin)
    kmem = kernel_dma.KMem()
    kmem.data[...] = rng.integers(0, 256, kmem.data.shape, dtype=np.uint8)
    used = kernel_dma.used_bytes(kmem, cout, cin, 1, 1)
    assert used.size == cout * cin * 2
    assert kernel_dma.holds(kmem, cout, cin, 1, 1, 2, used)
    assert not kernel_dma.holds(kmem, cout, cin, 1, 1, 2, used[:-2])
    lanes = kernel_dma._used_lanes(cout, cin, 1, 1)
    for lane, n in lanes:
        for pos in {0, n // 2, n - 1, n - 2}:
            for bit in (0x01, 0x80):  # a payload's low bit; the sign of a zero (high byte)
                kmem.data[lane, pos] ^= bit
                assert not kernel_dma.holds(kmem, cout, cin, 1, 1, 2, used)
                kmem.data[lane, pos] ^= bit
        if n < kmem.data.shape[1]:  # past what the MAC reads: not compared
            kmem.data[lane, n] ^= 0xFF
    unused = [lane for lane in range(kmem.data.shape[0]) if lane not in {ln for ln, _ in lanes}]
    for lane in unused:
        kmem.data[lane] ^= 0xFF
    assert kernel_dma.holds(kmem, cout, cin, 1, 1, 2, used)


def test_resident_narrow_product_does_not_decode_its_weights_again(device, monkeypatch):
    """A narrow product (few rows) whose transposed fp16 weights the engine keeps reads
    those: the float64 decode of KMem runs on the first call only (also when its tasks
    load KMem in turn), and the bits match."""
    from fastane.device import kernel_dma

    rng = np.random.default_rng(11)
    monkeypatch.setattr(dmac, "SKINNY_ROWS", 0)  # the kept w^T, not the KMem kernel
    a = rng.standard_normal((3, 2048)).astype(F16)
    b = rng.standard_normal((2048, 512)).astype(F16)  # two tasks of 256 channels: KMem alternates
    y1 = fastane.matmul(a, b)
    calls = []
    real = kernel_dma.unpack_weights
    monkeypatch.setattr(kernel_dma, "unpack_weights", lambda *a, **k: calls.append(1) or real(*a, **k))
    y2 = fastane.matmul(a, b)
    assert not calls
    assert np.array_equal(y1.view(np.uint16), y2.view(np.uint16))
    b[5, 7] = -b[5, 7] if b[5, 7] else F16(2)
    y3 = fastane.matmul(a, b)
    assert calls  # new weights: decoded again
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(F16)
    assert np.allclose(y3.astype(float), want.astype(float), rtol=1e-2, atol=1e-2)
    assert not np.array_equal(y3[:, 7].view(np.uint16), y1[:, 7].view(np.uint16))


@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("dtype", [np.int64, np.uint16, np.uint8])
def test_equal_words_sees_any_difference(n, dtype):
    """The block compare behind the resident checks: any one differing bit, in the first,
    a boundary or the last (partial) block, and an empty array."""
    rng = np.random.default_rng(n)
    a = rng.integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    b = a.copy()
    assert dma.equal_words(a, b) and dma.equal_words(a[:0], b[:0])
    top = np.dtype(dtype).itemsize * 8 - 1
    for pos in sorted({0, n // 2, min(1023, n - 1), min(1024, n - 1), n - 1}):
        for bit in (0, top):
            b[pos] ^= dtype(1) << dtype(bit)
            assert not dma.equal_words(a, b) and not dma.equal_words(b, a)
            b[pos] = a[pos]
    assert dma.equal_words(a, b)


def test_parallel_readout_is_the_serial_readout():
    """readout_fast splits the channels across the threads: many channels (more than
    the threads, uneven rows) give readout_post's bits and counts."""
    rng = np.random.default_rng(5)
    C, H, W = 37, 6, 29
    acc, flag = _acc(rng, (C, H, W))
    bias = rng.integers(0, 1 << 16, C).astype(np.uint16).view(F16).astype(np.float64)
    bias[:3] = [np.inf, -np.inf, 0.5]
    lutf, luti = np.zeros(41), np.zeros(3, np.int64)
    plane, row, wpad = 8 * 32, 32, 32
    for b, scale, relu in ((bias, 1.0, True), (bias, 0.5, False), (np.zeros(0), 1.0, False)):
        got = np.full(C * plane, 0xABCD, np.uint16)
        want = got.copy()
        cg, cw = np.zeros(4, np.int64), np.zeros(4, np.int64)
        kne.readout_fast(acc, flag, b, scale, relu, got, plane, row, wpad, cg)
        kne.readout_post(acc, flag, b, scale, int(relu), lutf, luti, want, plane, row, wpad, cw)
        assert np.array_equal(got, want) and np.array_equal(cg, cw) and cg[0] > 0 and cg[1] > 0


def test_parallel_row_stats_are_the_serial_ones():
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((3, 7, 501)) * np.exp2(rng.integers(-20, 15, (3, 7, 501)))).astype(F16)
    a = a.astype(np.float64)
    a[1, 2, 9], a[2, 0, 0], a[0, 6, 500] = np.nan, np.inf, -np.inf
    got = np.empty((3, 7)), np.empty((3, 7))
    want = np.empty((3, 7)), np.empty((3, 7))
    mac._row_abs_stats_par(a, *got)
    mac._row_abs_stats(a, *want)
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True)
    assert np.isnan(got[0][1, 2]) and np.isinf(got[1][2, 0])


@pytest.mark.parametrize("kernel,stride,special", [(1, 1, False), (3, 1, False), (3, 2, False), (3, 1, True)])
def test_float32_operands_of_the_fused_conv_are_the_reference(device, monkeypatch, kernel, stride, special):
    """The fused conv decodes its right operand (the input, or its im2col columns) into
    float32: rows the float32 kernel takes, rows that need a float64 copy (products past
    its limit), a NaN weight, clamping rows, with the row statistics on the threads or
    not; ``special`` puts NaN and inf in the input (every bound fails)."""
    from tests.helpers.reference import ref_conv2d

    rng = np.random.default_rng(kernel * 10 + stride + special)
    x = (rng.standard_normal((1, 24, 12, 12)) * 4).astype(F16)
    w = (rng.standard_normal((40, 24, kernel, kernel)) * 0.5).astype(F16)
    w[3] *= F16(8)  # products past the float32 kernel's limit: the float64 kernel
    w[5, 1, 0, 0] = np.nan
    w[7] *= F16(2000)  # clamps
    if special:
        x.reshape(-1)[[5, 700]] = [np.nan, np.inf]
    want = ref_conv2d(x, w, stride=stride, padding=((kernel // 2,) * 2,) * 2)
    want = np.asarray(want, F16).view(np.uint16)
    for rows_parallel in (1 << 18, 0):
        monkeypatch.setattr(mac, "ROW_STATS_PARALLEL", rows_parallel)
        with fastane.errstate(saturation="ignore"):
            got = fastane.conv2d(x, w, stride=stride, padding=kernel // 2)
        assert np.array_equal(got.view(np.uint16), want)


def test_an_unfolding_is_reused_only_while_its_source_is_unchanged(monkeypatch):
    """The tasks of one chain that unfold the same source window (a layer split by output
    channels) unfold it once; a task writing over that window (here one writing its
    result into the input's own slot) makes the next reader unfold it again, and so does
    a new run with a new input: every result is the reference's, bit for bit, NaN and
    infinities included."""
    from tests.helpers.device import ref_conv

    from fastane.device import Device, pack_weights
    from fastane.td import Program, conv_td

    rng = np.random.default_rng(21)
    c, h, w = 6, 7, 9
    ws = [(rng.standard_normal((c, c, 3, 3)) * 4).astype(F16) for _ in range(4)]
    kernel, tds = b"", []
    for i, (wi, dst) in enumerate(zip(ws, (5, 6, 4, 7))):  # TD 2 writes over the input (slot 4)
        k, fields = pack_weights(wi, base=len(kernel))
        kernel += k
        tds.append(
            conv_td(
                (1, c, h, w), (1, c, h, w), kernel=3, padding=1, src=4, dst=dst, nid=i + 1, eon=i == 3
            ).update(fields)
        )
    program = Program.from_tds(tds, kernel=kernel, name="unfold-reuse")
    dev = Device(memory_size=32 << 20)
    calls = []
    unfold = dmac._kdma.unfold_f16
    monkeypatch.setattr(dmac._kdma, "unfold_f16", lambda *a: calls.append(1) or unfold(*a))
    for run in range(2):
        x = (rng.standard_normal((1, c, h, w)) * 4).astype(F16)
        x.reshape(-1)[[5, 40 + run]] = [np.nan, np.inf]
        with fastane.errstate(saturation="ignore"):
            out = dev.run(program, {4: x})
            x2 = ref_conv(x, ws[2], pad=(1, 1))
            want = [
                ref_conv(x, ws[0], pad=(1, 1)),
                ref_conv(x, ws[1], pad=(1, 1)),
                ref_conv(x2, ws[3], pad=(1, 1)),
            ]
        for slot, y in zip((5, 6, 7), want):
            assert np.array_equal(out[slot].view(np.uint16), np.asarray(y, F16).view(np.uint16)), (run, slot)
        assert len(calls) == 2 * (run + 1)  # TD 0 and TD 3 unfold; TDs 1 and 2 reuse TD 0's
