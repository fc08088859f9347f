"""The quantization ops of the vocabulary (ONNX QDQ: ``quantize`` = QuantizeLinear,
``dequantize`` = DequantizeLinear; QLinearConv and QLinearMatMul are imported as
dequantize -> conv/matmul -> quantize).  Host ops with ONNX's semantics:

* ``dequantize(x, scale, zero_point=0)`` = ``(x - zero_point) * scale`` in float32;
* ``quantize(x, scale, zero_point)`` = ``saturate(round(x / scale) + zero_point)``, the
  division in float32, rounding half to even, saturated to the zero point's dtype (uint8
  when it is omitted).

``scale`` and ``zero_point`` are scalars (per tensor) or 1-D along ``axis`` (per axis).
On the ANE side, a ``dequantize -> conv/matmul -> quantize`` chain runs on the INT8 lanes
(:mod:`fastane.model.placement.qlinear`); a convolution left on the FP16 path whose constant
weight came out of a ``dequantize`` has at most 256 distinct fp16 values, which the
placement keeps compressed (an 8-bit palette, :func:`fastane.model.placement.rules`).

The dynamic quantization exporters emit runs on the host, exactly:
``dynamic_quantize`` (DynamicQuantizeLinear: uint8 over the input's own range) and the
integer products ``matmul_integer`` (MatMulInteger) and ``conv_integer`` (ConvInteger),
``(a - a_zero_point) @ (b - b_zero_point)`` accumulated in int64, returned as int32.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...errors import ModelError
from .mac import conv_onnx, onnx_conv_attrs
from .opdef import OPS, OnnxName, elements, check_axis, need_float, need_input, register_op, take
from ..tensor import TensorType

_INT = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32))


def _bcast(v, x_ndim, axis):
    v = np.asarray(v)
    if v.ndim == 1 and v.size > 1:
        shape = [1] * x_ndim
        shape[axis] = v.size
        return v.reshape(shape)
    return v.reshape(())


def _dq_infer(node, types, consts):
    x = need_input(types, 0, node)
    if np.dtype(x.dtype) not in _INT:
        raise ModelError(f"{node.describe()}: input must be int8, uint8 or int32, got {x}")
    need_float(need_input(types, 1, node, "scale"), node, 1)
    if len(types) > 2 and types[2] is not None and np.dtype(types[2].dtype) != np.dtype(x.dtype):
        raise ModelError(f"{node.describe()}: zero point {types[2]} must have the input's dtype {x.dtype}")
    return [TensorType(np.float32, x.shape)]


@register_op("dequantize", _dq_infer, ane="qlinear", onnx=[OnnxName("DequantizeLinear", take(axis=1))])
def _dequantize(node, x, scale, zero_point=None):
    axis = check_axis(node.attrs.get("axis", 1), x.ndim, node) if x.ndim else 0
    zp = 0 if zero_point is None else _bcast(zero_point, x.ndim, axis).astype(np.int64)
    s = _bcast(scale, x.ndim, axis).astype(np.float32)
    return (x.astype(np.int64) - zp).astype(np.float32) * s


def _q_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    need_float(need_input(types, 1, node, "scale"), node, 1)
    zp = types[2] if len(types) > 2 else None
    dt = np.dtype(np.uint8) if zp is None else np.dtype(zp.dtype)
    if dt not in _INT[:2]:
        raise ModelError(f"{node.describe()}: the zero point (output type) must be int8 or uint8, got {zp}")
    return [TensorType(dt, x.shape)]


def _qlinear_onnx(c, a, ins):
    """QLinearConv / QLinearMatMul as dequantize -> conv / matmul -> quantize (ONNX's
    definition; the int32 bias of QLinearConv has the scale ``x_scale * w_scale``)."""
    need = 8
    if len(ins) < need or not all(ins[:need]):
        raise ModelError(f"{c.where}: needs its {need} quantized operands")
    x, xs, xz, w, ws, wz, ys, yz = ins[:need]
    tx, tw, ty = f"{c.name}::x", f"{c.name}::w", f"{c.name}::y"
    c.add("dequantize", "dequantize_x", [x, xs, xz], [tx], {"axis": 1})
    conv = c.op == "QLinearConv"
    c.add("dequantize", "dequantize_w", [w, ws, wz], [tw], {"axis": 0 if conv else 1})  # per output channel
    if not conv:
        c.add("matmul", "matmul", [tx, tw], [ty], {})
    else:
        inputs = [tx, tw]
        if len(ins) > need and ins[need]:
            tbs, tb = f"{c.name}::bias_scale", f"{c.name}::bias"
            c.add("mul", "bias_scale", [xs, ws], [tbs], {})
            c.add("dequantize", "dequantize_b", [ins[need], tbs, ""], [tb], {"axis": 0})
            inputs.append(tb)
        c.add("conv", "conv", inputs, [ty], {**onnx_conv_attrs(c, a, w), "kernel": a.get("kernel_shape")})
    return c.mk({"axis": 1}, [ty, ys, yz])


_QLINEAR_DOC = "imported as dequantize -> {} -> quantize"


@register_op(
    "quantize",
    _q_infer,
    onnx=[
        OnnxName("QuantizeLinear", take(axis=1)),
        OnnxName("QLinearConv", _qlinear_onnx, doc=_QLINEAR_DOC.format("conv")),
        OnnxName("QLinearMatMul", _qlinear_onnx, doc=_QLINEAR_DOC.format("matmul")),
    ],
)
def _quantize(node, x, scale, zero_point=None):
    axis = check_axis(node.attrs.get("axis", 1), x.ndim, node) if x.ndim else 0
    dt = np.dtype(np.uint8) if zero_point is None else np.asarray(zero_point).dtype
    info = np.iinfo(dt)
    zp = 0 if zero_point is None else _bcast(zero_point, x.ndim, axis).astype(np.int64)
    s = _bcast(scale, x.ndim, axis).astype(np.float32)
    q = np.rint(x.astype(np.float32) / s).astype(np.float64) + zp
    q = np.where(np.isnan(q), zp, q)  # NaN: the zero point
    return np.clip(q, info.min, info.max).astype(dt)


# ------------------------------------------------------------------------ dynamic quantization
def _dyn_q_infer(node, types, consts):
    x = need_float(need_input(types, 0, node), node)
    if not math.prod(x.shape):
        raise ModelError(f"{node.describe()}: the input is empty (its range sets the scale)")
    u8 = np.dtype(np.uint8)
    return [TensorType(u8, x.shape), TensorType(np.float32, ()), TensorType(u8, ())]


@register_op(
    "dynamic_quantize",
    _dyn_q_infer,
    "exact",
    onnx=[OnnxName("DynamicQuantizeLinear", lambda c, a, ins: c.mk(n_out=3, keep=True))],
)
def _dynamic_quantize(node, x):
    """ONNX's uint8 quantization of ``x`` over its range widened to hold 0, in float32:
    ``scale = (max - min) / 255`` (1 / 255 when the range is empty), the zero point
    ``round(-min / scale)`` saturated, ``y = saturate(round(x / scale) + zero point)``;
    rounding half to even."""
    x = x.astype(np.float32)
    hi, lo = np.float32(max(0.0, x.max())), np.float32(min(0.0, x.min()))
    scale = np.float32(np.float32(1.0) if hi == lo else hi - lo) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return [y.astype(np.uint8), np.array(scale, np.float32), np.array(zp, np.uint8)]


# ------------------------------------------------------------------------ integer products
_I8 = (np.dtype(np.int8), np.dtype(np.uint8))


def _int_mac_infer(op, zp_axes):
    """Inference of the integer form of ``op`` (its record's inference on float stand-ins
    checks the shapes): int8/uint8 operands and their zero points (:func:`_zero_point`)
    of the same dtype; an int32 result."""

    def infer(node, types, consts):
        ops = [need_input(types, i, node) for i in (0, 1)]
        for i, t in enumerate(ops):
            if np.dtype(t.dtype) not in _I8:
                raise ModelError(f"{node.describe()}: input {i} must be int8 or uint8, got {t}")
            z = types[i + 2] if len(types) > i + 2 else None
            if z is not None and (
                np.dtype(z.dtype) != np.dtype(t.dtype) or not _zero_point(z, t, zp_axes[i])
            ):
                raise ModelError(f"{node.describe()}: zero point {i} {z} does not fit operand {t}")
        (out,) = OPS[op].infer(node, [TensorType(np.float32, t.shape) for t in ops], consts)
        return [TensorType(np.int32, out.shape)]

    return infer


def _zero_point(z, t, axis) -> bool:
    """Whether zero point ``z`` fits operand ``t``: one value, or (``axis`` not None) one a
    row of ``axis``: 1-D along it, or of ``t``'s rank with 1 on the other matrix axis."""
    if math.prod(z.shape) == 1 and len(z.shape) <= max(len(t.shape), 1):
        return True
    if axis is None or not t.shape:
        return False
    if len(z.shape) == 1:
        return z.shape == (t.shape[axis],)
    other = -1 if axis % len(t.shape) == len(t.shape) - 2 else -2
    return (
        len(z.shape) == len(t.shape)
        and z.shape[other] == 1
        and all(a in (1, b) for a, b in zip(z.shape, t.shape))
    )


