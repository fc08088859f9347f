"""A compute plan: where Core ML would run each op of a model, predicted on Linux -- an
**estimate** shaped as Core ML's ``MLComputePlan`` so that it can be diffed against a
plan dumped on a Mac (``docs/compute_plan_dump.py``).

Per op (a node of the bound graph): the preferred device and the devices that support it
(Apple's ``MLComputePlanDeviceUsage``), a cost weight (``MLComputePlanCost.weight``: the
op's share of the model's modelled work, the weights of all ops summing to 1), and
fastane's confidence, reason and rule.  The devices come from
:func:`fastane.model.placement.predict.predict`: the preferred one under the compute-unit
setting, the Neural Engine supported where the prediction under ``CPU_AND_NE`` is the
ANE, the GPU where it is under ``CPU_AND_GPU``, the CPU always (each only if the setting
allows it).  The modelled work is the time of fastane's roofline time model on the chip
(:func:`fastane.roofline.model.estimate`): a layer fastane plans on the ANE its
stats-only plan (split among its nodes by their work), any other op its counted work
(:func:`fastane.model.cost.node_cost`: multiply-adds, element operations) and fp16 bytes as
one task.  The same model for every op, whatever its device: a share of work, not a
time on the CPU or the GPU.

:meth:`ComputePlan.leaves_ane` finds a plan that would take the model off the ANE without a
word from Core ML (under ``ALL`` or ``CPU_AND_NE``), counting apart the ops predicted off the
ANE and those predicted on it with a rule that puts them at risk (left there, "uncertain",
with a range-shaped input at its default shape, or away from it under the reshape-frequency
hint "infrequent"): it is given when an op is at risk, or an op off the ANE is off by a
"config" rule
(:data:`fastane.model.placement.predict.RULES`: the op runs on the ANE in another precision,
size, input shape or on another chip) or fastane runs it on the ANE, or the ops off the ANE
carry more than :data:`LEAVE_SHARE` of the modelled work.  The commands print it as one line
on stderr; :meth:`fastane.Model.compute_plan` warns with
:class:`fastane.errors.LeavesANEWarning`.

The plan reads each tensor's precision as the model declares it (an ML Program:
:attr:`fastane.model.graph.Graph.declared`); for a model that declares none (ONNX,
NeuralNetwork) it assumes the precision an ML Program converted from it would have
(:func:`precision_of`): :data:`DEFAULT_PRECISION`, coremltools' default, or ``"fp32"``, where
every float tensor counts as declared fp32 and the fp32 rule of
:func:`~fastane.model.placement.predict.predict` applies.

The JSON (:meth:`ComputePlan.as_dict`, :data:`FORMAT`)::

    {"format": "fastane-compute-plan-1", "source": "fastane estimate", "model": NAME,
     "computeUnits": "ALL", "chip": "m1", "precision": "fp16", "precisionDeclared": false,
     "reshapeFrequency": "frequent",
     "modelStructure": {"program": {"functions": {"main": {"block": {"operations": [
       {"operatorName": "conv", "outputs": [{"name": "conv_0"}],
        "deviceUsage": {"preferred": "neuralEngine", "supported": ["cpu", "gpu", "neuralEngine"]},
        "estimatedCost": {"weight": 0.42},
        "fastane": {"op": "conv", "layer": "conv_0", "placement": "ane", "confidence": "likely",
                    "reason": "...", "rule": ""}}]}}}}},
     "leavesANE": null}

A device is named as Swift's ``MLComputeDevice`` cases are (``cpu``, ``gpu``,
``neuralEngine``).  :func:`load_observed` reads such a file (or the flat ``{output name:
"ane" | "cpu" | "gpu"}`` of ``fastane run --compare-placement``); :func:`compare` matches
the ops by output name, the key both sides share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ...errors import quote
from ...stats import Stats
from ..cost import node_cost
from ..files import read_file
from .predict import DEFAULT_RESHAPE_FREQUENCY, RULES, check_reshape_frequency, predict

__all__ = [
    "FORMAT",
    "DEVICES",
    "PRECISIONS",
    "DEFAULT_PRECISION",
    "LEAVE_SHARE",
    "PlannedOp",
    "OpShare",
    "LeavesANE",
    "ComputePlan",
    "check_precision",
    "precision_of",
    "build",
    "load_observed",
    "plan_devices",
    "plan_operations",
    "compare",
]

#: the ``format`` of the JSON this module writes and the dumper writes on a Mac
FORMAT = "fastane-compute-plan-1"
#: fastane's unit -> the device's name in the JSON (Swift's ``MLComputeDevice`` cases)
DEVICES = {"ane": "neuralEngine", "cpu": "cpu", "gpu": "gpu"}
#: a device as a file may name it (lower case) -> fastane's unit
_UNITS = {
    **{k: k for k in DEVICES},
    **{v.lower(): k for k, v in DEVICES.items()},
    "mlneuralenginecomputedevice": "ane",
    "mlcpucomputedevice": "cpu",
    "mlgpucomputedevice": "gpu",
}
#: the devices each compute-unit setting allows
_ALLOWED = {
    "ALL": ("cpu", "gpu", "ane"),
    "CPU_AND_NE": ("cpu", "ane"),
    "CPU_AND_GPU": ("cpu", "gpu"),
    "CPU_ONLY": ("cpu",),
}
#: the compute precisions a plan may assume for a model that declares none -> the float
#: dtype every float tensor then counts as declared
PRECISIONS = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}
#: the precision assumed by default: coremltools converts to an ML Program in float 16 unless
#: told otherwise (``ct.convert(..., convert_to="mlprogram")``: ``compute_precision=None``
#: "defaults to coremltools.precision.FLOAT16", apple/coremltools@e0e2f42
#: ``coremltools/converters/_converters_entry.py``, ``convert`` and ``_need_fp16_cast_pass``;
#: https://apple.github.io/coremltools/docs-guides/source/new-conversion-options.html)
DEFAULT_PRECISION = "fp16"
#: the most bytes a plan file may have
_MAX_FILE = 64 << 20
#: the share of the modelled work (cost weight) off the ANE above which a plan leaves it,
#: whatever the rules: more than half of the work on the CPU or the GPU
LEAVE_SHARE = 0.5
#: the most ops and rules a :class:`LeavesANE` message names of the ops off the ANE and of
#: those at risk (then "and K more")
LEAVE_NAMES, LEAVE_RULES = 4, 3


@dataclass
class PlannedOp:
    """One op of a :class:`ComputePlan`: ``name`` (the node's), ``operator`` (the front end's
    op, else fastane's), ``op`` (fastane's), ``outputs``, ``layer`` (the placed layer it
    belongs to), ``preferred`` and ``supported`` (fastane's units: ane, cpu, gpu),
    ``weight``, ``confidence``, ``reason``, ``rule`` (:attr:`Prediction.rule
    <fastane.model.placement.predict.Prediction.rule>`) and ``placement`` (fastane's: ane,
    layout, host)."""

    name: str
    operator: str
    op: str
    outputs: list
    layer: str
    preferred: str
    supported: tuple
    weight: float
    confidence: str
    reason: str
    rule: str = ""
    placement: str = ""

    @property
    def label(self) -> str:
        """The op's first output (what a Mac's plan names it by), else its node's name."""
        return self.outputs[0] if self.outputs else self.name

    def as_dict(self) -> dict:
        return {
            "operatorName": self.operator,
            "outputs": [{"name": o} for o in self.outputs],
            "deviceUsage": {
                "preferred": DEVICES[self.preferred],
                "supported": [DEVICES[u] for u in self.supported],
            },
            "estimatedCost": {"weight": self.weight},
            "fastane": {
                "name": self.name,
                "op": self.op,
                "layer": self.layer,
                "placement": self.placement,
                "confidence": self.confidence,
                "reason": self.reason,
                "rule": self.rule,
            },
        }


