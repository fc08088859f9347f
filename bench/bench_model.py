"""A whole model on the emulated ANE against onnxruntime float32 (pytest-benchmark).

    .venv/bin/python -m pytest bench/bench_model.py --benchmark-only

* ``test_model_resnet50``: ResNet-50's layers (``fastane.model.zoo.resnet50``, random
  weights) at 224 x 224, one image: ``fastane.load_model(...)({"x": x})`` (every Conv,
  with its BatchNormalization folded, the residual Adds and the classifier on the
  emulated ANE; pooling on the host) against onnxruntime's CPU provider in float32, in
  the same run; the ratio is in the summary.  Smoke mode runs a 64 x 64 image once.
* ``test_model_stats_only_resnet50``: the stats-only report of the same model at 224 x
  224 (the lowering's caches cleared first): the target is 2 s (the README's speed table).
* ``test_model_transformer_block``: ``fastane.model.zoo.transformer`` at ViT-Base's width
  (d 768, 12 heads, 197 tokens), one forward, with the time its layout layers moved on the
  ANE take (``fastane.lower.moves.run``, docs/lower.md section 13) summed over the forward.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

import fastane
from fastane import lower
from fastane.lower import moves

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


def test_model_transformer_block(benchmark, smoke, note, monkeypatch):
    d, heads, seq = (64, 4, 17) if smoke else (768, 12, 197)
    model = fastane.load_model(zoo.transformer(seed=0, d=d, heads=heads, seq=seq))
    x = np.random.default_rng(0).standard_normal((1, seq, d)).astype(np.float32)
    rep = model.report({"x": x})
    moved = sum(r.layer.kind == "layout" and r.placement == "ane" for r in rep.layers)
    assert moved >= 3  # q and v to heads, the attention back (k feeds a host transpose)
    spent = []
    real = moves.run

    def timed(*a, **k):
        t = time.perf_counter()
        out = real(*a, **k)
        spent.append(time.perf_counter() - t)
        return out

    monkeypatch.setattr(moves, "run", timed)
    rounds = 1 if smoke else 7
    forwards, per_forward = [], []
    for _ in range(rounds):
        spent.clear()
        t = time.perf_counter()
        model({"x": x})
        forwards.append(time.perf_counter() - t)
        per_forward.append(sum(spent))
    benchmark.pedantic(lambda: model({"x": x}), rounds=1 if smoke else 3, iterations=1)
    fwd, mv = statistics.median(forwards), statistics.median(per_forward)
    benchmark.extra_info.update(forward_ms=fwd * 1e3, moves_ms=mv * 1e3, moved_layers=moved)
    note(
        f"transformer block d={d}, {heads} heads, {seq} tokens: forward {fwd * 1e3:.1f} ms, its {moved} "
        f"moved layout layers {mv * 1e3:.2f} ms of it (medians of {rounds})"
    )
