"""Predicted Core ML placement per layer for a compute-unit setting -- an **estimate**.

Core ML decides at load time which compute unit runs each op; nothing on Linux can ask
it.  This module predicts the decision from what is known (docs/models.md, "Core ML:
placement prediction", cites the sources):

* ``CPU_ONLY``: every op on the CPU; ``CPU_AND_GPU``: float ops on the GPU;
* ``ALL`` / ``CPU_AND_NE``: an op goes to the Neural Engine when

  - its tensors are floating point (the ANE computes fp16, SPEC 1; an integer or boolean
    tensor -- indices, masks, shapes -- is the CPU's);
  - its tensors fit the compile limits of the chip's ANE generation (its
    :class:`fastane.roofline.chips.Family`: N and C at most 65536, rank at most 5, H and W
    at most 16384 up to the M3's generation and 65536 from the M4's), else Core ML's ANE
    compiler refuses the model segment;
  - the op is one the ANE runs (convolutions, matrix products, the elementwise and
    activation ops, pooling, normalisation, softmax, reductions, data movement), not
    one known to fall back (dynamic gathers, comparisons and selects, casts to integers,
    custom layers);
  - the op is not control flow (If, Loop, Scan: the CPU, "likely");
  - the op is not one fastane runs only on the host (:data:`HOST_ONLY`: einsum, top-k,
    arg-max, cumsum, gathers/scatters, resize ...: predicted "cpu", "uncertain");
  - a convolution's per-output-channel kernel fits one core's KMem (64 KiB, the
    family's ``kmem_core_bytes``): beyond it fastane refuses the layer, and whether
    Apple's compiler splits it is not known ("uncertain");

  else the CPU (``CPU_AND_NE``) or the GPU (``ALL``: Core ML prefers the GPU for a float op
  the ANE cannot take).

  Rules from public reports and Apple's documentation (``reports.json`` in this package, each
  rule citing its report ids or its document; docs/models.md, "Public placement reports",
  checks them on held-out reports):

  - an fp16 ``matmul`` or attention below a size floor goes to the CPU on a chip whose
    family reports it (``Family.size_floor``, a :class:`fastane.roofline.chips.SizeFloor`
    holding the thresholds and their report ids: the M4's); on another chip the M4's
    thresholds make it "uncertain";
  - program floors, read over a segment (the layers on the ANE passing tensors to one
    another): a one-row ``linear`` alone in its segment below a reduction depth
    (``Family.linear_depth``, ``linear_depth_int8``: the M3 Max's), a segment whose matrix
    products are all 1x1 convolutions holding few weights (``Family.conv1x1_weights``:
    torchnative's M1, by inference) go to the CPU on that generation, "uncertain"
    elsewhere (a :class:`fastane.roofline.chips.Floor` each); a ``linear``'s output wider than
    W's limit stays on the ANE where the generation was seen to take it
    (``Family.linear_width``, "uncertain");
  - a segment with no matrix product (elementwise ops, normalisations, softmax, reductions)
    goes to the CPU up to a size, under ``ALL`` to the GPU from a larger one, on the generation
    that reports it (``Family.no_matrix``: torchnative's M1); on another generation nothing
    changes (the M4's lone add, mul and softmax of 2M to 16M elements ran on the ANE);
  - an op the model declares fp32 is off the ANE, as coremltools' documentation says (its
    Typed Execution guide); under ``ALL`` the CPU or the GPU by the generation's reported
    edges (:func:`_fp32`; :attr:`fastane.model.graph.Graph.declared`, ML Programs; for
    another model the precision a compute plan assumes, ``predict(..., declared=...)``);
  - a pooling window above 13 or a stride above 2 leaves the ANE (:data:`POOL_LIMITS`);
  - a sin or cos leaves the ANE on a generation whose compiler has no such table
    (``Family.trig_table``: before H15, the M3's, by ANEForge's op floors; "uncertain", a floor
    read from the compiler and not a run);
  - the W/H limit by ANE generation (``Family.max_extent``): beyond it off the ANE,
    "likely" where the limit was measured on that generation, else "uncertain"; an extent
    above 16384 that the generation takes (65536 from the M4's) stays on the ANE, "uncertain";
  - a range-shaped (flexible) input bound away from its default shape keeps the whole model
    off the ANE (Core ML runs the ANE at the default only); at the default the layers left on
    the ANE are at risk ("uncertain"); enumerated shapes take nothing off it;
  - on an A-series chip (iOS, iPadOS) a model storing more than :data:`IOS_MODEL_BYTES` is
    off the ANE (:func:`stored_bytes`).

  Whether the layer's tensors fit the 2 MiB L2 is reported too (a layer that does not
  streams its tiles from DRAM: slower, still on the ANE).  The compile limits (N, C, rank,
  W, H, KMem) and the size floor are the chip's ANE generation's
  (:data:`fastane.roofline.chips.FAMILIES`, one record per generation with each figure's
  source): a limit measured on that generation decides "likely", another "uncertain".

The result for each layer is ``(unit, confidence, reason, rule)``; ``confidence`` is
"likely" or "uncertain"; ``rule`` the short name (a key of :data:`RULES`) of the rule that
takes the layer off the ANE, or of the one that puts a layer left on it at risk, else "".
Compare with Xcode's performance report on a Mac (docs/models.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ... import m1
from ...errors import quote
from ...roofline import chips
from ..cost import node_cost
from ..ops import OPS
from .context import compressed_weights
from .place import CONTROL_FLOW

__all__ = [
    "COMPUTE_UNITS",
    "DEFAULT_RESHAPE_FREQUENCY",
    "IOS_MODEL_BYTES",
    "RESHAPE_FREQUENCIES",
    "RULES",
    "check_reshape_frequency",
    "check_units",
    "predict",
    "Prediction",
    "stored_bytes",
]

COMPUTE_UNITS = ("ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY")


def check_units(value) -> str:
    """``value`` as a key of :data:`COMPUTE_UNITS` (any case); ValueError if it is none."""
    cu = str(value).upper()
    if cu not in COMPUTE_UNITS:
        raise ValueError(f"compute units {value!r}: one of {', '.join(COMPUTE_UNITS)}")
    return cu


#: ops (fastane's vocabulary) the ANE is known not to run (fall back to CPU/GPU); a gather:
#: sm-gather-index-select, sm-gather-any-size (smpanaro/more-ane-transformers NOTES.md, M1 Pro)
_FALLBACK = {
    "gather": "a gather with run-time indices",
    "where": "a select on a boolean mask",
    "equal": "a comparison (boolean result)",
    "less": "a comparison (boolean result)",
    "greater": "a comparison (boolean result)",
    "range": "an integer sequence",
    "shape": "shape arithmetic",
}
#: ops fastane runs only on the host (no ANE lowering in fastane): predicted on the CPU
#: under every setting, the reason saying so (an estimate: whether Core ML's ANE compiler
#: has a lowering for some of them -- an einsum as a matmul, a resize -- is not known here)
HOST_ONLY = {
    "einsum": "an einsum",
    "topk": "a top-k sort",
    "argmax": "an arg-max",
    "argmin": "an arg-min",
    "hardmax": "a hardmax",
    "cumsum": "a cumulative sum",
    "trilu": "a triangular mask",
    "onehot": "a one-hot encoding",
    "gather_nd": "a gather with run-time indices",
    "gather_elements": "a gather with run-time indices",
    "scatter_nd": "a scatter with run-time indices",
    "scatter_elements": "a scatter with run-time indices",
    "tile": "a tile",
    "resize": "a resize",
    "reduce_prod": "a product reduction",
    "mod": "a modulo",
    "lstm": "a recurrent layer (Core ML places it on the CPU)",
    "gru": "a recurrent layer (Core ML places it on the CPU)",
    "rnn": "a recurrent layer (Core ML places it on the CPU)",
}
#: host-only ops public reports place on the CPU (report ids of reports.json): predicted
#: "likely" instead of "uncertain".  LSTM/RNN: ct1780-lstm (apple/coremltools#1780, a
#: maintainer), fluidaudio411-lstm (FluidInference/FluidAudio#411, M4 Max); topk and the
#: gathers using its indices: rfdetr-topk-gather (roboflow/rf-detr#1495, M3 Pro compute
#: plan); scatter: sm-scatter; band_part (fastane's trilu): sm-band-part (smpanaro NOTES.md)
HOST_ON_CPU = {
    "lstm": "ct1780-lstm, fluidaudio411-lstm",
    "gru": "ct1780-lstm",
    "rnn": "ct1780-lstm",
    "topk": "rfdetr-topk-gather",
    "gather_elements": "rfdetr-topk-gather",
    "scatter_nd": "sm-scatter",
    "scatter_elements": "sm-scatter",
    "trilu": "sm-band-part",
}
#: the size floor reported on the M4's generation (its family record holds the thresholds and
#: their report ids): on a chip whose generation reports none, a product below it is "uncertain"
_M4_FLOOR = chips.FAMILIES["h16"].size_floor
#: the program floors (:class:`fastane.roofline.chips.Floor`, a field of ``Family``) by the
#: generation that reported each: on a chip whose generation reports none, a program below
#: it is "uncertain", left on the ANE
_PROGRAM_FLOORS = ("linear_depth", "linear_depth_int8", "conv1x1_weights")
_REPORTED = {
    kind: next(getattr(f, kind) for f in chips.FAMILIES.values() if getattr(f, kind) is not None)
    for kind in _PROGRAM_FLOORS
}
#: pooling the ANE's kernel validation rejects: a window above 13 (hn2-avgpool-k28) or a
#: stride above 2 (hn2-avgpool-stride4); os_log messages, hollance/neural-engine#2, 2020
POOL_LIMITS = {"kernel": 13, "stride": 2}
_POOLS = ("max_pool", "avg_pool", "lp_pool")
#: the ops of the sin and cos tables, which an ANE generation has or not
#: (:attr:`fastane.roofline.chips.Family.trig_table`)
_TRIG_OPS = ("sin", "cos")
#: a range-shaped input (coremltools RangeDim): Core ML runs the ANE at the input's default
#: shape only (an answer by an Apple engineer, developer.apple.com/forums/thread/724930: "For
#: models with range flexibility, we currently only support running on the Neural Engine for
#: the input's default shape. Other shapes will be run on either GPU or CPU";
#: ct2370-rangedim-conv says the same): at another shape the whole model is off the ANE, at
#: the default it is at risk (ct1764-flexible-default1 and ct1029-range-e5 saw such models off
#: the ANE); enumerated shapes take nothing off it (coremltools' FAQ: :data:`_ENUMERATED`)
_RANGE = (
    "a range-shaped input away from its default shape {shapes}: Core ML runs the ANE only at the "
    "default (an Apple engineer, developer forums thread 724930; ct2370-rangedim-conv)"
)
#: Core ML's reshape-frequency hint (``MLOptimizationHints.reshapeFrequency``, iOS 17.4 / macOS
#: 14.4): "frequent", the default, or "infrequent", which "can allow flexible shaped models to
#: run on the Neural Engine, with iOS 17.4 or later" (coremltools' Flexible Input Shapes guide)
RESHAPE_FREQUENCIES = ("frequent", "infrequent")
#: Core ML's default hint ("This is the default": MLOptimizationHints.ReshapeFrequency.frequent)
DEFAULT_RESHAPE_FREQUENCY = "frequent"
_RANGE_INFREQUENT = (
    "a range-shaped input away from its default shape {shapes}, loaded with the reshape-frequency "
    "hint 'infrequent': Core ML may re-optimize the ANE for the new shape (coremltools' Flexible Input "
    "Shapes guide; iOS 17.4 / macOS 14.4 and later); no report shows it"
)
_RANGE_DEFAULT = (
    "a range-shaped input at its default shape: the only shape Core ML runs on the ANE (developer "
    "forums thread 724930; ct2370-rangedim-conv), yet models with one stayed off it "
    "(ct1764-flexible-default1, ct1029-range-e5)"
)
_ENUMERATED = (
    "enumerated input shapes: Core ML runs such a model on the ANE unless its conversion adds "
    "dynamic layers (coremltools' FAQ, 'Neural Engine With Flexible Input Shapes'; "
    "ct2370-enumerated-conv), though ct1909-layernorm-enumerated saw one off it"
)
#: the largest model Core ML runs on the Neural Engine under iOS and iPadOS, in stored bytes
#: (coremltools' model utilities guide, "Bisect Model": "if you are deploying a model to run on
#: neural engine on an iPhone, it cannot be larger than 1 GB"; apple/ml-stable-diffusion's README
#: on --chunk-unet: "each with less than 1GB of weights ... required for Neural Engine
#: deployment on iOS and iPadOS ... not required for macOS"); read as 10^9 bytes
IOS_MODEL_BYTES = 10**9
#: the short names of the compile-limit rules, by axis: SPEC 5's limits (the M1's
#: generation's, :data:`fastane.roofline.chips.FAMILIES`)
_H13 = chips.FAMILIES["h13"]
_LIMITS = {
    "N": f"N > {_H13.max_channels.value:g}",
    "C": f"C > {_H13.max_channels.value:g}",
    "H": f"H > {_H13.max_extent.value:g}",
    "W": f"W > {_H13.max_extent.value:g}",
}
_RANK = f"rank > {_H13.max_rank.value:g}"
_FP32 = "fp32 compute precision"
_FLEXIBLE = "flexible input shapes"
_MODEL_SIZE = "model > 1 GB on iOS"
_POOL_RULES = {
    "kernel": f"pooling window > {POOL_LIMITS['kernel']}",
    "stride": f"pooling stride > {POOL_LIMITS['stride']}",
}
_SIZE_FLOOR = "M4 size floor"
_LINEAR_FLOOR = "linear depth floor"
_CONV_FLOOR = "1x1 conv weight floor"
_NO_MATRIX = "non-matrix program floor"
_CONTROL = "control flow"
_HOST_ONLY = "host-only op"
_NO_TRIG = "no sin/cos table"
_NOT_ANE = "not an ANE op"
_INTEGER = "integer tensors"
_CAST_INT = "cast to integer"
_UNITS = "compute units"
#: the short name of each rule that takes a layer off the ANE (:attr:`Prediction.rule`) ->
#: its kind: "config" -- Core ML runs the op on the ANE in another precision, size or input
#: shape, or on another chip; "op" -- the ANE does not run the op as written; "units" --
#: the compute-unit setting leaves the ANE out
RULES = {
    _FP32: "config",
    _FLEXIBLE: "config",
    _MODEL_SIZE: "config",
    **{rule: "config" for rule in _POOL_RULES.values()},
    _SIZE_FLOOR: "config",
    _LINEAR_FLOOR: "config",
    _CONV_FLOOR: "config",
    _NO_MATRIX: "config",
    _NO_TRIG: "config",
    _RANK: "config",
    **{rule: "config" for rule in _LIMITS.values()},
    _CONTROL: "op",
    _HOST_ONLY: "op",
    _NOT_ANE: "op",
    _INTEGER: "op",
    _CAST_INT: "op",
    _UNITS: "units",
}


class Prediction(tuple):
    """``(unit, confidence, reason, rule)`` (``rule``: a key of :data:`RULES`, or "")."""

    __slots__ = ()

    def __new__(cls, unit, confidence, reason, rule=""):
        return tuple.__new__(cls, (unit, confidence, reason, rule))

    unit = property(lambda s: s[0])
    confidence = property(lambda s: s[1])
    reason = property(lambda s: s[2])
    rule = property(lambda s: s[3])


def _limits(shape, family) -> tuple:
    """``(axis, extent, message, limit, rule)`` of the first compile limit of ``family`` (a
    :class:`fastane.roofline.chips.Family`) a tensor of ``shape`` breaks, or ``()``.  W and H
    are checked against SPEC 5's 16384 (the M1's, fastane's lowering's); ``limit`` is the
    family's figure, which may allow more (65536 from the M4's generation on)."""
    if len(shape) > family.max_rank.value:
        return "rank", len(shape), f"rank {len(shape)} > {family.max_rank.value:g}", family.max_rank, _RANK
    dims = (1,) * (4 - len(shape)) + tuple(shape) if len(shape) < 4 else tuple(shape)
    n, c, h, w = dims[0] if len(dims) == 4 else dims[0] * dims[1], dims[-3], dims[-2], dims[-1]
    hw = m1.LIMITS.max_hw
    for name, v, hi, lim in (
        ("N", n, family.max_channels.value, family.max_channels),
        ("C", c, family.max_channels.value, family.max_channels),
        ("H", h, hw, family.max_extent),
        ("W", w, hw, family.max_extent),
    ):
        if v > hi:
            return name, v, f"{name} = {v} > {hi:g} (SPEC 5 compile limit)", lim, _LIMITS[name]
    return ()


def _unknown(limit, chip) -> str:
    """A parenthesis naming the kind and source of ``limit``, a figure not measured on
    ``chip``'s generation: `` (the M1's limit; X's is not known; assumption, SOURCE)`` for an
    assumed one, `` (derived, SOURCE: NOTE)`` for a derived one; "" for a measured one."""
    if limit.kind == "measured":
        return ""
    if limit.kind == "derived":
        return f" (derived, {limit.source}: {limit.note})"
    return f" (the M1's limit; {chip.name}'s is not known; {limit.kind}, {limit.source})"


def _confidence(limit) -> str:
    return "likely" if limit.kind == "measured" else "uncertain"


def _declared(layer, declared: dict) -> set:
    """The float dtypes the source model declares for the layer's tensors (its nodes'
    inputs and outputs, and the MIL op a composition's node ``op_out/part`` comes from)."""
    out = set()
    for n in layer.nodes:
        for t in [*n.inputs, *n.outputs, n.name, n.name.rsplit("/", 1)[0]]:
            if t in declared:
                out.add(np.dtype(declared[t]))
    return out


