"""The elementwise placement rules: activations (and the silu and hard_swish patterns) on
the NE's table blocks, the planar engine's binary and unary operations, division (the
reciprocal table, then a planar multiply), and the compositions of tables and planar tasks (log,
softplus: :data:`fastane.lower.binary.COMPOSED`).  Each is ``rule(node, ctx) -> bool | str`` on the
:class:`~.context.Context` (see :data:`fastane.model.placement.place.RULES`).

:func:`activation_rule` is also what a MAC layer fuses into its NE stage
(:meth:`~.context.Context.fuse_activation`)."""

from __future__ import annotations

import math

import numpy as np

from ... import activations as _activations
from ... import lut as _lut
from ...activation_table import ACTIVATIONS, TABLES
from ..graph import Bound, Node
from ..ops import OPS
from . import plan as _plan

__all__ = [
    "NO_LOWERING",
    "activation_rule",
    "const_scalar",
    "activation",
    "binary",
    "unary",
    "divide",
    "composed",
]

NO_LOWERING = "no ANE lowering in fastane yet"
#: the reason an elementwise op on integer tensors (ONNX allows them) runs on the host
INTEGER = "integer operands: the ANE computes in fp16; run exactly on the host"

#: ONNX default SELU constants (float32), which are Apple's selu block's
_SELU = (1.6732632423543772, 1.0507009873554805)

#: model ops -> fastane.lower.binary (planar engine) functions: the binary family
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "max": "maximum", "min": "minimum"}
#: and the unary family (``pow`` with a constant exponent 2 only: a planar square)
UNARY = {"abs": "absolute", "neg": "negative", "pow": "square"}
#: an activation's tolerance class on the ANE where it is not its record's ``kind`` (the
#: host's): PRelu runs LeakyRelu's table block
_ANE_KIND = {"prelu": "table"}


# ------------------------------------------------------------------------ activations
def activation_rule(node: Node, bound: Bound):
    """``(fused, standalone)`` for an activation node fastane runs on the ANE: ``fused`` is
    the ``activation=`` argument of the MAC entry points, ``standalone`` a callable on one
    array; ``(None, reason)`` when it has no lowering."""
    op, a, consts = node.op, node.attrs, bound.consts
    if op in ("relu", "tanh", "sigmoid", "exp", "sqrt", "reciprocal", "sign", "exp2", "rsqrt", "erf"):
        return op, getattr(_activations, op)
    if op == "gelu":
        # both forms on Apple's one gelu table (the tanh form is within 4.7e-4 of the erf
        # form, the table within 6.2e-3 of it): Core ML runs gelu TANH_APPROXIMATION on the
        # ANE (MLComputePlan, 6 of 6 gelu ops: LuuOW/meridian-mcp@55deb46
        # mlcore/ane_encoder/build/proof/runtime_plan.json, nn.GELU(approximate="tanh"))
        return "gelu", _activations.gelu
    if op == "leaky_relu":
        return _leaky(float(a.get("alpha", 0.01)), "LeakyRelu alpha")
    if op == "prelu":
        return _prelu(node, bound)
    if op == "elu":
        return _elu(float(a.get("alpha", 1.0)))
    if op == "hard_sigmoid":
        return _hard_sigmoid(float(a.get("alpha", 0.2)), float(a.get("beta", 0.5)))
    if op == "hard_swish":  # silu's chain with the hard-sigmoid block (1/6, 1/2)
        return "hard_swish", _activations.hard_swish
    if op == "selu":
        al, ga = float(a.get("alpha", _SELU[0])), float(a.get("gamma", _SELU[1]))
        if np.float32(al) != np.float32(_SELU[0]) or np.float32(ga) != np.float32(_SELU[1]):
            return None, "SELU with non-default alpha/gamma: fastane has Apple's selu block only"
        return "selu", _activations.selu
    if op == "clip":
        return _clip(const_scalar(consts, node, 1), const_scalar(consts, node, 2))
    return None, NO_LOWERING


def _leaky(s: float, what: str):
    """LeakyRelu's block with slope ``s`` (``what`` names it in the reason)."""
    if not abs(s) <= 65504.0:  # the block's slope is an fp16 coefficient (NaN fails too)
        return None, f"{what} {s} is not finite in fp16: the slope of the ANE's block cannot hold it"
    blk = "leaky_relu" if np.float32(s) == np.float32(0.01) else _lut.leaky_relu_block(s)
    return blk, lambda x: _activations.leaky_relu(x, s)


