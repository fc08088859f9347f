"""Placement: which ops of a bound graph run on the emulated ANE, which on the host, and why.

As Core ML partitions a model, fastane groups the graph into *layers*:

* **ane**: an op fastane lowers to TD programs, run through the public entry points
  (:func:`fastane.conv2d`, :func:`fastane.conv1d`, :func:`fastane.linear`,
  :func:`fastane.matmul`, the activations of :mod:`fastane.activations`) -- the one
  lowering and the one device; nothing is recomputed here.  Fusions, as Apple's compiler
  does them: a BatchNormalization after a convolution is folded into its weights and bias
  at compile time (SPEC 3, :func:`fastane.lut.fold_affine`: rounded once to fp16); an
  activation that is the only consumer of a conv/Gemm/MatMul runs in the NE stage of the
  same tasks (``activation=``); ``x * sigmoid(x)`` is silu.
* **layout**: data movement with no arithmetic (Reshape, Transpose, Concat, Slice, ...);
  fastane does it on the host (numpy), which changes no value.  Apple's compiler often
  expresses these as DMA strides; fastane does not lower them yet.
* **host**: everything else, in float32 on the host, with the reason (no ANE lowering in
  fastane yet, beyond the lowering's limits, non-constant weights, ...).

Tensors cross between the two as fp16 (the ANE's public entry points round their
operands to fp16, and return fp16).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import activations as _activations
from . import plan as _plan
from ..graph import Bound
from ..ops import OPS
from .context import Context
from .qlinear import place_qlinear
from .rows import ROW_OPS, place_rows
from .rules import NO_LOWERING, activation_rule, const_scalar, place_conv, place_deconv, place_mac

__all__ = ["Layer", "place", "NO_LOWERING"]


@dataclass
class Layer:
    """A group of nodes placed together.  ``run(values) -> list`` computes the outputs
    from the dynamic inputs (``inputs``), ``kind`` is the op class used for tolerances."""

    name: str
    nodes: list
    placement: str
    reason: str
    inputs: list
    outputs: list
    kind: str
    run: object = None
    #: the ANE call and its arguments, for the report ("conv2d", "linear", ...)
    call: str = ""
    detail: dict = field(default_factory=dict)
    #: ``plan() -> Stats``: the same programs counted from the shapes alone (stats-only)
    plan: object = None
    #: ``problem() -> fastane.lower.Conv | None``: the one convolution ``plan`` lowers, whose
    #: source is the first node's first input (a stats-only plan may chain it with its
    #: neighbours, :func:`fastane.model.placement.plan.chains`); None: not one convolution
    problem: object = None

    @property
    def op(self) -> str:
        return "+".join(n.source or n.op for n in self.nodes)


# ------------------------------------------------------------------------ the placer
def place(bound: Bound) -> list:
    """The layers of ``bound``, in execution order."""
    consts, types = bound.consts, bound.types
    # weights the model stores compressed: its own, and the outputs of folded dequantize
    # nodes (ONNX QDQ): kept compressed on the ANE where lossless (rules.py)
    compressed = set(getattr(bound.graph, "compressed", ())) | {
        o for n in bound.folded if n.op == "dequantize" for o in n.outputs
    }
    # of those, the ones int8/uint8 by type with one scale: the stats-only report counts
    # them as 8-bit codes (rules.typed_bits), no values needed
    typed_codes = {
        n.outputs[0]: 8
        for n in bound.folded
        if n.op == "dequantize"
        and np.dtype(consts[n.inputs[0]].dtype) in (np.dtype(np.int8), np.dtype(np.uint8))
        and all(not t or consts[t].size == 1 for t in n.inputs[1:])
    }
    # and Core ML's one-table palettized weights, at their table's code width
    typed_codes.update(getattr(bound.graph, "code_bits", {}))
    consumers: dict = {}
    for node in bound.nodes:
        for t in node.inputs:
            if t:
                consumers.setdefault(t, []).append(node)
    outputs = set(bound.graph.outputs)

    def only(t):
        """The one node consuming ``t`` (None if it has several, or is a model output)."""
        c = consumers.get(t, [])
        return c[0] if len(c) == 1 and t not in outputs else None

    done: set = set()
    layers = []
    off_int8: dict = {}  # quantized chains left off the INT8 path: the reason (place_qlinear)

    def dyn(nodes):
        produced = {o for n in nodes for o in n.outputs}
        seen, ins = set(), []
        for n in nodes:
            for t in n.inputs:
                if t and t not in consts and t not in produced and t not in seen:
                    seen.add(t)
                    ins.append(t)
        return ins

    def add(nodes, placement, reason, kind, run=None, call="", plan=None, problem=None, **detail):
        for n in nodes:
            done.add(id(n))
        layers.append(
            Layer(
                nodes[0].name,
                nodes,
                placement,
                reason,
                dyn(nodes),
                nodes[-1].outputs,
                kind,
                run,
                call,
                detail,
                plan,
                problem,
            )
        )
        return layers[-1]

    def fuse_activation(node):
        """The activation node after ``node`` that can run in its NE stage, or the silu
        pattern; returns ``(nodes, fused_arg)``."""
        out = node.outputs[0]
        nxt = only(out)
        if nxt is not None and OPS[nxt.op].kind != "layout":
            fused, _ = activation_rule(nxt, consts)
            if fused is not None:
                return [nxt], fused
        silu = _silu(out)
        if silu:
            return silu, "silu"
        return [], None

    def _silu(x):
        c = consumers.get(x, [])
        if len(c) != 2 or x in outputs:
            return None
        sig = next((n for n in c if n.op == "sigmoid"), None)
        mul = next((n for n in c if n.op == "mul"), None)
        if sig is None or mul is None or only(sig.outputs[0]) is not mul:
            return None
        if sorted(mul.inputs) != sorted([x, sig.outputs[0]]):
            return None
        return [sig, mul]

    ctx = Context(bound, only, add, fuse_activation, compressed, typed_codes)
    for node in bound.nodes:
        if id(node) in done:
            continue
        op = node.op
        if op == "dequantize" and place_qlinear(node, ctx, off_int8):
            continue  # a quantized conv/matmul chain on the INT8 path (place_qlinear)
        if op == "conv":
            place_conv(node, ctx)
        elif op == "conv_transpose":
            place_deconv(node, ctx)
        elif op in ("gemm", "matmul"):
            place_mac(node, ctx)
        elif (
            op == "div"
            and len(node.inputs) == 2
            and all(np.dtype(types[t].dtype).kind == "f" for t in node.inputs)
        ):
            from ...lower import binary as _binary

            out_shape = types[node.outputs[0]].shape
            b_shape = types[node.inputs[1]].shape

            def run(xs, node=node):
                vals = {t: x for t, x in zip(_dyn_inputs(node, consts), xs)}
                a, b = (vals[t] if t in vals else consts[t] for t in node.inputs)
                return [_binary.divide(a, b)]

            add(
                [node],
                "ane",
                "Apple's div: the reciprocal table (NE), then a planar multiply",
                "table",
                run,
                "divide",
                lambda out_shape=out_shape, b_shape=b_shape: (
                    _plan.eltwise(b_shape, "reciprocal") + _plan.binary(out_shape, "mul")
                ),
            )
        elif (
            op in _BINARY
            and len(node.inputs) == 2
            and all(np.dtype(types[t].dtype).kind == "f" for t in node.inputs)
        ):
            from ...lower import binary as _binary

            note = (
                ""
                if types[node.inputs[0]].shape == types[node.inputs[1]].shape
                else "broadcast materialised on the host (a copy, no rounding)"
            )
            # a ReLU after it (its one consumer): an NE task in the same program
            nxt = only(node.outputs[0])
            relu = nxt is not None and nxt.op in _ACTIVATIONS and activation_rule(nxt, consts)[0] == "relu"
            act = "relu" if relu else None

            def run(xs, name=_BINARY[op], node=node, act=act):
                vals = {t: x for t, x in zip(_dyn_inputs(node, consts), xs)}
                a, b = (vals[t] if t in vals else consts[t] for t in node.inputs)
                return [_binary.binary(name, a, b, act)]

            out_shape = types[node.outputs[0]].shape
            add(
                [node, nxt] if relu else [node],
                "ane",
                note,
                "exact",
                run,
                _BINARY[op],
                lambda out_shape=out_shape, op=op, relu=relu: _plan.binary(out_shape, _BINARY[op], relu),
            )
        elif (op in ("abs", "neg") or (op == "pow" and const_scalar(consts, node, 1) == 2.0)) and np.dtype(
            types[node.inputs[0]].dtype
        ).kind == "f":
            from ...lower import binary as _binary

            name = {"abs": "absolute", "neg": "negative", "pow": "square"}[op]
            shape = types[node.inputs[0]].shape
            add(
                [node],
                "ane",
                "x * x (unary/square.bin)" if op == "pow" else "",
                "exact",
                lambda xs, name=name: [_binary.unary(name, xs[0])],
                name,
                lambda shape=shape, name=name: _plan.binary(shape, name),
            )
        elif op in ROW_OPS or op in ("max_pool", "avg_pool"):
            place_rows(node, ctx)
        elif OPS[op].kind == "layout":
            add(
                [node],
                "layout",
                "data movement only (no arithmetic), done on the host; "
                "fastane does not express it as DMA strides yet",
                "layout",
            )
        elif op == "sigmoid" and (nodes := _silu(node.inputs[0])) and nodes[0] is node:
            shape = types[node.inputs[0]].shape
            add(
                nodes,
                "ane",
                "",
                "table",
                lambda xs: [_activations.silu(xs[0])],
                "silu",
                lambda shape=shape: _plan.eltwise(shape, "silu"),
            )
        else:
            fused, fn = activation_rule(node, consts) if op in _ACTIVATIONS else (None, NO_LOWERING)
            if fused is not None and np.dtype(types[node.inputs[0]].dtype).kind == "f":
                kind = "exact" if op in ("relu", "sign") or (op == "clip") else "table"
                shape = types[node.inputs[0]].shape
                add(
                    [node],
                    "ane",
                    "",
                    kind,
                    lambda xs, fn=fn: [fn(xs[0])],
                    node.op,
                    lambda shape=shape, fused=fused: _plan.eltwise(shape, fused),
                )
            else:
                add([node], "host", fn if isinstance(fn, str) else NO_LOWERING, OPS[op].kind)
    for layer in layers:  # a quantized chain left off the INT8 path says why (place_qlinear)
        why = [off_int8[id(n)] for n in layer.nodes if id(n) in off_int8]
        if why:
            layer.reason = "; ".join(filter(None, [layer.reason, *why]))
    return layers


#: model ops -> fastane.lower.binary (planar engine) functions
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "max": "maximum", "min": "minimum"}


def _dyn_inputs(node, consts):
    seen, out = set(), []
    for t in node.inputs:
        if t and t not in consts and t not in seen:
            seen.add(t)
            out.append(t)
    return out


_ACTIVATIONS = (
    "relu",
    "tanh",
    "sigmoid",
    "exp",
    "sqrt",
    "reciprocal",
    "sign",
    "gelu",
    "leaky_relu",
    "selu",
    "clip",
    "exp2",
    "rsqrt",
)
