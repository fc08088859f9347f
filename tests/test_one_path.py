"""One path for data: the numpy API lowers every call to TDs and runs them on the device
(DESIGN.md, "One path for data"); its Stats are the device's."""

import numpy as np
import pytest
from tests.helpers.device import bits
from tests.helpers.reference import ref_conv2d, ref_matmul

import fastane
from fastane import lower
from fastane.device import Device
from fastane.device.engine import Engine

F16 = np.float16
TD = 0x274


CALLS = {
    "matmul": lambda r: fastane.matmul(r.standard_normal((3, 5, 9)), r.standard_normal((9, 4))),
    "matmul_batched": lambda r: fastane.matmul(r.standard_normal((3, 5, 9)), r.standard_normal((3, 9, 4))),
    "linear": lambda r: fastane.linear(
        r.standard_normal((6, 9)), r.standard_normal((7, 9)), r.standard_normal(7), activation="gelu"
    ),
    "conv1d": lambda r: fastane.conv1d(
        r.standard_normal((2, 3, 11)), r.standard_normal((5, 3, 3)), padding=1, stride=2
    ),
    "conv2d": lambda r: fastane.conv2d(
        r.standard_normal((2, 4, 6, 7)),
        r.standard_normal((6, 2, 3, 3)),
        r.standard_normal(6),
        padding="same",
        groups=2,
        activation="relu",
    ),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_call_runs_on_the_device(device, name):
    before = device.stats.tasks
    y = CALLS[name](np.random.default_rng(0))
    st = fastane.last_stats()
    assert y.dtype == F16 and st.tasks >= 1
    assert device.stats.tasks == before + st.tasks  # the device ran exactly these tasks
    assert len(st.tasks_detail) == st.tasks and st.control_dma_bytes == TD * st.tasks
    assert st.kernel_dma_bytes > 0 and st.tile_dma_src_bytes > 0 and st.tile_dma_dst_bytes > 0
    assert st.macs == sum(t.macs for t in st.tasks_detail) > 0


def test_there_is_no_second_path(device, monkeypatch):
    def broken(self, p):
        raise RuntimeError("the engine was asked to run a task")

    monkeypatch.setattr(Engine, "_run_task", broken)
    for call in CALLS.values():
        with pytest.raises(RuntimeError, match="engine was asked"):
            call(np.random.default_rng(1))


def test_results_are_the_reference_bits(device):
    r = np.random.default_rng(2)
    a = (r.standard_normal((4, 33)) * 20).astype(F16)
    b = (r.standard_normal((33, 5)) * 20).astype(F16)
    a[0, 0] = np.inf
    with fastane.errstate(saturation="ignore"):
        assert np.array_equal(bits(fastane.matmul(a, b)), bits(ref_matmul(a, b)))
        assert np.array_equal(bits(fastane.matmul(a[1], b)), bits(ref_matmul(a[1:2], b)[0]))
    x = (r.standard_normal((1, 3, 6, 6)) * 8).astype(F16)
    w = (r.standard_normal((4, 3, 2, 3)) * 8).astype(F16)
    got = fastane.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(2, 1))
    want = ref_conv2d(x, w, stride=(2, 1), padding=((1, 1), (2, 2)), dilation=(2, 1))
    assert np.array_equal(bits(got), bits(want))


def test_saturation_reported_from_the_device_stats(device):
    with pytest.warns(fastane.SaturationWarning, match="conv2d: 2 of 2 outputs saturated"):
        fastane.conv2d(np.full((1, 256, 1, 1), 128.0), np.ones((2, 256, 1, 1)))
    st = fastane.last_stats()
    assert st.saturated == 2 and st.tasks_detail[0].saturated == 2


def test_a_stats_only_default_device_still_computes():
    old = lower.default_device()
    lower.set_default_device(Device(memory_size=16 << 20, stats_only=True))
    try:
        y = fastane.matmul(np.ones((2, 3)), np.ones((3, 4)))
        assert np.all(y == 3) and fastane.last_stats().tasks == 1
    finally:
        lower.set_default_device(old)


def test_empty_reductions_need_no_task(device):
    y = fastane.linear(np.ones((2, 0)), np.ones((3, 0)), np.array([1.0, -2.0, 0.5]), activation="relu")
    assert np.array_equal(y, np.array([[1, 0, 0.5]] * 2, F16))
    assert fastane.last_stats().tasks == 0 and device.stats.tasks == 0
    assert fastane.matmul(np.ones((0, 3)), np.ones((3, 2))).shape == (0, 2)


def test_a_lowered_program_runs_like_a_corpus_program():
    """With its kernel bytes filled in, a one-tile lowered program is an ordinary Program:
    Device.run places its input from the TDs' own DMA registers."""
    r = np.random.default_rng(3)
    x = (r.standard_normal((1, 5, 6, 7)) * 4).astype(F16)
    w = (r.standard_normal((9, 5, 3, 3)) * 4).astype(F16)
    b = r.standard_normal(9).astype(F16)
    low = lower.build(lower.Conv(1, 5, 6, 7, 9, 3, 3, pad=((1, 1), (1, 1)), bias=True, activation="relu"))
    (program,) = low.with_weights(w, b)
    assert low.n_tasks == 1 and len(program.kernel) == low.kernel_bytes
    out = Device(memory_size=16 << 20).run(program, {lower.lowered.SLOT_INPUT: x})
    z = (ref_conv2d(x, w, padding=1).astype(np.float64) + b[None, :, None, None]).astype(F16)
    want = np.where(z > 0, z, F16(0))  # ReLU (no NaN here)
    assert np.array_equal(bits(out[lower.lowered.SLOT_OUTPUT]), bits(want))
    api = fastane.conv2d(x, w, b, padding=1, activation="relu")  # the API: same bits, same Stats
    assert np.array_equal(bits(api), bits(want)) and out.stats == fastane.last_stats()
