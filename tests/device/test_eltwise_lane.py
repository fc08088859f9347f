"""The fp16 lane of the elementwise tasks (fastane/device/eltwise.py) against the
block-by-block path and the exact reference: every activation on every fp16 pattern, the
corpus's elementwise programs on adversarial inputs, bits and Stats alike."""

import dataclasses
import json

import numpy as np
import pytest
from tests.helpers.device import ACTIVATIONS, bits
from tests.helpers.activations import ref_bits
from tests.helpers.lut_reference import QNAN

import fastane
from fastane.device import Device
from fastane.device import eltwise
from fastane.td import load_program

F16 = np.float16


def _block_path(monkeypatch):
    monkeypatch.setattr(eltwise, "run", lambda *a, **k: None)


def _canonical(y):
    out = bits(y).reshape(-1).copy()
    out[np.isnan(y.reshape(-1))] = QNAN
    return out


def _every_pattern(copies=4):
    """All 65536 patterns, ``copies`` times in different orders: tasks large enough for
    the lane's tables (>= 65536 elements)."""
    rng = np.random.default_rng(12)
    p = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    return np.concatenate([p] + [rng.permutation(p) for _ in range(copies - 1)]).view(F16)


def _counts(st):
    return dataclasses.replace(st, tasks_detail=[])


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_on_every_pattern_equal_the_block_path(device, monkeypatch, name):
    x = _every_pattern()
    fn = getattr(fastane, name)
    with fastane.errstate(lut_range="ignore", saturation="ignore"):
        fast = fn(x)
        st_fast = fastane.last_stats()
        with monkeypatch.context() as m:
            _block_path(m)
            slow = fn(x)
            st_slow = fastane.last_stats()
    assert np.array_equal(bits(fast), bits(slow)), name
    assert _counts(st_fast) == _counts(st_slow) and st_fast.tasks_detail == st_slow.tasks_detail
    assert st_fast.lut_underflow + st_fast.lut_overflow + st_fast.nan_outputs > 0 or name == "relu"
    # and the exact reference (rationals), on a sample of the patterns
    got = _canonical(fast)
    for i in np.random.default_rng(sum(map(ord, name))).integers(0, x.size, 60):
        want = ref_bits(name, int(x.view(np.uint16)[i]))
        assert got[i] == want, (name, hex(x.view(np.uint16)[i]), hex(got[i]), hex(want))


def test_the_lane_is_taken(device, monkeypatch):
    """A large activation runs on the lane (no float64 tensor: the block path is not
    called), a small one on the block path."""
    calls = []
    real = eltwise.run

    def spy(p, *a):
        out = real(p, *a)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(eltwise, "run", spy)
    fastane.silu(np.ones(1 << 18, F16))
    assert calls and all(calls)
    calls.clear()
    fastane.tanh(np.ones(100, F16))
    assert calls == [False]


# ------------------------------------------------------------------ corpus programs
LANE_PROGRAMS = [
    "unary/tanh",
    "unary/exp",
    "unary/abs",
    "unary/sigmoid",
    "unary/square",
    "unary/sign",
    "unary/inv",
    "unary/sqrt",
    "activation/relu",
    "activation/silu",
    "binary/add",
    "binary/sub",
    "binary/mul",
    "binary/max",
    "binary/min",
    "binary/ave",
    "binary/div",
    "unary/frac",
    "unary/cube",
    "unary/atan",
    "unary/log",
    "activation/softmax",
    "activation/logsoftmax",
    "activation/softmin",
    "unary/norm",
    "unary/ceil",
]
#: the programs with row reductions (max, sum, 1/sum along W), also run on
#: :func:`_adversarial_rows` (random patterns put a NaN in nearly every row)
ROW_PROGRAMS = ["activation/softmax", "activation/logsoftmax", "activation/softmin", "unary/norm"]


@pytest.fixture(scope="module")
def big_device():
    return Device(memory_size=160 << 20)


