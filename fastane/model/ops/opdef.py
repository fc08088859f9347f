"""The op vocabulary's registry (:class:`OpDef`, :data:`OPS`, the ``register_op`` decorator),
the checks every op's inference shares, and :func:`host_eval`.  The ops themselves are
registered by the other modules of :mod:`fastane.model.ops` (which re-exports
:class:`OpDef`, :data:`OPS` and :func:`host_eval`)."""

from __future__ import annotations

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


OPS: dict = {}

#: the placement rule families an op may name in ``ane``
ANE_FAMILIES = ("activation", "binary", "unary", "divide", "conv", "deconv", "mac", "rows", "qlinear")


def register_op(name, infer, kind="host", foldable=True, ane=""):
    """Decorator: register the host implementation it decorates as op ``name`` in :data:`OPS`,
    with its inference ``infer(node, types, consts)``, its ``kind``, whether it folds and its
    placement family ``ane``."""
    if ane and ane not in ANE_FAMILIES:
        raise ValueError(f"op {name}: unknown placement family {ane!r}")

    def deco(fn):
        OPS[name] = OpDef(infer, fn, foldable, kind, ane)
        return fn

    return deco


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