@dataclass
class OpShare:
    """Some ops of a plan, heaviest first: ``ops``, their ``share`` of the modelled work and
    ``rules`` (their rules, the rule carrying most work first)."""

    ops: list
    share: float
    rules: list

    @classmethod
    def of(cls, ops) -> "OpShare":
        ops = sorted(ops, key=lambda o: -o.weight)
        by_rule: dict = {}
        for o in ops:
            by_rule[o.rule] = by_rule.get(o.rule, 0.0) + o.weight
        return cls(ops, sum(o.weight for o in ops), sorted(by_rule, key=lambda r: -by_rule[r]))

    @property
    def named(self) -> str:
        """``'a', 'b' and K more; rule(s): R1, R2``: up to :data:`LEAVE_NAMES` ops and
        :data:`LEAVE_RULES` rules."""
        names = ", ".join(quote(o.label, 32) for o in self.ops[:LEAVE_NAMES])
        if len(self.ops) > LEAVE_NAMES:
            names += f" and {len(self.ops) - LEAVE_NAMES} more"
        rules = ", ".join(self.rules[:LEAVE_RULES])
        if len(self.rules) > LEAVE_RULES:
            rules += f" and {len(self.rules) - LEAVE_RULES} more"
        return f"{names}; {'rule' if len(self.rules) == 1 else 'rules'}: {rules}"

    def as_dict(self) -> dict:
        return {"ops": [o.label for o in self.ops], "share": self.share, "rules": list(self.rules)}


