"""The NE stage through its table of fp16 patterns (large elementwise LUT tasks,
fastane.kernels.ne_table): every non-NaN input pattern against the slow reference
(results and LUT range events), with and without a bias and a PostScale, -0.0 apart from
0.0; a NaN input sends the call through the kernel itself."""

import numpy as np
import pytest

import fastane
from fastane import lut
from fastane.device import ne
from tests.helpers.lut_reference import ref_ne, bits_to_float

PATTERNS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
FINITE = PATTERNS[~np.isnan(PATTERNS.view(np.float16))]


def _ref_table(words, bias, scale, nl):
    """Reference bits of every pattern in FINITE."""
    out = np.empty(FINITE.size, np.uint16)
    for i, b in enumerate(FINITE):
        out[i] = ref_ne(bits_to_float(int(b)), bias, scale, nl, words)
    return out


@pytest.mark.parametrize(
    "name,bias,scale_bits,nl",
    [
        ("tanh", None, 0x3C00, 2),
        ("exp2", None, 0x3DC5, 2),
        ("gelu", -0.0, 0x3C00, 2),
        ("sigmoid", 0.0, 0x3800, 2),
        ("tanh", None, 0x3C00, 1),
        ("tanh", 1.5, 0x4000, 0),
    ],
)
def test_table_path_is_the_reference_on_every_pattern(name, bias, scale_bits, nl):
    block = lut.get_block(name)
    words = block.to_words()
    rng = np.random.default_rng(scale_bits)
    x = np.concatenate([FINITE, rng.permutation(FINITE)])  # >= TABLE_MIN elements
    assert x.size >= ne.TABLE_MIN
    cfg = ne.NEConfig(
        bias_mode=int(bias is not None),
        acc_bias=0 if bias is None else int(np.float16(bias).view(np.uint16)),
        post_scale=scale_bits,
        nonlinear=nl,
        cout=1,
    )

    from fastane.device.kernel_dma import KMem

    kmem = KMem()  # core 0's KMem holds the block at offset 0
    kmem.data[0, : len(block.to_bytes())] = np.frombuffer(block.to_bytes(), np.uint8)
    values = x.view(np.float16).astype(np.float64).reshape(1, 1, 1, -1)
    got, under, over = ne.run(cfg, values, kmem, as_fp16=True)
    scale = bits_to_float(scale_bits)
    want = _ref_table(words, bias, scale, nl)
    g = got.reshape(-1).view(np.uint16)
    assert np.array_equal(g[: FINITE.size], want)
    order = np.argsort(FINITE)
    pos = np.searchsorted(FINITE[order], x[FINITE.size :])
    assert np.array_equal(g[FINITE.size :], want[order][pos])
    # the events: the kernel over the same values (ne_post; tested against the reference)
    nan_free = values.reshape(1, 1, -1)
    out = np.empty(nan_free.shape, np.uint16)
    counts = np.zeros(2, np.int64)
    bias_arr, sc, lutf, luti = ne._coefficients(cfg, 1, kmem)
    from fastane.kernels import ne as kne

    kne.ne_post(nan_free, bias_arr, sc, nl, lutf, luti, out, counts)
    assert (under, over) == (int(counts[0]), int(counts[1]))
    assert np.array_equal(out.reshape(-1), g)


def test_a_stage_called_often_takes_its_table(monkeypatch):
    """Calls below TABLE_MIN elements each: once one stage (the same bias, scale and LUT)
    has computed TABLE_MIN values over its calls, it builds its table and looks the next
    ones up -- the same bits and LUT events as the kernel gives."""
    monkeypatch.setattr(ne, "_computed", {})
    x = np.random.default_rng(7).standard_normal((4, 20000)).astype(np.float16) * np.float16(3)
    looked = []
    real = ne._ktable.ne_lookup
    monkeypatch.setattr(ne._ktable, "ne_lookup", lambda *a: looked.append(a[0].size) or real(*a))
    got = []
    with fastane.errstate(lut_range="ignore"):
        for row in x:
            got.append((fastane.tanh(row).view(np.uint16), fastane.last_stats()))
    assert looked == [20000]  # the fourth call: 80000 values counted
    monkeypatch.setattr(ne, "TABLE_MIN", 1 << 30)  # the kernel alone
    with fastane.errstate(lut_range="ignore"):
        for row, (bits, st) in zip(x, got):
            assert np.array_equal(fastane.tanh(row).view(np.uint16), bits)
            want = fastane.last_stats()
            assert (st.lut_underflow, st.lut_overflow) == (want.lut_underflow, want.lut_overflow)