def _attention_q(nodes) -> dict:
    """MIL op output -> the elements of Q, for every ``scaled_dot_product_attention`` (its
    composition's nodes have the source "sdpa"; the first matmul's first input is Q)."""
    out = {}
    for n in nodes:
        key = _sdpa_key(n)
        if key and key not in out and n.op == "matmul":
            out[key] = n.inputs[0]
    return out


def _mil_op(n) -> str:
    """The source model's op node ``n`` comes from: its name, or for a part of a
    composition (``name/op``) the name before the ``/``."""
    return n.name if n.name in n.outputs else n.name.rsplit("/", 1)[0]


def _sdpa_key(n) -> str:
    return _mil_op(n) if n.source == "sdpa" else ""


def _floor(measure: int, floor, op: str, what: str, on_floor_chip: bool):
    """``(unit or None, confidence, note)`` of ``floor`` (a
    :class:`fastane.roofline.chips.SizeFloor`) for an ``op`` ("matmul", "attention") of
    ``measure`` elements."""
    return _below(measure, getattr(floor, op), floor.seen_on, f"{what} of {measure} elements", on_floor_chip)


def _below(measure: int, pair, seen_on: str, what: str, own: bool, other: str = "ANE"):
    """``(unit or None, confidence, note)`` of a floor ``pair`` (the CPU's and ``other``'s
    :class:`~fastane.roofline.chips.Figure`, reported on ``seen_on``) for ``what`` measuring
    ``measure``: "cpu" at or below the CPU's figure on the floor's own generation (``own``;
    the figure's kind gives the confidence), else None -- "uncertain" at or below it
    elsewhere, or between the two figures; "likely" with no note from ``other``'s on."""
    cpu, ane = (int(f.value) for f in pair)
    ids = ", ".join(f.source for f in pair)
    if measure <= cpu:
        if own:
            return "cpu", _confidence(pair[0]), f"{what} <= {cpu}: Core ML prefers the CPU ({ids})"
        return None, "uncertain", f"{what}: on {seen_on} Core ML prefers the CPU ({ids})"
    if measure < ane:
        return (
            None,
            "uncertain",
            f"{what}: between the CPU ({cpu}) and {other} ({ane}) sizes reported on {seen_on} ({ids})",
        )
    return None, "likely", ""


