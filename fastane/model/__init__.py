"""fastane.model: a user's model (ONNX, Core ML) on the emulated ANE.

The sub-packages follow the data path, a file to a per-layer report:

- :mod:`~fastane.model.frontends`: the importers, a model file -> a :class:`Graph` of
  fastane's ops: :mod:`~fastane.model.frontends.onnx` (the only package that imports onnx)
  and :mod:`~fastane.model.frontends.coreml` (``.mlpackage`` and ``.mlmodel``; the only one
  that imports coremltools);
- :mod:`~fastane.model.graph`: the front-end-neutral graph, shape binding, constant folding,
  with :mod:`~fastane.model.tensor` (tensor types, the size check),
  :mod:`~fastane.model.budget` and :mod:`~fastane.model.cost` (what a model may ask of the
  host), :mod:`~fastane.model.files` (the one place a model's files are opened);
- :mod:`~fastane.model.ops`: the op vocabulary, one registry (shape and dtype inference, the
  float32 host implementations);
- :mod:`~fastane.model.placement`: which layers run on the ANE and which on the host, and why;
  the stats-only plan; the Core ML placement estimate;
- :mod:`~fastane.model.run`: :class:`Model` (run, fp32 reference), the per-layer
  :class:`Report`, the fp16 hunt;
- :mod:`~fastane.model.cli` and :mod:`~fastane.model.sweep_cli`: ``fastane run`` and
  ``fastane sweep``; :mod:`~fastane.model.zoo`: small architectures built offline.

Imports go that way down: run -> placement, frontends -> graph -> ops -> tensor, budget,
files (``tests/test_imports.py``).  ``import fastane`` imports this package but neither onnx
nor coremltools: an importer loads its library when a model is loaded (the ``onnx`` and
``coreml`` extras).
"""

from __future__ import annotations

import os

from ..errors import ModelError, quote
from .graph import Graph, Node, TensorType, bind
from .run.model import Model, Report
from .tensor import read_protobuf

__all__ = [
    "load_model",
    "is_model_path",
    "MODEL_SUFFIXES",
    "Model",
    "Report",
    "Graph",
    "Node",
    "TensorType",
    "bind",
    "ModelError",
]


def load_model(path, weights: bool = True) -> Model:
    """Load a model file (``.onnx``, an ``.mlpackage`` directory or an ``.mlmodel``) as a
    :class:`Model`; the importer is picked by the suffix, else by the content.

    Raises :class:`~fastane.errors.ModelError` (a ``ValueError``) for a path that names no
    file (a NUL byte in it too), a file that is not a valid model, uses an op fastane does
    not know, or declares tensors beyond the limits; ``TypeError`` for an argument that is
    neither a path nor an ``onnx.ModelProto``.
    ``weights=False`` keeps large weights as shape-only placeholders (no copy): the model
    then supports only ``report(shapes, stats_only=True)``."""
    if not isinstance(path, (str, os.PathLike)):
        proto_type = type(path).__name__
        if proto_type == "ModelProto":
            from .frontends.onnx.importer import from_proto

            return Model(from_proto(path, weights=weights))
        raise TypeError(f"load_model: expected a path or an onnx.ModelProto, got {proto_type}")
    text = os.fspath(path)
    if (b"\0" if isinstance(text, bytes) else "\0") in text:
        raise ModelError(f"{quote(text)}: a path with a NUL byte names no file")
    from .frontends.coreml.importer import is_coreml

    if is_coreml(path) or _sniff_coreml(path):
        from .frontends.coreml.importer import load as load_coreml

        return Model(load_coreml(path, weights))
    from .frontends.onnx.importer import load

    return Model(load(path, weights))


#: file suffixes of the models fastane loads
MODEL_SUFFIXES = (".onnx", ".mlpackage", ".mlmodel")


def is_model_path(name) -> bool:
    """Whether a command-line argument names a model file (by its suffix)."""
    return str(name).rstrip("/").lower().endswith(MODEL_SUFFIXES)


def _sniff_coreml(path) -> bool:
    """A file of another suffix than .onnx/.mlmodel: Core ML if it is a directory (a
    package) or if its protobuf carries a Core ML spec version and no ONNX graph (a file
    that cannot be read is left to the ONNX importer, which says why)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return True
    if p.lower().endswith(".onnx") or not os.path.isfile(p):
        return False
    try:
        data = read_protobuf(p, "model")
    except ModelError:
        return False
    # an ONNX ModelProto starts with field 1 (ir_version, varint: 0x08); a Core ML Model
    # with field 1 too (specificationVersion, 0x08): tell them apart by parsing
    if data[:1] != b"\x08":
        return False
    try:
        from .frontends.coreml.importer import parse_spec

        parse_spec(data, p)
    except (ModelError, ImportError):
        return False
    try:
        import onnx

        m = onnx.ModelProto()
        m.ParseFromString(data)
        return not m.HasField("graph")
    except Exception:
        return True
