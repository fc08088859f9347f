"""fastane.roofline: how fast the ANE would run a workload.

- :mod:`~fastane.roofline.chips`: the figures of each chip, with source and kind.
- :mod:`~fastane.roofline.model`: the analytic per-task plan (``plan_conv``,
  ``plan_matmul``, ``plan_workload`` -> per-task :class:`~fastane.stats.Stats`) and the
  time model (``estimate``).
- :mod:`~fastane.roofline.report`: text table, JSON, plot, and ``fastane roofline``
  (imported lazily: it is only needed for reports).
"""
from . import chips
from .chips import CHIPS, Chip, Figure
from .model import (DEFAULT_PARAMS, M1_LIMITS, Estimate, Limits, ModelParams, estimate,
                    plan_conv, plan_eltwise, plan_layer, plan_matmul, plan_workload, task_times,
                    tokens_per_s_bound)

__all__ = ["chips", "CHIPS", "Chip", "Figure", "DEFAULT_PARAMS", "M1_LIMITS", "Estimate",
           "Limits", "ModelParams", "estimate", "plan_conv", "plan_eltwise", "plan_layer",
           "plan_matmul", "plan_workload", "task_times", "tokens_per_s_bound"]