def _fp16_holds(*values) -> bool:
    """Whether every value is finite once rounded to fp16 (a block's coefficient)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return all(np.isfinite(np.float16(v)) for v in values)


def _elu(alpha: float):
    """ELU's block with ``alpha`` (rounded to fp16, as the block holds it)."""
    if not _fp16_holds(alpha):
        return None, f"Elu alpha {alpha} is not finite in fp16: the ANE's elu block cannot hold it"
    blk = "elu" if np.float32(alpha) == np.float32(1.0) else _lut.elu_block(alpha)
    return blk, lambda x: _activations.elu(x, alpha)


def _hard_sigmoid(alpha: float, beta: float):
    """The hard-sigmoid block with ``alpha``, ``beta`` (rounded to fp16, as the block holds
    them; the registry's block for ONNX's defaults)."""
    if not _fp16_holds(alpha, beta):
        return None, (
            f"HardSigmoid alpha {alpha}, beta {beta}: not finite in fp16, the ANE's hard-sigmoid "
            "block cannot hold them"
        )
    default = np.float32(alpha) == np.float32(0.2) and np.float32(beta) == np.float32(0.5)
    blk = "hard_sigmoid" if default else _lut.hard_sigmoid_block(alpha, beta)
    return blk, lambda x: _activations.hard_sigmoid(x, alpha, beta)


def _prelu(node: Node, bound: Bound):
    """PRelu with a constant slope that is one value: LeakyRelu's block with that slope."""
    slope = bound.consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if slope is None:
        return None, "PRelu slope is not constant: the ANE's leaky_relu block holds its slope in the program"
    if tuple(bound.types[node.outputs[0]].shape) != tuple(bound.types[node.inputs[0]].shape):
        return None, "PRelu slope broadcasts the input to a larger shape: no ANE lowering in fastane yet"
    n = np.unique(slope).size
    if n != 1:
        return None, f"PRelu with {n} distinct slopes: the ANE's leaky_relu block has one slope"
    return _leaky(float(slope.reshape(-1)[0]), "PRelu slope")


def _clip(lo, hi):
    """Clip with constant bounds ``lo``, ``hi`` (:func:`const_scalar`)."""
    if lo is False or hi is False:
        return None, "Clip bounds are not constant"
    big = 65504.0
    if lo is not None and lo == 0.0 and (hi is None or hi >= big):
        return "relu", _activations.relu
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None, "Clip with one bound only: no ANE block in fastane yet"
    if not float(np.float16(lo)) < float(np.float16(hi)):
        return None, "Clip bounds collapse in fp16"
    blk = "relu6" if (lo, hi) == (0.0, 6.0) else _lut.hardtanh_block(lo, hi)
    return blk, lambda x: _activations.hardtanh(x, lo, hi)


def const_scalar(consts, node, i):
    """The constant scalar input ``i`` of ``node``: None if omitted, False if not constant."""
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    v = consts.get(node.inputs[i])
    if v is None or v.size != 1:
        return False
    return float(v.reshape(-1)[0])


def activation(node: Node, ctx):
    """An activation on its NE block, or ``x * sigmoid(x)`` as silu and ``x *
    hard_sigmoid(x)`` (1/6, 1/2) as hard_swish; else the reason."""
    types = ctx.bound.types
    shape = types[node.inputs[0]].shape
    nodes, name = ctx.gated(node.inputs[0])
    if nodes and nodes[0] is node:
        fn = getattr(_activations, name)
        run = lambda xs: [fn(xs[0])]  # noqa: E731
        note = _own_table(name)
        ctx.add(nodes, "ane", note, "table", run, name, lambda: _plan.eltwise(shape, name))
        return True
    fused, fn = activation_rule(node, ctx.bound)
    if fused is None:
        return fn
    if not _float(node, types):
        return INTEGER
    kind = _ANE_KIND.get(node.op, OPS[node.op].kind)
    note = _own_table(node.op)
    ctx.add([node], "ane", note, kind, lambda xs: [fn(xs[0])], node.op, lambda: _plan.eltwise(shape, fused))
    return True


def _own_table(op: str) -> str:
    """The note of an activation whose table is fastane's own (no corpus block), else ""."""
    rec = ACTIVATIONS.get(op)
    if rec is None or rec.table is None or TABLES[rec.table].apple is not None:
        return ""
    return f"fastane's {rec.table} table (no Apple block in the corpus; built as Apple's tables are, docs/lut.md)"


