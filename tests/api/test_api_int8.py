"""The INT8 path of the numpy surface (scale=, out_dtype=): against the slow reference,
bit for bit, for every signedness combination; the keywords' errors."""

from __future__ import annotations

import numpy as np
import pytest
from tests.helpers.reference_int8 import ref_conv2d_int, ref_matmul_int, ref_ne_int

import fastane
from fastane import errstate
from fastane.quantized import ne_scale

RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
DT = {"uint8": np.uint8, "int8": np.int8, "float16": np.float16}


def _ints(rng, kind, shape):
    lo, hi = RANGES[kind]
    return rng.integers(lo, hi + 1, shape).astype(DT[kind])


def _ne_ref(acc, flag, scale, out, relu=False, bias=None):
    bits, shift = ne_scale(scale)
    vals = []
    for i, (a, f) in enumerate(zip(np.ravel(acc), np.ravel(flag))):
        bb, bs = (None, 0) if bias is None else bias[i]
        vals.append(
            ref_ne_int(int(a), int(f), bb, bs, bits, shift, relu, "fp16" if out == "float16" else out)[0]
        )
    if out == "float16":
        return np.array(vals, np.uint16).reshape(np.shape(acc)).view(np.float16)
    return np.array(vals).reshape(np.shape(acc)).astype(DT[out])


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.float16:
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("ka", ["int8", "uint8"])
@pytest.mark.parametrize("kb", ["int8", "uint8"])
@pytest.mark.parametrize("out", ["float16", "int8", "uint8"])
def test_matmul_int8(ka, kb, out):
    rng = np.random.default_rng(2)
    a, b = _ints(rng, ka, (7, 40)), _ints(rng, kb, (40, 19))
    scale = 0.0123 if out != "float16" else 1.7e-3
    with errstate(saturation="ignore"):
        y = fastane.matmul(a, b, scale=scale, out_dtype=None if out == "float16" else out)
    acc, flag = ref_matmul_int(a, b)
    _same(y, _ne_ref(acc, flag, scale, out))
    s = fastane.last_stats()
    # 19 channels: 2 a core on 10 cores, 2 x 40 bytes padded to 128
    assert s.macs == s.int8_macs == 7 * 40 * 19 and s.kernel_dma_bytes == 10 * 128
    assert fastane.matmul(a[0], b, scale=scale).shape == (19,)


def test_linear_int8_with_bias_and_relu():
    rng = np.random.default_rng(4)
    x, w = _ints(rng, "int8", (2, 3, 64)), _ints(rng, "int8", (33, 64))
    bias = rng.integers(-5000, 5000, 33) * 4  # int16 x 2**2
    with errstate(saturation="ignore"):  # some results pass 255
        y = fastane.linear(x, w, bias, activation="relu", scale=0.01, out_dtype="uint8")
    acc, flag = ref_matmul_int(x.reshape(6, 64), w.T)
    # the smallest common shift the lowering picks: every bias even, some not a multiple of 8
    bshift = next(
        s for s in range(32) if all(int(v) % (1 << s) == 0 and -(2**15) <= int(v) >> s < 2**15 for v in bias)
    )
    per = [((int(bias[j]) >> bshift) & 0xFFFF, bshift) for i in range(6) for j in range(33)]
    want = _ne_ref(acc, flag, 0.01, "uint8", relu=True, bias=per).reshape(2, 3, 33)
    _same(y, want)


@pytest.mark.parametrize(
    "kx,kw", [("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8"), ("int8", "uint8")]
)
def test_conv2d_int8(kx, kw):
    rng = np.random.default_rng(6)
    x, w = _ints(rng, kx, (2, 4, 7, 6)), _ints(rng, kw, (6, 2, 3, 3))
    with errstate(saturation="ignore"):  # some results leave [-128, 127]
        y = fastane.conv2d(x, w, stride=(2, 1), padding=1, groups=2, scale=2.0**-9, out_dtype="int8")
    acc, flag = ref_conv2d_int(x, w, (2, 1), 1, 1, 2)
    _same(y, _ne_ref(np.array(acc), np.array(flag), 2.0**-9, "int8"))
    assert fastane.last_stats().tasks == 2  # one task per image


