"""fastane.palettize / fastane.quantize and the lowering that keeps them compressed: the
result is bit for bit that of the decompressed weight, and KernelDMA moves fewer bytes."""

from __future__ import annotations

import numpy as np
import pytest

import fastane
from fastane import errstate

F16 = np.float16


def _bits(y):
    return np.asarray(y, F16).view(np.uint16)


def test_palettize_is_lossless_with_few_values_and_kmeans_otherwise():
    w = np.array([[0.5, -1.0], [0.5, 2.0]], F16)
    p = fastane.palettize(w, 2)
    assert p.bits == 2 and p.shape == w.shape and p.palette.dtype == F16 and p.palette.size == 4
    assert np.array_equal(_bits(p.decompress()), _bits(w))
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 32, 3, 3)).astype(F16)
    p4 = fastane.palettize(big, 4)
    assert p4.codes.dtype == np.uint8 and int(p4.codes.max()) < 16
    err = np.abs(p4.decompress().astype(np.float64) - big)
    assert err.mean() < 0.15  # 16 k-means levels of a unit normal
    assert np.array_equal(fastane.palettize(big, 4).codes, p4.codes)  # deterministic
    # each weight takes its nearest entry
    pal = p4.palette.astype(np.float64)[: np.unique(p4.palette).size]
    d = np.abs(big.reshape(-1, 1).astype(np.float64) - pal[None])
    assert np.allclose(d.min(axis=1), err.reshape(-1))
    given = fastane.palettize(big, 1, palette=[-1, 1])
    assert set(np.unique(given.decompress()).tolist()) == {-1.0, 1.0}


def test_quantize_int8_and_uint8():
    w = np.array([-1.0, -0.5, 0.0, 0.25, 1.0], F16)
    q = fastane.quantize(w)
    assert q.kind == "quantized" and q.zero_point == 0 and q.scale == pytest.approx(1 / 127)
    assert q.values().dtype == np.int8 and q.values().tolist() == [-127, -64, 0, 32, 127]
    assert np.array_equal(_bits(q.decompress()), _bits((q.scale * q.values().astype(np.float64)).astype(F16)))
    u = fastane.quantize(np.array([0.0, 1.0, 2.0], F16), dtype="uint8", scale=2 / 255)
    assert u.values().dtype == np.uint8 and u.values().tolist() == [0, 128, 255] and u.zero_point == 0
    u2 = fastane.quantize(np.array([-1.0, 1.0], F16), dtype="uint8")
    assert u2.values().tolist() == [0, 255] and u2.zero_point == 128


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: fastane.palettize(np.ones(4), 0), ValueError, "1 to 8"),
        (lambda: fastane.palettize(np.ones(4), 9), ValueError, "1 to 8"),
        (lambda: fastane.palettize(np.ones(4), 2.0), TypeError, "int"),
        (lambda: fastane.palettize(np.array([1.0, np.nan]), 2), ValueError, "finite"),
        (lambda: fastane.palettize(np.ones(4), 1, palette=[1, 2, 3]), ValueError, "palette"),
        (lambda: fastane.palettize(np.zeros(0), 2), ValueError, "empty"),
        (lambda: fastane.quantize(np.ones(4), dtype="int16"), ValueError, "dtype"),
        (lambda: fastane.quantize(np.ones(4), scale=0.0), ValueError, "scale"),
        (lambda: fastane.quantize(np.ones(4), zero_point=200), ValueError, "zero_point"),
        (lambda: fastane.quantize(np.ones(4), zero_point=1.5), TypeError, "zero_point"),
        (lambda: fastane.palettize(np.ones(4), 2).values(), TypeError, "quantized"),
    ],
)
def test_bad_arguments_raise_precisely(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("activation", [None, "relu", "tanh", "sigmoid"])
def test_conv2d_with_a_palettized_weight_is_the_decompressed_conv(bits, activation):
    rng = np.random.default_rng(bits)
    x = rng.standard_normal((2, 16, 9, 7)).astype(F16)
    w = (rng.standard_normal((24, 16, 3, 3)) * 0.3).astype(F16)
    b = rng.standard_normal(24).astype(F16)
    p = fastane.palettize(w, bits)
    with errstate(saturation="ignore"):
        got = fastane.conv2d(x, p, b, padding=1, stride=(1, 2), activation=activation)
        s_got = fastane.last_stats()
        want = fastane.conv2d(x, p.decompress(), b, padding=1, stride=(1, 2), activation=activation)
        s_want = fastane.last_stats()
    assert np.array_equal(_bits(got), _bits(want))
    assert s_got.macs == s_want.macs and s_got.tasks == s_want.tasks
    # per task, 12 cores of 2 channels: palette, 2 x 144 codes (padded), 64 bytes of biases
    ru = lambda n: -(-n // 64) * 64  # noqa: E731
    per_core = ru(ru(2 << bits) + 2 * -(-144 * bits // 8)) + 64
    assert s_got.kernel_dma_bytes - s_want.kernel_dma_bytes == 2 * 12 * (per_core - (576 + 64))
    if bits <= 4:  # an 8-bit palette (512 bytes a core) outweighs 288 bytes of codes here
        assert s_got.kernel_dma_bytes < s_want.kernel_dma_bytes


def test_linear_with_a_quantized_weight_tiles_and_stays_compressed():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 512)).astype(F16)
    w = (rng.standard_normal((1536, 512)) * 0.05).astype(F16)  # 1.5 MiB in fp16: several kernel groups
    q = fastane.quantize(w)
    got = fastane.linear(x, q, activation="relu")
    s_got = fastane.last_stats()
    want = fastane.linear(x, q.decompress(), activation="relu")
    s_want = fastane.last_stats()
    assert got.shape == (3, 5, 1536) and np.array_equal(_bits(got), _bits(want))
    # one byte a weight plus a 512-byte palette a core and task, vs two bytes a weight
    assert s_got.kernel_dma_bytes < 0.6 * s_want.kernel_dma_bytes
    assert s_got.kernel_dma_bytes >= 1536 * 512
    # the tiler sizes a core's KMem by the compressed bytes: fewer, larger kernel groups
    assert s_got.tasks < s_want.tasks


def test_conv1d_takes_compressed_weights_and_matmul_does_not():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 40)).astype(F16)
    p = fastane.palettize(rng.standard_normal((128, 8, 5)).astype(F16), 3)
    got = fastane.conv1d(x, p, padding=2)
    s_got = fastane.last_stats()
    want = fastane.conv1d(x, p.decompress(), padding=2)
    assert np.array_equal(_bits(got), _bits(want))
    assert s_got.kernel_dma_bytes < fastane.last_stats().kernel_dma_bytes
    with pytest.raises(TypeError):
        fastane.matmul(np.ones((2, 3)), fastane.palettize(np.ones((3, 2)), 1))
