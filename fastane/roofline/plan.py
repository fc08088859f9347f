"""A network's plan as the roofline reads it: :class:`LayerPlan` (a layer and the Stats of
its tasks, or why it is not on the ANE) and :class:`WorkloadPlan` (the layers, and the
tasks the totals add up).  The one planner is :func:`fastane.networks.plan.analyze`: a
built-in network or a model file placed and lowered by :mod:`fastane.model` in stats-only
mode, each ANE layer's program counted on a stats-only device, with residency chains
(:func:`fastane.model.placement.plan.chains`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..stats import Stats
from .model import sum_stats

__all__ = ["LayerPlan", "WorkloadPlan"]


@dataclass
class LayerPlan:
    """A layer and the Stats of its tasks (``stats.tasks_detail`` holds one per task), or,
    when it is not lowered on the ANE, why (``not_lowered``; ``stats`` is then empty)."""

    layer: object
    stats: Stats
    not_lowered: str | None = None
    #: residency: the source is the previous layer's result kept in L2 / the result is kept
    #: in L2 for the next layer (no DRAM traffic for that tensor)
    source_in_l2: bool = False
    result_in_l2: bool = False

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def lowered(self) -> bool:
        return self.not_lowered is None


@dataclass
class WorkloadPlan:
    """The per-layer plans of a workload; ``stats`` and ``tasks`` add up the lowered ones."""

    workload: object
    layers: list = field(default_factory=list)

    @property
    def lowered(self) -> list:
        """The layers that were lowered (the ones the totals count)."""
        return [lp for lp in self.layers if lp.lowered]

    @property
    def not_lowered(self) -> list:
        """The layers that were not, each with its reason."""
        return [lp for lp in self.layers if not lp.lowered]

    @property
    def stats(self) -> Stats:
        return sum_stats(self.tasks)

    @property
    def tasks(self) -> list:
        return [t for lp in self.lowered for t in lp.stats.tasks_detail]
