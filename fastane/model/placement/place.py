"""Placement: which ops of a bound graph run on the emulated ANE, which on the host, and why.

As Core ML partitions a model, fastane groups the graph into *layers*:

* **ane**: an op fastane lowers to TD programs, run through the public entry points
  (:func:`fastane.conv2d`, :func:`fastane.conv1d`, :func:`fastane.linear`,
  :func:`fastane.matmul`, the activations of :mod:`fastane.activations`) -- the one
  lowering and the one device; nothing is recomputed here.  Fusions, as Apple's compiler
  does them: a BatchNormalization after a convolution is folded into its weights and bias
  at compile time (SPEC 3, :func:`fastane.lut.fold_affine`: rounded once to fp16); an
  activation that is the only consumer of a conv/Gemm/MatMul runs in the NE stage of the
  same tasks (``activation=``); ``x * sigmoid(x)`` is silu, ``x * hard_sigmoid(x)`` with
  hard_swish's parameters (1/6, 1/2) is hard_swish.
* **layout**: data movement with no arithmetic (Reshape, Transpose, Concat, Slice, ...).
  Concat, Slice, Split, a constant Pad and a Transpose that keeps the last axis go to the
  ANE as NE pass-through tasks whose TileDMA offsets and strides move the data (as Apple's
  ``concat.hwx``), where their values are fp16 on one side of the move
  (:func:`.moves.promote`); the rest stays on the host (numpy), which changes no value,
  with its reason.
* **host**: everything else, in float32 on the host, with the reason (no ANE lowering in
  fastane yet, beyond the lowering's limits, non-constant weights, ...).

The placer walks the graph and asks each node's op record
(:data:`fastane.model.ops.OPS`) for its placement family (``OpDef.ane``); the family's rule
in :data:`RULES` places it.  A ``layout`` op is placed as layout; an op with no family, or
whose rule declines, runs on the host with the rule's reason (else :data:`NO_LOWERING`).

Tensors cross between the two as fp16 (the ANE's public entry points round their
operands to fp16, and return fp16).
"""

from __future__ import annotations

from ..graph import Bound
from ..ops import OPS
from . import eltwise, moves
from .context import Context, Layer
from .eltwise import NO_LOWERING
from .qlinear import place_qlinear
from .rows import place_rows
from .rules import place_conv, place_deconv, place_mac

__all__ = ["Layer", "place", "NO_LOWERING", "CONTROL_FLOW", "ON_CPU", "RULES", "CONSTANT_ONLY"]

#: placement family (``OpDef.ane``) -> ``rule(node, ctx) -> bool | str``: a rule that
#: places ``node`` records its layer (``ctx.add``: alone or with the nodes it fuses, on the
#: ANE or on the host with its reason) and returns True; a node no layer holds after its
#: rule runs on the host with the reason the rule returns (a string) or
#: :data:`NO_LOWERING`.  ``qlinear`` declines a ``dequantize`` not on the INT8 path: its
#: nodes are placed one by one.
RULES = {
    "activation": eltwise.activation,
    "binary": eltwise.binary,
    "unary": eltwise.unary,
    "divide": eltwise.divide,
    "composed": eltwise.composed,
    "conv": place_conv,
    "deconv": place_deconv,
    "mac": place_mac,
    "rows": place_rows,
    "qlinear": place_qlinear,
}
#: the families Core ML keeps on the CPU: why a node of one runs on the host
ON_CPU = {
    "control": "control flow runs on the CPU, as Core ML places it",
    "recurrent": "a recurrent layer: Core ML places it on the CPU",
}
RULES.update({family: (lambda node, ctx, why=why: why) for family, why in ON_CPU.items()})
#: why a control-flow node (If, Loop, Scan) runs on the host
CONTROL_FLOW = ON_CPU["control"]

LAYOUT = (
    "data movement only (no arithmetic), done on the host; fastane does not express it as DMA strides yet"
)


#: the reason of a node whose inputs are all constants, left unfolded for their size
CONSTANT_ONLY = (
    "computed from constants only (weight preprocessing, e.g. weight normalisation, that a conversion "
    "folds; too large to fold when the model is bound): on the host"
)


def place(bound: Bound) -> list:
    """The layers of ``bound``, in execution order."""
    ctx = Context(bound)
    for node in bound.nodes:
        if ctx.done(node):
            continue
        rec = OPS[node.op]
        if rec.kind == "layout":
            ctx.add([node], "layout", LAYOUT, "layout")
            continue
        if not ctx.dyn([node]):  # only constants, too large to fold when bound (MAX_FOLD_ELEMENTS)
            ctx.add([node], "host", CONSTANT_ONLY, rec.kind)
            continue
        rule = RULES.get(rec.ane)
        why = rule(node, ctx) if rule is not None else None
        if not ctx.done(node):  # what was placed is what a layer holds, not what a rule said
            ctx.add([node], "host", (why if isinstance(why, str) else "") or NO_LOWERING, rec.kind)
    moves.promote(ctx)  # layout layers whose data the ANE can move
    for layer in ctx.layers:  # a quantized chain left off the INT8 path says why (qlinear.match)
        why = [ctx.off_int8[id(n)] for n in layer.nodes if id(n) in ctx.off_int8]
        if why:
            layer.reason = "; ".join(filter(None, [layer.reason, *why]))
    return ctx.layers
