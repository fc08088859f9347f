"""The planar engine through the device: small planar TDs built register by register
(tests/helpers/planar.py), bit for bit against numpy fp16; its operands (two TileDMA
register sets, L2 results, broadcast vectors), row reductions, counters, and faults that
leave memory untouched."""

import dataclasses

import numpy as np
import pytest
from tests.helpers.device import assert_submit_faults
from tests.helpers.planar import F16, bits, dense, planar_td, ref_eltwise

from fastane.device import DecodeFault, Device, DMARangeFault, L2Fault, L2Overflow, UnsupportedTask, planar
from fastane.td import Program

SHAPE = (3, 5, 37)  # C, H, W: rows of 74 bytes, padded to 128 by the DMA
BINARY = ("add", "sub", "mul", "max", "min")


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=16 << 20)


def data(seed, shape=SHAPE, special=True):
    """Random fp16 with, optionally, special values sprinkled in."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-8, 8, (1,) + shape).astype(F16)
    if special:
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, 12, replace=False)
        flat[idx] = np.array(
            [0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -6e-8, 65504, -65504, 2048, 1e-4, 3], F16
        )
    return x


@pytest.mark.parametrize("name", ["scale", "abs", "add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize(
    "scales", [(1.0, 1.0, 0.0), (-1.0, 1.0, 0.0), (0.5, 2.0, 0.0), (1.0, 1.0, 0.5), (-1.5, 0.693359375, -3.0)]
)
def test_ops_bit_for_bit(dev, name, scales):
    s0, s, c = scales
    p = Program.from_tds([planar_td(name, SHAPE, in_scale=s0, out_scale=s, offset=c)])
    a, b = data(1), data(2)
    ins = {5: a, 6: b} if name in BINARY else {5: a}
    with np.errstate(all="ignore"):
        out = dev.run(p, ins)
    ref = ref_eltwise(name, a, ins.get(6), s0, s, c)
    assert np.array_equal(bits(out[4]), bits(ref))
    st = out.stats
    rows = SHAPE[0] * SHAPE[1]
    assert st.planar_ops == np.prod(SHAPE) and st.macs == 0 and st.tasks == 1
    assert st.tile_dma_src_bytes == rows * 128 * (2 if name in BINARY else 1)
    assert st.tile_dma_dst_bytes == rows * 128 and st.kernel_dma_bytes == 0
    assert st.nan_outputs == int(np.isnan(ref).sum())
    counted = dev.run(p, stats_only=True).stats
    assert counted == dataclasses.replace(
        st, nan_outputs=0, tasks_detail=[dataclasses.replace(st.tasks_detail[0], nan_outputs=0)]
    )


def test_word_encoding_round_trip():
    for name in planar.OPCODES:
        td = planar_td(name, SHAPE, in_scale=-2.0, out_scale=0.25, offset=1.5)
        cfg = planar.config(planar.registers(td), "t")
        assert (cfg.name, cfg.in_scale, cfg.out_scale, cfg.offset) == (name, -2.0, 0.25, 1.5)
        assert cfg.binary == (name in BINARY) and cfg.reduce == (name in ("sum", "max-reduce", "recip-sum"))


def test_the_second_operand_has_its_own_dma_registers(dev):
    """Source 1 is read through TileDMASrc's second register set (TD 0x188..): its own base
    and strides, here different from source 0's (padded rows, an offset into the slot)."""
    s0 = dense(SHAPE, base=0, pad_rows=0)
    s1 = dense(SHAPE, base=0x1000, pad_rows=2)
    d = dense(SHAPE, base=0x40, pad_rows=1)
    td = planar_td("sub", SHAPE, src_layout=s0, src1_layout=s1, dst_layout=d)
    p = Program.from_tds([td])
    slots = dev.tensors(p)
    assert (slots[6].base, slots[6].strides) == (0x1000, (s1[2], s1[1], 2))
    assert (slots[4].base, slots[4].strides) == (0x40, (d[2], d[1], 2))
    a, b = data(3), data(4)
    with np.errstate(all="ignore"):
        out = dev.run(p, {5: a, 6: b})
    assert np.array_equal(bits(out[4]), bits(ref_eltwise("sub", a, b)))


