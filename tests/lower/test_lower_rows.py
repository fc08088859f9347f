"""Row operations lowered to planar programs (fastane.lower.rows): bit for bit against the
slow reference (tests/helpers/reference_rows.py) on random and adversarial rows, tiled and
untiled, counted in stats-only mode, and against Apple's own softmax/log-softmax programs
run on the device for the corpus shape."""

import dataclasses

import numpy as np
import pytest
from tests.helpers import reference_rows as R
from tests.helpers.planar import F16, bits

from fastane.device import Device, planar
from fastane.lower import rows
from fastane.m1 import Limits
from fastane.td import load_program

OPS = rows.ROW_OPS
SMALL = Limits(l2_bytes=2048)  # a few rows per tile: many tiles


def reference(op, x, scale=None, bias=None, eps=1e-5):
    if op == "softmax":
        return R.ref_softmax(x)
    if op == "log_softmax":
        return R.ref_log_softmax(x)
    if op == "layer_norm":
        return R.ref_layer_norm(x, scale, bias, eps)
    if op == "rms_norm":
        return R.ref_rms_norm(x, scale, bias, eps)
    return R.ref_reduce(op, x)


def problem(op, x, scale=None, bias=None, eps=1e-5):
    norm = op in ("layer_norm", "rms_norm")
    return rows.RowOp(op, x.shape[0], x.shape[1], eps if norm else 0.0, scale is not None, bias is not None)


def check(op, x, scale=None, bias=None, eps=1e-5, limits=None):
    x = np.asarray(x, F16)
    p = problem(op, x, scale, bias, eps)
    low = rows.lower(p) if limits is None else rows.lower(p, limits)
    with np.errstate(all="ignore"):
        got, st = rows._execute(low, x, scale, bias)
        want = reference(op, x, scale, bias, eps)
    assert got.shape == want.shape
    assert np.array_equal(bits(got), bits(want)), (op, np.flatnonzero(bits(got) != bits(want))[:5])
    assert st.tasks == low.n_tasks == len(st.tasks_detail)
    return low, st


def cases():
    rng = np.random.default_rng(7)
    yield "normal", rng.standard_normal((13, 96)) * 3
    yield "wide-range", rng.uniform(-300, 300, (6, 40))  # squares and sums overflow fp16
    yield "all-equal", np.full((4, 33), 2.5)
    yield "one-column", rng.standard_normal((5, 1))
    special = rng.standard_normal((8, 24))
    special[0, 3] = np.inf
    special[1, :] = -np.inf
    special[2, 5] = np.nan
    special[3, ::2] = 65504
    special[4, :] = 0.0
    special[4, 1] = -0.0
    special[5, :] = -0.0
    special[6, ::3] = 6e-8  # subnormals
    special[7, 0], special[7, 1] = np.inf, -np.inf
    yield "special", special
    yield "exp-underflow", np.concatenate([np.zeros((3, 1)), np.full((3, 30), -20.0)], axis=1)


CASES = dict(cases())


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("op", OPS)
def test_bit_for_bit_against_the_reference(op, name):
    x = CASES[name].astype(F16)
    check(op, x)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_normalizations_with_scale_and_bias(op):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((11, 64)) * 2).astype(F16)
    g = rng.standard_normal(64).astype(F16)
    b = rng.standard_normal(64).astype(F16)
    check(op, x, g, b, eps=1e-3)
    check(op, x, g, None)
    check(op, x, None, b, eps=0.0)


@pytest.mark.parametrize("op", OPS)
def test_row_tiles(op):
    """Small L2: many row tiles of a few rows (and a shorter last one); same bits."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((23, 50)) * 4).astype(F16)
    scale = rng.standard_normal(50).astype(F16) if op in ("layer_norm", "rms_norm") else None
    low, st = check(op, x, scale, limits=SMALL)
    assert len(low.tiles) > 3 and low.tiles[-1][1] <= low.tile_rows
    assert sum(r for _, r in low.tiles) == 23
    # stats-only counts what the run counted
    counted = rows._execute(low, device=Device(stats_only=True, memory_size=64 << 20), stats_only=True)[1]
    plain = dataclasses.replace(st, nan_outputs=0, lut_underflow=0, lut_overflow=0, tasks_detail=[])
    assert dataclasses.replace(counted, tasks_detail=[]) == plain


@pytest.mark.parametrize("op", ["softmax", "reduce_sum", "layer_norm"])
def test_the_longest_row(op):
    """Rows of 16384 elements, the most a planar task reads."""
    x = (np.random.default_rng(5).standard_normal((2, 16384)) * 2).astype(F16)
    check(op, x)


def test_limits_and_errors():
    with pytest.raises(NotImplementedError, match="16385 elements exceeds the 16384"):
        rows.lower(rows.RowOp("softmax", 2, 16385))
    with pytest.raises(ValueError, match="unknown row operation"):
        rows.lower(rows.RowOp("softmax2", 2, 8))
    with pytest.raises(ValueError, match="does not fit in fp16"):
        rows.lower(rows.RowOp("layer_norm", 2, 8, eps=1e6))
    with pytest.raises(ValueError, match="0 rows"):
        rows.lower(rows.RowOp("reduce_sum", 0, 8))


def test_the_chains_are_the_corpus_chains():
    low = rows.lower(rows.RowOp("softmax", 64, 128))
    names = []
    for td in low.programs[0].tds:
        r = planar.registers(td)
        names.append(planar.config(r, "t").name if planar.is_planar(r) else "lut")
    assert names == ["max-reduce", "sub", "lut", "recip-sum", "mul"]
    low = rows.lower(rows.RowOp("log_softmax", 64, 128))
    assert low.per == 7 and low.kernel[:0x80] != low.kernel[0x80:]


@pytest.mark.parametrize("name,op", [("softmax", "softmax"), ("logsoftmax", "log_softmax")])
def test_agrees_with_apples_program_on_the_corpus_shape(corpus, name, op):
    """Apple's activation/softmax.bin and logsoftmax.bin (2560 rows of 1600, one task per
    stage) and fastane's lowering (row tiles) give the same bits on the device."""
    x = np.random.default_rng(0).uniform(-6, 6, (1, 1, 2560, 1600)).astype(F16)
    dev = Device(memory_size=160 << 20)
    apple = dev.run(load_program(corpus / "m1-kernels" / "activation" / f"{name}.bin"), {5: x})[4]
    got, st = rows.run(rows.RowOp(op, 2560, 1600), x.reshape(2560, 1600), device=dev)
    assert np.array_equal(bits(got), bits(apple.reshape(2560, 1600)))
    assert st.planar_ops > 0 and st.macs == 0