@dataclass
class LeavesANE:
    """The ops of a plan of ``total`` ops for ``compute_units`` on ``chip`` that leave the ANE
    (:meth:`ComputePlan.leaves_ane`): ``off``, those predicted on the CPU or the GPU, and
    ``at_risk``, those predicted on the ANE with a rule that puts them at risk of leaving it
    (a range-shaped input: :func:`~fastane.model.placement.predict.predict`); each an
    :class:`OpShare`."""

    compute_units: str
    chip: str
    total: int
    off: OpShare
    at_risk: OpShare

    @property
    def message(self) -> str:
        """One line: how many ops are off the ANE, then how many on it are at risk, each
        naming up to :data:`LEAVE_NAMES` ops and :data:`LEAVE_RULES` rules."""
        off, risk = self.off, self.at_risk
        where = f"({self.compute_units} on {self.chip})"
        if off.ops:
            line = (
                f"Core ML may run {len(off.ops)} of {self.total} ops ({100 * off.share:.1f}% of the "
                f"modelled work) off the ANE {where}: {off.named}"
            )
        else:
            line = f"Core ML may run 0 of {self.total} ops off the ANE {where}"
        if risk.ops:
            ops, are = ("op", "is") if len(risk.ops) == 1 else ("ops", "are")
            line += (
                f"; {len(risk.ops)} {ops} on it ({100 * risk.share:.1f}% of the modelled work) {are} at risk: "
                f"{risk.named}"
            )
        return line + " (an estimate; the compute plan gives each op's reason)"

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "off": self.off.as_dict(),
            "at_risk": self.at_risk.as_dict(),
            "message": self.message,
        }


