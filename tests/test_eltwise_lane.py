"""The fp16 lane of the elementwise tasks (fastane/device/eltwise.py) against the
block-by-block path and the exact reference: every activation on every fp16 pattern, the
corpus's elementwise programs on adversarial inputs, bits and Stats alike."""

import dataclasses
import json

import numpy as np
import pytest
from device_helpers import ACTIVATIONS, bits
from test_compiler_eltwise import ref_bits
from test_lut_reference import QNAN

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
]


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


@pytest.mark.parametrize("path", LANE_PROGRAMS)
def test_corpus_programs_equal_the_block_path(big_device, corpus, monkeypatch, path):
    meta = json.loads((corpus / "m1-kernels" / "kernels.json").read_text())
    program = load_program(corpus / "m1-kernels" / f"{path}.bin")
    assert meta[path.split("/")[1]]["file"] == f"{path}.bin"
    slots = big_device.tensors(program)
    inputs = {s: _adversarial(t.shape, s) for s, t in slots.items() if t.role == "input"}
    with fastane.errstate(lut_range="ignore", saturation="ignore"):
        fast = big_device.run(program, inputs)
        with monkeypatch.context() as m:
            _block_path(m)
            slow = big_device.run(program, inputs)
    assert set(fast) == set(slow)
    for s in fast:
        assert np.array_equal(bits(fast[s]), bits(slow[s])), (path, s)
    assert fast.stats == slow.stats


# ------------------------------------------------------------------ the binary kernel
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize("bcast", [None, "a", "b"])
def test_binary_kernel_on_long_and_broadcast_rows(op, bcast):
    """``eltwise_window`` (fp16 windows, rows longer than its decode pieces, a row-broadcast
    operand) against ``eltwise_serial`` on float64 (the block path's kernel), with scales."""
    from fastane.kernels import planar as k

    code = {"add": k.OP_ADD, "sub": k.OP_SUB, "mul": k.OP_MUL, "max": k.OP_MAX, "min": k.OP_MIN}[op]
    H, W = 3, 5000
    a = _adversarial((H, W), 1).view(np.uint16).reshape(-1)
    b = _adversarial((H, W), 2).view(np.uint16).reshape(-1)
    vec = _adversarial((H, 1), 3).view(np.uint16).reshape(-1)
    for s0, s, c in [(1.0, 1.0, 0.0), (1.0, float(F16(1.4423828125)), 0.0), (float(F16(0.5)), 2.0, 0.5)]:
        ops = {"a": (a, W, 1), "b": (b, W, 1)}
        if bcast is not None:
            ops[bcast] = (vec, 1, 0)
        (xa, ra, sa), (xb, rb, sb) = ops["a"], ops["b"]
        out = np.empty(H * W, np.uint16)
        nans = k.eltwise_window(xa, 0, ra, sa, xb, 0, rb, sb, 1, H, W, code, s0, s, c, out, 0, W, W)
        fa = xa.view(F16).astype(np.float64).reshape(H, -1)
        fb = xb.view(F16).astype(np.float64).reshape(H, -1)
        want = np.empty((H, W), np.uint16)
        want_nans = k.eltwise_serial(fa, fb, code, s0, s, c, want)
        assert np.array_equal(out.reshape(H, W), want), (op, bcast, s0, s, c)
        assert nans == want_nans
