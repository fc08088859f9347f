"""fastane.roofline: how fast the ANE would run a workload.

- :mod:`~fastane.roofline.chips`: the figures of each chip, with source and kind.
- :mod:`~fastane.roofline.model`: the time model (``estimate``: per-task Stats -> seconds).
- :mod:`~fastane.roofline.report`: text table, JSON (``"schema": "fastane.roofline/2"``)
  and plot of a planned network (imported lazily: it is only needed for reports);
  :mod:`~fastane.roofline.compare` compares two JSON reports.
- :mod:`~fastane.roofline.plan`: a network's plan as the reports read it (per layer, the
  Stats of its tasks); :mod:`~fastane.roofline.calibrate` and
  :mod:`~fastane.roofline.validate`: the time model's fit and its errors on plans' arrays.

The one planner: ``fastane roofline`` plans built-in networks and model files one way,
through the model front end (:mod:`fastane.networks`), which also plans the calibration's
points (:mod:`fastane.networks.calibrate`).
"""

from . import chips
from .chips import CHIPS, Chip, Figure
from .model import DEFAULT_PARAMS, Estimate, ModelParams, estimate, task_times, tokens_per_s_bound
from .plan import LayerPlan, WorkloadPlan

__all__ = [
    "chips",
    "CHIPS",
    "Chip",
    "Figure",
    "DEFAULT_PARAMS",
    "Estimate",
    "ModelParams",
    "estimate",
    "task_times",
    "tokens_per_s_bound",
    "LayerPlan",
    "WorkloadPlan",
]
