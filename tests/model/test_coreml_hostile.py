"""MIL ops with missing or malformed parameters: a ModelError naming the op, never a bare
exception; and the negative axes coremltools writes (a transformer block converted by
ct.convert) accepted."""

import os

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.proto import MIL_pb2, Model_pb2  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402
from tests.helpers.coreml import convert  # noqa: E402

RNG = np.random.default_rng(11)


def _value(a):
    """An immediate MIL tensor value holding the numpy array ``a`` (float32 or int32)."""
    a = np.asarray(a)
    v = MIL_pb2.Value()
    tt = v.type.tensorType
    tt.dataType = MIL_pb2.FLOAT32 if a.dtype.kind == "f" else MIL_pb2.INT32
    tt.rank = a.ndim
    for d in a.shape:
        tt.dimensions.add().constant.size = d
    field = v.immediateValue.tensor.floats if a.dtype.kind == "f" else v.immediateValue.tensor.ints
    field.values.extend(a.reshape(-1).tolist())
    return v


def _one_op(tmp_path, op_type, params, shape):
    """A bare .mlmodel ML Program: input ``x`` of ``shape`` (float32), one op ``op_type``
    with ``params`` (a str binds a name, anything else an immediate value), output ``y``."""
    spec = Model_pb2.Model()
    spec.specificationVersion = 8
    fn = spec.mlProgram.functions["main"]
    fn.opset = "CoreML7"
    for nv in (fn.inputs.add(),):
        nv.name = "x"
        nv.type.tensorType.dataType = MIL_pb2.FLOAT32
        nv.type.tensorType.rank = len(shape)
        for d in shape:
            nv.type.tensorType.dimensions.add().constant.size = d
    block = fn.block_specializations["CoreML7"]
    op = block.operations.add()
    op.type = op_type
    for key, v in params.items():
        arg = op.inputs[key].arguments.add()
        if isinstance(v, str):
            arg.name = v
        else:
            arg.value.CopyFrom(_value(v))
    out = op.outputs.add()
    out.name = "y"
    out.type.tensorType.dataType = MIL_pb2.FLOAT32
    block.outputs.append("y")
    path = os.path.join(tmp_path, f"{op_type}.mlmodel")
    open(path, "wb").write(spec.SerializeToString())
    return path


def test_linear_without_its_weight(tmp_path):
    with pytest.raises(ModelError, match=r"op 'y' \(linear\): missing parameter 'weight'"):
        fastane.load_model(_one_op(tmp_path, "linear", {"x": "x"}, (1, 8)))


def test_layer_norm_on_a_scalar(tmp_path):
    p = _one_op(tmp_path, "layer_norm", {"x": "x", "axes": np.array([-1], np.int32)}, ())
    with pytest.raises(ModelError, match=r"\(layer_norm\): axes \[-1\]: axis -1 is out of range for a 0-D"):
        fastane.load_model(p)


@pytest.mark.parametrize(
    "perm, match",
    [
        ([0, 2, 2, 1], r"perm \[0, 2, 2, 1\] names an axis twice"),
        ([0, 1, 2, 4], r"perm \[0, 1, 2, 4\]: axis 4 is out of range for a 4-D tensor"),
        ([0, 1, -5, 3], r"axis -5 is out of range"),
        ([0, 2, 1], r"perm \[0, 2, 1\] has 3 axes, the input has 4"),
        ([0, 3, -1, 1], r"perm \[0, 3, -1, 1\] names an axis twice"),
    ],
)
def test_transpose_bad_perm(tmp_path, perm, match):
    p = _one_op(tmp_path, "transpose", {"x": "x", "perm": np.array(perm, np.int32)}, (1, 2, 3, 4))
    with pytest.raises(ModelError, match=match):
        fastane.load_model(p)


def test_transpose_without_perm(tmp_path):
    with pytest.raises(ModelError, match=r"\(transpose\): missing parameter 'perm'"):
        fastane.load_model(_one_op(tmp_path, "transpose", {"x": "x"}, (1, 2)))


def test_transpose_negative_perm_runs(tmp_path):
    m = fastane.load_model(
        _one_op(tmp_path, "transpose", {"x": "x", "perm": np.array([0, 2, -3, -1], np.int32)}, (1, 2, 3, 4))
    )
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    assert np.array_equal(list(m.reference(x).values())[0], x.transpose(0, 2, 1, 3))


# ------------------------------------------------------------------ a transformer block
D, S, H = 16, 8, 2
WQ, WK, WV, WO = ((RNG.standard_normal((D, D)) * 0.3).astype(np.float32) for _ in range(4))


