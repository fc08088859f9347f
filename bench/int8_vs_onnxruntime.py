"""Quantized ONNX layers on the INT8 path against onnxruntime, in quantization steps of the
output (docs/numerics.md, "Quantized models on the INT8 path").  Run from the repository
root: ``.venv/bin/python bench/int8_vs_onnxruntime.py`` (a few seconds; needs onnx and
onnxruntime)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]  # the tests package (tests.model.test_int8_models, tests.helpers)

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from tests.model.test_int8_models import SHAPE, YS, classifier  # noqa: E402

import fastane  # noqa: E402


def init(n, v):
    return numpy_helper.from_array(np.asarray(v), n)


res = {}
for op in ["QLinearConv", "QLinearMatMul"]:
    for pc in [False, True]:
        tot = 0
        diff = 0
        mx = 0
        for seed in range(4):
            rng = np.random.default_rng(seed)
            xs, xz, ys, yz = (
                np.float32(0.02),
                np.uint8(rng.integers(0, 256)),
                np.float32(0.06),
                np.uint8(rng.integers(0, 256)),
            )
            if op == "QLinearConv":
                qw = rng.integers(-128, 128, (32, 16, 3, 3)).astype(np.int8)
                co = 32
                xshape = [1, 16, 16, 16]
                extra = [init("bq", rng.integers(-5000, 5000, 32).astype(np.int32))]
                ins = ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "bq"]
                attrs = {"pads": [1, 1, 1, 1]}
            else:
                qw = rng.integers(-128, 128, (256, 64)).astype(np.int8)
                co = 64
                xshape = [64, 256]
                extra = []
                ins = ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz"]
                attrs = {}
            ws = (rng.uniform(0.002, 0.01, co) if pc else np.array(0.005)).astype(np.float32)
            wz = np.zeros(co, np.int8) if pc else np.int8(0)
            inits = [
                init("xs", xs),
                init("xz", xz),
                init("wq", qw),
                init("ws", ws),
                init("wz", wz),
                init("ys", ys),
                init("yz", yz),
            ] + extra
            g = helper.make_graph(
                [helper.make_node(op, ins, ["yq"], **attrs)],
                "m",
                [helper.make_tensor_value_info("xq", T.UINT8, xshape)],
                [helper.make_tensor_value_info("yq", T.UINT8, None)],
                inits,
            )
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            xq = rng.integers(0, 256, xshape).astype(np.uint8)
            want = ort.InferenceSession(m.SerializeToString()).run(None, {"xq": xq})[0].astype(int)
            with fastane.errstate(saturation="ignore"):
                rep = fastane.load_model(m).report({"xq": xq})
            got = rep.values["yq"].astype(int)
            assert any(l.layer.detail.get("int8") for l in rep.layers)
            d = np.abs(got - want)
            tot += d.size
            diff += (d > 0).sum()
            mx = max(mx, d.max())
        print(op, "per-channel" if pc else "per-tensor", "max steps", mx, "differing", diff, "of", tot)
for form in ["qlinear", "qdq"]:
    tot = diff = mx = 0
    for seed in range(5):
        m = classifier(form, seed=seed)
        x = np.random.default_rng(100 + seed).uniform(-2.4, 2.6, SHAPE).astype(np.float32)
        with fastane.errstate(saturation="ignore"):
            y = np.asarray(fastane.load_model(m)({"x": x})["y"], np.float64)
        w = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
        d = np.rint(np.abs(y - w) / float(YS))
        tot += d.size
        diff += (d > 0).sum()
        mx = max(mx, d.max())
    print("classifier", form, "max steps", mx, "differing", diff, "of", tot)
