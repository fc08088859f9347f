"""The one planner (fastane.networks.plan.analyze): every ANE layer of a network lowered and
counted on a stats-only device; KMem and L2 limits, traffic = sum of the tasks, hand cases,
and the layers it leaves on the host.

(Until 7392208 (2026-12-01) the hand cases ran against an analytic tiler in
fastane.roofline.model, then against the layer-shape planner fastane.roofline.plan; both
are gone, and the same assertions hold for the one path.)"""

import math
from types import SimpleNamespace

import pytest

from fastane import lower, m1, workloads
from fastane.lower import chain
from fastane.networks.plan import analyze
from fastane.roofline import model
from fastane.workloads import Conv2d, Eltwise, Matmul

from tests.helpers import l2
from tests.helpers.plans import planned

KMEM = 16 * 64 * 1024  # 1 MiB
KMEM_CORE = 64 * 1024
L2 = 2 * 1024 * 1024
TD = 0x274


def _row(w):
    return (2 * w + 63) // 64 * 64


def _one(layer):
    """The one path's plan of ``layer`` alone in a network: ``(LayerPlan, its placed
    layer)``."""
    r = analyze(workloads.Workload(layer.name, "one layer", (layer,)))
    (lp,) = [lp for lp in r.plan.layers if lp.name == layer.name]
    (rec,) = [rec for rec in r.report.layers if rec.layer.name == layer.name]
    return lp, rec.layer


def plan_layer(layer) -> list:
    """The per-task Stats of ``layer`` planned alone on the one path."""
    lp, _ = _one(layer)
    assert lp.lowered, lp.not_lowered
    return list(lp.stats.tasks_detail)


def tile_conv(conv):
    """The lowering's tiling of a workload layer, with the reduction chunk the hand count
    below takes (the lowering never splits it: one chunk of Cin / groups)."""
    c = _one(conv)[1].problem()
    t = lower.plan_tiling(c)
    return SimpleNamespace(cout_t=t.cout_t, groups_t=t.groups_t, th=t.th, tw=t.tw, cin_t=c.cin_g, mode=t.mode)


@pytest.fixture(scope="module")
def plans():
    return {n: planned(n) for n in workloads.names()}


def _chains(records) -> list:
    """``[(convolutions, Tail or None)]``: the runs of a plan's layers that keep a tensor
    in L2 for the next one (a producer whose result is kept, the layers reading it, and a
    tail, the planar layer that ends a run)."""
    out, run = [], []
    for rec in records:
        if rec.source_in_l2 and run:
            run.append(rec)
        elif rec.result_in_l2:
            run = [rec]
        if run and not rec.result_in_l2:
            *convs, last = run
            if last.layer.problem is None:  # a planar op on the last convolution's result
                tail = chain.Tail(last.layer.call, last.layer.nodes[-1].op == "relu")
            else:
                convs, tail = run, None
            out.append(([c.layer.problem() for c in convs], tail))
            run = []
    return out


def test_every_task_fits_kmem_and_l2(plans):
    """Every task's kernel fits KMem and its L2 footprint the 2 MiB L2.  A task that reads
    its source from DRAM and writes its result to DRAM holds both tiles, whole 64-byte
    rows, in L2 (the tiler's rule, docs/lower.md section 2): its TileDMA bytes are its
    footprint.  A task of a chain is not: it reads a tensor kept in L2, which TileDMA does
    not move, and a tail streams the other operand and its result in bands of TileHeight
    rows beside the kept tile (fastane.lower.chain), so its TileDMA bytes may exceed the
    L2 while its footprint does not.  Each chain is lowered again and every TD's L2 windows
    (as fastane/device/l2.py reads the registers, with the tensors kept for later tasks)
    must end inside the L2 at disjoint addresses (tests.helpers.l2)."""
    for name, r in plans.items():
        for lp in r.plan.lowered:
            for t in lp.stats.tasks_detail:
                assert t.tasks == 1
                assert t.control_dma_bytes == TD
                assert t.kernel_dma_bytes <= KMEM, (name, lp.name)
                if not (lp.source_in_l2 or lp.result_in_l2):
                    assert t.tile_dma_src_bytes + t.tile_dma_dst_bytes <= L2, (name, lp.name)
        for convs, tail in _chains(r.report.layers):
            ch = chain.build_chain(convs, tail=tail)
            assert ch.tail_link is None and all(link is None for link in ch.links), (name, ch.describe())
            for seg in ch.segments:
                assert l2.overlaps([td for p in seg.programs for td in p.tds]) == [], (name, ch.describe())


