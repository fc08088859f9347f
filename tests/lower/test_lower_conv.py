"""The lowering (fastane.lower): tiling, TDs that decode and respect the limits, results
bit-identical to the reference, the program cache, the fused NE stage, the folding golden."""

import threading

import numpy as np
import pytest
from tests.helpers.device import bits
from tests.helpers.reference import ref_conv2d, ref_matmul
from tests.helpers.lut_reference import ref_ne

import fastane
from fastane import activations, lower
from fastane.lower import Conv
from fastane.m1 import Limits
from fastane.device import Device
from fastane.device import l2 as l2mod
from fastane.device import mac as macmod
from fastane.device.kernel_dma import KMEM_BYTES, LANES
from fastane.kernels.conv import conv2d_q16
from fastane.kernels.mac import readout
from fastane.td import TaskDescriptor
from fastane.td.program import parse_chain

F16 = np.float16
#: compiler limits small enough that tiny convolutions need tiles and kernel groups, so
#: the pure-Python reference can check every path (the device still checks the real ones)
SMALL = Limits(kmem_core_bytes=256, l2_bytes=8192)
TINY = Limits(kmem_core_bytes=128, l2_bytes=4096)


def f16(rng, shape, scale=4.0):
    return (rng.standard_normal(shape) * scale).astype(F16)


def kernel_conv(x, w, stride=(1, 1), pad=((0, 0), (0, 0)), dil=(1, 1), groups=1):
    """The MAC kernels called directly (proven against tests/helpers/reference.py in test_conv_kernel)."""
    (pt, pb), (pl, pr) = pad
    co, cg, kh, kw = w.shape
    n, c, h, wd = x.shape
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    acc, flag = conv2d_q16(
        np.ascontiguousarray(x, np.float64),
        np.ascontiguousarray(w, np.float64),
        stride[0],
        stride[1],
        dil[0],
        dil[1],
        pt,
        pl,
        oh,
        ow,
        groups,
        False,
    )
    y = np.empty(acc.shape)
    readout(acc, flag, y)
    return y.astype(F16)


def check_program(low):
    """Every TD decodes from the program's bytes and respects KMem, L2 and SPEC 5 limits."""
    n = 0
    for p in low.programs:
        tds, _ = parse_chain(p.td_stream)
        assert [t.words for t in tds] == [t.words for t in p.tds]
        n += len(tds)
        for i, td in enumerate(tds):
            regs = TaskDescriptor.from_bytes(td.to_bytes()).fields()
            g = macmod.geometry(regs, f"TD {i}")
            assert max(g.cin, g.cout) <= 65536 and max(g.hin, g.win, g.hout, g.wout) <= 16384
            lanes = [
                regs[f"KernelDMASrc.CoeffBfrSize[{k}].MemBfrSize"] * 64
                for k in range(LANES)
                if regs[f"KernelDMASrc.CoeffDMAConfig[{k}].En"]
            ]
            assert lanes and max(lanes) <= KMEM_BYTES and sum(lanes) <= LANES * KMEM_BYTES
            plan = l2mod.plan(regs, g, 2, 2, {}, f"TD {i}")  # raises L2Overflow
            assert plan.result[0] + plan.result[1] <= 2 << 20
            assert regs["Header.RBase0"] == lower.lowered.SLOT_INPUT
            assert regs["Header.WBase"] == lower.lowered.SLOT_OUTPUT
            assert regs["Header.KBase0"] == lower.lowered.SLOT_KERNEL
            assert regs["Header.EON"] == (i == len(tds) - 1)
    assert n == low.n_tasks
    return n


