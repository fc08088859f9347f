"""fastane.roofline: how fast the ANE would run a workload.

- :mod:`~fastane.roofline.chips`: the figures of each chip, with source and kind.
- :mod:`~fastane.roofline.plan`: the per-task plan of a workload, by lowering every layer
  (:mod:`fastane.lower`) and counting it on a stats-only device; layers that cannot be
  lowered are reported as such.
- :mod:`~fastane.roofline.model`: the time model (``estimate``: per-task Stats -> seconds).
- :mod:`~fastane.roofline.report`: text table, JSON, plot, and ``fastane roofline``
  (imported lazily: it is only needed for reports).
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
