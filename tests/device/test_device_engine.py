"""The engine on real TDs: the seed 1x1 conv, builder convs, an L2 chain, Stats."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.device import F16, bits, l2_chain, padded_conv_td, ref_conv, seed_program

from fastane import SaturationError, SaturationWarning, errstate
from fastane.device import AneLayout, Device, pack_weights, unpack_weights
from fastane.device.kernel_dma import KMem, lane_channels
from fastane.td import Program, conv_td


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=32 << 20)


# -- the seed --------------------------------------------------------------------------------
def test_seed_conv1x1_matches_the_mac_kernels_bit_for_bit(dev, corpus):
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((3, 8, 1, 1)) * 4).astype(F16)
    x = (rng.standard_normal((1, 8, 4, 1)) * 8).astype(F16)
    out = dev.run(seed_program(corpus, w), {4: x})
    assert list(out) == [5] and out[5].dtype == F16 and out[5].shape == (1, 3, 4, 1)
    assert np.array_equal(bits(out[5]), bits(ref_conv(x, w)))
    # and the value is the plain dot product where nothing rounds
    x1 = np.arange(32, dtype=F16).reshape(1, 8, 4, 1)
    w1 = np.ones((3, 8, 1, 1), F16)
    y1 = dev.run(seed_program(corpus, w1), {4: x1})[5]
    assert np.array_equal(y1[0, :, :, 0], np.tile(x1[0, :, :, 0].sum(0), (3, 1)))


def test_seed_stats_are_what_its_dma_registers_imply(dev, corpus):
    """Hand-computed from the seed TD's registers."""
    p = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    stats = dev.run(p, {4: np.zeros((1, 8, 4, 1), F16)}).stats
    # ControlDMA: one 0x274-byte TD
    assert stats.control_dma_bytes == 0x274 == 628
    # KernelDMA: lanes 0, 1, 2 enabled (Cout = 3), CoeffBfrSize 1 x 64 bytes each
    assert stats.kernel_dma_bytes == 3 * 1 * 64
    # TileDMASrc: Cin 8 x Hin 4 rows of Win 1 fp16 = 2 bytes, each row one 64-byte burst
    # (RowStride 1 x 64); the same as DepthStride 32 x 64 = 2048
    assert stats.tile_dma_src_bytes == 8 * 4 * 64 == 32 * 64
    # TileDMADst: Cout 3 x Hout 4 rows, one burst each = DepthStride 12 x 64
    assert stats.tile_dma_dst_bytes == 3 * 4 * 64 == 12 * 64
    # MAC: Cout 3 x Hout 4 x Wout 1 x Cin 8 x 1 x 1
    assert stats.macs == 96 and stats.tasks == 1 and stats.saturated == 0
    assert stats.dram_bytes == 628 + 192 + 2048 + 768
    assert stats.tasks_detail == [dataclasses.replace(stats, tasks_detail=[])]


def test_one_tap_macs_are_counted_apart(dev, corpus):
    # the seed's 1x1 convolution: every MAC one-tap (Stats.pointwise_macs); a 3x3 one: none
    p = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    stats = dev.run(p, {4: np.zeros((1, 8, 4, 1), F16)}).stats
    assert stats.pointwise_macs == stats.macs == 96
    td = padded_conv_td((1, 4, 6, 5), (1, 5, 6, 5), kernel=3, pad=(1, 1))
    kernel, _ = pack_weights(np.ones((5, 4, 3, 3), F16))
    out = dev.run(Program.from_tds([td], kernel=kernel), {4: np.zeros((1, 4, 6, 5), F16)})
    assert out.stats.macs == 5 * 6 * 5 * 4 * 9 and out.stats.pointwise_macs == 0


def test_seed_saturation_is_counted_and_surfaced(dev, corpus):
    x = np.full((1, 8, 4, 1), 128, F16)
    w = np.full((3, 8, 1, 1), 32, F16)  # 8 * 128 * 32 = 32768: past the top
    p = seed_program(corpus, w)
    with pytest.warns(SaturationWarning):
        out = dev.run(p, {4: x})
    assert np.all(out[5] == np.inf) and out.stats.saturated == 12
    with errstate(saturation="raise"), pytest.raises(SaturationError):
        dev.run(p, {4: x})
    with errstate(saturation="ignore"):
        assert dev.run(p, {4: -x}).stats.saturated == 0  # exactly -32768 is fine
    with errstate(saturation="ignore"):
        assert np.all(dev.run(p, {4: -x})[5] == -32768)