# ------------------------------------------------------------------------------ tiling
@pytest.mark.parametrize(
    "conv",
    [
        Conv.matmul(1, 2048, 128256),  # lm_head: 501 kernel groups
        Conv.matmul(600, 4096, 16),  # K x M too big for L2: column tiles
        Conv(1, 256, 56, 56, 256, 3, 3, pad=((1, 1), (1, 1))),
        Conv(1, 3, 224, 224, 64, 7, 7, (2, 2), pad=((3, 3), (3, 3)), activation="relu"),
        Conv(1, 96, 112, 112, 96, 3, 3, (2, 2), pad=((1, 1), (1, 1)), groups=96, activation="relu6"),
        Conv(1, 3, 224, 224, 768, 16, 16, (16, 16)),  # stride 16: unfolded on the host
        Conv.matmul(4, 64, 512, groups=8),  # attention scores, 8 heads
        Conv(2, 64, 30, 1000, 64, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="tanh"),
    ],
)
def test_lowered_programs_decode_and_respect_the_limits(conv):
    low = lower.build(conv)
    n = check_program(low)
    assert low.n_tasks == n >= 1
    # and the device accepts every task (stats-only: it checks KMem, L2, DMA ranges)
    _, st = lower.execute(low, device=lower.stats_device(), stats_only=True)
    assert st.tasks == n and st.macs == conv.macs
    assert st.control_dma_bytes == 0x274 * n


def test_tiling_rules():
    lm = lower.plan_tiling(Conv.matmul(1, 2048, 128256))
    assert (lm.cout_t, lm.th, lm.tw) == (256, 1, 1)  # 16 ch x 4 KiB per core
    col = lower.plan_tiling(Conv.matmul(600, 4096, 16))
    assert col.th == 1 and col.tw < 600 and col.tw % 32 == 0  # 64-byte aligned column tiles
    assert lower.plan_tiling(Conv(1, 3, 224, 224, 768, 16, 16, (16, 16))).mode == "im2col"
    assert lower.plan_tiling(Conv(1, 3, 9, 9, 4, 3, 3, pad=((3, 3), (0, 0)))).mode == "padded"
    assert lower.plan_tiling(Conv(1, 3, 9, 9, 4, 3, 3, pad=((1, 1), (2, 2)))).mode == "direct"
    # the LUT block and a bias vector take KMem: 4 KiB kernels no longer fit 16 per core
    assert lower.plan_tiling(Conv.matmul(1, 2048, 8192, activation="tanh")).cout_t == 240
    assert lower.plan_tiling(Conv.matmul(1, 2048, 8192, bias=True)).cout_t == 240
    # attention heads stay together: one grouped task
    assert lower.build(Conv.matmul(4, 64, 512, groups=8)).n_tasks == 1


def test_unfold_beyond_its_limit_is_not_implemented():
    # a 32 x 32 window (beyond the TD's 31) over 64 x 256 x 256 would unfold to 6.6 GB on the
    # host: refused before anything is allocated; the same window over 64 x 40 x 40 unfolds
    with pytest.raises(NotImplementedError, match="max_unfold_bytes"):
        lower.plan_tiling(Conv(1, 64, 256, 256, 64, 32, 32, groups=64))
    assert lower.plan_tiling(Conv(1, 64, 40, 40, 64, 32, 32, groups=64)).mode == "im2col"
    with pytest.raises(NotImplementedError, match="1 MiB"):
        lower.plan_tiling(Conv(1, 64, 40, 40, 64, 32, 32, groups=64), Limits(max_unfold_bytes=1 << 20))


def test_reduction_is_never_split():
    with pytest.raises(NotImplementedError, match="does not fit a core's 64 KiB KMem.*numerics"):
        lower.plan_tiling(Conv(1, 4096, 3, 3, 8, 3, 3))  # 72 KiB for one channel
    with pytest.raises(NotImplementedError, match="KMem"):
        fastane.matmul(np.ones((1, 40000), F16), np.ones((40000, 1), F16))
    x = np.ones((1, 16384, 1, 1), F16)
    with pytest.raises(NotImplementedError, match="split"):
        fastane.conv2d(x, np.ones((1, 16384, 3, 3), F16), padding=1)


