"""A chain's tail (fastane.lower.chain.Tail): a planar add / add + ReLU / multiply reads the
last convolution's result in L2 and only its other operand from DRAM."""

import pytest

from fastane import lower
from fastane.lower import chain
from fastane.model.placement import plan as mplan


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


def test_a_chain_with_a_tail_is_planned_only():
    ch = chain.build_chain(_bottleneck(), tail=chain.Tail("add"))
    assert ch.tail_chained
    with pytest.raises(NotImplementedError, match="stats-only"):
        chain.execute_chain(ch, stats_only=False)
