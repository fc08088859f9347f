"""Whole models built offline (fastane.model.zoo, onnx.helper, random seeded weights) on
fastane against onnxruntime in float32."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import fastane  # noqa: E402
from fastane.model import zoo  # noqa: E402

#: whole-model tolerance: max |fastane - onnxruntime| / max |onnxruntime|.  Measured 7.4e-4
#: (resnet) and 1.5e-3 (transformer): fp16 activations and weights, Q16.16 products, the
#: gelu table (6.2e-3 abs); 1e-2 leaves room without hiding a wrong layer (a wrong layer
#: gives O(1)).
TOL = 1e-2


def _both(proto, x):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    model = fastane.load_model(proto)
    y = model({"x": x})[model.outputs[0]]
    return model, y, ref


def _err(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max())


def test_resnet_block_net_matches_onnxruntime_and_top1():
    proto = zoo.resnet(seed=0)
    x = np.random.default_rng(1).standard_normal((8, 3, 32, 32)).astype(np.float32)
    model, y, ref = _both(proto, x)
    assert y.dtype == np.float16 and y.shape == ref.shape == (8, 10)
    assert _err(y, ref) < TOL
    np.testing.assert_array_equal(y.argmax(1), ref.argmax(1))  # top-1 agreement, 8 of 8
    layers = model.placement({"x": x.shape})
    ane = [lay for lay in layers if lay.placement == "ane"]
    # every Conv (with its BatchNormalization folded) and the classifier run on the ANE
    assert sum(lay.call == "conv2d" for lay in ane) == 6
    assert all(lay.nodes[1].op == "batchnorm" for lay in ane if lay.call == "conv2d")
    assert any(lay.call == "linear" for lay in ane)
    host = {lay.nodes[0].op for lay in layers if lay.placement == "host"}
    assert host == set()  # GlobalAveragePool too: a planar mean over each channel's H x W row
    assert [lay.call for lay in ane if lay.nodes[0].op == "global_avg_pool"] == ["reduce_mean"]
    assert sum(lay.call == "add" for lay in ane) == 2  # the residual Adds: planar tasks
    # each with the ReLU after it: an NE task in the same program (the sum waits in L2)
    assert all(lay.op == "Add+Relu" for lay in ane if lay.call == "add")


def test_transformer_block_matches_onnxruntime():
    proto = zoo.transformer(seed=0)
    x = np.random.default_rng(2).standard_normal((1, 16, 32)).astype(np.float32)
    model, y, ref = _both(proto, x)
    assert y.shape == ref.shape == (1, 16, 32)
    assert _err(y, ref) < TOL
    layers = model.placement({"x": x.shape})
    calls = [lay.call for lay in layers if lay.placement == "ane"]
    assert calls.count("linear") == 6 and calls.count("matmul") == 2
    mlp = next(lay for lay in layers if lay.op == "MatMul+Add+Gelu")
    assert mlp.placement == "ane" and mlp.detail["activation"] == "gelu"


def test_mobile_block_net_matches_onnxruntime():
    proto = zoo.mobile(seed=0)
    x = np.random.default_rng(3).standard_normal((1, 3, 128, 128)).astype(np.float32)
    model, y, ref = _both(proto, x)
    assert y.shape == ref.shape == (1, 1000)
    assert _err(y, ref) < TOL
    layers = model.placement({"x": x.shape})
    ops = {lay.op: lay.placement for lay in layers}
    # the layer kinds it is there to exercise: depthwise convolutions with SiLU and
    # HardSwish, the gates' Sigmoid and HardSigmoid, their broadcast Mul; the MaxPool on the host
    assert ops["Conv+Sigmoid+Mul"] == ops["Conv+HardSwish"] == ops["Conv+HardSigmoid"] == "ane"
    assert ops["Conv+Sigmoid"] == ops["Mul"] == "ane" and ops["MaxPool"] == "host"
    depthwise = [lay for lay in layers if lay.call == "conv2d" and lay.nodes[0].attrs["groups"] > 1]
    assert len(depthwise) == 6


def test_symbolic_sequence_length_binds_per_call():
    model = fastane.load_model(zoo.transformer(seed=0))
    for s in (4, 9):
        x = np.random.default_rng(s).standard_normal((1, s, 32)).astype(np.float32)
        assert model({"x": x})[model.outputs[0]].shape == (1, s, 32)


def test_report_per_layer():
    proto = zoo.resnet(seed=0, width=8, size=16)
    model = fastane.load_model(proto)
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    rep = model.report({"x": x}, chip="m1")
    d = rep.as_dict()
    assert d["first_layer_beyond_tolerance"] is None
    conv = d["layers"][0]
    assert conv["placement"] == "ane" and conv["op"] == "Conv+BatchNormalization+Relu"
    assert conv["tasks"] > 0 and conv["macs"] == 8 * 3 * 9 * 16 * 16
    assert conv["time_s"] > 0 and conv["op_per_byte"] > 0 and conv["dram_bytes"] > 0
    assert 0 < conv["max_abs_err"] and conv["error"] < conv["tolerance"]
    assert not [lay for lay in d["layers"] if lay["placement"] == "host"]
    gap = next(lay for lay in d["layers"] if lay["op"] == "GlobalAveragePool")
    assert gap["placement"] == "ane" and gap["tasks"] == 2 and gap["error"] < gap["tolerance"]
    assert "first layer beyond its tolerance: none" in rep.table()
    assert rep.total.tasks == sum(lay["tasks"] for lay in d["layers"] if lay["placement"] == "ane")


def test_report_names_the_first_layer_beyond_tolerance():
    # a conv whose weights push the Q16.16 accumulator past 32768: saturation -> inf
    from onnx import TensorProto as T, helper, numpy_helper

    w = np.full((4, 8, 3, 3), 100.0, np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="big", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="act"),
    ]
    g = helper.make_graph(
        nodes,
        "sat",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(w, "w")],
    )
    model = fastane.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.full((1, 8, 6, 6), 10.0, np.float32)
    with pytest.warns(fastane.SaturationWarning):
        rep = model.report({"x": x})
    layer = rep.layers[0]
    assert layer.stats.saturated > 0 and rep.first_bad == "big" and not layer.ok


@pytest.mark.parametrize("name, shape", [("resnet", (2, 3, 32, 32)), ("transformer", (1, 16, 32))])
def test_stats_only_report_counts_what_the_run_does(name, shape):
    model = fastane.load_model(zoo.MODELS[name](seed=0))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ran = model.report({"x": x})
    counted = model.report({"x": shape}, stats_only=True)
    assert counted.stats_only and not counted.outputs
    for a, b in zip(ran.layers, counted.layers):
        assert (a.placement, a.layer.op) == (b.placement, b.layer.op)
        for f in (
            "tasks",
            "macs",
            "planar_ops",
            "kernel_dma_bytes",
            "tile_dma_src_bytes",
            "tile_dma_dst_bytes",
            "control_dma_bytes",
        ):
            assert getattr(a.stats, f) == getattr(b.stats, f), (a.layer.name, f)
        assert b.error is None
    assert counted.total.time_s == pytest.approx(ran.total.time_s)


@pytest.mark.parametrize(
    "attrs",
    [
        dict(strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[4, 4]),
        dict(strides=[2, 3], output_padding=[1, 2], group=2),
        dict(strides=[2, 2], auto_pad="SAME_UPPER", dilations=[2, 1]),
        dict(strides=[3, 2], output_shape=[10, 8]),
    ],
)
def test_conv_transpose_matches_onnxruntime(attrs):
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(4)
    g = attrs.get("group", 1)
    k = attrs.get("kernel_shape", [3, 3])
    w = (rng.standard_normal((4, 6 // g, *k)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(6) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], name="up", **attrs),
        helper.make_node("Relu", ["c"], ["y"], name="act"),
    ]
    graph = helper.make_graph(
        nodes,
        "deconv",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    model, y, ref = _both(proto, x)
    layer = model.placement({"x": x.shape})[0]
    assert layer.placement == "ane" and layer.op == "ConvTranspose+Relu"
    assert y.shape == ref.shape and _err(y, ref) < TOL
    # the host implementation (the fp32 reference) is the definition: onnxruntime to fp32 rounding
    np.testing.assert_allclose(model.reference({"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


def test_stats_only_without_the_weights():
    proto = zoo.resnet(seed=0)
    full = fastane.load_model(proto)
    light = fastane.load_model(proto, weights=False)
    big = [v for v in light.graph.consts.values() if v.size > 4096]
    assert big and all(v.strides == (0,) * v.ndim for v in big)  # placeholders, no copy
    a = full.report({"x": (1, 3, 32, 32)}, stats_only=True)
    b = light.report({"x": (1, 3, 32, 32)}, stats_only=True)
    assert [r.stats.as_dict() for r in a.layers] == [r.stats.as_dict() for r in b.layers]
    with pytest.raises(fastane.ModelError, match="without its weights"):
        light({"x": np.zeros((1, 3, 32, 32), np.float32)})


@pytest.mark.parametrize("opset", [9, 11])
def test_old_opsets_attribute_operands(opset):
    """Operands older opsets give as attributes (Softmax's flattening axis, Squeeze/Unsqueeze
    and Reduce axes, Slice starts/ends, Pad pads, Clip bounds) mean what onnxruntime says."""
    from onnx import TensorProto as T, helper

    clip = (
        helper.make_node("Clip", ["s"], ["c"], min=-0.5, max=0.5)
        if opset < 11
        else helper.make_node("Clip", ["s", "lo", "hi"], ["c"])
    )
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=1),
        clip,
        helper.make_node("Slice", ["c"], ["sl"], starts=[0, 1], ends=[1, 3], axes=[0, 2])
        if opset < 10
        else helper.make_node("Slice", ["c", "st", "en", "ax"], ["sl"]),
        helper.make_node("Squeeze", ["sl"], ["sq"], axes=[0]),
        helper.make_node("Unsqueeze", ["sq"], ["us"], axes=[2]),
        helper.make_node("ReduceMean", ["us"], ["rm"], axes=[1], keepdims=0),
        helper.make_node("Pad", ["rm"], ["y"], pads=[0, 1, 0, 2], value=0.25, mode="constant")
        if opset < 11
        else helper.make_node("Identity", ["rm"], ["y"]),
    ]
    inits = []
    if opset >= 11:
        from onnx import numpy_helper

        inits = [
            numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
            numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
        ]
        inits += [
            numpy_helper.from_array(np.array(v, np.int64), n)
            for n, v in (("st", [0, 1]), ("en", [1, 3]), ("ax", [0, 2]))
        ]
    g = helper.make_graph(
        nodes,
        "old",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 7
    x = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32) * 3
    model, y, ref = _both(proto, x)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2.0**-10, atol=2.0**-14)


def test_gemm_with_a_full_c_is_two_ane_calls():
    from onnx import TensorProto as T, helper, numpy_helper

    rng = np.random.default_rng(6)
    w = rng.standard_normal((5, 7)).astype(np.float32)
    c = rng.standard_normal((3, 5)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [7, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [3, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")],
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((7, 3)).astype(np.float32)
    model, y, ref = _both(proto, x)
    assert _err(y, ref) < TOL
    ran = model.report({"x": x})
    layer = ran.layers[0]
    assert layer.placement == "ane" and layer.layer.call == "linear+add"
    assert layer.stats.macs == 3 * 5 * 7 and layer.stats.planar_ops == 15 and layer.stats.tasks == 2
    counted = model.report({"x": x.shape}, stats_only=True).layers[0].stats
    assert counted.as_dict() == layer.stats.as_dict()
