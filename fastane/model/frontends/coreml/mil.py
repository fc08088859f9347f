"""The Core ML importer's MIL op mapping: the ``MIL_OPS`` table and the op handlers
(see :mod:`fastane.model.frontends.coreml.importer`, the entry point; the layout ops are in
:mod:`fastane.model.frontends.coreml.mil_layout`)."""

from __future__ import annotations

import math

import numpy as np

from ....errors import ModelError, quote
from ...budget import MAX_RANK
from ...ops import OPS
from ...ops.core import compose_reduction
from .blob import MIL_DTYPE, const_op, constexpr, is_placeholder


# ------------------------------------------------------------------ MIL op mapping
MIL_OPS: dict = {}


def mil_op(*names):
    """Decorator: register the handler it decorates in :data:`MIL_OPS` under each of ``names``."""

    def deco(fn):
        for n in names:
            MIL_OPS[n] = fn
        return fn

    return deco


for _n in (
    "constexpr_affine_dequantize",
    "constexpr_blockwise_shift_scale",
    "constexpr_cast",
    "constexpr_lut_to_dense",
    "constexpr_sparse_to_dense",
    "constexpr_lut_to_sparse",
    "constexpr_sparse_blockwise_shift_scale",
):
    MIL_OPS[_n] = constexpr
MIL_OPS["const"] = const_op

#: MIL op -> (fastane op, its MIL operands): the records' one-to-one MIL names (``OpDef.mil``)
_PLAIN = {m.name: (op, m.operands) for op, d in OPS.items() for m in d.mil}


def scalar_value(v, what, key):
    """The one value of ``v`` (input ``key``) as a float; a ModelError if it is not a scalar."""
    a = np.asarray(v)
    if a.size != 1:
        raise ModelError(f"{what}: {key} must be a scalar, got shape {a.shape}")
    return float(a.reshape(-1)[0])


def axis_list(v, rank: int, what: str, key: str = "axes") -> list:
    """The axes ``v`` of a ``rank``-D tensor as non-negative ints (MIL counts a negative axis
    from the end, as coremltools writes a transpose's ``perm``); a ModelError for an axis
    out of range or given twice."""
    if np.size(v) > MAX_RANK:  # before any int(): a constant can hold millions
        raise ModelError(f"{what}: {key} has {np.size(v)} values for a {rank}-D tensor")
    ax = [int(a) for a in np.asarray(v).reshape(-1)]
    bad = [a for a in ax if not -rank <= a < rank]
    if bad:
        raise ModelError(f"{what}: {key} {ax}: axis {bad[0]} is out of range for a {rank}-D tensor")
    norm = [a % rank for a in ax]
    if len(set(norm)) != len(norm):
        raise ModelError(f"{what}: {key} {ax} names an axis twice")
    return norm


@mil_op(*_PLAIN)
def _plain_op(p, op, outs, what):
    fop, operands = _PLAIN[op.type]
    p.emit(fop, [p.arg(op, k, what) for k in operands], outs[:1], source=op.type)


