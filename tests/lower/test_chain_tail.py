"""A chain's tail (fastane.lower.chain.Tail): a planar add / add + ReLU / multiply reads the
last convolution's result in L2 and only its other operand from DRAM; planned (stats-only)
and computed, the same program."""

import dataclasses

import numpy as np
import pytest

from fastane import api, lower, m1, networks
from fastane.layers import Conv2d, Eltwise, Workload
from fastane.lower import binary, chain
from fastane.model import Model
from fastane.model.placement import plan as mplan

from tests.helpers import l2


def _bottleneck(cout=512, hw=28):
    """ResNet-50's layer2 bottleneck: 1x1 reduce, 3x3, 1x1 expand (each one task)."""
    pad0, pad1 = ((0, 0), (0, 0)), ((1, 1), (1, 1))
    return [
        lower.Conv(1, cout, hw, hw, 128, 1, 1, (1, 1), (1, 1), pad0, 1, False, "relu"),
        lower.Conv(1, 128, hw, hw, 128, 3, 3, (1, 1), (1, 1), pad1, 1, False, "relu"),
        lower.Conv(1, 128, hw, hw, cout, 1, 1, (1, 1), (1, 1), pad0, 1, False, None),
    ]


def _bytes(tasks):
    return sum(t.tile_dma_src_bytes for t in tasks), sum(t.tile_dma_dst_bytes for t in tasks)


@pytest.mark.parametrize("op, relu", [("add", False), ("add", True), ("mul", False)])
def test_the_tail_reads_the_kept_result_in_l2(op, relu):
    convs = _bottleneck()
    plain = chain.plan_chain(convs)
    tailed = chain.plan_chain(convs, tail=chain.Tail(op, relu))
    assert len(tailed) == len(plain) + 1
    (last, src, res), (tail, tsrc, tres) = tailed[-2], tailed[-1]
    assert src and res and tsrc and not tres
    # the producer's result is not written to DRAM; the tail reads one operand (the other
    # is in L2) and writes the result, in the output's DRAM layout (64-byte rows)
    one = lower.build(convs[-1]).out_layout.nbytes
    assert _bytes(last) == (0, 0) and _bytes(plain[-1][0]) == (0, one)
    assert _bytes(tail) == (one, one)
    assert len(tail) == (2 if relu else 1)
    # the same layer on its own (fastane.lower.binary): both operands through DRAM
    alone = mplan.binary((1, 512, 28, 28), op, relu)
    assert alone.tile_dma_src_bytes == 2 * 512 * 28 * 28 * 2


def test_a_split_producer_keeps_its_tiles_for_the_tail_one_by_one():
    # ResNet-50's layer1 expand: 256 x 56 x 56 in two row tiles; each task keeps its tile in
    # L2 and a planar task after it adds the other operand's tile (with ReLU, whose planar
    # result is kept whole, it is tiled for half the L2: three tiles)
    pad0 = ((0, 0), (0, 0))
    convs = [lower.Conv(1, 64, 56, 56, 256, 1, 1, (1, 1), (1, 1), pad0, 1, False, None)]
    one = lower.build(convs[0]).out_layout.nbytes
    for relu, tasks in ((False, 2), (True, 3)):
        ch = chain.build_chain(convs, tail=chain.Tail("add", relu))
        assert ch.tail_chained and len(ch.layers[0].tasks) == tasks
        (conv, src, res), (tail, tsrc, tres) = chain.plan_chain(convs, tail=chain.Tail("add", relu))
        assert not src and res and tsrc and not tres
        assert len(conv) == tasks and len(tail) == tasks * (2 if relu else 1)
        assert _bytes(conv)[1] == 0 and _bytes(tail) == (one, one)
    # a batch of two is left out, and the conv goes through DRAM
    batch = [lower.Conv(2, 64, 56, 56, 256, 1, 1, (1, 1), (1, 1), pad0, 1, False, None)]
    ch = chain.build_chain(batch, tail=chain.Tail("add"))
    assert not ch.tail_chained and "batch" in ch.tail_link
    assert len(chain.plan_chain(batch, tail=chain.Tail("add"))) == 1
    with pytest.raises(ValueError, match="one of"):
        chain.Tail("sub")


def test_a_computed_tail_needs_its_second_operand():
    ch = chain.build_chain(_bottleneck(), tail=chain.Tail("add"))
    assert ch.tail_chained
    with pytest.raises(ValueError, match="second operand"):
        chain.execute_chain(ch, stats_only=False)


def _counts(tasks):
    """Per task, the counters the registers fix (not the data-dependent events)."""
    return [
        dataclasses.replace(t, nan_outputs=0, saturated=0, lut_underflow=0, lut_overflow=0, tasks_detail=[])
        for t in tasks
    ]


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


