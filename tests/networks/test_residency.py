"""Residency on the one path: a built-in network planned through the model front end keeps
in L2 what the layer-shape plan (``fastane.roofline.plan.plan_workload``) keeps, layer by
layer, where both see the same chains."""

import dataclasses
import re
from collections import Counter

import pytest

from fastane import networks, workloads
from fastane.networks.plan import analyze
from fastane.roofline.plan import plan_workload
from fastane.stats import PLAN_COUNTERS


def _figures(lp) -> tuple:
    """A layer's planned counters (tasks, MACs, planar ops, each DMA engine's bytes) and
    what stayed in L2."""
    return tuple(getattr(lp.stats, f) for f in PLAN_COUNTERS) + (lp.source_in_l2, lp.result_in_l2)


def _second_readers(wl) -> set:
    """The layers that follow the previous one (``follows``) although, in the network's
    graph, the previous one's output has another reader too (MobileNetV2's residual adds):
    the layer-shape plan keeps that output in L2 all the same; the one path writes it to
    DRAM, where its other reader finds it."""
    g = networks.graph(wl)
    readers = Counter(t for n in g.nodes for t in set(n.inputs))
    out = {re.sub(r"\.act\d*$", "", n.name): n.outputs[0] for n in g.nodes}
    return {
        b.name
        for a, b in zip(wl.layers, wl.layers[1:])
        if getattr(b, "follows", False) and readers[out[a.name]] > 1
    }


def _tail_runs(layers) -> set:
    """The layers of the one path's runs that end in a planar tail (an add or multiply
    reading the last convolution's result in L2: fastane.lower.chain.Tail), which the
    layer-shape plan does not plan."""
    out: set = set()
    for i, lp in enumerate(layers):
        if lp.source_in_l2 and lp.layer.op.split("+")[0] in ("Add", "Mul"):
            j = i
            while j > 0 and layers[j].source_in_l2:
                j -= 1
                out.add(layers[j].name)
    return out


@pytest.mark.parametrize(
    "name, second_readers, kept, tails",
    [
        ("resnet50", 0, 31, 16),
        ("mobilenetv2", 5, 43, 10),
        ("mobileone-s0", 0, 42, 0),
        ("mobilenetv3-small", 4, 29, 6),
    ],
)
def test_the_one_path_keeps_in_l2_what_the_layer_shape_plan_keeps(name, second_readers, kept, tails):
    wl = workloads.get(name)
    cut = _second_readers(wl)
    assert len(cut) == second_readers  # none cut: the layer-shape plan as the calibration has it
    same = dataclasses.replace(
        wl, layers=tuple(dataclasses.replace(l, follows=False) if l.name in cut else l for l in wl.layers)
    )
    old = {lp.name: lp for lp in plan_workload(same, residency=True).lowered}
    plan = analyze(wl).plan.lowered
    new = {lp.name: lp for lp in plan}
    assert set(old) <= set(new)
    tail_runs = _tail_runs(plan)
    assert (
        len([lp for lp in plan if lp.source_in_l2 and lp.layer.op.split("+")[0] in ("Add", "Mul")]) == tails
    )
    same_chains = [k for k in old if k not in tail_runs]
    assert {k: _figures(new[k]) for k in same_chains} == {k: _figures(old[k]) for k in same_chains}
    assert sum(lp.result_in_l2 for lp in new.values()) == kept


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
