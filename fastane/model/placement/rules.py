"""The MAC placement rules (:data:`fastane.model.placement.place.RULES` ``conv``, ``deconv``
and ``mac``): how a convolution (with its fused BatchNormalization and activation), a
transposed convolution, a Gemm or a MatMul is placed on the ANE through the public entry
points, or on the host with the reason."""

from __future__ import annotations

import numpy as np

from ... import api as _api
from ... import compress as _compress
from ... import lut as _lut
from ...lower import bind as _bind
from ...lower.problems import conv_problem, linear_problem, matmul_problem
from ...operands import fp16_operand
from . import plan as _plan
from .context import Context
from ..ops import conv_geometry


def _weights(node, consts, what: str, add):
    """``(weight, bias or None)`` of a conv-like node when both are constants; else the node
    is placed on the host (the ANE reads weights from the compiled program) and None."""
    w = consts.get(node.inputs[1])
    has_b = len(node.inputs) > 2 and bool(node.inputs[2])
    b = consts.get(node.inputs[2]) if has_b else None
    if w is None or (has_b and b is None):
        add(
            [node],
            "host",
            f"{what} with non-constant weights or bias: the ANE reads weights from the compiled program",
            "mac",
        )
        return None
    return w, b


def typed_bits(name: str, typed_codes: dict, size: int) -> int:
    """The code width the stats-only report counts for a weight kept compressed, from its
    type alone (``typed_codes``: name -> bits): 8 for the output of a folded per-tensor
    dequantize of an int8/uint8 tensor (at most 256 distinct values: an 8-bit palette holds
    it losslessly), a Core ML table's width for a one-table ``constexpr_lut_to_dense``;
    counted when the codes and a palette a core pay (:func:`fastane.compress.lossless`'s
    rule); else 0 (fp16).  A computed run reads the values and may find fewer distinct ones
    (narrower codes): the type's count is then an upper bound (docs/models.md)."""
    b = (typed_codes or {}).get(name, 0)
    return b if b and size * b / 8 + 16 * (2 << b) < 2 * size else 0


def place_conv(node, ctx: Context) -> bool:
    """Place a convolution (with a following BatchNormalization and activation fused) on the
    ANE, or on the host with the reason, through ``ctx.add``; True."""
    consts, types = ctx.bound.consts, ctx.bound.types
    only, fuse_activation, add = ctx.only, ctx.fuse_activation, ctx.add
    compressed, typed_codes = ctx.compressed, ctx.typed_codes
    wb = _weights(node, consts, "convolution", add)
    if wb is None:
        return True
    w, b = wb
    nodes = [node]
    scale = shift = None
    bn = only(node.outputs[0])
    if bn is not None and bn.op == "batchnorm" and all(t in consts for t in bn.inputs[1:5]):
        from ..ops import bn_affine

        scale, shift = bn_affine(bn, *(consts[t] for t in bn.inputs[1:5]))
        nodes.append(bn)
    acts, fused = fuse_activation(nodes[-1])
    nodes += acts
    x_shape = types[node.inputs[0]].shape
    s, d, pads, _ = conv_geometry(node, x_shape, w.shape[2:])
    groups = int(node.attrs.get("groups", 1))

    def prepare():
        with np.errstate(over="ignore"):
            if scale is not None:
                return _lut.fold_affine(w, b, scale, shift)
            return _fp16(w, node, "weight"), None if b is None else _fp16(b, node, "bias")

    consts16 = _Lazy(prepare)
    has_bias = b is not None or scale is not None
    one_d = len(x_shape) == 3
    sym = all(pb == pe for pb, pe in pads)
    padding = tuple(pb for pb, _ in pads)
    note = "" if sym else ("asymmetric padding materialised as zeros on the host (a zero operand either way)")

    kept = []  # the weight as the ANE keeps it: compressed when lossless (fastane.compress.lossless)

    def run(xs):
        w16, b16 = consts16()
        if not one_d:
            if not kept:
                stored = node.inputs[1] in compressed and scale is None  # no BN folded in
                kept.append(_compress.lossless(w16) if stored else w16)
            w16 = kept[0]
        x = xs[0]
        pad = padding
        if not sym:
            x = np.pad(np.asarray(x), ((0, 0), (0, 0)) + tuple(pads))
            pad = (0,) * len(pads)
        if one_d:
            return [_api.conv1d(x, w16, b16, s[0], pad[0], d[0], groups, fused)]
        return [_api.conv2d(x, w16, b16, s, pad, d, groups, fused)]

    # the stats-only count of a compressed weight, from its type (typed_bits)
    bits = 0 if one_d or scale is not None else typed_bits(node.inputs[1], typed_codes, w.size)

    def plan():
        xs = tuple(x_shape)
        if sym:
            return _plan.conv(xs, w.shape, s, pads, d, groups, has_bias, fused, bits)
        xs = xs[:2] + tuple(n + pb + pe for n, (pb, pe) in zip(xs[2:], pads))
        return _plan.conv(xs, w.shape, s, ((0, 0),) * len(pads), d, groups, has_bias, fused, bits)

    def problem():  # the input as is (symmetric padding only)
        return conv_problem(tuple(x_shape), w.shape, s, pads, d, groups, has_bias, fused, bits)

    consts16.layer = add(
        nodes,
        "ane",
        note,
        "mac",
        run,
        "conv1d" if one_d else "conv2d",
        plan,
        problem if sym else None,
        folded_bn=scale is not None,
        activation=_act_name(fused),
    )
    return True


