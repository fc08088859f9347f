"""The importers: a model file -> a :class:`~fastane.model.graph.Graph` of fastane's ops.

- :mod:`.onnx`: ``.onnx`` files (the ``onnx`` extra);
- :mod:`.coreml`: ``.mlpackage`` (ML Program, MIL) and ``.mlmodel`` (neural network) files
  (the ``coreml`` extra).

Neither imports its library before a model is loaded.
"""

__all__ = ["onnx", "coreml"]
