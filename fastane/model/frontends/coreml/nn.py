"""The Core ML importer's neural network (.mlmodel) layer mapping (see
:mod:`fastane.model.frontends.coreml.importer`, the entry point)."""

from __future__ import annotations

import numpy as np

from ....errors import ModelError, quote
from .blob import flexible_inputs, unpack_bits
from ...graph import Graph, Node, TensorType, check_size


# ------------------------------------------------------------------ neural network (.mlmodel)
def _weights(wp, n: int, what: str, weights: bool) -> np.ndarray:
    """A WeightParams as float32 (floatValue, float16Value, or 8-bit linear/LUT quantized)."""
    if len(wp.floatValue):
        if len(wp.floatValue) != n:
            raise ModelError(f"{what}: holds {len(wp.floatValue)} values, the layer needs {n}")
        return np.asarray(wp.floatValue, np.float32)
    if len(wp.float16Value):
        if len(wp.float16Value) != 2 * n:
            raise ModelError(f"{what}: holds {len(wp.float16Value)} bytes of fp16, the layer needs {2 * n}")
        return np.frombuffer(wp.float16Value, "<f2").astype(np.float32)
    if len(wp.rawValue):
        q = wp.quantization
        nb = q.numberOfBits
        if not 1 <= nb <= 8:
            raise ModelError(f"{what}: {nb}-bit quantization is not supported")
        try:
            idx = unpack_bits_msb(wp.rawValue, nb, n)
        except ValueError as exc:
            raise ModelError(f"{what}: {exc}") from None
        kind = q.WhichOneof("QuantizationType")
        if kind == "lookupTableQuantization":
            lut = np.asarray(q.lookupTableQuantization.floatValue, np.float32)
            if lut.size != 1 << nb:
                raise ModelError(f"{what}: a {nb}-bit table needs {1 << nb} entries, has {lut.size}")
            return lut[idx]
        if kind == "linearQuantization":
            # w = scale * q + bias, one (scale, bias) or one per output channel (axis 0)
            sc = np.asarray(q.linearQuantization.scale, np.float64)
            bi = np.asarray(q.linearQuantization.bias, np.float64)
            if sc.size != bi.size or sc.size < 1 or n % sc.size:
                raise ModelError(f"{what}: {sc.size} scales and {bi.size} biases do not fit {n} weights")
            per = n // sc.size
            with np.errstate(over="ignore", invalid="ignore"):
                return (idx.reshape(sc.size, per) * sc[:, None] + bi[:, None]).astype(np.float32).reshape(-1)
        raise ModelError(f"{what}: quantization {quote(kind)} is not supported")
    if n == 0:
        return np.zeros(0, np.float32)
    raise ModelError(f"{what}: no weight values (the layer needs {n})")


def unpack_bits_msb(raw, nbits: int, count: int) -> np.ndarray:
    """Neural network quantized weights: ``nbits``-bit indices packed most significant bit
    first (Core ML's NeuralNetwork.proto), as uint8."""
    return unpack_bits(raw, nbits, count, msb=True)


def _nn_input_type(fd, what):
    t = fd.type.WhichOneof("Type")
    if t != "multiArrayType":
        raise ModelError(f"{what}: only multi-array inputs are supported (got {t})")
    ma = fd.type.multiArrayType
    from coremltools.proto import FeatureTypes_pb2 as F

    dt = {
        F.ArrayFeatureType.FLOAT32: np.float32,
        F.ArrayFeatureType.DOUBLE: np.float64,
        F.ArrayFeatureType.FLOAT16: np.float16,
        F.ArrayFeatureType.INT32: np.int32,
    }.get(ma.dataType)
    if dt is None:
        raise ModelError(f"{what}: array data type {ma.dataType} is not supported")
    shape = tuple(int(s) for s in ma.shape)
    if not shape or any(s < 1 for s in shape):
        raise ModelError(f"{what}: needs a fixed shape, got {shape}")
    return np.dtype(dt), shape


class _Layer:
    """What a layer's converter needs: its operands, where it is (``what``), and the graph
    being built (``emit`` a node, add a ``const``, name a ``tmp`` tensor)."""

    def __init__(self, layer, kind, ins, outs, nodes, const, tmp, weights):
        self.name, self.kind, self.ins, self.outs = layer.name, kind, ins, outs
        self.what = f"layer {quote(layer.name)} ({kind})"
        self.nodes, self.const, self.tmp, self.weights = nodes, const, tmp, weights

    def emit(self, op, i, o, attrs=None):
        """Append node ``op`` (inputs ``i``, outputs ``o``); its one output's name."""
        name = self.name if o == self.outs else f"{self.name}:{op}"
        self.nodes.append(Node(op, name, i, o, attrs or {}, self.kind))
        return o[0]

    def weights_of(self, wp, n: int, what: str) -> np.ndarray:
        return _weights(wp, n, f"{self.what} {what}", self.weights)


