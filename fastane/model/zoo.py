"""Small real architectures built offline with ``onnx.helper`` (random weights, seeded):
the default model of ``scripts/demo.sh`` and the whole-model tests; and one trained model.

* :func:`resnet` -- a ResNet-style classifier: a 3x3 stem (Conv + BatchNormalization +
  Relu), basic residual blocks (the second strided, with a 1x1 projection), global
  average pooling, a Gemm classifier;
* :func:`mobile` -- a MobileNetV3/EfficientNet-style classifier: depthwise convolutions,
  squeeze-and-excitation gates, HardSwish, SiLU, a MaxPool (the kernels of the exported
  mobile networks, for ``scripts/warm_manifest.py``);
* :func:`resnet50` -- ResNet-50's layer shapes (the benchmark's model);
* :func:`transformer` -- a pre-norm transformer block: LayerNormalization, multi-head
  self-attention (MatMul + bias, Reshape/Transpose into heads, Q K^T, scale, Softmax,
  @ V), a residual Add, LayerNormalization, an MLP with Gelu, a residual Add;
* :func:`digits` -- a scikit-learn MLP trained on scikit-learn's digits, exported by skl2onnx
  (and the same network as a Core ML ML program), with the data set it was trained on.

``python -m fastane.model.zoo resnet|transformer|resnet50 OUT.onnx`` writes one;
``python -m fastane.model.zoo digits OUT_FOLDER`` writes ``digits.onnx``,
``digits.mlpackage`` and ``digits.npz`` there.  Needs the ``onnx`` extra (and ``digits``, and
``coreml`` for the ``.mlpackage``).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["resnet", "mobile", "transformer", "resnet50", "digits", "MODELS"]


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


def mobile(seed: int = 0, classes: int = 1000, size: int = 128):
    """A MobileNetV3/EfficientNet-style classifier ``x: float32[N, 3, size, size] ->
    logits: float32[N, classes]``: a strided 3x3 stem with SiLU, then inverted residual
    blocks (1x1 expansion, a depthwise 3x3 or 5x5, strided or not, a squeeze-and-excitation
    gate -- global average pool, 1x1 reduce, Relu, 1x1 expand, HardSigmoid or Sigmoid, a
    broadcast Mul -- and a 1x1 projection, with a residual Add where the shapes agree), the
    activations HardSwish, Relu and SiLU (Sigmoid then Mul, as exporters write it), a 3x3/2
    MaxPool, global average pooling and MobileNetV3-Small's classifier (two Gemms); the
    first layers without bias (a fresh BatchNormalization's, folded) and large enough for
    the NE's table path.  The layer kinds the torchvision mobile
    networks (and ResNet's pool) are made of, at a small size: what ``scripts/warm_manifest.py``
    runs to record their kernels."""
    helper, T, _ = _h()
    n = _Net(seed)

    def act(y, kind):
        if kind == "hswish":
            return n.node("HardSwish", [y], "hswish")
        if kind == "silu":
            return n.node("Mul", [y, n.node("Sigmoid", [y], "sigmoid")], "silu")
        return n.node("Relu", [y], "relu")

    def conv(x, cin, cout, k=1, stride=1, groups=1, kind=None, bias=True):
        w = n.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
        w *= np.float32(np.sqrt(2.0 / (cin // groups * k * k)))
        # no bias: the zero bias of a freshly initialised BatchNormalization folded into the
        # convolution (one bias for every channel: the NE computes through its table)
        b = n.rng.standard_normal(cout) * 0.1 if bias else np.zeros(cout)
        y = n.node(
            "Conv",
            [x, n.const(w), n.const(b.astype(np.float32), "b")],
            "conv",
            pads=[k // 2] * 4,
            strides=[stride] * 2,
            group=groups,
        )
        return act(y, kind) if kind else y

    def gate(x, c, hard):
        s = n.node("GlobalAveragePool", [x], "gap")
        s = conv(conv(s, c, max(8, c // 4), kind="relu"), max(8, c // 4), c)
        s = n.node("HardSigmoid", [s], "hsigmoid", alpha=1 / 6) if hard else n.node("Sigmoid", [s], "sigmoid")
        return n.node("Mul", [x, s], "scale")

    y = conv("x", 3, 16, k=3, stride=2, kind="silu", bias=False)
    cin = 16
    # (expansion, out, kernel, stride, activation, gate, bias)
    for e, cout, k, stride, kind, se, bias in (
        (64, 16, 3, 2, "silu", "sigmoid", False),
        (16, 16, 3, 1, "relu", "hard", True),
        (64, 24, 3, 2, "relu", None, True),
        (96, 24, 5, 1, "hswish", "hard", True),
        (96, 40, 5, 2, "silu", "sigmoid", True),
        (160, 40, 3, 1, "silu", "sigmoid", True),
    ):
        z = conv(y, cin, e, kind=kind, bias=bias) if e != cin else y
        z = conv(z, e, e, k=k, stride=stride, groups=e, kind=kind, bias=bias)
        if se:
            z = gate(z, e, se == "hard")
        z = conv(z, e, cout)
        y = n.node("Add", [z, y], "add") if stride == 1 and cin == cout else z
        if cin == 16 and cout == 16 and stride == 2:
            y = n.node("MaxPool", [y], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        cin = cout
    # MobileNetV3-Small's head: 576 channels, a 1024-wide hidden layer, then the classes
    y = conv(y, cin, 576, kind="hswish")
    y = n.node("Flatten", [n.node("GlobalAveragePool", [y], "gap")], "flatten")
    for i, o in ((576, 1024), (1024, classes)):
        w = n.rng.standard_normal((o, i)).astype(np.float32) / np.float32(np.sqrt(i))
        y = n.node("Gemm", [y, n.const(w), n.const(np.zeros(o, np.float32) + 0.01, "b")], "fc", transB=1)
        y = n.node("HardSwish", [y], "hswish") if o == 1024 else y
    return n.model(
        "mobile_block_net",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info(y, T.FLOAT, ["N", classes])],
        17,
    )


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


#: :func:`digits`' held-out share of ``load_digits()`` (a stratified split, seeded).
DIGITS_TEST_SIZE = 0.3
#: the largest batch :func:`digits`' Core ML model declares (its ``X`` is ``[1..this, 64]``)
DIGITS_MAX_BATCH = 4096


def _digits_fit(seed: int):
    """scikit-learn's MLP on ``load_digits()``: ``(pipeline, x, labels, train)`` with ``x`` the
    raw pixels (float32 [1797, 64], 0..16) and ``train`` the mask of the samples fitted on."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    data = load_digits()
    labels = data.target.astype(np.int64)
    fit_on, _ = train_test_split(
        np.arange(len(labels)), test_size=DIGITS_TEST_SIZE, random_state=seed, stratify=labels
    )
    train = np.zeros(len(labels), bool)
    train[fit_on] = True
    pipe = make_pipeline(
        StandardScaler(),
        MLPClassifier(hidden_layer_sizes=(64,), activation="relu", max_iter=500, random_state=seed),
    )
    with threadpool_limits(1):  # one BLAS thread: the same weights whatever the machine's cores
        pipe.fit(data.data[train], labels[train])
    return pipe, data.data.astype(np.float32), labels, train


def _digits_onnx(pipe):
    """``pipe`` through skl2onnx, cut to ``X: float32[N, 64] -> probabilities: float32[N, 10]``
    (the scaler as Sub and Div, not ai.onnx.ml's Scaler; no label, no ZipMap)."""
    import onnx
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    scaler, mlp = (type(step) for _, step in pipe.steps)
    full = convert_sklearn(
        pipe,
        "digits",
        initial_types=[("X", FloatTensorType([None, 64]))],
        options={scaler: {"div": "div"}, mlp: {"zipmap": False}},
        target_opset=17,
    )
    m = onnx.utils.Extractor(full).extract_model(["X"], ["probabilities"])
    m.graph.name, m.producer_name = "digits", "fastane.model.zoo"
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "N"
    used = {n.domain for n in m.graph.node}
    kept = [o for o in m.opset_import if o.domain in used]
    del m.opset_import[:]
    m.opset_import.extend(kept)
    onnx.checker.check_model(m)
    return m


def _digits_mlpackage(pipe):
    """The same network as :func:`_digits_onnx`'s (Sub, Div, linear, relu, linear, softmax),
    built with coremltools' MIL builder from ``pipe``'s weights: an fp16 ML program with
    ``X: [1..4096, 64]`` (coremltools converts no scikit-learn MLP to an ML program)."""
    import coremltools as ct
    from coremltools.converters.mil.mil import Builder as mb, get_new_symbol

    scaler, mlp = (step for _, step in pipe.steps)
    f32 = lambda a: np.asarray(a, np.float32)
    (w1, w2), (b1, b2) = mlp.coefs_, mlp.intercepts_

    @mb.program(input_specs=[mb.TensorSpec(shape=(get_new_symbol(), 64))])
    def prog(X):
        x = mb.real_div(x=mb.sub(x=X, y=f32(scaler.mean_)), y=f32(scaler.scale_))
        h = mb.relu(x=mb.linear(x=x, weight=f32(w1.T), bias=f32(b1)))
        return mb.softmax(x=mb.linear(x=h, weight=f32(w2.T), bias=f32(b2)), axis=-1, name="probabilities")

    return ct.convert(
        prog,
        convert_to="mlprogram",
        inputs=[ct.TensorType(name="X", shape=(ct.RangeDim(1, DIGITS_MAX_BATCH), 64))],
        minimum_deployment_target=ct.target.macOS13,
        skip_model_load=True,
    )


def _save_npz(path, arrays: dict):
    """``np.savez_compressed`` without its members' clock times: the same arrays, the same bytes."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, a in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
            z.writestr(
                zipfile.ZipInfo(f"{name}.npy", (1980, 1, 1, 0, 0, 0)), buf.getvalue(), zipfile.ZIP_DEFLATED
            )


#: the files :func:`digits` writes (but the .mlpackage)
_DIGITS_FILES = {"onnx": "digits.onnx", "npz": "digits.npz", "heldout": "digits-heldout.npz"}


def digits(folder, seed: int = 0) -> dict:
    """A trained classifier and the data set it was trained on, written into ``folder``:

    * ``digits.onnx`` -- a StandardScaler and an MLP (64 -> 64 relu -> 10 softmax) fitted by
      scikit-learn (Adam, ``random_state=seed``) on ``sklearn.datasets.load_digits()`` (1797
      8x8 images, shipped with scikit-learn) and exported by skl2onnx:
      ``X: float32[N, 64]`` raw pixels 0..16 (the scaling is in the graph) ->
      ``probabilities: float32[N, 10]``;
    * ``digits.mlpackage`` -- the same network and weights as a Core ML ML program (fp16),
      only when coremltools imports (else a line on stderr, and no key);
    * ``digits.npz`` -- ``X`` (float32 [1797, 64]), ``labels`` (int64 [1797]) and ``train``
      (bool [1797]: the 70% fitted on, a stratified ``train_test_split`` with
      ``random_state=seed``; the rest is held out);
    * ``digits-heldout.npz`` -- ``X`` and ``labels`` of the held-out 30% alone (the inputs
      ``fastane eval`` measures accuracy on).

    Returns ``{"onnx": path, "npz": path, "heldout": path}`` and ``"mlpackage"`` when written.
    The ``.onnx`` and the ``.npz`` files are byte-identical from run to run.  Needs the ``digits`` and ``onnx``
    extras (and ``coreml`` for the ``.mlpackage``); raises :class:`~fastane.errors.ModelError`
    when ``folder`` is a file.
    """
    import os

    import onnx

    from ..errors import ModelError

    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ModelError(f"digits writes into a folder; {os.fspath(folder)!r} is a file")
    os.makedirs(folder, exist_ok=True)
    pipe, x, labels, train = _digits_fit(seed)
    paths = {name: os.path.join(folder, f) for name, f in _DIGITS_FILES.items()}
    onnx.save(_digits_onnx(pipe), paths["onnx"])
    _save_npz(paths["npz"], {"X": x, "labels": labels, "train": train})
    _save_npz(paths["heldout"], {"X": x[~train], "labels": labels[~train]})
    try:
        import coremltools  # noqa: F401
    except ImportError as e:
        print(f"digits: no digits.mlpackage (coremltools does not import: {e})", file=sys.stderr)
    else:
        paths["mlpackage"] = os.path.join(folder, "digits.mlpackage")
        _digits_mlpackage(pipe).save(paths["mlpackage"])
    return paths


MODELS = {
    "resnet": resnet,
    "mobile": mobile,
    "transformer": transformer,
    "resnet50": resnet50,
    "digits": digits,
}
#: the entries of :data:`MODELS` that write a folder (a model and its data) rather than return a model
FOLDERS = {"digits"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in MODELS:
        names = "|".join(n for n in MODELS if n not in FOLDERS)
        print(
            f"usage: python -m fastane.model.zoo {names} OUT.onnx\n"
            f"       python -m fastane.model.zoo {'|'.join(FOLDERS)} OUT_FOLDER",
            file=sys.stderr,
        )
        return 2
    if argv[0] in FOLDERS:
        for path in MODELS[argv[0]](argv[1]).values():
            print(f"wrote {path}", file=sys.stderr)
        return 0
    import onnx

    onnx.save(MODELS[argv[0]](), argv[1])
    print(f"wrote {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
