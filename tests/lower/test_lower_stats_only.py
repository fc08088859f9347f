"""The lowering as the roofline's planner: stats-only runs of real TDs, traffic of tiled
programs, stats-only vs computing Stats.

(Until 7392208 (2026-12-01) this file, then tests/test_compiler_plan.py, also compared
the lowered plan with an analytic tiler; that tiler is gone: the roofline plans by
lowering only, on the one path, tests/networks/test_plan.py.)"""

import numpy as np
import pytest

from fastane import lower, workloads
from fastane.lower import Conv
from fastane.device import Device
from fastane.m1 import Limits
from fastane.networks.plan import analyze

COUNTERS = (
    "tasks",
    "macs",
    "control_dma_bytes",
    "kernel_dma_bytes",
    "tile_dma_src_bytes",
    "tile_dma_dst_bytes",
    "planar_ops",
)
DATA = ("saturated", "nan_outputs", "lut_underflow", "lut_overflow")


def counts(st):
    return {k: getattr(st, k) for k in COUNTERS}


@pytest.fixture(scope="module")
def plans():
    names = ("resnet50", "mobilenetv2", "bert-base", "llama-3.2-1b", "vit-b16")
    return {n: analyze(n, residency=False) for n in names}


def test_each_layer_is_its_lowered_program_counted(plans):
    """Per layer (each planned on its own, no residency): the plan's tasks are the Stats of
    the layer's lowered program run on a stats-only device (one per TD), MACs exactly the
    layer's."""
    for name, r in plans.items():
        wl = workloads.get(name)
        assert r.plan.stats.macs == wl.macs, name
        # attention's products (several right operands: not a chain source, no problem()):
        # one grouped convolution, a group per head
        heads = {l.name: Conv.matmul(l.M, l.K, l.N, l.B) for l in wl.layers if l.kind == "matmul" and l.B > 1}
        for lp, rec in zip(r.plan.layers, r.report.layers):
            a = lp.stats
            conv = (rec.layer.problem() if lp.lowered and rec.layer.problem else None) or heads.get(lp.name)
            if conv is None:
                if lp.lowered:  # a planar program (softmax, norm, pooling, add): no MACs
                    assert a.macs == 0 and a.tasks == len(a.tasks_detail) > 0 and a.planar_ops > 0, lp.name
                else:
                    assert a.tasks == 0 and lp.not_lowered, lp.name  # on the host, said so
                continue
            low = lower.build(conv)
            assert a.macs == conv.macs and a.tasks == low.n_tasks == len(a.tasks_detail), lp.name
            assert a.control_dma_bytes == 0x274 * a.tasks


def test_traffic_of_a_tiled_conv_is_the_sum_of_its_tasks():
    conv = Conv(2, 256, 30, 200, 300, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="gelu")
    low = lower.build(conv)
    assert len(low.groups) > 1 and low.tiling.th < conv.hout
    _, st = lower.execute(low, device=lower.stats_device(), stats_only=True)
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
    small = Limits(kmem_core_bytes=2048, l2_bytes=64 << 10)
    dev = Device(memory_size=64 << 20)
    y, real, low = lower.run_conv(x, w, b, pad=((1, 1), (1, 1)), activation="tanh", device=dev, limits=small)
    assert low.n_tasks >= 4 and real.saturated > 0 and real.lut_overflow > 0
    _, counted = lower.execute(low, device=dev, stats_only=True)
    assert counted.tasks_detail and len(counted.tasks_detail) == len(real.tasks_detail)
    for c, r in zip(counted.tasks_detail, real.tasks_detail):
        assert counts(c) == counts(r)
        assert all(getattr(c, k) == 0 for k in DATA)
    assert counts(counted) == counts(real)


def test_roofline_cli_uses_the_lowering(capsys):
    from tests.helpers.roofline import run_roofline

    assert run_roofline(["bert-base", "--summary"]) == 0
    err = capsys.readouterr().err
    assert "(lowered" in err
    assert run_roofline(["bert-base", "--summary", "--analytic"]) == 2
    assert "--analytic was removed" in capsys.readouterr().err