def _valid_pads(valid):
    bs = valid.paddingAmounts.borderAmounts
    return tuple((int(b.startEdgeSize), int(b.endEdgeSize)) for b in bs) if len(bs) == 2 else None


def _same_mode(same) -> str:
    return "same_upper" if same.asymmetryMode == 0 else "same_lower"


def _convolution(L, cx: _Layer):
    if L.isDeconvolution:
        raise ModelError(f"{cx.what}: deconvolution layers are not supported yet")
    co, kc = int(L.outputChannels), int(L.kernelChannels)
    kh, kw = (list(L.kernelSize) + [3, 3])[:2] if L.kernelSize else (3, 3)
    n = check_size((co, kc, kh, kw), cx.what)
    w = cx.weights_of(L.weights, n, "weights").reshape(co, kc, kh, kw)
    if L.WhichOneof("ConvolutionPaddingType") == "same":
        auto, pads = _same_mode(L.same), None
    else:
        auto, pads = None, _valid_pads(L.valid)
    ii = [cx.ins[0], cx.const(w)]
    if L.hasBias:
        ii.append(cx.const(cx.weights_of(L.bias, co, "bias")))
    attrs = {
        "strides": tuple(L.stride) or (1, 1),
        "dilations": tuple(L.dilationFactor) or (1, 1),
        "pads": pads,
        "auto_pad": auto,
        "groups": int(L.nGroups or 1),
    }
    cx.emit("conv", ii, cx.outs, attrs)


def _inner_product(L, cx: _Layer):
    co, ci = int(L.outputChannels), int(L.inputChannels)
    n = check_size((co, ci), cx.what)
    w = cx.weights_of(L.weights, n, "weights").reshape(co, ci)
    t = cx.tmp()
    cx.nodes.append(Node("flatten", f"{cx.name}:flatten", [cx.ins[0]], [t], {"axis": 1}, cx.kind))
    ii = [t, cx.const(np.ascontiguousarray(w.T))]
    if L.hasBias:
        m = cx.emit("matmul", ii, [cx.tmp()])
        cx.emit("add", [m, cx.const(cx.weights_of(L.bias, co, "bias"))], cx.outs)
    else:
        cx.emit("matmul", ii, cx.outs)


def _batchnorm(L, cx: _Layer):
    c = int(L.channels)
    vals = [cx.weights_of(getattr(L, k), c, k) for k in ("gamma", "beta", "mean", "variance")]
    cx.emit(
        "batchnorm", [cx.ins[0]] + [cx.const(v) for v in vals], cx.outs, {"epsilon": float(L.epsilon or 1e-5)}
    )


#: neural network activations -> (fastane op, its attributes from the activation's message)
_ACTIVATIONS = {
    "ReLU": ("relu", lambda p: {}),
    "sigmoid": ("sigmoid", lambda p: {}),
    "tanh": ("tanh", lambda p: {}),
    "softplus": ("softplus", lambda p: {}),
    "leakyReLU": ("leaky_relu", lambda p: {"alpha": p.alpha}),
    "ELU": ("elu", lambda p: {"alpha": p.alpha}),
    # ActivationSigmoidHard {alpha, beta} (apple/coremltools@e0e2f42 mlmodel/format/NeuralNetwork.proto)
    "sigmoidHard": ("hard_sigmoid", lambda p: {"alpha": p.alpha, "beta": p.beta}),
}


def _activation(L, cx: _Layer):
    a = L.WhichOneof("NonlinearityType")
    if a == "linear":
        t = cx.emit("mul", [cx.ins[0], cx.const(np.float32(L.linear.alpha))], [cx.tmp()])
        cx.emit("add", [t, cx.const(np.float32(L.linear.beta))], cx.outs)
        return
    if a not in _ACTIVATIONS:
        raise ModelError(f"{cx.what}: activation {quote(a)} is not supported")
    op, attrs = _ACTIVATIONS[a]
    cx.emit(op, cx.ins[:1], cx.outs, attrs(getattr(L, a)))


def _elementwise(op):
    def convert(L, cx: _Layer):
        if len(cx.ins) == 1:
            cx.emit(op, [cx.ins[0], cx.const(np.float32(L.alpha))], cx.outs)
            return
        cur = cx.ins[0]
        for i, other in enumerate(cx.ins[1:]):
            cur = cx.emit(op, [cur, other], cx.outs if i == len(cx.ins) - 2 else [cx.tmp()])

    return convert