def _pool_limit(n) -> tuple:
    """``(message, rule)`` of the pooling limit node ``n`` breaks, or ``("", "")``."""
    k, st = tuple(n.attrs.get("kernel") or ()), tuple(n.attrs.get("strides") or ())
    if k and max(k) > POOL_LIMITS["kernel"]:
        return f"a pooling window {k} > {POOL_LIMITS['kernel']} (hn2-avgpool-k28)", _POOL_RULES["kernel"]
    if st and max(st) > POOL_LIMITS["stride"]:
        return f"a pooling stride {st} > {POOL_LIMITS['stride']} (hn2-avgpool-stride4)", _POOL_RULES["stride"]
    return "", ""


def predict(
    layers,
    bound,
    compute_units: str = "ALL",
    chip="m1",
    declared=None,
    reshape_frequency: str = DEFAULT_RESHAPE_FREQUENCY,
) -> list:
    """One :class:`Prediction` per layer of ``layers`` (:func:`fastane.model.placement.place.place`
    on ``bound``) on ``chip`` (a name of :mod:`fastane.roofline.chips`).  The compile limits
    and the size floor are those of the chip's ANE generation (``Chip.family``): a decision
    one of them makes is "uncertain" where that generation's figure is not measured.
    ``declared``: tensor name -> float dtype, read by the fp32 rule in place of the graph's
    :attr:`~fastane.model.graph.Graph.declared` (a precision assumed for a model that declares
    none: :func:`fastane.model.placement.compute_plan.precision_of`).  ``reshape_frequency``:
    the hint the model is loaded with (:data:`RESHAPE_FREQUENCIES`), read for a range-shaped
    input away from its default shape."""
    cu = check_units(compute_units)
    infrequent = check_reshape_frequency(reshape_frequency) == "infrequent"
    family = chips.family_of(chip)
    chip = replace(chips.get(chip), family=family)  # a hand-built chip: the "unknown" one
    if declared is None:
        declared = getattr(bound.graph, "declared", {}) or {}
    flexible = set((getattr(bound.graph, "flexible", {}) or {}).values())
    away = _away_from_default(bound)
    stored = stored_bytes(bound.graph) if chip.key in chips.IOS_CHIPS else 0
    q_of = _attention_q(bound.nodes)
    out = []
    other = "gpu" if cu == "ALL" else "cpu"
    for layer in layers:
        types = [bound.types[t] for t in list(layer.inputs) + list(layer.outputs) if t in bound.types]
        floats = all(np.dtype(t.dtype).kind == "f" for t in types)
        if cu == "CPU_ONLY":
            out.append(Prediction("cpu", "likely", "CPU_ONLY", _UNITS))
            continue
        if cu == "CPU_AND_GPU":
            out.append(
                Prediction("gpu" if floats else "cpu", "likely", "CPU_AND_GPU: no Neural Engine", _UNITS)
            )
            continue
        p = _predict_ne(layer, bound, floats, other, declared, family)
        if p is None:
            ops = {n.op for n in layer.nodes}
            broken, widened = _broken(layer, bound, family)
            # W or H above 16384 that the generation takes (65536 from the M4's): not a refusal
            refused = [b for b in broken if b[0] not in ("W", "H") or b[1] > b[3].value]
            if refused:
                axis, extent, lim, limit, rule = refused[0]
                why = _refusal(axis, extent, lim, limit, family, chip)
                p = Prediction(other, _confidence(limit), why, rule)
            else:
                p = _on_ane(layer, bound, types, ops, q_of, chip)
                if broken and p.unit == "ane":
                    p = Prediction("ane", "uncertain", f"{_taken(broken[0], family, chip)}; {p.reason}")
                if widened and p.unit == "ane":
                    p = Prediction("ane", "uncertain", f"{widened}; {p.reason}")
        if p.unit == "ane" and away and infrequent:
            p = Prediction(
                "ane", "uncertain", f"{_RANGE_INFREQUENT.format(shapes=away)}; {p.reason}", _FLEXIBLE
            )
        elif p.unit == "ane" and away:
            p = Prediction("cpu", "likely", _RANGE.format(shapes=away), _FLEXIBLE)
        elif p.unit == "ane" and "range" in flexible:
            p = Prediction("ane", "uncertain", f"{_RANGE_DEFAULT}; {p.reason}", _FLEXIBLE)
        elif p.unit == "ane" and "enumerated" in flexible:
            p = Prediction("ane", p.confidence, f"{_ENUMERATED}; {p.reason}", p.rule)
        if p.unit == "ane" and stored > IOS_MODEL_BYTES:
            why = (
                f"the model holds {stored} bytes (predict.stored_bytes), more than the {IOS_MODEL_BYTES} Core ML "
                f"runs on the Neural Engine under iOS and iPadOS (coremltools' Bisect Model guide)"
            )
            p = Prediction(other, "likely", why, _MODEL_SIZE)
        out.append(p)
    if cu in ("ALL", "CPU_AND_NE"):
        out = _program_floors(layers, bound, out, family, other)
    return out