# ------------------------------------------------------------------------ planar engine
def _float(node: Node, types) -> bool:
    """Whether every operand of ``node`` is a float tensor."""
    return all(np.dtype(types[t].dtype).kind == "f" for t in node.inputs if t)


def _operands(node: Node, ctx):
    """``operands(xs)``: the operands of ``node``, the dynamic ones from ``xs`` (the inputs
    of its layer, in order), the others constants."""
    consts, dyn = ctx.bound.consts, ctx.dyn([node])

    def operands(xs) -> tuple:
        vals = dict(zip(dyn, xs))
        return tuple(vals[t] if t in vals else consts[t] for t in node.inputs)

    return operands


def divide(node: Node, ctx):
    """Apple's div of two float tensors: the reciprocal table (NE), then a planar multiply."""
    from ...lower import binary as _binary

    types = ctx.bound.types
    if not _float(node, types):
        return INTEGER
    if len(node.inputs) != 2:
        return False
    operands = _operands(node, ctx)
    out_shape = types[node.outputs[0]].shape
    b_shape = types[node.inputs[1]].shape
    ctx.add(
        [node],
        "ane",
        "Apple's div: the reciprocal table (NE), then a planar multiply",
        "table",
        lambda xs: [_binary.divide(*operands(xs))],
        "divide",
        lambda: _plan.eltwise(b_shape, "reciprocal") + _plan.binary(out_shape, "mul"),
    )
    return True


#: the note of a composition's layer
_COMPOSED_NOTE = {
    "log": "Apple's log: the log2 table (NE), then a planar multiply by fp16 ln 2",
    "softplus": "log(1 + exp(x)) from the ANE's primitives (exp table, planar + 1, log2 table, "
    "planar multiply by fp16 ln 2): exp overflows fp16 from x = 11.09",
}


def composed(node: Node, ctx):
    """An op Apple computes as a chain of tables and planar tasks
    (:data:`fastane.lower.binary.COMPOSED`) on a float tensor."""
    from ...lower import binary as _binary

    types = ctx.bound.types
    if not _float(node, types):
        return INTEGER
    name, shape = node.op, types[node.inputs[0]].shape
    ctx.add(
        [node],
        "ane",
        _COMPOSED_NOTE[name],
        "table",
        lambda xs: [_binary.composed(name, xs[0])],
        name,
        lambda: _plan.composed(shape, name),
    )
    return True


def binary(node: Node, ctx):
    """A planar binary operation of two float tensors (:data:`BINARY`), with a ReLU after it
    (its one consumer) as an NE task in the same program."""
    from ...lower import binary as _binary

    types = ctx.bound.types
    if not _float(node, types):
        return INTEGER
    if len(node.inputs) != 2:
        return False
    operands = _operands(node, ctx)
    note = (
        ""
        if types[node.inputs[0]].shape == types[node.inputs[1]].shape
        else "broadcast materialised on the host (a copy, no rounding)"
    )
    nxt = ctx.only(node.outputs[0])
    relu = nxt is not None and activation_rule(nxt, ctx.bound)[0] == "relu"
    act = "relu" if relu else None
    name = BINARY[node.op]
    out_shape = types[node.outputs[0]].shape
    ctx.add(
        [node, nxt] if relu else [node],
        "ane",
        note,
        "exact",
        lambda xs: [_binary.binary(name, *operands(xs), act)],
        name,
        lambda: _plan.binary(out_shape, name, relu),
    )
    return True


def unary(node: Node, ctx):
    """A planar unary operation on a float tensor (:data:`UNARY`): ``pow`` when the exponent
    is the constant 2 (``x * x``)."""
    from ...lower import binary as _binary

    consts, types = ctx.bound.consts, ctx.bound.types
    square = node.op == "pow"
    if not _float(node, types):
        return INTEGER
    if square and const_scalar(consts, node, 1) != 2.0:
        return False
    name = UNARY[node.op]
    shape = types[node.inputs[0]].shape
    ctx.add(
        [node],
        "ane",
        "x * x (unary/square.bin)" if square else "",
        "exact",
        lambda xs: [_binary.unary(name, xs[0])],
        name,
        lambda: _plan.binary(shape, name),
    )
    return True
