"""The lowering as the roofline's planner: stats-only runs of real TDs vs the analytic plan,
traffic of tiled programs, stats-only vs computing Stats."""
import dataclasses

import numpy as np
import pytest

from fastane import compiler, workloads
from fastane.compiler import Conv
from fastane.device import Device
from fastane.roofline import model
from fastane.workloads import Conv2d, Matmul

COUNTERS = ("tasks", "macs", "control_dma_bytes", "kernel_dma_bytes", "tile_dma_src_bytes",
            "tile_dma_dst_bytes", "planar_ops")
DATA = ("saturated", "nan_outputs", "lut_underflow", "lut_overflow")


def counts(st):
    return {k: getattr(st, k) for k in COUNTERS}


@pytest.fixture(scope="module")
def plans():
    names = ("resnet50", "mobilenetv2", "bert-base", "llama-3.2-1b", "vit-b16")
    return {n: (model.plan_workload(n, planner="lowered"), model.plan_workload(n)) for n in names}


def test_resnet50_lowered_equals_the_analytic_plan_exactly(plans):
    lowered, analytic = plans["resnet50"]
    for lo, an in zip(lowered.layers, analytic.layers):
        assert counts(lo.stats) == counts(an.stats), lo.name
        assert [counts(t) for t in lo.stats.tasks_detail] == [counts(t) for t in an.stats.tasks_detail]


def test_lowered_and_analytic_agree_on_totals(plans):
    """MACs exactly; per layer, bytes exactly where the rules coincide, else the stated
    relation (docs/roofline.md, "The analytic plan and the lowering")."""
    for name, (lowered, analytic) in plans.items():
        assert lowered.stats.macs == analytic.stats.macs == lowered.workload.macs, name
        ratio = lowered.stats.dram_bytes / analytic.stats.dram_bytes
        assert 0.995 < ratio < 1.01, (name, ratio)
        for lo, an in zip(lowered.layers, analytic.layers):
            layer, a, b = lo.layer, lo.stats, an.stats
            assert a.macs == b.macs and a.planar_ops == b.planar_ops, lo.name
            if not isinstance(layer, (Conv2d, Matmul)):
                assert counts(a) == counts(b), lo.name         # planar: the analytic plan
                continue
            conv = compiler.layer_conv(layer)
            t = compiler.tile(conv)
            lut = compiler.ne_stage(conv.activation).lut
            batched = isinstance(layer, Matmul) and layer.B > 1
            if t.mode == "im2col":
                # the unfolded input: Cin x Kh x Kw planes of Hout x Wout pixels, in one row
                assert a.tile_dma_dst_bytes < b.tile_dma_dst_bytes, lo.name
            elif batched:
                # one grouped task (or a few) for all B products: fewer TDs, the same tiles
                assert a.tasks < b.tasks, lo.name
                assert (a.tile_dma_src_bytes, a.tile_dma_dst_bytes) == (b.tile_dma_src_bytes,
                                                                        b.tile_dma_dst_bytes), lo.name
                assert a.control_dma_bytes == 0x274 * a.tasks
            elif lut and a.tasks == b.tasks:
                # the LUT block rides in core 0's KMem: 0x80 bytes more KernelDMA per task
                assert a.kernel_dma_bytes == b.kernel_dma_bytes + 0x80 * a.tasks, lo.name
                assert dataclasses.replace(a, kernel_dma_bytes=0, tasks_detail=[]) == \
                    dataclasses.replace(b, kernel_dma_bytes=0, tasks_detail=[])
            elif lut:
                # ... and when the kernels filled a core's 64 KiB, one channel per core less
                assert a.tasks > b.tasks and a.dram_bytes > b.dram_bytes, lo.name
            else:
                assert counts(a) == counts(b), lo.name


def test_the_silu_gate_is_planned_as_its_lut_stage():
    gate = next(l for l in workloads.get("llama-3.2-1b").layers if l.name.endswith("gate_proj"))
    conv = compiler.layer_conv(gate)
    assert compiler.ne_stage(conv.activation).lut
    assert compiler.tile(conv).cout_t == 240          # 15 x 4 KiB kernels + the LUT per core


def test_traffic_of_a_tiled_conv_is_the_sum_of_its_tasks():
    conv = Conv(2, 256, 30, 200, 300, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="gelu")
    low = compiler.lower(conv)
    assert len(low.groups) > 1 and low.tiling.th < conv.hout
    _, st = compiler.execute(low, device=compiler._plan_device(), stats_only=True)
    d = st.tasks_detail
    assert len(d) == st.tasks == low.n_tasks
    for k in COUNTERS:
        assert getattr(st, k) == sum(getattr(t, k) for t in d), k
    # and each task moves what its tile and kernel group say (64-byte bursts per row)
    ru = lambda n: -(-n // 64) * 64  # noqa: E731
    for t, row in zip(d, low.tasks):
        g = low.groups[row["k"]]
        assert t.kernel_dma_bytes == sum(g.layout.sizes)
        assert t.tile_dma_src_bytes == g.cin * row["rows"] * ru(2 * row["cols"])
        assert t.tile_dma_dst_bytes == g.cout * row["th"] * ru(2 * row["tw"])
        assert t.macs == g.cout * row["th"] * row["tw"] * conv.cin_g * 9
    # weights re-fetched per spatial tile, activations re-read per kernel group
    tiles = low.n_tasks // (conv.n * len(low.groups))
    assert st.kernel_dma_bytes == conv.n * tiles * sum(sum(g.layout.sizes) for g in low.groups)
    in_plane = sum(int(r["rows"]) * ru(2 * int(r["cols"])) for r in low.tasks[:tiles])
    assert st.tile_dma_src_bytes == conv.n * len(low.groups) * conv.cin * in_plane


def test_stats_only_equals_computing_except_data_dependent_counters():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1, 16, 20, 70)) * 30).astype(np.float16)
    w = (rng.standard_normal((40, 16, 3, 3)) * 30).astype(np.float16)
    b = rng.standard_normal(40).astype(np.float16)
    small = compiler.Limits(kmem_core_bytes=2048, l2_bytes=64 << 10)
    dev = Device(memory_size=64 << 20)
    y, real, low = compiler.conv2d(x, w, b, pad=((1, 1), (1, 1)), activation="tanh", device=dev,
                                   limits=small)
    assert low.n_tasks >= 4 and real.saturated > 0 and real.lut_overflow > 0
    _, counted = compiler.execute(low, device=dev, stats_only=True)
    assert counted.tasks_detail and len(counted.tasks_detail) == len(real.tasks_detail)
    for c, r in zip(counted.tasks_detail, real.tasks_detail):
        assert counts(c) == counts(r)
        assert all(getattr(c, k) == 0 for k in DATA)
    assert counts(counted) == counts(real)


def test_roofline_cli_uses_the_lowering_by_default(capsys):
    from fastane.roofline import report
    import argparse
    p = argparse.ArgumentParser()
    report.add_arguments(p)
    assert report.run(p.parse_args(["bert-base", "--summary"])) == 0
    err = capsys.readouterr().err
    assert "(lowered)" in err
    assert report.run(p.parse_args(["bert-base", "--summary", "--analytic"])) == 0
    assert "(analytic)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="planner"):
        model.plan_workload("gpt2", planner="magic")
