"""Activations as elementwise programs on the device (fastane.lower.run_eltwise), and
sigmoid/silu/hard_swish fused after convolutions as NE + planar tasks (docs/lower.md,
section 7)."""

import dataclasses

import numpy as np
import pytest

import fastane
from fastane import activations, lower, lut
from fastane.lower import Conv, Eltwise
from fastane.m1 import Limits
from fastane.device import Device
from fastane.device import planar as planarmod
from fastane.device.engine import Engine
from fastane.td import load_program

from tests.helpers.activations import NE_STAGE, ref_bits
from tests.helpers.device import ACTIVATIONS, bits
from tests.helpers.reference import ref_conv2d, ref_matmul
from tests.helpers.lut_reference import QNAN

F16 = np.float16
TD = 0x274
ACTS = ACTIVATIONS
SMALL = Limits(kmem_core_bytes=512, l2_bytes=8192)


def sample(seed, n=90):
    rng = np.random.default_rng(seed)
    special = [0, 0x8000, 0x0001, 0x8001, 0x03FF, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00]
    return np.concatenate([rng.integers(0, 0x10000, n), special]).astype(np.uint16)


# ------------------------------------------------------------------------------ values
@pytest.mark.parametrize("name", ACTS)
def test_every_activation_equals_the_exact_reference(device, name):
    xb = sample(sum(map(ord, name)))
    with fastane.errstate(lut_range="ignore"):
        y = getattr(fastane, name)(xb.view(F16).reshape(6, -1))
    got = bits(y).reshape(-1)
    for b, g in zip(xb, got):
        want = ref_bits(name, int(b))
        if want == QNAN:
            assert np.isnan(np.uint16(g).view(F16)), (name, hex(b))
        else:
            assert g == want, (name, hex(b), hex(g), hex(want))
    st = fastane.last_stats()
    assert (
        st.tasks == {"sigmoid": 2, "silu": 3, "hard_swish": 2}.get(name, 1) and device.stats.tasks == st.tasks
    )


def kernel_oracle(name, x16):
    """What fastane.activations computed before it ran on the device: the NE kernel called
    directly (fastane.lut.ne_post), then the planar chain of sigmoid/silu/hard_swish in
    numpy, with every NaN canonical.  Also the LUT range counts."""
    nl, table, scale = NE_STAGE.get(name, (2, name, 1.0))
    counts = np.zeros(2, np.int64)
    r = lut.ne_post(
        x16.astype(np.float64).reshape(1, 1, -1),
        None,
        scale,
        nl,
        None if table is None else lut.get_block(table),
        counts=counts,
    ).view(F16)[0, 0]
    with np.errstate(all="ignore"):
        if name in ("sigmoid", "silu"):
            r = (r.astype(np.float64) + 0.5).astype(F16)
        if name in ("silu", "hard_swish"):
            r = (x16.astype(np.float64) * r.astype(np.float64)).astype(F16)
    out = bits(r).copy()
    out[np.isnan(r)] = QNAN
    return out, tuple(counts)


