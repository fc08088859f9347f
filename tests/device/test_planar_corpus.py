"""Apple's planar programs from the corpus through the device (FASTANE_CORPUS).

The corpus has no hardware outputs: each program is judged by its op's meaning, bit for
bit where fastane's fp16 model makes the result exact (add, sub, ave, mul, max, min, abs,
square; cube as the fp16 chain of two multiplies), within stated tolerances where
Apple's LUTs take part.  Every program is also counted in stats-only mode, with the same
Stats.  Inputs are random fp16 on the programs' fixed 1600 x 2560 geometry.
"""

import dataclasses

import numpy as np
import pytest
from tests.helpers.planar import F16, bits

from fastane.device import Device, l2, planar
from fastane.td import load_program

SHAPE = (1, 1, 2560, 1600)
ROW = 3200  # bytes: 1600 fp16, a multiple of 64
TENSOR = 2560 * ROW


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=160 << 20)


@pytest.fixture(scope="module")
def xy():
    rng = np.random.default_rng(0)
    x = rng.uniform(-6, 6, SHAPE).astype(F16)
    y = rng.uniform(-6, 6, SHAPE).astype(F16)
    return x, y


def load(corpus, group, name):
    return load_program(corpus / "m1-kernels" / group / f"{name}.bin")


def f64(a):
    return np.asarray(a, np.float64)


def r16(a):
    with np.errstate(all="ignore"):
        return f64(a).astype(F16)


# ---------------------------------------------------------------------------- findings
#: every planar TD of the corpus: (TD index, op, operand scale s0, output scale s, offset c)
OP_TABLE = {
    ("binary", "add"): [(0, "add", 1, 1, 0)],
    ("binary", "sub"): [(0, "add", -1, 1, 0)],  # -b + a: RBase0 is the subtrahend
    ("binary", "ave"): [(0, "add", 1, 0.5, 0)],  # 0.5 * (a + b): an output scale
    ("binary", "mul"): [(0, "mul", 1, 1, 0)],
    ("binary", "max"): [(0, "max", 1, 1, 0)],
    ("binary", "min"): [(0, "min", 1, 1, 0)],
    ("binary", "div"): [(1, "mul", 1, 1, 0)],  # x * reciprocal-LUT(y)
    ("unary", "abs"): [(0, "abs", 1, 1, 0)],
    ("unary", "square"): [(0, "mul", 1, 1, 0)],
    ("unary", "cube"): [(0, "mul", 1, 1, 0), (1, "mul", 1, 1, 0)],
    ("unary", "atan"): [(2, "add", 1, 1, 0)],
    ("unary", "ceil"): [(3, "add", 1, 1, 0)],
    ("unary", "frac"): [(1, "mul", 1, 1, 0), (2, "add", -1, 1, 0)],
    ("unary", "sigmoid"): [(1, "scale", 1, 1, 0.5)],
    ("unary", "log"): [(1, "scale", 1, 0.693359375, 0)],
    ("unary", "log10"): [(1, "scale", 0.693359375, 0.434326171875, 0)],
    ("unary", "norm"): [
        (0, "abs", 1, 1, 0),
        (1, "mul", 1, 1, 0),
        (2, "sum", 1, 1, 0),
        (5, "scale", 1, 1, 0),
        (7, "mul", 1, 1, 0),
    ],
    ("activation", "silu"): [(1, "scale", 1, 1, 0.5), (2, "mul", 1, 1, 0)],
    ("activation", "softmax"): [
        (0, "max-reduce", 1, 1, 0),
        (1, "sub", 1, 1.4423828125, 0),
        (3, "recip-sum", 1, 1, 0),
        (4, "mul", 1, 1, 0),
    ],
    ("activation", "logsoftmax"): [
        (0, "max-reduce", 1, 1, 0),
        (1, "sub", 1, 1.4423828125, 0),
        (3, "recip-sum", 1, 1, 0),
        (4, "mul", 1, 1, 0),
        (6, "scale", 1, 0.693359375, 0),
    ],
    ("activation", "softmin"): [
        (0, "scale", 1, -1, 0),
        (1, "max-reduce", 1, 1, 0),
        (2, "sub", 1, 1.4423828125, 0),
        (4, "recip-sum", 1, 1, 0),
        (5, "mul", 1, 1, 0),
    ],
}


def test_every_corpus_planar_td_decodes_to_its_op(corpus):
    found = {}
    for path in sorted((corpus / "m1-kernels").glob("*/*.bin")):
        for i, td in enumerate(load_program(path).tds):
            regs = planar.registers(td)
            if planar.is_planar(regs):
                cfg = planar.config(regs, path.name)
                assert cfg.unsupported is None
                found.setdefault((path.parent.name, path.stem), []).append(
                    (i, cfg.name, cfg.in_scale, cfg.out_scale, cfg.offset)
                )
    assert found == OP_TABLE
    assert sum(map(len, found.values())) == 39


