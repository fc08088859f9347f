"""The task manager: TM/TQ registers as the Linux driver uses them, priorities, ping-pong
slots, events, faults, threads.  The executor here is a stub; tests/device/test_device_*.py run
the real engine behind it."""

import random
import threading

import pytest

from tests.helpers.device import TD_SIZE, driver_enable, driver_execute, tq

from fastane.device.faults import BARFault, QueueFault
from fastane.device.taskmanager import (
    QUEUE_PRIORITIES,
    TM_ADDR,
    TM_BASE,
    TM_ERROR1,
    TM_ERROR2,
    TM_ERROR3,
    TM_IRQ_EVTC,
    TM_IRQ_INFO,
    TM_IRQ_TMST,
    TM_IS_IDLE,
    TM_PUSH,
    TM_STATUS,
    TQ_ADDR1,
    TQ_BASE,
    TQ_NID1,
    TQ_PRTY,
    TQ_STATUS,
    TQ_STRIDE,
    TQ_VACANT,
    Task,
    TaskManager,
)
from fastane.stats import Stats


class Recorder:
    """A stub executor: records what ran and can fault on demand."""

    def __init__(self):
        self.ran = []
        self.fail = {}

    def __call__(self, task):
        self.ran.append(task)
        if task.addr in self.fail:
            raise self.fail[task.addr]
        return Stats(tasks=task.td_count)


@pytest.fixture
def tm():
    return TaskManager(Recorder())


def test_driver_submission_through_registers(tm):
    driver_enable(tm)
    bars = [0] * 32
    bars[0], bars[1], bars[4] = 0x1000_0000, 0x1000_4000, 0x1000_8000
    events = driver_execute(tm, 3, bars, 0x1000_0000, nid=0x42, td_count=2)
    (task,) = tm.executor.ran
    assert (task.qid, task.slot, task.nid, task.addr) == (3, 0, 0x42, 0x1000_0000)
    assert (task.td_size, task.td_count, task.priority) == (TD_SIZE, 2, QUEUE_PRIORITIES[3])
    assert task.bars == bars and task.status == Task.DONE and task.stats.tasks == 2
    # one completion event on line 0: INFO = nid << 8 | slot << 4 | qid, UNK1 = TD address
    assert events == [(0, 0x42 << 8 | 3, 0x1000_0000, 0, task.seq)]
    assert tm.tm_read32(TM_IRQ_EVTC(0)) == 0
    # the slot was disarmed on completion and is vacant again
    assert tm.tq_read32(tq(3, TQ_NID1)) & 1 == 0
    assert tm.tq_read32(tq(3, TQ_VACANT)) == 0b11
    assert tm.tq_read32(tq(3, TQ_PRTY)) == QUEUE_PRIORITIES[3]
    assert tm.tm_read32(TM_ERROR1) == 0


def test_registers_are_at_the_documented_offsets(tm):
    tm.write32(TQ_BASE + 5 * 0x148 + 0x020 + 4 * 31, 0xABCD0000)  # TQ 5 BAR1[31]
    assert tm.queues[5].slots[0].bars[31] == 0xABCD0000
    tm.write32(TQ_BASE + 2 * 0x148 + 0x0AC + 4 * 7, 0x1234)  # TQ 2 BAR2[7]
    assert tm.queues[2].slots[1].bars[7] == 0x1234
    for reg, attr, slot in (
        (0x0A0, "nid", 0),
        (0x130, "size", 0),
        (0x134, "addr", 0),
        (0x12C, "nid", 1),
        (0x0A4, "size", 1),
        (0x0A8, "addr", 1),
    ):
        tm.write32(TQ_BASE + 7 * 0x148 + reg, 0x100 + reg)
        assert getattr(tm.queues[7].slots[slot], attr) == 0x100 + reg
        assert tm.read32(TQ_BASE + 7 * 0x148 + reg) == 0x100 + reg
    tm.write32(TM_BASE + TM_ADDR, 0x5000)
    assert tm.read32(TM_BASE + TM_ADDR) == 0x5000
    with pytest.raises(QueueFault):
        tm.read32(TQ_BASE + 8 * TQ_STRIDE)
    with pytest.raises(QueueFault):
        tm.read32(TM_BASE + 2)


def test_push_needs_an_enabled_queue_and_an_armed_slot(tm):
    with pytest.raises(QueueFault, match="not enabled"):
        tm.tm_write32(TM_PUSH, 1 | 0 << 8)
    tm.tq_write32(tq(0, TQ_STATUS), 1)
    with pytest.raises(QueueFault, match="no armed slot"):
        tm.tm_write32(TM_PUSH, 1 | 0 << 8)
    assert tm.executor.ran == []


def test_busy_slot_cannot_be_restaged(tm):
    with tm.hold():
        task = tm.submit(1, [0] * 32, 0x1000, TD_SIZE, 1)
        with pytest.raises(QueueFault, match="busy"):
            tm.tq_write32(tq(1, TQ_ADDR1), 0x2000)
        assert task.status == Task.PENDING
    assert task.status == Task.DONE