class _Lazy:
    """A layer's compile-time constants (fp16 weights, folded BatchNormalization), made on
    first use: a stats-only report never needs them (nor the weights' values).  A note
    about them (weights beyond the fp16 range) is added to the layer's reason then."""

    def __init__(self, fn):
        self.fn, self.value, self.layer = fn, None, None

    def __call__(self):
        if self.value is None:
            # frozen (read-only, fastane's own): the lowering keeps them resident by
            # reference, with no private copy to compare against (lower.bind.freeze)
            self.value = tuple(
                _bind.freeze(v) if isinstance(v, np.ndarray) and v.dtype == np.float16 else v
                for v in self.fn()
            )
            note = _overflow(*self.value)
            if note and self.layer is not None:
                self.layer.reason = "; ".join(filter(None, [self.layer.reason, note]))
        return self.value


def _fp16(x, node, name):
    """A constant operand rounded once to fp16 (the one operand rounding)."""
    return fp16_operand(x, node.describe(), name)


def place_deconv(node, ctx: Context) -> bool:
    """ConvTranspose as a stride-1 convolution on the ANE: the input's pixels spread
    ``stride`` apart with zeros between them and padded (or cropped) on the host (layout:
    data movement), the kernel flipped and its in/out channels swapped per group.  Each
    output sums the same products as the definition plus exact zeros (the MAC counts
    include those zero products; the corpus shows no deconvolution task).  True."""
    consts, types, fuse_activation, add = ctx.bound.consts, ctx.bound.types, ctx.fuse_activation, ctx.add
    from ..ops import deconv_geometry

    wb = _weights(node, consts, "transposed convolution", add)
    if wb is None:
        return True
    w, b = wb
    x_shape = types[node.inputs[0]].shape
    s, d, pads, op, _ = deconv_geometry(node, x_shape, w.shape)
    g = int(node.attrs.get("groups", 1))
    cg, mg = w.shape[0] // g, w.shape[1]
    k = w.shape[2:]
    nsp = len(k)

    def prepare():
        wc = w.reshape((g, cg, mg) + k).swapaxes(1, 2)[(Ellipsis,) + (slice(None, None, -1),) * nsp]
        with np.errstate(over="ignore"):
            return (
                _fp16(np.ascontiguousarray(wc.reshape((g * mg, cg) + k)), node, "weight"),
                None if b is None else _fp16(b, node, "bias"),
            )

    consts16 = _Lazy(prepare)
    w_shape = (g * mg, cg) + tuple(k)
    acts, fused = fuse_activation(node)
    edges = [((kk - 1) * dd - pb, (kk - 1) * dd - pe + o) for kk, dd, (pb, pe), o in zip(k, d, pads, op)]
    up = tuple((n - 1) * st + 1 for n, st in zip(x_shape[2:], s))
    x_conv = tuple(x_shape[:2]) + tuple(u + lo + hi for u, (lo, hi) in zip(up, edges))

    def spread(x):
        x = np.asarray(x)
        xu = np.zeros(x.shape[:2] + up, x.dtype)
        xu[(Ellipsis,) + tuple(slice(None, None, st) for st in s)] = x
        xu = np.pad(xu, ((0, 0), (0, 0)) + tuple((max(lo, 0), max(hi, 0)) for lo, hi in edges))
        crop = tuple(slice(max(-lo, 0), xu.shape[2 + i] - max(-hi, 0)) for i, (lo, hi) in enumerate(edges))
        return xu[(slice(None), slice(None)) + crop]

    def run(xs):
        w16, b16 = consts16()
        x = spread(xs[0])
        if nsp == 1:
            return [_api.conv1d(x, w16, b16, 1, 0, d[0], g, fused)]
        return [_api.conv2d(x, w16, b16, 1, 0, d, g, fused)]

    consts16.layer = add(
        [node] + acts,
        "ane",
        "as a stride-1 convolution: zeros between the input pixels and the "
        "padding placed on the host (layout); the MACs include the zero products",
        "mac",
        run,
        "conv1d" if nsp == 1 else "conv2d",
        lambda: _plan.conv(x_conv, w_shape, (1,) * nsp, ((0, 0),) * nsp, d, g, b is not None, fused),
        activation=_act_name(fused),
    )
    return True