def test_inputs_are_rounded_to_fp16_and_checked(dev, corpus):
    p = seed_program(corpus, np.eye(3, 8, dtype=F16).reshape(3, 8, 1, 1))
    x = np.full((8, 4, 1), 1 / 3)  # CHW float64 is accepted
    out = dev.run(p, {4: x})[5]
    assert np.all(out == F16(1 / 3))
    with pytest.raises(ValueError, match="shape"):
        dev.run(p, {4: np.zeros((1, 8, 4, 2))})
    with pytest.raises(ValueError, match="not inputs"):
        dev.run(p, {4: x, 7: x})
    with pytest.raises(ValueError, match="missing"):
        dev.run(p, {})


# -- programs from the TD builder ------------------------------------------------------------
def test_kmem_layout_is_the_builders(dev):
    for cout, cin, k in ((3, 8, 1), (5, 4, 3), (40, 6, 3), (16, 2, 1), (17, 3, 1)):
        td = conv_td((1, cin, 8, 8), (1, cout, 9 - k, 9 - k), kernel=k)
        w = np.arange(cout * cin * k * k).reshape(cout, cin, k, k) % 97
        kernel, fields = pack_weights(w)
        assert {f: td[f] for f in fields} == fields, (cout, cin, k)
        kmem = KMem()
        for lane in range(16):  # what KernelDMA would load
            if fields[f"KernelDMASrc.CoeffDMAConfig[{lane}].En"]:
                off = fields[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] * 64
                n = fields[f"KernelDMASrc.CoeffBfrSize[{lane}].MemBfrSize"] * 64
                kmem.data[lane, :n] = np.frombuffer(kernel[off : off + n], np.uint8)
        assert np.array_equal(unpack_weights(kmem, cout, cin, k, k), w)
    assert list(lane_channels(40, 0)) == [0, 1, 2] and list(lane_channels(40, 13)) == [39]


def test_builder_3x3_conv_with_padding(dev):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 5)).astype(F16)
    w = rng.standard_normal((5, 4, 3, 3)).astype(F16)
    td = padded_conv_td((1, 4, 6, 5), (1, 5, 6, 5), kernel=3, pad=(1, 1))
    kernel, fields = pack_weights(w)
    assert {f: td[f] for f in fields} == fields
    out = dev.run(Program.from_tds([td], kernel=kernel), {4: x})
    assert np.array_equal(bits(out[5]), bits(ref_conv(x, w, pad=(1, 1))))
    assert out.stats.macs == 5 * 6 * 5 * 4 * 9
    assert out.stats.kernel_dma_bytes == 5 * 128  # 72 bytes per core, padded to 128


