"""The op vocabulary's registry (:class:`OpDef`, :data:`OPS`, the ``register_op`` decorator,
:class:`OnnxName`: the ONNX op types a record imports and how), the checks every op's
inference shares, and :func:`host_eval`.  The ops themselves are
registered by the other modules of :mod:`fastane.model.ops` (which re-exports
:class:`OpDef`, :data:`OPS` and :func:`host_eval`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from ...errors import ModelError, quote
from ...operands import widen_fp16
from ..budget import MAX_RANK, beyond
from ..tensor import TensorType, shape_text


_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class OpDef:
    infer: Callable
    host: Callable
    #: evaluated at bind time when every input is constant
    foldable: bool = True
    #: the numerics class of its result, which sets the per-layer tolerance: "layout" (moves
    #: data, no arithmetic), "exact" (one rounding of the exact result), "mac", "table",
    #: "host" (no ANE class)
    kind: str = "host"
    #: the placement rule family that may put it on the ANE (a key of
    #: :data:`fastane.model.placement.place.RULES`); "" for an op fastane runs on the host only
    ane: str = ""
    #: the ONNX op types imported as this op (:class:`OnnxName`)
    onnx: tuple = ()
    #: the MIL ops imported as this op one to one (:class:`MilName`); MIL ops that become
    #: several nodes or take attributes are handlers of the Core ML importer
    mil: tuple = ()
    #: ``cost(node, in_types, out_types) -> HostCost``: what its host implementation asks
    #: beyond the common allowance (:func:`fastane.model.cost.node_cost`); None: nothing more
    cost: Callable | None = None
    #: ``expand(node, types, consts) -> (nodes, consts) | None``: at bind, before inference,
    #: the nodes (and new constants) that stand for ``node`` given its inputs' types and
    #: constant values: an If whose condition is constant its taken branch, a control-flow
    #: node its copy holding its bound bodies (:mod:`fastane.model.control`); None: ``node``
    #: itself
    expand: Callable | None = None
    #: it reads its inputs' shapes only, never their values (Shape, Size): folded at bind
    #: whatever its inputs, and none of their bytes counted
    shapes_only: bool = False


@dataclass(frozen=True)
class HostCost:
    """What an op's host implementation asks of the host beyond its inputs and outputs
    (:func:`fastane.model.cost.node_cost` adds the common allowance): ``temp`` bytes of
    temporaries, ``macs`` multiply-adds, ``elem_ops`` element operations (None: one per input
    and output element), ``taps`` kernel taps (one host pass each: ``MAX_KERNEL_TAPS``),
    ``einsum``: its multiply-adds answer to ``MAX_EINSUM_WORK`` instead of ``MAX_LAYER_WORK``,
    ``steps``: a control-flow node's node evaluations (``MAX_LOOP_STEPS``; its work is its
    bodies', whose nodes answer to the per-layer limits, so it answers to ``MAX_RUN_WORK``
    only)."""

    temp: int = 0
    macs: int = 0
    elem_ops: int | None = None
    taps: int = 0
    einsum: bool = False
    steps: int = 0


def elements(types) -> int:
    """The elements of the tensors of ``types`` (None: an omitted input, none)."""
    return sum(math.prod(t.shape) for t in types if t is not None)


def heavy(per_out: int):
    """The cost of an elementwise op whose host implementation makes float64 or object-array
    passes: ``per_out`` bytes an output element beyond the common allowance."""
    return lambda node, in_types, out_types: HostCost(per_out * math.prod(out_types[0].shape))


@dataclass(frozen=True)
class OnnxName:
    """An ONNX op type the ONNX importer turns into its record's op, from opset ``since``
    up to (not including) ``until``.  ``parse(c, a, ins)`` makes the node from the ONNX
    node's attributes ``a`` (Python values) and input names ``ins`` through the importer's
    context ``c`` (``c.opset``, ``c.where``, ``c.name``, ``c.outs``, ``c.const(value,
    dtype)``, ``c.tensor(tensor_proto)``, ``c.dtype(elem_type)``, ``c.rank_of(name)``, ``c.mk(attrs, inputs, n_out,
    keep)``, ``c.add(op, suffix, inputs, outputs, attrs)``); None: the node's inputs,
    no attributes.  ``doc``: what the docs' table says of it beyond the record's placement."""

    name: str
    parse: Callable | None = None
    since: int = 1
    until: int | None = None
    doc: str = ""

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset < self.until)


@dataclass(frozen=True)
class MilName:
    """A MIL op the Core ML importer turns into its record's op one to one: the MIL op's
    ``operands`` (by name, in the record's input order), no attributes."""

    name: str
    operands: tuple = ("x",)


OPS: dict = {}

#: what the docs' table of ONNX ops says of a layout op the ANE may move
#: (:mod:`fastane.model.placement.moves`)
MOVED_DOC = "on the ANE as data movement where TileDMA expresses it, docs/lower.md section 13"

#: the placement rule families an op may name in ``ane``, with where such an op runs (the
#: docs' table of ONNX ops: :func:`fastane.model.frontends.onnx.importer.docs_table`)
ANE_FAMILIES = {
    "activation": "ANE: an elementwise program, or fused into the Conv/Gemm/MatMul it follows",
    "binary": "ANE: the planar engine (two float operands)",
    "unary": "ANE: one planar task (Abs, Neg, Pow with a constant exponent 2)",
    "divide": "ANE: the reciprocal table, then a planar multiply",
    "composed": "ANE: tables and planar tasks in a chain (Log: the log2 table, x ln 2; Softplus: exp, "
    "+ 1, log; no safeguard against exp's fp16 overflow)",
    "conv": "ANE: `conv2d`/`conv1d`",
    "deconv": "ANE: `conv2d`/`conv1d` as a stride-1 convolution",
    "mac": "ANE: `linear` or `matmul`",
    "rows": "ANE: a row operation on the planar engine (over the trailing axes)",
    "qlinear": "ANE: the INT8 lanes (a dequantize -> conv/matmul -> quantize chain)",
    "control": "host: control flow runs on the CPU, as Core ML places it (the taken branch of an If "
    "whose condition is constant at bind is inlined, its nodes placed as any others)",
    "recurrent": "host: recurrent layers run on the CPU, as Core ML places them",
}


def register_op(
    name,
    infer,
    kind="host",
    foldable=True,
    ane="",
    onnx=(),
    cost=None,
    mil=(),
    expand=None,
    shapes_only=False,
):
    """Decorator: register the host implementation it decorates as op ``name`` in :data:`OPS`,
    with its inference ``infer(node, types, consts)``, its ``kind``, whether it folds, its
    placement family ``ane`` and the ONNX op types it imports (``onnx``: :class:`OnnxName`
    or a plain name, imported with its inputs and no attributes), its host ``cost``
    (:class:`HostCost`) and the MIL ops it imports one to one (``mil``: :class:`MilName` or a
    plain name, whose one operand is ``x``), and its ``expand`` at bind
    (:attr:`OpDef.expand`)."""
    if ane and ane not in ANE_FAMILIES:
        raise ValueError(f"op {name}: unknown placement family {ane!r}")
    onnx = tuple(OnnxName(o) if isinstance(o, str) else o for o in onnx)
    mil = tuple(MilName(m) if isinstance(m, str) else m for m in mil)
    for o in onnx:
        for other, d in OPS.items():
            if other != name and any(p.name == o.name and _overlap(p, o) for p in d.onnx):
                raise ValueError(f"op {name}: ONNX {o.name} is already imported as {other}")

    def deco(fn):
        OPS[name] = OpDef(infer, fn, foldable, kind, ane, onnx, mil, cost, expand, shapes_only)
        return fn

    return deco


def _overlap(p: OnnxName, q: OnnxName) -> bool:
    return (p.until is None or q.since < p.until) and (q.until is None or p.since < q.until)


# ------------------------------------------------------------------------ ONNX attribute parsing
def take(*names, **defaults):
    """The parse of an ONNX op whose attributes keep their names: ``names`` copied when
    present, each of ``defaults`` with its default when absent."""

    def parse(c, a, ins):
        return c.mk({**{k: a[k] for k in names if k in a}, **{k: a.get(k, v) for k, v in defaults.items()}})

    return parse


def same_attrs(c, a, ins):
    """The parse of an ONNX op whose attributes are the op's: every one as given."""
    return c.mk(dict(a))


def attr_input(c, a, ins, key, dtype=np.int64):
    """``ins`` with attribute ``key`` (an older opset's form of the operand) as the
    constant second input when the node has it."""
    return ins[:1] + [c.const(a[key], dtype)] if key in a else ins


# ------------------------------------------------------------------------ helpers
def need_input(types, i, node, what="input"):
    """The type of input ``i`` of ``node``; a ModelError if it is missing."""
    if i >= len(types) or types[i] is None:
        raise ModelError(f"{node.describe()}: missing {what} {i}")
    return types[i]


def need_float(t: TensorType, node, i=0):
    """``t``, the type of input ``i`` of ``node``; a ModelError if it is not a float tensor."""
    if np.dtype(t.dtype).kind != "f":
        raise ModelError(f"{node.describe()}: input {i} must be a float tensor, got {t}")
    return t


def need_const(consts, i, node, what):
    """The constant value of input ``i`` of ``node``; a ModelError if it is not constant."""
    if i >= len(consts) or consts[i] is None:
        raise ModelError(
            f"{node.describe()}: {what} (input {i}) must be a constant (or computable "
            f"from the input shapes); fastane does not run data-dependent shapes"
        )
    return consts[i]


def check_axis(a, rank, node, what="axis"):
    """Axis ``a`` of a ``rank``-D tensor as a non-negative int; a ModelError if out of range."""
    a = int(a)
    if not -rank <= a < max(rank, 1):
        raise ModelError(f"{node.describe()}: {what} {a} is out of range for a {rank}-D tensor")
    return a % rank if rank else 0


def broadcast_shape(shapes, node):
    """The numpy broadcast of ``shapes``; a ModelError if they do not broadcast (or have
    more than :data:`~fastane.model.budget.MAX_RANK` dimensions, beyond numpy's own)."""
    for s in shapes:
        if len(s) > MAX_RANK:
            raise beyond(f"{node.describe()}: shape {shape_text(s)}", len(s), "dimensions", "MAX_RANK")
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except (ValueError, RuntimeError):
        raise ModelError(
            f"{node.describe()}: shapes {' and '.join(shape_text(s) for s in shapes)} do not broadcast"
        ) from None


def same_type(node, types, consts):
    """Inference of an elementwise op on one float input: the output has the input's type."""
    return [need_float(need_input(types, 0, node), node)]


def need_number(t: TensorType, node, i=0):
    """``t``, the type of input ``i`` of ``node``; a ModelError if it is not a float or
    integer tensor."""
    if np.dtype(t.dtype).kind not in "fiu":
        raise ModelError(f"{node.describe()}: input {i} must be a float or integer tensor, got {t}")
    return t


def same_number(node, types, consts):
    """Inference of an elementwise op on one float or integer input (ONNX's schema allows
    both; an integer one runs exactly on the host): the output has the input's type."""
    return [need_number(need_input(types, 0, node), node)]


def _fl(x):
    """float inputs widened to float32 (integer tensors unchanged)."""
    x = np.asarray(x)
    if x.dtype == np.float16:
        return widen_fp16(x)
    return x.astype(np.float32) if x.dtype.kind == "f" and x.dtype != _F32 else x


def host_eval(node, arrays, out_dtypes=None):
    """Run ``node`` on the host (float inputs widened to float32); outputs cast to
    ``out_dtypes`` (the inferred dtypes) when given.  A MemoryError (the budget is an
    estimate) is the node's ModelError."""
    try:
        return _host_eval(node, arrays, out_dtypes)
    except MemoryError as exc:
        raise ModelError(
            f"{node.describe()}: the host ran out of memory ({quote(str(exc), 120, marks=False)})"
        ) from None


def _host_eval(node, arrays, out_dtypes):
    op = OPS[node.op]
    args = [None if a is None else _fl(a) for a in arrays]
    with np.errstate(all="ignore"):
        try:
            outs = op.host(node, *args)
        except ModelError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, OverflowError, ZeroDivisionError) as exc:
            raise ModelError(f"{node.describe()}: {quote(str(exc), 200, marks=False)}") from None
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    res = []
    for i, o in enumerate(outs[: len(node.outputs)]):
        o = np.asarray(o)
        if out_dtypes is not None and o.dtype != out_dtypes[i]:
            o = o.astype(out_dtypes[i])
        res.append(o)
    return res