def test_each_core_kernel_share_fits_64k(plans):
    for name, r in plans.items():
        for rec in r.report.layers:
            conv = rec.layer.problem() if rec.placement == "ane" and rec.layer.problem else None
            if conv is None:
                continue
            t = lower.plan_tiling(conv)
            per_core = math.ceil(t.cout_t / 16) * conv.cin_g * conv.kh * conv.kw * 2
            assert per_core <= KMEM_CORE, (name, rec.layer.name, t)


def test_tasks_add_up_to_the_layer(plans):
    for name, r in plans.items():
        wl = workloads.get(name)
        macs = {layer.name: layer.macs for layer in wl.layers}
        for lp in r.plan.lowered:
            if lp.name in macs:  # a layer of the workload (not a slice of one)
                assert lp.stats.macs == macs[lp.name], (name, lp.name)
            assert lp.stats.tasks == len(lp.stats.tasks_detail)
        assert r.plan.stats.macs == wl.macs  # the planar layers have no MACs


def test_decode_matmul_by_hand():
    # (1 x 4096) @ (4096 x 4096): one output channel's kernel is 4096 x 2 = 8 KiB, so a
    # core holds 8 and a task 16 x 8 = 128 channels (1 MiB): 4096 / 128 = 32 tasks.
    tasks = plan_layer(Matmul("m", 1, 1, 4096, 4096))
    assert len(tasks) == 32
    assert all(t.kernel_dma_bytes == 128 * 4096 * 2 for t in tasks)  # 1 MiB each
    assert all(t.tile_dma_src_bytes == 4096 * 64 for t in tasks)  # x re-read per group
    assert all(t.tile_dma_dst_bytes == 128 * 64 for t in tasks)
    s = model.sum_stats(tasks)
    assert s.kernel_dma_bytes == 32 * 2**20  # 32 MiB = the weights once
    assert s.tile_dma_src_bytes == 32 * 256 * 1024  # 8 MiB of padded activations
    assert s.tile_dma_dst_bytes == 4096 * 64  # 256 KiB
    assert s.control_dma_bytes == 32 * 628
    assert s.macs == 4096 * 4096


def test_small_conv_is_one_task_by_hand():
    # 3x3, 64 -> 64, 56 x 56, pad 1: kernel 64 x 64 x 9 x 2 = 73,728 B fits one group;
    # a row is 56 x 2 = 112 B -> 128 B; in + out = 64 x 58 x 128 + 64 x 56 x 128 < 2 MiB
    (t,) = plan_layer(Conv2d("c", 64, 64, 56, 56, 3, 3, 1, 1))
    assert t.kernel_dma_bytes == 73_728
    assert t.tile_dma_src_bytes == 64 * 56 * 128 == 458_752  # rows clipped at the border
    assert t.tile_dma_dst_bytes == 458_752
    assert t.macs == 64 * 56 * 56 * 64 * 9 == 115_605_504