def _pooling(L, cx: _Layer):
    typ = L.type  # MAX 0, AVERAGE 1
    if typ not in (0, 1):
        raise ModelError(f"{cx.what}: L2 pooling is not supported")
    if L.globalPooling:
        cx.emit("global_max_pool" if typ == 0 else "global_avg_pool", cx.ins[:1], cx.outs)
        return
    pk = L.WhichOneof("PoolingPaddingType")
    if pk == "same":
        auto, pads = _same_mode(L.same), None
    elif pk == "valid":
        auto, pads = None, _valid_pads(L.valid)
    else:
        raise ModelError(f"{cx.what}: includeLastPixel padding is not supported")
    attrs = {
        "kernel": tuple(L.kernelSize) or (3, 3),
        "strides": tuple(L.stride) or (1, 1),
        "pads": pads,
        "auto_pad": auto,
    }
    if typ == 1:
        attrs["count_include_pad"] = int(not L.avgPoolExcludePadding)
    cx.emit("max_pool" if typ == 0 else "avg_pool", cx.ins[:1], cx.outs, attrs)


def _one(op, attrs=None, all_inputs=False):
    def convert(L, cx: _Layer):
        cx.emit(op, cx.ins if all_inputs else cx.ins[:1], cx.outs, attrs)

    return convert


def _reshape_static(L, cx: _Layer):
    cx.emit("reshape", [cx.ins[0], cx.const(np.array((1,) + tuple(L.targetShape), np.int64))], cx.outs)


#: neural network layer type -> its converter ``(layer message, _Layer)``
_NN = {
    "convolution": _convolution,
    "innerProduct": _inner_product,
    "batchnorm": _batchnorm,
    "activation": _activation,
    "add": _elementwise("add"),
    "multiply": _elementwise("mul"),
    "pooling": _pooling,
    "softmax": _one("softmax", {"axis": 1}),
    "flatten": _one("flatten", {"axis": 1}),
    "flattenTo2D": _one("flatten", {"axis": 1}),
    "concat": _one("concat", {"axis": 1}, all_inputs=True),
    "reshapeStatic": _reshape_static,
}
#: neural network layer types the importer maps
NN_LAYERS = tuple(_NN)


def neural_network(spec, nn, name, weights) -> Graph:
    """A neural network spec: rank-3 (C, H, W) or rank-1 (C) inputs become (1, C, H, W) /
    (1, C) tensors (Core ML's batch of one); the outputs lose that batch axis again (an
    inner product's output is then (C,), not Core ML's (C, 1, 1))."""
    consts: dict = {}
    nodes: list = []
    inputs: dict = {}
    counter = [0]

    def const(v):
        counter[0] += 1
        k = f"fastane::nn{counter[0]}"
        consts[k] = np.asarray(v)
        return k

    def tmp():
        counter[0] += 1
        return f"fastane::nnt{counter[0]}"

    for fd in spec.description.input:
        dt, shape = _nn_input_type(fd, f"input {quote(fd.name)}")
        inputs[fd.name] = TensorType(dt, shape)
        check_size(shape, f"input {quote(fd.name)}")
    alias = {}
    batched = False
    for k, t in inputs.items():
        cur = k
        if np.dtype(t.dtype) != np.float32:
            cur = tmp()
            nodes.append(Node("cast", f"{k}:to_fp32", [k], [cur], {"to": np.dtype(np.float32)}, "cast"))
        if len(t.shape) in (1, 3):
            batched = True
            nxt = tmp()
            nodes.append(
                Node("unsqueeze", f"{k}:batch", [cur, const(np.array([0], np.int64))], [nxt], {}, "batch")
            )
            cur = nxt
        alias[k] = cur
    for layer in nn.layers:
        kind = layer.WhichOneof("layer")
        what = f"layer {quote(layer.name)} ({kind})"
        if kind not in NN_LAYERS:
            raise ModelError(f"{what}: neural network layer {quote(kind)} is not supported by fastane")
        ins = [alias.get(i, i) for i in layer.input]
        outs = list(layer.output)
        if len(outs) != 1:
            raise ModelError(f"{what}: has {len(outs)} outputs, fastane maps 1")
        if not ins:
            raise ModelError(f"{what}: has no inputs")
        _NN[kind](getattr(layer, kind), _Layer(layer, kind, ins, outs, nodes, const, tmp, weights))
    out_names = []
    for fd in spec.description.output:
        out_names.append(fd.name)
    # drop the batch axis again where the declared output has none
    final = []
    produced = {o for n in nodes for o in n.outputs}
    for o in out_names:
        if o not in produced and o not in alias:
            raise ModelError(f"model output {quote(o)} is not produced by any layer")
        if batched:
            inner = f"fastane::nnout:{o}"
            for n in nodes:
                n.outputs = [inner if t == o else t for t in n.outputs]
                n.inputs = [inner if t == o else t for t in n.inputs]
            nodes.append(
                Node("squeeze", f"{o}:batch", [inner, const(np.array([0], np.int64))], [o], {}, "batch")
            )
        final.append(o)
    defaults, allowed = flexible_inputs(spec)
    return Graph(
        name,
        inputs,
        final,
        nodes,
        consts,
        origin=f"coreml neuralNetwork (spec {spec.specificationVersion})",
        weights=weights,
        default_shapes=defaults,
        allowed_shapes=allowed,
    )
