"""Layout layers as the ANE's data movement: concat, slice, split, constant pad and the
transposes that keep the last axis run as NE pass-through tasks whose TileDMA offsets and
strides do the moving (:mod:`fastane.lower.moves`, built as Apple's ``concat.hwx``).

The placer records every layout node as a host layout layer first; :func:`promote` then puts
on the ANE each one :data:`MOVES` can lower whose values are fp16 on both sides of the move,
so that moving it there changes no value (the NE's identity stage returns every fp16 value,
a NaN as 0x7e00):

* **from the ANE**: every float input is the result of an ANE layer (fp16 already), or a
  constant fp16 holds exactly; or
* **to the ANE**: every consumer of its outputs is an ANE layer other than the INT8 lanes
  (which rounds its operands to fp16 anyway, the same rounding before the move as after it) or a model output (which
  crosses to the caller as fp16).

A layout layer between two host layers stays on the host (moving it to the ANE would round
a float32 tensor to fp16 on the way), as do integer tensors (shape arithmetic, indices), the
ops :data:`MOVES` does not hold (reshape, gather, expand ...: :data:`KEPT`), and moves the
registers cannot express, each with its reason.  The crop path of a slice on the chip's
generation (:mod:`fastane.model.run.movement`) applies to the result either way
(:meth:`fastane.model.run.model.Model.__call__`).
"""

from __future__ import annotations

import numpy as np

from ...lower import moves as _moves
from ..graph import Node
from ..ops.index import split_sizes
from ..ops.layout import pad_widths, slice_windows, transpose_perm
from ..ops.opdef import check_axis

__all__ = ["MOVES", "KEPT", "MOVED", "HOST_SIDES", "IDENTITY", "move_of", "promote"]

#: why a layout layer whose values are float32 on both sides stays on the host
HOST_SIDES = (
    "moved on the host: its inputs come from the host in float32 and a host layer reads it "
    "(on the ANE the move would round them to fp16)"
)
#: the reason of a layout layer the ANE moves
MOVED = "data movement: NE pass-through tasks whose TileDMA offsets and strides move it (as concat.hwx)"
#: why a reshape-like op stays on the host (fastane's reason, per op)
_RESHAPE = (
    "a reshape moves no element of a dense tensor: fastane plans no layout across layers "
    "(each ANE program reads its input from DRAM in its own layout), so it runs on the host, "
    "which changes no value"
)
KEPT = {op: _RESHAPE for op in ("reshape", "flatten", "squeeze", "unsqueeze")}
#: why a move that gives back its input stays a host view
IDENTITY = (
    "moves no element (its output is its input: zero pads, the whole tensor, the identity "
    "order): a view; coremltools' noop_elimination drops such a pad, slice, split or transpose "
    "from a Core ML program"
)
#: why an integer tensor's move stays on the host
INTEGER = "integer tensor: the ANE moves fp16 values; moved on the host"


def _shape(bound, t) -> tuple:
    return tuple(bound.types[t].shape)


def _consts(node: Node, bound) -> list:
    return [bound.consts.get(t) if t else None for t in node.inputs]


def _concat(node: Node, bound):
    shapes = [_shape(bound, t) for t in node.inputs]
    return _moves.concat(shapes, check_axis(node.attrs.get("axis", 0), len(shapes[0]), node))


def _slice(node: Node, bound):
    shape = _shape(bound, node.inputs[0])
    args = (_consts(node, bound) + [None] * 5)[1:5]
    return _moves.slice_(shape, slice_windows(node, shape, *args))


def _split(node: Node, bound):
    shape = _shape(bound, node.inputs[0])
    sizes = bound.consts.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    axis, sizes = split_sizes(node, shape, sizes)
    whole = [(0, d, 1) for d in shape]
    windows, at = [], 0
    for s in sizes:
        windows.append(tuple((at, at + s, 1) if k == axis else w for k, w in enumerate(whole)))
        at += s
    return _moves.split(shape, windows)


def _pad(node: Node, bound):
    mode = node.attrs.get("mode", "constant")
    if mode != "constant":
        raise NotImplementedError(f"pad mode {mode!r}: only a constant pad is a TileDMA copy")
    shape = _shape(bound, node.inputs[0])
    consts = _consts(node, bound) + [None] * 4
    value = consts[2]
    if value is None and len(node.inputs) > 2 and node.inputs[2]:
        raise NotImplementedError("the pad value is not a constant: the fill is a constant of the program")
    v = 0.0 if value is None or np.size(value) == 0 else float(np.asarray(value).reshape(-1)[0])
    return _moves.pad(shape, pad_widths(node, shape, consts[1], consts[3]), v)


