"""Small real architectures built offline with ``onnx.helper`` (random weights, seeded):
the default model of ``scripts/demo.sh`` and the whole-model tests.

* :func:`resnet` -- a ResNet-style classifier: a 3x3 stem (Conv + BatchNormalization +
  Relu), basic residual blocks (the second strided, with a 1x1 projection), global
  average pooling, a Gemm classifier;
* :func:`resnet50` -- ResNet-50's layer shapes (the benchmark's model);
* :func:`transformer` -- a pre-norm transformer block: LayerNormalization, multi-head
  self-attention (MatMul + bias, Reshape/Transpose into heads, Q K^T, scale, Softmax,
  @ V), a residual Add, LayerNormalization, an MLP with Gelu, a residual Add.

``python -m fastane.model.zoo resnet|transformer|resnet50 OUT.onnx`` writes one.  Needs the
``onnx`` extra.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["resnet", "transformer", "MODELS"]


def _h():
    from onnx import TensorProto, helper, numpy_helper

    return helper, TensorProto, numpy_helper


class _Net:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self._n = 0

    def name(self, p):
        self._n += 1
        return f"{p}{self._n}"

    def const(self, value, p="w"):
        _, _, nh = _h()
        n = self.name(p)
        self.inits.append(nh.from_array(np.asarray(value), n))
        return n

    def node(self, op, inputs, p=None, **attrs):
        helper, _, _ = _h()
        out = self.name(p or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k=3, stride=1, relu=True, gamma=1.0):
        w = self.rng.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(
            np.sqrt(2.0 / (cin * k * k))
        )
        y = self.node("Conv", [x, self.const(w)], "conv", pads=[k // 2] * 4, strides=[stride] * 2)
        bn = [
            self.rng.uniform(0.5, 1.5, cout) * gamma,
            self.rng.standard_normal(cout) * 0.1,
            self.rng.standard_normal(cout) * 0.1,
            self.rng.uniform(0.5, 1.5, cout),
        ]
        y = self.node("BatchNormalization", [y] + [self.const(v.astype(np.float32), "bn") for v in bn], "bn")
        return self.node("Relu", [y], "relu") if relu else y

    def model(self, name, inputs, outputs, opset):
        helper, _, _ = _h()
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(
            g, opset_imports=[helper.make_opsetid("", opset)], producer_name="fastane.model.zoo"
        )
        m.ir_version = 8
        return m


def resnet(seed: int = 0, width: int = 16, classes: int = 10, size: int = 32):
    """A ResNet-style classifier ``x: float32[N, 3, size, size] -> logits: float32[N, classes]``."""
    helper, T, _ = _h()
    n = _Net(seed)
    y = n.conv_bn("x", 3, width)
    for cin, cout, stride in ((width, width, 1), (width, 2 * width, 2)):
        z = n.conv_bn(y, cin, cout, stride=stride)
        z = n.conv_bn(z, cout, cout, relu=False)
        skip = y if stride == 1 and cin == cout else n.conv_bn(y, cin, cout, k=1, stride=stride, relu=False)
        y = n.node("Relu", [n.node("Add", [z, skip], "add")], "relu")
    y = n.node("Flatten", [n.node("GlobalAveragePool", [y], "gap")], "flatten")
    w = n.rng.standard_normal((classes, 2 * width)).astype(np.float32) / np.float32(np.sqrt(2 * width))
    y = n.node("Gemm", [y, n.const(w), n.const(np.zeros(classes, np.float32) + 0.01, "b")], "fc", transB=1)
    out = helper.make_tensor_value_info(y, T.FLOAT, ["N", classes])
    return n.model(
        "resnet_block_net", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, size, size])], [out], 17
    )


def transformer(seed: int = 0, d: int = 32, heads: int = 4, seq: int = 16):
    """A pre-norm transformer block ``x: float32[1, S, d] -> float32[1, S, d]`` (S symbolic)."""
    helper, T, _ = _h()
    n = _Net(seed)
    dh = d // heads
    rng = n.rng

    def lin(x, i, o, act=None):
        w = (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)
        y = n.node(
            "Add",
            [
                n.node("MatMul", [x, n.const(w)], "mm"),
                n.const((rng.standard_normal(o) * 0.02).astype(np.float32), "b"),
            ],
            "bias",
        )
        return n.node(act, [y], act.lower()) if act else y

    def ln(x):
        return n.node(
            "LayerNormalization",
            [
                x,
                n.const(np.ones(d, np.float32) + rng.standard_normal(d).astype(np.float32) * 0.1, "g"),
                n.const((rng.standard_normal(d) * 0.1).astype(np.float32), "b"),
            ],
            "ln",
            axis=-1,
            epsilon=1e-5,
        )

    def heads_of(x):  # [1, S, d] -> [1, H, S, dh]
        r = n.node("Reshape", [x, n.const(np.array([1, -1, heads, dh], np.int64), "shape")], "reshape")
        return n.node("Transpose", [r], "transpose", perm=[0, 2, 1, 3])

    h = ln("x")
    q, k, v = (heads_of(lin(h, d, d)) for _ in range(3))
    kt = n.node("Transpose", [k], "transpose", perm=[0, 1, 3, 2])
    s = n.node(
        "Mul",
        [n.node("MatMul", [q, kt], "qk"), n.const(np.array(1 / np.sqrt(dh), np.float32), "scale")],
        "scale",
    )
    p = n.node("Softmax", [s], "softmax", axis=-1)
    a = n.node("Transpose", [n.node("MatMul", [p, v], "pv")], "transpose", perm=[0, 2, 1, 3])
    a = n.node("Reshape", [a, n.const(np.array([1, -1, d], np.int64), "shape")], "reshape")
    x1 = n.node("Add", ["x", lin(a, d, d)], "residual")
    m = lin(lin(ln(x1), d, 4 * d, "Gelu"), 4 * d, d)
    y = n.node("Add", [x1, m], "residual")
    out = helper.make_tensor_value_info(y, T.FLOAT, [1, "S", d])
    return n.model("transformer_block", [helper.make_tensor_value_info("x", T.FLOAT, [1, "S", d])], [out], 20)


def resnet50(seed: int = 0, classes: int = 1000, size: int = 224):
    """ResNet-50's architecture (a 7x7/2 stem, 3x3/2 max pool, bottleneck blocks [3, 4, 6, 3]
    of widths 64..512 (x4), global average pool, a 2048 -> ``classes`` Gemm) with random
    weights (He-initialised; BatchNormalization near identity): a benchmark model."""
    helper, T, _ = _h()
    n = _Net(seed)
    y = n.conv_bn("x", 3, 64, k=7, stride=2)
    y = n.node("MaxPool", [y], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            z = n.conv_bn(y, cin, width, k=1)
            z = n.conv_bn(z, width, width, k=3, stride=s)
            # the residual branch's last BatchNormalization starts small (as "zero-init
            # residual" training does), so that random activations stay in range
            z = n.conv_bn(z, width, 4 * width, k=1, relu=False, gamma=0.2)
            skip = n.conv_bn(y, cin, 4 * width, k=1, stride=s, relu=False) if b == 0 else y
            y = n.node("Relu", [n.node("Add", [z, skip], "add")], "relu")
            cin = 4 * width
    y = n.node("Flatten", [n.node("GlobalAveragePool", [y], "gap")], "flatten")
    w = n.rng.standard_normal((classes, cin)).astype(np.float32) / np.float32(np.sqrt(cin))
    y = n.node("Gemm", [y, n.const(w), n.const(np.zeros(classes, np.float32), "b")], "fc", transB=1)
    return n.model(
        "resnet50",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info(y, T.FLOAT, ["N", classes])],
        17,
    )


MODELS = {"resnet": resnet, "transformer": transformer, "resnet50": resnet50}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in MODELS:
        print(f"usage: python -m fastane.model.zoo {'|'.join(MODELS)} OUT.onnx", file=sys.stderr)
        return 2
    import onnx

    onnx.save(MODELS[argv[0]](), argv[1])
    print(f"wrote {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
