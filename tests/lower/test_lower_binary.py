"""fastane.lower.binary: elementwise binary ops lowered to planar-engine tasks, bit for bit
against the independent reference of the planar tests (each result rounded once)."""

import numpy as np
import pytest

import fastane
from fastane.lower import binary
from tests.helpers.planar import bits, ref_eltwise

SPECIAL = np.array(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        -65504.0,
        np.inf,
        -np.inf,
        np.nan,
        6e-8,
        -6e-8,
        6.1e-5,
        0.5,
        2048.0,
        2049.0,
        1e-3,
    ],
    np.float16,
)


@pytest.mark.parametrize("name", sorted(binary.OPS))
@pytest.mark.parametrize("n", [1, 33, 4096, 70001])
def test_bit_exact_against_reference(name, n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * 300).astype(np.float16)
    b = (rng.standard_normal(n) * 300).astype(np.float16)
    a[: min(n, SPECIAL.size)] = SPECIAL[: min(n, SPECIAL.size)]
    b[: min(n, SPECIAL.size)] = SPECIAL[::-1][: min(n, SPECIAL.size)]
    y = binary.binary(name, a, b)
    np.testing.assert_array_equal(bits(y), bits(ref_eltwise(binary.OPS[name], a, b)))


@pytest.mark.parametrize("n", [33, 70001])
def test_kept_buffers_carry_nothing_between_calls(n):
    """The program keeps its buffers on the device between calls: each call on them gives
    the reference's bits of its own operands (the previous ones, NaN and infinities here,
    leave nothing behind), and no new buffers are bound."""
    from fastane import lower

    rng = np.random.default_rng(7)
    low = binary.lower(n, "add")
    dev = lower.default_device()
    for i in range(4):
        a = (rng.standard_normal(n) * 300).astype(np.float16)
        b = (rng.standard_normal(n) * 300).astype(np.float16)
        if i % 2 == 0:
            a[::3], b[1::5] = np.nan, -np.inf
        for name in ("add", "sub", "maximum"):
            y = binary.binary(name, a, b)
            np.testing.assert_array_equal(bits(y), bits(ref_eltwise(binary.OPS[name], a, b)))
        y = binary.negative(a)
        np.testing.assert_array_equal(bits(y), bits(-a))
    assert len(low._free[id(dev)]) == 1


def test_every_special_pair():
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    for name in binary.OPS:
        np.testing.assert_array_equal(
            bits(binary.binary(name, a, b)), bits(ref_eltwise(binary.OPS[name], a, b)), err_msg=name
        )


def test_runs_on_the_device_and_counts():
    a = np.ones((3, 70000), np.float32)
    y = binary.add(a, np.float32(2.0))  # broadcast materialised, float32 rounded
    assert y.dtype == np.float16 and y.shape == (3, 70000) and (y == 3).all()
    st = fastane.last_stats()
    low = binary.lower(3 * 70000, "add")
    assert st.tasks == low.n_tasks >= 2 and st.planar_ops == 3 * 70000
    assert st.tile_dma_src_bytes >= 2 * 2 * 3 * 70000 and st.tile_dma_dst_bytes >= 2 * 3 * 70000


def test_errors():
    with pytest.raises(ValueError, match="could not be broadcast"):
        binary.add(np.ones(3), np.ones(4))
    with pytest.raises(TypeError):
        binary.mul(np.ones(3), np.array(["a", "b", "c"]))
    assert binary.add(np.ones((0, 3)), np.ones(3)).shape == (0, 3)
    assert binary.add(1.0, 2.0) == 3.0


@pytest.mark.parametrize("name", sorted(binary.OPS))
def test_the_program_matches_apples(corpus, name):
    """fastane's binary task has the register values that define the computation of
    Apple's binary/<op>.bin (slots 5 and 6 in, 4 out, TaskType 3, the Planar words), and
    Apple's program run on the device computes exactly what fastane.lower.binary does."""
    from fastane.device import Device, planar as planarmod
    from fastane.td import load_program

    op = binary.OPS[name]
    apple = load_program(corpus / "m1-kernels" / "binary" / f"{op}.bin")
    low = binary.lower(2560 * 1600, op)
    keys = [
        "Header.RBE0",
        "Header.RBase0",
        "Header.RBE1",
        "Header.RBase1",
        "Header.WBE",
        "Header.WBase",
        "Header.KBE0",
        "L2.SourceCfg.SourceType",
        "L2.ResultCfg.ResultType",
        "NE.MACCfg.OpMode",
        "Common.ChCfg.InFmt",
        "Common.ChCfg.Src1InFmt",
        "Common.Cfg.TaskType",
        "TileDMASrc1.Fmt.MemFmt",
        "Planar.Word[0]",
        "Planar.Word[1]",
        "Planar.Word[2]",
        "Planar.Word[3]",
    ]
    a = planarmod.registers(apple.tds[0])
    for td in low.programs[0].tds:
        m = planarmod.registers(td)
        assert {k: m[k] for k in keys} == {k: a[k] for k in keys}
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((1, 1, 2560, 1600)) * 100).astype(np.float16)
    y = (rng.standard_normal((1, 1, 2560, 1600)) * 100).astype(np.float16)
    out = Device(memory_size=96 << 20).run(apple, {5: x, 6: y})
    np.testing.assert_array_equal(bits(out[4]), bits(binary.binary(name, x, y)))