def _transpose(node: Node, bound):
    shape = _shape(bound, node.inputs[0])
    return _moves.transpose(shape, transpose_perm(node, len(shape)))


#: the layout ops lowered to data movement: op -> ``move(node, bound)`` (a
#: :class:`fastane.lower.moves.Move`; NotImplementedError with the reason it cannot be)
MOVES = {"concat": _concat, "slice": _slice, "split": _split, "pad": _pad, "transpose": _transpose}


def move_of(node: Node, bound):
    """``(move, "")`` for a layout node fastane moves on the ANE, ``(None, reason)`` else."""
    if node.op in KEPT:
        return None, KEPT[node.op]
    fn = MOVES.get(node.op)
    if fn is None:
        return None, ""
    data = [t for t in node.inputs[:1]] if node.op != "concat" else list(node.inputs)
    if any(np.dtype(bound.types[t].dtype).kind != "f" for t in data if t):
        return None, INTEGER
    try:
        move = fn(node, bound)
        if _moves.is_identity(move) and not set(node.outputs) & set(bound.graph.outputs):
            return None, IDENTITY  # (a program's output is written, as noop_elimination keeps it)
        _moves.lower(move)
    except NotImplementedError as exc:
        return None, f"moved on the host: {exc}"
    return move, ""


def _fp16_const(v) -> bool:
    v = np.asarray(v)
    if v.dtype == np.float16:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        back = v.astype(np.float16).astype(v.dtype)
    return bool(np.array_equal(back, v, equal_nan=True))


def promote(ctx) -> None:
    """Put on the ANE the layout layers of ``ctx`` that :func:`move_of` lowers and whose
    values are fp16 on one side (see the module docs); give the others their reason."""
    bound = ctx.bound
    outputs = set(bound.graph.outputs)
    readers: dict = {}
    for layer in ctx.layers:
        for t in layer.inputs:
            readers.setdefault(t, []).append(layer)
    moves, views = {}, set()
    for layer in ctx.layers:
        if layer.placement == "layout" and len(layer.nodes) == 1:
            move, why = move_of(layer.nodes[0], bound)
            if move is None:
                layer.reason = why or layer.reason
                if why == IDENTITY:
                    views.add(id(layer))
            else:
                moves[id(layer)] = move
    fp16 = set()
    done = set()
    for layer in ctx.layers:  # from the ANE (through views: their output is their input)
        if layer.placement == "ane":
            fp16.update(layer.outputs)
        elif id(layer) in views:
            if layer.nodes[0].inputs[0] in fp16:
                fp16.update(layer.outputs)
        elif id(layer) in moves:
            node = layer.nodes[0]
            data = node.inputs if node.op == "concat" else node.inputs[:1]
            if all(t in fp16 or (t in bound.consts and _fp16_const(bound.consts[t])) for t in data):
                _to_ane(layer, moves[id(layer)], node, bound, strict=True)
                fp16.update(layer.outputs)
                done.add(id(layer))

    def rounded(t) -> bool:  # every reader of ``t`` rounds it to fp16 (through views)
        return t in outputs or all(
            _rounds(r) or (id(r) in views and all(rounded(o) for o in r.outputs)) for r in readers.get(t, [])
        )

    for layer in reversed(ctx.layers):  # to the ANE
        if id(layer) in moves and id(layer) not in done:
            if all(rounded(t) for t in layer.outputs):
                _to_ane(layer, moves[id(layer)], layer.nodes[0], bound)
            else:
                layer.reason = HOST_SIDES


def _rounds(layer) -> bool:
    """Whether ``layer`` rounds its float operands to fp16 (an ANE layer through the public
    entry points; not the INT8 lanes, whose chain starts at a dequantize on the host)."""
    return layer.placement == "ane" and not layer.detail.get("int8")


def _to_ane(layer, move, node: Node, bound, strict: bool = False) -> None:
    """Make ``layer`` run ``move`` on the ANE.  ``strict``: placed for its fp16 inputs, so an
    input that arrives wider (its producer left the ANE at run time) keeps the layer on the
    host (NotImplementedError: the run's fallback)."""
    dyn = set(layer.inputs)
    data = node.inputs if node.op == "concat" else node.inputs[:1]
    consts = {t: bound.consts[t] for t in data if t not in dyn}

    def run(xs):
        if strict and not all(_fp16_const(x) for x in xs):
            raise NotImplementedError("an input arrives in float32 (its producer ran on the host)")
        vals = dict(zip(layer.inputs, xs))
        return _moves.run(move, [vals[t] if t in vals else consts[t] for t in data])

    layer.placement = "ane"
    layer.reason = MOVED
    layer.detail["move"] = move.describe()
    layer.run = run
    layer.call = "move"
    layer.plan = lambda: _moves.plan(move)