def check_reshape_frequency(value) -> str:
    """``value`` (any case) as a key of :data:`RESHAPE_FREQUENCIES`; a ValueError for another."""
    v = str(value).lower()
    if v not in RESHAPE_FREQUENCIES:
        raise ValueError(
            f"reshape frequency {value!r}: expected one of {', '.join(RESHAPE_FREQUENCIES)} "
            "(Core ML's MLOptimizationHints.reshapeFrequency)"
        )
    return v


def stored_bytes(graph) -> int:
    """The bytes of the model: its file's (:attr:`~fastane.model.graph.Graph.file_bytes`, a
    Core ML model), else (an ONNX model, converted) its constants as an fp16 Core ML program
    would store them -- a float at 16 bits, a palettized one at its code width
    (:attr:`~fastane.model.graph.Graph.code_bits`), an integer at its own width; the
    constants the importers make (``fastane::`` names: a transposed copy) not counted.
    Shapes only: a ``weights=False`` placeholder counts as its shape, nothing is read."""
    if getattr(graph, "file_bytes", 0):
        return int(graph.file_bytes)
    bits = getattr(graph, "code_bits", {}) or {}
    total = 0
    for name, v in graph.consts.items():
        if name.startswith("fastane::"):
            continue
        dt = np.dtype(v.dtype)
        total += v.size * (bits.get(name) or (16 if dt.kind == "f" else 8 * dt.itemsize))
    return total // 8