def test_nan_input_takes_the_kernel():
    x = np.tile(FINITE, 2).view(np.float16).copy()
    x.view(np.uint16)[12345] = 0x7D01  # a signalling-NaN payload
    with fastane.errstate(lut_range="ignore"):
        y = fastane.tanh(x)
    small = fastane.tanh(x[12340:12350])  # below TABLE_MIN: the kernel
    assert np.array_equal(y[12340:12350].view(np.uint16), small.view(np.uint16))
    assert np.array_equal(y[:100].view(np.uint16), fastane.tanh(x[:100]).view(np.uint16))


@pytest.mark.parametrize("n", [1000, 1 << 17])
def test_nan_outputs_of_a_pass_through(n):
    """The pass-through counts its NaN inputs (skipped only when TileDMASrc's channel
    maxima prove there is none)."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float16)
    fastane.relu(x)
    assert fastane.last_stats().nan_outputs == 0
    x.view(np.uint16)[[3, 500, n - 1]] = [0x7E00, 0xFE01, 0x7C01]
    fastane.relu(x)
    assert fastane.last_stats().nan_outputs == 3


@pytest.mark.parametrize(
    "C,H,W,wpad,p",
    [
        (1, 1, 1, 1, 0.2),
        (2, 3, 7, 8, 0.2),
        (1, 2, 4096, 4096, 0.2),
        (1, 1, 4097, 4100, 0.2),
        (3, 2, 9000, 9024, 0.2),
        (1, 2, 70000, 70016, 0.2),
        (1, 2, 70000, 70000, 1.0),  # every event on every element: full packed fields
        (5, 7, 3000, 3008, 0.5),  # rows of 3000: five rows a threaded task
        (1, 3, 16384, 16384, 0.2),  # a threaded task a row, exactly
        (2, 2, 16385, 16416, 0.2),  # a row in two parts, the second of one element
    ],
)
def test_lookup_window_is_the_table_gather_and_its_event_counts(C, H, W, wpad, p):
    """kernels.ne_table.lookup_window (gather and packed event counts, split every CHUNK
    elements) against numpy on a random table with random event bits (each with
    probability ``p``): strided windows, rows across the chunk size, the padding zeroed,
    the cells outside the window untouched, counts added to; lookup_window_par (rows, or
    parts of long rows, as tasks) the same on 1 to 3 threads."""
    from fastane.kernels import ne_table as kt

    rng = np.random.default_rng(C * 1000 + W)
    table = rng.integers(0, 1 << 16, 1 << 16).astype(np.uint64)
    for shift in (kt.UNDER_SHIFT, kt.OVER_SHIFT, kt.NAN_SHIFT):  # the entry's event bits
        table |= (rng.random(1 << 16) < p).astype(np.uint64) << np.uint64(shift)
    srow, drow = W + 5, wpad + 3
    splane, dplane = H * srow + 11, H * drow + 2
    src = rng.integers(0, 1 << 16, C * splane).astype(np.uint16)
    src[: min(src.size, 50)] = 0x7E00  # runs of one pattern as well
    dst = rng.integers(0, 1 << 16, C * dplane).astype(np.uint16)
    want = dst.copy()
    counts = np.array([5, 6, 7], np.int64)
    want_counts = counts.copy()
    for c in range(C):
        for h in range(H):
            v = table[src[c * splane + h * srow :][:W]]
            want[c * dplane + h * drow :][:W] = v & 0xFFFF
            want[c * dplane + h * drow + W :][: wpad - W] = 0
            want_counts += [
                int(((v >> np.uint64(s)) & np.uint64(1)).sum())
                for s in (kt.NAN_SHIFT, kt.UNDER_SHIFT, kt.OVER_SHIFT)
            ]
    before = (dst.copy(), counts.copy())
    kt.lookup_window(src, splane, srow, C, H, W, table, dst, dplane, drow, wpad, counts)
    assert np.array_equal(dst, want)
    assert np.array_equal(counts, want_counts)
    for workers in (1, 2, 3):  # the threaded twin: rows, or parts of long rows, as tasks
        dst, counts = before[0].copy(), before[1].copy()
        kt.lookup_window_par(src, splane, srow, C, H, W, table, dst, dplane, drow, wpad, counts, workers)
        assert np.array_equal(dst, want)
        assert np.array_equal(counts, want_counts)