def _overflow(*arrays) -> str:
    """A note when constants left the fp16 range on their way to the ANE."""
    n = sum(int(np.isinf(a).sum()) for a in arrays if a is not None)
    return f"{n} weight/bias value(s) beyond the fp16 range became inf" if n else ""


def _place_gemm_full_c(node, c, b, trans_a, types, add):
    """Gemm whose C is not one value per column: ``linear`` (x @ (alpha W)^T), then a planar
    add of ``beta C`` (broadcast to the output on the host): two ANE calls, one layer."""
    from ...lower import binary as _binary
    from ...lower.runtime import concat_stats

    at = node.attrs
    M, N = types[node.outputs[0]].shape
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    wt = b if at.get("trans_b") else b.T

    def prepare():
        with np.errstate(over="ignore"):
            w16 = _lut.fold_affine(wt, None, alpha, 0.0)[0] if alpha != 1.0 else _fp16(wt, node, "B")
            c16 = _fp16(beta * c.astype(np.float64), node, "C")
        return np.ascontiguousarray(w16), c16

    consts16 = _Lazy(prepare)
    a_shape = types[node.inputs[0]].shape

    def run(xs):
        w16, c16 = consts16()
        x = np.ascontiguousarray(np.asarray(xs[0]).T) if trans_a else xs[0]
        y = _api.linear(x, w16, None, None)
        st = _api.last_stats()
        y = _binary.add(y, c16)
        return [y], concat_stats(st, _api.last_stats())

    notes = [
        "x @ W^T on the MAC array, then beta C added by a planar task (two calls)",
        "alpha folded into the weights" if alpha != 1.0 else "",
        "A transposed on the host (layout)" if trans_a else "",
    ]
    consts16.layer = add(
        [node],
        "ane",
        "; ".join(filter(None, notes)),
        "mac",
        run,
        "linear+add",
        lambda: (
            _plan.linear(a_shape[::-1] if trans_a else a_shape, N, False, None) + _plan.binary((M, N), "add")
        ),
    )


def _act_name(fused):
    if fused is None or isinstance(fused, str):
        return fused
    return "lut block"


def place_mac(node, ctx: Context) -> bool:
    """Place a Gemm or a MatMul (with a following bias add and activation fused) on the ANE,
    or on the host with the reason, through ``ctx.add``; True."""
    a_t = ctx.bound.types[node.inputs[0]]
    if np.dtype(a_t.dtype).kind != "f":
        ctx.add([node], "host", "integer operands: the ANE multiplies fp16", "mac")
    elif node.op == "gemm":
        _place_gemm(node, ctx)
    else:
        b = ctx.bound.consts.get(node.inputs[1])
        if b is not None and b.ndim == 2 and len(a_t.shape) >= 2:
            _place_linear(node, b, ctx)
        else:
            _place_matmul(node, b, ctx)
    return True