def _away_from_default(bound) -> str:
    """The range-shaped inputs bound to a shape other than their default (the model
    description's, :attr:`~fastane.model.graph.Graph.default_shapes`), as text, else ""."""
    g = bound.graph
    flexible, defaults = getattr(g, "flexible", {}) or {}, getattr(g, "default_shapes", {}) or {}
    away = [
        f"{quote(name)} {tuple(bound.types[name].shape)} (its default {tuple(defaults[name])})"
        for name, kind in flexible.items()
        if kind == "range"
        and name in defaults
        and name in bound.types
        and tuple(bound.types[name].shape) != tuple(defaults[name])
    ]
    return " and ".join(away)


def _broken(layer, bound, family) -> tuple:
    """``(broken, widened)``: the compile limits of ``family`` the layer's tensors break
    (:func:`_limits`), and the note on a ``linear`` output wider than W's limit that the
    generation was seen to take (``Family.linear_width``: its output features are not a W
    axis there; one report, "uncertain"), else ""."""
    width = family.linear_width
    linear = width is not None and any(_linear_weight(n, bound) is not None for n in layer.nodes)
    broken, widened = [], ""
    for t in [*layer.inputs, *layer.outputs]:
        b = _limits(bound.types[t].shape, family) if t in bound.types else ()
        if b and linear and t in layer.outputs and b[0] == "W" and b[1] <= width.value:
            widened = (
                f"a linear's output {b[1]} wide: beyond W's {b[3].value:g}, a {width.value:g}-wide one ran on "
                f"the ANE of the {family.name} generation ({width.source}; one report)"
            )
        elif b:
            broken.append(b)
    return broken, widened


