"""What each node of a bound graph asks of the host, checked against the budget's limits
(:mod:`fastane.model.budget`) in :func:`~fastane.model.graph.bind`, before anything is
allocated or computed: :class:`Cost` of one node (:func:`node_cost`), the per-layer check
(:func:`check_node`) and the totals of a run (:class:`RunBudget`)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import quote
from .budget import (
    MAX_EINSUM_WORK,
    MAX_LAYER_BYTES,
    MAX_LAYER_ELEMENT_OPS,
    MAX_LAYER_WORK,
    MAX_PLAN_WORK,
    MAX_RUN_BYTES,
    MAX_RUN_WORK,
    beyond,
)
from .ops.opdef import OPS
from .ops.host import einsum_spec
from .ops.mac import conv_geometry, deconv_geometry

__all__ = ["Cost", "node_cost", "check_node", "RunBudget"]


class Cost:
    """What one node asks of the host: ``bytes`` (inputs, outputs, temporaries), ``macs``
    (multiply-adds) and ``elem_ops`` (element operations)."""

    __slots__ = ("bytes", "macs", "elem_ops")

    def __init__(self, nbytes: int = 0, macs: int = 0, elem_ops: int = 0):
        self.bytes, self.macs, self.elem_ops = nbytes, macs, elem_ops

    @property
    def work(self) -> int:
        return self.macs + self.elem_ops


def _itemsize(t) -> int:
    dt = np.dtype(t.dtype)
    return max(dt.itemsize, 4) if dt.kind == "f" else dt.itemsize


def _nbytes(t) -> int:
    return math.prod(t.shape) * _itemsize(t)


def _padded(node, x_shape, k_shape, geometry) -> tuple:
    """``(padded spatial size, out spatial size)`` of a conv or pool over ``x_shape``."""
    _, _, pads, out = geometry(node, x_shape, k_shape)
    return math.prod(n + pb + pe for n, (pb, pe) in zip(x_shape[2:], pads)), math.prod(out)


#: bytes per output element a node's host implementation adds beyond the common allowance
#: (:func:`node_cost`): the float64 and object-array passes of the erf-based ops.  Peaks
#: traced with tracemalloc on 2^22 float16 elements (December 2026): gelu 92, erf 76,
#: celu 36, mish 28 bytes an element; relu 16, sigmoid and rsqrt 20, softmax 12.
_HEAVY = {"gelu": 80, "erf": 80, "celu": 24, "mish": 16}


def node_cost(node, in_types: list, out_types: list) -> Cost:
    """The :class:`Cost` of ``node`` with inputs ``in_types`` (None: an omitted input) and
    outputs ``out_types`` (already inferred, so the node's geometry is valid).

    ``bytes`` is the inputs and outputs (4 bytes a float element), the op's own
    temporaries, and an allowance for the per-layer report: a layout op one copy of its
    outputs (4 bytes an element); any other op the ANE's float16 operands and result and
    the reference's float32 copies (4 bytes an input element, 8 an output element), and 8
    more an output element for the ops whose host implementation makes a float64 pass
    (kinds "table" and "host").  Measured against the address space a report takes (one
    process, the device made first): relu 18 bytes an element against 20 counted, sigmoid
    28 against 28, a 3 x 3 convolution of 2^24 elements 493 MiB against 512, GPT-2's
    language-model head at 1024 tokens 508 MiB against 933."""
    if node.op == "shape":  # reads its input's shape, never its values
        return Cost(8 * sum(math.prod(t.shape) for t in out_types))
    ins = [t for t in in_types if t is not None]
    n_in = sum(math.prod(t.shape) for t in ins)
    n_out = sum(math.prod(t.shape) for t in out_types)
    io = sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in out_types)
    op = node.op
    temp, macs, elem_ops = 0, 0, n_in + n_out
    if op == "conv":
        x, w = in_types[0], in_types[1]
        padded, out = _padded(node, x.shape, w.shape[2:], conv_geometry)
        n, c = x.shape[:2]
        temp = (n * c * padded + n * c * out + n_out) * 4  # padded input, a window's patch, its product
        macs, elem_ops = n_out * math.prod(w.shape[1:]), 0
    elif op == "conv_transpose":
        x, w = in_types[0], in_types[1]
        s, d, _, opad, _ = deconv_geometry(node, x.shape, w.shape)
        full = math.prod(
            st * (m - 1) + o + (kk - 1) * dd + 1
            for m, st, o, kk, dd in zip(x.shape[2:], s, opad, w.shape[2:], d)
        )
        n, co = x.shape[0], out_types[0].shape[1]
        # the full-size result, its padded copy, one kernel tap's contribution
        temp = (2 * n * co * full + n * co * math.prod(x.shape[2:])) * 4
        macs, elem_ops = math.prod(x.shape) * math.prod(w.shape[1:]), 0
    elif op in ("max_pool", "avg_pool"):
        x = in_types[0]
        k = tuple(int(v) for v in node.attrs["kernel"])
        padded, out = _padded(node, x.shape, k, conv_geometry)
        temp = (math.prod(x.shape[:2]) * padded + 2 * padded + out) * 4  # padded input, window counts
        elem_ops = n_out * math.prod(k)
    elif op == "matmul":
        macs, elem_ops = n_out * in_types[0].shape[-1], 0
    elif op == "gemm":
        a = in_types[0].shape
        temp = 4 * n_out  # alpha * (a @ b)
        macs, elem_ops = n_out * (a[0] if node.attrs.get("trans_a") else a[-1]), 0
    elif op == "einsum":
        temp = 8 * n_in  # the operands widened to float64
        macs, elem_ops = einsum_spec(node, [t.shape for t in ins])[2], 0
    elif op == "resize":
        temp = 8 * (n_in + 2 * n_out)  # float64 passes, one axis at a time
        elem_ops = 4 * len(out_types[0].shape) * n_out + n_in
    kind = OPS[op].kind if op in OPS else "host"
    if kind == "layout":
        temp += 4 * n_out
    else:
        temp += 4 * n_in + 8 * n_out + (8 * n_out if kind in ("table", "host") else 0)
    if op in _HEAVY and not (op == "gelu" and node.attrs.get("approximate") == "tanh"):
        temp += _HEAVY[op] * n_out
    return Cost(io + temp, macs, elem_ops)


def check_node(node, in_types: list, out_types: list) -> Cost:
    """The node's :class:`Cost`, or a ModelError when it is beyond a per-layer limit."""
    cost = node_cost(node, in_types, out_types)
    what = node.describe()
    if cost.bytes > MAX_LAYER_BYTES:
        raise beyond(what, cost.bytes, "bytes of inputs, outputs and temporaries", "MAX_LAYER_BYTES")
    if node.op == "einsum":
        if cost.macs > MAX_EINSUM_WORK:
            raise beyond(what, cost.macs, "multiply-adds", "MAX_EINSUM_WORK")
    elif cost.macs > MAX_LAYER_WORK:
        raise beyond(what, cost.macs, "multiply-adds", "MAX_LAYER_WORK")
    if cost.elem_ops > MAX_LAYER_ELEMENT_OPS:
        raise beyond(what, cost.elem_ops, "element operations", "MAX_LAYER_ELEMENT_OPS")
    return cost


class RunBudget:
    """The totals of one bind: :func:`check_node` on each node, the work of all nodes
    (:data:`MAX_RUN_WORK`) and the bytes held at once (:data:`MAX_RUN_BYTES`), the nodes
    given in graph order.  A graph without its weights (``Graph.weights`` False: it can only
    be planned, stats-only, one layer at a time) holds no tensors: the per-node limits and
    :data:`MAX_PLAN_WORK` apply to it."""

    def __init__(self, graph):
        self.name = graph.name
        self.runs = getattr(graph, "weights", True)
        self.work = 0
        self.held: dict = {}  # tensor -> bytes, alive now
        self.pinned: set = set(graph.outputs)  # alive to the end
        self.last = {t: i for i, n in enumerate(graph.nodes) for t in n.inputs if t}
        self.i = 0

    def input(self, name: str, t) -> None:
        """A model input: held by the caller for the whole run."""
        self.held[name] = _nbytes(t)
        self.pinned.add(name)

    def node(self, node, in_types: list, out_types: list, folded: bool) -> Cost:
        """Check ``node`` (``folded``: evaluated at bind time, its outputs kept to the end)
        before it is evaluated or run; its :class:`Cost`."""
        cost = check_node(node, in_types, out_types)
        self.work += cost.work
        ins = set(node.inputs)
        live = cost.bytes + sum(b for t, b in self.held.items() if t not in ins)
        if self.runs and live > MAX_RUN_BYTES:
            raise beyond(
                node.describe(),
                live,
                "bytes held at once (the node's, and the tensors alive across it)",
                "MAX_RUN_BYTES",
            )
        for name, t in zip(node.outputs, out_types):
            self.held[name] = _nbytes(t)
            if folded:
                self.pinned.add(name)
        for t in ins:
            if self.last.get(t) == self.i and t not in self.pinned:
                self.held.pop(t, None)
        self.i += 1
        return cost

    def done(self) -> None:
        """A ModelError when the model's total work is beyond :data:`MAX_RUN_WORK`
        (:data:`MAX_PLAN_WORK` for a graph without its weights)."""
        name, limit = ("MAX_RUN_WORK", MAX_RUN_WORK) if self.runs else ("MAX_PLAN_WORK", MAX_PLAN_WORK)
        if self.work > limit:
            raise beyond(f"model {quote(self.name)}", self.work, "multiply-adds and element operations", name)
