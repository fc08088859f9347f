"""What each node of a bound graph asks of the host, checked against the budget's limits
(:mod:`fastane.model.budget`) in :func:`~fastane.model.graph.bind`, before anything is
allocated or computed: :class:`Cost` of one node (:func:`node_cost`), the per-layer check
(:func:`check_node`) and the totals of a run (:class:`RunBudget`)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..errors import quote
from .budget import (
    MAX_EINSUM_WORK,
    MAX_KERNEL_TAPS,
    MAX_LAYER_BYTES,
    MAX_LAYER_ELEMENT_OPS,
    MAX_LAYER_WORK,
    MAX_PLAN_WORK,
    MAX_LOOP_STEPS,
    MAX_RUN_BYTES,
    MAX_RUN_WORK,
    beyond,
)
from .ops.opdef import OPS, HostCost, elements
from .ops.host import EINSUM_MULTI_FACTOR

__all__ = ["Cost", "node_cost", "check_node", "RunBudget", "nbytes"]


class Cost:
    """What one node asks of the host: ``bytes`` (inputs, outputs, temporaries), ``macs``
    (multiply-adds), ``elem_ops`` (element operations), ``steps`` (node evaluations: one,
    or a control-flow node's :attr:`HostCost.steps`) and ``taps`` (a kernel's taps,
    :attr:`HostCost.taps`; 0 for an op with none, a matmul)."""

    __slots__ = ("bytes", "macs", "elem_ops", "steps", "taps")

    def __init__(self, nbytes: int = 0, macs: int = 0, elem_ops: int = 0, steps: int = 1, taps: int = 0):
        self.bytes, self.macs, self.elem_ops, self.steps, self.taps = nbytes, macs, elem_ops, steps, taps

    @property
    def work(self) -> int:
        return self.macs + self.elem_ops


def _itemsize(t) -> int:
    dt = np.dtype(t.dtype)
    return max(dt.itemsize, 4) if dt.kind == "f" else dt.itemsize


def nbytes(t) -> int:
    """The bytes the host holds of a tensor of type ``t`` (a float element at 4 at least:
    the host computes in float32)."""
    return math.prod(t.shape) * _itemsize(t)


def node_cost(node, in_types: list, out_types: list) -> Cost:
    """The :class:`Cost` of ``node`` with inputs ``in_types`` (None: an omitted input) and
    outputs ``out_types`` (already inferred, so the node's geometry is valid).

    ``bytes`` is the inputs and outputs (4 bytes a float element), the op's own
    temporaries (its record's :class:`~fastane.model.ops.opdef.HostCost`), and an allowance
    for the per-layer report: a layout op one copy of its outputs (4 bytes an element); any
    other op the ANE's float16 operands and result and the reference's float32 copies (4
    bytes an input element, 8 an output element), and 8 more an output element for the ops
    whose host implementation makes a float64 pass (kinds "table" and "host").  Measured
    against the address space a report takes (one process, the device made first): relu 18
    bytes an element against 20 counted, sigmoid 28 against 28, a 3 x 3 convolution of 2^24
    elements 493 MiB against 512, GPT-2's language-model head at 1024 tokens 508 MiB against
    933."""
    return _cost(node, in_types, out_types)[0]


def _cost(node, in_types: list, out_types: list) -> tuple:
    """``(Cost, HostCost)`` of ``node``."""
    d = OPS.get(node.op)
    own = d.cost(node, in_types, out_types) if d is not None and d.cost is not None else HostCost()
    steps = max(own.steps, 1)
    if d is not None and d.shapes_only:  # reads its inputs' shapes, never their values
        return Cost(sum(nbytes(t) for t in out_types), steps=steps), own
    ins = [t for t in in_types if t is not None]
    n_in, n_out = elements(ins), elements(out_types)
    io = sum(nbytes(t) for t in ins) + sum(nbytes(t) for t in out_types)
    temp = own.temp
    kind = d.kind if d is not None else "host"
    if kind == "layout":
        temp += 4 * n_out
    else:
        temp += 4 * n_in + 8 * n_out + (8 * n_out if kind in ("table", "host") else 0)
    elem_ops = n_in + n_out if own.elem_ops is None else own.elem_ops
    return Cost(io + temp, own.macs, elem_ops, steps, own.taps), own


def check_node(node, in_types: list, out_types: list) -> Cost:
    """The node's :class:`Cost`, or a ModelError when it is beyond a per-layer limit."""
    cost, own = _cost(node, in_types, out_types)
    what = node.describe()
    if own.taps > MAX_KERNEL_TAPS:  # one host pass per tap, whatever the batch and output
        raise beyond(what, own.taps, "kernel taps (one host pass each)", "MAX_KERNEL_TAPS")
    if own.einsum and cost.macs > MAX_EINSUM_WORK:  # before the bytes: the cause
        unit = "multiply-adds" + (
            f" (counted {EINSUM_MULTI_FACTOR} times: more than two operands)" if len(in_types) > 2 else ""
        )
        raise beyond(what, cost.macs, unit, "MAX_EINSUM_WORK")
    if own.steps > MAX_LOOP_STEPS:
        raise beyond(what, own.steps, "node evaluations (trip count x body nodes)", "MAX_LOOP_STEPS")
    if cost.bytes > MAX_LAYER_BYTES:
        raise beyond(what, cost.bytes, "bytes of inputs, outputs and temporaries", "MAX_LAYER_BYTES")
    if own.steps:  # its bodies' nodes were checked one by one: its work counts to the run's
        return cost
    if not own.einsum and cost.macs > MAX_LAYER_WORK:
        raise beyond(what, cost.macs, "multiply-adds", "MAX_LAYER_WORK")
    if cost.elem_ops > MAX_LAYER_ELEMENT_OPS:
        raise beyond(what, cost.elem_ops, "element operations", "MAX_LAYER_ELEMENT_OPS")
    return cost


class RunBudget:
    """The totals of one bind: :func:`check_node` on each node, the work of all nodes
    (:data:`MAX_RUN_WORK`) and the bytes held at once (:data:`MAX_RUN_BYTES`), the nodes
    given in graph order (a node :attr:`~fastane.model.ops.OpDef.expand` replaces: its
    replacement, :meth:`replace`).  ``peak``: the most bytes held at once; ``steps``: the
    node evaluations of all nodes (a graph's, counted for the control-flow node whose body
    it is).  A graph without its weights (``Graph.weights`` False: it can only be planned,
    stats-only, one layer at a time) holds no tensors: the per-node limits and
    :data:`MAX_PLAN_WORK` apply to it."""

    def __init__(self, graph):
        self.name = graph.name
        self.runs = getattr(graph, "weights", True)
        self.work = 0
        self.peak = 0
        self.steps = 0
        self.held: dict = {}  # tensor -> bytes, alive now
        self.held_bytes = 0  # the sum of held's values
        self.pinned: set = set(graph.outputs)  # alive to the end
        self.readers = Counter(t for n in graph.nodes for t in n.inputs if t)  # reads to come

    def input(self, name: str, t) -> None:
        """A model input: held by the caller for the whole run."""
        self._hold(name, nbytes(t))
        self.pinned.add(name)

    def node(self, node, in_types: list, out_types: list, folded: bool) -> Cost:
        """Check ``node`` (``folded``: evaluated at bind time, its outputs kept to the end)
        before it is evaluated or run; its :class:`Cost`."""
        cost = check_node(node, in_types, out_types)
        self.work += cost.work
        self.steps += cost.steps
        # the held tensors but the node's inputs (counted in cost.bytes): a running total
        # less the inputs', not a pass over every held tensor at each node
        live = cost.bytes + self.held_bytes - sum(self.held.get(t, 0) for t in set(node.inputs))
        if self.runs and live > MAX_RUN_BYTES:
            raise beyond(
                node.describe(),
                live,
                "bytes held at once (the node's, and the tensors alive across it)",
                "MAX_RUN_BYTES",
            )
        self.peak = max(self.peak, live)
        for name, t in zip(node.outputs, out_types):
            self._hold(name, nbytes(t))
            if folded:
                self.pinned.add(name)
        self._read(node.inputs)
        return cost

    def replace(self, node, nodes: list) -> None:
        """``nodes`` stand for ``node`` (not yet checked): their reads replace its."""
        self.readers.update(t for n in nodes for t in n.inputs if t)
        self._read(node.inputs)

    def _read(self, names) -> None:
        """One read of each of ``names`` done; a tensor no node reads any more is freed."""
        for t in names:
            if t:
                self.readers[t] -= 1
                if self.readers[t] <= 0 and t not in self.pinned:
                    self.held_bytes -= self.held.pop(t, 0)

    def _hold(self, name: str, b: int) -> None:
        self.held_bytes += b - self.held.get(name, 0)
        self.held[name] = b

    def done(self) -> None:
        """A ModelError when the model's total work is beyond :data:`MAX_RUN_WORK`
        (:data:`MAX_PLAN_WORK` for a graph without its weights)."""
        name, limit = ("MAX_RUN_WORK", MAX_RUN_WORK) if self.runs else ("MAX_PLAN_WORK", MAX_PLAN_WORK)
        if self.work > limit:
            raise beyond(f"model {quote(self.name)}", self.work, "multiply-adds and element operations", name)
