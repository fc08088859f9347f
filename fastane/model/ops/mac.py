"""The MAC ops of the vocabulary (matmul, gemm, conv, batchnorm, conv_transpose): shape
inference and float32 host implementations, with their geometry (see :mod:`fastane.model.ops`)."""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelError, ModelNotImplementedError, quote
from .opdef import HostCost, OnnxName, broadcast_shape, need_float, need_input, register_op
from ..tensor import TensorType, check_size


# ------------------------------------------------------------------------ ONNX attributes
def onnx_pads(a, nsp, where):
    """ONNX ``pads`` (all begins, then all ends) of the attributes ``a`` as ``(begin, end)``
    pairs for ``nsp`` spatial axes; None when absent."""
    p = a.get("pads")
    if p is None:
        return None
    if len(p) != 2 * nsp:
        raise ModelError(f"{where}: pads has {len(p)} values, {nsp} spatial axes need {2 * nsp}")
    return tuple((int(p[i]), int(p[i + nsp])) for i in range(nsp))


def onnx_auto_pad(a, where):
    """ONNX ``auto_pad`` as None, "same_upper", "same_lower" or "valid"."""
    v = a.get("auto_pad", "NOTSET")
    table = {"NOTSET": None, "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}
    if v not in table:
        raise ModelError(f"{where}: unknown auto_pad {quote(v)}")
    return table[v]


def onnx_conv_attrs(c, a, w) -> dict:
    """The attributes ONNX Conv, ConvTranspose and QLinearConv share, for weight ``w``."""
    nsp = c.rank_of(w) - 2 if c.rank_of(w) else len(a.get("kernel_shape", ())) or 2
    return {
        "strides": a.get("strides"),
        "dilations": a.get("dilations"),
        "pads": onnx_pads(a, nsp, c.where),
        "auto_pad": onnx_auto_pad(a, c.where),
        "groups": a.get("group", 1),
    }


# ------------------------------------------------------------------------ MAC ops
def _matmul_infer(node, types, consts):
    a, b = need_float(need_input(types, 0, node), node), need_float(need_input(types, 1, node), node, 1)
    if a.dtype != b.dtype:
        raise ModelError(f"{node.describe()}: operand dtypes differ: {a} and {b}")
    sa, sb = a.shape, b.shape
    if not sa or not sb:
        raise ModelError(f"{node.describe()}: MatMul operands must be at least 1-D, got {a} and {b}")
    A = (1,) + sa if len(sa) == 1 else sa
    B = sb + (1,) if len(sb) == 1 else sb
    if A[-1] != B[-2]:
        raise ModelError(f"{node.describe()}: inner dimensions differ: {a} @ {b}")
    batch = broadcast_shape([A[:-2], B[:-2]], node)
    out = batch + (A[-2], B[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return [TensorType(a.dtype, out)]


def _matmul_cost(node, in_types, out_types):
    return HostCost(macs=math.prod(out_types[0].shape) * in_types[0].shape[-1], elem_ops=0)


@register_op("matmul", _matmul_infer, "mac", ane="mac", onnx=["MatMul"], cost=_matmul_cost)
def _matmul(node, a, b):
    return np.matmul(a, b)


def _gemm_dims(node, types):
    a, b = need_float(need_input(types, 0, node), node), need_float(need_input(types, 1, node), node, 1)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ModelError(f"{node.describe()}: Gemm operands must be 2-D, got {a} and {b}")
    M, K = a.shape[::-1] if node.attrs.get("trans_a") else a.shape
    K2, N = b.shape[::-1] if node.attrs.get("trans_b") else b.shape
    if K != K2:
        raise ModelError(
            f"{node.describe()}: inner dimensions differ: {a} and {b} "
            f"(trans_a={node.attrs.get('trans_a', 0)}, trans_b={node.attrs.get('trans_b', 0)})"
        )
    return a, M, K, N


def _gemm_infer(node, types, consts):
    a, M, K, N = _gemm_dims(node, types)
    if len(types) > 2 and types[2] is not None:
        c = types[2].shape
        if broadcast_shape([c, (M, N)], node) != (M, N):
            raise ModelError(f"{node.describe()}: C of shape {c} does not broadcast to ({M}, {N})")
    return [TensorType(a.dtype, (M, N))]


def _gemm_onnx(c, a, ins):
    return c.mk(
        {
            "alpha": a.get("alpha", 1.0),
            "beta": a.get("beta", 1.0),
            "trans_a": a.get("transA", 0),
            "trans_b": a.get("transB", 0),
        }
    )


def _gemm_cost(node, in_types, out_types):
    a, n_out = in_types[0].shape, math.prod(out_types[0].shape)
    k = a[0] if node.attrs.get("trans_a") else a[-1]
    return HostCost(4 * n_out, n_out * k, 0)  # a temporary: alpha * (a @ b)


@register_op("gemm", _gemm_infer, "mac", ane="mac", onnx=[OnnxName("Gemm", _gemm_onnx)], cost=_gemm_cost)
def _gemm(node, a, b, c=None):
    if node.attrs.get("trans_a"):
        a = a.T
    if node.attrs.get("trans_b"):
        b = b.T
    y = np.float32(node.attrs.get("alpha", 1.0)) * (a @ b)
    if c is not None:
        y = y + np.float32(node.attrs.get("beta", 1.0)) * c
    return y


def conv_geometry(node, x_shape, w_shape, transpose=False):
    """``(strides, dilations, pads ((b, e) per axis), out_spatial)`` of a conv or pool over
    ``x_shape`` with kernel spatial shape ``w_shape``; ``auto_pad`` resolved here."""
    nsp = len(x_shape) - 2
    k = tuple(int(v) for v in w_shape)
    s = tuple(int(v) for v in node.attrs.get("strides") or (1,) * nsp)
    d = tuple(int(v) for v in node.attrs.get("dilations") or (1,) * nsp)
    if len(k) != nsp or len(s) != nsp or len(d) != nsp:
        raise ModelError(
            f"{node.describe()}: kernel {k}, strides {s}, dilations {d} do not match "
            f"the input's {nsp} spatial axes"
        )
    if min(s + d + k, default=1) < 1:
        raise ModelError(f"{node.describe()}: kernel {k}, strides {s} and dilations {d} must be >= 1")
    auto = node.attrs.get("auto_pad")
    pads = tuple(tuple(int(v) for v in p) for p in node.attrs.get("pads") or ((0, 0),) * nsp)
    if len(pads) != nsp or any(min(p) < 0 for p in pads):
        raise ModelError(f"{node.describe()}: pads {pads} invalid for {nsp} spatial axes")
    sp = x_shape[2:]
    ceil = bool(node.attrs.get("ceil_mode", 0))
    if auto in ("same_upper", "same_lower"):
        out = tuple(-(-n // st) for n, st in zip(sp, s))
        pads = []
        for n, o, st, kk, dd in zip(sp, out, s, k, d):
            tot = max(0, (o - 1) * st + (kk - 1) * dd + 1 - n)
            lo = tot // 2 if auto == "same_upper" else tot - tot // 2
            pads.append((lo, tot - lo))
        pads = tuple(pads)
    elif auto == "valid":
        pads = ((0, 0),) * nsp
    out = []
    for n, (pb, pe), st, kk, dd in zip(sp, pads, s, k, d):
        span = (kk - 1) * dd + 1
        num = n + pb + pe - span
        if num < 0:
            raise ModelError(
                f"{node.describe()}: the padded input ({n + pb + pe}) is smaller than "
                f"the dilated kernel ({span})"
            )
        o = (-(-num // st) if ceil else num // st) + 1
        if ceil and (o - 1) * st >= n + pb:  # the last window must start inside the input
            o -= 1
        out.append(o)
    return s, d, pads, tuple(out)


def _conv_operands(node, types, what: str):
    """The input and weight types of a conv-like node (1-D or 2-D) and its groups."""
    x, w = need_float(need_input(types, 0, node), node), need_float(need_input(types, 1, node), node, 1)
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise ModelError(
            f"{node.describe()}: fastane supports 1-D and 2-D {what} (input N x C x "
            f"[H x] W, weight of the same rank), got input {x} and weight {w}"
        )
    return x, w, int(node.attrs.get("groups", 1))


def _conv_infer(node, types, consts):
    x, w, g = _conv_operands(node, types, "convolutions")
    C, CO, CG = x.shape[1], w.shape[0], w.shape[1]
    if g < 1 or CO % g or C != CG * g:
        raise ModelError(
            f"{node.describe()}: group={g}: input has {C} channels, weight {w} expects "
            f"{CG} per group and {CO} outputs divisible by the groups"
        )
    if len(types) > 2 and types[2] is not None and types[2].shape != (CO,):
        raise ModelError(f"{node.describe()}: bias must have shape ({CO},), got {types[2]}")
    *_, out = conv_geometry(node, x.shape, w.shape[2:])
    return [TensorType(x.dtype, (x.shape[0], CO) + out)]


def conv_windows(xp, k, s, d, out):
    """Yield ``(kernel index, window view)`` over a padded N x C x spatial array."""
    import itertools

    for idx in itertools.product(*(range(kk) for kk in k)):
        sl = tuple(slice(i * dd, i * dd + (o - 1) * st + 1, st) for i, dd, st, o in zip(idx, d, s, out))
        yield idx, xp[(slice(None), slice(None)) + sl]


def conv_onnx(c, a, ins):
    """The parse of ONNX Conv (and ConvInteger)."""
    return c.mk({**onnx_conv_attrs(c, a, ins[1]), "kernel": a.get("kernel_shape")})


def padded_sizes(node, x_shape, k_shape) -> tuple:
    """``(padded spatial size, out spatial size)`` of a convolution or pooling window
    ``k_shape`` over ``x_shape`` (element counts)."""
    _, _, pads, out = conv_geometry(node, x_shape, k_shape)
    return math.prod(n + pb + pe for n, (pb, pe) in zip(x_shape[2:], pads)), math.prod(out)


def _conv_cost(node, in_types, out_types):
    x, w = in_types[0].shape, in_types[1].shape
    padded, out = padded_sizes(node, x, w[2:])
    n, c = x[:2]
    n_out = math.prod(out_types[0].shape)
    temp = (n * c * padded + n * c * out + n_out) * 4  # padded input, a window's patch, its product
    return HostCost(temp, n_out * math.prod(w[1:]), 0, taps=math.prod(w[2:]))


@register_op("conv", _conv_infer, "mac", ane="conv", onnx=[OnnxName("Conv", conv_onnx)], cost=_conv_cost)
def _conv(node, x, w, b=None):
    s, d, pads, out = conv_geometry(node, x.shape, w.shape[2:])
    g = int(node.attrs.get("groups", 1))
    N, C = x.shape[:2]
    CO, CG = w.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    y = np.zeros((N, g, CO // g) + out, np.result_type(x.dtype, w.dtype))  # int64: conv_integer
    wg = w.reshape((g, CO // g, CG) + w.shape[2:])
    for idx, win in conv_windows(xp, w.shape[2:], s, d, out):
        patch = win.reshape((N, g, CG) + out)
        y += np.einsum("ngc...,goc->ngo...", patch, wg[(Ellipsis,) + idx], optimize=True)
    y = y.reshape((N, CO) + out)
    if b is not None:
        y += b.reshape((1, CO) + (1,) * len(out))
    return y


def _bn_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    if len(x.shape) < 2:
        raise ModelError(f"{node.describe()}: input must be at least 2-D, got {x}")
    for i in range(1, 5):
        t = need_input(types, i, node)
        if t.shape != (x.shape[1],):
            raise ModelError(f"{node.describe()}: input {i} must have shape ({x.shape[1]},), got {t}")
    return [x]


def bn_affine(node, scale, bias, mean, var):
    """BatchNormalization as ``a * x + c`` per channel (float64)."""
    eps = float(node.attrs.get("epsilon", 1e-5))
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return a, bias.astype(np.float64) - a * mean.astype(np.float64)


def _bn_onnx(c, a, ins):
    if a.get("training_mode", 0):
        raise ModelNotImplementedError(f"{c.where}: training mode is not supported")
    return c.mk({"epsilon": a.get("epsilon", 1e-5)})


@register_op(
    "batchnorm",
    _bn_infer,
    "mac",
    onnx=[OnnxName("BatchNormalization", _bn_onnx, doc="after a Conv: folded into it")],
)
def _bn(node, x, scale, bias, mean, var):
    eps = np.float32(node.attrs.get("epsilon", 1e-5))
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) * scale.reshape(sh) + bias.reshape(sh)


# ------------------------------------------------------------------------ transposed conv
def deconv_geometry(node, x_shape, w_shape):
    """``(strides, dilations, pads ((b, e) per axis), output_padding, out_spatial)`` of a
    transposed convolution (ONNX ConvTranspose semantics; ``output_shape`` and ``auto_pad``
    resolved here)."""
    nsp = len(x_shape) - 2
    k = tuple(int(v) for v in w_shape[2:])
    s = tuple(int(v) for v in node.attrs.get("strides") or (1,) * nsp)
    d = tuple(int(v) for v in node.attrs.get("dilations") or (1,) * nsp)
    op = tuple(int(v) for v in node.attrs.get("output_padding") or (0,) * nsp)
    if not len(k) == len(s) == len(d) == len(op) == nsp or min(s + d + k, default=1) < 1:
        raise ModelError(
            f"{node.describe()}: kernel {k}, strides {s}, dilations {d}, output_padding "
            f"{op} do not fit the input's {nsp} spatial axes"
        )
    if any(o >= max(st, dd) for o, st, dd in zip(op, s, d)):
        raise ModelError(
            f"{node.describe()}: output_padding {op} must be smaller than the stride or the dilation"
        )
    sp = x_shape[2:]
    full = tuple(st * (n - 1) + o + (kk - 1) * dd + 1 for n, st, o, kk, dd in zip(sp, s, op, k, d))
    out_shape = node.attrs.get("output_shape")
    auto = node.attrs.get("auto_pad")
    if out_shape is None and auto in ("same_upper", "same_lower"):
        out_shape = tuple(n * st for n, st in zip(sp, s))
    if out_shape is not None:
        out_shape = tuple(int(v) for v in out_shape)[-nsp:]
        if len(out_shape) != nsp:
            raise ModelError(f"{node.describe()}: output_shape {out_shape} does not fit {nsp} spatial axes")
        pads = []
        for f, o in zip(full, out_shape):
            tot = f - o  # < 0: the output extends past the full result (zeros)
            pads.append((tot // 2, tot - tot // 2) if auto == "same_upper" else (tot - tot // 2, tot // 2))
        pads = tuple(pads)
        check_size(tuple(x_shape[:1]) + out_shape, node.describe())
    elif auto == "valid" or node.attrs.get("pads") is None:
        pads = ((0, 0),) * nsp
    else:
        pads = tuple(tuple(int(v) for v in p) for p in node.attrs["pads"])
        if len(pads) != nsp or any(min(p) < 0 for p in pads):
            raise ModelError(f"{node.describe()}: pads {pads} invalid for {nsp} spatial axes")
    out = tuple(f - pb - pe for f, (pb, pe) in zip(full, pads))
    if min(out, default=1) < 1:
        raise ModelError(f"{node.describe()}: the output would be empty ({out})")
    return s, d, pads, op, out


def _deconv_infer(node, types, consts):
    x, w, g = _conv_operands(node, types, "transposed convolutions")
    if g < 1 or x.shape[1] != w.shape[0] or x.shape[1] % g:
        raise ModelError(
            f"{node.describe()}: group={g}: input has {x.shape[1]} channels, weight {w} "
            f"expects {w.shape[0]} (divisible by the groups)"
        )
    co = w.shape[1] * g
    if len(types) > 2 and types[2] is not None and types[2].shape != (co,):
        raise ModelError(f"{node.describe()}: bias must have shape ({co},), got {types[2]}")
    *_, out = deconv_geometry(node, x.shape, w.shape)
    return [TensorType(x.dtype, (x.shape[0], co) + out)]


def _deconv_onnx(c, a, ins):
    attrs = onnx_conv_attrs(c, a, ins[1])
    return c.mk({**attrs, "output_padding": a.get("output_padding"), "output_shape": a.get("output_shape")})


def _deconv_cost(node, in_types, out_types):
    x, w = in_types[0].shape, in_types[1].shape
    s, d, _, opad, _ = deconv_geometry(node, x, w)
    full = math.prod(
        st * (m - 1) + o + (kk - 1) * dd + 1 for m, st, o, kk, dd in zip(x[2:], s, opad, w[2:], d)
    )
    n, co = x[0], out_types[0].shape[1]
    # the full-size result, its padded copy, one kernel tap's contribution
    temp = (2 * n * co * full + n * co * math.prod(x[2:])) * 4
    return HostCost(temp, math.prod(x) * math.prod(w[1:]), 0, taps=math.prod(w[2:]))


@register_op(
    "conv_transpose",
    _deconv_infer,
    "mac",
    ane="deconv",
    onnx=[OnnxName("ConvTranspose", _deconv_onnx)],
    cost=_deconv_cost,
)
def _deconv(node, x, w, b=None):
    """Scatter form: every input pixel adds its kernel-weighted contribution to the output
    (the definition; independent of the ANE lowering's zero-insertion form)."""
    import itertools

    s, d, pads, op, out = deconv_geometry(node, x.shape, w.shape)
    g = int(node.attrs.get("groups", 1))
    N, C = x.shape[:2]
    cg, mg = C // g, w.shape[1]
    sp = x.shape[2:]
    full = tuple(st * (n - 1) + o + (kk - 1) * dd + 1 for n, st, o, kk, dd in zip(sp, s, op, w.shape[2:], d))
    y = np.zeros((N, g, mg) + full, np.float32)
    xg = x.reshape((N, g, cg) + sp)
    wg = w.reshape((g, cg, mg) + w.shape[2:])
    for idx in itertools.product(*(range(kk) for kk in w.shape[2:])):
        contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + idx], optimize=True)
        sl = tuple(slice(i * dd, i * dd + st * (n - 1) + 1, st) for i, dd, st, n in zip(idx, d, s, sp))
        y[(slice(None), slice(None), slice(None)) + sl] += contrib
    y = y.reshape((N, g * mg) + full)
    y = np.pad(y, ((0, 0), (0, 0)) + tuple((max(-pb, 0), max(-pe, 0)) for pb, pe in pads))
    y = y[
        (slice(None), slice(None)) + tuple(slice(max(pb, 0), max(pb, 0) + o) for (pb, _), o in zip(pads, out))
    ]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * len(out))
    return y
