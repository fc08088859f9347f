"""The task manager's MMIO map, fault codes and IRQ events (see :mod:`.taskmanager`).

Register offsets of the TM block (at :data:`TM_BASE`) and of the TQ blocks (from
:data:`TQ_BASE`, :data:`TQ_STRIDE` apart), the per-queue priorities, the bounds of the
history and event FIFOs, the fault codes of TM_ERROR1, and :class:`Event`, one entry of
an IRQ event FIFO.  :mod:`fastane.device.taskmanager` re-exports every name.
"""

from __future__ import annotations

from typing import NamedTuple

from .faults import (
    BARFault,
    ChainFault,
    DecodeFault,
    DMARangeFault,
    KMemOverflow,
    L2Fault,
    HostMemoryFault,
    L2Overflow,
    QueueFault,
    UnsupportedTask,
)

NUM_QUEUES = 8
#: the priority the Linux driver gives each queue (TQ_PRTY); higher runs first
QUEUE_PRIORITIES = (0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x1E, 0x1F)

# -- MMIO map (offsets in the ANE engine window) -------------------------------------------
TM_BASE = 0x20000
TQ_BASE = 0x21000
TQ_STRIDE = 0x148

TM_ADDR, TM_INFO, TM_PUSH, TM_TQ_EN = 0x0, 0x4, 0x8, 0xC
TM_COMMITTED, TM_STATUS = 0x44, 0x54
TM_ERROR1, TM_ERROR2, TM_ERROR3 = 0x58, 0x5C, 0x60
TM_IRQ_EN1, TM_IRQ_ACK, TM_IRQ_EN2 = 0x68, 0x6C, 0x70
IRQ_LINES = 2

#: completed tasks :attr:`TaskManager.history` keeps (the oldest drop out first)
HISTORY_SIZE = 512
#: events each IRQ event FIFO holds (fastane's decision: the M1's depth is not known); when
#: a FIFO is full, a new event drops the oldest one
EVENT_FIFO_DEPTH = 512


def TM_IRQ_EVTC(line):
    return 0x14 + line * 0x14  # noqa: E302,E704  events waiting


def TM_IRQ_INFO(line):
    return 0x18 + line * 0x14  # noqa: E302,E704  pops one event


def TM_IRQ_UNK1(line):
    return 0x1C + line * 0x14  # noqa: E302,E704


def TM_IRQ_TMST(line):
    return 0x20 + line * 0x14  # noqa: E302,E704


def TM_IRQ_UNK2(line):
    return 0x24 + line * 0x14  # noqa: E302,E704


TQ_STATUS, TQ_PRTY, TQ_VACANT, TQ_INFO = 0x000, 0x010, 0x014, 0x01C
TQ_BAR1, TQ_NID1, TQ_SIZE2, TQ_ADDR2 = 0x020, 0x0A0, 0x0A4, 0x0A8
TQ_BAR2, TQ_NID2, TQ_SIZE1, TQ_ADDR1 = 0x0AC, 0x12C, 0x130, 0x134

TM_IS_IDLE = 0x1
#: per-slot register offsets (inside a TQ block): BAR base, NID, SIZE, ADDR
SLOT_REGS = ((TQ_BAR1, TQ_NID1, TQ_SIZE1, TQ_ADDR1), (TQ_BAR2, TQ_NID2, TQ_SIZE2, TQ_ADDR2))

#: fault class -> code in TM_ERROR1 and in a fault event's TMST word
FAULT_CODES = {
    BARFault: 1,
    DMARangeFault: 2,
    KMemOverflow: 3,
    L2Overflow: 4,
    L2Fault: 5,
    ChainFault: 6,
    DecodeFault: 7,
    UnsupportedTask: 8,
    QueueFault: 9,
    HostMemoryFault: 10,
}
OTHER_FAULT = 0xFF


def fault_code(exc: BaseException) -> int:
    for cls, code in FAULT_CODES.items():
        if isinstance(exc, cls):
            return code
    return OTHER_FAULT


class Event(NamedTuple):
    """A completion (line 0) or fault (line 1) event from the TM's event FIFOs (a named
    tuple: one is made per completed task, a quarter of a frozen dataclass's cost)."""

    line: int
    qid: int
    nid: int
    slot: int
    addr: int
    status: int  # 0 = done, otherwise a fault code
    seq: int  # the task's push order

    def words(self) -> tuple[int, int, int, int]:
        """INFO, UNK1, TMST, UNK2 register words (fastane's encoding)."""
        return (
            (self.nid & 0xFF) << 8 | (self.slot & 1) << 4 | self.qid,
            self.addr,
            self.status,
            self.seq & 0xFFFFFFFF,
        )
