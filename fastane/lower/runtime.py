"""Running lowered programs: the process-wide default device (and a stats-only one for
planning), and :func:`execute`, which binds a program's slots to buffers, writes the
input and weights, submits the chains and reads the output back.  docs/lower.md,
section 5.
"""

from __future__ import annotations

import threading

import numpy as np

from ..operands import fp16_operand
from ..stats import Stats
from .bind import Resident
from .cache import reclaim
from .lowered import SLOT_INPUT, SLOT_KERNEL, SLOT_OUTPUT

__all__ = [
    "DEFAULT_MEMORY",
    "STATS_MEMORY",
    "default_device",
    "set_default_device",
    "stats_device",
    "execute",
]

_DEVICE = None
_STATS_DEVICE = None
_DEVICE_LOCK = threading.Lock()
#: bytes of emulated DRAM of the default device (pages are committed only when touched;
#: smaller windows are tried where the OS refuses to reserve this much)
DEFAULT_MEMORY = 2 << 30
#: emulated DRAM of the stats-only device (virtual: nothing is ever touched)
STATS_MEMORY = 3 << 30


def _make_device(size: int, stats_only: bool = False):
    from ..device import Device

    while True:
        try:
            return Device(memory_size=size, stats_only=stats_only)
        except MemoryError:
            if size <= 64 << 20:
                raise
            size //= 2


def default_device():
    """The process-wide :class:`~fastane.device.Device` the numpy API runs on (created on
    first use; shared by all threads: the task manager serialises execution and every
    call runs on buffers of its own)."""
    global _DEVICE
    if _DEVICE is None:
        with _DEVICE_LOCK:
            if _DEVICE is None:
                _DEVICE = _make_device(DEFAULT_MEMORY)
    return _DEVICE


def set_default_device(device) -> None:
    """Run the numpy API on ``device`` from now on (None: a fresh default next time)."""
    global _DEVICE
    with _DEVICE_LOCK:
        _DEVICE = device


def stats_device():
    """The process-wide stats-only device programs are counted on (the roofline's plan)."""
    global _STATS_DEVICE
    if _STATS_DEVICE is None:
        with _DEVICE_LOCK:
            if _STATS_DEVICE is None:
                _STATS_DEVICE = _make_device(STATS_MEMORY, stats_only=True)
    return _STATS_DEVICE


def execute(
    low,
    x=None,
    weight=None,
    bias=None,
    *,
    device=None,
    stats_only: bool | None = None,
    read=None,
    queue: int = 0,
    weight_of=None,
    operand=None,
):
    """Run ``low`` (a :class:`~fastane.lower.Lowered` or
    :class:`~fastane.lower.LoweredEltwise`) on ``device``: ``(read(output view), Stats)``.

    ``x``: the call's input ``(N, Cin, H, W)`` (an array, any strides, or a callable
    ``fill(view)`` writing into :meth:`Lowered.input_view`); ``weight`` ``(Cout,
    Cin/groups, Kh, Kw)`` and ``bias`` ``(Cout,)`` (fp16).  ``read`` turns the output view
    ``(N, Cout, Hout, Wout)`` into the result (default: a copy).  In stats-only mode
    nothing is written or read and the result is None (``stats_only=None``: the device's
    default).  Saturations and LUT range events are counted in the Stats, not reported
    (the caller reports them in its own words).

    Resident weights: the kernel slot of a binding reused for the same program keeps what
    it was packed from; when ``weight`` and ``bias`` are float16 arrays with the same bits
    as then (compared with private copies: :class:`~fastane.lower.bind.Resident`), they
    are not packed again.  ``weight`` may be a callable giving the weights (called only
    when they must be packed) with ``weight_of``, the fp16 array they are computed from
    (e.g. the untransposed right operand of a matmul), as what is compared.  ``operand``:
    the second operand of a chain's tail (:meth:`~fastane.lower.chain.ChainSegment.write_operand`).
    """
    dev = device if device is not None else default_device()
    stats_only = bool(dev.stats_only if stats_only is None else stats_only)
    src = weight if weight_of is None else weight_of
    b = low.acquire(dev, stats_only, reclaim, src, bias)
    ok = False
    try:
        if not stats_only:
            if operand is not None or getattr(low, "tail", None) is not None:
                low.write_operand(b.raw, operand)  # a chain's tail: its second operand
            if callable(x):
                x(low.input_view(b.raw[SLOT_INPUT]))
            else:
                low.write_input(b.raw[SLOT_INPUT], fp16_operand(x, "execute", "x"))  # one rounding
            res = b.resident
            if res is None or not res.holds(src, bias):
                b.resident = None  # the slot is being rewritten
                low.pack(b.raw[SLOT_KERNEL], weight() if callable(weight) else weight, bias)
                if Resident.usable(src, bias):
                    b.resident = Resident(src, bias)
        else:  # the LUT blocks only: the device checks them while planning
            low.pack_lut(b.raw[SLOT_KERNEL])
        total = None
        for p in low.programs:
            st = dev.submit(p, b.regions, queue=queue, stats_only=stats_only).wait()
            total = st if total is None else concat_stats(total, st)
        result = None
        if not stats_only:
            view = low.output_view(b.raw[SLOT_OUTPUT])
            result = np.array(view) if read is None else read(view)
        ok = True
        return result, total
    finally:
        low.release(b, keep=ok and not stats_only)


def concat_stats(a: Stats, b: Stats) -> Stats:
    """The Stats of ``a`` then ``b``: counts added, task details in order."""
    out = a.plus_counts(b)
    out.tasks_detail = list(a.tasks_detail) + list(b.tasks_detail)
    return out
