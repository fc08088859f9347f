"""fastane.networks: the built-in roofline networks as model graphs, planned the way a
model file is.

- :func:`graph`: a built-in workload (:mod:`fastane.workloads`: ResNet-50, MobileNets,
  MobileOne, FastViT, ViT, BERT, Whisper, GPT-2, Llama, and the ``--transformer``/
  ``--matmul`` specs) as a :class:`fastane.model.Graph` of shapes only (its weights are
  zero-stride placeholders, as a model file loaded with ``weights=False`` has them);
- :func:`input_shapes`: the shapes it is planned for;
- :func:`to_onnx` (:mod:`.onnx_export`, needs the ``onnx`` extra): the same graph as an ONNX
  model, so that ``fastane roofline gpt2`` and ``fastane roofline gpt2.onnx`` plan the same
  layers the same way;
- :mod:`.plan`: :func:`~fastane.networks.plan.analyze`, a built-in network or a model file
  placed and lowered by :mod:`fastane.model` in stats-only mode and estimated on a chip;
- :mod:`.cli`: ``fastane roofline``.

Every layer of a workload becomes the nodes a model exporter writes for it, named after the
layer (a fused activation is the node after it, named ``<layer>.act``).  A layer that
``follows`` the previous one reads its output; any other reads the latest output of the
shape it takes (a residual's earlier operand; for a convolution or matmul, one that no
following layer took), otherwise an input of its own (attention's queries, keys and values,
which a file would reshape from the projections).  The readers matter: the stats-only plan
keeps an intermediate in L2 only when the next layer is its one reader
(:func:`fastane.model.placement.plan.chains`).  Layouts: convolutional networks are NCHW with batch 1;
transformer activations are ``[tokens, hidden]`` (the workloads' ``(C=hidden, H=1,
W=tokens)``), attention ``[heads, queries, keys]``; a network of convolutions and attention
(FastViT, the UNet) has its norms and its planar layers of height 1 in the tokens' layout,
the others in NCHW.  A workload whose attention extends a KV cache by concatenation
(``Workload.kv_concat``) has each layer's split and concats of the cache, the stack of
the layers' caches and its two returned slices as ``split``/``concat``/``slice`` nodes,
which the placer moves on the ANE.  A palettized
workload (``Workload.weight_bits``) marks its convolutions' and matmuls' weights
compressed, with codes of that width.
"""

from __future__ import annotations

from math import prod

import numpy as np

from .. import workloads as _wl
from ..model import Graph, Node, TensorType
from ..model.budget import MAX_LAYER_BYTES
from ..model.cost import node_cost

__all__ = ["graph", "input_shapes", "slices", "DTYPE"]

#: the element type of the graphs' inputs and weights: the workloads' fp16 (an fp16 model
#: file's; a float32 file's layers round to fp16 on the ANE and plan the same tasks)
DTYPE = np.dtype(np.float16)

#: a workload's fused activation -> the ops that spell it: (fastane op, ONNX op)
_ACT = {
    "relu": [("relu", "Relu")],
    "gelu": [("gelu", "Gelu")],
    "tanh": [("tanh", "Tanh")],
    "sigmoid": [("sigmoid", "Sigmoid")],
    "hardswish": [("hard_swish", "HardSwish")],
    "relu6": [("clip", "Clip")],
    "silu": [("sigmoid", "Sigmoid"), ("mul", "Mul")],
}