@pytest.mark.parametrize(
    "cin,cout,hw,k,stride,groups",
    [
        (6, 40, (7, 9), 3, (2, 1), 1),  # 3 channels per core
        (8, 8, (5, 5), 3, (1, 1), 4),  # grouped
        (16, 16, (4, 4), 1, (1, 1), 16),  # depthwise
        (3, 2, (5, 70), 2, (1, 2), 1),  # rows longer than one 64-byte burst
    ],
)
def test_builder_convs(dev, cin, cout, hw, k, stride, groups):
    rng = np.random.default_rng(cin * cout)
    h, w_ = hw
    x = rng.standard_normal((1, cin, h, w_)).astype(F16)
    w = rng.standard_normal((cout, cin // groups, k, k)).astype(F16)
    oh, ow = (h - k) // stride[0] + 1, (w_ - k) // stride[1] + 1
    td = conv_td(x.shape, (1, cout, oh, ow), kernel=k, stride=stride, groups=groups)
    kernel, _ = pack_weights(w)
    program = Program.from_tds([td], kernel=kernel)
    layout = AneLayout.of(x.shape)  # the input sits in the canonical layout
    assert dev.tensors(program)[4].strides == (layout.plane_stride, layout.row_stride, 2)
    out = dev.run(program, {4: x})
    assert np.array_equal(bits(out[5]), bits(ref_conv(x, w, stride=stride, groups=groups)))
    assert out.stats.macs == cout * oh * ow * (cin // groups) * k * k


def test_l2_chain_keeps_the_result_on_chip(dev):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 8, 4, 3)).astype(F16)
    w0 = rng.standard_normal((8, 8, 1, 1)).astype(F16)
    w1 = rng.standard_normal((3, 8, 1, 1)).astype(F16)
    out = dev.run(l2_chain(x.shape, w0, w1), {4: x})
    assert np.array_equal(bits(out[5]), bits(ref_conv(ref_conv(x, w0), w1)))
    first, second = out.stats.tasks_detail
    assert (first.tile_dma_dst_bytes, second.tile_dma_src_bytes) == (0, 0)  # never in DRAM
    assert first.tile_dma_src_bytes == 8 * 4 * 64 and second.tile_dma_dst_bytes == 3 * 4 * 64
    assert out.stats.tasks == 2 and out.stats.macs == 8 * 12 * 8 + 3 * 12 * 8


def test_relu_post_scale_and_bias_in_the_ne(dev, corpus):
    x = np.arange(-16, 16, dtype=F16).reshape(1, 8, 4, 1)
    w = np.ones((3, 8, 1, 1), F16)
    p = seed_program(corpus, w)
    td = (
        p.tds[0]
        .copy()
        .update(
            {
                "NE.MACCfg.NonlinearMode": 1,
                "NE.MACCfg.BiasMode": 1,
                "NE.AccBias.AccBias": 0xC800,  # -8
                "NE.PostScale.PostScale": 0x3800,
            }
        )
    )  # 0.5
    out = dev.run(Program.from_tds([td], kernel=p.kernel), {4: x})[5]
    s = x.astype(np.float64).sum(axis=1)[:, None]  # (1, 1, 4, 1)
    assert np.array_equal(out, np.broadcast_to(np.maximum((s - 8) * 0.5, 0), out.shape).astype(F16))


# -- stats-only ------------------------------------------------------------------------------
def test_stats_only_counts_the_same_without_computing(dev, corpus):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 4, 3)).astype(F16)
    w0 = rng.standard_normal((8, 8, 1, 1)).astype(F16)
    w1 = rng.standard_normal((3, 8, 1, 1)).astype(F16)
    td = padded_conv_td((1, 4, 6, 5), (1, 5, 6, 5), kernel=3, pad=(1, 1))
    programs = [
        (seed_program(corpus, w1), {4: x[:, :, :, :1]}),
        (
            Program.from_tds([td], kernel=pack_weights(np.ones((5, 4, 3, 3)))[0]),
            {4: rng.standard_normal((1, 4, 6, 5))},
        ),
        (l2_chain(x.shape, w0, w1), {4: x}),
    ]
    for program, inputs in programs:
        real = dev.run(program, inputs)
        before = dev.memory.data.copy()
        counted = dev.run(program, inputs, stats_only=True)
        assert counted.stats == real.stats and counted.stats.as_dict() == real.stats.as_dict()
        assert len(counted) == 0
        assert np.array_equal(dev.memory.data, before)  # nothing moved
    fast = Device(memory_size=8 << 20, stats_only=True)
    assert fast.run(programs[0][0]).stats == dev.run(*programs[0]).stats  # inputs optional


def test_device_stats_accumulate(corpus):
    d = Device(memory_size=8 << 20)
    p = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    for _ in range(3):
        d.run(p, {4: np.ones((1, 8, 4, 1))})
    assert d.stats.tasks == 3 and d.stats.macs == 3 * 96 and d.stats.tasks_detail == []


@settings(max_examples=30, deadline=None)
@given(
    cin_g=st.integers(1, 4),
    cout_g=st.integers(1, 6),
    groups=st.sampled_from([1, 1, 2, 3]),
    h=st.integers(1, 7),
    w=st.integers(1, 9),
    k=st.integers(1, 3),
    s=st.integers(1, 2),
    pad=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_random_builder_convs_are_bit_exact(cin_g, cout_g, groups, h, w, k, s, pad, seed):
    pad = min(pad, k - 1)
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    if oh < 1 or ow < 1:
        return
    rng = np.random.default_rng(seed)
    cin, cout = cin_g * groups, cout_g * groups
    x = (rng.standard_normal((1, cin, h, w)) * 4).astype(F16)
    wt = (rng.standard_normal((cout, cin_g, k, k)) * 4).astype(F16)
    td = padded_conv_td(x.shape, (1, cout, oh, ow), kernel=k, pad=(pad, pad), stride=(s, s), groups=groups)
    out = _DEV.run(Program.from_tds([td], kernel=pack_weights(wt)[0]), {4: x})
    assert np.array_equal(bits(out[5]), bits(ref_conv(x, wt, stride=(s, s), pad=(pad, pad), groups=groups)))


_DEV = Device(memory_size=8 << 20)