def _linear_weight(n, bound):
    """The constant 2-D weight of a matmul by one (Core ML's ``linear``, x @ W^T), else None."""
    if n.op != "matmul" or n.inputs[1] not in bound.consts:
        return None
    w = bound.consts[n.inputs[1]]
    return w if w.ndim == 2 else None


def _refusal(axis, extent, lim, limit, family, chip) -> str:
    """Why a tensor ``extent`` long on ``axis``, beyond ``limit`` (a figure of ``family``),
    leaves the ANE."""
    if axis not in ("W", "H"):
        return lim + _unknown(limit, chip)
    if limit.value != m1.LIMITS.max_hw:  # the generation's own W/H limit, not SPEC 5's
        lim = f"{axis} = {extent} > {limit.value:g}"
    if limit.kind == "measured":
        return f"{lim}: the {family.name} generation's limit ({limit.source})"
    if limit.kind == "derived":
        return f"{lim}: the {family.name} generation's limit{_unknown(limit, chip)}"
    return f"{lim}{_unknown(limit, chip)}: {limit.note}"


def _taken(broken, family, chip) -> str:
    """The note on a W or H above SPEC 5's 16384 that ``family``'s compiler takes."""
    _, _, lim, limit, _ = broken
    return (
        f"{lim}: the {family.name} generation's compiler takes W and H up to {limit.value:g}"
        f"{_unknown(limit, chip) or f' ({limit.source})'}; no Core ML report confirms it"
    )


def _predict_ne(layer, bound, floats, other, declared, family):
    """The rules that take a layer off the ANE before its tensors' extents are checked
    (``ALL`` / ``CPU_AND_NE``), or None."""
    ops = {n.op for n in layer.nodes}
    if any(OPS[op].ane == "control" for op in ops):
        return Prediction("cpu", "likely", f"{CONTROL_FLOW} (sm-cond)", _CONTROL)
    host = next((op for op in HOST_ONLY if op in ops), None)
    if host:
        why = f"{HOST_ONLY[host]}: no ANE lowering in fastane, run on the host"
        if host in HOST_ON_CPU:
            return Prediction(
                "cpu", "likely", f"{why}; reported on the CPU ({HOST_ON_CPU[host]})", _HOST_ONLY
            )
        return Prediction("cpu", "uncertain", why, _HOST_ONLY)
    fb = next((why for op, why in _FALLBACK.items() if op in ops), None)
    if not floats:
        return Prediction("cpu", "likely", "integer/boolean tensors: the ANE computes fp16", _INTEGER)
    if any(n.op == "cast" and np.dtype(n.attrs.get("to", np.float32)).kind != "f" for n in layer.nodes):
        return Prediction("cpu", "likely", "a cast to an integer type", _CAST_INT)
    if fb:
        if "where" in ops:
            # sm-where-mask: a select on a mask computed outside the model ran on the ANE
            # (a statement without shapes, M1 Pro): the fallback is "uncertain"
            return Prediction(
                other,
                "uncertain",
                f"{fb}: not an ANE op; a select on a precomputed mask ran there (sm-where-mask)",
                _NOT_ANE,
            )
        return Prediction(other, "likely", f"{fb}: not an ANE op", _NOT_ANE)
    trig = next((op for op in _TRIG_OPS if op in ops), None)
    if trig and not family.trig_table.value:
        fig = family.trig_table
        why = f"a {trig}: the ANE compiler has no {trig} before the H15 generation"
        why += f" ({fig.kind}, {fig.source}: {fig.note})"
        return Prediction(other, _confidence(fig), why, _NO_TRIG)
    pool, rule = next((x for n in layer.nodes if n.op in _POOLS for x in [_pool_limit(n)] if x[0]), ("", ""))
    if pool:
        return Prediction(other, "likely", f"{pool}: rejected by the ANE's kernel validation", rule)
    if np.dtype(np.float32) in _declared(layer, declared) and ops != {"cast"}:
        return _fp32(layer, bound, other, family)
    return None


#: why a layer with a declared fp32 tensor is off the ANE: Apple's documentation, not a report
_FP32_WHY = "declared fp32: Core ML bars the ANE for an op typed fp32 (coremltools' Typed Execution guide)"


