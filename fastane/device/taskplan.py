"""A checked task (:class:`TaskPlan`) and the small Stats helpers of the engine: copies,
the data-dependent counters of a run, sums; and the windows of the fused path
(:func:`fast_path`).  Used by :class:`fastane.device.engine.Engine`.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass

import numpy as np

from ..stats import COUNTERS, Stats
from . import mac, tile_dma


@dataclass
class TaskPlan:
    """One checked task: its register file and every block's plan."""

    index: int
    addr: int
    regs: dict
    what: str
    geometry: object
    ne: object = None
    kdma: object = None
    l2: object = None
    src: object = None
    dst: object = None
    is_planar: bool = False
    planar: object = None  # planar.PlanarConfig of a planar task
    src1: object = None  # a planar task's second operand (TileDMA plan or L2 operand)
    fast: object = None  # the fused path's windows (see fast_path); False: not taken
    #: KernelDMA deferred (KMem.load's lazy): the MAC reads the weights where they are
    lazy_kmem: bool = False
    columns_key: object = None  # the fused path's mac.unfolding_key (made on first use)
    stats: Stats = dataclasses.field(default_factory=Stats)


_counters = operator.attrgetter(*COUNTERS)


def copy_stats(s: Stats) -> Stats:
    """A copy of a task's Stats (no ``tasks_detail``)."""
    return Stats(*_counters(s))


def locate(exc, index: int, addr: int) -> None:
    """Name the faulting task on a fault raised while planning it (``td_index``, ``td_addr``)."""
    if getattr(exc, "td_addr", None) is None:
        exc.td_index, exc.td_addr = index, addr


def fast_path(p: TaskPlan, memory: np.ndarray):
    """For a convolution streaming fp16 from DRAM to DRAM: ``(source window as uint16,
    plane, row (elements), destination window)`` -- the checked byte ranges of
    the plan, viewed once (a cached plan keeps them); else False."""
    if p.is_planar or p.geometry.mode != mac.CONV or p.src is None or p.dst is None:
        return False
    src = tile_dma.fp16_source(p.src, memory)
    if src is None:
        return False
    window = tile_dma.fp16_window(p.dst, memory)
    if window is None:
        return False
    return (*src, window)


def with_events(s: Stats, saturated: int, nans: int, lut_under: int, lut_over: int) -> Stats:
    """A task's planned Stats with the counters that depend on the data
    (:data:`fastane.stats.EVENT_COUNTERS`)."""
    t = copy_stats(s)
    t.saturated, t.nan_outputs, t.lut_underflow, t.lut_overflow = saturated, nans, lut_under, lut_over
    return t


def sum_stats(details: list) -> Stats:
    """The sum of per-task Stats (``Stats.__add__`` field by field, without its overhead)."""
    if len(details) == 1:
        return copy_stats(details[0])
    return Stats(*(sum(getattr(d, name) for d in details) for name in COUNTERS))
