"""The ONNX importer's mapping of the ops fastane runs only on the host (no ANE lowering):
Einsum, TopK, ArgMax/ArgMin, CumSum, Tile, the gathers and scatters, Resize/Upsample,
OneHot, Trilu, Split, the logical ops ... (:mod:`fastane.model.ops.host`,
:mod:`~fastane.model.ops.index`, :mod:`~fastane.model.ops.resize`).  Called by
:func:`fastane.model.frontends.onnx.importer._convert`; imports no ``onnx``.  Operands that older
opsets gave as attributes (TopK ``k``, Split ``split``, ReduceProd ``axes``, Upsample
``scales``) become constant inputs."""

from __future__ import annotations

import numpy as np

from ....errors import ModelError, ModelNotImplementedError, quote
from ...graph import Node

#: ONNX op type -> fastane op, for the ops whose attributes keep their ONNX names
_SAME = {
    "Einsum": "einsum",
    "ArgMax": "argmax",
    "ArgMin": "argmin",
    "CumSum": "cumsum",
    "Tile": "tile",
    "GatherND": "gather_nd",
    "GatherElements": "gather_elements",
    "ScatterND": "scatter_nd",
    "ScatterElements": "scatter_elements",
    "Scatter": "scatter_elements",
    "OneHot": "onehot",
    "Trilu": "trilu",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "Not": "logical_not",
    "GreaterOrEqual": "greater_equal",
    "LessOrEqual": "less_equal",
    "IsNaN": "isnan",
    "IsInf": "isinf",
    "Round": "round",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Softsign": "softsign",
    "Mish": "mish",
    "ThresholdedRelu": "thresholded_relu",
    "Celu": "celu",
    "Mean": "mean",
    "Mod": "mod",
    "DepthToSpace": "depth_to_space",
    "SpaceToDepth": "space_to_depth",
    "Hardmax": "hardmax",
}
#: every ONNX op type this module maps
HOST_OPS = sorted(set(_SAME) | {"TopK", "Split", "Resize", "Upsample", "ReduceProd"})


def _outputs(outs, name, n):
    """The node's first ``n`` outputs, an omitted (``""``) one given a private name."""
    outs = list(outs) + [""] * (n - len(outs))
    if any(outs[n:]):
        raise ModelError(f"node {quote(name)}: has {len(outs)} outputs, the op makes {n}")
    return [o or f"fastane::{name}:unused{i}" for i, o in enumerate(outs[:n])]


def convert(op, a, ins, outs, name, b):
    """The fastane node for ONNX node ``name`` (op type ``op``, attributes ``a``), or
    None when this module does not map ``op``."""

    def node(fop, attrs, inputs=None, n_out=1):
        return Node(
            fop, name, list(ins if inputs is None else inputs), _outputs(outs, name, n_out), attrs, op
        )

    if op in _SAME:
        if op == "Hardmax" and b.opset < 13:
            raise ModelNotImplementedError(
                f"node {quote(name)} (Hardmax): opset {b.opset}'s 2-D coerced form is not implemented (opset 13+ is)"
            )
        if op == "Scatter" or (op == "ScatterElements" and b.opset < 16):
            a = {k: v for k, v in a.items() if k != "reduction"}
        return node(_SAME[op], dict(a))
    if op == "TopK":
        if b.opset < 10:
            ins = ins[:1] + [b.const([a.get("k", 1)], np.int64)]
        attrs = {k: a[k] for k in ("axis", "largest", "sorted") if k in a}
        return node("topk", attrs, ins, 2)
    if op == "Split":
        attrs = {"axis": a.get("axis", 0)}
        if "split" in a:  # opset < 13: an attribute
            ins = ins[:1] + [b.const(a["split"], np.int64)]
        if "num_outputs" in a:
            attrs["num_outputs"] = a["num_outputs"]
        return node("split", attrs, ins, max(len(outs), 1))
    if op == "ReduceProd":
        if "axes" in a:
            ins = ins[:1] + [b.const(a["axes"], np.int64)]
        return node(
            "reduce_prod",
            {"keepdims": a.get("keepdims", 1), "noop_with_empty_axes": a.get("noop_with_empty_axes", 0)},
            ins,
        )
    if op in ("Resize", "Upsample"):
        attrs = {k: v for k, v in a.items() if k != "scales"}
        attrs["mode"] = {"bilinear": "linear"}.get(
            str(a.get("mode", "nearest")).lower(), str(a.get("mode", "nearest")).lower()
        )
        if op == "Upsample" or b.opset < 11:  # Resize-10 / Upsample: scales only, x / scale
            scales = b.const(a["scales"], np.float32) if "scales" in a else (ins[1] if len(ins) > 1 else "")
            if not scales:
                raise ModelError(f"node {quote(name)} ({op}): needs scales")
            attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            ins = [ins[0], "", scales, ""]
        else:
            ins = (list(ins) + ["", "", ""])[:4]
        if attrs["mode"] not in ("nearest", "linear", "cubic"):
            raise ModelError(f"node {quote(name)} ({op}): unknown mode {quote(str(a.get('mode')))}")
        return node("resize", attrs, ins)
    return None