def _transformer_block(path):
    """Multi-head attention (2 heads), residual and layer norm, with the negative axes in
    transpose's perm that coremltools keeps (``(0, 2, -3, -1)``)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, S, D))], opset_version=ct.target.iOS17)
    def prog(x):
        def heads(t):
            t = mb.reshape(x=t, shape=[1, S, H, D // H])
            return mb.transpose(x=t, perm=[0, 2, -3, -1])

        q, k, v = (heads(mb.linear(x=x, weight=w)) for w in (WQ, WK, WV))
        a = mb.matmul(x=q, y=k, transpose_y=True)
        a = mb.mul(x=a, y=np.float32(1 / np.sqrt(D // H)))
        a = mb.softmax(x=a, axis=-1)
        o = mb.matmul(x=a, y=v)
        o = mb.transpose(x=o, perm=[0, -2, 1, -1])
        o = mb.linear(x=mb.reshape(x=o, shape=[1, S, D]), weight=WO)
        return mb.layer_norm(x=mb.add(x=x, y=o), axes=[-1], epsilon=np.float32(1e-5))

    m = convert(prog, ct.target.iOS17)
    perms = [
        list(op.attributes["val"].immediateValue.tensor.ints.values)
        for op in m.get_spec().mlProgram.functions["main"].block_specializations["CoreML7"].operations
        if op.type == "const" and "perm" in op.outputs[0].name
    ]
    assert [0, 2, -3, -1] in perms  # the file holds the negative axes
    m.save(str(path))
    return str(path)


def _numpy_block(x):
    def heads(t):
        return t.reshape(1, S, H, D // H).transpose(0, 2, 1, 3)

    q, k, v = (heads(x @ w.T) for w in (WQ, WK, WV))
    a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    a = np.exp(a - a.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = (a @ v).transpose(0, 2, 1, 3).reshape(1, S, D) @ WO.T
    y = x + o
    return (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)


def test_transformer_block_with_negative_perm(tmp_path):
    m = fastane.load_model(_transformer_block(tmp_path / "block.mlpackage"))
    x = RNG.standard_normal((1, S, D)).astype(np.float32)
    ref = _numpy_block(x.astype(np.float64))
    np.testing.assert_allclose(list(m.reference(x).values())[0], ref, rtol=1e-4, atol=1e-4)
    out = list(m(x).values())[0]
    assert out.dtype == np.float16 and out.shape == ref.shape
    assert np.abs(out - ref).max() < 5e-2


@pytest.mark.parametrize("axis", [2, -3, [0, 1]])
def test_lut_vector_axis_out_of_range(axis):
    """iOS18 constexpr_lut_to_dense: a vector_axis outside the indices' rank was wrapped
    (2 became 0) instead of refused."""
    from fastane.model.frontends.coreml.importer import decompress

    idx, lut = np.zeros((4, 2), np.uint8), np.zeros((1, 1, 4, 2), np.float32)
    assert decompress("constexpr_lut_to_dense", indices=idx, lut=lut, vector_axis=np.asarray(-2)).shape == (
        8,
        2,
    )
    with pytest.raises(ValueError, match="vector_axis .* is not an axis of indices of rank 2"):
        decompress("constexpr_lut_to_dense", indices=idx, lut=lut, vector_axis=np.asarray(axis))


AS_LIMIT = 4 << 30


def _child(code, timeout=120):
    """``code`` run in a child limited to 4 GiB of address space: its stdout + stderr."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.stdout + p.stderr