def _fp32(layer, bound, other, family):
    """A layer with a declared fp32 tensor: off the ANE (:data:`_FP32_WHY`), "likely".  Under
    ``CPU_AND_NE`` the CPU.  Under ``ALL`` (``other`` the GPU) the CPU or the GPU: a layer with
    multiply-adds (not attention) by them where the generation reports the fp32 edge
    (``Family.fp32_gpu``, measured on matmuls and linears: "uncertain" for a convolution); a
    layer without, by its largest tensor's elements where the generation reports the CPU and
    GPU sizes of a program with no matrix product (``Family.no_matrix``, fp16 programs:
    "uncertain"); else, and for attention, the CPU on the generation of the M4's size floor
    (where the fp32 matmul reports were measured) and the GPU elsewhere, "uncertain"."""
    if other != "gpu":
        return Prediction("cpu", "likely", _FP32_WHY, _FP32)
    attention = any(_sdpa_key(n) for n in layer.nodes)
    mac = [n for n in layer.nodes if _matrix(n) and not _sdpa_key(n)]
    if mac and not attention and family.fp32_gpu is not None:
        floor = family.fp32_gpu
        m, pair = sum(_node_macs(n, bound) for n in mac), (floor.cpu, floor.other)
        conv = any(n.op != "matmul" for n in mac)
        side, c, note = _below(m, pair, floor.seen_on, f"{m} multiply-adds", True, "GPU")
        if not side and not note:  # from the GPU's figure on
            ids = ", ".join(f.source for f in pair)
            side, c = "gpu", _confidence(floor.other)
            note = f"{m} multiply-adds >= {floor.other.value:g}: Core ML prefers the GPU ({ids})"
        if side:
            if conv:
                c, note = "uncertain", f"{note}; edges measured on fp32 matmuls, not convolutions"
            return Prediction(side, c, f"{_FP32_WHY}; {note}", _FP32)
        return Prediction(_fp32_default(family), "uncertain", f"{_FP32_WHY}; {note}", _FP32)
    if not mac and not attention and family.no_matrix is not None:
        floor = family.no_matrix
        m = _largest_tensor([layer], bound)
        cpu, gpu, ids = _edges(floor)
        side = "cpu" if m <= cpu else ("gpu" if m >= gpu else "")
        if side:
            edge = f"<= {cpu}" if side == "cpu" else f">= {gpu}"
            note = (
                f"its largest tensor {m} elements {edge}: the {side.upper()}'s size for an fp16 program "
                f"with no matrix product on {floor.seen_on} ({ids})"
            )
            return Prediction(side, "uncertain", f"{_FP32_WHY}; {note}", _FP32)
    unit = _fp32_default(family)
    seen = attention or (mac and all(n.op == "matmul" for n in mac))  # what the M4's reports saw
    return Prediction(unit, "likely" if unit == "cpu" and seen else "uncertain", _FP32_WHY, _FP32)


def _fp32_default(family) -> str:
    """The unit of an fp32 layer under ``ALL`` that no edge decides: the CPU on the generation
    of the M4's size floor (vx435-matmul-f32, vx437-sdpa-f32-1x1xS: the CPU there), else the GPU."""
    return "cpu" if family.size_floor is not None else "gpu"


def _node_macs(n, bound) -> int:
    return node_cost(
        n, [bound.types[t] if t else None for t in n.inputs], [bound.types[t] for t in n.outputs]
    ).macs


def _on_ane(layer, bound, types, ops, q_of, chip):
    """A layer the rules leave on the ANE: the size floor, KMem and L2 notes."""
    kmem = chip.family.kmem_core_bytes
    floor = chip.family.size_floor or _M4_FLOOR
    conf, notes = "likely", []
    for n in layer.nodes:
        key = _sdpa_key(n)
        if key and key in q_of and q_of[key] in bound.types:
            measure, op, what = bound.types[q_of[key]].size, "attention", "attention Q"
        elif n.op == "matmul" and not key:
            sizes = [bound.types[t].size for t in n.inputs[:2] if t in bound.types]
            measure, op, what = max(sizes, default=0), "matmul", "a matmul operand"
        else:
            continue
        unit, c, note = _floor(measure, floor, op, what, chip.family.size_floor is not None)
        if unit:
            return Prediction(unit, c, note, _SIZE_FLOOR)
        if note:
            conf = "uncertain"
            notes.append(note)
        break
    if ops == {"cast"}:
        conf = "uncertain"
        notes.append(
            "a float cast: Core ML converts between fp32 and fp16 where a segment enters or leaves the ANE"
        )
    for n in layer.nodes:
        if n.op in ("conv", "conv_transpose") and n.inputs[1] in bound.consts:
            w = bound.consts[n.inputs[1]]
            per = math.prod(w.shape[1:]) * 2
            if per > kmem.value:
                conf = "uncertain"
                notes.append(
                    f"a kernel of {per} bytes per output channel exceeds one core's "
                    f"KMem ({m1.size_str(int(kmem.value))}){_unknown(kmem, chip)}"
                )
    nbytes = sum(2 * t.size for t in types)
    notes.append(
        ("fits" if nbytes <= m1.L2_BYTES else "exceeds")
        + f" the {m1.size_str(m1.L2_BYTES)} L2 ({nbytes} fp16 bytes of tensors)"
    )
    if layer.placement == "host" and layer.kind not in ("layout",) and ops != {"cast"}:
        notes.insert(0, "fastane runs it on the host (no lowering yet); Core ML's ANE compiler has the op")
    return Prediction("ane", conf, "; ".join(notes))


def _segments(layers, preds) -> list:
    """The layers predicted on the ANE as Core ML would run them together, lists of indices:
    connected through a tensor one produces and another reads.  A layer of casts only (where
    a segment enters or leaves fp16) belongs to none."""
    on = [
        i
        for i, (lay, p) in enumerate(zip(layers, preds))
        if p.unit == "ane" and any(n.op != "cast" for n in lay.nodes)
    ]
    root = {i: i for i in on}

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    made = {t: i for i in on for t in layers[i].outputs}
    for i in on:
        for t in layers[i].inputs:
            if t in made:
                root[find(i)] = find(made[t])
    groups: dict = {}
    for i in on:
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _program_floors(layers, bound, preds, family, other) -> list:
    """``preds`` with the floors Core ML applies to a segment of the program as a whole
    (:func:`_segments`): a one-row ``linear`` alone (``Family.linear_depth``), a program of
    1x1 convolutions (``Family.conv1x1_weights``) and a program with no matrix product
    (``Family.no_matrix``, :func:`_no_matrix`).  Below the floor on its own generation the
    segment goes to the CPU; below it elsewhere, or between its figures, it stays on the ANE,
    "uncertain"."""
    out = list(preds)
    compressed = compressed_weights(bound)[0]
    for seg in _segments(layers, preds):
        nodes = [n for i in seg for n in layers[i].nodes]
        if family.no_matrix is not None and _no_matrix_segment(nodes):
            p = _no_matrix(seg, layers, bound, family.no_matrix, other)
            for i in seg:
                out[i] = (
                    p
                    if p.unit != "ane"
                    else Prediction("ane", p.confidence, f"{p.reason}; {out[i].reason}", out[i].rule)
                )
            continue
        found = _linear_alone(nodes, bound, compressed) or _conv1x1_program(nodes, bound)
        if found is None:
            continue
        kind, measure, what, rule = found
        own = getattr(family, kind)
        floor = own or _REPORTED[kind]
        unit, conf, note = _below(measure, (floor.cpu, floor.other), floor.seen_on, what, own is not None)
        for i in seg:
            if unit:
                out[i] = Prediction(unit, conf, note, rule)
            elif note:
                out[i] = Prediction("ane", "uncertain", f"{note}; {out[i].reason}", out[i].rule)
    return out


