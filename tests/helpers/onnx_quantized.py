"""The meaning of a quantized ONNX model, whatever CPU runs the tests.

onnxruntime's x86 kernels multiply uint8 activations by int8 weights (u8s8) with
instructions that add pairs of products in 16 bits and saturate there on CPUs without
VNNI (SSE4.1, AVX2, AVX-512 without VNNI): microsoft/onnxruntime's commit "Add a graph
optimization that convert u8s8 matrix multiplication to u8u8 if needed" names the
"value overflow problems" and Intel's oneDNN guide, "Nuances of int8 computations".  On
such a host (an AMD EPYC with AVX2 and no VNNI, 2026-12-06) its QLinearConv of
``tests/model/test_int8_models.py``'s classifier is 53 quantization steps off the exact
result, where the hosts these tests ran on before (CI until 8276d7f) gave one step at most.  The tests therefore compare
quantized models with ``onnx.reference``, numpy's exact integer arithmetic of the
operators' definitions, which is the same on every host.
"""

from __future__ import annotations

import numpy as np

#: the first opset whose QuantizeLinear/DequantizeLinear ``onnx.reference`` implements
REFERENCE_OPSET = 21


def run(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``model`` (an ``onnx.ModelProto``) on ``feeds``, evaluated by
    ``onnx.reference`` after converting the model to :data:`REFERENCE_OPSET` if it is older."""
    from onnx import version_converter
    from onnx.reference import ReferenceEvaluator

    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < REFERENCE_OPSET:
        model = version_converter.convert_version(model, REFERENCE_OPSET)
    return ReferenceEvaluator(model).run(None, feeds)