def _place_linear(node, b, ctx: Context) -> None:
    """MatMul by a constant 2-D ``b``: ``linear``, with a following bias add fused."""
    consts, a_t = ctx.bound.consts, ctx.bound.types[node.inputs[0]]
    nodes, c = [node], None
    nxt = ctx.only(node.outputs[0])
    if nxt is not None and nxt.op == "add":  # x @ W + b: the linear's bias
        other = [t for t in nxt.inputs if t != node.outputs[0]]
        c = consts.get(other[0]) if len(other) == 1 else None
        if (
            c is not None
            and c.size == b.shape[1]
            and c.shape[-1:] == (b.shape[1],)
            and np.dtype(c.dtype).kind == "f"
        ):
            nodes.append(nxt)
        else:
            c = None

    def prepare(bias_node=nodes[-1]):
        with np.errstate(over="ignore"):
            return (
                np.ascontiguousarray(_fp16(b.T, node, "weight")),
                None if c is None else _fp16(c.reshape(-1), bias_node, "bias"),
            )

    consts16 = _Lazy(prepare)
    acts, fused = ctx.fuse_activation(nodes[-1])
    kept = []  # compressed when lossless (fastane.compress.lossless)

    def run(xs):
        wt, b16 = consts16()
        if not kept:
            kept.append(_compress.lossless(wt) if node.inputs[1] in ctx.compressed else wt)
        return [_api.linear(xs[0], kept[0], b16, fused)]

    bits = typed_bits(node.inputs[1], ctx.typed_codes, b.size)

    def problem():
        return linear_problem(a_t.shape, b.shape[1], c is not None, fused, bits)

    consts16.layer = ctx.add(
        nodes + acts,
        "ane",
        "",
        "mac",
        run,
        "linear",
        lambda: _plan.problem_stats(problem()),
        problem,
        activation=_act_name(fused),
    )


def _place_matmul(node, b, ctx: Context) -> None:
    """MatMul of a run-time ``a`` by a run-time or constant (not 2-D) ``b``: ``matmul``."""
    types = ctx.bound.types
    acts, fused = ctx.fuse_activation(node)
    a_shape, b_shape = types[node.inputs[0]].shape, types[node.inputs[1]].shape
    plan = lambda: _plan.matmul(a_shape, b_shape, fused)  # noqa: E731
    consts16 = None if b is None else _Lazy(lambda: (_fp16(b, node, "b"),))

    def run(xs):
        return [_api.matmul(xs[0], xs[1] if consts16 is None else consts16()[0], activation=fused)]

    def problem():  # a chain source where the left operand's rows are the positions (one right operand)
        p = matmul_problem(a_shape, b_shape, fused)
        return p[1] if p is not None and p[0] == "b" else None

    layer = ctx.add(
        [node] + acts, "ane", "", "mac", run, "matmul", plan, problem, activation=_act_name(fused)
    )
    if consts16 is not None:
        consts16.layer = layer


def _place_gemm(node, ctx: Context) -> None:
    """Gemm: ``linear`` with alpha folded into the weights and ``beta C`` as the bias (one
    value per column), or a planar add of ``beta C`` after it (:func:`_place_gemm_full_c`)."""
    consts, types, at = ctx.bound.consts, ctx.bound.types, node.attrs
    a_t = types[node.inputs[0]]
    b = consts.get(node.inputs[1])
    c = consts.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    has_c = len(node.inputs) > 2 and bool(node.inputs[2])
    M, N = types[node.outputs[0]].shape
    if b is None or (has_c and c is None):
        ctx.add(
            [node],
            "host",
            "Gemm with a non-constant B or C: the ANE reads weights from the compiled program",
            "mac",
        )
        return
    trans_a = bool(at.get("trans_a"))
    if has_c and (c.size not in (1, N) or (c.ndim == 2 and c.shape[0] != 1)):
        _place_gemm_full_c(node, c, b, trans_a, types, ctx.add)
        return
    acts, fused = ctx.fuse_activation(node)
    wt = b if at.get("trans_b") else b.T  # (N, K)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))

    def prepare():
        with np.errstate(over="ignore"):
            w16 = _lut.fold_affine(wt, None, alpha, 0.0)[0] if alpha != 1.0 else _fp16(wt, node, "B")
            b16 = None
            if has_c:
                b16 = _fp16(beta * np.broadcast_to(c.astype(np.float64).reshape(-1), (N,)), node, "C")
        return np.ascontiguousarray(w16), b16

    consts16 = _Lazy(prepare)
    notes = [
        "alpha folded into the weights (rounded once to fp16)" if alpha != 1.0 else "",
        "A transposed on the host (layout)" if trans_a else "",
    ]

    def run(xs):
        w16, b16 = consts16()
        x = np.ascontiguousarray(np.asarray(xs[0]).T) if trans_a else xs[0]
        return [_api.linear(x, w16, b16, fused)]

    consts16.layer = ctx.add(
        [node] + acts,
        "ane",
        "; ".join(filter(None, notes)),
        "mac",
        run,
        "linear",
        lambda: _plan.linear(a_t.shape[::-1] if trans_a else a_t.shape, N, has_c, fused),
        None if trans_a else (lambda: linear_problem(a_t.shape, N, has_c, fused)),
        activation=_act_name(fused),
    )
