"""The calibration's plan of a workload's layer shapes, by lowering: every layer is
lowered to TDs (:mod:`fastane.lower`, the one tiler) and its program is run on a
stats-only device, which counts what each task's engines move without computing (~0.1 s
per network).  The calibration and the validation plan on the one path instead
(:mod:`fastane.networks.calibrate`): ``fastane roofline`` plans the same workloads through
the model front end (:mod:`fastane.networks`), which counts every layer (the residual adds
too) and chains the same lowering (:func:`fastane.lower.chain.plan_chain`) where the model
graph allows (docs/roofline.md, "Residency", "Tails" and "Predictions before and after the
one path").

A layer the lowering cannot take is not estimated some other way: its
:class:`LayerPlan` says why (``not_lowered``), and the plan's totals leave it out
(:attr:`WorkloadPlan.not_lowered` lists them; the report shows each one and the count).
That is the case for

* planar-engine layers (:class:`~fastane.workloads.Eltwise`) that fastane cannot lower:
  windowed pooling (ResNet's 3x3/2 max pool: the planar engine reduces whole rows only,
  docs/lower.md section 11), rows beyond a planar task's 16384 elements; and the residual
  adds and multiplies, which :mod:`fastane.lower.binary` lowers only as programs of their
  own through DRAM (:data:`NOT_PLANNED`).  Softmax, layer/RMS norm and global average
  pooling are lowered (:func:`plan_eltwise`, :mod:`fastane.lower.rows`);
* a convolution or matmul past a hardware limit (``NotImplementedError`` from the tiler:
  one output channel's kernel beyond a core's KMem, which would need the reduction split
  across tasks; ``MemoryError``: buffers beyond the planning device's address space).

**Residency** (``residency=True``, the default): consecutive layers where one reads the
previous one's output (``layer.follows``) are lowered as one chain
(:func:`fastane.lower.chain.build_chain`), which keeps each intermediate in L2 where it
fits; the chain runs on the stats-only device and each layer gets its own tasks' Stats.
:attr:`LayerPlan.source_in_l2` / :attr:`LayerPlan.result_in_l2` say what stayed on chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import lower as _lower
from .. import lut as _lut
from .. import workloads as _wl
from ..activation_table import ACTIVATIONS
from ..lower import chain as _chain
from ..stats import Stats
from .model import sum_stats

__all__ = [
    "LayerPlan",
    "WorkloadPlan",
    "plan_layer",
    "plan_workload",
    "layer_conv",
    "sum_stats",
    "NotLowered",
    "plan_eltwise",
]

#: activations a workload names that are not one NE stage -> the NE stage they start with
_FIRST_STAGE = {a.name: a.table for a in ACTIVATIONS.values() if not a.single_stage}


#: why the roofline leaves the residual adds and multiplies out (decision, docs/roofline.md)
NOT_PLANNED = (
    "a planar engine add/multiply, not planned: fastane.lower.binary lowers it as a program of its own through DRAM, where "
    "Apple's compiler is expected to chain it with its producer on chip; counted that way it "
    "would put DRAM traffic the ANE does not move into the totals"
)


class NotLowered(Exception):
    """A layer the lowering cannot take (the message says why)."""


def layer_conv(layer) -> _lower.Conv:
    """The :class:`~fastane.lower.Conv` a workload layer (:class:`~fastane.workloads.Conv2d`
    or :class:`~fastane.workloads.Matmul`) lowers to.

    Activations that need the planar engine (silu, sigmoid) are planned as their first,
    NE stage (the sigmoid - 0.5 table): the workloads describe them as fused, and their
    planar tasks are not counted.
    """
    if not isinstance(layer, (_wl.Conv2d, _wl.Matmul)):
        raise NotLowered(
            f"{layer.kind} layers ({getattr(layer, 'op', type(layer).__name__)}) run on the "
            f"planar engine, which the lowering does not emit programs for yet"
        )
    act = layer.activation
    if act in _FIRST_STAGE:
        act = _lut.get_block(_FIRST_STAGE[act])
    if isinstance(layer, _wl.Conv2d):
        p = layer.pad
        return _lower.Conv(
            1,
            layer.cin,
            layer.h,
            layer.w,
            layer.cout,
            layer.kh,
            layer.kw,
            (layer.stride, layer.stride),
            (1, 1),
            ((p, p), (p, p)),
            layer.groups,
            False,
            act,
        )
    return _lower.Conv.matmul(layer.M, layer.K, layer.N, layer.B, False, act)


def plan_eltwise(layer) -> list:
    """Per-task Stats of a planar-engine layer (:class:`~fastane.workloads.Eltwise`),
    lowered and counted on a stats-only device; :class:`NotLowered` where fastane has no
    lowering.  A workload's ``(C, H, W)`` shapes: softmax reduces along W (``C x H`` rows);
    a norm of ``(d, 1, seq)`` normalizes each of the ``seq`` positions over ``d``, planned
    as ``seq`` rows of ``d`` (the same elements and bytes; fastane's rows are the last
    axis, Apple's channel-first layout reduces across channels), with its affine scale
    (and LayerNorm's bias); a pooling to ``(C, 1, 1)`` is a mean over ``H x W``."""
    from ..lower import rows as _rows

    c, h, w = layer.in_shape
    op = layer.op
    try:
        if op == "softmax":
            st = _rows.plan(_rows.RowOp("softmax", c * h, w))
        elif op in ("layernorm", "rmsnorm"):
            name = "layer_norm" if op == "layernorm" else "rms_norm"
            st = _rows.plan(_rows.RowOp(name, h * w, c, 1e-5, True, op == "layernorm"))
        elif op == "avgpool" and tuple(layer.out_shape[1:]) == (1, 1):
            st = _rows.plan(_rows.RowOp("reduce_mean", c, h * w))
        elif op in ("add", "mul", "add+relu"):
            raise NotLowered(NOT_PLANNED)
        elif op.startswith(("maxpool", "avgpool")):
            raise NotLowered(
                f"windowed pooling ({op}): the planar engine reduces whole rows only and TileDMA cannot "
                f"read a window's shifted columns; fastane has no ANE lowering for it"
            )
        else:
            raise NotLowered(f"planar op {op!r}: fastane has no lowering for it")
    except NotImplementedError as e:
        raise NotLowered(str(e)) from None
    return list(st.tasks_detail)


def plan_layer(layer) -> list:
    """Per-task Stats of a workload layer, lowered and counted on a stats-only device.
    Raises :class:`NotLowered` (with the reason) for a layer the lowering cannot take."""
    if isinstance(layer, _wl.Eltwise):
        return plan_eltwise(layer)
    conv = layer_conv(layer)
    try:
        low = _lower.build(conv)
        _, st = _lower.execute(low, device=_lower.stats_device(), stats_only=True)
    except NotImplementedError as e:
        raise NotLowered(str(e)) from None
    except MemoryError as e:
        raise NotLowered(f"its buffers do not fit the planning device's address space ({e})") from None
    return list(st.tasks_detail)


@dataclass
class LayerPlan:
    """A layer and the Stats of its tasks (``stats.tasks_detail`` holds one per task), or,
    when it was not lowered, why (``not_lowered``; ``stats`` is then empty)."""

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


def _key(layer) -> tuple:
    return (type(layer).__name__,) + tuple(v for k, v in vars(layer).items() if k != "name")


def _chains(layers) -> list:
    """Runs of consecutive layers that each read the previous one's output: [(start, stop)]."""
    return _chain.runs(
        [
            bool(getattr(b, "follows", False)) and isinstance(a, (_wl.Conv2d, _wl.Matmul))
            for a, b in zip(layers, layers[1:])
        ]
    )


def _plan_chain(layers) -> list | None:
    """Per-layer (tasks, source_in_l2, result_in_l2) of a run lowered as one chain
    (:func:`fastane.lower.chain.plan_chain`), or None when a layer of it cannot be lowered
    or the run does not chain."""
    try:
        return _chain.plan_chain([layer_conv(layer) for layer in layers])
    except (NotLowered, NotImplementedError, MemoryError, ValueError):
        return None


def plan_workload(workload, planner=None, residency: bool = True) -> WorkloadPlan:
    """Plan every layer of ``workload`` (a :class:`~fastane.workloads.Workload` or a name)
    by lowering it (:func:`plan_layer`; ``planner``: None or ``"lowered"``, or any
    ``planner(layer) -> list[Stats]`` that raises :class:`NotLowered` where it cannot).
    Identical layers are planned once.  ``residency``: lower the chains of layers that
    read the previous one's output as a whole, keeping intermediates in L2 (see the
    module docstring; only with the default planner)."""
    if isinstance(workload, str):
        workload = _wl.get(workload)
    if planner in (None, "lowered"):
        planner = plan_layer
    elif planner == "analytic":
        raise ValueError(
            "the analytic planner was removed: the roofline plans every layer by lowering "
            "it to TDs and counting them on a stats-only device (docs/roofline.md)"
        )
    elif not callable(planner):
        raise ValueError(f"planner must be 'lowered' or a callable, got {planner!r}")
    else:
        residency = False  # a custom planner plans layer by layer
    memo: dict = {}
    out = WorkloadPlan(workload)
    chained: dict = {}  # layer index -> (tasks, source_in_l2, result_in_l2)
    if residency:
        cmemo: dict = {}
        for a, b in _chains(workload.layers):
            run = workload.layers[a:b]
            ck = tuple(_key(layer) for layer in run)
            if ck not in cmemo:
                cmemo[ck] = _plan_chain(run)
            if cmemo[ck] is not None:
                chained.update(zip(range(a, b), cmemo[ck]))
    for i, layer in enumerate(workload.layers):
        if i in chained:
            tasks, src, res = chained[i]
            out.layers.append(LayerPlan(layer, sum_stats(tasks), None, src, res))
            continue
        key = _key(layer)
        if key not in memo:
            try:
                memo[key] = (planner(layer), None)
            except NotLowered as e:
                memo[key] = ([], str(e))
        tasks, reason = memo[key]
        out.layers.append(LayerPlan(layer, sum_stats(tasks), reason))
    return out