def _uint1_package(path, n, offsets):
    """An .mlpackage whose weight file holds one blob per distinct entry of ``offsets``
    (``n`` UINT1 values, all zero) and a const op per entry, beside ``y = relu(x)``."""
    import json
    import struct

    wdir = os.path.join(path, "Data", "com.apple.CoreML", "weights")
    os.makedirs(wdir)
    with open(os.path.join(path, "Manifest.json"), "w") as f:
        json.dump(
            {
                "fileFormatVersion": "1.0.0",
                "itemInfoEntries": {"a": {"path": "com.apple.CoreML/model.mlmodel"}},
                "rootModelIdentifier": "a",
            },
            f,
        )
    nb = n // 8
    blobs = sorted(set(offsets))
    with open(os.path.join(wdir, "weight.bin"), "wb") as f:
        f.write(struct.pack("<II", len(blobs), 2).ljust(64, b"\0"))
        for i in range(len(blobs)):
            assert f.tell() == 64 + i * (64 + nb) == blobs[i]
            f.write(struct.pack("<IIQQ", 0xDEADBEEF, 0, nb, f.tell() + 64).ljust(64, b"\0"))
            f.write(bytes(nb))
    spec = Model_pb2.Model()
    spec.specificationVersion = 8
    fn = spec.mlProgram.functions["main"]
    fn.opset = "CoreML7"
    nv = fn.inputs.add()
    nv.name = "x"
    nv.type.tensorType.dataType = MIL_pb2.FLOAT32
    nv.type.tensorType.rank = 1
    nv.type.tensorType.dimensions.add().constant.size = 4
    block = fn.block_specializations["CoreML7"]
    for k, off in enumerate(offsets):
        op = block.operations.add()
        op.type = "const"
        o = op.outputs.add()
        o.name = f"c{k}"
        v = op.attributes["val"]
        tt = v.type.tensorType
        tt.dataType = MIL_pb2.UINT1
        tt.rank = 1
        tt.dimensions.add().constant.size = n
        o.type.CopyFrom(v.type)
        v.blobFileValue.fileName = "@model_path/weights/weight.bin"
        v.blobFileValue.offset = off
    op = block.operations.add()
    op.type = "relu"
    op.inputs["x"].arguments.add().name = "x"
    o = op.outputs.add()
    o.name = "y"
    o.type.CopyFrom(nv.type)
    block.outputs.append("y")
    with open(os.path.join(path, "Data", "com.apple.CoreML", "model.mlmodel"), "wb") as f:
        f.write(spec.SerializeToString())
    return str(path)


def test_sub_byte_blob_decoded_once(tmp_path):
    """Twelve const ops on one 32 MB blob of 2^28 UINT1 values: each was decoded again,
    through an int16 array and a uint64 sum per value (3 GB for one, MemoryError for
    twelve); now decoded once into uint8, in 4 GiB of address space."""
    path = _uint1_package(tmp_path / "amp.mlpackage", 1 << 28, [64] * 12)
    code = (
        f"import fastane; m = fastane.load_model({path!r}); c = m.graph.consts; "
        "print('ok', all(c[f'c{k}'] is c['c0'] for k in range(12)))"
    )
    assert "ok True" in _child(code)