def test_l2_windows_of_the_second_operand(corpus):
    """The unnamed L2 registers read as fastane reads them: in every binary planar task
    streaming both operands from DRAM, operand 1's L2 window (Source1Base + TileHeight
    rows x Source1RowStride) ends exactly at ResultBase, as operand 0's ends at
    Source1Base (after 64-byte alignment) -- the layout of the MAC tasks."""
    programs = sorted((corpus / "m1-kernels").glob("*/*.bin")) + [corpus / "m1-hwx" / "sum.hwx"]
    checked = 0
    for path in programs:
        for td in load_program(path).tds:
            r = planar.registers(td)
            if not (planar.is_planar(r) and r["Header.RBE1"] and r["L2.SourceCfg.SourceType"] == 2):
                continue
            rows = min(r["Common.InDim.Hin"], r["Common.TileCfg.TileHeight"])
            s1 = r["L2.Source1Base.Addr"] * 16
            end0 = r["L2.SourceBase.Addr"] * 16 + rows * r["L2.SourceRowStride.Stride"] * 16
            assert end0 <= s1 <= -(-end0 // 64) * 64 + 64, path.name
            assert s1 + rows * r["L2.Source1RowStride.Stride"] * 16 == r["L2.ResultBase.Addr"] * 16
            assert r["Common.ChCfg.Src1InFmt"] == r["TileDMASrc1.Fmt.MemFmt"] == 2
            checked += 1
    assert checked == 18


# ---------------------------------------------------------------------------- running
def run_and_count(dev, program, inputs):
    """Run; then count in stats-only mode: the same Stats but for data-dependent counters."""
    with np.errstate(all="ignore"):
        out = dev.run(program, inputs)
    counted = dev.run(program, stats_only=True).stats

    def plain(s):
        return dataclasses.replace(
            s,
            nan_outputs=0,
            lut_underflow=0,
            lut_overflow=0,
            saturated=0,
            tasks_detail=[plain(t) for t in s.tasks_detail],
        )

    assert plain(counted) == plain(out.stats)
    return out


EXACT = {
    ("binary", "add"): lambda x, y: f64(x) + y,
    ("binary", "sub"): lambda x, y: f64(x) - y,
    ("binary", "ave"): lambda x, y: (f64(x) + y) / 2,
    ("binary", "mul"): lambda x, y: f64(x) * y,
    ("binary", "max"): lambda x, y: np.maximum(f64(x), y),
    ("binary", "min"): lambda x, y: np.minimum(f64(x), y),
    ("unary", "abs"): lambda x, y: np.abs(f64(x)),
    ("unary", "square"): lambda x, y: f64(x) * x,
    ("unary", "cube"): lambda x, y: f64(r16(f64(x) * x)) * x,  # two fp16 multiplies
}


@pytest.mark.parametrize("group,name", list(EXACT), ids=[n for _, n in EXACT])
def test_exact_programs_bit_for_bit(dev, corpus, xy, group, name):
    x, y = xy
    program = load(corpus, group, name)
    roles = {s: t.role for s, t in dev.tensors(program).items()}
    inputs = {5: x, 6: y} if group == "binary" else {5: x}
    assert {s for s, r in roles.items() if r == "input"} == set(inputs)
    out = run_and_count(dev, program, inputs)
    assert np.array_equal(bits(out[4]), bits(r16(EXACT[group, name](x, y))))
    s = out.stats
    assert s.planar_ops == 1600 * 2560 * len(program.tds) and s.macs == 0
    operands = 1 if name == "abs" else 2
    assert s.tile_dma_src_bytes == operands * TENSOR * len(program.tds)
    assert s.tile_dma_dst_bytes == TENSOR * len(program.tds)


def test_sum_hwx(dev, corpus):
    """tinygrad's sum.hwx (another compiler build): a 64-channel planar add."""
    program = load_program(corpus / "m1-hwx" / "sum.hwx")
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((1, 64, 1, 1)).astype(F16) for _ in range(2))
    out = run_and_count(dev, program, {5: a, 6: b})
    assert np.array_equal(bits(out[4]), bits(r16(f64(a) + b)))
    assert out.stats.tile_dma_src_bytes == 2 * 64 * 64 and out.stats.planar_ops == 64


def err_where(got, ref, mask):
    return np.abs(f64(got) - ref)[mask]