# -- scheduling ------------------------------------------------------------------------------
def test_higher_priority_runs_first(tm):
    with tm.hold():
        tasks = [tm.submit(q, [0] * 32, 0x1000 * (q + 1), TD_SIZE, 1) for q in range(8)]
        extra = tm.submit(0, [0] * 32, 0x9000, TD_SIZE, 1, priority=0x10)
        same = tm.submit(1, [0] * 32, 0xA000, TD_SIZE, 1, priority=0x10)
        assert tm.tm_read32(TM_STATUS) & TM_IS_IDLE == 0
        assert [t.addr for t in tm.pending()][:3] == [0x8000, 0x7000, 0x9000]
    assert [t.addr for t in tm.executor.ran] == [
        0x8000,
        0x7000,
        0x9000,
        0xA000,
        0x6000,
        0x5000,
        0x4000,
        0x3000,
        0x2000,
        0x1000,
    ]
    assert [t.order for t in tasks[::-1]] == [0, 1, 4, 5, 6, 7, 8, 9]
    assert (extra.order, same.order) == (2, 3)  # equal priorities: push order
    assert tm.tm_read32(TM_STATUS) & TM_IS_IDLE


def test_ping_pong_slots_and_backlog(tm):
    with tm.hold():
        a, b, c = (tm.submit(2, [0] * 32, addr, TD_SIZE, 1) for addr in (0x1000, 0x2000, 0x3000))
        assert (a.slot, b.slot, c.slot) == (0, 1, None)  # c waits: both slots busy
        assert c.status == Task.QUEUED and tm.tq_read32(tq(2, TQ_VACANT)) == 0
        assert tm.tq_read32(tq(2, TQ_ADDR1)) == 0x1000 and tm.tq_read32(tq(2, 0x0A8)) == 0x2000
        assert tm.step() == 1  # slot 0 runs, c takes it
        assert (a.status, c.slot, c.status) == (Task.DONE, 0, Task.PENDING)
    assert [t.addr for t in tm.executor.ran] == [0x1000, 0x2000, 0x3000]
    assert [(e.qid, e.slot, e.addr) for e in tm.drain_events()] == [
        (2, 0, 0x1000),
        (2, 1, 0x2000),
        (2, 0, 0x3000),
    ]
    d = tm.submit(2, [0] * 32, 0x4000, TD_SIZE, 1)
    assert d.slot == 1 and d.done()  # the ping-pong pointer moved on


def test_faults_set_error_state_and_raise(tm):
    tm.executor.fail[0x2000] = BARFault("BAR slot 4 is not mapped", slot=4)
    ok = tm.submit(4, [0] * 32, 0x1000, TD_SIZE, 1, nid=7)
    bad = tm.submit(4, [0] * 32, 0x2000, TD_SIZE, 1, nid=9)
    assert ok.wait().tasks == 1
    assert bad.status == Task.FAULTED and bad.done()
    with pytest.raises(BARFault, match="slot 4"):
        bad.wait()
    assert isinstance(bad.exception(), BARFault)
    assert tm.tm_read32(TM_ERROR1) == 1
    assert tm.tm_read32(TM_ERROR2) == 0x2000 and tm.tm_read32(TM_ERROR3) == 9 << 8 | 4
    assert tm.tm_read32(TM_IRQ_EVTC(1)) == 1
    assert tm.tm_read32(TM_IRQ_INFO(1)) == 9 << 8 | 1 << 4 | 4
    assert tm.tm_read32(TM_IRQ_TMST(1)) == 1
    # the queue still works
    assert tm.submit(4, [0] * 32, 0x3000, TD_SIZE, 1).wait().tasks == 1


def test_callbacks_and_polling(tm):
    seen, every = [], []
    tm.on_complete(lambda t: every.append(t.addr))
    with tm.hold():
        task = tm.submit(0, [0] * 32, 0x1000, TD_SIZE, 1)
        task.add_done_callback(seen.append)
        task.add_done_callback(lambda t: 1 / 0)  # logged, not raised
        assert not task.done() and task.status == Task.PENDING
        with pytest.raises(TimeoutError, match="held"):
            task.wait(timeout=0.01)
        with pytest.raises(RuntimeError, match="hold"):
            task.wait()
    assert seen == [task] and every == [0x1000] and task.done()
    late = []
    task.add_done_callback(late.append)  # already done: called at once
    assert late == [task]


def test_submit_argument_checks(tm):
    for kwargs in (dict(qid=8), dict(td_size=0), dict(td_size=6), dict(td_count=0), dict(priority=300)):
        args = dict(qid=0, bars=[0] * 32, addr=0x1000, td_size=TD_SIZE, td_count=1)
        args.update(kwargs)
        with pytest.raises(ValueError):
            tm.submit(**args)
    with pytest.raises(ValueError):
        tm.submit(0, [0] * 31, 0x1000, TD_SIZE, 1)


def test_concurrent_submissions_lose_nothing(tm):
    n_threads, per_thread = 8, 40
    handles = [[] for _ in range(n_threads)]

    def worker(i):
        rng = random.Random(i)
        for k in range(per_thread):
            handles[i].append(tm.submit(rng.randrange(8), [0] * 32, (i << 16) | k << 4, TD_SIZE, 1))
            if rng.random() < 0.3:
                handles[i][-1].wait()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tm.run_pending()
    all_tasks = [h for hs in handles for h in hs]
    assert all(h.done() and h.status == Task.DONE for h in all_tasks)
    ran = [t.addr for t in tm.executor.ran]
    assert sorted(ran) == sorted(h.addr for h in all_tasks) and len(set(ran)) == len(ran)
    assert len(tm.history) == n_threads * per_thread
    assert sorted(t.order for t in tm.history) == list(range(n_threads * per_thread))
    assert len(tm.drain_events(0)) == n_threads * per_thread
    assert all(q.vacant == 0b11 and not q.backlog for q in tm.queues)
