"""The INT8 rate of a chip's ANE: 256 INT8 MAC lanes a core, twice the 128 FP16 lanes (SPEC 1).

Where Apple's headline figure counts INT8 (``Chip.peak_marketing_precision == "int8"``:
the M4 generation, the A17 Pro), the INT8 peak *is* that marketing figure, kept with its
kind and source.  Elsewhere (the headline is FP16, e.g. the M1's 11 TOP/s) the INT8 peak
is derived: the FP16 rate times the lane ratio.  The time model charges ``Stats.int8_macs``
at this rate and the other MACs at the FP16 rate.
"""

from __future__ import annotations

from ..device.int8 import LANES_PER_CORE
from . import chips as _chips

__all__ = ["LANE_RATIO", "peak_ops_int8", "peak_ops_int8_program"]

#: INT8 MACs per FP16 MAC a core runs in a cycle (256 / 128 lanes, SPEC 1)
LANE_RATIO = LANES_PER_CORE // 128


def peak_ops_int8(chip) -> "_chips.Figure":
    """The INT8 OP/s of ``chip`` (a key or a :class:`~fastane.roofline.chips.Chip`) as a
    Figure: Apple's figure where it is INT8, else derived from the FP16 rate."""
    chip = _chips.get(chip)
    if chip.peak_marketing_precision == "int8":
        return chip.peak_marketing
    fp16 = chip.peak_ops_fp16
    return _chips.Figure(
        fp16.value * LANE_RATIO,
        fp16.unit,
        "derived",
        "SPEC 1",
        f"the FP16 rate {fp16.value:.4g} OP/s ({fp16.kind}) x {LANE_RATIO}: "
        f"{LANES_PER_CORE} INT8 lanes a core vs 128 FP16",
    )


def peak_ops_int8_program(chip) -> float:
    """INT8 OP/s one Core ML program can use (ANEs used / ANEs, as ``Chip.peak_ops_program``)."""
    chip = _chips.get(chip)
    return peak_ops_int8(chip).value * chip.peak_ops_program / chip.peak_ops_fp16.value
