"""The ONNX importer: a ``.onnx`` file (or ``onnx.ModelProto``) -> a :class:`~fastane.model.graph.Graph`.

The only module of fastane that imports ``onnx`` (lazily, when a model is loaded: the
``onnx`` extra).  Everything ONNX-specific stops here: op types are mapped to fastane's op
names (:mod:`fastane.model.ops`), attributes are normalised (``pads`` as ``(begin, end)``
pairs, ``auto_pad`` lower-case), and operands that older opsets gave as attributes
(``Squeeze`` axes, ``Clip`` bounds, ``Slice`` starts/ends, ``Pad`` pads, ``Reduce*`` axes)
become constant inputs.

A hostile file gets a :class:`~fastane.errors.ModelError` before anything large is
allocated: the protobuf must parse, every initializer's declared size is checked against
:data:`~fastane.model.graph.MAX_TENSOR_ELEMENTS` and against the bytes it actually holds,
external data is refused, and ops outside the vocabulary are named.  Every node is checked
against ONNX's schema of its op (required attributes, attribute types, input and output
counts, no required input left empty), and whatever else goes wrong while a node is
converted is a ModelError naming the node.  A string field that is not valid UTF-8 (which
protobuf hands over as bytes) becomes a ``str`` with ``\\xNN`` escapes.
"""

from __future__ import annotations

import os

import numpy as np

from ....errors import ModelError, ModelNotImplementedError, quote
from ...budget import check_nodes
from ...graph import DTYPES, Graph, Node, TensorType, check_size
from .host import HOST_OPS, convert as _convert_host, output_names
from ...tensor import read_protobuf

__all__ = ["load", "from_proto", "SUPPORTED"]


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - the extra is part of the test extra
        raise ImportError("loading ONNX models needs the onnx package: pip install 'fastane[onnx]'") from None
    return onnx


#: with ``weights=False``, initializers above this many elements are not decoded
SHAPE_ONLY_ABOVE = 4096


def load(path, weights: bool = True) -> Graph:
    """Read and import the ONNX model at ``path``.  ``weights=False``: large initializers
    keep their shape and dtype only (a read-only zero placeholder, no copy): enough for a
    stats-only report, refused by anything that computes."""
    onnx = _onnx()
    path = os.fspath(path)
    data = read_protobuf(path, "model")
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise ModelError(f"{path}: not a valid ONNX model (protobuf parse failed: {exc})") from None
    if not proto.HasField("graph"):
        raise ModelError(f"{path}: not an ONNX model (no graph; is the file truncated or another format?)")
    return from_proto(proto, name=os.path.basename(path), weights=weights)


def _np_dtype(elem_type: int, what: str) -> np.dtype:
    onnx = _onnx()
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise ModelError(f"{what}: unsupported ONNX element type {elem_type}") from None
    if dt.type not in DTYPES:
        raise ModelError(f"{what}: element type {dt.name} is not supported by fastane")
    return dt


_TYPED_FIELDS = {
    np.dtype(np.float32): "float_data",
    np.dtype(np.float64): "double_data",
    np.dtype(np.int64): "int64_data",
    np.dtype(np.int32): "int32_data",
    np.dtype(np.int16): "int32_data",
    np.dtype(np.int8): "int32_data",
    np.dtype(np.uint8): "int32_data",
    np.dtype(np.bool_): "int32_data",
    np.dtype(np.float16): "int32_data",
}


def _tensor(t, what: str, values: bool = True) -> np.ndarray:
    """A TensorProto as a numpy array, its declared size checked before conversion
    (``values=False``: a zero placeholder of its shape when it is large)."""
    onnx = _onnx()
    what = f"{what} {quote(_text(t.name))}" if t.name else what
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelError(
            f"{what}: external tensor data is not supported by fastane yet "
            f"(save the model with its weights inside the file)"
        )
    dt = _np_dtype(t.data_type, what)
    n = check_size(tuple(int(d) for d in t.dims), what)
    if t.segment.end or t.segment.begin:
        raise ModelError(f"{what}: segmented tensors are not supported")
    if t.HasField("raw_data") or t.raw_data:
        have = len(t.raw_data)
        if have != n * dt.itemsize:
            raise ModelError(
                f"{what}: declares shape {quote(tuple(t.dims), marks=False)} ({n * dt.itemsize} bytes of "
                f"{dt.name}) but holds {have} bytes"
            )
    else:
        have = len(getattr(t, _TYPED_FIELDS[dt]))
        if have != n:
            raise ModelError(
                f"{what}: declares shape {quote(tuple(t.dims), marks=False)} ({n} values) but holds {have}"
            )
    if not values and n > SHAPE_ONLY_ABOVE:
        return np.broadcast_to(np.zeros((), dt), tuple(int(d) for d in t.dims))
    try:
        arr = onnx.numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelError(f"{what}: cannot decode tensor data ({exc})") from None
    return np.asarray(arr.astype(dt, copy=False), order="C")