def test_every_activation_on_every_fp16_pattern(device):
    """All 65536 inputs, each activation: the device's bits (NaNs canonical) and LUT range
    counts are the kernel's."""
    x16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).reshape(256, 256)
    for name in ACTS:
        y = getattr(fastane, name)(x16)
        got = bits(y).reshape(-1).copy()
        got[np.isnan(y.reshape(-1))] = QNAN
        want, counts = kernel_oracle(name, x16.reshape(-1))
        assert np.array_equal(got, want), name
        st = fastane.last_stats()
        assert (st.lut_underflow, st.lut_overflow) == counts, name


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "silu", "exp", "relu", "hard_swish"])
def test_tiles_rows_and_remainders_are_bit_identical(name):
    """Several tiles, balanced rows and a remainder row (small L2), and a large tensor
    through the public API (several 16384-wide tiles), equal the one-tile result."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(5003) * 5).astype(F16)
    with fastane.errstate(lut_range="ignore"):
        one = getattr(fastane, name)(x)
        y, st, low = lower.run_eltwise(x, name, limits=Limits(l2_bytes=6144))
    assert len(low.tiles) > 3 and low.rem and st.tasks == low.n_tasks
    assert np.array_equal(bits(y), bits(one))
    big = (rng.standard_normal((3, 16384 * 2 + 77)) * 5).astype(F16)
    with fastane.errstate(lut_range="ignore"):
        got = getattr(fastane, name)(big)
        want, _, other = lower.run_eltwise(big.reshape(-1), name, limits=Limits(l2_bytes=1 << 17))
    assert len(other.tiles) > len(lower.build(Eltwise(big.size, name)).tiles) > 1
    assert np.array_equal(bits(got).reshape(-1), bits(want).reshape(-1))


def test_parametrised_tables_and_out(device):
    x = np.linspace(-4, 4, 33)
    y = fastane.hardtanh(x, min_val=-0.5, max_val=2.0)
    assert np.array_equal(y, np.clip(x, -0.5, 2.0).astype(F16))
    slope = float(F16(0.2))
    y = fastane.leaky_relu(x, negative_slope=0.2)
    assert np.array_equal(y, np.where(x >= 0, x, (x.astype(F16).astype(np.float64) * slope)).astype(F16))
    out = np.empty((2, 33), np.float32)
    assert fastane.silu(x, out=out) is out and np.array_equal(out[1], fastane.silu(x).astype(np.float32))


def test_there_is_no_second_path(device, monkeypatch):
    def broken(self, p):
        raise RuntimeError("the engine was asked to run a task")

    monkeypatch.setattr(Engine, "_run_task", broken)
    for name in ACTS:
        with pytest.raises(RuntimeError, match="engine was asked"):
            getattr(fastane, name)(np.ones(5))


# ------------------------------------------------------------------------------ the program
def test_programs_follow_apples_elementwise_programs(tmp_path, capsys):
    from fastane.cli import main

    for name, ntd in (("tanh", 1), ("relu", 1), ("exp", 1), ("sigmoid", 2), ("silu", 3)):
        low = lower.build(Eltwise(1000, name))
        assert low.n_tasks == len(low.program.tds) == ntd
        td0 = low.program.tds[0]
        assert (td0["NE.MACCfg.KernelMode"], td0["NE.MACCfg.OpMode"]) == (1, 4)
        assert td0["NE.MACCfg.NonlinearMode"] == (1 if name == "relu" else 2)
        assert td0["NE.PostScale.PostScale"] == (0x3DC5 if name == "exp" else 0x3C00)
        assert td0["KernelDMASrc.CoeffDMAConfig[0].En"] == (name != "relu")
        path = tmp_path / f"{name}.bin"
        path.write_bytes(low.program.to_bytes())
        assert main(["disasm", str(path)]) == 0
        out = capsys.readouterr().out
        assert out.count("\nTD ") == ntd and "MACCfg.OpMode=4 MACCfg.KernelMode=1" in out
        if name in ("sigmoid", "silu"):
            td1 = planarmod.registers(low.program.tds[1])
            assert td0["L2.ResultCfg.ResultType"] == 3 and td1["L2.SourceCfg.SourceType"] == 3
            assert td1["L2.SourceBase.Addr"] == td0["L2.ResultBase.Addr"]
            cfg = planarmod.config(td1, "TD 1")
            assert (cfg.name, cfg.out_scale, cfg.offset) == ("scale", 1.0, 0.5)
            assert "Word[1]=0x3c003800 (fp16 1, 0.5)" in out
    low = lower.build(Eltwise(1000, "silu"))
    td2 = planarmod.registers(low.program.tds[2])
    assert planarmod.config(td2, "TD 2").name == "mul" and "Word[0]=0x80004" in out
    assert (td2["Header.RBase0"], td2["Header.RBase1"], td2["Header.WBase"]) == (5, 3, 4)
    assert low.bars[lower.lowered.SLOT_INTERMEDIATE].role == "intermediate"


def test_the_hard_swish_program_is_silus_without_the_half():
    """hard_swish: the NE task with the hard-sigmoid block writes the gate to the
    intermediate slot (3); the planar multiply (0x80004) reads x (5) and the gate (3)
    through TileDMA and writes the output (4), as silu's last task does."""
    low = lower.build(Eltwise(1000, "hard_swish"))
    silu = lower.build(Eltwise(1000, "silu")).program.tds
    assert low.n_tasks == len(low.program.tds) == 2
    ne, mul = (planarmod.registers(t) for t in low.program.tds)
    assert (
        ne["NE.MACCfg.KernelMode"],
        ne["NE.MACCfg.NonlinearMode"],
        ne["KernelDMASrc.CoeffDMAConfig[0].En"],
    ) == (
        1,
        2,
        1,
    )
    assert (ne["Header.RBase0"], ne["Header.WBE"], ne["Header.WBase"]) == (5, 1, 3)
    assert planarmod.config(mul, "TD 1").name == "mul"
    same = lambda regs: {k: v for k, v in regs.items() if "Base" not in k and k != "Header.TID"}  # noqa: E731
    assert same(mul) == same(planarmod.registers(silu[2]))
    assert (mul["Header.RBase0"], mul["Header.RBase1"], mul["Header.WBase"]) == (5, 3, 4)
    assert (
        low.block == lut.get_block("hard_swish")
        and low.bars[lower.lowered.SLOT_INTERMEDIATE].role == "intermediate"
    )


