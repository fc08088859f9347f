"""Palettized kernels in the NE: a palettized convolution equals the same convolution with
the looked-up fp16 weights, bit for bit, while KernelDMA moves fewer bytes."""

from __future__ import annotations

import numpy as np
import pytest

from fastane import errstate
from fastane.device import Device, UnsupportedTask, pack_weights
from fastane.device import palette as pal
from fastane.device.kernel_dma import KMem, unpack_weights
from fastane.td import Program, conv_td

F16 = np.float16


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=32 << 20)


def _td(x_shape, cout, k, bits, **kw):
    n, c, h, w = x_shape
    td = conv_td(x_shape, (1, cout, h - k + 1, w - k + 1), kernel=k, **kw)
    return td.update({"NE.KernelCfg.PalettizedEn": 1, "NE.KernelCfg.PalettizedBits": bits})


def _case(rng, bits, cout=20, cin=6, k=3, per_core=False):
    codes = rng.integers(0, 1 << bits, (cout, cin, k, k))
    lanes = -(-cout // -(-cout // 16))
    shape = (lanes, 1 << bits) if per_core else (1 << bits,)
    palettes = (rng.standard_normal(shape) * 2).astype(F16)
    return codes, palettes


def _decompressed(codes, palettes, cout):
    m = -(-cout // 16)
    if palettes.ndim == 1:
        return palettes[codes]
    core = np.arange(cout) // m
    return palettes[core[:, None, None, None], codes]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("per_core", [False, True])
def test_palettized_conv_is_the_decompressed_conv(dev, bits, per_core):
    rng = np.random.default_rng(bits)
    codes, palettes = _case(rng, bits, per_core=per_core)
    x = (rng.standard_normal((1, 6, 9, 8)) * 3).astype(F16)
    td = _td(x.shape, 20, 3, bits)
    kernel, fields = pal.pack(codes, palettes, bits)
    packed = Program.from_tds([td.copy().update(fields)], kernel=kernel)
    w = _decompressed(codes, palettes, 20)
    plain = Program.from_tds([conv_td(x.shape, (1, 20, 7, 6), kernel=3)], kernel=pack_weights(w)[0])
    with errstate(saturation="ignore"):
        got, want = dev.run(packed, {4: x}), dev.run(plain, {4: x})
    assert np.array_equal(got[5].view(np.uint16), want[5].view(np.uint16))
    assert got.stats.macs == want.stats.macs and got.stats.int8_macs == 0
    # KernelDMA: per core a padded palette, then 2 channels x 54 codes of `bits` bits
    per_core_bytes = -(-(2 << bits) // 64) * 64 + -(-2 * -(-54 * bits // 8) // 64) * 64
    assert got.stats.kernel_dma_bytes == 10 * per_core_bytes
    if bits <= 4:
        assert got.stats.kernel_dma_bytes < want.stats.kernel_dma_bytes


def test_palettized_kernel_with_a_bias_vector_and_relu(dev):
    rng = np.random.default_rng(5)
    codes, palettes = _case(rng, 4, cout=33, cin=64, k=1)
    bias = rng.standard_normal(33).astype(F16)
    x = rng.standard_normal((1, 64, 4, 5)).astype(F16)
    td = _td(x.shape, 33, 1, 4, bias="channel", nonlinear="relu")
    kernel, fields = pal.pack(codes, palettes, 4, bias=bias)
    got = dev.run(Program.from_tds([td.copy().update(fields)], kernel=kernel), {4: x})
    w = palettes[codes]
    plain_kernel = bytearray()
    ref_td = conv_td(x.shape, (1, 33, 4, 5), kernel=1, bias="channel", nonlinear="relu")
    from fastane.m1 import kernel_layout

    lay = kernel_layout(33, 128, True)
    for lane in range(lay.lanes):  # kernels then biases per core, as conv_td lays them out
        lo, hi = lane * lay.m, min((lane + 1) * lay.m, 33)
        buf = bytearray(lay.sizes[lane])
        wb = w[lo:hi].astype("<f2").tobytes()
        buf[: len(wb)] = wb
        bb = bias[lo:hi].astype("<f2").tobytes()
        buf[lay.bias_offset : lay.bias_offset + len(bb)] = bb
        plain_kernel += buf
    want = dev.run(Program.from_tds([ref_td], kernel=bytes(plain_kernel)), {4: x})
    assert np.array_equal(got[5].view(np.uint16), want[5].view(np.uint16))
    # per core: a 64-byte palette + 3 x 32 code bytes (padded: 192) + 64 of biases, vs 3 x 128 + 64
    assert (got.stats.kernel_dma_bytes, want.stats.kernel_dma_bytes) == (11 * 256, 11 * 448)


def test_decode_reads_each_core_palette_at_its_codes():
    rng = np.random.default_rng(9)
    for bits in (1, 3, 8):
        codes, palettes = _case(rng, bits, cout=40, cin=5, k=3, per_core=True)
        kernel, fields = pal.pack(codes, palettes, bits)
        kmem = KMem()
        for lane in range(16):
            if fields[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"]:
                off = fields[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] * 64
                n = fields[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] * 64
                kmem.data[lane, :n] = np.frombuffer(kernel[off : off + n], np.uint8)
        w = unpack_weights(kmem, 40, 5, 3, 3, pal.Palettized(bits))
        assert np.array_equal(w, _decompressed(codes, palettes, 40).astype(np.float64))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"NE.KernelCfg.PalettizedBits": 0}, "1 to 8 bits"),
        ({"NE.KernelCfg.PalettizedBits": 9}, "1 to 8 bits"),
        ({"NE.KernelCfg.KernelFmt": 1}, "palette of KernelFmt 1"),
    ],
)
def test_bad_palettes_are_refused_at_plan_time(dev, change, match):
    rng = np.random.default_rng(1)
    codes, palettes = _case(rng, 4, cout=4, cin=2, k=1)
    kernel, fields = pal.pack(codes, palettes, 4)
    td = _td((1, 2, 3, 3), 4, 1, 4).update(fields).update(change)
    with pytest.raises(UnsupportedTask, match=match):
        dev.run(Program.from_tds([td], kernel=kernel), {4: np.zeros((1, 2, 3, 3), F16)})


def test_pack_checks_its_input():
    with pytest.raises(ValueError, match="codes must be integers"):
        pal.pack(np.full((1, 1, 1, 1), 16), np.zeros(16, F16), 4)
    with pytest.raises(ValueError, match="bits"):
        pal.pack(np.zeros((1, 1, 1, 1), int), np.zeros(2, F16), 9)
    with pytest.raises(TypeError, match="float16"):
        pal.pack(np.zeros((1, 1, 1, 1), int), np.zeros(16), 4)
