"""A front-end-neutral model graph: tensors with shapes and dtypes, ops in fastane's own
vocabulary (:data:`fastane.model.ops.OPS`), constants, and the binding of symbolic
dimensions to the caller's input shapes.

An importer (:mod:`fastane.model.frontends.onnx.importer`; later Core ML) builds a :class:`Graph`:

* ``inputs``: name -> :class:`TensorType` (a dimension is an ``int`` or a symbol ``str``);
* ``consts``: name -> numpy array (weights and constant operands, already checked);
* ``nodes``: :class:`Node` in topological order, attributes normalised by the importer
  (every operand that an old format gave as an attribute is a constant input here);
* ``outputs``: the names the model returns.

:func:`bind` turns it into a :class:`Bound` graph for concrete input shapes: every tensor's
shape and dtype inferred, symbolic dimensions bound (and checked for consistency), and
every node whose inputs are all constant folded into a constant (shape arithmetic such
as ``Shape -> Gather -> Concat -> Reshape`` disappears).  Sizes and costs are checked
*before* anything is allocated or computed: no tensor may exceed
:data:`MAX_TENSOR_ELEMENTS`, no node or run the other limits of :mod:`.budget`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelError, quote, quote_names
from .budget import check_nodes
from .cost import RunBudget
from .tensor import DTYPES, MAX_FOLD_ELEMENTS, MAX_TENSOR_ELEMENTS, TensorType, check_size

__all__ = [
    "TensorType",
    "Node",
    "Graph",
    "Bound",
    "bind",
    "evaluate",
    "MAX_TENSOR_ELEMENTS",
    "MAX_FOLD_ELEMENTS",
    "check_size",
    "DTYPES",
]


@dataclass
class Node:
    """One op: ``op`` (fastane's op name), ``inputs``/``outputs`` (tensor names; ``""`` is
    an omitted optional input), ``attrs`` (plain Python values), ``source`` (the op's name in
    the front end, e.g. ONNX's ``Conv``: for messages and the report only)."""

    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    source: str = ""

    def describe(self) -> str:
        return f"node {quote(self.name)} ({quote(self.source or self.op, marks=False)})"


@dataclass
class Graph:
    name: str
    inputs: dict  # name -> TensorType
    outputs: list  # names
    nodes: list  # Node, topological order
    consts: dict  # name -> np.ndarray
    #: where the graph came from (e.g. "onnx opset 17"), for the report
    origin: str = ""
    #: False: large constants are shape-only placeholders (a stats-only report only)
    weights: bool = True
    #: names of constants the source model stored compressed (palettized or linearly
    #: quantized weights): the placement keeps them compressed on the ANE where that is
    #: lossless (:func:`fastane.compress.lossless`)
    compressed: set = field(default_factory=set)
    #: of those, the code width their type gives (a palette of ``2**bits`` fp16 values a
    #: core holds them): the stats-only report counts them so, without their values
    code_bits: dict = field(default_factory=dict)
    #: tensor name -> the float dtype (float16 / float32) the source model declares for it,
    #: where the graph computes in float32 (ML Program inputs and op outputs); empty where
    #: the source declares none (NeuralNetwork, ONNX): the placement estimate reads it
    declared: dict = field(default_factory=dict)
    #: input name -> the default shape (a tuple) the source declares for a flexible input
    #: (a Core ML model description's ``shape``): Core ML runs a range-shaped input on the
    #: ANE only at it (the placement estimate reads it)
    default_shapes: dict = field(default_factory=dict)
    #: the bytes the model's file holds (an .mlmodel, or every file of an .mlpackage), set by
    #: the Core ML frontend; 0 where not known (the placement's model-size rule counts the
    #: constants then: :func:`fastane.model.placement.predict.stored_bytes`)
    file_bytes: int = 0
    #: input name -> the shapes the source allows a flexible input: ``("range", ((lo, hi),
    #: ...))`` per axis (``hi`` -1: unbounded) or ``("enumerated", (shape, ...))``; binding
    #: refuses another shape, as Core ML does at prediction time
    allowed_shapes: dict = field(default_factory=dict)
    #: state input name -> the output holding its value after the run (a Core ML state, read
    #: and written by the model: :meth:`fastane.model.Model.reference` and the other runs
    #: take it as an input, zeros when the caller gives none, as Core ML's ``makeState``)
    states: dict = field(default_factory=dict)

    @property
    def flexible(self) -> dict:
        """Input name -> "range" or "enumerated": the flexible inputs the source declares (the
        kind of each :attr:`allowed_shapes` entry)."""
        return {name: kind for name, (kind, _) in self.allowed_shapes.items()}

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Every node's inputs are defined before it, no tensor is defined twice, every
        output is defined, every op is known, and there are at most
        :data:`~fastane.model.budget.MAX_NODES` nodes."""
        from .ops import OPS  # noqa: PLC0415 (ops imports tensor, not graph)

        check_nodes(len(self.nodes), f"model {quote(self.name)}")

        defined = set(self.inputs) | set(self.consts)
        if set(self.inputs) & set(self.consts):
            both = sorted(set(self.inputs) & set(self.consts))[0]
            raise ModelError(f"tensor {quote(both)} is both a model input and a constant")
        for node in self.nodes:
            if node.op not in OPS:
                raise ModelError(f"{node.describe()}: op {quote(node.op)} is unknown to fastane")
            for name in node.inputs:
                if name and name not in defined:
                    raise ModelError(
                        f"{node.describe()}: input {quote(name)} is not defined before the "
                        f"node (the graph is not in topological order, or the tensor "
                        f"does not exist)"
                    )
            for name in node.outputs:
                if name in defined:
                    raise ModelError(f"{node.describe()}: output {quote(name)} is defined twice")
                defined.add(name)
        for name in self.outputs:
            if name not in defined:
                raise ModelError(f"model output {quote(name)} is not produced by any node")
        if not self.outputs:
            raise ModelError("the model has no outputs")


@dataclass
class Bound:
    """A graph for concrete input shapes: ``types`` of every tensor, ``consts`` (the
    graph's plus the folded ones), ``nodes`` (the ones left to run), ``folded`` (nodes
    evaluated at bind time), ``budget`` (its :class:`~fastane.model.cost.RunBudget`, done)."""

    graph: Graph
    input_types: dict
    types: dict
    consts: dict
    nodes: list
    folded: list
    symbols: dict
    budget: RunBudget | None = None


def bind(graph: Graph, input_types: dict) -> Bound:
    """Infer every tensor's type for ``input_types`` (name -> TensorType with concrete
    shapes: the caller's arrays), bind the symbolic dimensions, fold constants; a node
    whose record expands it (:attr:`~fastane.model.ops.OpDef.expand`: control flow) is
    replaced by its expansion."""
    from .ops import OPS

    types, symbols = _input_types(graph, input_types)
    budget = RunBudget(graph)
    for name, t in types.items():
        budget.input(name, t)
    consts = dict(graph.consts)
    for name, arr in consts.items():
        types[name] = TensorType(arr.dtype, arr.shape)
    nodes, folded = [], []
    work = list(reversed(graph.nodes))  # the next node last
    while work:
        node = work.pop()
        op = OPS[node.op]
        in_types = [types[n] if n else None for n in node.inputs]
        in_consts = [consts.get(n) if n else None for n in node.inputs]
        try:
            got = op.expand(node, in_types, in_consts) if op.expand is not None else None
            if got is not None:
                _expanded(node, got, types, consts, budget)
                work.extend(reversed(got[0]))
                continue
            out_types = op.infer(node, in_types, in_consts)
        except ModelError:
            raise
        except (ValueError, TypeError, IndexError, KeyError, OverflowError, ZeroDivisionError) as exc:
            raise ModelError(f"{node.describe()}: {quote(str(exc), 200, marks=False)}") from None
        if len(out_types) < len(node.outputs):
            raise ModelError(
                f"{node.describe()}: has {len(node.outputs)} outputs, the op makes {len(out_types)}"
            )
        for name, t in zip(node.outputs, out_types):
            if name in types:  # an inlined branch's name (Graph.check saw the graph's own)
                raise ModelError(f"{node.describe()}: output {quote(name)} is defined twice")
            check_size(t.shape, f"{node.describe()}, output {quote(name)}")
            types[name] = t
        foldable = op.foldable and all((n == "" or n in consts) for n in node.inputs)
        # an op that reads its inputs' (now concrete) shapes only folds whatever their values
        shaped = op.shapes_only
        foldable = foldable or shaped
        foldable = foldable and all(types[n].size <= MAX_FOLD_ELEMENTS for n in node.outputs)
        budget.node(node, in_types, [types[n] for n in node.outputs], foldable)
        if foldable:
            consts.update(zip(node.outputs, _fold(node, in_types, consts, types, shaped)))
            folded.append(node)
        else:
            nodes.append(node)
    budget.done()
    return Bound(graph, dict(input_types), types, consts, nodes, folded, symbols, budget)


def _fold(node, in_types, consts, types, shaped: bool) -> list:
    """The outputs of ``node``, whose inputs are constants, computed at bind; ``shaped``: the
    node reads its inputs' shapes only (Shape, Size), handed placeholders of those shapes
    that hold no elements of their own."""
    from .ops import host_eval

    if shaped:
        ins = [None if t is None else np.broadcast_to(np.False_, t.shape) for t in in_types]
    else:
        ins = [consts.get(n) if n else None for n in node.inputs]
    return host_eval(node, ins, [types[n].dtype for n in node.outputs])


def _check_allowed(name: str, shape: tuple, allowed) -> None:
    """A ModelError where ``shape`` is not one the flexible input ``name`` allows
    (:attr:`Graph.allowed_shapes`)."""
    if allowed is None:
        return
    kind, spec = allowed
    if kind == "enumerated":
        if spec and shape not in {tuple(s) for s in spec}:
            listed = ", ".join(_fmt(s) for s in spec[:4]) + (
                f" and {len(spec) - 4} more" if len(spec) > 4 else ""
            )
            raise ModelError(
                f"input {quote(name)}: shape {_fmt(shape)} is not one of its enumerated shapes {listed}"
            )
        return
    if len(spec) != len(shape):
        return  # a range of another rank than the input: the frontend checked nothing to compare
    for i, (d, (lo, hi)) in enumerate(zip(shape, spec)):
        if d < lo or (hi >= 0 and d > hi):
            top = "unbounded" if hi < 0 else str(hi)
            raise ModelError(
                f"input {quote(name)}: dimension {i} is {d}, outside its declared range {lo}..{top}"
            )


def _input_types(graph: Graph, input_types: dict) -> tuple:
    """``(types, symbols)``: the caller's input types checked against the graph's declared
    inputs, and the values they give the symbolic dimensions."""
    symbols: dict = {}
    types: dict = {}
    for name, declared in graph.inputs.items():
        if name not in input_types:
            raise ModelError(f"missing input {quote(name)} (expected {declared})")
        given = input_types[name]
        if np.dtype(given.dtype) != np.dtype(declared.dtype):
            raise ModelError(
                f"input {quote(name)}: expected dtype {np.dtype(declared.dtype).name}, "
                f"got {np.dtype(given.dtype).name}"
            )
        if len(given.shape) != len(declared.shape):
            raise ModelError(
                f"input {quote(name)}: expected shape {_fmt(declared.shape)} "
                f"({len(declared.shape)}-D), got {_fmt(given.shape)}"
            )
        for i, (d, g) in enumerate(zip(declared.shape, given.shape)):
            if isinstance(d, str):
                if symbols.setdefault(d, g) != g:
                    raise ModelError(
                        f"input {quote(name)}: dimension {i} is {quote(d)} = {symbols[d]} elsewhere, got {g}"
                    )
            elif d != g:
                raise ModelError(
                    f"input {quote(name)}: expected shape {_fmt(declared.shape)}, got {_fmt(given.shape)}"
                )
        _check_allowed(name, tuple(given.shape), graph.allowed_shapes.get(name))
        check_size(given.shape, f"input {quote(name)}")
        types[name] = TensorType(np.dtype(given.dtype), tuple(int(g) for g in given.shape))
    extra = sorted(set(input_types) - set(graph.inputs))
    if extra:
        raise ModelError(
            f"unknown input {quote(extra[0])}; the model's inputs are {quote_names(graph.inputs)}"
        )
    return types, symbols


def _expanded(node, got, types, consts, budget) -> None:
    """Take in the constants of ``got``, a node's expansion ``(nodes, consts)``, and its
    nodes' reads."""
    new, new_consts = got
    for name, arr in new_consts.items():
        if name in types:
            raise ModelError(f"{node.describe()}: tensor {quote(name)} is defined twice")
        consts[name] = arr
        types[name] = TensorType(arr.dtype, arr.shape)
    budget.replace(node, new)


def evaluate(bound: Bound, feeds: dict) -> dict:
    """The outputs of ``bound`` (name -> array) for the arrays ``feeds`` of its inputs, every
    node on the host in float32 (:func:`~fastane.model.ops.host_eval`), intermediates freed
    after their last use: the fp32 reference of a model, a control-flow body's run."""
    from .ops import host_eval

    values = dict(bound.consts)
    values.update(feeds)
    last_use = {t: i for i, node in enumerate(bound.nodes) for t in node.inputs}
    keep = set(bound.graph.outputs) | set(bound.consts) | set(feeds)
    for i, node in enumerate(bound.nodes):
        outs = host_eval(
            node,
            [values[t] if t else None for t in node.inputs],
            [bound.types[t].dtype for t in node.outputs],
        )
        values.update(zip(node.outputs, outs))
        for t in node.inputs:
            if last_use.get(t) == i and t not in keep:
                values.pop(t, None)
    return {n: values[n] for n in bound.graph.outputs}


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"