def _text(s) -> str:
    """A string field of the protobuf as ``str``: protobuf gives the bytes of a field that
    is not valid UTF-8, here decoded with ``\\xNN`` escapes for those bytes."""
    return s.decode("utf-8", "backslashreplace") if isinstance(s, bytes) else s


def _value_type(vi, what: str) -> TensorType:
    name = _text(vi.name)
    what = f"{what} {quote(name)}"
    if not vi.type.HasField("tensor_type"):
        raise ModelError(f"{what}: only tensor inputs are supported")
    tt = vi.type.tensor_type
    dt = _np_dtype(tt.elem_type, what)
    if not tt.HasField("shape"):
        raise ModelError(f"{what}: has no declared shape (rank unknown)")
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise ModelError(f"{what}: negative dimension {d.dim_value}")
            dims.append(int(d.dim_value))
        else:
            # a symbol is only compared: its unprintable characters escaped keep messages one line
            dims.append(
                quote(_text(d.dim_param), None, marks=False) or f"{quote(name, None, marks=False)}:{i}"
            )
    return TensorType(dt, tuple(dims))


def _attrs(node, where: str) -> tuple:
    """``(values, types)``: the node's attributes by name, and their ONNX attribute types."""
    onnx = _onnx()
    out, types = {}, {}
    for a in node.attribute:
        k = _text(a.name)
        try:
            v = onnx.helper.get_attribute_value(a)
        except Exception as exc:
            raise ModelError(f"{where}: bad attribute {quote(k)} ({quote(str(exc), marks=False)})") from None
        if isinstance(v, bytes):
            v = _text(v)
        elif isinstance(v, list):
            v = [_text(x) for x in v]
        out[k], types[k] = v, a.type
    return out, types


def _check_schema(op: str, opset: int, types: dict, ins: list, outs: list, where: str) -> None:
    """The node against ONNX's schema of ``op`` at ``opset`` (the newest one when the op is
    newer than the model's opset): required attributes present, every known attribute of
    its declared type, the input and output counts within the op's, no required input
    left empty (a deprecated op's inputs are not checked: fastane also takes their older
    forms).  Attributes the schema does not name are ignored."""
    from onnx import AttributeProto, defs

    try:
        schema = defs.get_schema(op, opset, "")
    except (defs.SchemaError, TypeError):  # no schema at this opset; TypeError: beyond int32
        try:
            schema = defs.get_schema(op)
        except defs.SchemaError:  # pragma: no cover - every op of SUPPORTED has a schema
            return
    ver = f"{op}-{schema.since_version}"
    for k, spec in schema.attributes.items():
        if k not in types:
            if spec.required:
                raise ModelError(f"{where}: the required attribute {k!r} of {ver} is missing")
        elif types[k] != int(spec.type):
            got = (
                AttributeProto.AttributeType.Name(types[k])
                if types[k] in AttributeProto.AttributeType.values()
                else types[k]
            )
            raise ModelError(f"{where}: attribute {k!r} is {got}, {ver} takes {spec.type.name}")
    counts = [("output", outs, schema.min_output, schema.max_output)]
    if not schema.deprecated:  # Upsample, Scatter: fastane also takes their older inputs
        counts.append(("input", ins, schema.min_input, schema.max_input))
    for what, names, lo, hi in counts:
        if not lo <= len(names) <= hi:
            takes = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi < 1 << 30 else f"at least {lo}"
            raise ModelError(
                f"{where}: has {len(names)} {what}{'s' if len(names) != 1 else ''}, {ver} takes {takes}"
            )
    for i, (formal, name) in enumerate(zip([] if schema.deprecated else schema.inputs, ins)):
        if not name and formal.option == defs.OpSchema.FormalParameterOption.Single:
            raise ModelError(f"{where}: input {i} ({formal.name}) is required but given as ''")