@pytest.mark.parametrize("op, relu", [("add", False), ("add", True), ("mul", False)])
def test_a_computed_tail_is_the_planned_program(op, relu):
    """The chain with its tail run on the computing device: the same tasks and bytes as
    the stats-only plan, the bits of the layers run one by one (the convolutions, then
    :func:`fastane.lower.binary.binary`)."""
    convs = _bottleneck(cout=64, hw=14)
    tail = chain.Tail(op, relu)
    rng = np.random.default_rng(5)
    x = _f16(rng, (1, 64, 14, 14))
    ws = [_f16(rng, (c.cout, c.cin, c.kh, c.kw), 0.2) for c in convs]
    b = _f16(rng, (1, 64, 14, 14))
    b[0, 0, 0, :3] = [np.inf, -np.inf, np.nan]  # specials propagate the same way
    y, stats = chain.execute_chain(chain.build_chain(convs, tail=tail), x, ws, None, b)
    planned = [t for tasks, _, _ in chain.plan_chain(convs, tail=tail) for t in tasks]
    assert _counts([t for s in stats for t in s.tasks_detail]) == _counts(planned)
    mid, _ = chain.execute_chain(chain.build_chain(convs, resident=False), x, ws)
    ref = binary.binary(op, mid, b, activation="relu" if relu else None)
    assert y.view(np.uint16).tolist() == ref.view(np.uint16).tolist()


def _residual_block():
    """A residual block's end whose shortcut is a 1x1 convolution of the block input,
    added to the second 3x3 convolution (640 x 32 x 32): the shortcut is one task whose
    whole 1.31 MB result the add reads in L2."""
    return Workload(
        "residual",
        "a residual block with a 1x1 shortcut",
        (
            Conv2d("conv1", 320, 640, 32, 32, 3, 3, 1, 1),
            Conv2d("conv2", 640, 640, 32, 32, 3, 3, 1, 1, follows=True),
            Conv2d("short", 320, 640, 32, 32, 1, 1, 1, 0),
            Eltwise("add", "add", (640, 32, 32), (640, 32, 32), 2, 1),
        ),
    )


def test_a_tail_over_a_whole_kept_result_fits_l2_and_computes_as_planned():
    """The model's stats-only plan (``Model.report(..., stats_only=True, residency=True)``,
    what ``fastane roofline`` counts) makes the shortcut and the add a tail; computed on
    the device it is the same tasks moving the same bytes.  The add moves 2 x 1.31 MB
    through TileDMA, more than the L2, in bands of TileHeight rows: its L2 footprint (the
    kept result, the other operand's band, the staging band) fits at disjoint addresses."""
    model = Model(networks.graph(_residual_block()))
    rep = model.report(networks.input_shapes(model.graph), stats_only=True, residency=True)
    recs = {r.layer.name: r for r in rep.layers}
    short, add = recs["short"], recs["add"]
    assert short.result_in_l2 and add.source_in_l2 and not add.result_in_l2
    assert len(short.stats.tasks_detail) == len(add.stats.tasks_detail) == 1
    conv = short.layer.problem()
    ch = chain.build_chain([conv], tail=chain.Tail("add"))
    rng = np.random.default_rng(3)
    x = _f16(rng, (1, 320, 32, 32))
    w = _f16(rng, (640, 320, 1, 1), 0.05)
    b = _f16(rng, (1, 640, 32, 32))
    y, stats = chain.execute_chain(ch, x, [w], None, b)
    computed = [t for s in stats for t in s.tasks_detail]
    assert _counts(computed) == _counts(short.stats.tasks_detail + add.stats.tasks_detail)
    ref = binary.add(api.conv2d(x, w), b)
    assert y.view(np.uint16).tolist() == ref.view(np.uint16).tolist()
    # the footprint, read from the registers as the device reads them
    tds = [td for p in ch.segments[-1].programs for td in p.tds]
    assert l2.overlaps(tds) == []
    kept = 640 * 32 * 64
    (conv_w, tail_w) = l2.windows(tds)
    assert conv_w["result"][1] == tail_w["source"][1] == kept
    tail_task = computed[-1]
    assert tail_task.tile_dma_src_bytes == tail_task.tile_dma_dst_bytes == kept
    assert tail_task.tile_dma_src_bytes + tail_task.tile_dma_dst_bytes > m1.L2_BYTES >= l2.footprint(tail_w)
    # a staging band moved onto the kept result is found
    bad = tds[-1].copy()
    bad["L2.ResultBase.Addr"] = tail_w["source"][0] // m1.L2_UNIT
    assert l2.overlaps([tds[0], bad]) == [(1, "result", "source")]
