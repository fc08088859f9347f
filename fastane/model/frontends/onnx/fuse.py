"""GELU subgraphs fused into one ``gelu`` node at ONNX import.

ONNX has a ``Gelu`` op from opset 20 only; exporters writing an older opset (PyTorch's)
spell it out.  Core ML's converter fuses both spellings into one ``gelu`` op (coremltools'
MIL passes ``fuse_gelu_exact`` and ``fuse_gelu_tanh_approximation``,
apple/coremltools@ebf20ce11aa3034d20d362f97d20b3e42ffff279
coremltools/converters/mil/mil/passes/defs/optimize_activation.py), and so does
:func:`fuse_gelu`:

* the exact form ``x * 0.5 * (1 + erf(x / sqrt(2)))``: ``Div`` by sqrt(2) or ``Mul`` by
  1/sqrt(2), ``Erf``, ``Add`` 1, then ``Mul`` by 0.5 and by ``x`` in either order, or
  ``(0.5 * x) * (...)``: ``gelu`` (``approximate="none"``, coremltools' ``mode=EXACT``);
* the tanh form ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``, the cube a
  ``Pow`` by 3 or ``x * x * x``, the same three endings: ``gelu`` with
  ``approximate="tanh"`` (coremltools' ``mode=TANH_APPROXIMATION``; fastane's Core ML
  front end imports that mode so too).

A constant matches as coremltools' ``_check_var_scalar_value`` does
(apple/coremltools@c142b711957508002461a190b6d641eb1700b1a6
coremltools/converters/mil/mil/passes/helper.py): one value within ``1e-3`` of the
pattern's (:data:`TOL`).  Every intermediate must be read by the pattern's next node
only, and not be an output of the graph: an intermediate read elsewhere leaves the
nodes as they are.  The ``gelu`` node's reference (:mod:`fastane.model.ops.core`) is the
subgraph's value within float32 rounding when the constants are the float32 values
exporters write.
"""

from __future__ import annotations

import math

from ...graph import Node

__all__ = ["fuse_gelu", "TOL"]

#: coremltools' tolerance on a pattern's constants (``abs(value - expected) < TOL``)
TOL = 1e-3
_SQRT2 = math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_KAPPA = 0.044715


class _Graph:
    """The nodes being fused: who makes each tensor, who reads it, the constants."""

    def __init__(self, nodes, consts, outputs):
        self.consts = consts
        self.maker = {o: n for n in nodes for o in n.outputs}
        self.readers: dict = {}
        for n in nodes:
            for t in n.inputs:
                if t:
                    self.readers.setdefault(t, []).append(n)
        self.outputs = set(outputs)

    def is_const(self, t, value) -> bool:
        """Whether ``t`` is a float constant of one value within :data:`TOL` of ``value``."""
        v = self.consts.get(t)
        return (
            v is not None
            and v.size == 1
            and v.dtype.kind == "f"
            and abs(float(v.reshape(-1)[0]) - value) < TOL
        )

    def only(self, t):
        """The one node reading ``t`` (an intermediate: not a graph output), else None."""
        r = self.readers.get(t, [])
        return r[0] if len(r) == 1 and t not in self.outputs else None

    def made(self, t, op):
        """The node of op ``op`` making ``t`` whose output only the pattern reads, else None."""
        n = self.maker.get(t)
        return n if n is not None and n.op == op and len(n.inputs) == 2 and self.only(t) is not None else None


def _other(node, t):
    """The input of the binary ``node`` that is not ``t`` (None if ``t`` is not one)."""
    a, b = node.inputs
    return b if a == t else a if b == t else None


def _by_const(g, node, value):
    """The input of the binary ``node`` that the constant ``value`` multiplies (or adds to)."""
    a, b = node.inputs
    return a if g.is_const(b, value) else b if g.is_const(a, value) else None


