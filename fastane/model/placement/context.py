"""What the placer (:func:`fastane.model.placement.place.place`) hands each placement rule:
:class:`Context`, the bound graph with the weights kept compressed, and the placer's own
functions (the one consumer of a tensor, the activation that fuses into a layer's NE stage,
and :meth:`Context.add`, which records a :class:`Layer`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph import Bound, Node
from ..ops import OPS
from .eltwise import activation_rule

__all__ = ["Context", "Layer", "compressed_weights"]


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


class Context:
    """The placer's state over one bound graph: the layers recorded so far (:attr:`layers`,
    in execution order) and the nodes they hold."""

    def __init__(self, bound: Bound):
        self.bound = bound
        #: weights the model stores compressed (kept compressed on the ANE where lossless)
        self.compressed, self.typed_codes = compressed_weights(bound)
        self.layers: list = []
        #: quantized chains left off the INT8 path: MAC node id -> the reason (qlinear.match)
        self.off_int8: dict = {}
        self._done: set = set()
        self._consumers: dict = {}
        for node in bound.nodes:
            for t in node.inputs:
                if t:
                    self._consumers.setdefault(t, []).append(node)
        self._outputs = set(bound.graph.outputs)

    def done(self, node: Node) -> bool:
        """Whether ``node`` is in a layer already."""
        return id(node) in self._done

    def only(self, t: str):
        """The one node consuming ``t`` (None if it has several, or is a model output)."""
        c = self._consumers.get(t, [])
        return c[0] if len(c) == 1 and t not in self._outputs else None

    def dyn(self, nodes) -> list:
        """The dynamic inputs of ``nodes``: not constant, not made by one of them, in order."""
        consts = self.bound.consts
        produced = {o for n in nodes for o in n.outputs}
        seen, ins = set(), []
        for n in nodes:
            for t in n.inputs:
                if t and t not in consts and t not in produced and t not in seen:
                    seen.add(t)
                    ins.append(t)
        return ins

    def add(
        self, nodes, placement, reason, kind, run=None, call="", plan=None, problem=None, **detail
    ) -> Layer:
        """Record ``nodes`` as one layer; the layer."""
        self._done.update(id(n) for n in nodes)
        layer = Layer(
            nodes[0].name,
            nodes,
            placement,
            reason,
            self.dyn(nodes),
            nodes[-1].outputs,
            kind,
            run,
            call,
            detail,
            plan,
            problem,
        )
        self.layers.append(layer)
        return layer

    def fuse_activation(self, node: Node):
        """The activation node after ``node`` that can run in its NE stage, or the silu or
        hard_swish pattern; ``(nodes, fused)`` with ``fused`` the ``activation=`` argument
        of the MAC entry points; ``([], None)`` if none."""
        out = node.outputs[0]
        nxt = self.only(out)
        if nxt is not None and OPS[nxt.op].kind != "layout":
            fused, _ = activation_rule(nxt, self.bound)
            if fused is not None:
                return [nxt], fused
        nodes, name = self.gated(out)
        return (nodes, name) if nodes else ([], None)

    def gated(self, x: str):
        """``([gate, mul], name)`` when ``x`` feeds exactly ``x * gate(x)``: a sigmoid
        (``"silu"``) or a hard sigmoid whose parameters round to hard_swish's (1/6, 1/2) in
        fp16, the gate's block (``"hard_swish"``, as an exporter writes HardSwish before
        opset 14 and coremltools' torch frontend writes hardswish); else ``([], None)``."""
        c = self._consumers.get(x, [])
        if len(c) != 2 or x in self._outputs:
            return [], None
        gate = next((n for n in c if n.op in ("sigmoid", "hard_sigmoid")), None)
        mul = next((n for n in c if n.op == "mul"), None)
        if gate is None or mul is None or self.only(gate.outputs[0]) is not mul:
            return [], None
        if sorted(mul.inputs) != sorted([x, gate.outputs[0]]):
            return [], None
        if gate.op == "sigmoid":
            return [gate, mul], "silu"
        a = gate.attrs
        with np.errstate(over="ignore"):
            params = (np.float16(a.get("alpha", 0.2)), np.float16(a.get("beta", 0.5)))
        return ([gate, mul], "hard_swish") if params == (np.float16(1 / 6), np.float16(0.5)) else ([], None)


def compressed_weights(bound: Bound) -> tuple:
    """``(compressed, typed_codes)``: the weights the model stores compressed -- its own, and
    the outputs of folded dequantize nodes (ONNX QDQ) -- and, of those, the code width by
    type alone (:func:`~.rules.typed_bits`): 8 for an int8/uint8 tensor with one scale, a
    Core ML one-table palette's width; the stats-only report counts them, no values needed."""
    consts = bound.consts
    compressed = set(getattr(bound.graph, "compressed", ())) | {
        o for n in bound.folded if n.op == "dequantize" for o in n.outputs
    }
    typed_codes = {
        n.outputs[0]: 8
        for n in bound.folded
        if n.op == "dequantize"
        and np.dtype(consts[n.inputs[0]].dtype) in (np.dtype(np.int8), np.dtype(np.uint8))
        and all(not t or consts[t].size == 1 for t in n.inputs[1:])
    }
    typed_codes.update(getattr(bound.graph, "code_bits", {}))
    return compressed, typed_codes
