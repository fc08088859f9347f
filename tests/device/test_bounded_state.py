"""Bounded state: a long-running process that calls the numpy API, the activations and
Device.run over and over holds constant memory (docs/device.md "Task manager").  The task
manager keeps the last HISTORY_SIZE completed tasks and each event FIFO the last
EVENT_FIFO_DEPTH events; nothing else grows per call."""

import gc
import tracemalloc

import numpy as np
import pytest

import fastane
from fastane import lower
from fastane.device import Device
from fastane.device.taskmanager import EVENT_FIFO_DEPTH, HISTORY_SIZE, TaskManager

F16 = np.float16


def test_the_default_device_keeps_a_bounded_history(device):
    a = np.ones((4, 4), F16)
    calls = HISTORY_SIZE + 100
    tasks = 0
    for _ in range(calls):
        fastane.matmul(a, a)
        tasks += fastane.last_stats().tasks
    assert tasks >= calls
    tm = device.tm
    assert len(tm.history) == HISTORY_SIZE
    assert [t.order for t in tm.history] == list(range(tasks - HISTORY_SIZE, tasks))  # the newest
    assert tm.read32(0x20000 + 0x14) == EVENT_FIFO_DEPTH  # TM_IRQ_EVTC(0) saturates
    assert tm.events_dropped == [tasks - EVENT_FIFO_DEPTH, 0]
    events = device.events(0)
    assert len(events) == EVENT_FIFO_DEPTH and [e.seq for e in events] == sorted(e.seq for e in events)
    assert events[-1].seq == tm.history[-1].seq  # the oldest were dropped


def test_sizes_are_configurable_and_zero_keeps_none():
    dev = Device(memory_size=8 << 20, history_size=3, event_depth=0)
    assert dev.tm.history == [] and dev.tm.events[0].maxlen == 0
    tm = TaskManager(lambda task: None, history_size=0)
    assert tm._history.maxlen == 0
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match="history_size must be an int >= 0"):
            TaskManager(lambda task: None, history_size=bad)
        with pytest.raises(ValueError, match="event_depth must be an int >= 0"):
            Device(memory_size=8 << 20, event_depth=bad)


def _growth(fn, warm: int, calls: int) -> int:
    """Bytes still allocated after ``calls`` more calls of ``fn`` than after ``warm`` ones."""
    tracemalloc.start()
    try:
        for _ in range(warm):
            fn()
        gc.collect()
        before = tracemalloc.take_snapshot()
        for _ in range(calls):
            fn()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def test_many_calls_hold_constant_memory():
    """Thousands of calls after a warm-up leave no more than a few KiB behind.  Without
    the bounds each call would keep its Task (payload, Stats, events: about 1.5 KiB), i.e.
    megabytes here.  Small bounds keep the warm-up short."""
    old = lower.default_device()
    lower.set_default_device(Device(memory_size=32 << 20, history_size=16, event_depth=16))
    try:
        a, b = np.ones((8, 8), F16), np.ones((8, 8), F16)
        x = np.linspace(-4, 4, 64).astype(F16)
        (program,) = lower.build(lower.Conv(1, 1, 1, 8, 1)).with_weights(np.ones((1, 1, 1, 1), F16))
        dev = Device(memory_size=8 << 20, history_size=16, event_depth=16)
        xin = {lower.lowered.SLOT_INPUT: np.ones((1, 1, 1, 8))}
        bound = 48 << 10
        grew = {
            "matmul": _growth(lambda: fastane.matmul(a, b), 300, 2000),
            "tanh": _growth(lambda: fastane.tanh(x), 100, 1000),
            "Device.run": _growth(lambda: dev.run(program, xin), 300, 1000),
        }
        assert all(g < bound for g in grew.values()), grew
        assert len(lower.default_device().tm.history) == 16 and len(dev.tm.history) == 16
        assert len(dev.tm.events[0]) == 16 and dev.tm.events_dropped[0] == 1300 - 16
    finally:
        lower.set_default_device(old)
