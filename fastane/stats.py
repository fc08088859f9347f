"""Counters of one run: what every engine moved and did.

A :class:`Stats` is filled by the blocks that do the work (the MAC array counts MACs
and saturated outputs, each DMA engine its bytes, the NE its LUT range events) and is
aggregated per task and per program.  The roofline model reads it back.
"""

from __future__ import annotations

import contextvars
import dataclasses
from dataclasses import dataclass, field


@dataclass
class Stats:
    """Counters of a run.  ``a + b`` adds every counter; ``tasks_detail`` concatenates."""

    tasks: int = 0
    macs: int = 0
    #: outputs whose accumulator clamped at the Q16.16 limits at least once
    saturated: int = 0
    #: outputs that read out as NaN (a NaN operand, or inf * 0)
    nan_outputs: int = 0
    #: NE LUT inputs below / above the table range
    lut_underflow: int = 0
    lut_overflow: int = 0
    #: elementwise operations of the planar engine
    planar_ops: int = 0
    #: bytes moved by each DMA engine
    control_dma_bytes: int = 0
    kernel_dma_bytes: int = 0
    tile_dma_src_bytes: int = 0
    tile_dma_dst_bytes: int = 0
    #: of ``macs``, those the INT8 lanes ran (256 a core instead of 128: fastane.device.int8)
    int8_macs: int = 0
    #: of ``macs``, those of one-tap kernels (1 x 1 convolutions, matmuls): each input
    #: element fetched feeds one MAC per output channel, no reuse across kernel taps
    pointwise_macs: int = 0
    #: values a slice's fixed-point crop path turned into +-inf (a model run as on a chip
    #: with that path: :mod:`fastane.model.run.movement`)
    cropped: int = 0
    #: per-task Stats, in execution order (empty for a single-task record)
    tasks_detail: list = field(default_factory=list)

    @property
    def dram_bytes(self) -> int:
        """Bytes moved between DRAM and the ANE by all DMA engines."""
        return (
            self.control_dma_bytes + self.kernel_dma_bytes + self.tile_dma_src_bytes + self.tile_dma_dst_bytes
        )

    def __add__(self, other: "Stats") -> "Stats":
        if not isinstance(other, Stats):
            return NotImplemented
        out = self.plus_counts(other)
        out.tasks_detail = self.tasks_detail + other.tasks_detail
        return out

    def plus_counts(self, other: "Stats") -> "Stats":
        """``self + other`` without ``tasks_detail`` (a running total that must not grow).
        Spelled out field by field: the device adds one per task (a loop over the field
        names costs several times more; the order is :data:`COUNTERS`)."""
        return Stats(
            self.tasks + other.tasks,
            self.macs + other.macs,
            self.saturated + other.saturated,
            self.nan_outputs + other.nan_outputs,
            self.lut_underflow + other.lut_underflow,
            self.lut_overflow + other.lut_overflow,
            self.planar_ops + other.planar_ops,
            self.control_dma_bytes + other.control_dma_bytes,
            self.kernel_dma_bytes + other.kernel_dma_bytes,
            self.tile_dma_src_bytes + other.tile_dma_src_bytes,
            self.tile_dma_dst_bytes + other.tile_dma_dst_bytes,
            self.int8_macs + other.int8_macs,
            self.pointwise_macs + other.pointwise_macs,
            self.cropped + other.cropped,
        )

    def as_dict(self) -> dict:
        """Counters as a plain dict (JSON-ready), ``tasks_detail`` included."""
        d = dataclasses.asdict(self)
        d["dram_bytes"] = self.dram_bytes
        return d


#: the fields in order (the counters, then ``tasks_detail``)
_NAMES = tuple(f.name for f in dataclasses.fields(Stats))
#: the counters, in field order (every field but ``tasks_detail``)
COUNTERS = _NAMES[:-1]
assert _NAMES[-1] == "tasks_detail"
#: the counters that depend on the data (a stats-only run leaves them 0)
EVENT_COUNTERS = ("saturated", "nan_outputs", "lut_underflow", "lut_overflow", "cropped")
#: the counters a task's plan fixes (a stats-only run counts them as a computing run does)
PLAN_COUNTERS = tuple(n for n in COUNTERS if n not in EVENT_COUNTERS)
assert set(EVENT_COUNTERS) <= set(COUNTERS)

_last: contextvars.ContextVar[Stats] = contextvars.ContextVar("fastane_last_stats", default=Stats())  # noqa: B039 (never mutated: record() sets a new one)


def last_stats() -> Stats:
    """Counters of the last fastane call made in this thread/context."""
    return _last.get()


def record(stats: Stats) -> None:
    """Make ``stats`` what :func:`last_stats` returns in this context."""
    _last.set(stats)