def test_batched_matmul_int8_broadcasts_like_numpy():
    rng = np.random.default_rng(9)
    a, b = _ints(rng, "int8", (2, 1, 3, 16)), _ints(rng, "uint8", (4, 16, 5))
    with errstate(saturation="ignore"):
        y = fastane.matmul(a, b, scale=2.0**-6, out_dtype="int8")
    assert y.shape == (2, 4, 3, 5) and fastane.last_stats().tasks == 8
    for i in range(2):
        for j in range(4):
            acc, flag = ref_matmul_int(a[i, 0], b[j])
            _same(y[i, j], _ne_ref(acc, flag, 2.0**-6, "int8"))
    assert fastane.matmul(a[0, 0, 0], b, scale=1.0).shape == (4, 5)


def test_conv1d_int8():
    rng = np.random.default_rng(8)
    x, w = _ints(rng, "uint8", (1, 3, 20)), _ints(rng, "int8", (5, 3, 4))
    with errstate(saturation="ignore"):
        y = fastane.conv1d(x, w, stride=2, padding=1, scale=2.0**-8, out_dtype="int8")
    acc, flag = ref_conv2d_int(x[:, :, None, :], w[:, :, None, :], (1, 2), ((0, 0), (1, 1)))
    _same(y, _ne_ref(np.array(acc), np.array(flag), 2.0**-8, "int8")[:, :, 0, :])


def test_saturation_is_reported_like_the_fp16_path():
    a = np.full((1, 4), 127, np.int8)
    with pytest.warns(fastane.SaturationWarning, match="integer output's range"):
        y = fastane.matmul(a, a.T.copy(), scale=1.0, out_dtype="int8")
    assert y.tolist() == [[127]] and fastane.last_stats().saturated == 1