_UNARY = {
    "Relu": "relu",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Abs": "abs",
    "Neg": "neg",
    "Erf": "erf",
    "HardSwish": "hard_swish",
    "Softplus": "softplus",
    "Sign": "sign",
    "Floor": "floor",
    "Ceil": "ceil",
    "Identity": "identity",
}
_BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "PRelu": "prelu",
    "Max": "max",
    "Min": "min",
    "Sum": "add",
    "Where": "where",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "MatMul": "matmul",
    "Expand": "expand",
    "Range": "range",
    "Gather": "gather",
    "Concat": "concat",
    "Transpose": "transpose",
    "Flatten": "flatten",
    "Shape": "shape",
}
_REDUCE = {
    "ReduceMean": "reduce_mean",
    "ReduceSum": "reduce_sum",
    "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min",
}
#: ONNX op types the importer maps (default domain)
SUPPORTED = sorted(
    set(_UNARY)
    | set(_BINARY)
    | set(HOST_OPS)
    | set(_REDUCE)
    | {
        "Conv",
        "ConvTranspose",
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "Gemm",
        "BatchNormalization",
        "LeakyRelu",
        "Gelu",
        "Elu",
        "Selu",
        "HardSigmoid",
        "Clip",
        "Cast",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "RMSNormalization",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Reshape",
        "Squeeze",
        "Unsqueeze",
        "Slice",
        "Pad",
        "Dropout",
        "Constant",
    }
)


class _Builder:
    def __init__(self, opset: int):
        self.opset = opset
        self.consts: dict = {}
        self.nodes: list = []
        self._n = 0

    def const(self, value, dtype) -> str:
        self._n += 1
        name = f"fastane::const{self._n}"
        self.consts[name] = np.asarray(np.asarray(value, dtype), order="C")
        return name


def _pads(a, nsp, where):
    p = a.get("pads")
    if p is None:
        return None
    if len(p) != 2 * nsp:
        raise ModelError(f"{where}: pads has {len(p)} values, {nsp} spatial axes need {2 * nsp}")
    return tuple((int(p[i]), int(p[i + nsp])) for i in range(nsp))


def _auto_pad(a, where):
    v = a.get("auto_pad", "NOTSET")
    table = {"NOTSET": None, "SAME_UPPER": "same_upper", "SAME_LOWER": "same_lower", "VALID": "valid"}
    if v not in table:
        raise ModelError(f"{where}: unknown auto_pad {quote(v)}")
    return table[v]


def _conv_attrs(a, nsp, where) -> dict:
    """The attributes Conv, ConvTranspose and QLinearConv share."""
    return {
        "strides": a.get("strides"),
        "dilations": a.get("dilations"),
        "pads": _pads(a, nsp, where),
        "auto_pad": _auto_pad(a, where),
        "groups": a.get("group", 1),
    }


def _qlinear(op, name, ins, mk, a, where, b, rank_of) -> Node:
    """QLinearConv / QLinearMatMul as dequantize -> conv / matmul -> quantize (ONNX's
    definition; the int32 bias of QLinearConv has the scale ``x_scale * w_scale``)."""
    need = 8
    if len(ins) < need or not all(ins[:need]):
        raise ModelError(f"{where}: needs its {need} quantized operands")
    x, xs, xz, w, ws, wz, ys, yz = ins[:need]
    tx, tw, ty = f"{name}::x", f"{name}::w", f"{name}::y"
    b.nodes.append(Node("dequantize", f"{name}/dequantize_x", [x, xs, xz], [tx], {"axis": 1}, op))
    waxis = 0 if op == "QLinearConv" else 1  # per output channel
    b.nodes.append(Node("dequantize", f"{name}/dequantize_w", [w, ws, wz], [tw], {"axis": waxis}, op))
    if op == "QLinearMatMul":
        b.nodes.append(Node("matmul", f"{name}/matmul", [tx, tw], [ty], {}, op))
    else:
        inputs = [tx, tw]
        if len(ins) > need and ins[need]:
            tbs, tb = f"{name}::bias_scale", f"{name}::bias"
            b.nodes.append(Node("mul", f"{name}/bias_scale", [xs, ws], [tbs], {}, op))
            b.nodes.append(
                Node("dequantize", f"{name}/dequantize_b", [ins[need], tbs, ""], [tb], {"axis": 0}, op)
            )
            inputs.append(tb)
        nsp = rank_of(w) - 2 if rank_of(w) else len(a.get("kernel_shape", ())) or 2
        attrs = {**_conv_attrs(a, nsp, where), "kernel": a.get("kernel_shape")}
        b.nodes.append(Node("conv", f"{name}/conv", inputs, [ty], attrs, op))
    return mk("quantize", {"axis": 1}, inputs=[ty, ys, yz])