def test_square_reads_one_buffer_twice(dev):
    td = planar_td("mul", SHAPE, src=5, src1=5)
    p = Program.from_tds([td])
    assert {s: t.role for s, t in dev.tensors(p).items()} == {4: "output", 5: "input"}
    a = data(5, special=False)
    out = dev.run(p, {5: a})
    assert np.array_equal(bits(out[4]), bits((a.astype(np.float64) ** 2).astype(F16)))
    assert out.stats.tile_dma_src_bytes == 2 * 15 * 128  # the DMA reads it twice


def test_l2_chain_and_broadcast_vector(dev):
    """A reduction keeps a per-row vector in L2 (ResultType 0), a subtract reads it as a
    broadcast second operand (RBE1 = 0, L2.Source1Base), keeps its result in L2
    (ResultType 3), and a scale task reads that (SourceType 3) and writes DRAM."""
    shape = (1, 6, 40)
    g = shape[1]
    red = planar_td(
        "max-reduce",
        (1, 1, shape[2]),
        groups=g,
        result_type=0,
        result_base=0,
        source_base=0x200,
        src_layout=dense(shape),
        nid=1,
    )
    sub = planar_td(
        "sub",
        shape,
        rbe1=False,
        out_scale=1.4423828125,
        result_type=3,
        result_base=0x4000,
        source_base=0x1000,
        source1_base=0,
        broadcast=(0, 1),
        nid=2,
    )
    sca = planar_td("scale", shape, source_type=3, source_base=0x4000, offset=0.5, result_base=0x8000, nid=3)
    p = Program.from_tds([red, sub, sca])
    slots = dev.tensors(p)
    assert {s: (t.role, t.shape) for s, t in slots.items()} == {
        4: ("output", (1,) + shape),
        5: ("input", (1,) + shape),
    }
    x = data(6, shape, special=False)
    dev.reset_l2()
    out = dev.run(p, {5: x})
    m = x.max(axis=-1, keepdims=True)
    y = ref_eltwise("sub", x, m, 1.0, 1.4423828125, 0.0)
    assert np.array_equal(bits(out[4]), bits(ref_eltwise("scale", y, None, 1.0, 1.0, 0.5)))
    # the reduced vector stayed in L2 at 0, one value per row
    assert np.array_equal(dev.engine.l2.read(0).reshape(-1), m.reshape(-1).astype(np.float64))
    st = out.stats
    assert [t.planar_ops for t in st.tasks_detail] == [240, 240, 240]
    assert [t.tile_dma_src_bytes for t in st.tasks_detail] == [6 * 128, 6 * 128, 0]
    assert [t.tile_dma_dst_bytes for t in st.tasks_detail] == [0, 0, 6 * 128]
    dev.reset_l2()
    counted = dev.run(p, stats_only=True).stats
    assert counted.tasks_detail == [dataclasses.replace(t, nan_outputs=0) for t in st.tasks_detail]


def test_softmax_like_chain_with_a_broadcast_first_operand(dev):
    """recip-sum keeps 1/sum per row in L2; a multiply reads it as a broadcast source 0
    (SourceType 0) and the values from DRAM as source 1."""
    shape = (1, 4, 50)
    rs = planar_td("recip-sum", (1, 1, 50), groups=4, result_type=0, result_base=0, source_base=0x200)
    mul = planar_td(
        "mul",
        shape,
        source_type=0,
        source_base=0,
        broadcast=(1, 0),
        src1=5,
        source1_base=0x200,
        result_base=0x1000,
        nid=2,
    )
    p = Program.from_tds([rs, mul])
    x = np.abs(data(7, shape, special=False))
    dev.reset_l2()
    out = dev.run(p, {5: x})
    xs = x.astype(np.float64)
    s = xs.sum(-1, keepdims=True).astype(F16).astype(np.float64)  # exact sums here
    r = (1 / s).astype(F16)
    assert np.array_equal(bits(out[4]), bits(ref_eltwise("mul", np.broadcast_to(r, x.shape), x)))