def test_lut_and_planar_chains(dev, corpus, xy):
    """LUT + planar programs against their meaning, within the tolerances Apple's tables
    allow (docs/lut.md, section 5) plus one fp16 rounding per planar stage."""
    x, y = xy
    xs, pos = f64(x), f64(np.abs(y) + F16(0.5))
    pos16 = r16(pos)
    normal = 2.0**-14
    cases = [
        # name, group, inputs, meaning, max abs error
        ("sigmoid", "unary", {5: x}, 1 / (1 + np.exp(-xs)), 1.1e-3),
        ("silu", "activation", {5: x}, xs / (1 + np.exp(-xs)), 4e-3),
        ("log", "unary", {5: pos16}, np.log(pos), 2.5e-3),
        ("log10", "unary", {5: pos16}, np.log10(pos), 1.5e-3),
        ("atan", "unary", {5: x}, np.arctan(xs), 3.4e-2),
        ("ceil", "unary", {5: x}, np.ceil(xs), 0.0),  # exact, up to the sign of 0
    ]
    for name, group, inputs, ref, tol in cases:
        out = run_and_count(dev, load(corpus, group, name), inputs)
        assert err_where(out[4], ref, np.isfinite(ref)).max() <= tol, name
    # div = x * reciprocal(y): relative error of the table (8.4e-4) and two roundings
    out = run_and_count(dev, load(corpus, "binary", "div"), {5: x, 6: pos16})
    ref = xs / pos
    rel = (np.abs(f64(out[4]) - ref) / np.abs(ref))[np.abs(ref) >= normal]
    assert rel.max() <= 2e-3
    # ... and, exactly, the multiply of the program's own reciprocal stage
    inv = run_and_count(dev, load(corpus, "unary", "inv"), {5: pos16})[4]
    assert np.array_equal(bits(out[4]), bits(r16(xs * inv)))


def test_frac_is_the_model_of_its_tds(dev, corpus, xy):
    """frac.bin (two inputs; its op's meaning is not documented) computes, by its TDs,
    ``b - a * sign(b)``: sign LUT, multiply, then add with operand scale -1."""
    x, y = xy
    out = run_and_count(dev, load(corpus, "unary", "frac"), {5: x, 6: y})
    sign = run_and_count(dev, load(corpus, "unary", "sign"), {5: y})[4]
    assert np.array_equal(bits(out[4]), bits(r16(f64(y) - r16(f64(x) * sign))))


def softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_row_reduction_programs(dev, corpus, xy):
    """softmax, softmin, logsoftmax and norm: planar row reductions (max, sum, 1/sum) kept
    in L2 as per-row vectors, read back broadcast along the rows."""
    x, _ = xy
    xs = f64(x)
    for name, ref in (("softmax", softmax(xs)), ("softmin", softmax(-xs))):
        out = run_and_count(dev, load(corpus, "activation", name), {5: x})
        got = f64(out[4])
        assert np.abs(got - ref).max() <= 2e-5, name
        big = ref >= 2.0**-14
        assert (np.abs(got - ref)[big] / ref[big]).max() <= 8e-3, name
        assert np.abs(got.sum(-1) - 1).max() <= 2e-3, name
        s = out.stats
        # the reductions read every row once; every task streams its 2560 x 1600 tensor
        assert s.planar_ops == sum(1600 * 2560 for t in s.tasks_detail if t.planar_ops)
    out = run_and_count(dev, load(corpus, "activation", "logsoftmax"), {5: x})
    ref = np.log(softmax(xs))
    ok = ref >= np.log(2.0**-14)  # where softmax itself is a normal fp16 value
    assert np.abs(f64(out[4]) - ref)[ok].max() <= 1.5e-2
    out = run_and_count(dev, load(corpus, "unary", "norm"), {5: x})
    ref = xs / np.sqrt((xs * xs).sum(-1, keepdims=True))
    assert np.abs(f64(out[4]) - ref).max() <= 1e-4
    big = np.abs(ref) >= 2.0**-14
    assert (np.abs(f64(out[4]) - ref)[big] / np.abs(ref[big])).max() <= 3e-3
    # norm's 8 tasks: L2 vectors (SourceType/ResultType 0) between the reduction and the
    # broadcast, no DRAM traffic for them
    detail = out.stats.tasks_detail
    assert [t.tile_dma_src_bytes > 0 for t in detail] == [True, True, True, False, False, False, False, True]
    regs = [planar.registers(td) for td in load(corpus, "unary", "norm").tds]
    assert [r["L2.SourceCfg.SourceType"] for r in regs] == [2, 2, 2, 0, 0, 0, 3, 2]
    assert [r["L2.ResultCfg.ResultType"] for r in regs] == [2, 2, 0, 0, 0, 3, 2, 2]
    assert l2.VECTOR == 0
