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

from ..errors import ModelError
from . import control  # noqa: F401  (registers the control-flow ops: If, Loop, Scan)
from .graph import Graph, Node, TensorType, bind
from .files import map_file
from .run.model import Model, Report

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


def load_model(path, weights: bool = True, chip="m1") -> Model:
    """Load a model file (``.onnx``, an ``.mlpackage`` directory or an ``.mlmodel``) as a
    :class:`Model`; the importer is picked by the suffix, else by the content.

    Raises :class:`~fastane.errors.ModelError` (a ``ValueError``) for a path that names no
    file (a NUL byte in it too), a file that is not a valid model, uses an op fastane does
    not know, or declares tensors beyond the limits; ``TypeError`` for an argument that is
    neither a path nor an ``onnx.ModelProto``.
    ``weights=False`` keeps large weights as shape-only placeholders (no copy): the model
    then supports only ``report(shapes, stats_only=True)``.  ``chip``: the chip the model
    runs as on where a call names none (:attr:`Model.chip`: its time model and the numerics
    of its ANE generation; a ValueError for an unknown name, before the file is read)."""
    from ..roofline import chips as _chips

    chip = _chips.get(chip)
    if not isinstance(path, (str, os.PathLike)):
        proto_type = type(path).__name__
        if proto_type == "ModelProto":
            from .frontends.onnx.importer import from_proto

            return Model(from_proto(path, weights=weights), chip)
        raise TypeError(f"load_model: expected a path or an onnx.ModelProto, got {proto_type}")
    from .frontends.coreml.importer import is_coreml

    if is_coreml(path) or _sniff_coreml(path):
        from .frontends.coreml.importer import load as load_coreml

        return Model(load_coreml(path, weights), chip)
    from .frontends.onnx.importer import load

    return Model(load(path, weights), chip)


#: file suffixes of the models fastane loads
MODEL_SUFFIXES = (".onnx", ".mlpackage", ".mlmodel")


def is_model_path(name) -> bool:
    """Whether a command-line argument names a model file (by its suffix)."""
    return str(name).rstrip("/").lower().endswith(MODEL_SUFFIXES)


def _sniff_coreml(path) -> bool:
    """A file of another suffix than .onnx/.mlmodel: Core ML if it is a directory (a
    package) or if its protobuf's top-level fields, scanned without parsing their
    payloads (the file mapped, not read), hold a Core ML model type (field 200 and above:
    ``neuralNetwork``, ``mlProgram``...) before any ONNX graph (field 7); a file that
    cannot be read is left to the ONNX importer, which says why."""
    p = os.fspath(path)
    if os.path.isdir(p):
        return True
    if p.lower().endswith(".onnx") or not os.path.isfile(p):
        return False
    try:
        buf = map_file(p, "model")
    except ModelError:
        return False
    # an ONNX ModelProto starts with field 1 (ir_version, varint: 0x08); a Core ML Model
    # with field 1 too (specificationVersion, 0x08)
    if buf[:1] != b"\x08":
        return False
    for number, wire in _top_fields(buf, _SNIFF_FIELDS):
        if number == 7:  # ModelProto.graph
            return False
        if number >= 200:  # Model.Type, a message
            return wire == 2
    return False


#: the most top-level fields :func:`_sniff_coreml` scans (a model has a handful)
_SNIFF_FIELDS = 1 << 12


def _top_fields(buf, most: int):
    """``(field number, wire type)`` of the first ``most`` top-level fields of the protobuf
    message in ``buf``, each payload skipped, not parsed; stops at the first malformed one."""

    def varint(i):
        v = shift = 0
        while i < len(buf) and shift < 64:
            b = buf[i]
            v |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                return v, i
            shift += 7
        return None, i

    i = 0
    for _ in range(most):
        if i >= len(buf):
            return
        tag, i = varint(i)
        if tag is None:
            return
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = varint(i)
            if v is None:
                return
        elif wire == 1 or wire == 5:
            i += 8 if wire == 1 else 4
        elif wire == 2:
            n, i = varint(i)
            if n is None:
                return
            i += n
        else:
            return
        if i > len(buf):
            return
        yield number, wire