def test_the_silu_program_matches_apples(corpus):
    """fastane's silu program for Apple's kernel shape has the register values that define
    the computation of activation/silu.bin, TD for TD; and Apple's program, run on the
    device, computes exactly fastane.silu / sigmoid / tanh."""
    apple = load_program(corpus / "m1-kernels" / "activation" / "silu.bin")
    low = lower.build(Eltwise(2560 * 1600, "silu"))
    assert len(low.program.tds) == low.n_tasks and low.n_tasks % 3 == 0
    keys = [
        "Header.RBE0",
        "Header.RBase0",
        "Header.RBE1",
        "Header.RBase1",
        "Header.WBE",
        "Header.KBE0",
        "L2.SourceCfg.SourceType",
        "L2.ResultCfg.ResultType",
        "NE.MACCfg.OpMode",
        "NE.MACCfg.KernelMode",
        "NE.MACCfg.NonlinearMode",
        "NE.PostScale.PostScale",
        "KernelDMASrc.CoeffDMAConfig[0].En",
        "Common.Cin.Cin",
        "Common.ChCfg.InFmt",
        "Common.ChCfg.Src1InFmt",
        "Common.Cfg.TaskType",
        "TileDMASrc1.Fmt.MemFmt",
        "Planar.Word[0]",
        "Planar.Word[1]",
        "Planar.Word[2]",
        "Planar.Word[3]",
    ]
    for i in range(3):
        a, m = planarmod.registers(apple.tds[i]), planarmod.registers(low.program.tds[i])
        assert {k: m[k] for k in keys} == {k: a[k] for k in keys}, i
        if a["Header.WBE"]:
            assert m["Header.WBase"] == a["Header.WBase"]
    dev = Device(memory_size=96 << 20)
    x = np.random.default_rng(5).uniform(-12, 12, (1, 1, 2560, 1600)).astype(F16)
    for group, name in (("activation", "silu"), ("unary", "sigmoid"), ("unary", "tanh")):
        out = dev.run(load_program(corpus / "m1-kernels" / group / f"{name}.bin"), {5: x})
        assert np.array_equal(bits(out[4]), bits(getattr(fastane, name)(x))), name