@dataclass
class ComputePlan:
    """The predicted plan of model ``model`` for ``compute_units`` on ``chip``, in ``precision``
    (:func:`precision_of`: "fp16", "fp32", or "mixed" for an ML Program declaring both;
    ``precision_declared``: the model's own, else assumed)."""

    model: str
    compute_units: str
    chip: str
    ops: list
    precision: str = DEFAULT_PRECISION
    precision_declared: bool = False
    #: the reshape-frequency hint the plan assumes the model is loaded with
    #: (:data:`~fastane.model.placement.predict.RESHAPE_FREQUENCIES`)
    reshape_frequency: str = DEFAULT_RESHAPE_FREQUENCY

    @property
    def precision_text(self) -> str:
        """``fp16 assumed`` or ``fp32 declared``."""
        return f"{self.precision} {'declared' if self.precision_declared else 'assumed'}"

    def leaves_ane(self):
        """The :class:`LeavesANE` of the plan, or None.  Under ``ALL`` or ``CPU_AND_NE``: the ops
        predicted off the ANE, and those predicted on it with a rule (at risk); it is given
        when an op is at risk, or an op off the ANE is off by a "config" rule or is one
        fastane runs on the ANE, or the ops off the ANE carry more than :data:`LEAVE_SHARE`
        of the modelled work."""
        if self.compute_units not in ("ALL", "CPU_AND_NE"):
            return None
        off = OpShare.of(o for o in self.ops if o.preferred != "ane")
        risk = OpShare.of(o for o in self.ops if o.preferred == "ane" and o.rule)
        avoidable = any(RULES.get(o.rule) == "config" or o.placement == "ane" for o in off.ops)
        if not risk.ops and not avoidable and off.share <= LEAVE_SHARE:
            return None
        return LeavesANE(self.compute_units, self.chip, len(self.ops), off, risk)

    def by_layer(self) -> dict:
        """Layer name -> its ops, in the plan's order (a layer's ops share one prediction)."""
        out: dict = {}
        for o in self.ops:
            out.setdefault(o.layer, []).append(o)
        return out

    def as_dict(self) -> dict:
        ops = [o.as_dict() for o in self.ops]
        leave = self.leaves_ane()
        return {
            "format": FORMAT,
            "source": "fastane estimate",
            "model": self.model,
            "computeUnits": self.compute_units,
            "chip": self.chip,
            "precision": self.precision,
            "precisionDeclared": self.precision_declared,
            "reshapeFrequency": self.reshape_frequency,
            "modelStructure": {"program": {"functions": {"main": {"block": {"operations": ops}}}}},
            "leavesANE": None if leave is None else leave.as_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1)

    def table(self) -> str:
        lines = [
            f"compute plan of {quote(self.model, marks=False)} for {self.compute_units} on "
            f"{self.chip}, {self.precision_text}"
            + (", reshape frequency infrequent" if self.reshape_frequency == "infrequent" else "")
            + " (an ESTIMATE from public rules and SPEC limits, not Core ML's decision)",
            f"  {'op output':32s} {'operator':20s} {'device':6s} {'supported':13s} {'weight':>7s} "
            f"{'confidence':10s} reason",
        ]
        share: dict = {}
        for o in self.ops:
            share[o.preferred] = share.get(o.preferred, 0.0) + o.weight
            lines.append(
                f"  {quote(o.label, 32, marks=False)[:32]:32s} {quote(o.operator, 20, marks=False)[:20]:20s} "
                f"{o.preferred:6s} {'|'.join(o.supported):13s} {100 * o.weight:6.2f}% "
                f"{o.confidence:10s} {o.reason}"
            )
        lines.append(
            f"  {len(self.ops)} ops; work by device: "
            + ", ".join(f"{u} {100 * w:.1f}%" for u, w in sorted(share.items()))
        )
        return "\n".join(lines)


def check_precision(value, graph=None):
    """``value`` (None or a key of :data:`PRECISIONS`, any case) as a key, or None; a ValueError
    for another value, or for a value given for ``graph`` that declares its tensors' float types
    (an ML Program: :attr:`~fastane.model.graph.Graph.declared`), whose precision is its own."""
    if value is None:
        return None
    p = str(value).lower()
    if p not in PRECISIONS:
        raise ValueError(f"precision {value!r}: one of {', '.join(PRECISIONS)}")
    if graph is not None and graph.declared:
        raise ValueError(
            f"precision {p!r}: model {quote(graph.name)} declares its own ({_own_precision(graph)}, "
            f"an ML Program); a precision is assumed only for a model that declares none (ONNX, "
            f"NeuralNetwork)"
        )
    return p


def precision_of(bound, precision=None) -> tuple:
    """``(precision, declared, dtypes)`` of a plan of ``bound``.  A model that declares its
    tensors' float types (an ML Program) keeps them: its precision (:func:`_own_precision`),
    True, the graph's types (``precision`` given as well: :func:`check_precision`'s
    ValueError).  Another: ``precision`` (default :data:`DEFAULT_PRECISION`), False, and every
    float tensor of ``bound`` declared in it, as in an ML Program converted in it."""
    precision = check_precision(precision, bound.graph)
    if bound.graph.declared:
        return _own_precision(bound.graph), True, bound.graph.declared
    precision = precision or DEFAULT_PRECISION
    dt = PRECISIONS[precision]
    return precision, False, {t: dt for t, ty in bound.types.items() if np.dtype(ty.dtype).kind == "f"}


def _own_precision(graph) -> str:
    """ "fp16" or "fp32" where every op output ``graph`` declares (casts aside: the converter's
    casts at the inputs and outputs) has that type, else "mixed"."""
    names = {dt: k for k, dt in PRECISIONS.items()}
    seen = {
        np.dtype(graph.declared[t])
        for n in graph.nodes
        if n.op != "cast"
        for t in n.outputs
        if t in graph.declared
    } or {np.dtype(dt) for dt in graph.declared.values()}
    return names[seen.pop()] if len(seen) == 1 else "mixed"


