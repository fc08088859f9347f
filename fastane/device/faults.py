"""The device's faults: precise subclasses of :class:`fastane.DeviceFault`.

Every fault is raised by a front-end check *before* any kernel runs (the engine's
planning phase checks every task of the chain first), so a faulting program leaves
unified memory, KMem and L2 untouched.  Each carries the context a driver would read
from the error registers: the task (``td_index``, ``td_addr``; set by the engine for
every fault of a task) and what went wrong.
"""

from __future__ import annotations

from ..errors import DeviceFault


class _Fault(DeviceFault):
    """A device fault with keyword context kept as attributes."""

    def __init__(self, message: str, **context):
        super().__init__(message)
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)


class BARFault(_Fault):
    """A task names a BAR slot that is disabled or not mapped to any memory region."""


class DMARangeFault(_Fault):
    """A DMA range (TD fetch, KernelDMA lane, TileDMA tensor) reaches outside its region."""


class KMemOverflow(_Fault):
    """A core's kernel does not fit its 64 KiB KMem, or the MAC reads past what KernelDMA loaded."""


class L2Fault(_Fault):
    """A task reads L2 data no earlier task left there (or of another shape)."""


class L2Overflow(L2Fault):
    """A task's L2 working set does not fit the 2 MiB L2."""


class DecodeFault(_Fault):
    """ControlDMA fetched a malformed TD (bad packet header); ``__cause__`` is the TDError."""


class ChainFault(_Fault):
    """A TD chain loops, never reaches EON, or points outside the TD stream."""


class UnsupportedTask(_Fault):
    """A task uses a datapath mode fastane does not emulate (yet)."""


class HostMemoryFault(_Fault):
    """A task would make the host allocate more than the per-task cap
    (:data:`fastane.device.engine.TASK_HOST_BYTES`): its tensors are far larger than the
    DRAM windows it names (zero row/plane strides re-read the same bytes)."""


class QueueFault(_Fault):
    """A task-queue register access is malformed (bad qid, bad TD size, empty slot...)."""