def _matrix(node) -> bool:
    """Whether ``node`` is a matrix product (a matmul, ``linear`` or convolution)."""
    return OPS[node.op].ane in ("mac", "conv", "deconv")


def _no_matrix_segment(nodes) -> bool:
    """Whether a segment has no matrix product (no matmul, linear, convolution) and computes
    something (an op other than data movement and casts): elementwise ops, normalisations,
    softmax, reductions."""
    if any(_matrix(n) for n in nodes):
        return False
    return any(OPS[n.op].kind != "layout" and n.op != "cast" for n in nodes)


def _largest_tensor(layers, bound) -> int:
    """The elements of the largest input or output of ``layers``."""
    return max(
        (bound.types[t].size for lay in layers for t in [*lay.inputs, *lay.outputs] if t in bound.types),
        default=0,
    )


def _edges(floor) -> tuple:
    """``(cpu, gpu, ids)``: the CPU's and the GPU's sizes of a ``Family.no_matrix`` floor, and
    their report ids."""
    return int(floor.cpu.value), int(floor.other.value), f"{floor.cpu.source}, {floor.other.source}"


def _no_matrix(seg, layers, bound, floor, other):
    """The :class:`Prediction` of a segment with no matrix product on the generation that
    reports ``floor`` (``Family.no_matrix``), by its largest tensor's elements: the CPU up to
    the CPU's figure; under ``ALL`` (``other`` the GPU) the GPU from the GPU's figure, in
    between the ANE, "uncertain"; under ``CPU_AND_NE`` above the CPU's figure the ANE,
    "uncertain" (no larger size was tried).  torchnative's one-op sweep (NPU2.md section 7.1:
    tn-npu2-layernorm-cpu, tn-npu2-softmax-cpu, tn-npu2-batchnorm-small-cpu,
    tn-npu2-batchnorm-large-gpu) saw the ANE supported and preferred at no size."""
    m = _largest_tensor([layers[i] for i in seg], bound)
    cpu, gpu, ids = _edges(floor)
    what = f"a program with no matrix product, its largest tensor {m} elements"
    if m <= cpu:
        return Prediction(
            "cpu",
            _confidence(floor.cpu),
            f"{what} <= {cpu}: Core ML prefers the CPU on {floor.seen_on} ({ids})",
            _NO_MATRIX,
        )
    if other == "gpu" and m >= gpu:
        return Prediction(
            "gpu",
            _confidence(floor.other),
            f"{what} >= {gpu}: Core ML prefers the GPU on {floor.seen_on} ({ids})",
            _NO_MATRIX,
        )
    if other == "gpu":
        return Prediction(
            "ane",
            "uncertain",
            f"{what}: between the CPU ({cpu}) and GPU ({gpu}) sizes reported on {floor.seen_on} ({ids})",
            _NO_MATRIX,
        )
    return Prediction(
        "ane",
        "uncertain",
        f"{what}: above the largest size tried on {floor.seen_on} ({cpu}, the CPU; {ids})",
        _NO_MATRIX,
    )


def _linear_alone(nodes, bound, compressed):
    """``(floor kind, depth, what, rule)`` of a segment that is one ``linear`` on one row (a
    vector by a constant [k, n] weight, Core ML's ``linear`` with its bias): the
    reduction-depth floor (larql's depth reports are one-op programs: a ``linear`` beside
    other ops on the ANE is left alone), the int8 one for a weight stored compressed; else
    None."""
    if len({_mil_op(n) for n in nodes}) != 1:
        return None
    for n in nodes:
        w = _linear_weight(n, bound)
        x = bound.types.get(n.inputs[0])
        if w is not None and x is not None and math.prod(x.shape[:-1]) == 1:
            stored = {n.inputs[1], n.attrs.get("compressed_weight")} & compressed
            kind = "linear_depth_int8" if stored else "linear_depth"
            what = (
                f"a one-row linear alone{' (int8 weights)' if stored else ''} of reduction depth {w.shape[0]}"
            )
            return kind, w.shape[0], what, _LINEAR_FLOOR
    return None


def _conv1x1_program(nodes, bound):
    """``(floor kind, weights, what, rule)`` of a segment whose matrix products are all 1x1
    convolutions by constant weights: the weights they hold (torchnative: "the threshold is
    weights in the program, not arithmetic"); else None."""
    macs = [n for n in nodes if _matrix(n)]
    w = [bound.consts.get(n.inputs[1]) for n in macs if n.op == "conv"]
    if not macs or len(w) != len(macs) or any(x is None or any(d != 1 for d in x.shape[2:]) for x in w):
        return None
    total = sum(x.size for x in w)
    return "conv1x1_weights", total, f"1x1 convolutions holding {total} weights", _CONV_FLOOR