def _hand_traffic(conv: Conv2d, t):
    """Traffic of conv under tiling t, by explicit loops (no numpy, no shared code)."""
    cin_pg, cout_pg = conv.cin // conv.groups, conv.cout // conv.groups
    kk = conv.kh * conv.kw
    # kernel groups: (output channels, conv groups read)
    groups = []
    if t.groups_t:
        g = 0
        while g < conv.groups:
            n = min(t.groups_t, conv.groups - g)
            groups.append((n * cout_pg, n))
            g += n
    else:
        for _ in range(conv.groups):
            c = 0
            while c < cout_pg:
                n = min(t.cout_t, cout_pg - c)
                groups.append((n, 1))
                c += n
    chunks, c = [], 0
    while c < cin_pg:
        chunks.append(min(t.cin_t, cin_pg - c))
        c += chunks[-1]
    kernel = src = dst = tasks = planar = 0
    for cout, ng in groups:
        for y0 in range(0, conv.hout, t.th):
            th = min(t.th, conv.hout - y0)
            lo = max(0, y0 * conv.stride - conv.pad)
            hi = min(conv.h - 1, (y0 + th - 1) * conv.stride - conv.pad + conv.kh - 1)
            for x0 in range(0, conv.wout, t.tw):
                tw = min(t.tw, conv.wout - x0)
                clo = max(0, x0 * conv.stride - conv.pad)
                chi = min(conv.w - 1, (x0 + tw - 1) * conv.stride - conv.pad + conv.kw - 1)
                for cc in chunks:
                    m = -(-cout // 16)  # channels per core (lane)
                    lanes = -(-cout // m)
                    kernel += lanes * ((m * cc * kk * 2 + 63) // 64 * 64)
                    src += ng * cc * (hi - lo + 1) * _row(chi - clo + 1)
                    dst += cout * th * _row(tw)
                    tasks += 1
                for _ in range(len(chunks) - 1):  # partial sums: read 2, write 1
                    src += 2 * cout * th * _row(tw)
                    dst += cout * th * _row(tw)
                    planar += cout * th * tw
    return kernel, src, dst, planar


@pytest.mark.parametrize(
    "conv",
    [
        Conv2d("c3s2", 128, 256, 56, 56, 3, 3, 2, 1),
        Conv2d("c7s2", 3, 64, 224, 224, 7, 7, 2, 3),
        Conv2d("big", 256, 512, 56, 56, 3, 3, 1, 1),  # several groups and tiles
        Conv2d("dw", 960, 960, 14, 14, 3, 3, 1, 1, groups=960),
        Conv2d("g4", 64, 128, 30, 30, 3, 3, 1, 1, groups=4),
        Conv2d("wide", 2048, 2048, 1, 512),  # prefill-like: column tiles
    ],
    ids=lambda c: c.name,
)
def test_traffic_of_a_tiled_conv_equals_the_sum_of_its_tasks(conv):
    t = tile_conv(conv)
    tasks = plan_layer(conv)
    kernel, src, dst, planar = _hand_traffic(conv, t)
    s = model.sum_stats(tasks)
    assert (s.kernel_dma_bytes, s.tile_dma_src_bytes, s.tile_dma_dst_bytes) == (kernel, src, dst)
    assert s.planar_ops == planar
    assert s.dram_bytes == kernel + src + dst + len(tasks) * TD
    assert s.macs == conv.macs


def test_kernel_bytes_follow_the_kernel_dma_lane_layout():
    # Cout 3, Cin 8, 1x1 (the seed conv): 3 lanes of one channel, each buffer 16 B -> 64 B
    (t,) = plan_layer(Conv2d("seed", 8, 3, 4, 1))
    assert t.kernel_dma_bytes == 3 * 64
    # Cout 40, Cin 100, 3x3: m = ceil(40 / 16) = 3 channels a lane, ceil(40 / 3) = 14 lanes,
    # each round_up(3 x 100 x 9 x 2 = 5400, 64) = 5440 B
    (t,) = plan_layer(Conv2d("c", 100, 40, 8, 8, 3, 3, 1, 1))
    assert t.kernel_dma_bytes == 14 * 5440
    from fastane.device import kernel_dma

    assert t.kernel_dma_bytes == sum(
        b and kernel_dma.lane_stride(40, 100, 3, 3) for b in kernel_dma.lane_bytes(40, 100, 3, 3)
    )


def test_split_k_is_not_lowered_and_says_why():
    # 40000 x 2 B > 64 KiB: one output channel's kernel does not fit a core; the lowering
    # does not split the reduction (it would change the numerics), so the plan says so
    conv = Conv2d("splitk", 40000, 64, 1, 3)
    lp, _ = _one(conv)
    assert not lp.lowered and "does not fit a core's 64 KiB KMem" in lp.not_lowered
    w = workloads.Workload("w", "one split-K layer", (conv, Conv2d("ok", 8, 3, 4, 1)))
    p = analyze(w).plan
    assert [lp.name for lp in p.not_lowered] == ["splitk"] and "split the reduction" in p.not_lowered[
        0
    ].not_lowered
    assert p.stats.tasks == 1 and p.stats.macs == Conv2d("ok", 8, 3, 4, 1).macs


def test_only_the_windowed_pooling_is_left_off_the_ane(plans):
    # ResNet-50's planar layers are on the ANE (the residual adds: fastane.lower.binary, or
    # a chain's tail; the global average pool: a row mean) but the 3x3/2 max pool
    p = plans["resnet50"].plan
    assert [lp.name for lp in p.not_lowered] == ["maxpool"]
    assert all(lp.stats.tasks == 0 for lp in p.not_lowered)
    assert "windowed pooling" in p.not_lowered[0].not_lowered


#: the layers a built-in workload leaves off the ANE: ResNet-50's windowed max pool alone
LEFT_OFF = {"resnet50": ["maxpool"]}


@pytest.mark.parametrize("name", workloads.names())
def test_every_layer_of_a_builtin_workload_is_planned_and_lowered(plans, name):
    p = plans[name].plan
    assert [lp.name for lp in p.not_lowered] == LEFT_OFF.get(name, [])
    planned = {lp.name for lp in p.layers}
    for layer in workloads.get(name).layers:  # each one in the plan (a sliced matmul as <name>.0 ...)
        assert layer.name in planned or f"{layer.name}.0" in planned, layer.name
    assert all(lp.stats.tasks > 0 for lp in p.lowered)


def test_softmax_norms_and_global_pooling_are_planned_by_lowering():
    """The one path counts the row operations' programs (fastane.lower.rows): the same
    Stats as the lowering's stats-only run."""
    from fastane.lower import rows

    cases = [
        (Eltwise("sm", "softmax", (12 * 64, 1, 512), ops_per_out=4), rows.RowOp("softmax", 768, 512)),
        (
            Eltwise("ln", "layernorm", (768, 1, 64), ops_per_out=4),
            rows.RowOp("layer_norm", 64, 768, 1e-5, True, True),
        ),
        (Eltwise("rn", "rmsnorm", (4096, 1, 8), ops_per_out=4), rows.RowOp("rms_norm", 8, 4096, 1e-5, True)),
        (
            Eltwise("gap", "avgpool", (2048, 7, 7), (2048, 1, 1), ops_per_out=49),
            rows.RowOp("reduce_mean", 2048, 49),
        ),
    ]
    for layer, problem in cases:
        tasks = plan_layer(layer)
        want = rows.plan(problem)
        assert len(tasks) == want.tasks > 0 and sum(t.planar_ops for t in tasks) == want.planar_ops > 0
        assert sum(t.tile_dma_src_bytes for t in tasks) == want.tile_dma_src_bytes
    lp, _ = _one(Eltwise("long", "softmax", (4, 1, 20000)))
    assert not lp.lowered and "16384" in lp.not_lowered


def test_limits_are_the_m1s():
    assert m1.LIMITS.kmem_bytes == KMEM and m1.LIMITS.l2_bytes == L2 and m1.TD_SIZE == TD
