"""Submitting to the device: the driver's register path, the Pythonic path, priorities,
ping-pong slots, events, callbacks and threads -- with the real engine behind them."""

import threading

import numpy as np
import pytest
from tests.helpers.device import F16, driver_enable, driver_execute, ref_conv, seed_program

from fastane.device import AneLayout, Device, Task
from fastane.device.taskmanager import QUEUE_PRIORITIES


@pytest.fixture
def dev():
    return Device(memory_size=16 << 20)


def seed_io(dev, x, name="x"):
    src, dst = dev.alloc(0x4000, name), dev.alloc(0x4000, "y")
    AneLayout.of(x.shape).tile(x, out=dev.memory.view(src.iova, src.size))
    return src, dst


def result(dev, dst):
    return AneLayout.of((1, 3, 4, 1)).untile(dev.memory.view(dst.iova, dst.size))


def test_driver_register_path_runs_the_seed(dev, corpus):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 8, 1, 1)).astype(F16)
    x = rng.standard_normal((1, 8, 4, 1)).astype(F16)
    loaded = dev.load(seed_program(corpus, w))
    src, dst = seed_io(dev, x)
    bars = [0] * 32
    bars[0], bars[1] = loaded.td_region.iova, loaded.kernel_region.iova  # TD stream, kernel
    bars[4], bars[5] = src.iova, dst.iova
    driver_enable(dev.tm)
    events = driver_execute(dev.tm, 0, bars, loaded.td_region.iova, nid=1, td_count=1)
    assert [e[0] for e in events] == [0] and events[0][3] == 0  # done, no fault
    assert np.array_equal(result(dev, dst), ref_conv(x, w))
    assert dev.stats.macs == 96 and dev.stats.tile_dma_dst_bytes == 768
    # the same through a register-level fault: BAR 5 unmapped
    bars[5] = 0
    events = driver_execute(dev.tm, 1, bars, loaded.td_region.iova, nid=2, td_count=1)
    assert [e[0] for e in events] == [1] and events[0][3] == 1  # BARFault code


def test_submit_returns_a_pollable_handle(dev, corpus):
    w = np.ones((3, 8, 1, 1), F16)
    x = np.ones((1, 8, 4, 1), F16)
    program = seed_program(corpus, w)
    src, dst = seed_io(dev, x)
    seen = []
    with dev.hold():
        task = dev.submit(program, {4: src, 5: dst}, queue=3)
        task.add_done_callback(seen.append)
        assert task.status == Task.PENDING and not task.done() and seen == []
    assert task.status == Task.DONE and seen == [task]
    stats = task.wait()
    assert stats.macs == 96 and task.priority == QUEUE_PRIORITIES[3] and task.qid == 3
    assert np.all(result(dev, dst) == 8)
    (event,) = dev.events()
    assert (event.line, event.qid, event.status) == (0, 3, 0)


def test_priorities_decide_the_order(dev, corpus):
    program = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    order = []
    dev.on_complete(lambda t: order.append(t.payload.bars[4].name))
    outs = {}
    with dev.hold():
        for name, queue, prio in (("low", 0, None), ("high", 7, None), ("mid", 2, 0x10), ("mid2", 5, 0x10)):
            src, dst = seed_io(dev, np.full((1, 8, 4, 1), len(outs) + 1, F16), name)
            outs[name] = (dev.submit(program, {4: src, 5: dst}, queue=queue, priority=prio), dst)
    assert order == ["high", "mid", "mid2", "low"]  # 0x1f, 0x10 (pushed first), 0x10, 1
    for i, (name, (task, dst)) in enumerate(outs.items()):
        assert task.done() and np.all(result(dev, dst) == 8 * (i + 1))


def test_run_inside_a_hold_of_the_same_thread_refuses(dev, corpus):
    program = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    with dev.hold(), pytest.raises(RuntimeError, match="hold"):
        dev.run(program, {4: np.ones((1, 8, 4, 1))})
    assert dev.tm.history == [] and dev.tm.pending() == []  # nothing was submitted