def build(
    name: str,
    bound,
    layers,
    compute_units: str = "ALL",
    chip="m1",
    layer_seconds=None,
    precision=None,
    reshape_frequency: str = DEFAULT_RESHAPE_FREQUENCY,
) -> ComputePlan:
    """The :class:`ComputePlan` of ``layers`` (placed from ``bound``) for ``compute_units`` on
    ``chip``; ``layer_seconds``: per layer, the time of its stats-only plan on the ANE, or
    None where fastane does not plan it there (its ops are then counted one by one);
    ``precision``: the one assumed for a model that declares none (:func:`precision_of`);
    ``reshape_frequency``: the hint the model is loaded with (:func:`predict`)."""
    from ...roofline import chips
    from ...roofline.model import estimate

    chip = chips.get(chip)
    cu = str(compute_units).upper()
    prec, prec_declared, declared = precision_of(bound, precision)
    rf = check_reshape_frequency(reshape_frequency)
    preds = predict(layers, bound, cu, chip, declared, rf)
    on_ne = [p.unit == "ane" for p in predict(layers, bound, "CPU_AND_NE", chip, declared, rf)]
    on_gpu = [p.unit == "gpu" for p in predict(layers, bound, "CPU_AND_GPU", chip, declared, rf)]
    layer_seconds = layer_seconds or [None] * len(layers)
    allowed = _ALLOWED[cu]
    rows, times = [], []
    for layer, p, ne, gpu, secs in zip(layers, preds, on_ne, on_gpu, layer_seconds):
        units = {"cpu", p.unit} | ({"ane"} if ne else set()) | ({"gpu"} if gpu else set())
        supported = tuple(u for u in ("cpu", "gpu", "ane") if u in units and u in allowed)
        costs = [_node_cost(n, bound) for n in layer.nodes]
        if secs is None:
            node_s = [
                estimate(_one_task(n, c, bound), chip, program=False).time_s
                for n, c in zip(layer.nodes, costs)
            ]
        else:
            work = [c.work for c in costs]
            node_s = [secs * w / sum(work) for w in work] if sum(work) else [secs / len(work)] * len(work)
        for n, s in zip(layer.nodes, node_s):
            rows.append((n, layer, p, supported))
            times.append(s)
    total = sum(times)
    ops = [
        PlannedOp(
            n.name,
            n.source or n.op,
            n.op,
            list(n.outputs),
            layer.name,
            p.unit,
            supported,
            t / total if total else 1.0 / len(rows),
            p.confidence,
            p.reason,
            p.rule,
            layer.placement,
        )
        for (n, layer, p, supported), t in zip(rows, times)
    ]
    return ComputePlan(name, cu, chip.key, ops, prec, prec_declared, rf)


def _node_cost(node, bound):
    return node_cost(
        node,
        [bound.types[t] if t else None for t in node.inputs],
        [bound.types[t] for t in node.outputs],
    )


def _one_task(node, cost, bound) -> Stats:
    """The op as one ANE task: its work, its constant inputs read as weights, its other
    inputs as tiles, its outputs written (fp16 bytes); the MACs of a one-tap op (a matmul,
    a 1 x 1 convolution: ``cost.taps`` at most 1) counted as ``pointwise_macs``, as the
    device counts a lowered one."""
    ins = [t for t in node.inputs if t]
    const = sum(2 * bound.types[t].size for t in ins if t in bound.consts)
    src = sum(2 * bound.types[t].size for t in ins if t not in bound.consts)
    dst = sum(2 * bound.types[t].size for t in node.outputs)
    return Stats(
        tasks=1,
        macs=cost.macs,
        planar_ops=cost.elem_ops,
        kernel_dma_bytes=const,
        tile_dma_src_bytes=src,
        tile_dma_dst_bytes=dst,
        pointwise_macs=cost.macs if cost.taps <= 1 else 0,
    )