def _convert(node, b: _Builder, rank_of) -> Node | None:
    """The fastane node of ONNX ``node`` (None for a Constant: it becomes a constant).  A
    node that does not match its op's schema, or whose attributes or operands fastane
    cannot use, is a ModelError naming it, whatever went wrong."""
    op = _text(node.op_type)
    name = _text(node.name) or f"{op}_{len(b.nodes)}"
    where = f"node {quote(name)} ({quote(op, marks=False)})"
    a, types = _attrs(node, where)
    ins, outs = [_text(i) for i in node.input], [_text(o) for o in node.output]
    if op in SUPPORTED:
        _check_schema(op, b.opset, types, ins, outs, where)
    try:
        return _convert_node(op, a, ins, outs, name, where, b, rank_of)
    except ModelError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise ModelError(
            f"{where}: cannot use its attributes or operands ({type(exc).__name__}: {quote(str(exc), marks=False)})"
        ) from None


def _convert_node(op, a, ins, outs, name, where, b: _Builder, rank_of) -> Node | None:
    def mk(fop, attrs=None, inputs=None, n_out=1):
        names = output_names(outs, name, where, op, n_out)
        return Node(fop, name, inputs if inputs is not None else ins, names, attrs or {}, op)

    if op == "Constant":
        if len(a) != 1:
            raise ModelError(f"{where}: needs exactly one value attribute, has {len(a)}")
        ((k, v),) = a.items()
        if k == "value":
            arr = _tensor(v, f"{where} value")
        elif k in ("value_float", "value_floats"):
            arr = np.asarray(v, np.float32)
        elif k in ("value_int", "value_ints"):
            arr = np.asarray(v, np.int64)
        else:
            raise ModelError(f"{where}: attribute {quote(k)} is not supported")
        b.consts[outs[0]] = arr
        return None
    if op in _UNARY:
        return mk(_UNARY[op])
    if op == "Dropout":
        return mk("identity", inputs=ins[:1])
    if op in _BINARY:
        attrs = {}
        if op in ("Concat", "Gather", "Flatten"):
            attrs["axis"] = a.get("axis", 0 if op != "Flatten" else 1)
        if op == "Transpose":
            attrs["perm"] = a.get("perm")
        if op == "Shape":
            attrs.update({k: a[k] for k in ("start", "end") if k in a})
        return mk(_BINARY[op], attrs)
    if op == "LeakyRelu":
        return mk("leaky_relu", {"alpha": a.get("alpha", 0.01)})
    if op == "Elu":
        return mk("elu", {"alpha": a.get("alpha", 1.0)})
    if op == "Selu":
        return mk("selu", {k: a[k] for k in ("alpha", "gamma") if k in a})
    if op == "HardSigmoid":
        return mk("hard_sigmoid", {"alpha": a.get("alpha", 0.2), "beta": a.get("beta", 0.5)})
    if op == "Gelu":
        return mk("gelu", {"approximate": a.get("approximate", "none")})
    if op == "Cast":
        return mk("cast", {"to": _np_dtype(a["to"], where)})
    if op == "Clip":
        if b.opset < 11:
            ins = ins[:1] + [
                b.const(a.get("min", -3.4028234663852886e38), np.float32),
                b.const(a.get("max", 3.4028234663852886e38), np.float32),
            ]
        return mk("clip")
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return mk("quantize" if op == "QuantizeLinear" else "dequantize", {"axis": a.get("axis", 1)})
    if op in ("QLinearConv", "QLinearMatMul"):
        return _qlinear(op, name, ins, mk, a, where, b, rank_of)
    if op in ("Conv", "ConvTranspose"):
        nsp = rank_of(ins[1]) - 2 if rank_of(ins[1]) else len(a.get("kernel_shape", ())) or 2
        attrs = _conv_attrs(a, nsp, where)
        if op == "Conv":
            return mk("conv", {**attrs, "kernel": a.get("kernel_shape")})
        return mk(
            "conv_transpose",
            {**attrs, "output_padding": a.get("output_padding"), "output_shape": a.get("output_shape")},
        )
    if op == "Gemm":
        return mk(
            "gemm",
            {
                "alpha": a.get("alpha", 1.0),
                "beta": a.get("beta", 1.0),
                "trans_a": a.get("transA", 0),
                "trans_b": a.get("transB", 0),
            },
        )
    if op == "BatchNormalization":
        if a.get("training_mode", 0):
            raise ModelNotImplementedError(f"{where}: training mode is not supported")
        return mk("batchnorm", {"epsilon": a.get("epsilon", 1e-5)})
    if op in ("Softmax", "LogSoftmax"):
        legacy = b.opset < 13
        return mk(
            "softmax" if op == "Softmax" else "log_softmax",
            {"axis": a.get("axis", 1 if legacy else -1), "legacy": legacy},
        )
    if op in ("LayerNormalization", "RMSNormalization"):
        ln = op == "LayerNormalization"
        if ln and a.get("stash_type", 1) != 1:
            raise ModelNotImplementedError(f"{where}: stash_type {a['stash_type']} is not supported (only 1)")
        attrs = {"axis": a.get("axis", -1), "epsilon": a.get("epsilon", 1e-5)}
        return mk("layer_norm" if ln else "rms_norm", attrs, n_out=3 if ln else 1)
    if op in _REDUCE:
        if "axes" in a:
            ins = ins[:1] + [b.const(a["axes"], np.int64)]
        return mk(
            _REDUCE[op],
            {"keepdims": a.get("keepdims", 1), "noop_with_empty_axes": a.get("noop_with_empty_axes", 0)},
        )
    if op in ("MaxPool", "AveragePool"):
        k = a.get("kernel_shape")
        if not k:
            raise ModelError(f"{where}: kernel_shape is required")
        if op == "MaxPool" and a.get("storage_order", 0):
            raise ModelNotImplementedError(f"{where}: storage_order=1 is not supported")
        return mk(
            "max_pool" if op == "MaxPool" else "avg_pool",
            {
                "kernel": tuple(k),
                "strides": a.get("strides"),
                "dilations": a.get("dilations"),
                "pads": _pads(a, len(k), where),
                "auto_pad": _auto_pad(a, where),
                "ceil_mode": a.get("ceil_mode", 0),
                "count_include_pad": a.get("count_include_pad", 0),
            },
        )
    if op == "GlobalAveragePool":
        return mk("global_avg_pool")
    if op == "GlobalMaxPool":
        return mk("global_max_pool")
    if op == "Reshape":
        if b.opset < 5:
            if "shape" not in a:
                raise ModelError(f"{where}: has no shape attribute (Reshape-1 takes the shape as one)")
            ins = ins[:1] + [b.const(a["shape"], np.int64)]
        return mk("reshape", {"allowzero": a.get("allowzero", 0)})
    if op in ("Squeeze", "Unsqueeze"):
        if "axes" in a:
            ins = ins[:1] + [b.const(a["axes"], np.int64)]
        return mk(op.lower())
    if op == "Slice":
        if b.opset < 10:
            ins = ins[:1] + [b.const(a["starts"], np.int64), b.const(a["ends"], np.int64)]
            if "axes" in a:
                ins.append(b.const(a["axes"], np.int64))
        return mk("slice")
    if op == "Pad":
        if b.opset < 11:
            ins = ins[:1] + [b.const(a["pads"], np.int64), b.const(a.get("value", 0.0), np.float32)]
        return mk("pad", {"mode": a.get("mode", "constant")})
    host = _convert_host(op, a, ins, outs, name, where, b)
    if host is not None:
        return host
    raise ModelError(
        f"node {quote(name)}: ONNX op {quote(op)} is not supported by fastane (no ANE lowering "
        f"and no host implementation)"
    )