def test_divide_is_the_reciprocal_table_then_a_planar_multiply():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(5000) * 50).astype(np.float16)
    b = (rng.standard_normal(5000) * 50).astype(np.float16)
    b[:4] = [0.0, -0.0, np.inf, 1e-7]
    y = binary.divide(a, b)
    st = fastane.last_stats()
    np.testing.assert_array_equal(bits(y), bits(ref_eltwise("mul", a, fastane.reciprocal(b))))
    assert st.tasks == 2 and st.kernel_dma_bytes > 0 and st.planar_ops == 5000
    q = a / b.astype(np.float64)
    ok = np.isfinite(q) & (q != 0) & (np.abs(b.astype(np.float64)) > 1e-4)
    rel = np.abs(y[ok].astype(np.float64) / (a[ok].astype(np.float64) / b[ok]) - 1)
    assert rel.max() < 2e-3  # the table's 8.4e-4 and one more rounding


def test_divide_matches_apples_div(corpus):
    from fastane.device import Device
    from fastane.td import load_program

    apple = load_program(corpus / "m1-kernels" / "binary" / "div.bin")
    rng = np.random.default_rng(8)
    x = rng.uniform(-8, 8, (1, 1, 2560, 1600)).astype(np.float16)
    y = rng.uniform(0.5, 6.5, (1, 1, 2560, 1600)).astype(np.float16)
    out = Device(memory_size=128 << 20).run(apple, {5: x, 6: y})
    np.testing.assert_array_equal(bits(out[4]), bits(binary.divide(x, y)))


@pytest.mark.parametrize("name", sorted(binary.UNARY))
def test_unary_bit_exact(name):
    x = np.concatenate([SPECIAL, (np.random.default_rng(2).standard_normal(3000) * 300).astype(np.float16)])
    y = binary.unary(name, x)
    want = {
        "absolute": lambda: ref_eltwise("abs", x),
        "negative": lambda: ref_eltwise("scale", x, in_scale=-1.0),
        "square": lambda: ref_eltwise("mul", x, x),
    }[name]()
    np.testing.assert_array_equal(bits(y), bits(want))
    assert fastane.last_stats().tasks == 1 and fastane.last_stats().planar_ops == x.size


@pytest.mark.parametrize("name, program", [("absolute", "abs"), ("square", "square")])
def test_unary_programs_match_apples(corpus, name, program):
    from fastane.device import Device, planar as planarmod
    from fastane.td import load_program

    apple = load_program(corpus / "m1-kernels" / "unary" / f"{program}.bin")
    keys = [
        "Header.RBE0",
        "Header.RBase0",
        "Header.RBE1",
        "Header.RBase1",
        "Header.WBase",
        "Common.Cfg.TaskType",
        "Common.ChCfg.Src1InFmt",
        "Planar.Word[0]",
        "Planar.Word[1]",
        "Planar.Word[2]",
        "Planar.Word[3]",
    ]
    a = planarmod.registers(apple.tds[0])
    m = planarmod.registers(binary.lower(2560 * 1600, binary.UNARY[name]).programs[0].tds[0])
    assert {k: m[k] for k in keys} == {k: a[k] for k in keys}
    x = (np.random.default_rng(9).standard_normal((1, 1, 2560, 1600)) * 100).astype(np.float16)
    out = Device(memory_size=96 << 20).run(apple, {5: x})
    np.testing.assert_array_equal(bits(out[4]), bits(binary.unary(name, x)))


def _ref_relu_bits(y16):
    """ReLU of fp16 results as the NE's ReLU gives it: a set sign bit (negative, -0,
    -inf) gives +0; every NaN reads out 0x7e00."""
    b = bits(y16).copy()
    b[(b & 0x8000) != 0] = 0
    b[np.isnan(y16)] = 0x7E00
    return b