def _centred(v, zp, axis, ndim):
    """``v - zp`` in int64 (:func:`_zero_point`: ``zp`` None (0), one value, 1-D along
    ``axis`` of ``v``, or broadcasting over ``v``)."""
    v = v.astype(np.int64)
    if zp is None:
        return v
    zp = np.asarray(zp).astype(np.int64)
    if zp.size == 1:
        return v - zp.reshape(())
    return v - (_bcast(zp, ndim, axis % ndim) if zp.ndim == 1 else zp)


def _int_mac_cost(op):
    """The record's host cost, plus the int64 copies of the two operands."""

    def cost(node, in_types, out_types):
        base = OPS[op].cost(node, [TensorType(np.float32, t.shape) for t in in_types[:2]], out_types)
        return dataclasses.replace(base, temp=base.temp * 2 + 8 * elements(in_types[:2]))

    return cost


@register_op(
    "matmul_integer",
    _int_mac_infer("matmul", (-2, -1)),
    "exact",
    onnx=["MatMulInteger"],
    cost=_int_mac_cost("matmul"),
)
def _matmul_integer(node, a, b, a_zero_point=None, b_zero_point=None):
    # a's zero point one a row, b's one a column
    return np.matmul(_centred(a, a_zero_point, -2, a.ndim), _centred(b, b_zero_point, -1, b.ndim))


@register_op(
    "conv_integer",
    _int_mac_infer("conv", (None, 0)),
    "exact",
    onnx=[OnnxName("ConvInteger", conv_onnx)],
    cost=_int_mac_cost("conv"),
)
def _conv_integer(node, x, w, x_zero_point=None, w_zero_point=None):
    # the input's zero point is a scalar, the weight's one an output channel; the padding
    # is the input's zero point (0 once centred)
    return OPS["conv"].host(node, _centred(x, x_zero_point, 0, x.ndim), _centred(w, w_zero_point, 0, w.ndim))
