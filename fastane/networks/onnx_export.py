"""A built-in network as an ONNX model file: the same graph :func:`fastane.networks.graph`
builds, its placeholder weights written as zeros (a stats-only plan never reads them).  Needs the
``onnx`` extra.

    python -m fastane.networks.onnx_export gpt2 gpt2.onnx
    fastane roofline gpt2.onnx        # the same layers, planned the same way as `gpt2`

A network of more than :data:`EXTERNAL_ABOVE` bytes of weights keeps them in a file beside
the model (``OUT.onnx.data``, ONNX's external data: a protobuf holds at most 2 GiB).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .. import workloads as _wl
from . import DTYPE
from . import graph as _graph

__all__ = ["to_onnx", "save", "EXTERNAL_ABOVE", "main"]

#: weights beyond this many bytes go to an external data file
EXTERNAL_ABOVE = 1 << 30

#: fastane op -> ONNX op, and the opset that has it in this form
_OPS = {
    "conv": ("Conv", 11),
    "matmul": ("MatMul", 13),
    "add": ("Add", 14),
    "mul": ("Mul", 14),
    "relu": ("Relu", 14),
    "tanh": ("Tanh", 13),
    "sigmoid": ("Sigmoid", 13),
    "gelu": ("Gelu", 20),
    "hard_swish": ("HardSwish", 14),
    "clip": ("Clip", 13),
    "softmax": ("Softmax", 13),
    "layer_norm": ("LayerNormalization", 17),
    "rms_norm": ("RMSNormalization", 23),
    "max_pool": ("MaxPool", 12),
    "global_avg_pool": ("GlobalAveragePool", 1),
    "concat": ("Concat", 13),
    "split": ("Split", 13),
    "slice": ("Slice", 13),
}


def _attrs(node) -> dict:
    a = node.attrs
    if node.op in ("conv", "max_pool"):
        pads = a["pads"]
        out = {
            "kernel_shape": list(a["kernel"]),
            "strides": list(a["strides"]),
            "pads": [p[0] for p in pads] + [p[1] for p in pads],
        }
        if node.op == "conv":
            out["group"] = a["groups"]
        return out
    if node.op in ("softmax", "concat", "split"):
        return {"axis": a["axis"]}
    if node.op in ("layer_norm", "rms_norm"):
        return {"axis": a["axis"], "epsilon": a["epsilon"]}
    return {}


def to_onnx(workload):
    """``workload`` (a built-in name or a :class:`~fastane.workloads.Workload`) as an
    ``onnx.ModelProto``."""
    from onnx import TensorProto, helper, numpy_helper

    g = _graph(workload)
    elem = {np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.float32): TensorProto.FLOAT}
    nodes = []
    for n in g.nodes:
        if n.op not in _OPS:
            raise ValueError(f"{n.describe()}: no ONNX form for op {n.op!r}")
        nodes.append(helper.make_node(_OPS[n.op][0], n.inputs, n.outputs, name=n.name, **_attrs(n)))
    # placeholders (zero-stride weights) as zeros, the other constants (Clip's bounds) as they are
    inits = [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in g.consts.items()]
    inputs = [
        helper.make_tensor_value_info(k, elem[np.dtype(t.dtype)], list(t.shape)) for k, t in g.inputs.items()
    ]
    outputs = [helper.make_tensor_value_info(o, elem[DTYPE], None) for o in g.outputs]
    opset = max(_OPS[n.op][1] for n in g.nodes)
    model = helper.make_model(
        helper.make_graph(nodes, g.name, inputs, outputs, inits),
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="fastane.networks",
    )
    model.ir_version = 10 if opset >= 23 else 8
    return model


def save(workload, path) -> None:
    """Write ``workload`` as an ONNX file at ``path`` (external data beyond
    :data:`EXTERNAL_ABOVE` bytes of weights)."""
    import onnx

    model = to_onnx(workload)
    big = sum(t.ByteSize() for t in model.graph.initializer) > EXTERNAL_ABOVE
    onnx.save(model, os.fspath(path), save_as_external_data=big, location=os.path.basename(path) + ".data")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m fastane.networks.onnx_export WORKLOAD OUT.onnx", file=sys.stderr)
        return 2
    try:
        save(_wl.get(argv[0]), argv[1])
    except ValueError as exc:
        print(f"fastane.networks.onnx_export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
