"""fastane.evaluate and fastane eval on hostile or mistaken input: a clear error before any
memory is spent or any work done, and nothing lost."""

from __future__ import annotations

import io
import os
import socket
import threading
import time
import zipfile

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the evaluation tests build their model with onnx (the onnx extra)")
pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")

import fastane
from fastane.errors import ModelError
from fastane.model.evaluate import partial_path
from tests.helpers.evaluate import inputs, linear_classifier


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return linear_classifier(tmp_path_factory.mktemp("hostile") / "m.onnx")


def _npy_claiming(shape, payload: bytes = b"\0" * 64) -> bytes:
    """The bytes of a .npy whose header claims ``shape`` (float32), followed by ``payload``."""
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return f.getvalue() + payload


def test_arrays_are_checked_by_their_headers_before_they_are_read(model, tmp_path):
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy_claiming((1 << 40, 16)))
    with pytest.raises(ModelError, match="MAX_TENSOR_ELEMENTS"):
        fastane.evaluate(model, tmp_path / "bomb.npz", progress=False)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.npy").write_bytes(_npy_claiming((1 << 40,)))
    with pytest.raises(ModelError, match="input 'a.npy' of the dataset: .*MAX_TENSOR_ELEMENTS"):
        fastane.evaluate(model, folder, progress=False)
    np.save(folder / "a.npy", np.array([1 + 2j] * 16, np.complex64))
    with pytest.raises(ModelError, match="complex64"):
        fastane.evaluate(model, folder, progress=False)


def test_a_link_out_of_the_folder_is_refused_before_any_work(model, tmp_path):
    outside = tmp_path / "outside.npy"
    np.save(outside, inputs(1)[0])
    folder = tmp_path / "data"
    folder.mkdir()
    np.save(folder / "a.npy", inputs(1)[0])
    os.symlink(outside, folder / "b.npy")
    with pytest.raises(ModelError, match="'b.npy'.*outside the model's folder"):
        fastane.evaluate(model, folder, progress=False)
    os.unlink(folder / "b.npy")
    os.mkfifo(folder / "c.npy")
    with pytest.raises(ModelError, match="'c.npy' is not a regular file"):
        fastane.evaluate(model, folder, progress=False)


def test_labels_are_checked(model, tmp_path):
    np.savez(tmp_path / "d.npz", x=inputs(4))
    for labels, message in (
        ([0, 1, -1, 2], "a class index of -1"),
        ([0, 1, 2, 7], "label 7: output 'logits' has 4 classes"),
        (np.array([True, False, True, True]), "expected integer class indices"),
    ):
        with pytest.raises(ModelError, match=message):
            fastane.evaluate(model, tmp_path / "d.npz", labels, progress=False)
    (tmp_path / "big.txt").write_text("1\n" * 100_000)
    with pytest.raises(ModelError, match="beyond"):
        fastane.evaluate(model, tmp_path / "d.npz", tmp_path / "big.txt", progress=False)


def test_a_huge_image_is_refused_before_it_is_decoded(tmp_path):
    pytest.importorskip("PIL", reason="image folders need Pillow (the eval extra)")
    from PIL import Image

    from fastane.model.evaluate.data import MAX_IMAGE_PIXELS, Preprocess

    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("1", (9000, 8000)).save(folder / "big.png")  # 72 M pixels in a few kB
    assert 9000 * 8000 > MAX_IMAGE_PIXELS
    m = linear_classifier(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match="image 'big.png': 9000x8000 pixels, beyond MAX_IMAGE_PIXELS"):
        fastane.evaluate(m, folder, progress=False)
    with pytest.raises(ModelError, match="resize"):
        Preprocess(resize=(100_000,))
    with pytest.raises(ModelError, match="at least 1"):
        Preprocess(crop=(0,))


def test_a_changed_model_file_is_loaded_again(tmp_path):
    path = tmp_path / "m.onnx"
    np.savez(tmp_path / "d.npz", x=inputs(8))
    linear_classifier(path, seed=0)
    first = fastane.evaluate(path, tmp_path / "d.npz", progress=False)
    time.sleep(0.01)
    linear_classifier(path, seed=5)
    second = fastane.evaluate(path, tmp_path / "d.npz", progress=False)
    want = fastane.load_model(path)({"x": inputs(8)[:1]})["logits"].argmax()
    assert second.rows[0]["ane"] == want
    assert [r["ane"] for r in first.rows] != [r["ane"] for r in second.rows]


def test_resume_refuses_another_jobs_rows(model, tmp_path):
    np.savez(tmp_path / "d.npz", x=inputs(12))
    out = tmp_path / "r.csv"

    def stop(done, total):
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fastane.evaluate(model, tmp_path / "d.npz", np.zeros(12, int), batch=4, output=out, progress=stop)
    with pytest.raises(ModelError, match="labels differ"):
        fastane.evaluate(model, tmp_path / "d.npz", np.ones(12, int), output=out, resume=True, progress=False)
    journal = partial_path(out)
    good = open(journal).read()
    open(journal, "w").write(good.replace('"index": 0,', '"index": "0",', 1))
    with pytest.raises(ModelError, match="line 2 is not a row"):
        fastane.evaluate(
            model, tmp_path / "d.npz", np.zeros(12, int), output=out, resume=True, progress=False
        )
    open(journal, "w").write(good)
    time.sleep(0.01)
    np.savez(tmp_path / "d.npz", x=inputs(12, seed=9))  # the same path and count, other inputs
    with pytest.raises(ModelError, match="data_files differ"):
        fastane.evaluate(
            model, tmp_path / "d.npz", np.zeros(12, int), output=out, resume=True, progress=False
        )


def test_outputs_are_checked_before_the_run(model, tmp_path):
    np.savez(tmp_path / "d.npz", x=inputs(3))
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ModelError, match="is a folder"):
        fastane.evaluate(model, tmp_path / "d.npz", output=tmp_path / "dir.csv", progress=False)
    np.save(tmp_path / "l.npy", np.zeros(3, int))
    with pytest.raises(ModelError, match="expected .csv"):
        fastane.evaluate(
            model, tmp_path / "d.npz", tmp_path / "l.npy", output=tmp_path / "l.npy", progress=False
        )


def test_a_scheduler_that_never_answers_is_one_error_and_leaves_no_partial_file(model, tmp_path):
    pytest.importorskip("distributed", reason="scale-out needs dask.distributed (the eval extra)")
    from fastane.model.evaluate import cluster

    np.savez(tmp_path / "d.npz", x=inputs(3))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []
    threading.Thread(target=lambda: held.append(server.accept()), daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    old = cluster.CONNECT_TIMEOUT
    cluster.CONNECT_TIMEOUT = "1s"
    try:
        t0 = time.perf_counter()
        with pytest.raises(ModelError, match="cannot reach the Dask scheduler"):
            fastane.evaluate(
                model, tmp_path / "d.npz", scheduler=address, output=tmp_path / "r.csv", progress=False
            )
        assert time.perf_counter() - t0 < 30
    finally:
        cluster.CONNECT_TIMEOUT = old
        server.close()
    assert not os.path.exists(partial_path(tmp_path / "r.csv"))


def test_an_interrupted_command_is_one_line(model, tmp_path, capsys, monkeypatch):
    from fastane.cli import main
    from fastane.model import evaluate as ev_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ev_module, "evaluate", interrupted)
    np.savez(tmp_path / "d.npz", x=inputs(3))
    rc = main(["eval", model, str(tmp_path / "d.npz"), "-o", str(tmp_path / "r.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and len(err) == 1 and "interrupted" in err[0] and "--resume continues" in err[0]