def test_stats_are_what_the_dma_registers_imply(device):
    """1000 elements: one row of 2000 bytes = one 2048-byte burst row per tensor moved."""
    x = np.linspace(-6, 6, 1000)
    want = {  # tasks, kernel, src, dst, planar_ops
        "relu": (1, 0, 2048, 2048, 0),
        "tanh": (1, 0x80, 2048, 2048, 0),
        "sigmoid": (2, 0x80, 2048, 2048, 1000),  # TD1 reads the L2
        "silu": (3, 0x80, 2048 + 2 * 2048, 2048 + 2048, 2000),  # TD2 reads x and the sigmoid
        "hard_swish": (2, 0x80, 2048 + 2 * 2048, 2048 + 2048, 1000),  # TD1 reads x and the gate
    }
    for name, (tasks, kern, src, dst, pops) in want.items():
        getattr(fastane, name)(x)
        st = fastane.last_stats()
        assert (st.tasks, st.macs, st.control_dma_bytes) == (tasks, 0, tasks * TD), name
        assert (st.kernel_dma_bytes, st.tile_dma_src_bytes, st.tile_dma_dst_bytes, st.planar_ops) == (
            kern,
            src,
            dst,
            pops,
        ), name
        assert len(st.tasks_detail) == tasks and sum(t.tile_dma_src_bytes for t in st.tasks_detail) == src
    fastane.tanh(x)
    assert (fastane.last_stats().lut_underflow, fastane.last_stats().lut_overflow) == (0, 334)
    # 40000 elements: 5 rows of 8000 (16000 bytes, whole bursts), one task
    fastane.exp2(np.zeros((8, 5000)))
    st = fastane.last_stats()
    assert (st.tasks, st.tile_dma_src_bytes, st.tile_dma_dst_bytes) == (1, 80000, 80000)
    # stats-only: the same counts
    low = lower.build(Eltwise(1000, "silu"))
    _, counted = lower.execute(low, device=device, stats_only=True)
    fastane.silu(x)
    assert dataclasses.replace(counted, tasks_detail=[]) == dataclasses.replace(
        fastane.last_stats(), tasks_detail=[], lut_overflow=0, lut_underflow=0
    )


def test_the_program_cache_is_hit_on_repeat(device):
    x = np.arange(777, dtype=F16)
    fastane.sigmoid(x)
    before = lower.cache_info()
    low = lower.build(Eltwise(777, "sigmoid"))
    loaded = device.load(low.program)
    for k in range(3):
        y = fastane.sigmoid(x - k)
        assert np.array_equal(bits(y), bits(fastane.sigmoid((x - k).reshape(7, 111)).reshape(-1)))
    after = lower.cache_info()
    assert after["misses"] == before["misses"] and after["hits"] >= before["hits"] + 4
    assert lower.build(Eltwise(777, "sigmoid")) is low and device.load(low.program) is loaded
    assert len(low._free[id(device)]) == 1  # one set of buffers, reused
    blk = lut.hardtanh_block(-2.0, 3.0)  # parameters are part of the key
    assert lower.build(Eltwise(777, blk)) is not lower.build(Eltwise(777, "hardtanh"))


def test_long_programs_split_between_tile_chains():
    x = (np.random.default_rng(8).standard_normal(3001) * 4).astype(F16)
    y, st, low = lower.run_eltwise(x, "silu", limits=Limits(l2_bytes=3072, max_chain=7))
    assert len(low.programs) > 1 and all(len(p.tds) % 3 == 0 for p in low.programs)
    assert st.tasks == low.n_tasks and np.array_equal(bits(y), bits(fastane.silu(x)))
    # a convolution's planar chain stays in the chain of its convolution task
    rng = np.random.default_rng(9)
    xc, wc = rng.standard_normal((3, 3, 5, 6)).astype(F16), rng.standard_normal((5, 3, 1, 1)).astype(F16)
    y, st, low = lower.run_conv(xc, wc, activation="silu", limits=Limits(max_chain=7))
    assert [len(p.tds) for p in low.programs] == [4] * 3 and st.tasks == 12
    with fastane.errstate(lut_range="ignore"):
        assert np.array_equal(bits(y), bits(fastane.silu(fastane.conv2d(xc, wc))))


