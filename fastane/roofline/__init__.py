"""fastane.roofline: how fast the ANE would run a workload.

- :mod:`~fastane.roofline.chips`: the figures of each chip, with source and kind.
- :mod:`~fastane.roofline.model`: the time model (``estimate``: per-task Stats -> seconds).
- :mod:`~fastane.roofline.report`: text table, JSON (``"schema": "fastane.roofline/2"``)
  and plot of a planned network (imported lazily: it is only needed for reports);
  :mod:`~fastane.roofline.compare` compares two JSON reports.
- :mod:`~fastane.roofline.plan`: the per-task plan of a workload's layer shapes
  (:mod:`fastane.workloads`), layer by layer, with residency chains (the calibration,
  :mod:`~fastane.roofline.calibrate`, is fitted on the one path's plans,
  :mod:`fastane.networks.calibrate`).

``fastane roofline`` plans built-in networks and model files one way, through the model
front end: :mod:`fastane.networks`.
"""

from . import chips
from .chips import CHIPS, Chip, Figure
from .model import DEFAULT_PARAMS, Estimate, ModelParams, estimate, task_times, tokens_per_s_bound
from .plan import LayerPlan, WorkloadPlan, plan_layer, plan_workload

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
    "plan_layer",
    "plan_workload",
]