def load_observed(path) -> dict:
    """The devices of a placement observed on a Mac, ``{op output name: "ane" | "cpu" |
    "gpu"}``, from a compute-plan JSON (:data:`FORMAT`, as ``docs/compute_plan_dump.py``
    writes it; an op without a device usage, a ``const``, is left out) or a flat
    ``{op output name: "ane" | "cpu" | "gpu"}``.  ValueError for anything else."""
    raw = read_file(path, "placement file", _MAX_FILE, "64 MiB, for one record per op")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not a readable JSON placement file ({exc})") from None
    if isinstance(data, dict) and "modelStructure" in data:
        return plan_devices(path, data)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and str(v).lower() in ("ane", "cpu", "gpu") for k, v in data.items()
    ):
        raise ValueError(
            f'{path}: expected a compute plan ("format": "{FORMAT}") or '
            f'{{"op output name": "ane"|"cpu"|"gpu", ...}}'
        )
    return {k: str(v).lower() for k, v in data.items()}


def plan_devices(path, data) -> dict:
    """``{output name: unit}`` of the operations (or NeuralNetwork layers) of a compute plan
    ``data`` (as the dumper writes it; ``path`` names it in a ValueError)."""
    return {name: unit for _, names, unit in plan_operations(path, data) for name in names}


def plan_operations(path, data) -> list:
    """``[(operator, output names, unit)]``: each operation (or NeuralNetwork layer) of a
    compute plan ``data`` that Core ML gave a device (a ``const`` has none), its operator
    without the opset (``ios17.conv`` -> ``conv``; a layer's type); ``path`` names the plan
    in a ValueError."""

    def bad(what):
        return ValueError(f"{path}: not a compute plan: {what}")

    if not isinstance(data, dict) or "modelStructure" not in data:
        raise bad("expected an object with a modelStructure")
    if data.get("format") != FORMAT:
        raise bad(f"format {quote(repr(data.get('format')), 40, marks=False)}, expected {FORMAT!r}")
    s = data["modelStructure"]
    try:
        if isinstance(s, dict) and "neuralNetwork" in s:
            ops, key, kind = s["neuralNetwork"]["layers"], "outputNames", "type"
        else:
            ops, key, kind = (
                s["program"]["functions"]["main"]["block"]["operations"],
                "outputs",
                "operatorName",
            )
    except (KeyError, TypeError):
        raise bad("expected modelStructure.program.functions.main.block.operations") from None
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise bad("the operations are not a list of objects")
    out = []
    for op in ops:
        names, use = _output_names(op.get(key)), op.get("deviceUsage")
        if use is None:  # a const: Core ML gives it no device
            continue
        if not isinstance(use, dict) or names is None:
            raise bad("an operation's outputs or deviceUsage is malformed")
        unit = _UNITS.get(str(use.get("preferred")).lower())
        if unit is None:
            raise bad(f"unknown device {quote(repr(use.get('preferred')), 40, marks=False)}")
        out.append((str(op.get(kind, "")).rsplit(".", 1)[-1], names, unit))
    return out


def _output_names(outputs):
    """The names of an operation's ``outputs`` (``[{"name": ...}]``) or a layer's
    ``outputNames`` (``[...]``); None if malformed or empty (an op is known by its outputs)."""
    if not isinstance(outputs, list) or not outputs:
        return None
    names = [o.get("name") if isinstance(o, dict) else o for o in outputs]
    return names if all(isinstance(n, str) for n in names) else None


def compare(items, observed: dict) -> dict:
    """Each item ``(label, names, unit)`` -- an op or a layer, the tensor or node names it
    is known by, its predicted unit -- against what a Mac observed (``observed``: name ->
    unit, :func:`load_observed`); ``{"rows": [(label, predicted, observed or None)],
    "agree": n, "disagree": [(label, predicted, observed)], "unmatched": [label],
    "unknown": n}`` (``unknown``: the observed names no item is known by)."""
    rows, agree, disagree, unmatched, known = [], 0, [], [], set()
    for label, names, unit in items:
        hit = [n for n in names if n in observed]
        known.update(hit)
        seen = "/".join(sorted({observed[n] for n in hit}))
        rows.append((label, unit, seen or None))
        if not seen:
            unmatched.append(label)
        elif unit in seen.split("/"):
            agree += 1
        else:
            disagree.append((label, unit, seen))
    return {
        "rows": rows,
        "agree": agree,
        "disagree": disagree,
        "unmatched": unmatched,
        "unknown": len(set(observed) - known),
    }
