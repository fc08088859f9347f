"""One planning path for networks: a built-in workload (as the model graph
:func:`fastane.networks.graph` builds) and a model file are placed and lowered by
:mod:`fastane.model` in stats-only mode (``Model.report(shapes, stats_only=True)``: the
programs a run would submit, counted on a stats-only device, with residency: runs of
convolutions that each read the previous one's only output lowered as one chain, the
intermediates kept in L2 where they fit), then estimated on a chip by the roofline's time
model (:func:`fastane.roofline.result.estimate_plan`).

Every layer is in the plan: the ones on the ANE with their tasks (in the totals), the
others (host, layout) with the placement's reason (not in the totals: the time model is
the ANE's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import workloads as _wl
from ..model import Model
from ..roofline.model import DEFAULT_PARAMS, ModelParams
from ..roofline.plan import LayerPlan, WorkloadPlan
from ..roofline.result import Result, estimate_plan
from ..stats import Stats
from . import graph, input_shapes

__all__ = ["NetLayer", "NetworkResult", "analyze", "weight_params"]

#: ops whose second input is the weight a MAC layer reads into KMem
_MAC_OPS = ("conv", "matmul", "gemm")


@dataclass(frozen=True)
class NetLayer:
    """A placed layer of a network as the roofline reports it."""

    name: str
    op: str  # the source ops it groups ("MatMul+Add+Gelu")
    kind: str  # the op class of the placement (mac, table, ...)
    placement: str  # "ane", "host" or "layout"
    shape: str  # the output types
    macs: int = 0
    weight_params: int = 0
    activation: None = None
    #: the result's (C, H, W) on the ANE when the layer is one convolution (the bytes a
    #: result kept in L2 saves: fastane.roofline.report.residency_line); else 0
    cout: int = 0
    hout: int = 0
    wout: int = 0

    def shape_str(self) -> str:
        return f"{self.op} -> {self.shape}"


@dataclass
class NetworkResult(Result):
    """A :class:`~fastane.roofline.result.Result` of a network, with the model's per-layer
    report it was planned from."""

    report: object = None  # fastane.model.Report


def weight_params(model: Model, layer) -> int:
    """Elements of the constant weights ``layer``'s MAC nodes read (its KMem operands)."""
    consts = model.graph.consts
    return sum(
        int(consts[n.inputs[1]].size)
        for n in layer.nodes
        if n.op in _MAC_OPS and len(n.inputs) > 1 and n.inputs[1] in consts
    )


def analyze(
    net,
    chip="m1",
    params: ModelParams = DEFAULT_PARAMS,
    shapes: dict | None = None,
    residency: bool = True,
) -> NetworkResult:
    """Plan ``net`` (a built-in workload name, a :class:`~fastane.workloads.Workload` or a
    :class:`fastane.model.Model`) through the model path in stats-only mode and estimate it
    on ``chip``.  ``shapes``: the inputs' shapes (default: the declared ones, a symbolic
    dimension bound to 1).  ``residency``: the runs of layers that chain keep their
    intermediates in L2 (:func:`fastane.model.placement.plan.chains`); without it every
    layer is planned on its own, through DRAM, as a computed run lowers it."""
    t0 = time.perf_counter()
    meta = {}
    if isinstance(net, (str, _wl.Workload)):
        wl = _wl.get(net) if isinstance(net, str) else net
        meta = {"phase": wl.phase, "tokens": wl.tokens, "source": wl.source}
        model, description = Model(graph(wl)), wl.description
    else:
        model, description = net, f"model {net.name} ({net.graph.origin})"
    rep = model.report(shapes or input_shapes(model.graph), chip=chip, stats_only=True, residency=residency)
    layers = []
    for rec in rep.layers:
        on_ane = rec.placement == "ane"
        conv = rec.layer.problem() if on_ane and rec.layer.problem else None
        nl = NetLayer(
            rec.layer.name,
            rec.layer.op,
            rec.layer.kind,
            rec.placement,
            rec.shapes,
            rec.stats.macs if on_ane else 0,
            weight_params(model, rec.layer) if on_ane else 0,
            None,
            *((conv.cout, conv.hout, conv.wout) if conv is not None else ()),
        )
        layers.append(
            LayerPlan(
                nl,
                rec.stats if on_ane else Stats(),
                None if on_ane else f"{rec.placement}: {rec.reason}",
                rec.source_in_l2,
                rec.result_in_l2,
            )
        )
    # the network as a Workload of its placed layers (what the reports read)
    summary = _wl.Workload(model.name, description, tuple(lp.layer for lp in layers), **meta)
    r = estimate_plan(summary, WorkloadPlan(summary, layers), chip, params, time.perf_counter() - t0)
    return NetworkResult(**vars(r), report=rep)
