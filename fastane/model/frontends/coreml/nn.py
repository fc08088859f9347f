"""The Core ML importer's neural network (.mlmodel) layer mapping (see
:mod:`fastane.model.frontends.coreml.importer`, the entry point)."""

from __future__ import annotations

import numpy as np

from ....errors import ModelError
from ...graph import Graph, Node, TensorType, check_size


# ------------------------------------------------------------------ neural network (.mlmodel)
#: neural network layer types the importer maps
NN_LAYERS = (
    "convolution",
    "innerProduct",
    "batchnorm",
    "activation",
    "add",
    "multiply",
    "pooling",
    "softmax",
    "flatten",
    "concat",
    "reshapeStatic",
    "flattenTo2D",
)


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
        raise ModelError(f"{what}: quantization {kind!r} is not supported")
    if n == 0:
        return np.zeros(0, np.float32)
    raise ModelError(f"{what}: no weight values (the layer needs {n})")


def unpack_bits_msb(raw, nbits: int, count: int) -> np.ndarray:
    """Neural network quantized weights: ``nbits``-bit indices packed most significant bit
    first (Core ML's NeuralNetwork.proto)."""
    raw = np.frombuffer(raw, np.uint8)
    need = -(-count * nbits // 8)
    if raw.size < need:
        raise ValueError(f"{count} values of {nbits} bits need {need} bytes, got {raw.size}")
    bits = np.unpackbits(raw[:need])[: count * nbits].reshape(count, nbits)
    return (bits.astype(np.uint16) << np.arange(nbits - 1, -1, -1, dtype=np.uint16)).sum(axis=1)


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
        dt, shape = _nn_input_type(fd, f"input {fd.name!r}")
        inputs[fd.name] = TensorType(dt, shape)
        check_size(shape, f"input {fd.name!r}")
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
        what = f"layer {layer.name!r} ({kind})"
        if kind not in NN_LAYERS:
            raise ModelError(f"{what}: neural network layer {kind!r} is not supported by fastane")
        ins = [alias.get(i, i) for i in layer.input]
        outs = list(layer.output)
        if len(outs) != 1:
            raise ModelError(f"{what}: has {len(outs)} outputs, fastane maps 1")
        if not ins:
            raise ModelError(f"{what}: has no inputs")
        L = getattr(layer, kind)
        src = kind

        def emit(op, i, o, attrs=None):  # called within this iteration only (B023 ignored for this file)
            nodes.append(Node(op, layer.name if o == outs else f"{layer.name}:{op}", i, o, attrs or {}, src))
            return o[0]

        if kind == "convolution":
            if L.isDeconvolution:
                raise ModelError(f"{what}: deconvolution layers are not supported yet")
            co, kc = int(L.outputChannels), int(L.kernelChannels)
            kh, kw = (list(L.kernelSize) + [3, 3])[:2] if L.kernelSize else (3, 3)
            g = int(L.nGroups or 1)
            n = check_size((co, kc, kh, kw), what)
            w = _weights(L.weights, n, f"{what} weights", weights).reshape(co, kc, kh, kw)
            strides = tuple(L.stride) or (1, 1)
            dil = tuple(L.dilationFactor) or (1, 1)
            pk = L.WhichOneof("ConvolutionPaddingType")
            if pk == "same":
                auto, pads = ("same_upper" if L.same.asymmetryMode == 0 else "same_lower"), None
            else:
                auto = None
                bs = L.valid.paddingAmounts.borderAmounts
                pads = tuple((int(b.startEdgeSize), int(b.endEdgeSize)) for b in bs) if len(bs) == 2 else None
            ii = [ins[0], const(w)]
            if L.hasBias:
                ii.append(const(_weights(L.bias, co, f"{what} bias", weights)))
            emit(
                "conv",
                ii,
                outs,
                {"strides": strides, "dilations": dil, "pads": pads, "auto_pad": auto, "groups": g},
            )
        elif kind == "innerProduct":
            co, ci = int(L.outputChannels), int(L.inputChannels)
            n = check_size((co, ci), what)
            w = _weights(L.weights, n, f"{what} weights", weights).reshape(co, ci)
            x = ins[0]
            t = tmp()
            nodes.append(Node("flatten", f"{layer.name}:flatten", [x], [t], {"axis": 1}, src))
            ii = [t, const(np.ascontiguousarray(w.T))]
            if L.hasBias:
                m = emit("matmul", ii, [tmp()])
                emit("add", [m, const(_weights(L.bias, co, f"{what} bias", weights))], outs)
            else:
                emit("matmul", ii, outs)
        elif kind == "batchnorm":
            c = int(L.channels)
            vals = [
                _weights(getattr(L, k), c, f"{what} {k}", weights)
                for k in ("gamma", "beta", "mean", "variance")
            ]
            emit(
                "batchnorm", [ins[0]] + [const(v) for v in vals], outs, {"epsilon": float(L.epsilon or 1e-5)}
            )
        elif kind == "activation":
            a = L.WhichOneof("NonlinearityType")
            table = {
                "ReLU": ("relu", {}),
                "sigmoid": ("sigmoid", {}),
                "tanh": ("tanh", {}),
                "softplus": ("softplus", {}),
                "leakyReLU": ("leaky_relu", {"alpha": L.leakyReLU.alpha}),
                "ELU": ("elu", {"alpha": L.ELU.alpha}),
            }
            if a not in table and a != "linear":
                raise ModelError(f"{what}: activation {a!r} is not supported")
            if a == "linear":
                t = emit("mul", [ins[0], const(np.float32(L.linear.alpha))], [tmp()])
                emit("add", [t, const(np.float32(L.linear.beta))], outs)
            else:
                emit(table[a][0], ins[:1], outs, table[a][1])
        elif kind in ("add", "multiply"):
            op = "add" if kind == "add" else "mul"
            if len(ins) == 1:
                emit(op, [ins[0], const(np.float32(L.alpha))], outs)
            else:
                cur = ins[0]
                for i, other in enumerate(ins[1:]):
                    cur = emit(op, [cur, other], outs if i == len(ins) - 2 else [tmp()])
        elif kind == "pooling":
            k = tuple(L.kernelSize) or (3, 3)
            typ = L.type  # MAX 0, AVERAGE 1
            if typ not in (0, 1):
                raise ModelError(f"{what}: L2 pooling is not supported")
            if L.globalPooling:
                emit("global_max_pool" if typ == 0 else "global_avg_pool", ins[:1], outs)
            else:
                pk = L.WhichOneof("PoolingPaddingType")
                auto, pads = (None, None)
                if pk == "same":
                    auto = "same_upper" if L.same.asymmetryMode == 0 else "same_lower"
                elif pk == "valid":
                    bs = L.valid.paddingAmounts.borderAmounts
                    pads = (
                        tuple((int(b.startEdgeSize), int(b.endEdgeSize)) for b in bs)
                        if len(bs) == 2
                        else None
                    )
                else:
                    raise ModelError(f"{what}: includeLastPixel padding is not supported")
                attrs = {"kernel": k, "strides": tuple(L.stride) or (1, 1), "pads": pads, "auto_pad": auto}
                if typ == 1:
                    attrs["count_include_pad"] = int(not L.avgPoolExcludePadding)
                emit("max_pool" if typ == 0 else "avg_pool", ins[:1], outs, attrs)
        elif kind == "softmax":
            emit("softmax", ins[:1], outs, {"axis": 1})
        elif kind in ("flatten", "flattenTo2D"):
            emit("flatten", ins[:1], outs, {"axis": 1})
        elif kind == "concat":
            emit("concat", ins, outs, {"axis": 1})
        elif kind == "reshapeStatic":
            emit("reshape", [ins[0], const(np.array((1,) + tuple(L.targetShape), np.int64))], outs)
    out_names = []
    for fd in spec.description.output:
        out_names.append(fd.name)
    # drop the batch axis again where the declared output has none
    final = []
    produced = {o for n in nodes for o in n.outputs}
    for o in out_names:
        if o not in produced and o not in alias:
            raise ModelError(f"model output {o!r} is not produced by any layer")
        if batched:
            inner = f"fastane::nnout:{o}"
            for n in nodes:
                n.outputs = [inner if t == o else t for t in n.outputs]
                n.inputs = [inner if t == o else t for t in n.inputs]
            nodes.append(
                Node("squeeze", f"{o}:batch", [inner, const(np.array([0], np.int64))], [o], {}, "batch")
            )
        final.append(o)
    return Graph(
        name,
        inputs,
        final,
        nodes,
        consts,
        origin=f"coreml neuralNetwork (spec {spec.specificationVersion})",
        weights=weights,
    )
