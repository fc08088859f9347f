"""MIL ops with missing or malformed parameters: a ModelError naming the op, never a bare
exception; and the negative axes coremltools writes (a transformer block converted by
ct.convert) accepted."""

import os
import warnings

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.proto import MIL_pb2, Model_pb2  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402

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

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=ct.target.iOS17,
            compute_precision=ct.precision.FLOAT32,
        )
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
