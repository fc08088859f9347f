"""Control flow: the ops whose attributes hold subgraphs (ONNX ``If``, ``Loop``, ``Scan``).

A subgraph is a :class:`Body`: a :class:`~fastane.model.graph.Graph` of its own inputs
(the loop's iteration number and carried values, the scan's slices) and of the tensors
of the enclosing graphs it reads, which the importer makes inputs of the node too, so
that binding, liveness and the budget see them.  Its local names are prefixed with its
scope (``node/then/``): an inlined branch's names cannot meet the parent's.

At bind (:attr:`~fastane.model.ops.OpDef.expand`):

* an ``if`` whose condition is constant (folded, or computed from the shapes) is
  replaced by its taken branch's nodes, renamed into the parent's graph (its outer
  tensors the node's inputs, its outputs the node's); the other branch is never bound;
* otherwise the node is replaced by a copy holding its bodies bound for its inputs
  (``attrs["bound"]``), placed on the host (control flow runs on the CPU, as Core ML
  places it) and run there with the host implementations (:func:`~fastane.model.graph.evaluate`);
  both branches of an ``if`` must give the same types; a loop's carried values keep
  theirs across iterations.

The cost of a control-flow node is its bodies' (their work times the trip count, their
node evaluations against :data:`~fastane.model.budget.MAX_LOOP_STEPS`); a ``loop`` whose
trip count is not constant at bind is counted at the most iterations that limit leaves
and stops with a ModelError beyond them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError, ModelNotImplementedError, quote
from .budget import MAX_LOOP_STEPS, beyond
from .cost import nbytes
from .graph import Bound, Graph, Node, bind, evaluate
from .ops.opdef import HostCost, OnnxName, check_axis, need_input, register_op
from .tensor import TensorType

__all__ = ["Body", "PLACEHOLDER"]

_I64, _BOOL = np.dtype(np.int64), np.dtype(np.bool_)

#: the declared type of a body's inputs until it is bound (their types are the node's)
PLACEHOLDER = TensorType(np.dtype(np.float32), ())


@dataclass(eq=False)
class Body:
    """A subgraph of a control-flow node: ``graph`` (its inputs: its ``n_formal`` own, then
    the enclosing graphs' tensors it reads), ``outer`` (for each of those, its position in
    the node's inputs); ``error``: the ModelError importing it raised, raised when it is
    bound (a branch never taken need not import)."""

    graph: Graph | None
    n_formal: int
    outer: tuple = ()
    error: ModelError | None = None

    def bind(self, node, formal: list, types: list, consts: list) -> Bound:
        """The body bound for the node's input ``types`` and ``consts``, its own inputs
        given as ``formal`` ``(type, constant or None)`` pairs."""
        if self.error is not None:
            raise type(self.error)(str(self.error))
        g = self.graph
        given = list(formal) + [(types[i], consts[i]) for i in self.outer]
        names = list(g.inputs)
        if len(given) != len(names):
            raise ModelError(
                f"{node.describe()}: its body {quote(g.name)} takes {len(names) - len(self.outer)} inputs, given {len(formal)}"
            )
        inputs = {n: t for n, (t, c) in zip(names, given) if c is None}
        known = dict(g.consts)
        known.update({n: np.asarray(c) for n, (t, c) in zip(names, given) if c is not None})
        return bind(Graph(g.name, inputs, list(g.outputs), g.nodes, known, g.origin), inputs)

    def feeds(self, bound: Bound, formal: list, args: list) -> dict:
        """The arrays of ``bound``'s inputs: ``formal`` (its own), then the node's ``args``."""
        names = list(self.graph.inputs)
        values = list(formal) + [args[i] for i in self.outer]
        return {n: v for n, v in zip(names, values) if n in bound.graph.inputs}


def run_body(body: Body, bound: Bound, formal: list, args: list) -> list:
    """The outputs of ``bound`` (``body`` bound) on the host, in order."""
    outs = evaluate(bound, body.feeds(bound, formal, args))
    return [outs[n] for n in bound.graph.outputs]


def _body_cost(bound: Bound, trips: int = 1) -> HostCost:
    """A control-flow node's cost: ``trips`` times its body's work and node evaluations,
    the body's peak bytes beyond its inputs."""
    b = bound.budget
    held = sum(nbytes(t) for t in bound.input_types.values())
    return HostCost(max(b.peak - held, 0), 0, trips * b.work, steps=max(trips * b.steps, 1))


def _same(t, u) -> bool:
    return np.dtype(t.dtype) == np.dtype(u.dtype) and tuple(t.shape) == tuple(u.shape)


def _specialized(node, **bound) -> tuple:
    """The expansion of ``node`` to its copy holding ``bound`` (its bodies bound)."""
    return [
        Node(node.op, node.name, list(node.inputs), list(node.outputs), {**node.attrs, **bound}, node.source)
    ], {}


def _scalar(consts, i, node, what, dtype_kind):
    """The one value of constant input ``i`` (None: omitted or not constant)."""
    if i >= len(node.inputs) or not node.inputs[i] or consts[i] is None:
        return None
    v = np.asarray(consts[i])
    if v.size != 1 or v.dtype.kind not in dtype_kind:
        raise ModelError(f"{node.describe()}: {what} must be one value, got {v.dtype.name}{list(v.shape)}")
    return v.reshape(-1)[0]


def _need_one(types, i, node, what, kinds):
    t = need_input(types, i, node, what)
    if math.prod(t.shape) != 1 or np.dtype(t.dtype).kind not in kinds:
        raise ModelError(f"{node.describe()}: {what} (input {i}) must be one value, got {t}")
    return t


def _parse(keys: dict, lazy: bool = False, **attrs):
    """The ONNX parse of a control-flow op: its graph attributes ``keys`` (ONNX name ->
    fastane name) imported as bodies (their node's inputs: its own, then the outer
    tensors they read; ``lazy``: a body that fails to import raises when it is bound),
    its other attributes ``attrs`` (name -> default)."""

    def parse(c, a, ins):
        bodies, inputs = c.bodies({k: a[o] for o, k in keys.items()}, lazy)
        own = {k: a.get(k, v) for k, v in attrs.items()}
        return c.mk({**own, **bodies, "n_in": len(ins)}, inputs, n_out=len(c.outs), keep=True)

    return parse


# ------------------------------------------------------------------------ if
def _if_expand(node, types, consts):
    if "bound" in node.attrs:
        return None
    _need_one(types, 0, node, "the condition", "b")
    cond = _scalar(consts, 0, node, "the condition", "b")
    if cond is not None:
        return _inline(node, node.attrs["then" if cond else "else"], consts)
    return _specialized(
        node, bound=tuple(node.attrs[k].bind(node, [], types, consts) for k in ("then", "else"))
    )


def _inline(node, body: Body, consts) -> tuple:
    """The nodes and constants of ``body`` renamed into the node's graph: its outer tensors
    the node's inputs, its outputs the node's (an output it does not compute, a copy)."""
    if body.error is not None:
        raise type(body.error)(str(body.error))
    g = body.graph
    _count(node, g)
    sub = {n: node.inputs[i] for n, i in zip(list(g.inputs)[body.n_formal :], body.outer)}
    made = {o for n in g.nodes for o in n.outputs}
    new_consts = {n: v for n, v in g.consts.items() if n not in sub}
    copies = []
    for y, o in zip(node.outputs, g.outputs):
        if o in made and o not in sub:
            sub[o] = y
        elif o in g.consts:
            new_consts[y] = g.consts[o]
        else:
            copies.append(Node("identity", f"{node.name}/{y}", [sub.get(o, o)], [y], {}, "Identity"))
    nodes = [
        Node(
            n.op,
            n.name,
            [sub.get(t, t) for t in n.inputs],
            [sub.get(t, t) for t in n.outputs],
            n.attrs,
            n.source,
        )
        for n in g.nodes
    ]
    return nodes + copies, new_consts


def _count(node, g) -> None:
    if len(g.outputs) != len(node.outputs):
        raise ModelError(
            f"{node.describe()}: has {len(node.outputs)} outputs, its body {quote(g.name)} gives {len(g.outputs)}"
        )


def _if_infer(node, types, consts):
    then, other = node.attrs["bound"]
    for b in (then, other):
        _count(node, b.graph)
    outs = []
    for i, (o1, o2) in enumerate(zip(then.graph.outputs, other.graph.outputs)):
        t1, t2 = then.types[o1], other.types[o2]
        if not _same(t1, t2):
            raise ModelNotImplementedError(
                f"{node.describe()}: output {i} ({quote(node.outputs[i])}) is {t1} in the then branch and "
                f"{t2} in the else branch; fastane binds static types, so both branches' outputs must "
                f"have the same types when the condition is not constant at bind"
            )
        outs.append(t1)
    return outs


def _if_cost(node, in_types, out_types):
    costs = [_body_cost(b) for b in node.attrs["bound"]]
    return HostCost(
        max(c.temp for c in costs), 0, max(c.elem_ops for c in costs), steps=max(c.steps for c in costs)
    )


@register_op(
    "if",
    _if_infer,
    ane="control",
    onnx=[
        OnnxName(
            "If",
            _parse({"then_branch": "then", "else_branch": "else"}, lazy=True),
            doc="a constant condition inlines its branch",
        )
    ],
    cost=_if_cost,
    expand=_if_expand,
)
def _if(node, cond, *args):
    i = 0 if bool(np.asarray(cond).reshape(-1)[0]) else 1
    body, bound = node.attrs[("then", "else")[i]], node.attrs["bound"][i]
    return run_body(body, bound, [], [cond, *args])


# ------------------------------------------------------------------------ loop
def _loop_expand(node, types, consts):
    if "bound" in node.attrs:
        return None
    body, n_in = node.attrs["body"], node.attrs["n_in"]
    has_m, has_cond = bool(node.inputs[0]), bool(node.inputs[1])
    if has_m:
        _need_one(types, 0, node, "the trip count M", "iu")
    if has_cond:
        _need_one(types, 1, node, "the condition", "b")
    m = _scalar(consts, 0, node, "the trip count M", "iu")
    # an omitted condition is true, and the body's is ignored (ONNX: a for loop)
    cond = _scalar(consts, 1, node, "the condition", "b") if has_cond else True
    carried = [need_input(types, i, node, "loop-carried value") for i in range(2, n_in)]
    head = [(TensorType(_I64, ()), None)]
    rest = [(t, None) for t in carried]
    bound = body.bind(node, head + [(TensorType(_BOOL, ()), np.array(True))] + rest, types, consts)
    # the condition stays true when it starts true and the body's folds to true with it
    fixed = not has_cond or (cond is not None and bool(cond) and _const_true(bound, bound.graph.outputs[0]))
    if not fixed:  # it can change: the body bound again with it as an input
        bound = body.bind(node, head + [(TensorType(_BOOL, ()), None)] + rest, types, consts)
    outs, k = bound.graph.outputs, len(carried)
    if len(outs) != 1 + len(node.outputs) or len(node.outputs) < k:
        raise ModelError(
            f"{node.describe()}: its body gives {len(outs)} outputs, the loop has {k} carried "
            f"values and {len(node.outputs)} outputs"
        )
    for i, (t, o) in enumerate(zip(carried, outs[1 : 1 + k])):
        if not _same(t, bound.types[o]):
            raise ModelNotImplementedError(
                f"{node.describe()}: loop-carried value {i} enters as {t} and leaves the body as "
                f"{bound.types[o]}; fastane binds static types, which must not change across iterations"
            )
    if has_cond and cond is not None and not bool(cond):
        trips = 0
    elif fixed and not has_m:
        raise ModelError(
            f"{node.describe()}: has no trip count and its condition stays true: it would run forever"
        )
    else:
        trips = max(int(m), 0) if fixed and m is not None else None
    if trips is None and len(node.outputs) > k:
        raise ModelNotImplementedError(
            f"{node.describe()}: its scan outputs stack one value per iteration, and its trip count "
            f"is not constant at bind ({'M is not a constant' if fixed else 'its condition can stop it'}); "
            f"fastane binds static shapes"
        )
    most = MAX_LOOP_STEPS // max(bound.budget.steps, 1)
    count = trips if trips is not None else min(max(int(m), 0), most) if m is not None else most
    return _specialized(node, bound=bound, trips=trips, most=count)


def _const_true(bound: Bound, name: str) -> bool:
    v = bound.consts.get(name)
    return v is not None and np.asarray(v).size == 1 and bool(np.asarray(v).reshape(-1)[0])


def _loop_infer(node, types, consts):
    bound, trips, k = node.attrs["bound"], node.attrs["trips"], node.attrs["n_in"] - 2
    outs = bound.graph.outputs
    carried = [bound.types[o] for o in outs[1 : 1 + k]]
    scans = [bound.types[o] for o in outs[1 + k : 1 + len(node.outputs)]]
    return carried + [TensorType(t.dtype, (trips,) + tuple(t.shape)) for t in scans]


def _loop_cost(node, in_types, out_types):
    c = _body_cost(node.attrs["bound"], node.attrs["most"])
    k = node.attrs["n_in"] - 2
    stacked = sum(nbytes(t) for t in out_types[k:])
    return HostCost(c.temp + stacked, 0, c.elem_ops, steps=c.steps)


@register_op(
    "loop",
    _loop_infer,
    ane="control",
    onnx=[OnnxName("Loop", _parse({"body": "body"}))],
    cost=_loop_cost,
    expand=_loop_expand,
)
def _loop(node, m, cond, *args):
    body, bound, k = node.attrs["body"], node.attrs["bound"], node.attrs["n_in"] - 2
    most, outs = node.attrs["most"], bound.graph.outputs
    n = None if m is None else int(np.asarray(m).reshape(-1)[0])
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    vals, scans, i = list(args[:k]), [[] for _ in outs[1 + k :]], 0
    while go and (n is None or i < n):
        if i >= most or (cond is None and n > most):  # a trip count not constant at bind
            runs = n if cond is None else i + 1
            raise beyond(
                f"{node.describe()}: {'trip count' if cond is None else 'iteration'} {runs}",
                runs * max(bound.budget.steps, 1),
                "node evaluations (iterations x body nodes; the trip count is not constant at bind)",
                "MAX_LOOP_STEPS",
            )
        got = run_body(body, bound, [np.array(i, _I64), np.array(go), *vals], [m, cond, *args])
        if cond is not None:
            go = bool(np.asarray(got[0]).reshape(-1)[0])
        vals = got[1 : 1 + k]
        for s, v in zip(scans, got[1 + k :]):
            s.append(v)
        i += 1
    stacked = [
        np.stack(s) if s else np.zeros((0,) + tuple(bound.types[o].shape), bound.types[o].dtype)
        for s, o in zip(scans, outs[1 + k :])
    ]
    return vals + stacked


# ------------------------------------------------------------------------ scan
def _scan_geometry(node, types):
    """``(states, scan inputs' types, their axes, the trip count)`` of a scan node."""
    n_in, m = node.attrs["n_in"], int(node.attrs["num_scan_inputs"])
    if not 0 < m <= n_in:
        raise ModelError(f"{node.describe()}: num_scan_inputs = {m} for {n_in} inputs")
    ts = [need_input(types, i, node) for i in range(n_in)]
    states, xs = ts[: n_in - m], ts[n_in - m :]
    axes = list(node.attrs.get("scan_input_axes") or [0] * m)
    if len(axes) != m:
        raise ModelError(f"{node.describe()}: {len(axes)} scan_input_axes for {m} scan inputs")
    axes = [check_axis(a, len(t.shape), node, "scan input axis") for a, t in zip(axes, xs)]
    lengths = {t.shape[a] for t, a in zip(xs, axes)}
    if len(lengths) != 1:
        raise ModelError(f"{node.describe()}: its scan inputs' lengths differ ({sorted(lengths)})")
    return states, xs, axes, lengths.pop()


def _scan_expand(node, types, consts):
    if "bound" in node.attrs:
        return None
    states, xs, axes, trips = _scan_geometry(node, types)
    formal = [(t, None) for t in states]
    formal += [(TensorType(t.dtype, t.shape[:a] + t.shape[a + 1 :]), None) for t, a in zip(xs, axes)]
    bound = node.attrs["body"].bind(node, formal, types, consts)
    outs, n = bound.graph.outputs, len(states)
    if len(outs) != len(node.outputs):
        raise ModelError(f"{node.describe()}: has {len(node.outputs)} outputs, its body gives {len(outs)}")
    for i, (t, o) in enumerate(zip(states, outs)):
        if not _same(t, bound.types[o]):
            raise ModelNotImplementedError(
                f"{node.describe()}: state {i} enters as {t} and leaves the body as {bound.types[o]}; "
                f"fastane binds static types, which must not change across iterations"
            )
    k = len(outs) - n
    out_axes = list(node.attrs.get("scan_output_axes") or [0] * k)
    if len(out_axes) != k:
        raise ModelError(f"{node.describe()}: {len(out_axes)} scan_output_axes for {k} scan outputs")
    out_axes = [
        check_axis(a, len(bound.types[o].shape) + 1, node, "scan output axis")
        for a, o in zip(out_axes, outs[n:])
    ]
    return _specialized(node, bound=bound, trips=trips, axes=tuple(axes), out_axes=tuple(out_axes))


def _scan_infer(node, types, consts):
    bound, n = node.attrs["bound"], node.attrs["n_in"] - int(node.attrs["num_scan_inputs"])
    outs = bound.graph.outputs
    res = [bound.types[o] for o in outs[:n]]
    for o, a in zip(outs[n:], node.attrs["out_axes"]):
        t = bound.types[o]
        res.append(TensorType(t.dtype, tuple(t.shape[:a]) + (node.attrs["trips"],) + tuple(t.shape[a:])))
    return res


def _scan_cost(node, in_types, out_types):
    c = _body_cost(node.attrs["bound"], node.attrs["trips"])
    n = node.attrs["n_in"] - int(node.attrs["num_scan_inputs"])
    stacked = sum(nbytes(t) for t in out_types[n:])
    return HostCost(c.temp + stacked, 0, c.elem_ops, steps=c.steps)


def _directions(node, key, count):
    d = list(node.attrs.get(key) or [0] * count)
    if len(d) != count:
        raise ModelError(f"{node.describe()}: {len(d)} {key} for {count}")
    return [bool(v) for v in d]


@register_op(
    "scan",
    _scan_infer,
    ane="control",
    onnx=[
        OnnxName(
            "Scan",
            _parse(
                {"body": "body"},
                num_scan_inputs=0,
                scan_input_axes=None,
                scan_input_directions=None,
                scan_output_axes=None,
                scan_output_directions=None,
            ),
            since=9,
            doc="opset 9+",
        )
    ],
    cost=_scan_cost,
    expand=_scan_expand,
)
def _scan(node, *args):
    body, bound, trips = node.attrs["body"], node.attrs["bound"], node.attrs["trips"]
    n_in, m = node.attrs["n_in"], int(node.attrs["num_scan_inputs"])
    n = n_in - m
    outs = bound.graph.outputs
    back_in = _directions(node, "scan_input_directions", m)
    back_out = _directions(node, "scan_output_directions", len(outs) - n)
    states, xs = list(args[:n]), args[n:n_in]
    scans = [[] for _ in outs[n:]]
    for i in range(trips):
        slices = [
            np.take(x, trips - 1 - i if r else i, a) for x, a, r in zip(xs, node.attrs["axes"], back_in)
        ]
        got = run_body(body, bound, [*states, *slices], list(args))
        states = got[:n]
        for s, v in zip(scans, got[n:]):
            s.append(v)
    res = list(states)
    for s, o, a, r in zip(scans, outs[n:], node.attrs["out_axes"], back_out):
        t = bound.types[o]
        if not s:
            res.append(np.zeros(tuple(t.shape[:a]) + (0,) + tuple(t.shape[a:]), t.dtype))
        else:
            res.append(np.stack(s[::-1] if r else s, axis=a))
    return res
