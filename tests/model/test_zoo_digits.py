"""fastane.model.zoo.digits: a scikit-learn MLP trained on load_digits(), exported by skl2onnx
(and rebuilt as a Core ML ML program), with its data set as an .npz."""

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="digits trains a scikit-learn MLP (the digits extra)")
pytest.importorskip("skl2onnx", reason="digits exports with skl2onnx (the digits extra)")
pytest.importorskip("onnx", reason="digits writes an ONNX model (the onnx extra)")
ort = pytest.importorskip("onnxruntime", reason="the fp32 outputs come from onnxruntime (the onnx extra)")

import fastane  # noqa: E402
from fastane.model import zoo  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The CLI's folder, its data set and onnxruntime's probabilities for all of it."""
    folder = tmp_path_factory.mktemp("digits")
    assert zoo.main(["digits", str(folder)]) == 0
    data = dict(np.load(folder / "digits.npz"))
    sess = ort.InferenceSession(str(folder / "digits.onnx"), providers=["CPUExecutionProvider"])
    return folder, data, sess.run(["probabilities"], {"X": data["X"]})[0]


def test_the_data_set_is_the_raw_pixels_with_labels_and_a_held_out_part(built):
    _, data, _ = built
    x, labels, train = data["X"], data["labels"], data["train"]
    assert x.shape == (1797, 64) and x.dtype == np.float32 and x.min() == 0 and x.max() == 16
    assert labels.dtype == np.int64 and set(labels) == set(range(10))
    assert train.dtype == bool and train.sum() == 1257  # 70%, stratified
    for c in range(10):
        assert (~train & (labels == c)).any()


def test_the_fp32_model_classifies_held_out_digits(built):
    _, data, probs = built
    held = ~data["train"]
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert (probs.argmax(axis=1) == data["labels"])[held].mean() >= 0.9


def test_the_ane_run_agrees_with_onnxruntime(built):
    folder, data, probs = built
    held = ~data["train"]
    model = fastane.load_model(folder / "digits.onnx")
    out = model({"X": data["X"][held]})["probabilities"]
    assert out.dtype == np.float16 and out.shape == (held.sum(), 10)
    assert (out.argmax(axis=1) == probs[held].argmax(axis=1)).mean() >= 0.99
    assert np.abs(out.astype(np.float32) - probs[held]).max() < 0.02


def test_the_core_ml_twin_matches_the_onnx_model(built):
    pytest.importorskip(
        "coremltools", reason="the .mlpackage is written only with coremltools (coreml extra)"
    )
    folder, data, probs = built
    model = fastane.load_model(folder / "digits.mlpackage")
    assert list(model.inputs) == ["X"] and model.outputs == ["probabilities"]
    ref = model.reference({"X": data["X"]})["probabilities"]
    # the same weights, stored fp16 in the ML program
    assert np.abs(ref - probs).max() < 0.01
    assert (ref.argmax(axis=1) == probs.argmax(axis=1)).mean() >= 0.99
    ane = model({"X": data["X"][:64]})["probabilities"]
    assert (ane.argmax(axis=1) == probs[:64].argmax(axis=1)).mean() >= 0.99


def test_two_builds_are_byte_identical(built, tmp_path):
    folder, _, _ = built
    paths = zoo.digits(tmp_path)
    for kind, name in (("onnx", "digits.onnx"), ("npz", "digits.npz"), ("heldout", "digits-heldout.npz")):
        assert (folder / name).read_bytes() == open(paths[kind], "rb").read(), kind
    held = np.load(paths["heldout"])
    data = np.load(paths["npz"])
    assert np.array_equal(held["X"], data["X"][~data["train"]])
    assert np.array_equal(held["labels"], data["labels"][~data["train"]])


def test_the_cli_names_the_folder_form(capsys):
    assert zoo.main(["digits"]) == 2
    assert "digits OUT_FOLDER" in capsys.readouterr().err


def test_a_file_is_no_folder(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(fastane.ModelError, match="is a file"):
        zoo.digits(tmp_path / "f")
