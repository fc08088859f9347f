"""A network's plan estimated on one chip (:class:`Result`, :func:`estimate_plan`), and the
unit formatting the reports share.  :mod:`fastane.roofline.report` re-exports
:class:`Result`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import workloads as _workloads
from . import chips as _chips
from .model import DEFAULT_PARAMS, Estimate, ModelParams, estimate
from .plan import WorkloadPlan

__all__ = ["Result", "estimate_plan"]


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


def estimate_plan(
    workload, plan: WorkloadPlan, chip="m1", params: ModelParams = DEFAULT_PARAMS, plan_s: float = 0.0
) -> Result:
    """``plan`` (of ``workload``, made by :func:`fastane.networks.plan.analyze` in
    ``plan_s`` seconds) estimated on ``chip``: each lowered layer without the program
    overhead, the whole with it (none when no task is on the ANE).  The layers not lowered
    are in ``result.plan.not_lowered`` (with the reason) and not in the totals."""
    chip = _chips.get(chip)
    layers = [estimate(lp.stats, chip, params, name=lp.name, program=False) for lp in plan.lowered]
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