class _Builder:
    """Nodes, placeholder weights and inputs of one graph, in order."""

    def __init__(self):
        self.nodes, self.consts, self.inputs = [], {}, {}
        self.shapes: dict = {}
        self.made: list = []  # node outputs, in order
        self.prev = None  # the last node's output
        #: outputs no other MAC layer reads: those a following layer or an activation took
        self.taken: set = set()

    def fresh(self, name: str, shape) -> str:
        self.inputs[name] = TensorType(DTYPE, tuple(shape))
        self.shapes[name] = tuple(shape)
        return name

    def source(self, name: str, shape, other: str | None = None, layer=None) -> str:
        """The latest output of ``shape`` (the previous layer's first; not ``other``), else
        a new input.  For a MAC ``layer``: the previous layer's output when the layer
        ``follows`` it (and the shapes agree), else the latest output of ``shape`` that no
        such layer took (ResNet's downsample reads the block's input, not the
        bottleneck's 3x3 output of the same shape)."""
        shape = tuple(shape)
        if layer is not None and layer.follows and self.prev and self.shapes[self.prev] == shape:
            self.taken.add(self.prev)
            return self.prev
        for n in reversed(self.made):
            if self.shapes[n] == shape and n != other and (layer is None or n not in self.taken):
                return n
        return self.fresh(f"{name}.in" if other is None else f"{name}.in2", shape)

    def weight(self, name: str, shape, value: float | None = None) -> str:
        self.consts[name] = (
            np.full(tuple(shape), value, DTYPE)
            if value is not None
            else np.broadcast_to(np.zeros((), DTYPE), tuple(shape))
        )
        self.shapes[name] = tuple(shape)
        return name

    def node(self, op, source, name, inputs, shape, attrs=None) -> str:
        self.nodes.append(Node(op, name, list(inputs), [name], dict(attrs or {}), source))
        self.shapes[name] = tuple(shape)
        self.made.append(name)
        self.prev = name
        return name

    def activation(self, act, x, name) -> str:
        if act is None:
            return x
        if act not in _ACT:
            raise ValueError(f"{name}: activation {act!r} has no model op")
        shape = self.shapes[x]
        self.taken.add(x)  # the activation's input is the layer's, not an output
        y = x
        for i, (op, src) in enumerate(_ACT[act]):
            nm = f"{name}.act" if i == 0 else f"{name}.act{i}"
            if op == "clip":
                ins = [y, self.weight(f"{nm}.min", (), 0.0), self.weight(f"{nm}.max", (), 6.0)]
            elif op == "mul":
                ins = [x, y]
            else:
                ins = [y]
            y = self.node(op, src, nm, ins, shape)
        return y


