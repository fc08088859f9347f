"""ControlDMA: fetch a TD chain from unified memory and decode each TD into a register file.

:func:`fetch` follows ``NextPointer``/``NextSize`` from the pushed address until ``EON``
(loops, chains longer than the pushed TD count and TDs outside mapped memory are faults);
:func:`decode` turns TD bytes into ``{canonical field name: value}``, cached by content.
Used by :class:`fastane.device.engine.Engine`.
"""

from __future__ import annotations

import functools

from ..errors import TDError
from ..m1 import MAX_CHAIN, TD_SIZE
from ..td import TaskDescriptor
from . import planar
from .faults import BARFault, ChainFault, DecodeFault, DMARangeFault
from .memory import BARTable, UnifiedMemory


@functools.lru_cache(maxsize=4096)
def decode(raw: bytes) -> dict:
    """ControlDMA: TD bytes -> register file ``{canonical field name: value}`` (read-only;
    cached by content, so re-running a program skips the decode)."""
    return planar.registers(TaskDescriptor.from_bytes(raw))


def fetch(memory: UnifiedMemory, addr: int, td_size: int, td_count: int, bars: BARTable, trace=None) -> list:
    """Follow the chain from ``addr``: ``[(addr, register file), ...]`` (checked).

    ``trace``: a list that receives what the fetch depended on beyond its arguments: the
    allocations the TDs were found in (:class:`Region`) and ``(offset, TD bytes)`` per TD
    (the engine's plan cache re-checks exactly these)."""
    limit = td_count or MAX_CHAIN
    chain, seen, cur, size = [], set(), addr, td_size
    known = (0, 0)  # an allocation [start, end) already found to hold a TD
    data = memory.data
    while True:
        if cur in seen:
            raise ChainFault(f"{_where(chain, cur)}: the chain loops back to an earlier TD", addr=cur)
        if len(chain) >= limit:
            raise ChainFault(
                f"the chain from {addr:#x} did not reach EON within the {limit} TDs pushed (TM_INFO count)",
                addr=addr,
                count=limit,
            )
        seen.add(cur)
        if size != TD_SIZE:
            raise DecodeFault(
                f"{_where(chain, cur)}: TD size {size:#x} is not the M1 TD size {TD_SIZE:#x}", addr=cur
            )
        if not known[0] <= cur <= known[1] - size:  # else: inside the same allocation
            region = memory.allocation_of(cur)
            if region is None or region.end - cur < size:
                raise DMARangeFault(
                    f"ControlDMA: {_where(chain, cur)} (+{size:#x} bytes) is not inside mapped memory",
                    addr=cur,
                )
            known = (cur, region.end)
            if trace is not None:
                trace.append(region)
        off = memory.offset(cur, size, "ControlDMA")
        raw = data[off : off + size].tobytes()
        if trace is not None:
            trace.append((off, raw))
        try:
            regs = decode(raw)
        except TDError as exc:
            raise DecodeFault(f"ControlDMA: {_where(chain, cur)} is malformed: {exc}", addr=cur) from exc
        chain.append((cur, regs))
        if regs["Header.EON"]:
            return chain
        if regs["Header.NextSize"] == 0:
            raise ChainFault(
                f"{_where(chain[:-1], cur)}: neither EON nor a next TD (NextSize = 0): the chain never ends",
                addr=cur,
            )
        size = (regs["Header.NextSize"] + 1) * 4
        nxt = regs["Header.NextPointer"]
        if regs["Header.TBE"]:
            slot = regs["Header.TBase"]
            region = bars[slot]
            if region is None:
                raise BARFault(
                    f"{_where(chain[:-1], cur)}: the next TD is in BAR slot {slot} "
                    f"(TBase), which is not mapped",
                    slot=slot,
                )
            if nxt < 0 or nxt + size > region.size:  # the checks of bars.resolve, which raises
                bars.resolve(slot, nxt, size, f"{_where(chain[:-1], cur)}: NextPointer {nxt:#x}")
            cur = region.iova + nxt
        else:
            cur = addr + nxt


def _where(chain: list, cur: int) -> str:
    """How a fault names the TD at ``cur``, the ``len(chain)``-th of the chain."""
    return f"TD {len(chain)} at {cur:#x}"
