"""fastane.model: a user's model on the emulated ANE.

- :mod:`~fastane.model.graph`: the front-end-neutral graph, shape binding, constant folding;
- :mod:`~fastane.model.ops`: the op vocabulary (shape inference, float32 host implementations);
- :mod:`~fastane.model.onnx_import`: the ONNX importer (the only module that imports onnx);
- :mod:`~fastane.model.place`: placement on the ANE or the host, with the reason;
- :mod:`~fastane.model.model`: :class:`Model` (run, fp32 reference, per-layer report);
- :mod:`~fastane.model.cli`: ``fastane run``.

``import fastane`` imports this package but never onnx: the importer loads it when a
model is loaded (the ``onnx`` extra).
"""
from __future__ import annotations

import os

from ..errors import ModelError
from .graph import Graph, Node, TensorType, bind
from .model import Model, Report

__all__ = ["load_model", "Model", "Report", "Graph", "Node", "TensorType", "bind", "ModelError"]


def load_model(path, weights: bool = True) -> Model:
    """Load a model file (``.onnx``) as a :class:`Model`.

    Raises :class:`~fastane.errors.ModelError` (a ``ValueError``) for a file that is not a
    valid model, uses an op fastane does not know, or declares tensors beyond the limits.
    ``weights=False`` keeps large weights as shape-only placeholders (no copy): the model
    then supports only ``report(shapes, stats_only=True)``."""
    if not isinstance(path, (str, os.PathLike)):
        proto_type = type(path).__name__
        if proto_type == "ModelProto":
            from .onnx_import import from_proto
            return Model(from_proto(path, weights=weights))
        raise TypeError(f"load_model: expected a path or an onnx.ModelProto, got {proto_type}")
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext in (".mlpackage", ".mlmodel"):
        raise NotImplementedError("load_model: Core ML models are not supported yet (ONNX only)")
    from .onnx_import import load
    return Model(load(path, weights))
