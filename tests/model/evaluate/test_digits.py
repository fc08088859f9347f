"""A real trained classifier over its whole held-out set: scikit-learn's MLP on the digits
scikit-learn ships (fastane.model.zoo.digits), exported by skl2onnx and rebuilt with
coremltools, evaluated on the emulated ANE against its float32 reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the digits classifier is trained by scikit-learn (the digits extra)")
pytest.importorskip("skl2onnx", reason="the digits classifier is exported by skl2onnx (the digits extra)")
ort = pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")

import fastane
from fastane.model import zoo


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    paths = zoo.digits(tmp_path_factory.mktemp("digits"))
    held = np.load(paths["heldout"])
    return paths, held["X"], held["labels"]


def test_the_onnx_export_over_the_held_out_digits(digits):
    paths, x, labels = digits
    ev = fastane.evaluate(paths["onnx"], paths["heldout"], f"{paths['heldout']}:labels", progress=False)
    s = ev.summary
    assert s["inputs"] == len(labels) == 540 and s["reference"] == "onnxruntime"
    sess = ort.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"X": x})[0].argmax(axis=1)
    ane = fastane.load_model(paths["onnx"])({"X": x})["probabilities"].argmax(axis=1)
    assert s["accuracy"]["reference_correct"] == int((ref == labels).sum())
    assert s["accuracy"]["ane_correct"] == int((ane == labels).sum())
    assert s["accuracy"]["reference"] > 0.95
    assert [c["index"] for c in s["changed"]] == np.flatnonzero(ane != ref).tolist()
    # the layers compared are the ANE's (skl2onnx's Cast runs on the host: no comparison)
    compared = {L["name"]: L["placement"] for L in s["layers"] if L["inputs"]}
    assert compared and set(compared.values()) == {"ane"}
    assert all(L["inputs"] == 540 for L in s["layers"] if L["inputs"])


def test_the_core_ml_model_agrees(digits):
    pytest.importorskip("coremltools", reason="the Core ML twin is built with coremltools (the coreml extra)")
    paths, _, labels = digits
    onnx_ev = fastane.evaluate(paths["onnx"], paths["heldout"], labels, progress=False)
    ml_ev = fastane.evaluate(paths["mlpackage"], paths["heldout"], labels, progress=False)
    assert ml_ev.summary["reference"] == "fastane"
    # the same network, its weights stored fp16 in the ML program
    assert abs(ml_ev.summary["accuracy"]["ane"] - onnx_ev.summary["accuracy"]["ane"]) <= 2 / len(labels)
    assert ml_ev.summary["agreement"]["fraction"] > 0.99
