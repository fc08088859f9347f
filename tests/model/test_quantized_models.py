"""Quantized ONNX models (QDQ, QLinearConv, QLinearMatMul) end to end: a weight stored as
int8 stays compressed on the ANE (an 8-bit palette of its dequantized fp16 values, bit for
bit the fp16 weight), and the report shows the KernelDMA bytes saved."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from tests.helpers import onnx_quantized  # noqa: E402

F16 = np.float16


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "q", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _qdq_pair(rng):
    """A QDQ conv model and the same model with the weight already dequantized (float32)."""
    wq = rng.integers(-127, 128, (64, 64, 3, 3)).astype(np.int8)
    ws = np.float32(0.0125)
    b = rng.standard_normal(64).astype(np.float32)
    conv = dict(pads=[1, 1, 1, 1])
    xs, xz = np.float32(0.05), np.uint8(128)
    act = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
    ]
    qdq = _model(
        act
        + [
            helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"]),
            helper.make_node("Conv", ["xd", "w", "b"], ["c"], **conv),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [_vi("x", [1, 64, 8, 8])],
        [_vi("y", [1, 64, 8, 8])],
        [
            numpy_helper.from_array(wq, "wq"),
            numpy_helper.from_array(np.array(ws), "ws"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(np.array(xs), "xs"),
            numpy_helper.from_array(np.array(xz), "xz"),
        ],
    )
    wf = (wq.astype(np.float32) * ws).astype(np.float32)
    plain = _model(
        act
        + [helper.make_node("Conv", ["xd", "w", "b"], ["c"], **conv), helper.make_node("Relu", ["c"], ["y"])],
        [_vi("x", [1, 64, 8, 8])],
        [_vi("y", [1, 64, 8, 8])],
        [
            numpy_helper.from_array(wf, "w"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(np.array(xs), "xs"),
            numpy_helper.from_array(np.array(xz), "xz"),
        ],
    )
    return qdq, plain


def _conv_record(report):
    (rec,) = [r for r in report.layers if r.placement == "ane"]
    return rec


def test_qdq_conv_keeps_its_int8_weight_compressed():
    rng = np.random.default_rng(0)
    qdq, plain = _qdq_pair(rng)
    x = rng.standard_normal((1, 64, 8, 8)).astype(np.float32)
    mq, mp = fastane.load_model(qdq), fastane.load_model(plain)
    rq, rp = mq.report({"x": x}), mp.report({"x": x})
    yq, yp = rq.values["y"], rp.values["y"]
    assert np.array_equal(np.asarray(yq, F16).view(np.uint16), np.asarray(yp, F16).view(np.uint16))
    cq, cp = _conv_record(rq), _conv_record(rp)
    assert cq.stats.macs == cp.stats.macs == 64 * 64 * 64 * 9
    # 8-bit codes and a 512-byte palette a core, against 2 bytes a weight
    assert cq.stats.kernel_dma_bytes < 0.75 * cp.stats.kernel_dma_bytes
    # the host ops: Q/DQ of the activation run on the host, with the reason
    assert {r.placement for r in rq.layers} >= {"host", "ane"}


def test_quantize_dequantize_follow_onnx():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
    ]
    s = np.array([0.02, 0.5, 0.1], np.float32)
    z = np.array([0, -3, 7], np.int8)
    m = _model(
        nodes,
        [_vi("x", [2, 3, 5])],
        [_vi("y", [2, 3, 5])],
        [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")],
    )
    x = (rng.standard_normal((2, 3, 5)) * 3).astype(np.float32)
    x[0, 0, :3] = [0.01, 0.03, -0.01]  # ties at x / s = 0.5, 1.5, -0.5
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    got = fastane.load_model(m).reference({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_qlinear_ops_run_end_to_end(op):
    rng = np.random.default_rng(2)
    xs, xz, ys, yz = np.float32(0.03), np.uint8(120), np.float32(0.2), np.uint8(100)
    if op == "QLinearConv":
        wq = rng.integers(-100, 100, (8, 4, 3, 3)).astype(np.int8)
        ws = np.float32(0.01)
        xshape, yshape = [1, 4, 6, 6], [1, 8, 4, 4]
        bias = rng.integers(-500, 500, 8).astype(np.int32)
        extra = [numpy_helper.from_array(bias, "bq")]
        ins = ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"]
    else:
        wq = rng.integers(-100, 100, (16, 8)).astype(np.int8)
        ws = np.float32(0.01)
        xshape, yshape = [5, 16], [5, 8]
        extra, ins = [], ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz"]
    inits = [
        numpy_helper.from_array(np.array(xs), "xs"),
        numpy_helper.from_array(np.array(xz), "xz"),
        numpy_helper.from_array(wq, "wq"),
        numpy_helper.from_array(np.array(ws), "ws"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
        numpy_helper.from_array(np.array(ys), "ys"),
        numpy_helper.from_array(np.array(yz), "yz"),
    ] + extra
    m = _model(
        [helper.make_node(op, ins, ["yq"])], [_vi("xq", xshape, T.UINT8)], [_vi("yq", yshape, T.UINT8)], inits
    )
    xq = rng.integers(0, 256, xshape).astype(np.uint8)
    (want,) = onnx_quantized.run(m, {"xq": xq})  # exact on every host (the helper says why)
    model = fastane.load_model(m)
    rep = model.report({"xq": xq})
    got = rep.values["yq"]
    assert got.dtype == np.uint8 and got.shape == tuple(yshape)
    # the MAC ran on the ANE in fp16 (rounded sums), the definition in exact integers: one
    # step apart at most
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    ane = [r for r in rep.layers if r.placement == "ane"]
    assert ane and all(r.stats.macs for r in ane)


def test_stats_only_counts_an_int8_typed_weight_as_8_bit_codes():
    """The stats-only report needs no weight values: a weight dequantized from int8 with one
    scale is counted as 8-bit codes and a palette a core, as the computed run moves them
    (255 distinct values here: the run's codes are 8-bit too)."""
    rng = np.random.default_rng(0)
    qdq, plain = _qdq_pair(rng)
    x = rng.standard_normal((1, 64, 8, 8)).astype(np.float32)
    shapes = {"x": (1, 64, 8, 8)}
    sq = _conv_record(fastane.load_model(qdq).report(shapes, stats_only=True))
    sp = _conv_record(fastane.load_model(plain).report(shapes, stats_only=True))
    run = _conv_record(fastane.load_model(qdq).report({"x": x}))
    assert sq.stats.kernel_dma_bytes == run.stats.kernel_dma_bytes < 0.75 * sp.stats.kernel_dma_bytes
    assert (
        sp.stats.kernel_dma_bytes
        == _conv_record(fastane.load_model(plain).report({"x": x})).stats.kernel_dma_bytes
    )
