"""A workload planned by lowering and estimated on one chip (:class:`Result`,
:func:`analyze`), and the unit formatting the reports share.  :mod:`fastane.roofline.report`
re-exports :class:`Result` and :func:`analyze`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .. import workloads as _workloads
from . import chips as _chips
from .model import DEFAULT_PARAMS, Estimate, ModelParams, estimate
from .plan import WorkloadPlan, plan_workload

__all__ = ["Result", "analyze"]


@dataclass
class Result:
    """A workload planned and estimated on one chip."""

    workload: _workloads.Workload
    plan: WorkloadPlan
    chip: _chips.Chip
    params: ModelParams
    layers: list  # Estimate per lowered layer (plan.lowered; no program overhead)
    total: Estimate  # the whole program (with the program overhead)
    plan_s: float  # seconds the planning took

    @property
    def is_decode(self) -> bool:
        return self.workload.phase == "decode"


def analyze(
    workload, chip="m1", params: ModelParams = DEFAULT_PARAMS, planner=None, plan: WorkloadPlan | None = None
) -> Result:
    """Plan ``workload`` (a name or a :class:`~fastane.workloads.Workload`) by lowering
    every layer and counting it on a stats-only device, and estimate it on ``chip`` (the
    calibration's plan; ``fastane roofline`` plans through the model front end,
    :func:`fastane.networks.plan.analyze`, and passes its plan here).  ``planner``: see
    :func:`~fastane.roofline.plan.plan_workload`; ``plan`` estimates a plan made elsewhere.
    Layers that could not be lowered are in ``result.plan.not_lowered`` (with the reason)
    and not in the totals."""
    if isinstance(workload, str):
        workload = _workloads.get(workload)
    chip = _chips.get(chip)
    t0 = time.perf_counter()
    if plan is None:
        plan = plan_workload(workload, planner=planner)
    plan_s = time.perf_counter() - t0
    layers = [estimate(lp.stats, chip, params, name=lp.name, program=False) for lp in plan.lowered]
    # no task on the ANE: no program, no program overhead
    total = estimate(plan.tasks, chip, params, name=workload.name, program=bool(plan.tasks))
    return Result(workload, plan, chip, params, layers, total, plan_s)


def format_si(x: float, unit: str = "", digits: int = 3) -> str:
    """``x`` with an SI prefix (k, M, G, T) and ``unit``; ``-`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= p:
            return f"{x / p:.{digits}g} {s}{unit}"
    return f"{x:.{digits}g} {unit}".rstrip()


def format_time(s: float) -> str:
    """A duration of ``s`` seconds in s, ms or us."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"
