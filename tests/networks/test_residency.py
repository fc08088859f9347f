"""Residency on the one path: a built-in network planned through the model front end keeps
in L2 each intermediate whose one reader is the next layer (runs of convolutions, a residual
add or multiply as a run's tail), and writes to DRAM what another layer also reads."""

import re
from collections import Counter

import pytest

from fastane import networks, workloads
from fastane.networks.plan import analyze


def _second_readers(wl) -> set:
    """The layers that follow the previous one (``follows``) although, in the network's
    graph, the previous one's output has another reader too (MobileNetV2's residual adds):
    the one path writes that output to DRAM, where its other reader finds it."""
    g = networks.graph(wl)
    readers = Counter(t for n in g.nodes for t in set(n.inputs))
    out = {re.sub(r"\.act\d*$", "", n.name): n.outputs[0] for n in g.nodes}
    return {
        b.name
        for a, b in zip(wl.layers, wl.layers[1:])
        if getattr(b, "follows", False) and readers[out[a.name]] > 1
    }


def _is_tail(lp) -> bool:
    """A planar add or multiply reading the last convolution's result in L2
    (fastane.lower.chain.Tail)."""
    return lp.source_in_l2 and lp.layer.op.split("+")[0] in ("Add", "Mul")


@pytest.mark.parametrize(
    "name, second_readers, kept, tails",
    [
        ("resnet50", 0, 31, 16),
        ("mobilenetv2", 5, 43, 10),
        ("mobileone-s0", 0, 42, 0),
        ("mobilenetv3-small", 4, 29, 6),
    ],
)
def test_the_one_path_keeps_in_l2_what_only_the_next_layer_reads(name, second_readers, kept, tails):
    wl = workloads.get(name)
    cut = _second_readers(wl)
    assert len(cut) == second_readers
    plan = analyze(wl).plan
    by_name = {lp.name: lp for lp in plan.layers}
    assert not any(by_name[n].source_in_l2 for n in cut)  # read from DRAM: another layer reads it too
    assert len([lp for lp in plan.lowered if _is_tail(lp)]) == tails
    assert sum(lp.result_in_l2 for lp in plan.lowered) == kept


def test_the_plan_keeps_chained_layers_on_chip_and_says_so():
    res, dram = analyze("mobilenetv2").plan, analyze("mobilenetv2", residency=False).plan
    assert res.stats.macs == dram.stats.macs and res.stats.kernel_dma_bytes == dram.stats.kernel_dma_bytes
    assert res.stats.dram_bytes < dram.stats.dram_bytes
    kept = [lp for lp in res.layers if lp.result_in_l2]
    assert kept and all(lp.stats.tile_dma_dst_bytes == 0 for lp in kept)
    fed = [lp for lp in res.layers if lp.source_in_l2]
    assert len(fed) == len(kept)
    # a tail reads its other operand from DRAM and writes the result, both in the output's
    # layout (64-byte rows); every other layer fed from L2 reads nothing from DRAM
    tails = {id(lp) for lp in fed if _is_tail(lp)}
    assert len(tails) == 10
    for lp in fed:
        if id(lp) in tails:
            assert lp.stats.tile_dma_src_bytes == lp.stats.tile_dma_dst_bytes > 0, lp.name
        else:
            assert lp.stats.tile_dma_src_bytes == 0, lp.name
    assert not any(lp.source_in_l2 or lp.result_in_l2 for lp in dram.layers)
    # outside the tails, the intermediates' bytes are exactly what residency saves
    pairs = [(a, b) for a, b in zip(dram.layers, res.layers) if id(b) not in tails]
    saved = sum(a.stats.tile_dma_dst_bytes for a, b in pairs if b.result_in_l2) + sum(
        a.stats.tile_dma_src_bytes for a, b in pairs if b.source_in_l2
    )
    assert sum(a.stats.dram_bytes - b.stats.dram_bytes for a, b in pairs) == saved


def test_a_model_file_chains_in_the_stats_only_plan_only_when_asked():
    pytest.importorskip("onnx")
    import fastane
    from fastane.model import zoo

    model = fastane.load_model(zoo.resnet(seed=0), weights=False)
    shapes = {"x": (1, 3, 32, 32)}
    flat = model.report(shapes, stats_only=True)
    kept = model.report(shapes, stats_only=True, residency=True)
    assert not any(r.source_in_l2 or r.result_in_l2 for r in flat.layers)
    chained = [i for i, r in enumerate(kept.layers) if r.source_in_l2 or r.result_in_l2]
    assert chained
    for i, (a, b) in enumerate(zip(flat.layers, kept.layers)):
        assert (a.placement, a.stats.tasks, a.stats.macs) == (b.placement, b.stats.tasks, b.stats.macs)
        if i not in chained:
            assert a.stats.dram_bytes == b.stats.dram_bytes
    # a kept tensor is neither written to DRAM nor read back
    saved = sum(a.stats.dram_bytes - b.stats.dram_bytes for a, b in zip(flat.layers, kept.layers))
    assert saved > 0 and kept.total.time_s < flat.total.time_s
    for i in chained:
        r = kept.layers[i]
        if r.result_in_l2:
            assert r.stats.tile_dma_dst_bytes == 0 and kept.layers[i + 1].source_in_l2