# ---------------------------------------------------------------------------- faults
def assert_faults(dev, program, exc, match, inputs=None):
    """Run; the task faults with ``exc``; memory and L2 are exactly as before."""
    loaded = dev.load(program)
    slots = dev.tensors(loaded)
    regions = {s: dev.alloc(max(t.nbytes, 0x4000), f"s{s}") for s, t in slots.items()}
    for r in regions.values():
        dev.memory.view(r.iova, r.size)[:] = 0x3C
    fault = assert_submit_faults(dev, loaded, regions, exc, match)
    for r in regions.values():
        dev.free(r)
    return fault


def with_words(td, **w):
    return td.copy().update({f"Planar.Word[{k[1]}]": v for k, v in w.items()})


MALFORMED = [
    ("nan output scale", dict(w1=0x7E000000), "Word\\[1\\] high half .* not a finite fp16"),
    ("inf offset", dict(w1=0x3C007C00), "Word\\[1\\] low half .* not a finite fp16"),
    ("nan operand scale", dict(w2=0xFE000000), "Word\\[2\\] high half"),
    ("nan fp32 scale", dict(w3=0x7FC00000), "Word\\[3\\] = 0x7fc00000 is not a finite fp32"),
]


@pytest.mark.parametrize("label,words,match", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_words_are_decode_faults(dev, label, words, match):
    p = Program.from_tds([with_words(planar_td("add", SHAPE), **words)])
    exc = assert_faults(dev, p, DecodeFault, match)
    assert exc.planar[0] == 0x80000
    # malformed is malformed even when only counting
    with pytest.raises(DecodeFault):
        dev.run(p, stats_only=True)


def test_inconsistent_operands_are_decode_faults(dev):
    td = planar_td("add", SHAPE, rbe1=False)
    planar.set_unnamed(td, {"Common.ChCfg.Src1InFmt": 0})
    assert_faults(dev, Program.from_tds([td]), DecodeFault, "takes two operands.*no second operand")
    td = with_words(planar_td("add", SHAPE), w0=0x40)  # abs, but RBE1 still set
    assert_faults(dev, Program.from_tds([td]), DecodeFault, "abs is unary, but RBE1")
    td = planar_td("abs", SHAPE, broadcast=(0, 1))
    assert_faults(dev, Program.from_tds([td]), DecodeFault, "Broadcast.Src1 is set on a unary")
    td = planar_td("add", SHAPE).update({"Common.OutDim.Wout": 36})
    assert_faults(dev, Program.from_tds([td]), DecodeFault, "maps every element to one output")


UNSUPPORTED = [
    ("unknown bit", dict(w0=0x80010), "bits 0x10 have no known meaning"),
    ("reduction code on an elementwise task", dict(w0=0x1000), "reduction codes"),
    ("subtract with multiply", dict(w0=0xC0004), "subtract bit .* with mul"),
    ("abs with a binary op", dict(w0=0x80040), "combines abs"),
    ("binary op bits without the binary bit", dict(w0=0x8), "binary bit 0x80000 is clear"),
    ("fp32 scale", dict(w3=0x40000000), "Word\\[3\\] = 0x40000000 .* unknown"),
    ("operand offset", dict(w2=0x3C003800), "Word\\[2\\] low half"),
]


@pytest.mark.parametrize("label,words,match", UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_unknown_operations_are_unsupported_but_counted(dev, label, words, match):
    td = with_words(planar_td("add", SHAPE), **words)
    if words.get("w0", 0x80000) & 0x80000 == 0:
        td.update({"Header.RBE1": 0})
        planar.set_unnamed(td, {"Common.ChCfg.Src1InFmt": 0})
    p = Program.from_tds([td])
    exc = assert_faults(dev, p, UnsupportedTask, match)
    assert exc.planar == planar.operation(planar.registers(td))
    counted = dev.run(p, stats_only=True).stats  # still counted
    assert counted.planar_ops == np.prod(SHAPE)


def test_unsupported_reductions(dev):
    td = planar_td("max-reduce", (1, 1, 37), groups=4, result_type=0, result_base=0)
    td2 = with_words(td, w0=0x1002)
    assert_faults(dev, Program.from_tds([td2]), UnsupportedTask, "0x1002")
    td3 = planar_td("sum", (1, 2, 37), groups=4, result_type=0, result_base=0)
    assert_faults(dev, Program.from_tds([td3]), UnsupportedTask, "Cin x Hin = 1x2 per group")
    td4 = planar_td("sum", (1, 1, 37), groups=4, result_type=2)
    assert_faults(dev, Program.from_tds([td4]), UnsupportedTask, "reduction with ResultType = 2")
    td5 = planar_td("add", SHAPE, groups=2)
    assert_faults(dev, Program.from_tds([td5]), UnsupportedTask, "NumGroups = 2")


def test_operand_faults(dev):
    # the second operand's DMA reaches past its slot (its own base register)
    big = dense(SHAPE, base=0x4000)
    p = Program.from_tds([planar_td("add", SHAPE, src1_layout=big)])
    p = dataclasses.replace(p, bars={**p.bars, 6: dataclasses.replace(p.bars[6], size=0x4000)})
    dev.unload(p)
    loaded = dev.load(p)
    regions = {4: dev.alloc(0x4000), 5: dev.alloc(0x4000), 6: dev.alloc(0x4000)}
    before = dev.memory.data.copy()
    task = dev.submit(loaded, regions)
    with pytest.raises(DMARangeFault, match="TileDMASrc1"):
        task.wait()
    assert np.array_equal(dev.memory.data, before)
    # a second operand from L2 where nothing was left
    dev.reset_l2()
    td = planar_td("add", SHAPE, rbe1=False, source1_base=0x3000)
    assert_faults(dev, Program.from_tds([td]), L2Fault, "second operand is read from L2 at 0x3000")
    # its L2 working set does not fit
    td = planar_td("add", SHAPE, source1_base=(2 << 20) - 0x100, result_base=0)
    assert_faults(dev, Program.from_tds([td]), L2Overflow, "second operand's L2 working set")
    # a broadcast source 0 needs the broadcast bit
    red = planar_td("sum", (1, 1, 37), groups=5, result_type=0, result_base=0)
    mul = planar_td("mul", (1, 5, 37), source_type=0, source_base=0, src1=5, nid=2)
    assert_faults(
        dev,
        Program.from_tds([red, mul]),
        L2Fault,
        r"is \(1, 1, 5, 1\), the task reads "
        r"\(1, 1, 5, 37\)",
    )


def test_row_reduction_from_l2_is_refused_before_anything_runs():
    """A reduction whose rows would come from L2 has no known layout: refused at plan time."""
    w = 64
    t0 = planar_td("scale", (1, 1, w), result_type=3, result_base=0x1000, nid=1)
    t1 = planar_td(
        "sum",
        (1, 1, w),
        groups=4,
        source_type=3,
        source_base=0x1000,
        result_type=0,
        result_base=0x2000,
        nid=2,
    )
    t2 = planar_td("scale", (1, 4, 1), source_type=0, source_base=0x2000, nid=3)
    prog = Program.from_tds([t0, t1, t2])
    dev = Device(memory_size=16 << 20)
    inputs = {s: np.ones(t.shape, np.float16) for s, t in dev.tensors(prog).items() if t.role == "input"}
    with pytest.raises(UnsupportedTask, match="row reduction reading its rows from L2"):
        dev.run(prog, inputs)