@pytest.mark.parametrize("name", sorted(binary.OPS))
@pytest.mark.parametrize("n", [1, 33, 70001, 802816])
def test_relu_after_it_in_one_program(device, name, n):
    """``activation="relu"``: the planar result stays in L2 and an NE task writes its ReLU:
    the reference's rounded result, then ReLU on it, bit for bit; two tasks a tile, NaN
    counted by both tasks, as by the two calls one after the other."""
    rng = np.random.default_rng(n + len(name))
    a = rng.integers(0, 1 << 16, n).astype(np.uint16).view(np.float16)
    b = (rng.standard_normal(n) * 300).astype(np.float16)
    a[: min(n, SPECIAL.size)] = SPECIAL[: min(n, SPECIAL.size)]
    b[: min(n, SPECIAL.size)] = SPECIAL[::-1][: min(n, SPECIAL.size)]
    y = binary.binary(name, a, b, "relu")
    st = fastane.last_stats()
    ref = ref_eltwise(binary.OPS[name], a, b)
    np.testing.assert_array_equal(bits(y), _ref_relu_bits(ref))
    low = binary.lower(n, binary.OPS[name], True)
    assert st.tasks == low.n_tasks == 2 * len(low.tiles)
    with np.errstate(all="ignore"):
        z = binary.binary(name, a, b)
        separate = fastane.last_stats().nan_outputs
        fastane.relu(z)
        separate += fastane.last_stats().nan_outputs
    assert st.nan_outputs == separate  # the planar task's and the NE task's, as in two calls
    with pytest.raises(ValueError, match="activation must be None or 'relu'"):
        binary.binary(name, a, b, "tanh")


def _ref_composed(name, x):
    """The slow reference of a composition: each table by the Fraction LUT reference
    (tests/helpers/activations.ref_bits), each planar stage by ref_eltwise (one rounding)."""
    from tests.helpers.activations import ref_bits

    def table(t, v):
        return np.array([ref_bits(t, int(b)) for b in v.view(np.uint16).reshape(-1)], np.uint16).view(F16)

    ln2 = F16(np.log(2))  # unary/log.bin's scale, 0x398c
    if name == "softplus":
        x = ref_eltwise("add", table("exp", x), F16(1))
    return ref_eltwise("mul", table("log2", x), ln2)


F16 = np.float16
#: every 37th fp16 pattern, and every one from 10 to 11.25 (exp's overflow, and where
#: softplus is reported to collapse on the ANE: 10.39)
SAMPLE = np.concatenate(
    [np.arange(0, 1 << 16, 37, dtype=np.uint16), np.arange(0x4900, 0x49A1, dtype=np.uint16)]
).view(F16)


@pytest.mark.parametrize("name", sorted(binary.COMPOSED))
def test_composed_bit_exact_against_the_slow_reference(name):
    x = np.concatenate([SPECIAL, SAMPLE])
    y = binary.composed(name, x)
    np.testing.assert_array_equal(bits(y), bits(_ref_composed(name, x)))
    st = fastane.last_stats()
    assert st.planar_ops == x.size * sum(stage != "table" for stage, _ in binary.COMPOSED[name])


def test_log_matches_apples_log(corpus):
    """Apple's unary/log.bin on the device is the composition, bit for bit."""
    from fastane.device import Device
    from fastane.td import load_program

    apple = load_program(corpus / "m1-kernels" / "unary" / "log.bin")
    rng = np.random.default_rng(9)
    x = np.exp(rng.uniform(-17, 11.5, (1, 1, 2560, 1600))).astype(F16)
    x.reshape(-1)[: SPECIAL.size] = SPECIAL
    out = Device(memory_size=96 << 20).run(apple, {5: x})
    np.testing.assert_array_equal(bits(out[4]), bits(binary.composed("log", x)))


def test_softplus_overflows_where_exp_does():
    """No safeguard: softplus is inf exactly where exp overflows fp16 (x >= 11.09, ln 65520 =
    11.0901; beyond the exp2 table's range, counted as LUT overflows, or rounded up to inf
    at its edge); fine up to there, 10.39..10.40 included (where Apple's ANE is reported
    to drop to 0: docs/numerics.md)."""
    x = np.arange(0x4900, 0x49A1, dtype=np.uint16).view(F16)  # 10 .. 11.26
    y = binary.composed("softplus", x).astype(np.float64)
    over = fastane.last_stats().lut_overflow
    assert 0 < over <= int(np.isinf(fastane.exp(x)).sum()) == over + 1
    np.testing.assert_array_equal(np.isinf(y), np.isinf(fastane.exp(x)))
    first = x[np.argmax(np.isinf(y))]
    assert float(x[np.argmax(np.isinf(y)) - 1]) < np.log(65520) <= float(first)
    ok = ~np.isinf(y)
    assert np.abs(y[ok] - np.logaddexp(0, x[ok].astype(np.float64))).max() < 1e-2
