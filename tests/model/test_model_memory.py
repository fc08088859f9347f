"""Loading and running a model holds its weights about once: the peak traced allocation
(numpy's buffers are traced by tracemalloc) during load and one run of a model with W
bytes of fp16 weights stays under C * W (the models' memory target: docs/models.md, "Memory")."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fastane

pytest.importorskip("onnx")
from fastane.model import zoo  # noqa: E402

#: the stated bound: peak traced bytes <= C x the model's fp16 weight bytes.  What may be
#: live at once: the importer's float32 constants while folding (2 W), the model's fp16
#: weights (W), their packed kernel regions in unified memory (W), one task's float64
#: decode and the activations (measured: 6.9 W for this model, before and after the
#: float64 weight cache went: its peak is at load, not in the cache).
C = 8


def test_load_and_run_peak_is_a_small_multiple_of_the_weights():
    proto = zoo.resnet(seed=0, width=128, classes=10, size=16)
    w_fp16 = 2 * sum(int(np.prod(t.dims)) for t in proto.graph.initializer)
    assert w_fp16 > 1 << 20  # a model whose weights dominate
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    fastane.load_model(proto)({"x": x})  # compile the kernels outside the trace
    tracemalloc.start()
    try:
        model = fastane.load_model(proto)
        model({"x": x})
        model({"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= C * w_fp16, f"peak {peak / 1e6:.1f} MB for {w_fp16 / 1e6:.1f} MB of fp16 weights"
