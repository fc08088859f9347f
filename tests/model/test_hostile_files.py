"""Model files under fastane.model.files' rule: a file is opened only when, after every link
is resolved, it is a regular file inside the model's folder.  Each case is built in
tmp_path; an alarm turns a blocking open (a FIFO) into a failure instead of a hang."""

import json
import os
import shutil
import signal

import numpy as np
import pytest

import fastane
from fastane.errors import ModelError
from tests.helpers.coreml import convert  # noqa: E402

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

SECRET = b"SECRET-BYTES-" * 16  # a file outside the package: never read, never shown


@pytest.fixture(autouse=True)
def _alarm():
    """Fail a case that blocks for 10 s (a FIFO opened for reading blocks until a writer)."""

    def hang(signum, frame):
        raise TimeoutError("the model file blocked fastane")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """A package with one blob weight: linear(x, 0.5) of 1x8 -> 1x4."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.linear(x=x, weight=np.full((4, 8), 0.5, np.float32), bias=np.zeros(4, np.float32))

    path = tmp_path_factory.mktemp("hf") / "lin.mlpackage"
    m = convert(prog, ct.target.iOS17)
    m.save(str(path))
    return str(path)


def _copy(pkg, tmp_path):
    p = tmp_path / "bad.mlpackage"
    shutil.copytree(pkg, p)
    return str(p)


def _data(p):
    return os.path.join(p, "Data", "com.apple.CoreML")


def _outside(tmp_path, name="weight.bin"):
    d = tmp_path / "outside"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(SECRET)
    return str(d)


def _refused(path, match):
    with pytest.raises(ModelError, match=match) as e:
        fastane.load_model(path)
    msg = str(e.value)
    assert "SECRET" not in msg and "\n" not in msg
    return msg


def _set_blob_name(p, name):
    from coremltools.proto import Model_pb2

    spec_path = os.path.join(_data(p), "model.mlmodel")
    spec = Model_pb2.Model()
    spec.ParseFromString(open(spec_path, "rb").read())
    for b in spec.mlProgram.functions["main"].block_specializations.values():
        for op in b.operations:
            if op.type == "const" and op.attributes["val"].HasField("blobFileValue"):
                op.attributes["val"].blobFileValue.fileName = name
    open(spec_path, "wb").write(spec.SerializeToString())


def _set_manifest_path(p, path):
    man = os.path.join(p, "Manifest.json")
    info = json.loads(open(man).read())
    for e in info["itemInfoEntries"].values():
        if e["path"].endswith(".mlmodel"):
            e["path"] = path
    open(man, "w").write(json.dumps(info))


def test_the_package_loads(pkg):
    m = fastane.load_model(pkg)
    x = np.ones((1, 8), np.float32)
    assert np.array_equal(list(m.reference(x).values())[0], np.full((1, 4), 4.0, np.float32))


def test_weights_folder_linked_out_of_the_package(pkg, tmp_path):
    """weights -> a folder outside (the issue's weights -> /etc): checked against the
    package, not against the weights folder's own real path."""
    p = _copy(pkg, tmp_path)
    shutil.rmtree(os.path.join(_data(p), "weights"))
    os.symlink(_outside(tmp_path), os.path.join(_data(p), "weights"))
    msg = _refused(p, "outside the model's folder")
    assert "weight.bin" in msg and "linear" in msg


def test_weights_folder_linked_to_etc(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    shutil.rmtree(os.path.join(_data(p), "weights"))
    os.symlink("/etc", os.path.join(_data(p), "weights"))
    _set_blob_name(p, "@model_path/weights/passwd")
    _refused(p, "resolves to '/etc/passwd', outside the model's folder")


def test_links_inside_the_package_are_followed(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    w = os.path.join(_data(p), "weights")
    os.rename(w, os.path.join(p, "elsewhere"))
    os.symlink(os.path.join("..", "..", "elsewhere"), w)
    assert fastane.load_model(p).graph.origin.startswith("coreml mlProgram")


def test_data_folder_linked_out_of_the_package(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    shutil.move(os.path.join(p, "Data"), tmp_path / "Data")
    os.symlink(tmp_path / "Data", os.path.join(p, "Data"))
    _refused(p, "Manifest.json: path .* outside the model's folder")


@pytest.mark.parametrize(
    "target", ["/dev/zero", "/dev/null", "spec"], ids=["dev-zero", "dev-null", "file-outside"]
)
def test_weight_file_linked_out_of_the_package(pkg, tmp_path, target):
    p = _copy(pkg, tmp_path)
    w = os.path.join(_data(p), "weights", "weight.bin")
    os.remove(w)
    os.symlink(os.path.join(_outside(tmp_path), "weight.bin") if target == "spec" else target, w)
    _refused(p, "outside the model's folder")


def test_spec_linked_out_of_the_package(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    s = os.path.join(_data(p), "model.mlmodel")
    shutil.move(s, tmp_path / "model.mlmodel")
    os.symlink(tmp_path / "model.mlmodel", s)
    _refused(p, "outside the model's folder")


@pytest.mark.parametrize(
    "name",
    [
        "@model_path/weights/../../../../../../../etc/passwd",
        "@model_path/weights//etc/passwd",
        "@model_path/weights/../../../../outside/weight.bin",
    ],
    ids=["traversal", "absolute", "traversal-to-a-blob"],
)
def test_blob_file_name_out_of_the_package(pkg, tmp_path, name):
    p = _copy(pkg, tmp_path)
    _outside(tmp_path)
    _set_blob_name(p, name)
    _refused(p, "outside the model's folder")


def test_blob_file_name_with_a_nul_byte(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    _set_blob_name(p, "@model_path/weights/weight.bin\0x")
    _refused(p, "NUL byte")


@pytest.mark.parametrize("path", ["../../../../../../etc/passwd", "/etc/passwd", "../../outside/weight.bin"])
def test_manifest_path_out_of_the_package(pkg, tmp_path, path):
    p = _copy(pkg, tmp_path)
    _outside(tmp_path)
    _set_manifest_path(p, path)
    _refused(p, "Manifest.json: path .* outside the model's folder")


@pytest.mark.parametrize(
    "where",
    ["weights/weight.bin", "model.mlmodel", "Manifest.json"],
)
def test_fifo_in_the_package(pkg, tmp_path, where):
    p = _copy(pkg, tmp_path)
    f = os.path.join(p, where) if where == "Manifest.json" else os.path.join(_data(p), where)
    os.remove(f)
    os.mkfifo(f)
    _refused(p, "is a FIFO, not a regular file")


@pytest.mark.parametrize("name", ["m.onnx", "m.mlmodel", "m.bin"])
def test_fifo_as_the_model_file(tmp_path, name):
    f = tmp_path / name
    os.mkfifo(f)
    _refused(str(f), "is a FIFO, not a regular file")


def test_device_as_the_model_file():
    _refused("/dev/zero", "is a character device, not a regular file")


def test_directory_named_weight_bin(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    w = os.path.join(_data(p), "weights", "weight.bin")
    os.remove(w)
    os.mkdir(w)
    _refused(p, "weight.bin.* is a directory, not a regular file")


def test_deeply_nested_manifest(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    open(os.path.join(p, "Manifest.json"), "w").write("[" * 200_000 + "]" * 200_000)
    _refused(p, "Manifest.json is not a valid package manifest \\(nested too deeply\\)")


def test_oversized_manifest(pkg, tmp_path):
    p = _copy(pkg, tmp_path)
    open(os.path.join(p, "Manifest.json"), "w").write(" " * (2 << 20) + "{}")
    _refused(p, "Manifest.json.* beyond the limit of 1048576")


@pytest.mark.parametrize("command", [["run", "{m}", "--random", "--report"], ["roofline", "{m}"]])
@pytest.mark.parametrize("where", ["model", "weight"])
def test_cli_gives_one_line(pkg, tmp_path, capsys, command, where):
    """`fastane run` and `fastane roofline` on a FIFO (the model file, or weight.bin in a
    package): one line, exit status 2, no hang."""
    from fastane.cli import main

    if where == "model":
        m = str(tmp_path / "m.onnx")
        os.mkfifo(m)
    else:
        m = _copy(pkg, tmp_path)
        w = os.path.join(_data(m), "weights", "weight.bin")
        os.remove(w)
        os.mkfifo(w)
    rc = main([a.format(m=m) for a in command])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "is a FIFO, not a regular file" in err, err


def test_placement_file_fifo(tmp_path):
    """--compare-placement's JSON is opened under the same rule (a FIFO blocked there too)."""
    from fastane.model.placement.compute_plan import load_observed

    f = tmp_path / "observed.json"
    os.mkfifo(f)
    with pytest.raises(ValueError, match="placement file: .* is a FIFO, not a regular file"):
        load_observed(str(f))
    g = tmp_path / "deep.json"
    g.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="not a readable JSON placement file"):
        load_observed(str(g))


def test_input_array_fifo(pkg, tmp_path, capsys):
    """`fastane run M -i x=FIFO`: the input array is read under the same rule (np.load
    blocked on it); one line, exit status 2."""
    from fastane.cli import main

    x = tmp_path / "x.npy"
    os.mkfifo(x)
    rc = main(["run", pkg, "-i", f"x={x}"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "is a FIFO, not a regular file" in err, err


@pytest.mark.parametrize("swapped", ["Data", "Data/com.apple.CoreML/weights"])
def test_folder_swapped_for_a_link_after_the_check(pkg, tmp_path, monkeypatch, swapped):
    """A process writing into the package swaps a folder for a link out of it between the
    containment check and the open: the open, one component at a time with O_NOFOLLOW
    from the package's real path, refuses it instead of reading outside."""
    from fastane.model import files
    from fastane.model.frontends.coreml import blob as coreml_blob
    from fastane.model.frontends.coreml import importer as coreml_import

    p = _copy(pkg, tmp_path)
    out = tmp_path / "outside"
    for rel in ("com.apple.CoreML/model.mlmodel", "com.apple.CoreML/weights/weight.bin", "weight.bin"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(SECRET)
    done = []

    def racing_inside(root, rel, what):
        full = files.inside(root, rel, what)
        if not done and full.startswith(os.path.realpath(os.path.join(p, swapped))):
            os.rename(os.path.join(p, swapped), os.path.join(p, swapped) + ".old")
            os.symlink(out, os.path.join(p, swapped))
            done.append(full)
        return full

    monkeypatch.setattr(coreml_import, "inside", racing_inside)
    monkeypatch.setattr(coreml_blob, "inside", racing_inside)
    _refused(p, r"changed while it was opened \(a link in its path\)")
    assert done


@pytest.mark.parametrize("proc", [True, False])
def test_read_file_under_a_root(tmp_path, monkeypatch, proc):
    """files.read_file with root: the open descriptor's path checked inside it (Linux's
    /proc/self/fd), or the file opened under it component by component (no /proc)."""
    from fastane.model.files import inside, read_file

    if not proc:
        isdir = os.path.isdir
        monkeypatch.setattr(os.path, "isdir", lambda p: p != "/proc/self/fd" and isdir(p))

    root = tmp_path / "pkg"
    (root / "Data").mkdir(parents=True)
    (root / "Data" / "f").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_bytes(SECRET)
    full = inside(str(root), "Data/f", "f")
    assert read_file(full, "f", 100, "test", root=str(root)) == b"inside"
    os.rename(root / "Data", root / "Data.old")
    os.symlink(tmp_path / "outside", root / "Data")
    with pytest.raises(ModelError, match="changed while it was opened"):
        read_file(full, "f", 100, "test", root=str(root))
    with pytest.raises(ModelError, match="not a file inside the model's folder"):
        read_file(str(tmp_path / "outside" / "f"), "f", 100, "test", root=str(root))


def test_content_sniffed_from_the_top_level_fields(pkg, tmp_path, monkeypatch):
    """A model file of another suffix: told Core ML or ONNX from its top-level protobuf
    fields on the mapped file; the spec is parsed once (it was read and parsed up to three
    times: Core ML, ONNX, then the load)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from fastane.model import _sniff_coreml
    from fastane.model.frontends.coreml import importer as coreml_import

    parsed = []
    real = coreml_import.parse_spec
    monkeypatch.setattr(coreml_import, "parse_spec", lambda *a: parsed.append(1) or real(*a))
    spec = tmp_path / "spec.bin"
    shutil.copy(os.path.join(_data(pkg), "model.mlmodel"), spec)
    with pytest.raises(ModelError, match="bare .mlmodel has no weights directory"):
        fastane.load_model(str(spec))
    assert parsed == [1]
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = tmp_path / "model.bin"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    assert not _sniff_coreml(model) and _sniff_coreml(spec)
    assert fastane.load_model(str(model)).graph.origin.startswith("onnx") and parsed == [1]
    for junk in (b"", b"\x08", b"\x08\x01\xff", b"\x08\x01\xa2\x1f\xff\xff\xff\xff\x0f", SECRET):
        (tmp_path / "junk.bin").write_bytes(junk)
        assert not _sniff_coreml(tmp_path / "junk.bin")


def test_input_array_header_checked_before_its_data_is_read(tmp_path, capsys):
    """`fastane run M -i x=BIG.npy`: the .npy header's shape is bound (and refused by the
    budget) before the data is read; the whole file (up to 2 GiB) was read first."""
    import tracemalloc

    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from fastane.cli import main

    n = 1 << 28
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
    )
    model = tmp_path / "relu.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    big = tmp_path / "x.npy"
    with open(big, "wb") as f:  # a sparse file: the header, then n float32 zeros
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
        f.truncate(f.tell() + 4 * n)
    tracemalloc.start()
    try:
        rc = main(["run", str(model), "-i", f"x={big}"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert rc == 2 and "beyond fastane's limit" in err and len(err.strip().splitlines()) == 1, err
    assert peak < 64 << 20, peak
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little"))
    assert main(["run", str(model), "-i", f"x={tmp_path / 'bad.npy'}"]) == 2
    assert "a header of 1073741824 bytes" in capsys.readouterr().err
