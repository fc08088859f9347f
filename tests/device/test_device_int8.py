"""The INT8 path on the device: TDs with uint8/int8 tensors and kernels run through the
engine (TileDMA, KernelDMA, the MAC and the NE) and match the slow reference bit for bit;
the Stats count one byte a weight and the INT8 MACs; what is not emulated is refused at
plan time, before anything moves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.reference_int8 import ref_conv2d_int, ref_ne_int

from fastane import errstate
from fastane.device import Device, UnsupportedTask, pack_weights
from fastane.td import Program, conv_td
from fastane.td.asm import eltwise_td

RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
DT = {"uint8": np.uint8, "int8": np.int8, "fp16": np.float16}


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=32 << 20)


def _program(x_shape, w, out_fmt, kfmt, in_fmt, stride=1, pad=0, groups=1, ne=None):
    n, c, h, wd = x_shape
    co, _, kh, kw = w.shape
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    td = conv_td(
        x_shape,
        (1, co, oh, ow),
        kernel=(kh, kw),
        stride=stride,
        padding=pad,
        groups=groups,
        in_fmt=in_fmt,
        out_fmt=out_fmt,
        kernel_fmt=kfmt,
    )
    td.update(ne or {})
    kernel, _ = pack_weights(w, fmt={"uint8": 0, "int8": 1}[kfmt])
    return Program.from_tds([td], kernel=kernel)


def _expected(x, w, stride, pad, groups, ne, out):
    acc, flag = ref_conv2d_int(x, w, stride, pad, 1, groups)
    ne = ne or {}
    bias = ne.get("NE.AccBias.AccBias") if ne.get("NE.MACCfg.BiasMode") else None
    vals = []
    a, f = np.array(acc, dtype=object), np.array(flag, dtype=object)
    for av, fv in zip(a.ravel(), f.ravel()):
        v, _, _ = ref_ne_int(
            int(av),
            int(fv),
            bias,
            ne.get("NE.AccBias.AccBiasShift", 0),
            ne.get("NE.PostScale.PostScale", 0x3C00),
            ne.get("NE.PostScale.PostRightShift", 0),
            ne.get("NE.MACCfg.NonlinearMode", 0) == 1,
            out,
        )
        vals.append(v)
    if out == "fp16":
        return np.array(vals, np.uint16).reshape(a.shape).view(np.float16)
    return np.array(vals).reshape(a.shape).astype(DT[out])


@pytest.mark.parametrize("kx", ["uint8", "int8"])
@pytest.mark.parametrize("kw", ["uint8", "int8"])
@pytest.mark.parametrize("out", ["int8", "uint8", "fp16"])
def test_int8_conv_matches_the_reference(dev, kx, kw, out):
    rng = np.random.default_rng(3)
    lo, hi = RANGES[kx]
    x = rng.integers(lo, hi + 1, (1, 6, 7, 9)).astype(DT[kx])
    lo, hi = RANGES[kw]
    w = rng.integers(lo, hi + 1, (20, 3, 3, 3)).astype(DT[kw])  # 20 channels: 2 a core
    ne = {
        "NE.MACCfg.BiasMode": 1,
        "NE.AccBias.AccBias": 0xFF38,  # -200
        "NE.AccBias.AccBiasShift": 2,
        "NE.PostScale.PostScale": 0x3A00,  # 0.75
        "NE.PostScale.PostRightShift": 9,
        "NE.MACCfg.NonlinearMode": 1 if kx == "int8" else 0,
    }
    prog = _program(x.shape, w, out, kw, kx, stride=2, pad=1, groups=2, ne=ne)
    with errstate(saturation="ignore"):
        got = dev.run(prog, {4: x})
    y = got[5]
    want = _expected(x, w, 2, 1, 2, ne, out)
    assert y.dtype == want.dtype and y.shape == want.shape
    if out == "fp16":
        assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
    else:
        assert np.array_equal(y, want)
    s = got.stats
    assert s.macs == s.int8_macs == 20 * 4 * 5 * 3 * 3 * 3
    # KernelDMA: one byte a weight (2 channels x 27 = 54 bytes, one 64-byte burst a core)
    assert s.kernel_dma_bytes == 10 * 64
    # TileDMA: 6 x 7 rows of 9 bytes (one burst each); 20 x 4 rows of 5 elements
    assert s.tile_dma_src_bytes == 6 * 7 * 64 and s.tile_dma_dst_bytes == 20 * 4 * 64


def test_int8_kernels_take_half_the_kmem_of_fp16(dev):
    """The same weights as fp16 and as int8: KernelDMA moves half the bytes."""
    w = np.arange(32 * 32 * 3 * 3).reshape(32, 32, 3, 3) % 7 - 3
    x = (np.arange(32 * 8 * 8).reshape(1, 32, 8, 8) % 5).astype(np.int8)
    td16 = conv_td((1, 32, 8, 8), (1, 32, 6, 6), kernel=3)
    p16 = Program.from_tds([td16], kernel=pack_weights(w.astype(np.float16))[0])
    p8 = _program(x.shape, w.astype(np.int8), "fp16", "int8", "int8")
    s16 = dev.run(p16, {4: x.astype(np.float16)}, stats_only=True).stats
    s8 = dev.run(p8, {4: x}, stats_only=True).stats
    assert s16.kernel_dma_bytes == 2 * s8.kernel_dma_bytes == 16 * 2 * 32 * 9 * 2  # 2 channels a core
    assert s16.int8_macs == 0 and s8.int8_macs == s8.macs == s16.macs
    # and the values agree: small integers are exact on both paths
    y16 = dev.run(p16, {4: x.astype(np.float16)})[5]
    y8 = dev.run(p8, {4: x})[5]
    assert np.array_equal(y16.view(np.uint16), y8.view(np.uint16))


def test_int8_saturation_is_counted_and_reads_as_the_range(dev):
    x = np.full((1, 64, 1, 1), -128, np.int8)
    w = np.full((2, 64, 1, 1), -128, np.int8)
    w[1] = 1
    prog = _program(x.shape, w, "int8", "int8", "int8")
    with errstate(saturation="ignore"):
        out = dev.run(prog, {4: x})
    assert out[5].ravel().tolist() == [127, -128] and out.stats.saturated == 2  # clamped to the int8 range
    # the 32-bit accumulator itself: 2**17 products of 2**14 pass its top
    x = np.full((1, 1, 1, 1), -128, np.int8)
    prog = _program(x.shape, np.full((1, 1, 1, 1), -128, np.int8), "fp16", "int8", "int8")
    with errstate(saturation="ignore"):
        assert dev.run(prog, {4: x})[5].ravel().tolist() == [16384.0]


def test_int8_passthrough_relu(dev):
    td = eltwise_td((3, 2, 64), nonlinear="relu", src=5, dst=4)
    td.update(
        {
            "Common.ChCfg.InFmt": 1,
            "Common.ChCfg.OutFmt": 1,
            "TileDMASrc.Fmt.MemFmt": 1,
            "TileDMADst.Fmt.MemFmt": 1,
            "TileDMASrc.RowStride.Stride": 1,
            "TileDMADst.RowStride.RowStride": 1,
            "TileDMASrc.PlaneStride.PlaneStride": 2,
            "TileDMADst.PlaneStride.PlaneStride": 2,
        }
    )
    x = (np.arange(3 * 2 * 64).reshape(1, 3, 2, 64) % 256 - 128).astype(np.int8)
    y = dev.run(Program.from_tds([td]), {5: x})[4]
    assert y.dtype == np.int8 and np.array_equal(y, np.maximum(x, 0))


def test_integer_inputs_are_checked(dev):
    prog = _program((1, 2, 1, 1), np.ones((1, 2, 1, 1), np.int8), "int8", "int8", "int8")
    for bad in (np.array([[[[128]], [[0]]]]), np.array([[[[0.5]], [[0]]]]), np.array([[[[np.nan]], [[0]]]])):
        with pytest.raises(ValueError, match="integers in"):
            dev.run(prog, {4: bad})
    assert dev.run(prog, {4: np.array([[[[100.0]], [[-3]]]])})[5].ravel().tolist() == [97]


@pytest.mark.parametrize(
    "change,match",
    [
        ({"NE.KernelCfg.KernelFmt": 2}, "integer kernel"),
        ({"TileDMASrc.Fmt.MemFmt": 2}, "converts no format"),
        ({"TileDMADst.Fmt.MemFmt": 0}, "converts no format"),
        ({"NE.MACCfg.NonlinearMode": 2}, "INT8 path"),
        ({"Common.ChCfg.InFmt": 3, "TileDMASrc.Fmt.MemFmt": 3}, "not a known format"),
        ({"NE.KernelCfg.PalettizedEn": 1}, "palette of KernelFmt 1"),
    ],
)
@pytest.mark.parametrize("stats_only", [False, True])
def test_what_is_not_emulated_is_refused_at_plan_time(dev, change, match, stats_only):
    prog = _program((1, 2, 1, 1), np.ones((1, 2, 1, 1), np.int8), "int8", "int8", "int8")
    td = prog.tds[0].copy().update(change)
    bad = Program.from_tds([td], kernel=prog.kernel)
    with pytest.raises(UnsupportedTask, match=match):
        dev.run(bad, {4: np.zeros((1, 2, 1, 1), np.int8)} if not stats_only else {}, stats_only=stats_only)


def test_fp16_input_with_integer_output_is_refused(dev):
    td = conv_td((1, 2, 1, 1), (1, 1, 1, 1), out_fmt="int8")
    prog = Program.from_tds([td], kernel=pack_weights(np.ones((1, 2, 1, 1), np.float16))[0])
    with pytest.raises(UnsupportedTask, match="FP16 path"):
        dev.run(prog, {4: np.zeros((1, 2, 1, 1), np.float16)})


# ---------------------------------------------------------------- the hostile-input invariants (c7c8773)
MUTATIONS = [
    {},
    {"NE.KernelCfg.KernelFmt": 2},
    {"NE.KernelCfg.KernelFmt": 0},
    {"Common.ChCfg.OutFmt": 3},
    {"TileDMADst.Fmt.MemFmt": 2},
    {"NE.MACCfg.NonlinearMode": 2},
    {"NE.KernelCfg.PalettizedEn": 1},
    {"NE.KernelCfg.SparseFmt": 1},
    {"NE.PostScale.PostRightShift": 31, "NE.AccBias.AccBiasShift": 31},
    {"NE.MACCfg.BiasMode": 1, "NE.AccBias.AccBias": 0x7FFF, "NE.AccBias.AccBiasShift": 31},
    {"NE.PostScale.PostScale": 0x7E00},  # a NaN scale: NaN results, 0 in an int8 output
    {"KernelDMASrc.CoeffBfrSize[0].MemBfrSize": 0},
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MUTATIONS), st.booleans(), st.integers(0, 2**32 - 1))
def test_int8_chains_fault_before_any_write(change, stats_only, seed):
    """Two INT8 tasks, the second one mutated: either the chain is refused while planning,
    and nothing was written (the first task's output neither), or both results are the
    reference's.  A stats-only run reports the same fault."""
    from fastane import DeviceFault
    from fastane.device import Task

    dev = Device(memory_size=8 << 20)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, 4, 3, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (3, 4, 1, 1)).astype(np.int8)
    t0 = conv_td(
        (1, 4, 3, 5), (1, 3, 3, 5), in_fmt="int8", kernel_fmt="int8", out_fmt="int8", dst=6, eon=False
    )
    t1 = conv_td((1, 4, 3, 5), (1, 3, 3, 5), in_fmt="int8", kernel_fmt="int8", out_fmt="int8", dst=7, nid=2)
    scale = {"NE.PostScale.PostScale": 0x3C00, "NE.PostScale.PostRightShift": 6}
    t0.update(scale)
    t1.update(scale).update(change)
    prog = Program.from_tds([t0, t1], kernel=pack_weights(w, fmt=1)[0])
    regions = {s: dev.alloc(0x1000, f"slot{s}") for s in (4, 6, 7)}
    dev.memory.view(regions[4].iova, 0x1000)[:] = 0
    view = dev.tensors(prog)[4].view(dev.memory.view(regions[4].iova, 0x1000))
    view[...] = x[0]
    for s in (6, 7):
        dev.memory.view(regions[s].iova, 0x1000)[:] = 0xA5
    dev.load(prog)  # the TDs and the kernel in memory first
    before = dev.memory.data.copy()
    task = dev.submit(prog, regions, stats_only=stats_only)
    if task.status == Task.FAULTED:
        with pytest.raises(DeviceFault):
            task.wait()
        assert np.array_equal(dev.memory.data, before), "a refused chain wrote memory"
        assert change, "the unmutated chain is valid"
        return
    with errstate(saturation="ignore"):
        task.wait()
    if stats_only:
        assert np.array_equal(dev.memory.data, before)
        return
    want = _expected(x, w, 1, 0, 1, scale, "int8")
    y0 = dev.tensors(prog)[6].view(dev.memory.view(regions[6].iova, 0x1000))
    assert np.array_equal(np.asarray(y0)[None], want)
    y1 = dev.tensors(prog)[7].view(dev.memory.view(regions[7].iova, 0x1000))
    w1 = w.view(np.uint8) if change.get("NE.KernelCfg.KernelFmt") == 0 else w  # the same bytes, read as uint8
    assert np.array_equal(np.asarray(y1)[None], _expected(x, w1, 1, 0, 1, {**scale, **change}, "int8"))