def test_decoded_constants_budget(tmp_path, monkeypatch):
    """The constants a package decodes at load are counted against MAX_CONST_BYTES."""
    from fastane.model.frontends.coreml import importer as coreml_import

    n = 1 << 16
    path = _uint1_package(tmp_path / "two.mlpackage", n, [64, 64 + 64 + n // 8])
    assert fastane.load_model(path).graph.consts["c1"].shape == (n,)
    monkeypatch.setattr(coreml_import, "MAX_CONST_BYTES", n + n // 2)
    with pytest.raises(ModelError, match=r"op 'c1' \(const\).*MAX_CONST_BYTES = 2\^30"):
        fastane.load_model(path)


def test_unpack_bits_values():
    """Sub-byte values unpacked least significant bit first, int4 sign-extended."""
    from fastane.model.frontends.coreml.blob import unpack_bits

    raw = bytes([0b10110100, 0b01111000, 0xFF])
    assert unpack_bits(raw, 1, 9).tolist() == [0, 0, 1, 0, 1, 1, 0, 1, 0]
    assert unpack_bits(raw, 2, 5).tolist() == [0, 1, 3, 2, 0]
    assert unpack_bits(raw, 3, 7).tolist() == [4, 6, 2, 4, 7, 6, 7]
    assert unpack_bits(raw, 4, 4, signed=True).tolist() == [4, -5, -8, 7]
    assert unpack_bits(raw, 6, 4).tolist() == [52, 34, 55, 63]


def test_lut_vector_palette_checked_before_it_is_built():
    """iOS18 constexpr_lut_to_dense with vector size 2^16 over 2^16 indices asked for
    8 GiB before its size was checked."""
    code = (
        "import numpy as np; from fastane.model.frontends.coreml.importer import decompress\n"
        "idx = np.zeros(1 << 16, np.uint8); lut = np.zeros((1, 2, 1 << 16), np.float16)\n"
        "try:\n"
        "    decompress('constexpr_lut_to_dense', indices=idx, lut=lut, vector_axis=np.int32(0))\n"
        "except ValueError as exc:\n"
        "    print('refused', exc)\n"
    )
    assert "refused constexpr_lut_to_dense output: shape (65536, 65536)" in _child(code)


def test_split_num_splits_on_an_empty_axis(tmp_path):
    """split by num_splits along an axis of size 0 raised ZeroDivisionError; a count that
    differs from the op's outputs is refused before any list is built."""
    params = {"x": "x", "axis": np.array(0, np.int32), "num_splits": np.array(2, np.int32)}
    with pytest.raises(ModelError, match=r"op 'y' \(split\): num_splits 2 for 1 outputs"):
        fastane.load_model(_one_op(tmp_path, "split", params, (0, 4)))
    params["num_splits"] = np.array(1, np.int32)
    assert fastane.load_model(_one_op(tmp_path, "split", params, (0, 4))).graph.nodes[-1].op == "slice"


def test_arithmetic_error_in_a_handler_is_a_model_error(tmp_path, monkeypatch):
    """An ArithmeticError from an op's conversion (a division by a zero size) is a
    ModelError naming the op, its text quoted and cut."""
    from fastane.model.frontends.coreml import importer as coreml_import

    def boom(p, op, outs, what):
        raise ZeroDivisionError("x" * 1000)

    monkeypatch.setitem(coreml_import.MIL_OPS, "relu", boom)
    with pytest.raises(
        ModelError, match=r"op 'y' \(relu\): malformed parameters \(ZeroDivisionError: x+\.\.\."
    ):
        fastane.load_model(_one_op(tmp_path, "relu", {"x": "x"}, (4,)))


def test_core_ml_names_quoted(tmp_path):
    """An op's output name and a weight file name from the spec reach a message quoted
    and cut, control characters escaped."""
    path = _one_op(tmp_path, "relu", {"x": "x"}, (4,))
    spec = Model_pb2.Model()
    spec.ParseFromString(open(path, "rb").read())
    block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
    op = block.operations[0]
    op.type = "no_such_op"
    op.outputs[0].name = "\x1b[2J" + "n" * 5000
    open(path, "wb").write(spec.SerializeToString())
    with pytest.raises(ModelError) as err:
        fastane.load_model(path)
    msg = str(err.value)
    assert "\x1b" not in msg and "\\x1b[2J" in msg and len(msg) < 400, msg
    op.type = "const"
    op.outputs[0].name = "c"
    v = op.attributes["val"]
    v.type.tensorType.dataType = MIL_pb2.FLOAT32
    v.blobFileValue.fileName = "@model_path/weights/" + "w\n" * 3000
    v.blobFileValue.offset = 64
    open(path, "wb").write(spec.SerializeToString())
    with pytest.raises(ModelError, match="bare .mlmodel has no weights directory") as err:
        fastane.load_model(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_arithmetic_error_in_a_neural_network_is_a_model_error(tmp_path, monkeypatch):
    from fastane.model.frontends.coreml import importer as coreml_import

    def boom(*args):
        raise ZeroDivisionError("integer division or modulo by zero")

    spec = Model_pb2.Model()
    spec.specificationVersion = 4
    spec.neuralNetwork.SetInParent()
    path = os.path.join(tmp_path, "nn.mlmodel")
    open(path, "wb").write(spec.SerializeToString())
    monkeypatch.setattr(coreml_import, "neural_network", boom)
    with pytest.raises(ModelError, match=r"malformed neural network \(ZeroDivisionError"):
        fastane.load_model(path)


@pytest.mark.parametrize("msb", [False, True])
def test_unpack_bits_memory(msb):
    """2^26 one-bit values (an 8 MiB blob): an int16 array and a uint64 sum per value
    peaked at 704 MiB; now the 64 MiB uint8 result and a chunk."""
    import tracemalloc

    from fastane.model.frontends.coreml.blob import unpack_bits
    from fastane.model.frontends.coreml.nn import unpack_bits_msb

    raw = bytes(range(256)) * (1 << 15)
    tracemalloc.start()
    try:
        v = unpack_bits_msb(raw, 1, 1 << 26) if msb else unpack_bits(raw, 1, 1 << 26)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert v.dtype == np.uint8 and v[:16].tolist() == ([0] * 15 + [1] if msb else [0] * 8 + [1] + [0] * 7)
    assert peak < 80 << 20, peak


def test_lut_per_block_palettes_without_int64_indices():
    """iOS18 constexpr_lut_to_dense with a palette per block: each index's table row was
    built in int64 (with int64 aranges along each axis), 2^28 indices asking for over
    6 GiB; now in the smallest type that holds the rows."""
    code = (
        "import numpy as np; from fastane.model.frontends.coreml.importer import decompress\n"
        "idx = np.zeros(1 << 28, np.uint8); idx[1 << 27] = 1\n"
        "lut = np.arange(4, dtype=np.float16).reshape(2, 2, 1)\n"
        "v = decompress('constexpr_lut_to_dense', indices=idx, lut=lut)\n"
        "print('ok', v.shape, v[0], v[(1 << 27) - 1], v[1 << 27], v[-1])\n"
    )
    assert "ok (268435456,) 0.0 0.0 3.0 2.0" in _child(code)
