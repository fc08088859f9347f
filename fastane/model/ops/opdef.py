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
from ..tensor import TensorType


_F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class OpDef:
    infer: Callable
    host: Callable
    #: evaluated at bind time when every input is constant
    foldable: bool = True
    #: "layout" (moves data, no arithmetic), "exact" (one rounding of the exact result),
    #: "mac", "table", "host" (no ANE class)
    kind: str = "host"


OPS: dict = {}


def register_op(name, infer, kind="host", foldable=True):
    """Decorator: register the host implementation it decorates as op ``name`` in :data:`OPS`,
    with its inference ``infer(node, types, consts)``, its ``kind`` and whether it folds."""

    def deco(fn):
        OPS[name] = OpDef(infer, fn, foldable, kind)
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
    """The numpy broadcast of ``shapes``; a ModelError if they do not broadcast."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelError(
            f"{node.describe()}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast"
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
    ``out_dtypes`` (the inferred dtypes) when given."""
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