def from_proto(proto, name: str = "", weights: bool = True) -> Graph:
    """Import an ``onnx.ModelProto`` (``weights``: see :func:`load`)."""
    g = proto.graph
    opset = None
    for imp in proto.opset_import:
        if _text(imp.domain) in ("", "ai.onnx"):
            opset = int(imp.version)
    if opset is None:
        raise ModelError("the model imports no version of the default ONNX operator set")
    b = _Builder(opset)
    for t in g.initializer:
        b.consts[_text(t.name)] = _tensor(t, "initializer", weights)
    if len(g.sparse_initializer):
        raise ModelError("sparse initializers are not supported by fastane")
    inputs = {}
    for vi in g.input:
        if _text(vi.name) in b.consts:
            continue  # an initializer listed as an input (IR < 4): a constant
        inputs[_text(vi.name)] = _value_type(vi, "input")
    ranks = {n: len(t.shape) for n, t in inputs.items()}
    ranks.update({n: v.ndim for n, v in b.consts.items()})
    for vi in g.value_info:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            ranks.setdefault(_text(vi.name), len(vi.type.tensor_type.shape.dim))
    check_nodes(len(g.node), f"model {quote(_text(g.name) or name)}")
    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            op = quote(f"{_text(node.domain)}.{_text(node.op_type)}")
            raise ModelError(
                f"node {quote(_text(node.name))}: op {op} (custom domain) is not supported by fastane"
            )
        n = _convert(node, b, ranks.get)
        if n is not None:
            b.nodes.append(n)
    outputs = [_text(o.name) for o in g.output]
    return Graph(
        _text(g.name) or name,
        inputs,
        outputs,
        b.nodes,
        b.consts,
        origin=f"onnx opset {opset}",
        weights=weights,
    )
