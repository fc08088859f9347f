"""fastane.evaluate in one process: the rows against the model run input by input and
onnxruntime, the aggregate, the data readers, results files, resuming, errors."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the evaluation tests build their model with onnx (the onnx extra)")
ort = pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")

import fastane
from fastane.errors import ModelError
from fastane.model.evaluate import partial_path
from fastane.model.evaluate.data import Preprocess
from tests.helpers.evaluate import inputs, linear_classifier

N = 37


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return linear_classifier(tmp_path_factory.mktemp("eval") / "linear.onnx")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    x = inputs(N, big=2)
    labels = np.arange(N) % 4
    path = tmp_path_factory.mktemp("data") / "data.npz"
    np.savez(path, x=x, labels=labels)
    return str(path), x, labels


@pytest.fixture(scope="module")
def evaluation(model, data):
    path, _, _ = data
    return fastane.evaluate(model, path, f"{path}:labels", batch=5, progress=False)


def test_rows_match_the_model_and_onnxruntime_input_by_input(model, data, evaluation):
    _, x, labels = data
    m = fastane.load_model(model)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [r["index"] for r in evaluation.rows] == list(range(N))
    for i, r in enumerate(evaluation.rows):
        with fastane.errstate(saturation="ignore"):
            y = m({"x": x[i : i + 1]})["logits"]
        ref = sess.run(None, {"x": x[i : i + 1]})[0]
        assert r["ane"] == int(np.argmax(y)) and r["ref"] == int(np.argmax(ref))
        assert r["agree"] == (r["ane"] == r["ref"])
        assert r["ane_correct"] == (r["ane"] == labels[i])
        assert r["saturated"] > 0 if i >= N - 2 else r["saturated"] == 0
    s = evaluation.summary
    assert s["reference"] == "onnxruntime" and s["metric"] == "classify"
    assert s["accuracy"]["ane_correct"] == sum(r["ane_correct"] for r in evaluation.rows)
    assert s["accuracy"]["reference_correct"] == sum(r["ref_correct"] for r in evaluation.rows)
    assert evaluation.changed == [r["id"] for r in evaluation.rows if not r["agree"]]
    assert s["inputs_with"]["saturation"] == 2
    (layer,) = [L for L in s["layers"] if L["saturated"]]
    assert layer["saturated_inputs"] == 2 and layer["placement"] == "ane"
    assert {w["index"] for w in layer["worst"][:2]} == {N - 2, N - 1}


def test_the_text_and_json_name_the_figures(evaluation):
    text = evaluation.table()
    assert f"{N} inputs" in text and "accuracy on 37 labelled inputs" in text
    assert "saturation 2" in text
    d = json.loads(evaluation.to_json())
    assert d["summary"]["inputs"] == N and d["run"]["workers"] == 1


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_results_files_hold_the_rows(model, data, evaluation, tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow", reason=".parquet results need pyarrow (the eval extra)")
    path, _, _ = data
    out = tmp_path / f"r{suffix}"
    ev = fastane.evaluate(model, path, f"{path}:labels", batch=8, output=out, progress=False)
    assert ev.summary == evaluation.summary
    assert not os.path.exists(partial_path(out))
    if suffix == ".csv":
        with open(out) as f:
            got = list(csv.DictReader(f))
        assert [int(r["ane"]) for r in got] == [r["ane"] for r in ev.rows]
    elif suffix == ".jsonl":
        got = [json.loads(line) for line in open(out)]
        assert got == [{k: v for k, v in r.items()} for r in ev.rows]
    else:
        import pyarrow.parquet as pq

        assert pq.read_table(out).to_pylist() == ev.rows


class Stop(Exception):
    pass


def test_a_stopped_run_resumes_from_its_partial_file(model, data, evaluation, tmp_path):
    path, _, _ = data
    out = tmp_path / "r.csv"

    def stop_after_two(done, total):
        if done >= 10:
            raise Stop

    with pytest.raises(Stop):
        fastane.evaluate(model, path, f"{path}:labels", batch=5, output=out, progress=stop_after_two)
    assert not out.exists()
    journal = partial_path(out)
    assert len(open(journal).read().splitlines()) == 1 + 10
    with pytest.raises(ModelError, match="holds the partial results of an earlier run"):
        fastane.evaluate(model, path, f"{path}:labels", output=out, progress=False)
    with pytest.raises(ModelError, match="another evaluation .*labels"):
        fastane.evaluate(model, path, output=out, resume=True, progress=False)
    with open(journal, "a") as f:
        f.write('{"index": 10, "id": "10", "lab')  # a run killed while it wrote
    ev = fastane.evaluate(model, path, f"{path}:labels", batch=5, output=out, resume=True, progress=False)
    assert ev.run["resumed_inputs"] == 10
    assert ev.summary == evaluation.summary and ev.rows == evaluation.rows
    whole = tmp_path / "whole.csv"
    fastane.evaluate(model, path, f"{path}:labels", batch=7, output=whole, progress=False)
    assert out.read_bytes() == whole.read_bytes()


def test_a_corrupt_partial_file_is_refused(model, data, tmp_path):
    path, _, _ = data
    out = tmp_path / "r.csv"
    open(partial_path(out), "w").write("not json\n")
    with pytest.raises(ModelError, match="not a partial results file"):
        fastane.evaluate(model, path, output=out, resume=True, progress=False)


def test_folders_of_npy_and_npz_and_python_items(model, data, evaluation, tmp_path):
    path, x, labels = data
    for i in range(N):
        np.save(tmp_path / f"a{i:03d}.npy", x[i])
        np.savez(tmp_path / f"b{i:03d}.npz", x=x[i : i + 1])
    npy, npz = tmp_path / "npy", tmp_path / "npz"
    npy.mkdir(), npz.mkdir()
    for i in range(N):
        os.rename(tmp_path / f"a{i:03d}.npy", npy / f"a{i:03d}.npy")
        os.rename(tmp_path / f"b{i:03d}.npz", npz / f"b{i:03d}.npz")
    for d in (npy, npz, list(x), {f"k{i}": {"x": x[i]} for i in range(N)}):
        ev = fastane.evaluate(model, d, labels, progress=False)
        assert [r["ane"] for r in ev.rows] == [r["ane"] for r in evaluation.rows]
        assert ev.summary["accuracy"] == evaluation.summary["accuracy"]
    assert ev.rows[3]["id"] == "k3"
    ev = fastane.evaluate(model, npy, progress=False)
    assert ev.rows[0]["id"] == "a000.npy" and "accuracy" not in ev.summary


def test_labels_files(model, data, tmp_path):
    path, x, labels = data
    (tmp_path / "l.txt").write_text("\n".join(map(str, labels)))
    (tmp_path / "l.csv").write_text("".join(f"{i},{lab}\n" for i, lab in reversed(list(enumerate(labels)))))
    np.save(tmp_path / "l.npy", labels)
    got = [
        fastane.evaluate(model, path, tmp_path / f, progress=False).summary["accuracy"]
        for f in ("l.txt", "l.csv", "l.npy")
    ]
    assert got[0] == got[1] == got[2]
    with pytest.raises(ModelError, match="one per input"):
        fastane.evaluate(model, path, labels[:-1], progress=False)
    (tmp_path / "bad.csv").write_text("0,1\n")
    with pytest.raises(ModelError, match="no label for 36 inputs"):
        fastane.evaluate(model, path, tmp_path / "bad.csv", progress=False)


def test_an_image_folder(tmp_path):
    pytest.importorskip("PIL", reason="image folders need Pillow (the eval extra)")
    from onnx import TensorProto, helper, save
    from PIL import Image

    # a "model" that passes its input through a ReduceMean over the channels: the input the
    # preprocessing made is checked through the model's output
    g = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)],
        "mean",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "m.onnx"))
    imgs = tmp_path / "imgs" / "cls"
    imgs.mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (2, 6, 8, 3), dtype=np.uint8)
    for i, p in enumerate(pixels):
        Image.fromarray(p).save(imgs / f"{i}.png")
    pre = Preprocess(crop=(4,), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    ev = fastane.evaluate(
        tmp_path / "m.onnx", tmp_path / "imgs", preprocess=pre, task="regress", progress=False
    )
    assert [r["id"] for r in ev.rows] == ["cls/0.png", "cls/1.png"]
    assert ev.summary["metric"] == "regress" and ev.summary["max_error"] < 1e-2
    x = (pixels[:, 1:5, 2:6].astype(np.float32) / 255 - 0.5) / 0.25
    m = fastane.load_model(tmp_path / "m.onnx")
    want = m.reference({"x": np.ascontiguousarray(x[:1].transpose(0, 3, 1, 2))})["y"]
    got = fastane.model.evaluate.data.ImageFolder(tmp_path / "imgs", ["cls/0.png"], pre).item(0)
    np.testing.assert_allclose(m.reference({"x": got})["y"], want, rtol=1e-6)
    (imgs / "2.png").write_bytes(b"not a png")
    with pytest.raises(ModelError, match="image 'cls/2.png': cannot read it as an image"):
        fastane.evaluate(tmp_path / "m.onnx", tmp_path / "imgs", preprocess=pre, progress=False)


def test_a_model_object_uses_fastanes_reference(model, data, evaluation):
    path, _, labels = data
    ev = fastane.evaluate(fastane.load_model(model), path, labels, progress=False)
    assert ev.summary["reference"] == "fastane"
    assert [r["ane"] for r in ev.rows] == [r["ane"] for r in evaluation.rows]
    with pytest.raises(ModelError, match="needs an ONNX model file"):
        fastane.evaluate(fastane.load_model(model), path, reference="onnxruntime", progress=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch": 0}, "batch: expected a positive integer"),
        ({"workers": -1}, "workers: expected a positive integer"),
        ({"output": "r.txt"}, "expected .csv, .parquet, .jsonl"),
        ({"output": "/nonexistent/r.csv"}, "no folder"),
        ({"resume": True}, "resume needs the output file"),
        ({"reference": "torch"}, "reference 'torch'"),
        ({"task": "top5"}, "task 'top5'"),
        ({"target": "nope"}, "target output 'nope'"),
    ],
)
def test_argument_errors(model, data, kwargs, message):
    path, _, _ = data
    with pytest.raises(ModelError, match=message):
        fastane.evaluate(model, path, progress=False, **kwargs)


def test_dataset_errors(model, tmp_path):
    with pytest.raises(ModelError, match="no such file or folder"):
        fastane.evaluate(model, tmp_path / "nope.npz", progress=False)
    with pytest.raises(ModelError, match="holds no .npy, .npz or image files"):
        fastane.evaluate(model, tmp_path, progress=False)
    np.savez(tmp_path / "two.npz", a=np.zeros((3, 16)), b=np.zeros((3, 16)))
    with pytest.raises(ModelError, match="no array for the model's input 'x'"):
        fastane.evaluate(model, tmp_path / "two.npz", progress=False)
    np.savez(tmp_path / "extra.npz", x=np.zeros((3, 16)), classes=np.arange(10))  # read: x alone
    assert fastane.evaluate(model, tmp_path / "extra.npz", progress=False).summary["inputs"] == 3
    np.savez(tmp_path / "scalar.npz", x=np.float32(1))
    with pytest.raises(ModelError, match="share their first axis"):
        fastane.evaluate(model, tmp_path / "scalar.npz", progress=False)
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 5), np.float32))
    with pytest.raises(ModelError, match="input '0' of the dataset"):
        fastane.evaluate(model, tmp_path / "shape.npz", progress=False)
    (tmp_path / "f.npz").write_bytes(b"PK\x03\x04 torn")
    with pytest.raises(ModelError, match="cannot read"):
        fastane.evaluate(model, tmp_path / "f.npz", progress=False)


def test_a_sequence_output_and_two_inputs(tmp_path):
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("MatMul", ["s", "w"], ["y"])],
        "seq",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6, 8]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5])],
        [numpy_helper.from_array(w, "w")],
    )
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "seq.onnx"))
    a, b = rng.standard_normal((2, 9, 6, 8)).astype(np.float32)
    np.savez(tmp_path / "d.npz", a=a, b=b)
    ev = fastane.evaluate(tmp_path / "seq.onnx", tmp_path / "d.npz", progress=False)
    s = ev.summary
    assert s["metric"] == "sequence"
    m = fastane.load_model(tmp_path / "seq.onnx")
    same = [
        int(
            (
                m({"a": a[i : i + 1], "b": b[i : i + 1]})["y"].argmax(-1) == ((a[i] + b[i]) @ w).argmax(-1)
            ).sum()
        )
        for i in range(9)
    ]
    assert [r["positions_agree"] for r in ev.rows] == same
    assert s["positions"] == {"agree": sum(same), "of": 54, "fraction": sum(same) / 54}
    assert [c["index"] for c in s["changed"]] == [i for i in range(9) if same[i] < 6]
    assert s["agreement"]["agree"] == sum(k == 6 for k in same)  # inputs whose every position agrees
    np.savez(tmp_path / "one.npz", a=a)
    with pytest.raises(ModelError, match="no array for the model's input 'b'"):
        fastane.evaluate(tmp_path / "seq.onnx", tmp_path / "one.npz", progress=False)


def test_a_stateful_core_ml_model_starts_each_input_from_zeros(tmp_path):
    """A Core ML state is not part of the dataset: every input starts from Core ML's zero state."""
    pytest.importorskip(
        "coremltools", reason="the stateful program is built with coremltools (the coreml extra)"
    )
    from tests.helpers.coreml import stateful

    stateful(tmp_path / "st.mlpackage")  # y = state + x written back; the output 3 y
    x = np.random.default_rng(0).standard_normal((5, 1, 4)).astype(np.float16)
    ev = fastane.evaluate(tmp_path / "st.mlpackage", list(x), task="regress", progress=False)
    assert ev.summary["inputs"] == 5 and ev.summary["reference"] == "fastane"
    # from the zero state: y = x exactly, so the only error is 3 x read out in fp16 (the state's
    # own output, x, is exact)
    for r, xi in zip(ev.rows, x.astype(np.float64)):
        want = np.abs((3 * xi).astype(np.float16) - 3 * xi).max() / np.abs(3 * xi).max()
        assert r["error"] == pytest.approx(want, rel=1e-12, abs=0)