def _conv(b: _Builder, layer) -> None:
    x = b.source(layer.name, (1, layer.cin, layer.h, layer.w), layer=layer)
    w = b.weight(f"{layer.name}.weight", (layer.cout, layer.cin // layer.groups, layer.kh, layer.kw))
    p = layer.pad
    attrs = {
        "strides": (layer.stride, layer.stride),
        "dilations": None,
        "pads": ((p, p), (p, p)),
        "auto_pad": None,
        "groups": layer.groups,
        "kernel": (layer.kh, layer.kw),
    }
    y = b.node("conv", "Conv", layer.name, [x, w], (1, layer.cout, layer.hout, layer.wout), attrs)
    b.activation(layer.activation, y, layer.name)


def slices(M: int, K: int, N: int) -> int:
    """Column slices a weight matmul ``(M x K) @ (K x N)`` is written as: the fewest that
    keep each within the model path's per-node budget (:data:`MAX_LAYER_BYTES`), as a model
    file's layers must be: 1 but for a large vocabulary projection (Llama-3.2-1B's
    2048 x 128256 lm_head: 2)."""
    k = 1
    while k < N:
        n = -(-N // k)
        x, w, y = TensorType(DTYPE, (M, K)), TensorType(DTYPE, (K, n)), TensorType(DTYPE, (M, n))
        if node_cost(Node("matmul", "", ["x", "w"], ["y"]), [x, w], [y]).bytes <= MAX_LAYER_BYTES:
            break
        k += 1
    return k


def _matmul(b: _Builder, layer) -> None:
    lead = (layer.B,) if layer.B > 1 else ()
    x = b.source(layer.name, lead + (layer.M, layer.K), layer=layer)
    k = slices(layer.M, layer.K, layer.N) if layer.weights else 1
    for i in range(k):  # k column slices of the weights, named <layer>.<i> when more than one
        name = layer.name if k == 1 else f"{layer.name}.{i}"
        n = len(range(i, layer.N, k))  # N split as evenly as it goes
        if layer.weights:
            w = b.weight(f"{name}.weight", lead + (layer.K, n))
        else:  # the right operand is an activation (attention's keys or values)
            w = b.fresh(f"{name}.rhs", lead + (layer.K, n))
        y = b.node("matmul", "MatMul", name, [x, w], lead + (layer.M, n))
        b.activation(layer.activation, y, name)


def _eltwise(b: _Builder, layer, rows: bool) -> None:
    c, h, w = layer.in_shape
    op, name = layer.op, layer.name
    if op == "softmax":  # over the keys: [heads, queries, keys] as the scores left it
        prev = b.shapes[b.prev] if b.prev else ()
        if not (prev and prod(prev) == c * h * w and prev[-1] == w):
            prev = (c * h, w)
        b.node("softmax", "Softmax", name, [b.source(name, prev)], prev, {"axis": -1, "legacy": False})
        return
    shape = (w * h, c) if rows else (1, c, h, w)
    if op in ("layernorm", "rmsnorm"):
        x = b.source(name, shape)
        ins = [x, b.weight(f"{name}.scale", (c,))]
        if op == "layernorm":
            ins.append(b.weight(f"{name}.bias", (c,)))
        fop, src = (
            ("layer_norm", "LayerNormalization") if op == "layernorm" else ("rms_norm", "RMSNormalization")
        )
        b.node(fop, src, name, ins, shape, {"axis": -1, "epsilon": 1e-5})
        return
    base, _, act = op.partition("+")  # "add+relu", "mul+gelu": the activation after it
    if base in ("add", "mul") and (not act or act in _ACT):
        x = b.source(name, shape)
        other = (1, c, 1, 1) if base == "mul" and not rows else shape  # squeeze-excite: a per-channel gate
        y = b.node(base, base.capitalize(), name, [x, b.source(name, other, other=x)], shape)
        b.activation(act or None, y, name)
        return
    if op in _ACT and tuple(layer.out_shape) == (c, h, w):  # an activation alone (relu:RxD)
        b.activation(op, b.source(name, shape), name)
        return
    if op == "avgpool" and tuple(layer.out_shape[1:]) == (1, 1):
        x = b.source(name, shape)
        b.node("global_avg_pool", "GlobalAveragePool", name, [x], (1, c, 1, 1))
        return
    if op.startswith("maxpool"):  # "maxpool3x3/2": a 3 x 3 window, stride 2, padding 1
        k, s = 3, 2
        if "/" in op:
            k, s = int(op[len("maxpool") :].split("x")[0]), int(op.split("/")[1])
        x = b.source(name, shape)
        _, ho, wo = layer.out_shape
        attrs = {
            "kernel": (k, k),
            "strides": (s, s),
            "dilations": None,
            "pads": ((k // 2, k // 2), (k // 2, k // 2)),
            "auto_pad": None,
            "ceil_mode": 0,
            "count_include_pad": 0,
        }
        b.node("max_pool", "MaxPool", name, [x], (1, c, ho, wo), attrs)
        return
    raise ValueError(f"{name}: planar op {op!r} has no model op")


def _kv_concat(b: _Builder, workload) -> list:
    """The moves of a KV cache each attention layer extends by concatenation
    (:attr:`~fastane.workloads.Workload.kv_concat` rows), as smpanaro's gpt2 KV-cache program
    (more-ane-transformers ``models/gpt2.py`` @797cdd6) writes them.  Per layer, in its
    ``(1, rows, 2 width)`` layout (batch 1): the layer's ``cached`` rows of the cache input
    ``[keys | values]`` split into its keys and values, each concatenated with the step's new
    rows (inputs of their own, as attention's are), keys and values concatenated again
    (``current_cache``).  Then the program's ``torch.stack`` of the layers' caches, a concat
    over the leading axis (the program's ``(layers, 1, rows, 2 width)`` without its axis of
    one: the same elements in the same order), and the two ``cached``-row slices of the stack
    it returns (rows from ``seq`` and from 1: the prompt and generation caches).  The cache
    input's unbind into layers moves no element (each layer's cache is a contiguous block of
    it): each layer reads its block as an input of its own, as a view.  The outputs' names."""
    cached, caches, size = int(workload.kv_concat), [], None
    for layer in workload.layers:
        if not (isinstance(layer, _wl.Matmul) and layer.name.endswith(".attn.scores")):
            continue
        p, width, rows = layer.name[: -len(".scores")], layer.B * layer.K, layer.N
        if size not in (None, (rows, width)):
            raise ValueError(
                f"{layer.name}: a cache of {rows} x {width}, where the layers before hold "
                f"{size[0]} x {size[1]}: stacked caches must be alike"
            )
        size, seq = (rows, width), rows - cached
        if seq < 1:
            raise ValueError(f"{layer.name}: {rows} keys leave no new row past {cached} cached ones")
        cache = b.fresh(f"{p}.cache", (1, cached, 2 * width))
        b.consts[f"{p}.cache.sizes"] = np.array([width, width], np.int64)
        parts = [f"{p}.cache.keys", f"{p}.cache.values"]
        b.nodes.append(
            Node("split", f"{p}.cache.split", [cache, f"{p}.cache.sizes"], parts, {"axis": 2}, "Split")
        )
        for t in parts:
            b.shapes[t] = (1, cached, width)
        kv = []
        for t, old in zip(("keys", "values"), parts):
            new = b.fresh(f"{p}.new_{t}", (1, seq, width))
            kv.append(b.node("concat", "Concat", f"{p}.kv_{t}", [old, new], (1, rows, width), {"axis": 1}))
        caches.append(b.node("concat", "Concat", f"{p}.kv", kv, (1, rows, 2 * width), {"axis": 2}))
    if not caches:
        return []
    stack = b.node("concat", "Concat", "kv_cache", caches, (len(caches), rows, 2 * width), {"axis": 0})
    outs = []
    for part, start in (("prompt", seq), ("generation", 1)):
        name = f"kv_cache.{part}"
        for arg, v in (("starts", start), ("ends", start + cached), ("axes", 1)):
            b.consts[f"{name}.{arg}"] = np.array([v], np.int64)
        ins = [stack] + [f"{name}.{arg}" for arg in ("starts", "ends", "axes")]
        outs.append(b.node("slice", "Slice", name, ins, (len(caches), cached, 2 * width)))
    return outs


def graph(workload) -> Graph:
    """``workload`` (a :class:`~fastane.workloads.Workload` or a built-in name) as a model
    graph of shapes only: its layers as model ops, its weights as placeholders."""
    if isinstance(workload, str):
        workload = _wl.get(workload)
    b = _Builder()
    rows = any(
        isinstance(layer, _wl.Eltwise) and layer.op in ("softmax", "layernorm", "rmsnorm")
        for layer in workload.layers
    )
    for layer in workload.layers:
        if isinstance(layer, _wl.Conv2d):
            _conv(b, layer)
        elif isinstance(layer, _wl.Matmul):
            _matmul(b, layer)
        else:  # tokens (C, 1, W) in a network with row operations, and every norm; else NCHW
            norm = layer.op in ("layernorm", "rmsnorm")
            _eltwise(b, layer, rows and (layer.in_shape[1] == 1 or norm))
    outputs = [b.prev]
    if workload.kv_concat:
        outputs += _kv_concat(b, workload)
    # a palettized workload's weights: every convolution's and matmul's, as a Core ML
    # palettized program stores them (its small tensors, norms' scales and biases, stay fp16)
    bits = int(workload.weight_bits)
    packed = (
        {n.inputs[1] for n in b.nodes if n.op in ("conv", "matmul") and n.inputs[1] in b.consts}
        if bits
        else set()
    )
    return Graph(
        workload.name,
        b.inputs,
        outputs,
        b.nodes,
        b.consts,
        origin="fastane.workloads (shapes only)",
        weights=False,
        compressed=packed,
        code_bits=dict.fromkeys(packed, bits),
    )


def input_shapes(g: Graph) -> dict:
    """name -> shape of every input of ``g`` (a symbolic dimension bound to 1)."""
    return {k: tuple(1 if isinstance(d, str) else d for d in t.shape) for k, t in g.inputs.items()}
