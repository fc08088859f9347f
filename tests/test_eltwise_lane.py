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