def _tail(g, x, inner):
    """The ending ``0.5 * x * inner`` of both forms, from ``inner`` (the ``1 + erf``/``1 +
    tanh`` tensor): ``[nodes]`` (the last one makes the result), else None."""
    m = g.only(inner)
    if m is None or m.op != "mul":
        return None
    y = _other(m, inner)
    if g.is_const(y, 0.5):  # (inner * 0.5) * x
        m2 = g.only(m.outputs[0])
        return [m, m2] if m2 is not None and m2.op == "mul" and _other(m2, m.outputs[0]) == x else None
    if y == x:  # (inner * x) * 0.5
        m2 = g.only(m.outputs[0])
        return (
            [m, m2]
            if m2 is not None and m2.op == "mul" and g.is_const(_other(m2, m.outputs[0]), 0.5)
            else None
        )
    h = g.made(y, "mul")  # (0.5 * x) * inner
    return [h, m] if h is not None and _by_const(g, h, 0.5) == x else None


def _exact(g, erf):
    """``(x, nodes)`` when ``erf`` is the Erf of the exact form, else None."""
    d = g.made(erf.inputs[0], "div")
    if d is not None and g.is_const(d.inputs[1], _SQRT2):
        x = d.inputs[0]
    else:
        d = g.made(erf.inputs[0], "mul")
        x = d and _by_const(g, d, 1 / _SQRT2)
    if x is None:
        return None
    return _ending(g, x, [d, erf], erf.outputs[0])


def _tanh(g, tanh):
    """``(x, nodes)`` when ``tanh`` is the Tanh of the tanh form, else None."""
    s = g.made(tanh.inputs[0], "mul")
    inner = s and _by_const(g, s, _SQRT_2_PI)
    a = inner and g.made(inner, "add")
    if a is None:
        return None
    for x, p in (a.inputs, a.inputs[::-1]):
        k = g.made(p, "mul")
        cube = k and _by_const(g, k, _KAPPA)
        found = cube and _cube(g, x, cube)
        if found:
            return _ending(g, x, [*found, k, a, s, tanh], tanh.outputs[0])
    return None


def _cube(g, x, t):
    """The nodes making ``t = x ** 3`` (``Pow`` by 3, ``(x * x) * x`` or ``x * (x * x)``)."""
    p = g.made(t, "pow")
    if p is not None:
        return [p] if p.inputs[0] == x and g.is_const(p.inputs[1], 3.0) else None
    m = g.made(t, "mul")
    sq = m and _other(m, x)
    q = sq and g.made(sq, "mul")
    return [q, m] if q is not None and q.inputs == [x, x] else None


def _ending(g, x, head, t):
    """``(x, nodes)``: ``head`` then ``+ 1`` on ``t`` and the ending (:func:`_tail`)."""
    a = g.only(t)
    if a is None or a.op != "add" or not g.is_const(_other(a, t), 1.0):
        return None
    tail = _tail(g, x, a.outputs[0])
    return (x, [*head, a, *tail]) if tail else None


def fuse_gelu(nodes: list, consts: dict, outputs) -> list:
    """``nodes`` with each GELU subgraph (see the module docs) replaced by one ``gelu``
    node where its last node was: its name and output that node's, its ``source`` the
    ONNX ops it replaces."""
    g = _Graph(nodes, consts, outputs)
    fused: dict = {}  # id of a pattern's last node -> the gelu node
    gone: set = set()
    for n in nodes:
        if id(n) in gone:
            continue
        got = _exact(g, n) if n.op == "erf" else _tanh(g, n) if n.op == "tanh" else None
        if got is None or any(id(m) in gone for m in got[1]):
            continue
        x, pattern = got
        last = pattern[-1]
        approx = "none" if n.op == "erf" else "tanh"
        ops = "+".join(m.source or m.op for m in pattern)
        fused[id(last)] = Node(
            "gelu", last.name, [x], list(last.outputs), {"approximate": approx}, f"Gelu({ops})"
        )
        gone.update(id(m) for m in pattern)
    return [fused.get(id(n), n) for n in nodes if id(n) not in gone or id(n) in fused]
