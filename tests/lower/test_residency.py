"""Residency: a chain of convolutions lowered as a whole keeps its intermediates in L2
(fastane/lower/chain.py).  The chain moves fewer DRAM bytes than the layer-by-layer
lowering, and its result is bit-identical to the DRAM round trip and to the reference."""

import numpy as np
import pytest

from fastane import lower
from fastane.lower import Conv
from fastane.lower.chain import build_chain, execute_chain, link_reason
from fastane.device import Device

from tests.helpers.reference import ref_conv2d

F16 = np.float16


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F16)


def _chain():
    # 16x12x12 -conv3x3 relu-> 32x12x12 -1x1-> 24x12x12 -3x3 relu-> 8x12x12
    return [
        Conv(1, 16, 12, 12, 32, 3, 3, pad=((1, 1), (1, 1)), activation="relu"),
        Conv(1, 32, 12, 12, 24, 1, 1),
        Conv(1, 24, 12, 12, 8, 3, 3, pad=((1, 1), (1, 1)), activation="relu"),
    ]


def _ref(x, ws):
    y = x
    for w, act in zip(ws, ("relu", None, "relu")):
        p = (w.shape[2] - 1) // 2
        y = ref_conv2d(y, w, padding=p)
        if act == "relu":
            y = np.maximum(y, F16(0)).astype(F16)  # relu of the fp16 readout (no bias)
    return y


def test_chain_keeps_intermediates_in_l2_and_moves_fewer_dram_bytes():
    res, dram = build_chain(_chain()), build_chain(_chain(), resident=False)
    assert res.links == [None, None]
    assert len(res.segments) == 1 and len(dram.segments) == 3
    dev = Device(memory_size=64 << 20, stats_only=True)
    _, st_res = execute_chain(res, device=dev, stats_only=True)
    _, st_dram = execute_chain(dram, device=dev, stats_only=True)
    b_res = sum(s.dram_bytes for s in st_res)
    b_dram = sum(s.dram_bytes for s in st_dram)
    # the two intermediates are neither written nor read back
    mid = 2 * (32 * 12 * 64 + 24 * 12 * 64)  # each row whole 64-byte bursts
    assert b_dram - b_res == mid
    assert sum(s.macs for s in st_res) == sum(s.macs for s in st_dram)
    # per task: the kept layers write nothing, the reading ones read nothing through TileDMA
    tasks = [t for s in st_res for t in s.tasks_detail]
    assert tasks[0].tile_dma_dst_bytes == 0 and tasks[1].tile_dma_src_bytes == 0
    assert tasks[1].tile_dma_dst_bytes == 0 and tasks[2].tile_dma_src_bytes == 0


def test_chain_result_is_bit_identical_to_dram_round_trip_and_reference():
    rng = np.random.default_rng(11)
    x = _f16(rng, (1, 16, 12, 12))
    ws = [_f16(rng, (32, 16, 3, 3), 0.3), _f16(rng, (24, 32, 1, 1), 0.3), _f16(rng, (8, 24, 3, 3), 0.3)]
    x[0, 0, 0, :3] = [np.inf, -np.inf, np.nan]  # specials propagate the same way
    dev = Device(memory_size=64 << 20)
    y_res, _ = execute_chain(build_chain(_chain()), x, ws, device=dev)
    y_dram, _ = execute_chain(build_chain(_chain(), resident=False), x, ws, device=dev)
    ref = _ref(x, ws)
    assert y_res.view(np.uint16).tolist() == y_dram.view(np.uint16).tolist()
    assert y_res.view(np.uint16).tolist() == ref.view(np.uint16).tolist()


def test_link_reasons():
    a = lower.build(Conv(1, 16, 12, 12, 32, 3, 3, pad=((1, 1), (1, 1))))
    b = lower.build(Conv(1, 16, 12, 12, 8, 1, 1))
    assert "shapes" in link_reason(a, b)
    with pytest.raises(ValueError, match="not a chain"):
        build_chain([Conv(1, 16, 12, 12, 32, 1, 1), Conv(1, 16, 12, 12, 8, 1, 1)])
    with pytest.raises(TypeError):
        build_chain([object()])
    with pytest.raises(ValueError):
        build_chain([])


def test_too_big_for_l2_goes_through_dram():
    # 64 x 128 x 128 fp16 = 2 MiB: cannot be kept beside anything
    chain = build_chain([Conv(1, 8, 128, 128, 64, 1, 1), Conv(1, 64, 128, 128, 8, 1, 1)])
    assert chain.links[0] is not None and len(chain.segments) == 2
