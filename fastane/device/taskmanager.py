"""The task manager (TM) and its 8 task queues (TQs), register by register.

A driver submits work exactly as the Linux driver does (SPEC section 6):

1. ``TQ_STATUS(q) = 1``; stage one of the queue's two ping-pong slots: ``BAR[0..31]``
   (IOVAs), ``SIZE = ((td_size >> 2) - 1) << 16``, ``ADDR`` = IOVA of the first TD,
   ``NID = (nid & 0xff) << 8 | 1`` (bit 0 arms the slot);
2. ``TM_ADDR`` = the TD address, ``TM_INFO = SIZE | td_count``;
3. ``TM_PUSH = priority | (q & 7) << 8``: nothing happens until this write.

Registers live at their MMIO offsets (TM block at 0x20000, TQ blocks from 0x21000,
0x148 apart); :meth:`TaskManager.read32` / :meth:`TaskManager.write32` take the offset.
Each push becomes a :class:`Task`, a handle with a pollable ``status``, callbacks and
``wait()``.  Pending tasks run highest priority first (equal priorities in push order),
one TD chain at a time, through the ``executor`` the :class:`~fastane.device.Device`
provides.  Completions and faults go to the IRQ event FIFOs (line 0: done, line 1: fault)
and the error registers.

State is bounded, so a process that submits millions of tasks holds constant memory:
:attr:`TaskManager.history` keeps the last :data:`HISTORY_SIZE` completed tasks, and each
event FIFO holds at most :data:`EVENT_FIFO_DEPTH` events (when a FIFO is full, its oldest
event is dropped and counted in :attr:`TaskManager.events_dropped`).  Both are constructor
arguments (``0`` keeps none).

Execution model: the emulated hardware runs in the thread that pushes (or waits), right
after the push, unless the TM is held (:meth:`TaskManager.hold`): then pushes accumulate
and run, by priority, when the hold ends.  So priorities and ping-pong order are
deterministic and observable.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading

from ..errors import DeviceFault
from .faults import QueueFault
from ..m1 import MAX_CHAIN
from .memory import NUM_BARS
from .task import Task, run_callback
from .tm_regs import (
    NUM_QUEUES,
    QUEUE_PRIORITIES,
    TM_BASE,
    TQ_BASE,
    TQ_STRIDE,
    TM_ADDR,
    TM_INFO,
    TM_PUSH,
    TM_TQ_EN,
    TM_COMMITTED,
    TM_STATUS,
    TM_ERROR1,
    TM_ERROR2,
    TM_ERROR3,
    TM_IRQ_EN1,
    TM_IRQ_ACK,
    TM_IRQ_EN2,
    IRQ_LINES,
    HISTORY_SIZE,
    EVENT_FIFO_DEPTH,
    TM_IRQ_EVTC,
    TM_IRQ_INFO,
    TM_IRQ_UNK1,
    TM_IRQ_TMST,
    TM_IRQ_UNK2,
    TQ_STATUS,
    TQ_PRTY,
    TQ_VACANT,
    TQ_INFO,
    TQ_BAR1,
    TQ_NID1,
    TQ_SIZE2,
    TQ_ADDR2,
    TQ_BAR2,
    TQ_NID2,
    TQ_SIZE1,
    TQ_ADDR1,
    TM_IS_IDLE,
    SLOT_REGS,
    FAULT_CODES,
    OTHER_FAULT,
    fault_code,
    Event,
)


def _run_order(task: Task):
    """Pending tasks run highest priority first, equal priorities in push order."""
    return (-task.priority, task.seq)


class _Slot:
    """One ping-pong slot of a task queue: BAR table, NID, TD size and address."""

    __slots__ = ("bars", "nid", "size", "addr", "busy", "armed_seq")

    def __init__(self):
        self.bars = [0] * NUM_BARS
        self.nid = self.size = self.addr = 0
        self.busy = False  # latched by a push, freed on completion
        self.armed_seq = 0  # order in which slots were armed (NID bit 0 written)

    @property
    def armed(self) -> bool:
        return bool(self.nid & 1)


class _Queue:
    __slots__ = ("qid", "status", "priority", "info", "slots", "next_slot", "backlog")

    def __init__(self, qid: int):
        self.qid = qid
        self.status = 0
        self.priority = QUEUE_PRIORITIES[qid]
        self.info = 0
        self.slots = (_Slot(), _Slot())
        self.next_slot = 0  # ping-pong pointer of the Pythonic interface
        self.backlog = collections.deque()  # Tasks waiting for a vacant slot

    @property
    def vacant(self) -> int:
        """TQ_VACANT: bit i set when slot i is neither armed nor busy."""
        return sum(1 << i for i, s in enumerate(self.slots) if not (s.busy or s.armed))


class TaskManager:
    """The TM and TQ registers, a priority scheduler and the event FIFOs.

    ``executor(task) -> Stats`` runs one pushed chain (``task.addr``, ``task.td_size``,
    ``task.td_count``, ``task.bars``); it raises a :class:`DeviceFault` on a fault.
    ``history_size``: completed tasks kept in :attr:`history`; ``event_depth``: events each
    IRQ FIFO holds (see the module docstring).
    """

    def __init__(self, executor, history_size: int = HISTORY_SIZE, event_depth: int = EVENT_FIFO_DEPTH):
        for name, v in (("history_size", history_size), ("event_depth", event_depth)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        self.executor = executor
        self._lock = threading.RLock()
        self._exec_lock = threading.RLock()
        self._runner = None
        self._hold = 0
        self._holders: dict[int, int] = {}
        self._seq = itertools.count()
        self._order = itertools.count()
        self._arm = itertools.count(1)
        self.queues = tuple(_Queue(q) for q in range(NUM_QUEUES))
        self._pending: list[Task] = []
        self.tm = {
            TM_ADDR: 0,
            TM_INFO: 0,
            TM_TQ_EN: 0,
            TM_COMMITTED: 0,
            TM_ERROR1: 0,
            TM_ERROR2: 0,
            TM_ERROR3: 0,
            TM_IRQ_EN1: 0,
            TM_IRQ_ACK: 0,
            TM_IRQ_EN2: 0,
        }
        self.events = tuple(collections.deque(maxlen=event_depth) for _ in range(IRQ_LINES))
        #: per line: events dropped because the FIFO was full
        self.events_dropped = [0] * IRQ_LINES
        self._latched = [Event(line, 0, 0, 0, 0, 0, 0) for line in range(IRQ_LINES)]
        self._history: collections.deque[Task] = collections.deque(maxlen=history_size)
        self._callbacks = []

    @property
    def history(self) -> list[Task]:
        """The last ``history_size`` completed tasks, in execution order (a copy)."""
        with self._lock:
            return list(self._history)

    # ------------------------------------------------------------------ registers
    def read32(self, offset: int) -> int:
        """Read the 32-bit register at MMIO ``offset``."""
        with self._lock:
            if offset >= TQ_BASE:
                return self._tq_read(*self._tq_decode(offset))
            off = self._tm_offset(offset)
            if off == TM_STATUS:
                return TM_IS_IDLE if not self._pending and self._runner is None else 0
            for line in range(IRQ_LINES):
                if off == TM_IRQ_EVTC(line):
                    return len(self.events[line])
                if off == TM_IRQ_INFO(line):
                    if self.events[line]:
                        self._latched[line] = self.events[line].popleft()
                    return self._latched[line].words()[0]
                for i, reg in enumerate((TM_IRQ_UNK1, TM_IRQ_TMST, TM_IRQ_UNK2), 1):
                    if off == reg(line):
                        return self._latched[line].words()[i]
            return self.tm.get(off, 0)

    def write32(self, offset: int, value: int) -> None:
        """Write the 32-bit register at MMIO ``offset``; ``TM_PUSH`` submits work."""
        value = int(value) & 0xFFFFFFFF
        with self._lock:
            if offset >= TQ_BASE:
                self._tq_write(*self._tq_decode(offset), value)
                return
            off = self._tm_offset(offset)
            if off == TM_PUSH:
                task = self._push(qid=(value >> 8) & 7, priority=value & 0xFF)
            else:
                self.tm[off] = value
                return
        if task is not None and not self.held:
            self.run_pending()

    # offsets relative to the blocks, for drivers written like ane_tm.c
    def tm_read32(self, off):
        return self.read32(TM_BASE + off)  # noqa: E704

    def tm_write32(self, off, v):
        self.write32(TM_BASE + off, v)  # noqa: E704

    def tq_read32(self, off):
        return self.read32(TQ_BASE + off)  # noqa: E704

    def tq_write32(self, off, v):
        self.write32(TQ_BASE + off, v)  # noqa: E704

    @staticmethod
    def _tm_offset(offset: int) -> int:
        off = offset - TM_BASE
        if offset & 3 or not 0 <= off < TQ_BASE - TM_BASE:
            raise QueueFault(f"no TM register at MMIO offset {offset:#x}", offset=offset)
        return off

    @staticmethod
    def _tq_decode(offset: int) -> tuple[int, int]:
        qid, reg = divmod(offset - TQ_BASE, TQ_STRIDE)
        if offset & 3 or qid >= NUM_QUEUES:
            raise QueueFault(f"no TQ register at MMIO offset {offset:#x}", offset=offset)
        return qid, reg

    def _tq_read(self, qid: int, reg: int) -> int:
        q = self.queues[qid]
        fixed = {TQ_STATUS: q.status, TQ_PRTY: q.priority, TQ_VACANT: q.vacant, TQ_INFO: q.info}
        if reg in fixed:
            return fixed[reg]
        for slot, (bar, nid, size, addr) in zip(q.slots, SLOT_REGS):
            if bar <= reg < bar + 4 * NUM_BARS:
                return slot.bars[(reg - bar) // 4]
            if reg in (nid, size, addr):
                return {nid: slot.nid, size: slot.size, addr: slot.addr}[reg]
        return 0

    def _tq_write(self, qid: int, reg: int, value: int) -> None:
        q = self.queues[qid]
        if reg == TQ_STATUS:
            q.status = value
        elif reg == TQ_PRTY:
            q.priority = value & 0xFF
        elif reg == TQ_INFO:
            q.info = value
        else:
            for i, (slot, (bar, nid, size, addr)) in enumerate(zip(q.slots, SLOT_REGS)):
                if bar <= reg < bar + 4 * NUM_BARS or reg in (nid, size, addr):
                    if slot.busy:
                        raise QueueFault(
                            f"TQ {qid} slot {i} is busy (its task has not completed)", qid=qid, slot=i
                        )
                    if reg == nid:
                        if value & 1 and not slot.armed:
                            slot.armed_seq = next(self._arm)
                        slot.nid = value
                    elif reg == size:
                        slot.size = value
                    elif reg == addr:
                        slot.addr = value
                    else:
                        slot.bars[(reg - bar) // 4] = value
                    return

    # ------------------------------------------------------------------ scheduling
    def _push(self, qid: int, priority: int, task: Task | None = None, slot_index: int | None = None) -> Task:
        """TM_PUSH: latch the armed slot of ``qid`` with TM_ADDR/TM_INFO. Lock held.

        Of two armed slots the one armed first runs first (ping-pong order).
        """
        q = self.queues[qid]
        if not q.status:
            raise QueueFault(f"TM_PUSH to TQ {qid}, which is not enabled (TQ_STATUS = 0)", qid=qid)
        if slot_index is None:  # a driver's TM_PUSH
            armed = [i for i, s in enumerate(q.slots) if s.armed and not s.busy]
            if not armed:
                raise QueueFault(
                    f"TM_PUSH to TQ {qid} with no armed slot (write NID with bit 0 set)", qid=qid
                )
            i = min(armed, key=lambda j: q.slots[j].armed_seq)
        else:  # _refill: the slot it has just armed
            i = slot_index
        slot = q.slots[i]
        info = self.tm[TM_INFO]
        dwords = (info >> 16) + 1
        if task is None:
            task = Task(self, qid, priority)
            task.bars = list(slot.bars)
        # else: _refill's task, whose own list the slot's BAR registers were copied from
        task.slot, task.nid = i, (slot.nid >> 8) & 0xFF
        task.addr, task.td_size, task.td_count = self.tm[TM_ADDR], dwords * 4, info & 0xFFFF
        task.priority, task.seq, task.status = priority, next(self._seq), Task.PENDING
        slot.busy = True
        self.tm[TM_COMMITTED] = (self.tm[TM_COMMITTED] + 1) & 0xFFFFFFFF
        self._pending.append(task)
        return task

    @property
    def held(self) -> bool:
        return self._hold > 0

    def held_by_me(self) -> bool:
        """Whether the calling thread is inside a :meth:`hold`."""
        with self._lock:
            return self._holders.get(threading.get_ident(), 0) > 0

    @contextlib.contextmanager
    def hold(self):
        """Hold execution: pushes accumulate, then run by priority when the hold ends."""
        me = threading.get_ident()
        with self._lock:
            self._hold += 1
            self._holders[me] = self._holders.get(me, 0) + 1
        try:
            yield self
        finally:
            with self._lock:
                self._hold -= 1
                self._holders[me] -= 1
                if not self._holders[me]:
                    del self._holders[me]
            if not self.held:
                self.run_pending()

    def pending(self) -> list[Task]:
        """Pushed tasks not yet run, in the order they will run."""
        with self._lock:
            return sorted(self._pending, key=_run_order)

    def run_pending(self, limit: int | None = None, force: bool = False) -> int:
        """Run pushed tasks, highest priority first, until none is left; returns how many.

        Does nothing while the TM is held, unless ``force``.
        """
        ran = 0
        if self.held and not force:
            return 0
        with self._exec_lock:
            if self._runner == threading.get_ident():
                return 0  # re-entered from a callback: the outer loop picks the work up
            while limit is None or ran < limit:
                with self._lock:
                    pending = self._pending
                    if not pending:
                        return ran
                    task = pending[0] if len(pending) == 1 else min(pending, key=_run_order)
                    pending.remove(task)
                    task.status, task.order = Task.RUNNING, next(self._order)
                    self._runner = threading.get_ident()
                try:
                    stats, error = self.executor(task), None
                except DeviceFault as exc:
                    stats, error = None, exc
                except Exception as exc:  # noqa: BLE001  an emulator bug: still complete
                    stats, error = None, exc
                finally:
                    with self._lock:
                        self._runner = None
                self._complete(task, stats, error)
                ran += 1
        return ran

    def step(self) -> int:
        """Run the one highest-priority pending task, even while held; returns 0 or 1."""
        return self.run_pending(limit=1, force=True)

    def _complete(self, task: Task, stats, error) -> None:
        with self._lock:
            q = self.queues[task.qid]
            slot = q.slots[task.slot]
            slot.busy = False
            slot.nid &= ~1  # disarm
            task.stats, task.error = stats, error
            task.status = Task.DONE if error is None else Task.FAULTED
            code = 0 if error is None else fault_code(error)
            event = Event(0 if error is None else 1, task.qid, task.nid, task.slot, task.addr, code, task.seq)
            fifo = self.events[event.line]
            if len(fifo) == fifo.maxlen:
                self.events_dropped[event.line] += 1
            fifo.append(event)
            if error is not None:
                self.tm[TM_ERROR1] = code
                self.tm[TM_ERROR2] = getattr(error, "td_addr", task.addr)  # the faulting TD
                self.tm[TM_ERROR3] = (task.nid & 0xFF) << 8 | task.qid
            self._history.append(task)
            callbacks, task._callbacks = task._callbacks, []
            if self._callbacks:
                callbacks = self._callbacks + callbacks  # a new list: on_complete may append
            self._refill(q)
            task._finish()
        for fn in callbacks:
            run_callback(fn, task)

    def on_complete(self, fn) -> None:
        """Call ``fn(task)`` after every task completes (done or faulted)."""
        with self._lock:
            self._callbacks.append(fn)

    def drain_events(self, line: int | None = None) -> list[Event]:
        """Pop every waiting event (of one line, or both, in push order)."""
        with self._lock:
            lines = range(IRQ_LINES) if line is None else (line,)
            out = [e for ln in lines for e in self.events[ln]]
            for ln in lines:
                self.events[ln].clear()
        return sorted(out, key=lambda e: e.seq)

    # ------------------------------------------------------------------ Pythonic submit
    def submit(
        self,
        qid: int,
        bars,
        addr: int,
        td_size: int,
        td_count: int,
        nid: int = 0,
        priority: int | None = None,
        payload=None,
    ) -> Task:
        """Stage and push a chain through the registers, as a driver would.

        The queue's two slots are used in ping-pong order; when both are busy, the task
        waits in the queue's backlog (in push order) until one frees.
        """
        if not 0 <= qid < NUM_QUEUES:
            raise ValueError(f"queue must be in 0..{NUM_QUEUES - 1}, got {qid}")
        if td_size <= 0 or td_size % 4 or td_size > 1 << 18:
            raise ValueError(f"TD size must be a positive multiple of 4 bytes, got {td_size}")
        if not 1 <= td_count <= MAX_CHAIN:
            raise ValueError(f"TD count must be in 1..65535, got {td_count}")
        bars = list(bars)
        if len(bars) != NUM_BARS:
            raise ValueError(f"expected {NUM_BARS} BAR IOVAs, got {len(bars)}")
        with self._lock:
            q = self.queues[qid]
            prio = q.priority if priority is None else int(priority)
            if not 0 <= prio <= 0xFF:
                raise ValueError(f"priority must be in 0..255, got {prio}")
            task = Task(self, qid, prio, payload)
            task.nid, task.addr, task.td_size, task.td_count = nid & 0xFF, addr, td_size, td_count
            task.bars = bars
            q.backlog.append(task)
            self._refill(q)
        if not self.held:
            self.run_pending()
        return task

    def _refill(self, q: _Queue) -> None:
        """Move backlog tasks of ``q`` into its vacant slots, ping-pong. Lock held."""
        while q.backlog:
            i = q.next_slot
            if q.slots[i].busy or q.slots[i].armed:
                i ^= 1
                if q.slots[i].busy or q.slots[i].armed:
                    return
            task = q.backlog.popleft()
            q.next_slot = i ^ 1
            # the driver's register writes (ane_tm_enqueue + the TM_ADDR/TM_INFO staging),
            # applied to the same state write32 would change, without the offset decoding
            slot = q.slots[i]
            q.status = 1
            slot.bars[:] = task.bars
            slot.size = ((task.td_size >> 2) - 1) << 16
            slot.addr = task.addr
            slot.nid = (task.nid & 0xFF) << 8 | 1
            slot.armed_seq = next(self._arm)
            self.tm[TM_ADDR] = task.addr
            self.tm[TM_INFO] = slot.size | task.td_count
            self._push(q.qid, task.priority, task, slot_index=i)

    def __repr__(self) -> str:
        return (
            f"TaskManager({len(self._pending)} pending, {len(self._history)} in history"
            f"{', held' if self.held else ''})"
        )