def test_ping_pong_slots_alternate(dev, corpus):
    program = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    src, dst = seed_io(dev, np.ones((1, 8, 4, 1), F16))
    with dev.hold():
        tasks = [dev.submit(program, {4: src, 5: dst}, queue=6) for _ in range(5)]
        assert [t.slot for t in tasks] == [0, 1, None, None, None]
    assert [t.slot for t in tasks] == [0, 1, 0, 1, 0]
    assert [t.order for t in tasks] == sorted(t.order for t in tasks)
    assert [e.slot for e in dev.events()] == [0, 1, 0, 1, 0]


def test_concurrent_submissions_from_threads(corpus):
    dev = Device(memory_size=32 << 20)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 8, 1, 1)).astype(F16)
    program = seed_program(corpus, w)
    dev.load(program)
    failures, done = [], []

    def worker(i):
        local = np.random.default_rng(i)
        try:
            for k in range(12):
                x = local.standard_normal((1, 8, 4, 1)).astype(F16)
                if k % 2:
                    y = dev.run(program, {4: x}, queue=local.integers(8))[5]
                else:
                    src, dst = seed_io(dev, x)
                    dev.submit(program, {4: src, 5: dst}, queue=int(local.integers(8))).wait()
                    y = result(dev, dst)
                    dev.free(src)
                    dev.free(dst)
                if not np.array_equal(y.view(np.uint16), ref_conv(x, w).view(np.uint16)):
                    failures.append((i, k))
                done.append((i, k))
        except Exception as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and len(done) == 72
    assert dev.stats.tasks == 72 and dev.stats.macs == 72 * 96
    assert len(dev.tm.history) == 72 and len(dev.events(0)) == 72
    assert len(dev.memory.allocations) == 2  # only the program's TD and kernel regions


def test_program_load_is_cached_and_unloadable(dev, corpus):
    program = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    a = dev.load(program)
    assert dev.load(program) is a and dev.load(a) is a
    assert set(a.bars) == {0, 1} and a.td_count == 1
    assert dev.read(a.td_region, 0x274).tobytes() == program.td_stream
    dev.unload(program)
    assert dev.memory.allocations == []
    with pytest.raises(TypeError):
        dev.load(b"not a program")


@pytest.mark.parametrize(
    "bad", [np.ones((1, 8, 4, 1), complex), np.full((1, 8, 4, 1), "1"), np.full((1, 8, 4, 1), None, object)]
)
def test_run_rejects_non_real_inputs(dev, corpus, bad):
    program = seed_program(corpus, np.ones((3, 8, 1, 1), F16))
    with pytest.raises(TypeError, match="real numeric"):
        dev.run(program, {4: bad})


def test_a_repeated_push_sees_changed_td_bytes_and_freed_td_memory(dev):
    """The engine's plan cache skips the fetch of a chain pushed again with the same BAR
    regions only while the TDs' bytes and their allocation are unchanged."""
    from fastane.device import pack_weights
    from fastane.errors import DeviceFault
    from fastane.td import Program, conv_td

    kernel, _ = pack_weights(np.ones((3, 8, 1, 1), F16))
    program = Program.from_tds([conv_td((1, 8, 4, 1), (1, 3, 4, 1), nid=1)], kernel=kernel, name="t")
    loaded = dev.load(program)
    src, dst = seed_io(dev, np.ones((1, 8, 4, 1), F16))
    bars = {4: src, 5: dst}
    for _ in range(3):  # planned once, then from the cache
        assert dev.submit(loaded, bars).wait().macs == 96
    td = dev.memory.view(loaded.td_region.iova, len(program.td_stream))
    saved = td.copy()
    td[:] = 0  # no EON, no next TD
    with pytest.raises(DeviceFault):
        dev.submit(loaded, bars).wait()
    td[:] = saved
    assert dev.submit(loaded, bars).wait().macs == 96
    dev.memory.free(loaded.td_region)  # the TD stream is no longer mapped memory
    with pytest.raises(DeviceFault, match="not inside mapped memory"):
        dev.submit(loaded, bars).wait()