# ------------------------------------------------------------------------------ bit exactness
@pytest.mark.parametrize(
    "kw",
    [
        dict(stride=(1, 1), pad=((1, 1), (1, 1)), dil=(1, 1), groups=1),
        dict(stride=(2, 2), pad=((2, 1), (0, 3)), dil=(1, 1), groups=1),
        dict(stride=(1, 2), pad=((0, 0), (0, 0)), dil=(2, 1), groups=2),
        dict(stride=(4, 1), pad=((0, 0), (1, 1)), dil=(1, 1), groups=1),  # im2col
        dict(stride=(1, 1), pad=((3, 3), (0, 0)), dil=(1, 1), groups=1),  # padded
    ],
)
def test_tiled_conv_is_bit_identical_to_the_reference(kw):
    """Spatial tiles (row and column) and several kernel groups per conv group, with the
    small limits, checked against the pure-Python reference."""
    rng = np.random.default_rng(len(str(kw)))
    x = f16(rng, (2, 4, 5 + 2 * (kw["dil"][0] - 1), 40))
    w = f16(rng, (40, 4 // kw["groups"], 3, 2))
    x[0, 1, 2, 3] = np.inf  # NaN products, saturations
    x[1, 0, 0, 0] = 3000
    y, st, low = lower.run_conv(x, w, None, kw["stride"], kw["pad"], kw["dil"], kw["groups"], limits=TINY)
    want = ref_conv2d(x, w, stride=kw["stride"], padding=kw["pad"], dilation=kw["dil"], groups=kw["groups"])
    assert np.array_equal(bits(y), bits(want))
    t, e = low.tiling, low.eff
    assert len(low.groups) >= 2  # several kernel groups
    assert t.th < e.hout or t.tw < e.wout  # spatial tiles
    assert st.tasks == low.n_tasks == 2 * len(low.groups) * -(-e.hout // t.th) * -(-e.wout // t.tw)


def test_tiled_conv_with_the_real_limits():
    """A dense conv that needs kernel groups (KMem) and row tiles (L2) with the M1's limits;
    its inputs are re-read per kernel group, its weights re-fetched per tile."""
    rng = np.random.default_rng(3)
    x = f16(rng, (1, 2048, 20, 3), 1.0)
    w = f16(rng, (272, 2048, 1, 1), 0.05)
    y, st, low = lower.run_conv(x, w)
    assert len(low.groups) == 2 and low.tiling.th < 20 and low.n_tasks == 4
    assert np.array_equal(bits(y), bits(kernel_conv(x, w)))
    # a matmul whose rows need 64-byte aligned column tiles
    a, b = f16(rng, (600, 4096), 1.0), f16(rng, (4096, 16), 0.1)
    y, st, low = lower.run_matmul(a[None], b[None], np.zeros(1, np.int64), np.zeros(1, np.int64))
    assert low.tiling.tw < 600 and low.n_tasks > 1
    assert np.array_equal(
        bits(y[0]), bits(kernel_conv(a.T[None, :, None, :], b.T[:, :, None, None])[0, :, 0, :].T)
    )


def test_matmul_layouts_are_bit_identical_to_the_reference():
    rng = np.random.default_rng(5)
    a = f16(rng, (3, 5, 70))
    b = f16(rng, (3, 70, 6))
    a[1, 2, 3] = np.nan
    z3 = np.arange(3, dtype=np.int64)
    cases = [
        (a, b[:1], z3, z3 * 0, lambda i: (a[i], b[0])),  # b shared: rows along S
        (a[:1], b, z3 * 0, z3, lambda i: (a[0], b[i])),  # a shared: roles swap
        (a, b, z3, z3, lambda i: (a[i], b[i])),
    ]  # grouped: one group a product
    for a3, b3, ia, ib, pick in cases:
        y, st, low = lower.run_matmul(a3, b3, ia, ib, limits=SMALL)
        want = np.stack([ref_matmul(*pick(i)) for i in range(3)])
        assert np.array_equal(bits(y), bits(want))


def test_attention_batch_is_a_grouped_task():
    rng = np.random.default_rng(6)
    q, k = f16(rng, (64, 32, 16)), f16(rng, (64, 16, 32))
    y = fastane.matmul(q, k)
    st = fastane.last_stats()
    assert st.tasks == 1 and len(st.tasks_detail) == 1 and st.macs == 64 * 32 * 16 * 32
    idx = np.arange(64)
    want = np.stack(
        [kernel_conv(q[i].T[None, :, None, :], k[i].T[:, :, None, None])[0, :, 0, :].T for i in idx]
    )
    assert np.array_equal(bits(y), bits(want))


# ------------------------------------------------------------------------------ the NE stage
def ref_activation(act, z):
    """The NE stage of ``act`` on fp16 ``z`` by the exact-fraction reference (fp16 array)."""
    st = lower.ne_stage(act)
    nl = {"identity": 0, "relu": 1, "lut": 2}[st.nonlinear]
    words = st.block.to_words() if st.block is not None else None
    out = [ref_ne(float(v), None, st.post_scale, nl, words) for v in z.ravel()]
    return np.array(out, np.uint16).view(F16).reshape(z.shape)


@pytest.mark.parametrize("act", ["relu"] + list(lower.problems.SINGLE_STAGE))
def test_fused_bias_and_activation_match_an_independent_computation(act):
    """readout -> + bias (fp16, RNE) -> the activation, by the exact-fraction reference."""
    rng = np.random.default_rng(sum(map(ord, act)))
    x, w = f16(rng, (1, 6, 5, 4), 1.0), f16(rng, (40, 6, 3, 3), 0.5)
    bias = f16(rng, (40,), 2.0)
    with fastane.errstate(lut_range="ignore"):
        y = fastane.conv2d(x, w, bias, padding=1, activation=act)
        z = (ref_conv2d(x, w, padding=1).astype(np.float64) + bias[None, :, None, None]).astype(F16)
    want = ref_activation(act, z)
    assert np.array_equal(bits(y), bits(want))
    # the same through linear, with tiles and kernel groups
    xl, wl, bl = f16(rng, (7, 33), 0.3), f16(rng, (50, 33), 0.3), f16(rng, (50,), 1.0)
    low_y, _, low = lower.run_matmul(
        xl[None],
        wl.T[None],
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        bias16=bl,
        activation=act,
        limits=Limits(kmem_core_bytes=320),
    )
    want = ref_activation(act, (ref_matmul(xl, wl.T).astype(np.float64) + bl).astype(F16))
    assert len(low.groups) > 1
    assert np.array_equal(bits(low_y[0]), bits(want))


def test_multi_stage_activations_and_unknown_names():
    x, w = np.ones((1, 2, 3, 3)), np.ones((2, 2, 1, 1))
    for act in ("sigmoid", "silu"):  # NE stage + planar tasks (tests/lower/test_lower_eltwise.py)
        y = fastane.conv2d(x, w, activation=act)
        assert np.array_equal(bits(y), bits(getattr(activations, act)(np.full((1, 2, 3, 3), 2.0))))
    with pytest.raises(ValueError, match="unknown activation"):
        fastane.linear(np.ones((2, 2)), np.ones((2, 2)), activation="swish")
    # a table of one's own runs as given
    blk = fastane.lut.get_block("tanh")
    y = fastane.conv2d(x, w, activation=blk)
    assert np.array_equal(y, fastane.tanh(np.full((1, 2, 3, 3), 2.0)))


def test_ne_registers_and_kmem_layout():
    low = lower.build(Conv(1, 8, 4, 4, 40, bias=True, activation="gelu"))
    td = low.program.tds[0]
    assert (td["NE.MACCfg.BiasMode"], td["NE.MACCfg.MatrixBiasEn"], td["NE.MACCfg.NonlinearMode"]) == (
        1,
        1,
        2,
    )
    lay = low.groups[0].layout
    assert (lay.m, lay.lanes, lay.wbytes, lay.bbytes, lay.lut_bytes) == (3, 14, 64, 64, 0x80)
    # core 0 holds its kernels, biases and the LUT; the others kernels and biases
    assert td["KernelDMASrc.CoeffBfrSize[0].MemBfrSize"] * 64 == 64 + 64 + 0x80
    assert td["KernelDMASrc.CoeffBfrSize[1].MemBfrSize"] * 64 == 128
    assert td["KernelDMASrc.CoeffBaseAddr[1].Addr"] * 64 == 256
    exp = lower.build(Conv(1, 8, 4, 4, 4, activation="exp")).program.tds[0]
    assert exp["NE.PostScale.PostScale"] == 0x3DC5  # fp16 log2(e), then the exp2 table


def test_folding_golden_through_the_compiler():
    """SPEC 3: W=4, b=-2, then 0.5 z + 1, then ReLU compiles to ReLU(2x): W'=2, b'=0."""
    x = np.array([-3, -1, -0.5, 0, 0.25, 1, 7.5], F16).reshape(1, 1, 1, 7)
    w = np.full((1, 1, 1, 1), 4, F16)
    b = np.array([-2], F16)
    dev = Device(memory_size=16 << 20)
    y, st, low = lower.run_conv(x, w, b, activation="relu", affine=(0.5, 1.0), device=dev)
    assert np.array_equal(y, np.maximum(2 * x.astype(np.float64), 0).astype(F16))
    # what the program's KMem holds: the folded weight 2.0 and bias 0.0
    binding = low._free[id(dev)][0]
    k16 = binding.raw[lower.lowered.SLOT_KERNEL].view(F16)
    lay = low.groups[0].layout
    assert k16[0] == 2.0 and k16[lay.wbytes // 2] == 0.0
    assert low.program.tds[0]["NE.MACCfg.NonlinearMode"] == 1
    assert lower.fold(w, b, 0.5, 1.0)[0].item() == 2.0 and lower.fold(w, b, 0.5, 1.0)[1].item() == 0.0


# ------------------------------------------------------------------------------ cache, threads
def test_program_cache_is_hit_on_repeat_calls():
    rng = np.random.default_rng(9)
    x, w = f16(rng, (1, 5, 6, 7)), f16(rng, (9, 5, 3, 3))
    fastane.conv2d(x, w, padding=1)
    before = lower.cache_info()
    conv = Conv(1, 5, 6, 7, 9, 3, 3, pad=((1, 1), (1, 1)))
    low = lower.build(conv)
    dev = lower.default_device()
    loaded = dev.load(low.program)
    for _ in range(3):
        x2, w2 = f16(rng, x.shape), f16(rng, w.shape)  # new data, same shapes
        y = fastane.conv2d(x2, w2, padding=1)
        assert np.array_equal(bits(y), bits(kernel_conv(x2, w2, pad=((1, 1), (1, 1)))))
    after = lower.cache_info()
    assert after["misses"] == before["misses"] and after["hits"] >= before["hits"] + 4
    assert lower.build(conv) is low and dev.load(low.program) is loaded  # not re-loaded
    assert len(low._free[id(dev)]) == 1  # one set of buffers, reused


def test_cache_eviction_frees_device_memory(monkeypatch):
    monkeypatch.setattr(lower.cache, "CACHE_SIZE", 2)
    dev = Device(memory_size=64 << 20)
    free0 = dev.memory.available
    for c in range(3, 8):
        x = np.ones((1, c, 4, 4), F16)
        lower.run_conv(x, np.ones((2, c, 1, 1), F16), device=dev)
    assert lower.cache_info()["size"] <= 2
    lower.cache_clear()
    assert dev.memory.available == free0


def test_threads_share_the_default_device():
    rng = np.random.default_rng(10)
    # small jobs, and jobs big enough for the parallel layout transposes
    jobs = [(f16(rng, (3, 9, 20)), f16(rng, (20, 11))) for _ in range(6)]
    jobs += [(f16(rng, (3, 200, 64), 1.0), f16(rng, (64, 200), 1.0)) for _ in range(2)]
    want = [
        kernel_conv(a.reshape(-1, a.shape[-1]).T[None, :, None, :], b.T[:, :, None, None])[
            0, :, 0, :
        ].T.reshape(a.shape[:-1] + b.shape[-1:])
        for a, b in jobs
    ]
    got = [None] * len(jobs)
    errors = []

    def work(i):
        try:
            for _ in range(3):
                got[i] = fastane.matmul(*jobs[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))


def test_disasm_prints_a_lowered_program(tmp_path, capsys):
    low = lower.build(Conv(1, 4, 9, 9, 20, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="relu"), SMALL)
    path = tmp_path / "conv.bin"
    path.write_bytes(low.program.to_bytes())
    from fastane.cli import main

    assert main(["disasm", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\nTD ") == low.n_tasks and "[EON]" in out
    assert "ConvCfg.Px=1" in out and "MatrixBiasEn=1" in out and "NonlinearMode=1 (ReLU)" in out