@mil_op("relu6")
def _relu6(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("clip", [x, p.const(0.0, np.float32), p.const(6.0, np.float32)], outs, source="relu6")


@mil_op("clip")
def _clip(p, op, outs, what):
    x = p.arg(op, "x", what)
    lo = scalar_value(p.cval(op, "alpha", what), what, "alpha")
    hi = scalar_value(p.cval(op, "beta", what), what, "beta")
    p.emit("clip", [x, p.const(lo, np.float32), p.const(hi, np.float32)], outs, source="clip")


@mil_op("leaky_relu", "elu")
def _alpha_act(p, op, outs, what):
    x = p.arg(op, "x", what)
    alpha = scalar_value(p.cval(op, "alpha", what, 0.01 if op.type == "leaky_relu" else 1.0), what, "alpha")
    p.emit(op.type, [x], outs, {"alpha": alpha}, source=op.type)


@mil_op("gelu")
def _gelu(p, op, outs, what):
    x = p.arg(op, "x", what)
    mode = str(np.asarray(p.cval(op, "mode", what, "EXACT")).reshape(-1)[0])
    if mode == "EXACT":
        p.emit("gelu", [x], outs, {"approximate": "none"}, source="gelu")
    elif mode == "TANH_APPROXIMATION":
        p.emit("gelu", [x], outs, {"approximate": "tanh"}, source="gelu(tanh)")
    elif mode == "SIGMOID_APPROXIMATION":  # x * sigmoid(1.702 x)
        t = p.emit("mul", [x, p.const(1.702, np.float32)], [p.tmp()], source="gelu(sigmoid)")
        s = p.emit("sigmoid", [t], [p.tmp()], source="gelu(sigmoid)")
        p.emit("mul", [x, s], outs, source="gelu(sigmoid)")
    else:
        raise ModelError(f"{what}: unknown gelu mode {quote(mode)}")


@mil_op("silu")
def _silu(p, op, outs, what):
    x = p.arg(op, "x", what)
    s = p.emit("sigmoid", [x], [p.tmp()], source="silu")
    p.emit("mul", [x, s], outs, source="(x*)")


@mil_op("softplus")
def _softplus(p, op, outs, what):  # log(1 + exp(x)): the plain composition, no safeguard
    x = p.arg(op, "x", what)
    e = p.emit("exp", [x], [p.tmp()], source="softplus")
    a = p.emit("add", [e, p.const(1.0, np.float32)], [p.tmp()], source="softplus")
    p.emit("log", [a], outs, source="softplus")


@mil_op("softsign")
def _softsign(p, op, outs, what):  # x / (1 + |x|)
    x = p.arg(op, "x", what)
    a = p.emit("abs", [x], [p.tmp()], source="softsign")
    d = p.emit("add", [a, p.const(1.0, np.float32)], [p.tmp()], source="softsign")
    p.emit("div", [x, d], outs, source="softsign")


@mil_op("scaled_tanh")
def _scaled_tanh(p, op, outs, what):  # alpha * tanh(beta * x)
    x = p.arg(op, "x", what)
    al = scalar_value(p.cval(op, "alpha", what, 1.0), what, "alpha")
    be = scalar_value(p.cval(op, "beta", what, 1.0), what, "beta")
    t = p.emit("mul", [x, p.const(be, np.float32)], [p.tmp()], source="scaled_tanh")
    t = p.emit("tanh", [t], [p.tmp()], source="scaled_tanh")
    p.emit("mul", [t, p.const(al, np.float32)], outs, source="scaled_tanh")


@mil_op("sigmoid_hard")
def _hard_sigmoid(p, op, outs, what):
    x = p.arg(op, "x", what)
    al = scalar_value(p.cval(op, "alpha", what, 0.2), what, "alpha")
    be = scalar_value(p.cval(op, "beta", what, 0.5), what, "beta")
    p.emit("hard_sigmoid", [x], outs, {"alpha": al, "beta": be}, source="sigmoid_hard")


@mil_op("clamped_relu")
def _clamped_relu(p, op, outs, what):  # min(max(x, 0), beta) + alpha * min(x, 0)
    x = p.arg(op, "x", what)
    al = scalar_value(p.cval(op, "alpha", what), what, "alpha")
    be = scalar_value(p.cval(op, "beta", what), what, "beta")
    pos = p.emit(
        "clip", [x, p.const(0.0, np.float32), p.const(be, np.float32)], [p.tmp()], source="clamped_relu"
    )
    neg = p.emit("min", [x, p.const(0.0, np.float32)], [p.tmp()], source="clamped_relu")
    neg = p.emit("mul", [neg, p.const(al, np.float32)], [p.tmp()], source="clamped_relu")
    p.emit("add", [pos, neg], outs, source="clamped_relu")


@mil_op("thresholded_relu")
def _thresholded_relu(p, op, outs, what):  # x if x > alpha else 0
    x = p.arg(op, "x", what)
    al = scalar_value(p.cval(op, "alpha", what, 1.0), what, "alpha")
    c = p.emit("greater", [x, p.const(al, np.float32)], [p.tmp()], source="thresholded_relu")
    p.emit("where", [c, x, p.const(0.0, np.float32)], outs, source="thresholded_relu")


@mil_op("prelu")
def _prelu(p, op, outs, what):
    x = p.arg(op, "x", what)
    al = p.cval(op, "alpha", what)
    rank = p.rank_of(x, what)
    slope = np.asarray(al, np.float32).reshape((-1,) + (1,) * max(rank - 2, 0))
    p.emit("prelu", [x, p.const(slope)], outs, source="prelu")


@mil_op("square")
def _square(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit("pow", [x, p.const(2.0, np.float32)], outs, source="square")


@mil_op("inverse", "rsqrt")
def _inverse(p, op, outs, what):  # 1 / (x + eps), 1 / sqrt(x + eps): the epsilon added first
    x = p.arg(op, "x", what)
    eps = scalar_value(p.cval(op, "epsilon", what, 1e-4 if op.type == "inverse" else 1e-12), what, "epsilon")
    t = p.emit("add", [x, p.const(eps, np.float32)], [p.tmp()], source=op.type) if eps else x
    p.emit("reciprocal" if op.type == "inverse" else "rsqrt", [t], outs, source=op.type)


@mil_op("exp2")
def _exp2(p, op, outs, what):  # the NE's exp2 table (Apple's exp is exp2 after a scale)
    p.emit("exp2", [p.arg(op, "x", what)], outs, source="exp2")


@mil_op("greater_equal", "less_equal", "not_equal")
def _negated_compare(p, op, outs, what):  # not(x < y), not(x > y), not(x == y): a select of bools
    x, y = p.arg(op, "x", what), p.arg(op, "y", what)
    base = {"greater_equal": "less", "less_equal": "greater", "not_equal": "equal"}[op.type]
    c = p.emit(base, [x, y], [p.tmp()], source=op.type)
    p.emit("where", [c, p.const(np.False_), p.const(np.True_)], outs, source=op.type)


@mil_op("logical_not")
def _logical_not(p, op, outs, what):
    p.emit("where", [p.arg(op, "x", what), p.const(np.False_), p.const(np.True_)], outs, source="logical_not")


@mil_op("shape")
def _shape(p, op, outs, what):
    p.emit("shape", [p.arg(op, "x", what)], outs, source="shape")


@mil_op("fill")
def _fill(p, op, outs, what):  # a constant broadcast to a (constant) shape
    shape = p.arg(op, "shape", what)
    v = np.asarray(p.cval(op, "value", what, 0.0))
    p.emit(
        "expand", [p.const(v.astype(np.float32) if v.dtype.kind == "f" else v), shape], outs, source="fill"
    )


@mil_op("range_1d")
def _range_1d(p, op, outs, what):
    p.emit(
        "range",
        [p.arg(op, "start", what), p.arg(op, "end", what), p.arg(op, "step", what)],
        outs,
        source="range_1d",
    )


@mil_op("scaled_dot_product_attention")
def _sdpa(p, op, outs, what):
    """softmax(q k^T / sqrt(d) + mask) v, the plain composition (iOS18's op): two matmuls,
    a planar scale, the mask added (a boolean mask as 0 / -inf, the op's definition)."""
    q, k, v = p.arg(op, "query", what), p.arg(op, "key", what), p.arg(op, "value", what)
    mask = p.arg(op, "attn_mask", what, required=False)
    kshape = p.rank_hint(k)
    r = p.rank_of(k, what)
    d = kshape[-1]
    if isinstance(d, str):
        raise ModelError(f"{what}: the embedding dimension of key is symbolic")
    perm = list(range(r))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = p.emit("transpose", [k], [p.tmp()], {"perm": perm}, source="sdpa")
    sc = p.emit("matmul", [q, kt], [p.tmp()], source="sdpa")
    sc = p.emit("mul", [sc, p.const(1.0 / math.sqrt(d), np.float32)], [p.tmp()], source="sdpa")
    if mask:
        if mask in p.consts and p.consts[mask].dtype == np.bool_:
            mask = p.const(np.where(p.consts[mask], 0.0, -np.inf).astype(np.float32))
        elif mask not in p.consts:
            raise ModelError(f"{what}: a run-time attention mask is not supported (a constant one is)")
        sc = p.emit("add", [sc, mask], [p.tmp()], source="sdpa")
    a = p.emit("softmax", [sc], [p.tmp()], {"axis": -1}, source="sdpa")
    p.emit("matmul", [a, v], outs, source="sdpa")


@mil_op("select")
def _select(p, op, outs, what):
    p.emit(
        "where", [p.arg(op, "cond", what), p.arg(op, "a", what), p.arg(op, "b", what)], outs, source="select"
    )


@mil_op("cast")
def _cast(p, op, outs, what):
    x = p.arg(op, "x", what)
    to = str(np.asarray(p.cval(op, "dtype", what)).reshape(-1)[0])
    if to not in MIL_DTYPE:
        raise ModelError(f"{what}: cast to {quote(to)} is not supported")
    dt = np.dtype(MIL_DTYPE[to])
    if dt == np.float16:  # the fp16 rounding, then on in float32 (the graph's float type)
        t = p.emit("cast", [x], [p.tmp()], {"to": dt}, source="cast(fp16)")
        p.emit("cast", [t], outs, {"to": np.dtype(np.float32)}, source="cast(fp16)")
    elif dt.kind == "f":
        p.emit("cast", [x], outs, {"to": np.dtype(np.float32)}, source="cast")
    else:
        p.emit("cast", [x], outs, {"to": dt}, source="cast")


def _pads_mil(p, op, what, nsp):
    pad_type = str(np.asarray(p.cval(op, "pad_type", what, "valid")).reshape(-1)[0]).lower()
    if pad_type == "custom":
        pad = np.asarray(p.cval(op, "pad", what, np.zeros(2 * nsp, np.int64))).reshape(-1)
        if pad.size != 2 * nsp:
            raise ModelError(f"{what}: pad {pad.tolist()} must have {2 * nsp} values")
        return None, tuple((int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(nsp))
    table = {"valid": "valid", "same": "same_upper", "same_lower": "same_lower"}
    if pad_type not in table:
        raise ModelError(f"{what}: unknown pad_type {quote(pad_type)}")
    return table[pad_type], None


def int_tuple(v, default=None):
    """``v`` flattened to a tuple of ints (None stays None)."""
    return None if v is None else tuple(int(x) for x in np.asarray(v).reshape(-1))


@mil_op("conv", "conv_transpose")
def _conv(p, op, outs, what):
    x, w = p.arg(op, "x", what), p.arg(op, "weight", what)
    b = p.arg(op, "bias", what, required=False)
    wshape = p.rank_hint(w)
    nsp = len(wshape) - 2 if wshape is not None else 2
    auto, pads = _pads_mil(p, op, what, nsp)
    attrs = {
        "strides": int_tuple(p.cval(op, "strides", what)),
        "dilations": int_tuple(p.cval(op, "dilations", what)),
        "pads": pads,
        "auto_pad": auto,
        "groups": int(scalar_value(p.cval(op, "groups", what, 1), what, "groups")),
    }
    if op.type == "conv_transpose":
        osh = p.cval(op, "output_shape", what)
        attrs["output_shape"] = int_tuple(osh)
        if attrs["auto_pad"] == "valid":
            attrs["auto_pad"] = None
    p.emit(op.type, [x, w] + ([b] if b else []), outs, attrs, source=op.type)


@mil_op("linear")
def _linear(p, op, outs, what):  # x @ W^T + b: matmul by the constant W^T, then add
    x = p.arg(op, "x", what)
    w = p.cval(op, "weight", what)
    if w is None:
        raise ModelError(f"{what}: missing parameter 'weight'")
    if w.ndim != 2:
        raise ModelError(f"{what}: weight must be 2-D, got shape {w.shape}")
    b = p.cval(op, "bias", what)
    wt = p.const(
        np.broadcast_to(np.zeros((), w.dtype), w.shape[::-1])
        if is_placeholder(w)
        else np.ascontiguousarray(w.T)
    )
    # W^T is a new constant: the matmul names the compressed one it comes from (the placement
    # estimate reads it, predict.py)
    (arg,) = op.inputs["weight"].arguments
    stored = p.alias.get(arg.name, arg.name) if arg.WhichOneof("binding") == "name" else ""
    attrs = {"compressed_weight": stored} if stored in p.compressed else None
    if b is None:
        p.emit("matmul", [x, wt], outs, attrs, source="linear")
    else:
        t = p.emit("matmul", [x, wt], [p.tmp()], attrs, source="linear")
        p.emit("add", [t, p.const(np.asarray(b, np.float32).reshape(-1))], outs, source="(bias)")


@mil_op("matmul")
def _matmul(p, op, outs, what):
    xs = []
    for key, tk in (("x", "transpose_x"), ("y", "transpose_y")):
        t = p.arg(op, key, what)
        if bool(np.asarray(p.cval(op, tk, what, False)).reshape(-1)[0]):
            if t in p.consts:
                c = np.swapaxes(p.consts[t], -1, -2)
                t = p.const(
                    np.broadcast_to(np.zeros((), c.dtype), c.shape)
                    if is_placeholder(c)
                    else np.ascontiguousarray(c)
                )
            else:
                r = p.rank_hint(t)
                if r is None:
                    raise ModelError(f"{what}: {tk} on a tensor of unknown rank")
                perm = list(range(len(r)))
                perm[-1], perm[-2] = perm[-2], perm[-1]
                t = p.emit("transpose", [t], [p.tmp()], {"perm": perm}, source="matmul(transpose)")
        xs.append(t)
    p.emit("matmul", xs, outs, source="matmul")


@mil_op("batch_norm")
def _batch_norm(p, op, outs, what):
    x = p.arg(op, "x", what)
    mean, var = p.cval(op, "mean", what), p.cval(op, "variance", what)
    c = np.asarray(mean).size
    g = p.cval(op, "gamma", what, np.ones(c, np.float32))
    be = p.cval(op, "beta", what, np.zeros(c, np.float32))
    eps = scalar_value(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
    ins = [x] + [p.const(np.asarray(v, np.float32).reshape(-1)) for v in (g, be, mean, var)]
    p.emit("batchnorm", ins, outs, {"epsilon": eps}, source="batch_norm")


@mil_op("layer_norm", "instance_norm")
def _layer_norm(p, op, outs, what):
    x = p.arg(op, "x", what)
    r = p.rank_of(x, what)
    if op.type == "instance_norm":  # per sample and channel over the spatial axes
        axes = list(range(2, r))
        g, be = p.cval(op, "gamma", what), p.cval(op, "beta", what)
        eps = scalar_value(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
        sh = (-1,) + (1,) * (r - 2)
        g = None if g is None else np.asarray(g, np.float32).reshape(sh)
        be = None if be is None else np.asarray(be, np.float32).reshape(sh)
        t = p.emit(
            "layer_norm",
            [x, p.const(np.ones(1, np.float32))],
            [p.tmp()],
            {"axis": 2, "epsilon": eps},
            source="instance_norm",
        )
        if g is not None:
            t = p.emit("mul", [t, p.const(g)], [p.tmp()] if be is not None else outs, source="instance_norm")
        if be is not None:
            t = p.emit("add", [t, p.const(be)], outs, source="instance_norm")
        if g is None and be is None:
            p.emit("identity", [t], outs, source="instance_norm")
        return
    axes = p.cval(op, "axes", what)
    axes = sorted(axis_list(axes, r, what)) if axes is not None else list(range(r))
    g, be = p.cval(op, "gamma", what), p.cval(op, "beta", what)
    eps = scalar_value(p.cval(op, "epsilon", what, 1e-5), what, "epsilon")
    # axes that are not the trailing ones (a channel layer_norm of a (B, C, 1, S) tensor, as
    # Apple's ml-ane-transformers writes it): moved last in their order, normalised there
    # (gamma and beta have the normalised axes' shape either way), moved back
    perm = [a for a in range(r) if a not in axes] + axes
    moved = perm != list(range(r))
    if moved:
        x = p.emit("transpose", [x], [p.tmp()], {"perm": perm}, source="layer_norm(axes)")
    ins = [x, p.const(np.ones(1, np.float32) if g is None else np.asarray(g, np.float32))]
    if be is not None:
        ins.append(p.const(np.asarray(be, np.float32)))
    first = r - len(axes) if axes else r
    y = p.emit(
        "layer_norm", ins, [p.tmp()] if moved else outs, {"axis": first, "epsilon": eps}, source="layer_norm"
    )
    if moved:
        p.emit(
            "transpose", [y], outs, {"perm": [int(a) for a in np.argsort(perm)]}, source="layer_norm(axes)"
        )


@mil_op("softmax")
def _softmax(p, op, outs, what):
    x = p.arg(op, "x", what)
    p.emit(
        "softmax",
        [x],
        outs,
        {"axis": int(scalar_value(p.cval(op, "axis", what, -1), what, "axis"))},
        source="softmax",
    )


_RED = {
    "reduce_sum": "reduce_sum",
    "reduce_mean": "reduce_mean",
    "reduce_max": "reduce_max",
    "reduce_min": "reduce_min",
}


#: MIL's reductions of a function -> their composition
#: (:data:`fastane.model.ops.core.COMPOSED_REDUCTIONS`)
_COMPOSED = {
    "reduce_log_sum_exp": "log_sum_exp",
    "reduce_sum_square": "sum_square",
    "reduce_l2_norm": "l2",
    "reduce_log_sum": "log_sum",
    "reduce_l1_norm": "l1",
}


@mil_op(*_RED, *_COMPOSED)
def _reduce(p, op, outs, what):
    x = p.arg(op, "x", what)
    axes = p.cval(op, "axes", what)
    keep = int(bool(np.asarray(p.cval(op, "keep_dims", what, False)).reshape(-1)[0]))
    ax = [] if axes is None else [p.const(np.asarray(axes, np.int64).reshape(-1))]
    at = {"keepdims": keep}
    src = op.type
    if op.type in _RED:
        p.emit(_RED[op.type], [x] + ax, outs, at, source=src)
        return

    def emit(name, inputs, last):
        red = name == "reduce_sum"
        return p.emit(
            name, inputs + (ax if red else []), outs if last else [p.tmp()], at if red else None, source=src
        )

    compose_reduction(_COMPOSED[op.type], x, emit, lambda v: p.const(v, np.float32))


@mil_op("max_pool", "avg_pool")
def _pool(p, op, outs, what):
    x = p.arg(op, "x", what)
    k = int_tuple(p.cval(op, "kernel_sizes", what))
    if not k:
        raise ModelError(f"{what}: kernel_sizes is required")
    auto, pads = _pads_mil(p, op, what, len(k))
    attrs = {
        "kernel": k,
        "strides": int_tuple(p.cval(op, "strides", what)),
        "pads": pads,
        "auto_pad": auto,
        "ceil_mode": int(bool(np.asarray(p.cval(op, "ceil_mode", what, False)).reshape(-1)[0])),
    }
    if op.type == "avg_pool":
        ex = bool(np.asarray(p.cval(op, "exclude_padding_from_average", what, False)).reshape(-1)[0])
        attrs["count_include_pad"] = int(not ex)
    p.emit(op.type, [x], outs, attrs, source=op.type)