def _adversarial(shape, seed):
    """Random patterns (NaNs, infinities, subnormals, signed zeros among them) and values
    in the range where the tables and the arithmetic round near ties."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    raw = rng.integers(0, 1 << 16, n).astype(np.uint16).view(F16)
    normal = (rng.standard_normal(n) * 3).astype(F16)
    return np.where(rng.random(n) < 0.3, raw, normal).reshape(shape)


def _adversarial_rows(shape, seed):
    """Rows (along W) of one kind each, so that a row reduction sees each: fp16 values
    of every magnitude, without NaN or inf (sums that overflow, cancel, or stay
    subnormal), with one +inf, with +inf and -inf, with one NaN, huge values (saturating
    sums), subnormals and signed zeros only, all -0, ordinary values."""
    rng = np.random.default_rng(seed)
    *outer, w = shape
    rows = int(np.prod(outer))
    finite = rng.integers(0, 0x7C00, (rows, w)).astype(np.uint16) | (
        rng.integers(0, 2, (rows, w)) << 15
    ).astype(np.uint16)
    kind = np.arange(rows) % 8
    x = finite.view(F16).copy()
    x[kind == 7] = (rng.standard_normal(((kind == 7).sum(), w)) * 3).astype(F16)
    x[kind == 4] = np.where(rng.random(((kind == 4).sum(), w)) < 0.5, 65504, 60000).astype(F16)
    x[kind == 5] = (
        (rng.integers(0, 0x400, ((kind == 5).sum(), w)) | 0x8000 * (rng.random(((kind == 5).sum(), w)) < 0.5))
        .astype(np.uint16)
        .view(F16)
    )
    x[kind == 6] = F16(-0.0)
    col = rng.integers(0, w, rows)
    for r in np.flatnonzero(kind == 1):
        x[r, col[r]] = np.inf
    for r in np.flatnonzero(kind == 2):
        x[r, col[r]], x[r, (col[r] + 1) % w] = np.inf, -np.inf
    for r in np.flatnonzero(kind == 3):
        x[r, col[r]] = np.nan
    return x.reshape(shape)


def _corpus_run(big_device, corpus, monkeypatch, path, make):
    meta = json.loads((corpus / "m1-kernels" / "kernels.json").read_text())
    program = load_program(corpus / "m1-kernels" / f"{path}.bin")
    assert meta[path.split("/")[1]]["file"] == f"{path}.bin"
    slots = big_device.tensors(program)
    inputs = {s: make(t.shape, s) for s, t in slots.items() if t.role == "input"}
    with fastane.errstate(lut_range="ignore", saturation="ignore"):
        fast = big_device.run(program, inputs)
        with monkeypatch.context() as m:
            _block_path(m)
            slow = big_device.run(program, inputs)
    assert set(fast) == set(slow)
    for s in fast:
        assert np.array_equal(bits(fast[s]), bits(slow[s])), (path, s)
    assert fast.stats == slow.stats
    return fast


@pytest.mark.parametrize("path", LANE_PROGRAMS)
def test_corpus_programs_equal_the_block_path(big_device, corpus, monkeypatch, path):
    _corpus_run(big_device, corpus, monkeypatch, path, _adversarial)


@pytest.mark.parametrize("path", ROW_PROGRAMS)
def test_corpus_row_programs_equal_the_block_path(big_device, corpus, monkeypatch, path):
    """The reductions on rows of every kind, and every task of the chain on the lane
    except the NE tasks over one value per row (too few elements for a table)."""
    calls = []
    real = eltwise.run

    def spy(p, *a):
        out = real(p, *a)
        calls.append((out is not None, p.geometry.cin * p.geometry.hin * p.geometry.win))
        return out

    with monkeypatch.context() as m:
        m.setattr(eltwise, "run", spy)
        fast = _corpus_run(big_device, corpus, monkeypatch, path, _adversarial_rows)
    assert calls and all(on for on, n in calls if n >= 1 << 16), (path, calls)
    for y in fast.values():  # some rows NaN, not all
        rows = np.isnan(y.astype(np.float32)).reshape(-1, y.shape[-1]).any(axis=1)
        assert 0 < rows.sum() < rows.size, path


# ------------------------------------------------------------------ the binary kernel
#: (s0, s, c): the identity, the corpus's (softmax's log2(e), sub's -1, ave's 0.5), scales
#: that make subnormals or saturate, and an offset (the general piece)
WINDOW_SCALES = [
    (1.0, 1.0, 0.0),
    (1.0, float(F16(1.4423828125)), 0.0),
    (-1.0, 1.0, 0.0),
    (1.0, 0.5, 0.0),
    (float(F16(2.0**-10)), 1.0, 0.0),
    (1.0, float(F16(2.0**-12)), 0.0),
    (3.0, -(2.0**15), 0.0),
    (float(F16(0.5)), 2.0, 0.5),
]


@pytest.mark.parametrize(
    "op,bcast",
    [(op, bc) for op in ("add", "sub", "mul", "max", "min") for bc in (None, "a", "b")]
    + [(op, bc) for op in ("scale", "abs") for bc in (None, "a")],
)
def test_window_kernel_on_long_and_broadcast_rows(op, bcast):
    """``eltwise_window`` (fp16 windows, rows longer than its decode pieces, a row-broadcast
    operand; the unary ops too, which the lane runs there when a table does not fit)
    against ``eltwise_serial`` on float64 (the block path's kernel), with scales."""
    from fastane.kernels import planar as k

    code = {
        "add": k.OP_ADD,
        "sub": k.OP_SUB,
        "mul": k.OP_MUL,
        "max": k.OP_MAX,
        "min": k.OP_MIN,
        "scale": k.OP_PASS,
        "abs": k.OP_ABS,
    }[op]
    H, W = 3, 5000
    a = _adversarial((H, W), 1).view(np.uint16).reshape(-1)
    b = _adversarial((H, W), 2).view(np.uint16).reshape(-1)
    if op in ("scale", "abs"):
        b = np.zeros(0, np.uint16)
    vec = _adversarial((H, 1), 3).view(np.uint16).reshape(-1)
    for s0, s, c in WINDOW_SCALES:
        ops = {"a": (a, W, 1), "b": (b, W if b.size else 0, 1 if b.size else 0)}
        if bcast is not None:
            ops[bcast] = (vec, 1, 0)
        (xa, ra, sa), (xb, rb, sb) = ops["a"], ops["b"]
        out = np.empty(H * W, np.uint16)
        nans = k.eltwise_window(xa, 0, ra, sa, xb, 0, rb, sb, 1, H, W, code, s0, s, c, out, 0, W, W)
        fa = xa.view(F16).astype(np.float64).reshape(H, -1)
        fb = xb.view(F16).astype(np.float64).reshape(H, -1) if xb.size else np.empty((H, 0))
        want = np.empty((H, W), np.uint16)
        want_nans = k.eltwise_serial(fa, fb, code, s0, s, c, want)
        assert np.array_equal(out.reshape(H, W), want), (op, bcast, s0, s, c)
        assert nans == want_nans


# ------------------------------------------------------------------ the row reductions
REDUCTIONS = [("sum", False), ("sum", True), ("max", False), ("max", True)]
ROW_SCALES = [
    (1.0, 1.0, 0.0),
    (1.0, 1.4423828125, 0.0),
    (1.0, 0.5, 0.25),
    (-1.0, 1.0, 0.0),
    (float(F16(2.0**-10)), 1.0, 0.0),
    (3.0, -2.0, 0.5),
    (1.0, 2.0**15, 0.0),
]


@pytest.mark.parametrize("kind,recip", REDUCTIONS)
@pytest.mark.parametrize("scales", ROW_SCALES)
def test_reduce_kernel_on_rows_in_place(kind, recip, scales):
    """``reduce_window`` (fp16 rows read in place at a row stride, the sum and the max on
    the patterns when ``s0 = 1``) against ``reduce_serial`` on float64 (the block path's
    kernel): rows of every kind (:func:`_adversarial_rows`), all 65536 patterns in one
    row, rows longer than 2**21 / 65504 would let an int32 sum overflow, and an empty row."""
    from fastane.kernels import planar as k

    code = k.RED_MAX if kind == "max" else k.RED_SUM
    s0, s, c = scales
    W, stride = 1600, 1664
    x = _adversarial_rows((64, W), 5).view(np.uint16)
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    cases = [(x, W, stride)]
    finite = patterns[(patterns & 0x7FFF) < 0x7C00]
    for row in (patterns[(patterns & 0x7FFF) <= 0x7C00], finite, finite[finite < 0x8000]):
        cases.append((row[None], row.size, row.size))
    cases.append((np.full((2, 1 << 16), 0x7BFF, np.uint16), 1 << 16, 1 << 16))  # 2**16 x 65504
    cases.append((np.zeros((3, 0), np.uint16), 0, 0))
    for rows, w, st in cases:
        r = rows.shape[0]
        flat = np.zeros(max((r - 1) * st + w, 0) + 7, np.uint16)
        for i in range(r):
            flat[i * st : i * st + w] = rows[i]
        got = np.empty(r, np.uint16)
        nans = k.reduce_window(flat, st, r, w, code, s0, recip, s, c, got)
        want = np.empty(r, np.uint16)
        want_nans = k.reduce_serial(rows.view(F16).astype(np.float64), code, s0, recip, s, c, want)
        assert np.array_equal(got, want), (kind, recip, scales, w, np.flatnonzero(got != want)[:5])
        assert nans == want_nans


@pytest.mark.parametrize("nonlinear", [0, 1])
def test_plain_stage_kernel_is_its_table(nonlinear):
    """The NE stage without bias, PostScale or LUT (identity, ReLU) needs no table:
    plain_window gives what lookup_window gives with that stage's table, on every pattern
    (NaN ones, -0, -inf, subnormals), in strided windows with zeroed row tails."""
    from fastane.device import ne
    from fastane.kernels import ne_table

    cfg = ne.NEConfig(bias_mode=0, acc_bias=0, post_scale=0x3C00, nonlinear=nonlinear)
    assert ne.plain(cfg)
    assert not ne.plain(dataclasses.replace(cfg, bias_mode=1))  # an added +0 turns -0 into +0
    assert not ne.plain(dataclasses.replace(cfg, post_scale=0x3800))
    table = ne.pattern_table(cfg, None, 1 << 16)
    C, H, W = 4, 128, 130  # 66560 elements: every pattern and some twice
    src = np.zeros(C * H * 160, np.uint16)
    grid = src.reshape(C, H, 160)
    grid[:, :, :W] = np.resize(np.random.default_rng(1).permutation(1 << 16), (C, H, W)).astype(np.uint16)
    got = np.full(C * H * 192, 0xABCD, np.uint16)
    want = got.copy()
    counts = np.zeros(3, np.int64)
    ne_table.lookup_window(src, H * 160, 160, C, H, W, table, want, H * 192, 192, 136, counts)
    nans = ne_table.plain_window(src, H * 160, 160, C, H, W, nonlinear == 1, got, H * 192, 192, 136)
    assert np.array_equal(got, want)
    assert nans == counts[0] > 0 and counts[1] == counts[2] == 0


def test_copy_is_the_plain_window():
    """A unary pass with unit scales and no offset (the lane's copy,
    ``fastane.device.eltwise._copy``) writes what ``ne_table.plain_window`` without ReLU
    writes, for every fp16 pattern: the same bits, the same NaN count, the same zeroed
    burst tails."""
    from fastane.kernels import ne_table
    from fastane.kernels import planar as k

    C, H, W, wpad = 2, 4, 8192, 8200
    a = np.arange(1 << 16, dtype=np.uint16)
    want = np.full(C * H * wpad, 0xFFFF, np.uint16)
    got = want.copy()
    empty = np.zeros(0, np.uint16)
    want_nans = k.eltwise_window(
        a, H * W, W, 1, empty, 0, 0, 0, C, H, W, k.OP_PASS, 1.0, 1.0, 0.0, want, H * wpad, wpad, wpad
    )
    nans = ne_table.plain_window(a, H * W, W, C, H, W, False, got, H * wpad, wpad, wpad)
    assert np.array_equal(got, want)
    assert nans == want_nans == 2 * 1023


def test_sum_value_rounds_the_exact_sum_once():
    """``planar._sum_value`` (integer rounding of an exact sum in units of ``2**-24``) gives
    the fp16 value ``lut.round_sum_f16`` gives that sum: random sums of every magnitude,
    the ties and their neighbours at every rounding position, and fp16's overflow edge."""
    from numba import njit

    from fastane.kernels import planar as k
    from fastane.kernels.fp16 import f16_to_f64
    from fastane.kernels.lut import round_sum_f16

    @njit
    def mismatches(vals):
        bad = 0
        for acc in vals:
            hi = np.float64(acc)
            lo = np.float64(acc - np.int64(hi))
            want = f16_to_f64(round_sum_f16(hi * 2.0**-24, lo * 2.0**-24, 0.0, 0.0))
            got = k._sum_value(acc, False, False, False)
            bad += not (got == want and np.signbit(got) == np.signbit(want))
        return bad

    rng = np.random.default_rng(0)
    vals = [np.arange(-(1 << 13), 1 << 13, dtype=np.int64)]
    vals.append(np.arange(65504 * 2**24 - 2**22, 65536 * 2**24 + 2**20, 99991, dtype=np.int64))
    for e in range(1, 52):
        vals.append(rng.integers(0, 1 << e, 500, dtype=np.int64))
        q = rng.integers(1024, 2048, 50, dtype=np.int64) << np.int64(e)
        for d in (-1, 0, 1):
            vals.append(q + (np.int64(1) << np.int64(e - 1)) + d)
    vals = np.concatenate(vals)
    assert mismatches(np.concatenate([vals, -vals])) == 0