def test_ne_scale_holds_the_scale_to_11_bits():
    for s in (1.0, 0.5, 3e-3, 1 / 3, 1e-9, 200.0):
        bits, shift = ne_scale(s)
        v = float(np.uint16(bits).view(np.float16)) * 2.0**-shift
        assert abs(v - s) <= s * 2.0**-11 and 0 <= shift <= 31
    with pytest.raises(ValueError):
        ne_scale(1e6)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (
            lambda: fastane.matmul(np.ones((2, 2)), np.ones((2, 2), np.int8), scale=1.0),
            TypeError,
            "int8 or uint8",
        ),
        (
            lambda: fastane.matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), out_dtype="int8"),
            TypeError,
            "scale",
        ),
        (
            lambda: fastane.matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), scale=-1),
            ValueError,
            "positive",
        ),
        (
            lambda: fastane.matmul(
                np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), scale=1, out_dtype="int16"
            ),
            ValueError,
            "out_dtype",
        ),
        (
            lambda: fastane.matmul(
                np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), scale=1, activation="tanh"
            ),
            NotImplementedError,
            "relu",
        ),
        (
            lambda: fastane.matmul(np.ones((2, 2, 2), np.int8), np.ones((3, 2, 2), np.int8), scale=1),
            ValueError,
            "broadcast",
        ),
        (lambda: fastane.matmul(np.ones((), np.int8), np.ones((2, 2), np.int8), scale=1), ValueError, "1-D"),
        (
            lambda: fastane.linear(
                np.ones((2, 2), np.int8), np.ones((3, 2), np.int8), np.full(3, 0.5), scale=1
            ),
            TypeError,
            "integers",
        ),
        (
            lambda: fastane.linear(
                np.ones((2, 2), np.int8), np.ones((3, 2), np.int8), np.full(3, 2**16 + 1), scale=1
            ),
            ValueError,
            "int16",
        ),
        (
            lambda: fastane.matmul(np.ones((2, 70000), np.int8), np.ones((70000, 2), np.int8), scale=1),
            NotImplementedError,
            "does not fit a core.s 64 KiB KMem",
        ),
    ],
)
def test_bad_keywords_and_operands(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_without_scale_integers_still_round_to_fp16():
    assert fastane.matmul(np.array([[3]], np.int8), np.array([[True]]))[0, 0] == 3
    assert fastane.matmul(np.array([[3]], np.int8), np.array([[2]], np.int8)).dtype == np.float16


# -- tiling: the lowering's tiler cuts an INT8 call into kernel groups and output tiles


def _small(monkeypatch, **kw):
    from fastane import quantized
    from fastane.m1 import Limits

    monkeypatch.setattr(quantized, "LIMITS", Limits(**kw))


@pytest.mark.parametrize(
    "kx,kw", [("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8"), ("int8", "uint8")]
)
def test_conv2d_int8_tiled_against_the_reference(monkeypatch, kx, kw):
    # 2 cores of 128 bytes: one channel of 36 weights (and its bias) a core, so 2-channel
    # kernel groups (parts of a conv group); a 2 KiB L2: a few output rows a tile
    _small(monkeypatch, cores=2, kmem_core_bytes=128, l2_bytes=2048, min_group=2)
    rng = np.random.default_rng(12)
    x, w = _ints(rng, kx, (2, 8, 13, 11)), _ints(rng, kw, (12, 4, 3, 3))
    bias = rng.integers(-30000, 30000, 12) * 2  # some beyond int16: AccBiasShift 1
    with errstate(saturation="ignore"):
        y = fastane.conv2d(x, w, bias, padding=1, groups=2, scale=2.0**-9, out_dtype="int8")
    s = fastane.last_stats()
    acc, flag = ref_conv2d_int(x, w, 1, 1, 1, 2)
    bs = next(
        s for s in range(32) if all(int(v) % (1 << s) == 0 and -(2**15) <= int(v) >> s < 2**15 for v in bias)
    )
    per = [((int(bias[j]) >> bs) & 0xFFFF, bs) for n in range(2) for j in range(12) for _ in range(13 * 11)]
    _same(y, _ne_ref(np.array(acc), np.array(flag), 2.0**-9, "int8", bias=per))
    assert s.tasks == 2 * 6 * 4  # images x kernel groups x row tiles (4 rows of 13)
    assert s.macs == s.int8_macs == 2 * 12 * 13 * 11 * 4 * 9


def test_conv2d_int8_column_tiles_materialize_the_padding(monkeypatch):
    # rows too wide for the L2: column tiles of one row, the left padding materialized
    _small(monkeypatch, l2_bytes=2048, min_group=1)
    rng = np.random.default_rng(13)
    x, w = _ints(rng, "uint8", (1, 3, 5, 200)), _ints(rng, "int8", (2, 3, 3, 3))
    with errstate(saturation="ignore"):
        y = fastane.conv2d(x, w, padding=1, scale=2.0**-10, out_dtype="uint8")
    acc, flag = ref_conv2d_int(x, w, 1, 1)
    _same(y, _ne_ref(np.array(acc), np.array(flag), 2.0**-10, "uint8"))
    assert fastane.last_stats().tasks == 5 * 4  # rows x 64-column tiles of 200


def test_large_int8_matmul_is_tiled():
    # 300 channels of 4096 weights do not fit the 16 cores' KMem at once (16 a core):
    # two kernel groups.  |acc| <= 4096 * 128 * 128 < 2**31: nothing clamps, so numpy's
    # int64 product is the accumulator.
    rng = np.random.default_rng(14)
    a, b = _ints(rng, "int8", (3, 4096)), _ints(rng, "int8", (4096, 300))
    y = fastane.matmul(a, b, scale=2.0**-12)
    s = fastane.last_stats()
    acc = a.astype(np.int64) @ b.astype(np.int64)
    _same(y, _ne_ref(acc, np.zeros_like(acc), 2.0**-12, "float16"))
    assert s.tasks == 2 and s.kernel_dma_bytes >= 300 * 4096 and s.macs == 3 * 4096 * 300


def test_int8_kernel_beyond_one_core_still_refused():
    rng = np.random.default_rng(15)
    # 8192 x 3 x 3 one-byte weights = 72 KiB > a core's 64 KiB KMem: the reduction is not split
    x, w = _ints(rng, "int8", (1, 8192, 3, 3)), _ints(rng, "int8", (1, 8192, 3, 3))
    with pytest.raises(NotImplementedError, match="1 byte.*does not fit a core"):
        fastane.conv2d(x, w, scale=1.0)
