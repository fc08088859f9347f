"""Quantized ONNX models on the INT8 path (fastane/model/placement/qlinear.py): a conv + relu +
matmul classifier built offline in its QLinear and QDQ forms, run end to end against
onnxruntime; the report shows the INT8 MACs and fewer KernelDMA bytes than the fp16 model;
the folded zero points are bit for bit the INT8 reference (tests/helpers/reference_int8.py)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.model.placement import qlinear as pq  # noqa: E402
from tests.helpers import onnx_quantized  # noqa: E402
from tests.helpers import reference_int8 as ref8  # noqa: E402

XS, XZ = np.float32(0.02), np.uint8(118)  # the input's quantization
CS, CZ = np.float32(0.12), np.uint8(97)  # the conv's output (zero point not 0)
RS = np.float32(0.04)  # after the relu (uint8, zero point 0)
YS, YZ = np.float32(0.1), np.uint8(131)  # the logits
SHAPE, CO, NCLS = (2, 3, 8, 8), 8, 10


def _init(name, v):
    return numpy_helper.from_array(np.asarray(v), name)


def _weights(rng):
    wq = rng.integers(-127, 128, (CO, 3, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.004, 0.02, CO).astype(np.float32)  # per output channel
    bq = rng.integers(-3000, 3000, CO).astype(np.int32)  # in units of XS * ws
    w2 = rng.integers(-127, 128, (CO * 64, NCLS)).astype(np.int8)
    w2s = np.float32(0.003)
    return wq, ws, bq, w2, w2s


def classifier(form: str, seed: int = 0, relu_zp: bool = False):
    """The classifier as an ONNX model: ``form`` "qlinear" (QuantizeLinear -> QLinearConv ->
    DQ/Relu/Q -> Flatten -> QLinearMatMul -> DequantizeLinear) or "qdq" (the same math as
    Q/DQ pairs around float Conv, Relu and MatMul), or "float" (the dequantized weights in
    float32: what an fp16 model of the same network moves)."""
    rng = np.random.default_rng(seed)
    wq, ws, bq, w2, w2s = _weights(rng)
    inits = [_init(n, v) for n, v in [("xs", XS), ("xz", XZ), ("cs", CS), ("cz", CZ), ("rs", RS),
             ("rz", np.uint8(0)), ("ys", YS), ("yz", YZ)]]  # fmt: skip
    conv = {"pads": [1, 1, 1, 1]}
    q = helper.make_node
    if form == "qlinear":
        inits += [_init("wq", wq), _init("ws", ws), _init("wz", np.zeros(CO, np.int8)), _init("bq", bq)]
        inits += [_init("w2", w2), _init("w2s", w2s), _init("w2z", np.int8(0))]
        nodes = [
            q("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
            q("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "cs", "cz", "bq"], ["cq"], **conv),
            q("DequantizeLinear", ["cq", "cs", "cz"], ["cd"]),
            q("Relu", ["cd"], ["r"]),
            q("QuantizeLinear", ["r", "rs", "rz"], ["rq"]),
            q("Flatten", ["rq"], ["f"]),
            q("QLinearMatMul", ["f", "rs", "rz", "w2", "w2s", "w2z", "ys", "yz"], ["yq"]),
            q("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
        ]
    elif form == "qdq":
        inits += [_init("wq", wq), _init("ws", ws), _init("bq", bq), _init("bs", XS * ws)]
        inits += [_init("w2", w2), _init("w2s", w2s)]
        nodes = [
            q("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
            q("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
            q("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0),
            q("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
            q("Conv", ["xd", "wd", "bd"], ["c"], **conv),
            q("Relu", ["c"], ["r"]),
            q("QuantizeLinear", ["r", "rs", "rz"], ["rq"]),
            q("Flatten", ["rq"], ["fq"]),
            q("DequantizeLinear", ["fq", "rs", "rz"], ["f"]),
            q("DequantizeLinear", ["w2", "w2s"], ["w2d"]),
            q("MatMul", ["f", "w2d"], ["m"]),
            q("QuantizeLinear", ["m", "ys", "yz"], ["yq"]),
            q("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
        ]
        if relu_zp:  # a relu whose quantization has a zero point: not fused (the FP16 path)
            inits += [_init("czs", CS)]
            nodes[6] = q("QuantizeLinear", ["r", "czs", "cz"], ["rq"])
            nodes[7] = q("Flatten", ["rq"], ["fq"])
            nodes[8] = q("DequantizeLinear", ["fq", "czs", "cz"], ["f"])
    else:
        wf = (wq.astype(np.float32) * ws[:, None, None, None]).astype(np.float32)
        bf = (bq.astype(np.float32) * (XS * ws)).astype(np.float32)
        inits = [
            _init("w", wf),
            _init("b", bf),
            _init("w2", (w2.astype(np.float32) * w2s).astype(np.float32)),
        ]
        nodes = [
            q("Conv", ["x", "w", "b"], ["c"], **conv),
            q("Relu", ["c"], ["r"]),
            q("Flatten", ["r"], ["f"]),
            q("MatMul", ["f", "w2"], ["y"]),
        ]
    g = helper.make_graph(
        nodes,
        form,
        [helper.make_tensor_value_info("x", T.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", T.FLOAT, [SHAPE[0], NCLS])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _input(seed=5):
    return np.random.default_rng(seed).uniform(-2.4, 2.6, SHAPE).astype(np.float32)


def _steps(form, model, x):
    """The model's logits against the ONNX definition's (``onnx.reference``, exact integer
    arithmetic: tests/helpers/onnx_quantized.py says why not onnxruntime), in quantization
    steps of the output."""
    rep = fastane.load_model(model).report({"x": x})
    (want,) = onnx_quantized.run(model, {"x": x})
    got = np.asarray(rep.values["y"], np.float64)
    return rep, np.rint(np.abs(got - want) / float(YS))  # (the fp16 model output: 1/64 step)


@pytest.mark.parametrize("form", ["qlinear", "qdq"])
def test_classifier_runs_on_the_int8_lanes_vs_the_onnx_reference(form):
    model = classifier(form)
    rep, steps = _steps(form, model, _input())
    # conv (8 per-channel scales: 8 task groups) and matmul on the INT8 lanes
    int8 = [r for r in rep.layers if r.layer.detail.get("int8")]
    assert [r.layer.call for r in int8] == ["conv2d", "linear"]
    assert all(r.placement == "ane" and r.stats.int8_macs == r.stats.macs > 0 for r in int8)
    assert int8[0].stats.macs == SHAPE[0] * CO * 64 * 27 and int8[1].stats.macs == SHAPE[0] * CO * 64 * NCLS
    assert "8 task groups" in int8[0].reason
    # the NE's arithmetic (fp16 PostScale, the folded zero points) against the definition's
    assert steps.max() <= 1


def test_int8_report_moves_fewer_kernel_bytes_than_fp16():
    x = _input()
    shapes = {"x": SHAPE}
    rq = fastane.load_model(classifier("qlinear")).report(shapes, stats_only=True)
    rf = fastane.load_model(classifier("float")).report(shapes, stats_only=True)
    kq = sum(r.stats.kernel_dma_bytes for r in rq.layers if r.placement == "ane")
    kf = sum(r.stats.kernel_dma_bytes for r in rf.layers if r.placement == "ane")
    assert sum(r.stats.int8_macs for r in rq.layers) == SHAPE[0] * CO * 64 * (27 + NCLS)
    assert sum(r.stats.int8_macs for r in rf.layers) == 0
    assert kq < kf
    # the matmul's weight: one byte a weight against two (the conv's 27-weight channels are
    # padded to the KMem layout's granules either way)
    (mq,) = [r.stats.kernel_dma_bytes for r in rq.layers if r.layer.call == "linear"]
    (mf,) = [r.stats.kernel_dma_bytes for r in rf.layers if r.layer.op == "MatMul"]
    assert mq < 0.6 * mf
    # the stats-only counts are those of the computed run
    run = fastane.load_model(classifier("qlinear")).report({"x": x})
    for a, b in zip(rq.layers, run.layers):
        assert (a.placement, a.stats.kernel_dma_bytes, a.stats.int8_macs, a.stats.tasks) == (
            b.placement,
            b.stats.kernel_dma_bytes,
            b.stats.int8_macs,
            b.stats.tasks,
        )


def test_relu_with_a_zero_point_is_not_fused():
    model = classifier("qdq", relu_zp=True)
    rep, steps = _steps("qdq", model, _input())
    int8 = [r.layer.call for r in rep.layers if r.layer.detail.get("int8")]
    assert int8 == ["linear"]  # the conv + relu runs on the FP16 path, with the reason
    (conv,) = [r for r in rep.layers if r.layer.op.startswith("Conv")]
    assert conv.placement == "ane" and conv.stats.int8_macs == 0 and "non-zero zero point" in conv.reason
    assert steps.max() <= 1


# ------------------------------------------------------------ the folding, bit for bit
def _qconv_model(qw, ws, wz, bq, xz, ys, yz, y_dtype):
    t = {np.dtype(np.uint8): T.UINT8, np.dtype(np.int8): T.INT8}
    inits = [_init(n, v) for n, v in [("xs", XS), ("xz", xz), ("wq", qw), ("ws", ws), ("wz", wz), ("ys", ys),
             ("yz", yz), ("bq", bq)]]  # fmt: skip
    ins = ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"]
    node = helper.make_node("QLinearConv", ins, ["yq"], pads=[1, 2, 1, 0])
    g = helper.make_graph(
        [node],
        "qconv",
        [helper.make_tensor_value_info("xq", T.UINT8, [1, 3, 5, 6])],
        [helper.make_tensor_value_info("yq", t[np.dtype(y_dtype)], None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("seed", range(4))
def test_folded_zero_points_are_the_reference_int8_conv(seed):
    """A QLinearConv with every zero point non-zero (input, a uint8 weight's 128, output) and
    asymmetric padding, run by the model, equals the INT8 reference (tests/helpers/reference_int8.py)
    fed the folded operands (the input padded with its zero point, the centered kernel, the
    folded bias on its int16 x 2**shift grid), bit for bit; and the fold is the integer
    identity sum (qx - xz) wc = sum qx wc - xz sum_k wc."""
    rng = np.random.default_rng(seed)
    xz, yz = np.uint8(rng.integers(1, 256)), (np.int8(-7) if seed % 2 else np.uint8(200))
    qw = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    wz, ws = np.uint8(128), np.float32(0.01)
    bq = rng.integers(-(2**18), 2**18, 4).astype(np.int32)
    ys = np.float32(rng.uniform(0.5, 3.0))
    qx = rng.integers(0, 256, (1, 3, 5, 6)).astype(np.uint8)
    with fastane.errstate(saturation="ignore"):
        got = fastane.load_model(_qconv_model(qw, ws, wz, bq, xz, ys, yz, yz.dtype))({"xq": qx})["yq"]
    # the ONNX pads [1, 2, 1, 0]: (top, bottom), (left, right)
    xp = np.pad(qx, ((0, 0), (0, 0), (1, 1), (2, 0)), constant_values=xz).astype(np.int64)
    wc = qw.astype(np.int64) - 128
    acc, flag = ref8.ref_conv2d_int(xp, wc)
    exact, _ = ref8.ref_conv2d_int(xp - int(xz), wc)
    per = wc.reshape(4, -1).sum(1)
    assert np.array_equal(np.array(exact), np.array(acc) - int(xz) * per[None, :, None, None])
    sc = float(XS) * float(ws) / float(ys)
    bits, shift = fastane.quantized.ne_scale(sc)
    s_ne = float(np.array(bits, np.uint16).view(np.float16)) * 2.0**-shift
    b, bshift = pq.bias_grid(bq - int(xz) * per + int(yz) / s_ne)
    out = yz.dtype.name
    want = np.empty(got.shape, np.int64)
    for idx in np.ndindex(*got.shape):
        c = idx[1]
        a, f = np.array(acc)[idx], np.array(flag)[idx]
        want[idx] = ref8.ref_ne_int(
            int(a), int(f), (int(b[c]) >> bshift) & 0xFFFF, bshift, bits, shift, False, out
        )[0]
    assert got.dtype == yz.dtype and np.array_equal(got.astype(np.int64), want)
    # and ONNX's ideal (exact integers, one rounding, + y_zp, saturated): a step apart at most
    lo, hi = ref8.RANGES[out]
    ideal = np.clip(np.rint((np.array(exact, np.float64) + bq[None, :, None, None]) * sc) + int(yz), lo, hi)
    assert np.abs(ideal - got).max() <= 1


def test_bias_grid_rounds_onto_int16_times_a_power_of_two():
    b, s = pq.bias_grid(np.array([1.0, -32768.0, 32767.4]))
    assert s == 0 and b.tolist() == [1, -32768, 32767]
    b, s = pq.bias_grid(np.array([100001.0, -5.0, 3.0]))
    assert s == 2 and b.tolist() == [100000, -4, 4]
    assert all(-(2**15) <= v >> s < 2**15 for v in b.tolist())


def test_an_int8_model_names_its_saturation_as_the_integer_paths():
    """An INT8 layer whose outputs clamp to the integer range warns with the integer
    path's wording, not the fp16 accumulator's."""
    rng = np.random.default_rng(3)
    qw = rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8)
    bq = np.zeros(4, np.int32)
    qx = np.full((1, 3, 5, 6), 255, np.uint8)
    m = fastane.load_model(
        _qconv_model(
            qw, np.float32(0.05), np.uint8(0), bq, np.uint8(0), np.float32(0.01), np.uint8(0), np.uint8
        )
    )
    with pytest.warns(fastane.errors.SaturationWarning, match="integer") as rec:
        m({"xq": qx})
    assert not any("Q16.16" in str(w.message) for w in rec)
