"""A whole model on the emulated ANE against onnxruntime float32 (pytest-benchmark).

    .venv/bin/python -m pytest bench/bench_model.py --benchmark-only

* ``test_model_resnet50``: ResNet-50's layers (``fastane.model.zoo.resnet50``, random
  weights) at 224 x 224, one image: ``fastane.load_model(...)({"x": x})`` (every Conv,
  with its BatchNormalization folded, the residual Adds and the classifier on the
  emulated ANE; pooling on the host) against onnxruntime's CPU provider in float32, in
  the same run; the ratio is in the summary.  Smoke mode runs a 64 x 64 image once.
* ``test_model_stats_only_resnet50``: the stats-only report of the same model at 224 x
  224 (the lowering's caches cleared first): the target is 2 s (the README's speed table).
"""

from __future__ import annotations

import numpy as np
import pytest

import fastane
from fastane import lower

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from fastane.model import zoo  # noqa: E402


@pytest.fixture(scope="module")
def resnet50():
    return zoo.resnet50(seed=0)


def test_model_resnet50(measure, compare, smoke, resnet50):
    size = 64 if smoke else 224
    proto = resnet50 if not smoke else zoo.resnet50(seed=0, size=size)
    model = fastane.load_model(proto)
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    y = model({"x": x})[model.outputs[0]]
    assert float(np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()) < 1e-2
    assert y.argmax() == ref.argmax()
    macs = model.report({"x": x.shape}, stats_only=True).total.macs
    # medians of several rounds: the shared machine's neighbours move single forwards by 20%
    t = measure(lambda: model({"x": x}), rounds=9)
    compare(t, macs, {"onnxruntime_f32": (lambda: sess.run(None, {"x": x}), 25)})


def _stats_only(model):
    lower.cache_clear()
    lower.tiler._tile.cache_clear()
    model._cache.clear()
    return model.report({"x": (1, 3, 224, 224)}, stats_only=True)


def test_model_stats_only_resnet50(benchmark, smoke, note, resnet50):
    model = fastane.load_model(resnet50)
    _stats_only(model)
    rep = benchmark.pedantic(_stats_only, args=(model,), rounds=1 if smoke else 5, iterations=1)
    assert rep.total.macs > 4e9 and rep.total.tasks > 50
    if not smoke:
        med = benchmark.stats.stats.median
        note(
            f"stats-only report of ResNet-50 (224 x 224): {med:.3f} s (median, cold caches; "
            f"budget 2 s), {rep.total.tasks} tasks, predicted {rep.total.time_s * 1e3:.2f} ms on M1"
        )