# ------------------------------------------------------------------------------ fused
def _fused_want(z, act):
    with fastane.errstate(lut_range="ignore"):
        return getattr(activations, act)(z)


@pytest.mark.parametrize("act", ["sigmoid", "silu", "hard_swish"])
def test_conv_linear_matmul_with_sigmoid_and_silu(act):
    """readout -> + bias (fp16) -> the activation as fastane.activations computes it."""
    rng = np.random.default_rng(len(act))
    x = (rng.standard_normal((2, 6, 7, 5)) * 2).astype(F16)
    w = (rng.standard_normal((40, 6, 3, 3)) * 0.5).astype(F16)
    b = (rng.standard_normal(40) * 2).astype(F16)
    with fastane.errstate(lut_range="ignore"):
        y = fastane.conv2d(x, w, b, padding=1, activation=act)
    st = fastane.last_stats()
    z = (ref_conv2d(x, w, padding=1).astype(np.float64) + b[None, :, None, None]).astype(F16)
    assert np.array_equal(bits(y), bits(_fused_want(z, act)))
    per = {"sigmoid": 2, "silu": 4, "hard_swish": 3}[act]
    assert st.tasks == 2 * per and st.planar_ops == 2 * 40 * 7 * 5 * (per // 2)
    # tiled: kernel groups and row tiles, each followed by its planar chain
    y2, st2, low = lower.run_conv(x, w, b, pad=((1, 1), (1, 1)), activation=act, limits=SMALL)
    assert len(low.groups) > 1 and low.tiling.th < 7 and st2.tasks == low.n_tasks == len(low.tasks) * per
    assert np.array_equal(bits(y2), bits(y))
    # conv1d, linear (bias), matmul in its three layouts
    x1, w1 = (rng.standard_normal((3, 4, 9))).astype(F16), (rng.standard_normal((5, 4, 2))).astype(F16)
    z1 = ref_conv2d(x1[:, :, None], w1[:, :, None]).astype(F16)[:, :, 0]
    assert np.array_equal(bits(fastane.conv1d(x1, w1, activation=act)), bits(_fused_want(z1, act)))
    xl, wl, bl = (
        (rng.standard_normal((7, 33)) * 0.5).astype(F16),
        (rng.standard_normal((50, 33)) * 0.5).astype(F16),
        rng.standard_normal(50).astype(F16),
    )
    zl = (ref_matmul(xl, wl.T).astype(np.float64) + bl).astype(F16)
    assert np.array_equal(bits(fastane.linear(xl, wl, bl, activation=act)), bits(_fused_want(zl, act)))
    a3, b3 = rng.standard_normal((3, 5, 8)).astype(F16), rng.standard_normal((3, 8, 4)).astype(F16)
    for A, B in ((a3, b3[0]), (a3[0], b3), (a3, b3)):  # b shared, a shared, both batched
        got = fastane.matmul(A, B, activation=act)
        AA, BB = (np.broadcast_to(t, (3,) + t.shape[-2:]) for t in (A, B))
        ref = np.stack([ref_matmul(p, q) for p, q in zip(AA, BB)]).astype(F16)
        assert np.array_equal(bits(got), bits(_fused_want(ref, act)))
    # an empty reduction: the biased zeros through the activation
    yk = fastane.linear(np.ones((2, 0)), np.ones((3, 0)), np.array([-1.0, 0.0, 2.0]), activation=act)
    assert np.array_equal(bits(yk), bits(_fused_want(np.tile(F16([-1, 0, 2]), (2, 1)), act)))


def test_fused_chain_registers_and_stats(capsys, tmp_path):
    low = lower.build(Conv(1, 8, 6, 6, 20, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="silu"))
    tds = [planarmod.registers(t) for t in low.program.tds]
    assert len(tds) == 4 and low.tds_per_task == 4
    conv, ne, half, mul = tds
    assert (conv["NE.MACCfg.KernelMode"], conv["NE.MACCfg.NonlinearMode"], conv["NE.MACCfg.BiasMode"]) == (
        0,
        0,
        1,
    )
    assert conv["L2.ResultCfg.ResultType"] == 3 and conv["Header.WBE"] == 0
    assert (ne["NE.MACCfg.KernelMode"], ne["NE.MACCfg.NonlinearMode"], ne["L2.SourceCfg.SourceType"]) == (
        1,
        2,
        3,
    )
    assert ne["KernelDMASrc.CoeffBaseAddr[0].Addr"] * 64 == low.lut_offset
    assert ne["L2.SourceBase.Addr"] == conv["L2.ResultBase.Addr"]
    assert planarmod.config(half, "h").name == "scale" and planarmod.config(mul, "m").name == "mul"
    assert (mul["L2.SourceBase.Addr"], mul["L2.Source1Base.Addr"]) == (
        conv["L2.ResultBase.Addr"],
        half["L2.ResultBase.Addr"],
    )
    assert (mul["Header.RBE0"], mul["Header.RBE1"], mul["Header.WBase"]) == (0, 0, lower.lowered.SLOT_OUTPUT)
    # the L2 windows of the chain: z, L(z), s and the output staging follow the source
    tile = 20 * 6 * 16  # 20 channels x 6 rows x (6 fp16: one 16-byte L2 row) bytes
    bases = [t["L2.ResultBase.Addr"] * 16 for t in tds]
    assert np.diff(bases).tolist() == [tile] * 3 and bases[0] == 8 * 6 * 16  # after the source
    assert max(bases) + tile <= 2 << 20
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype(F16)
    w = np.random.default_rng(2).standard_normal((20, 8, 3, 3)).astype(F16)
    _, st = lower.execute(low, x, w, np.zeros(20, F16))
    assert (
        st.tile_dma_src_bytes == 8 * 6 * 64 and st.tile_dma_dst_bytes == 20 * 6 * 64
    )  # intermediates stay in L2
    assert st.kernel_dma_bytes == sum(low.groups[0].layout.sizes) + 0x80 and st.planar_ops == 2 * 20 * 36
    path = tmp_path / "conv_silu.bin"
    path.write_bytes(low.program.to_bytes())
    from fastane.cli import main

    assert main(["disasm", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\nTD ") == 4 and "ResultType=3" in out and "Word[0]=0x80004" in out


def test_fused_hard_swish_chain_registers():
    """After the convolution (bias only, z kept in L2): the elementwise NE task with the gate's
    block on z, then the planar multiply of z by the gate to the output; the gate's block
    after the kernel groups."""
    low = lower.build(Conv(1, 8, 6, 6, 20, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="hard_swish"))
    tds = [planarmod.registers(t) for t in low.program.tds]
    assert len(tds) == 3 and low.tds_per_task == 3
    conv, ne, mul = tds
    assert (conv["NE.MACCfg.NonlinearMode"], conv["L2.ResultCfg.ResultType"], conv["Header.WBE"]) == (0, 3, 0)
    assert (ne["NE.MACCfg.KernelMode"], ne["NE.MACCfg.NonlinearMode"], ne["L2.SourceBase.Addr"]) == (
        1,
        2,
        conv["L2.ResultBase.Addr"],
    )
    assert ne["KernelDMASrc.CoeffBaseAddr[0].Addr"] * 64 == low.lut_offset
    assert planarmod.config(mul, "m").name == "mul"
    assert (mul["L2.SourceBase.Addr"], mul["L2.Source1Base.Addr"]) == (
        conv["L2.ResultBase.Addr"],
        ne["L2.ResultBase.Addr"],
    )
    assert (mul["Header.RBE0"], mul["Header.RBE1"], mul["Header.WBase"]) == (0, 0, lower.lowered.SLOT_OUTPUT)
    raw = np.zeros(low.kernel_bytes, np.uint8)
    low.pack(raw, np.zeros((20, 8, 3, 3), F16), np.zeros(20, F16))
    assert raw[low.lut_offset : low.lut_offset + 0x80].tobytes() == lut.get_block("hard_swish").to_bytes()
