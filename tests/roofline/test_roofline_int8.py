"""The INT8 rate in the roofline: 256 INT8 lanes a core, Apple's figure where it is INT8."""

from __future__ import annotations

import pytest

from fastane.roofline import chips, model
from fastane.roofline.int8 import LANE_RATIO, peak_ops_int8
from fastane.stats import Stats

SEED = model.SEED_PARAMS


def test_int8_peak_is_the_marketing_figure_where_apple_counts_int8():
    for chip in chips.CHIPS.values():
        fig = peak_ops_int8(chip)
        if chip.peak_marketing_precision == "int8":
            assert fig is chip.peak_marketing and fig.kind == "marketing"
        else:  # derived from the FP16 rate, and says so
            assert fig.kind == "derived" and fig.value == LANE_RATIO * chip.peak_ops_fp16.value
            assert "256 INT8 lanes" in fig.note
    assert peak_ops_int8("m1").value == 22e12 and peak_ops_int8("m4").value == 38e12
    assert LANE_RATIO == 2


@pytest.mark.parametrize("chip", ["m1", "m4", "a17-pro"])
def test_int8_macs_take_the_int8_rate(chip):
    """A compute-bound task: the same MACs on the INT8 lanes take half the compute time
    (where the INT8 figure is twice the FP16 one, as on every chip of the table)."""
    base = dict(tasks=1, macs=2**34, control_dma_bytes=628, kernel_dma_bytes=2**20)
    fp16 = model.task_times([Stats(**base)], chip, SEED)["compute"][0]
    int8 = model.task_times([Stats(**base, int8_macs=2**34)], chip, SEED)["compute"][0]
    c = chips.get(chip)
    assert fp16 == pytest.approx(2 * 2**34 / c.peak_ops_fp16.value)
    assert int8 == pytest.approx(2 * 2**34 / peak_ops_int8(c).value)
    assert int8 == pytest.approx(fp16 / 2)
    half = model.task_times([Stats(**base, int8_macs=2**33)], chip, SEED)["compute"][0]
    assert half == pytest.approx(0.75 * fp16)
