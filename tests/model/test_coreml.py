"""Core ML import: ML Programs built on Linux with coremltools' MIL builder, saved as
.mlpackage, loaded into fastane and compared with numpy float32 (and the ONNX path);
compressed weights against coremltools' own op definitions; corrupted packages."""

import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types as mtypes  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402
from fastane.model.frontends.coreml import importer as ci  # noqa: E402
from tests.helpers.coreml import save as _save  # noqa: E402

RNG = np.random.default_rng(7)


W = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
B = RNG.standard_normal(8).astype(np.float32)
L = (RNG.standard_normal((10, 8)) * 0.3).astype(np.float32)


def _cnn(path, fp16=False):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 8, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=W, bias=B, pad_type="same")
        y = mb.relu(x=y)
        y = mb.max_pool(x=y, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        y = mb.reduce_mean(x=y, axes=[2, 3], keep_dims=False)
        y = mb.linear(x=y, weight=L, bias=np.ones(10, np.float32))
        y = mb.silu(x=y)
        return mb.softmax(x=y, axis=-1)

    return _save(prog, path, ct.target.iOS17, fp16)


def _numpy_cnn(x):
    from numpy.lib.stride_tricks import sliding_window_view as sw

    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sw(xp, (3, 3), axis=(2, 3))  # 1, 3, 8, 8, 3, 3
    y = np.einsum("nchwij,ocij->nohw", win, W) + B[None, :, None, None]
    y = np.maximum(y, 0)
    y = y.reshape(1, 8, 4, 2, 4, 2).max(axis=(3, 5))
    y = y.mean(axis=(2, 3))
    y = y @ L.T + 1
    y = y / (1 + np.exp(-y))
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    return _cnn(tmp_path_factory.mktemp("cm") / "cnn.mlpackage")


def test_import_fastane_does_not_import_coremltools():
    code = "import sys, fastane; fastane.load_model; sys.exit('coremltools' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("fp16", [False, True])
def test_cnn_round_trip_against_numpy(tmp_path, fp16):
    path = _cnn(tmp_path / "cnn.mlpackage", fp16)
    m = fastane.load_model(path)
    assert m.graph.origin.startswith("coreml mlProgram")
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    name = list(m.inputs)[0]
    out = list(m({name: x}).values())[0]
    ref = _numpy_cnn(x.astype(np.float64))
    assert out.dtype == np.float16 and out.shape == ref.shape
    assert np.abs(out - ref).max() < 5e-3 * np.abs(ref).max()
    # the fp32 reference of the whole model is the numpy network (weights rounded to fp16
    # in the fp16 model: the reference uses what the file holds)
    tol = 2e-3 if fp16 else 1e-5
    assert np.abs(list(m.reference({name: x}).values())[0] - ref).max() < tol
    rep = m.report({name: x})
    places = {r.layer.op: r.placement for r in rep.layers}
    assert places["conv+relu"] == "ane"
    assert any(op.startswith("linear") and p == "ane" for op, p in places.items())
    assert rep.first_bad is None


def test_same_network_as_onnx(tmp_path, cnn):
    """The same conv (weights, padding) through the ONNX importer gives the same bits."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")],
    )
    p = tmp_path / "c.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 8, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.relu(x=mb.conv(x=x, weight=W, bias=B, pad_type="custom", pad=[1, 1, 1, 1]))

    cm = fastane.load_model(_save(prog, tmp_path / "c.mlpackage", ct.target.iOS17))
    om = fastane.load_model(str(p))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    a = list(cm({list(cm.inputs)[0]: x}).values())[0]
    b = om({"x": x})["y"]
    assert np.array_equal(a, b)


def test_load_model_picks_by_content(tmp_path, cnn):
    # the package renamed (no suffix) is still found by its Manifest.json
    other = tmp_path / "model_dir"
    shutil.copytree(cnn, other)
    assert fastane.load_model(str(other)).graph.origin.startswith("coreml")
    # a bare spec with another suffix: parsed as Core ML, and refused for its weight file
    spec = os.path.join(cnn, "Data", "com.apple.CoreML", "model.mlmodel")
    bare = tmp_path / "spec.bin"
    shutil.copy(spec, bare)
    with pytest.raises(ModelError, match="bare .mlmodel has no weights directory"):
        fastane.load_model(str(bare))


# ------------------------------------------------------------------ compressed weights
def _const_of(prog_fn, path, target):
    """Save a program whose output is ``x + constexpr(...)``; return (fastane's constant,
    coremltools' materialised value)."""
    prog, op_getter = prog_fn
    p = _save(prog, path, target)
    m = fastane.load_model(p)
    x = np.zeros(m.inputs[list(m.inputs)[0]].shape, np.float32)
    ref = m.reference({list(m.inputs)[0]: x})
    return list(ref.values())[0], op_getter()


def _prog_with(shape, make, target):
    holder = {}

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=target)
    def prog(x):
        w = make()
        holder["op"] = w.op
        return mb.add(x=x, y=w)

    return prog, lambda: holder["op"].materialized_val_inference()


def _check(shape, make, target, tmp_path):
    got, want = _const_of(_prog_with(shape, make, target), tmp_path / "w.mlpackage", target)
    want = np.asarray(want[1] if isinstance(want, tuple) else want, np.float32)
    np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))


def test_affine_dequantize_ios16(tmp_path):
    q = RNG.integers(0, 256, (4, 6)).astype(np.uint8)
    zp = RNG.integers(0, 256, 4).astype(np.uint8)
    sc = RNG.random(4).astype(np.float32)
    _check(
        (4, 6),
        lambda: mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zp, scale=sc, axis=0),
        ct.target.iOS16,
        tmp_path,
    )
    q8 = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    _check(
        (4, 6),
        lambda: mb.constexpr_affine_dequantize(
            quantized_data=q8, zero_point=np.int8(3), scale=np.float32(0.25), axis=1
        ),
        ct.target.iOS16,
        tmp_path,
    )


@pytest.mark.parametrize("nbits", [1, 2, 4, 6, 8])
def test_lut_to_dense_ios16(tmp_path, nbits):
    n = 5 * 7
    idx = RNG.integers(0, 1 << nbits, n)
    bits = ((idx[:, None] >> np.arange(nbits)) & 1).astype(np.uint8).reshape(-1)
    packed = np.packbits(bits, bitorder="little")
    lut = RNG.standard_normal(1 << nbits).astype(np.float32)
    _check(
        (5, 7),
        lambda: mb.constexpr_lut_to_dense(indices=packed, lut=lut, shape=np.uint32([5, 7])),
        ct.target.iOS16,
        tmp_path,
    )


def test_sparse_to_dense_ios16(tmp_path):
    mask = RNG.random((6, 5)) < 0.4
    packed = np.packbits(mask.reshape(-1).astype(np.uint8), bitorder="little")
    nz = RNG.standard_normal(int(mask.sum())).astype(np.float32)
    _check(
        (6, 5),
        lambda: mb.constexpr_sparse_to_dense(nonzero_data=nz, mask=packed, shape=np.uint32([6, 5])),
        ct.target.iOS16,
        tmp_path,
    )


def test_blockwise_shift_scale_ios18(tmp_path):
    data = RNG.integers(-8, 8, (4, 8)).astype(mtypes.np_int4_dtype)
    sc = RNG.random((2, 2)).astype(np.float32)
    off = RNG.integers(-8, 8, (2, 2)).astype(mtypes.np_int4_dtype)
    _check(
        (4, 8),
        lambda: mb.constexpr_blockwise_shift_scale(data=data, scale=sc, offset=off),
        ct.target.iOS18,
        tmp_path,
    )
    d8 = RNG.integers(0, 256, (4, 8)).astype(np.uint8)
    _check(
        (4, 8),
        lambda: mb.constexpr_blockwise_shift_scale(
            data=d8, scale=sc, offset=RNG.random((2, 2)).astype(np.float32)
        ),
        ct.target.iOS18,
        tmp_path,
    )


@pytest.mark.parametrize("nbits,vector", [(2, 1), (4, 1), (3, 1), (4, 2)])
def test_lut_to_dense_ios18(tmp_path, nbits, vector):
    dt = {2: mtypes.np_uint2_dtype, 3: mtypes.np_uint3_dtype, 4: mtypes.np_uint4_dtype}[nbits]
    idx = RNG.integers(0, 1 << nbits, (4, 6)).astype(dt)
    lut = RNG.standard_normal((2, 1, 1 << nbits, vector)).astype(np.float32)
    shape = (4 * vector, 6)
    kw = {"vector_axis": 0} if vector > 1 else {}
    _check(shape, lambda: mb.constexpr_lut_to_dense(indices=idx, lut=lut, **kw), ct.target.iOS18, tmp_path)


def test_sparse_to_dense_ios18(tmp_path):
    mask = (RNG.random((5, 6)) < 0.5).astype(mtypes.np_uint1_dtype)
    nz = RNG.standard_normal(int(mask.sum())).astype(np.float32)
    _check(
        (5, 6), lambda: mb.constexpr_sparse_to_dense(nonzero_data=nz, mask=mask), ct.target.iOS18, tmp_path
    )


def test_decompress_rejects_bad_operands():
    with pytest.raises(ValueError, match="set bits"):
        ci.decompress(
            "constexpr_sparse_to_dense", nonzero_data=np.ones(3, np.float32), mask=np.ones((2, 2), np.uint8)
        )
    with pytest.raises(ValueError, match="does not divide"):
        ci.decompress("constexpr_blockwise_shift_scale", data=np.ones((4, 6)), scale=np.ones((3, 1)))
    with pytest.raises(ValueError, match="beyond"):
        ci.decompress(
            "constexpr_lut_to_dense",
            indices=np.full((2, 2), 5, np.uint8),
            lut=np.ones((1, 1, 4, 1), np.float32),
        )


# ------------------------------------------------------------------ op coverage
def test_split_stack_instance_norm(tmp_path):
    g = RNG.random(3).astype(np.float32) + 0.5

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 4, 5))], opset_version=ct.target.iOS17)
    def prog(x):
        n = mb.instance_norm(x=x, gamma=g, beta=np.full(3, 0.25, np.float32), epsilon=1e-5)
        a, b = mb.split(x=n, split_sizes=[1, 2], axis=1)
        s = mb.stack(values=[mb.reduce_sum(x=b, axes=[1], keep_dims=True), a], axis=0)
        u = mb.upsample_nearest_neighbor(
            x=mb.reshape(x=s, shape=[2, 1, 4, 5]), scale_factor_height=2, scale_factor_width=3
        )
        return mb.linear_activation(x=mb.flatten2d(x=u, axis=2), alpha=2.0, beta=-1.0)

    m = fastane.load_model(_save(prog, tmp_path / "s.mlpackage", ct.target.iOS17))
    x = RNG.standard_normal((1, 3, 4, 5))
    mu = x.mean(axis=(2, 3), keepdims=True)
    n = (x - mu) / np.sqrt(x.var(axis=(2, 3), keepdims=True) + 1e-5) * g[:, None, None] + 0.25
    s = np.stack([n[:, 1:].sum(1, keepdims=True), n[:, :1]], 0)
    u = s.reshape(2, 1, 4, 5).repeat(2, axis=2).repeat(3, axis=3)
    want = 2 * u.reshape(2, 120) - 1  # flatten2d: (prod of dims before axis, rest)
    np.testing.assert_allclose(
        list(m.reference(x.astype(np.float32)).values())[0], want, rtol=1e-4, atol=1e-5
    )


def test_mil_ops_against_numpy(tmp_path):
    """A chain of elementwise, normalisation, layout and reduction ops, against numpy."""
    g = RNG.random(6).astype(np.float32) + 0.5

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 4, 6))], opset_version=ct.target.iOS17)
    def prog(x):
        a = mb.layer_norm(x=x, axes=[-1], gamma=g, beta=np.zeros(6, np.float32), epsilon=1e-5)
        b = mb.softsign(x=a)
        c = mb.clamped_relu(x=b, alpha=0.1, beta=0.5)
        d = mb.transpose(x=c, perm=[0, 2, 1])
        e = mb.reshape(x=d, shape=[2, 24])
        f = mb.slice_by_index(x=e, begin=[0, 2], end=[2, 20], stride=[1, 2])
        h = mb.reduce_log_sum_exp(x=f, axes=[1], keep_dims=True)  # small x: exp is finite
        i = mb.concat(values=[f, h], axis=1)
        j = mb.pad(x=i, pad=[0, 0, 1, 2], mode="constant", constant_val=0.5)
        k = mb.gelu(x=j, mode="TANH_APPROXIMATION")
        return mb.scaled_tanh(x=mb.rsqrt(x=mb.add(x=mb.square(x=k), y=1.0)), alpha=2.0, beta=0.5)

    m = fastane.load_model(_save(prog, tmp_path / "ops.mlpackage", ct.target.iOS17))
    x = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    xd = x.astype(np.float64)
    mu = xd.mean(-1, keepdims=True)
    a = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g
    b = a / (1 + np.abs(a))
    c = np.minimum(np.maximum(b, 0), 0.5) + 0.1 * np.minimum(b, 0)
    f = c.transpose(0, 2, 1).reshape(2, 24)[:, 2:20:2]
    h = np.log(np.exp(f).sum(1, keepdims=True))
    j = np.pad(np.concatenate([f, h], 1), ((0, 0), (1, 2)), constant_values=0.5)
    k = 0.5 * j * (1 + np.tanh(np.sqrt(2 / np.pi) * (j + 0.044715 * j**3)))
    want = 2 * np.tanh(0.5 / np.sqrt(k**2 + 1 + 1e-12))
    ref = list(m.reference(x).values())[0]
    np.testing.assert_allclose(ref, want, rtol=2e-5, atol=2e-6)
    out = list(m(x).values())[0]
    assert np.abs(out - want).max() < 2e-2


def test_mil_reductions_of_a_function_against_numpy(tmp_path):
    """reduce_l1_norm, reduce_l2_norm, reduce_sum_square, reduce_log_sum: their compositions
    (COMPOSED_REDUCTIONS) in float32 on the host, and on the emulated ANE."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return (
            mb.reduce_l1_norm(x=x, axes=[-1], keep_dims=True),
            mb.reduce_l2_norm(x=x, axes=[-1], keep_dims=False),
            mb.reduce_sum_square(x=x, axes=[-1], keep_dims=True),
            mb.reduce_log_sum(x=mb.abs(x=x), axes=[-1], keep_dims=True),
        )

    m = fastane.load_model(_save(prog, tmp_path / "red.mlpackage", ct.target.iOS17))
    x = RNG.uniform(0.2, 2.0, (2, 3, 8)).astype(np.float32) * RNG.choice([-1, 1], (2, 3, 8))
    xd = x.astype(np.float64)
    want = [
        np.abs(xd).sum(-1, keepdims=True),
        np.sqrt((xd * xd).sum(-1)),
        (xd * xd).sum(-1, keepdims=True),
        np.log(np.abs(xd).sum(-1, keepdims=True)),
    ]
    for got, w in zip(m.reference(x).values(), want):
        np.testing.assert_allclose(got, w, rtol=2e-6)
    for got, w in zip(m(x).values(), want):
        np.testing.assert_allclose(np.asarray(got, np.float64), w, rtol=2e-2)


# ------------------------------------------------------------------ hostile packages
def _corrupt(cnn, tmp_path, fn):
    p = tmp_path / "bad.mlpackage"
    shutil.copytree(cnn, p)
    fn(os.path.join(p, "Data", "com.apple.CoreML"))
    return str(p)


def test_missing_weight_file(cnn, tmp_path):
    p = _corrupt(cnn, tmp_path, lambda d: os.remove(os.path.join(d, "weights", "weight.bin")))
    with pytest.raises(ModelError, match="is missing from the package"):
        fastane.load_model(p)


def test_truncated_blob(cnn, tmp_path):
    def trunc(d):
        w = os.path.join(d, "weights", "weight.bin")
        data = open(w, "rb").read()
        open(w, "wb").write(data[: len(data) - 100])

    with pytest.raises(ModelError, match="truncated|outside"):
        fastane.load_model(_corrupt(cnn, tmp_path, trunc))


def test_overwritten_blob_metadata(cnn, tmp_path):
    def smash(d):
        w = os.path.join(d, "weights", "weight.bin")
        data = bytearray(open(w, "rb").read())
        data[64:68] = b"\0\0\0\0"  # the first blob's sentinel
        open(w, "wb").write(bytes(data))

    with pytest.raises(ModelError, match="sentinel"):
        fastane.load_model(_corrupt(cnn, tmp_path, smash))


def test_bad_spec_and_manifest(cnn, tmp_path):
    def garbage(d):
        open(os.path.join(d, "model.mlmodel"), "wb").write(b"\xff\xff\xff garbage")

    with pytest.raises(ModelError, match="not a valid Core ML spec|not a Core ML model"):
        fastane.load_model(_corrupt(cnn, tmp_path, garbage))
    p = tmp_path / "m2.mlpackage"
    shutil.copytree(cnn, p)
    open(os.path.join(p, "Manifest.json"), "w").write("{not json")
    with pytest.raises(ModelError, match="Manifest.json"):
        fastane.load_model(str(p))
    shutil.rmtree(p)
    shutil.copytree(cnn, p)
    man = open(os.path.join(p, "Manifest.json")).read()
    import json

    info = json.loads(man)
    for e in info["itemInfoEntries"].values():
        e["path"] = "../../../../etc/passwd"
    open(os.path.join(p, "Manifest.json"), "w").write(json.dumps(info))
    with pytest.raises(ModelError, match="outside the model.s folder|does not exist"):
        fastane.load_model(str(p))


def test_hostile_sizes(cnn, tmp_path):
    """A const declaring 2^40 elements is refused before any allocation."""
    from coremltools.proto import Model_pb2

    def grow(d):
        spec_path = os.path.join(d, "model.mlmodel")
        spec = Model_pb2.Model()
        spec.ParseFromString(open(spec_path, "rb").read())
        blk = spec.mlProgram.functions["main"].block_specializations
        for b in blk.values():
            for op in b.operations:
                if op.type == "const" and op.attributes["val"].HasField("blobFileValue"):
                    tt = op.attributes["val"].type.tensorType
                    tt.dimensions[0].constant.size = 1 << 40
                    break
        open(spec_path, "wb").write(spec.SerializeToString())

    with pytest.raises(ModelError, match="limit|elements"):
        fastane.load_model(_corrupt(cnn, tmp_path, grow))


def test_unknown_op_is_named(tmp_path):
    # (cumsum, the op this test used, now runs on the host: tests/model/test_coreml_host.py)
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.l2_norm(x=x)

    with pytest.raises(ModelError, match="l2_norm"):
        fastane.load_model(_save(prog, tmp_path / "u.mlpackage", ct.target.iOS17))


# ------------------------------------------------------------------ the fp16 hunt
def _overflow_model(tmp_path):
    """exp(x) (fine in fp16 up to x = 11.09) then a square: inf born in the square for x
    beyond ~5.5, though the fp32 model is finite."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 16))], opset_version=ct.target.iOS17)
    def prog(x):
        a = mb.mul(x=x, y=1.0)
        e = mb.exp(x=a)
        return mb.square(x=e)

    return fastane.load_model(_save(prog, tmp_path / "ovf.mlpackage", ct.target.iOS17))


def test_report_names_infs_born(tmp_path):
    m = _overflow_model(tmp_path)
    x = np.linspace(-2, 7, 16, dtype=np.float32)[None]
    rep = m.report(x)
    born = {r.layer.name: (r.inf_born, r.nan_born, r.nonfinite_inherited) for r in rep.layers}
    sq = next(r for r in rep.layers if r.layer.op == "square")
    assert sq.placement == "ane" and sq.inf_born == int((np.exp(x.astype(np.float64)) ** 2 > 65504).sum())
    assert all(v[0] == 0 for k, v in born.items() if k != sq.layer.name)
    assert "non-finite values born in" in rep.table() and sq.layer.name in rep.table()
    assert rep.as_dict()["layers"][-1]["inf_born"] == sq.inf_born


def test_first_divergence_stops_and_prints_input_ranges(tmp_path):
    from fastane.model.run.hunt import first_divergence

    m = _overflow_model(tmp_path)
    x = np.linspace(-2, 7, 16, dtype=np.float32)[None]
    d = first_divergence(m, x)
    assert d.op == "square" and d.inf_born > 0
    ((name, r),) = d.inputs.items()
    # the exp table's output (its error within the table tolerance, 2e-2)
    assert r["max"] == pytest.approx(float(np.exp(7.0)), rel=2e-2)
    assert "first divergence" in d.text() and "range [" in d.text()
    import json

    assert json.loads(json.dumps(d.as_dict(), allow_nan=False))["layer"] == d.layer
    # a tolerance of 0: the first ANE layer with any error stops the run
    small = np.linspace(-1, 1, 16, dtype=np.float32)[None]
    d0 = first_divergence(m, small, tolerance=0.0)
    assert d0.layer is not None and d0.error > 0
    assert first_divergence(m, small).layer is None


def test_softplus_is_the_plain_composition(tmp_path):
    """softplus = log(1 + exp(x)) in fp16: exp overflows beyond 11.09 and the inf stays,
    where fp32 gives x (no safeguard the hardware programs do not show)."""
    from fastane.model.run.hunt import first_divergence

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.softplus(x=x)

    m = fastane.load_model(_save(prog, tmp_path / "sp.mlpackage", ct.target.iOS17))
    x = np.array([[-3.0, 0.0, 5.0, 12.0]], np.float32)
    y = list(m(x).values())[0].astype(np.float64)
    ref = np.logaddexp(0, x.astype(np.float64))
    assert np.allclose(y[0, :3], ref[0, :3], rtol=3e-2) and np.isinf(y[0, 3])
    assert np.isfinite(list(m.reference(x).values())[0]).all()
    d = first_divergence(m, x)
    assert d.op == "softplus" and d.placement == "ane" and d.inf_born == 1


def test_first_divergence_on_onnx_model(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from fastane.model.run.hunt import first_divergence

    g = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Mul", ["e", "e"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    import onnx

    p = tmp_path / "e.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    d = first_divergence(fastane.load_model(str(p)), np.full((1, 8), 6.0, np.float32))
    assert d.op == "Mul" and d.inf_born == 8


def test_sweep_shows_the_cliff(tmp_path):
    from fastane.model.run.hunt import parse_range, sweep

    m = _overflow_model(tmp_path)
    xs = parse_range("0:8:9")
    sw = sweep(m, list(m.inputs)[0], xs, {list(m.inputs)[0]: np.zeros((1, 16), np.float32)})
    finite = np.isfinite(sw.ane.astype(np.float64))
    assert finite[:6].all() and not finite[6:].any()  # exp(x)^2 > 65504 from x = 6 on
    assert np.isfinite(sw.fp32).all()
    one = sweep(
        m, list(m.inputs)[0], xs, {list(m.inputs)[0]: np.zeros((1, 16), np.float32)}, element=5, index=5
    )
    assert not np.isfinite(one.ane.astype(np.float64)[-1]) and np.isfinite(one.ane.astype(np.float64)[0])
    other = sweep(
        m, list(m.inputs)[0], xs, {list(m.inputs)[0]: np.zeros((1, 16), np.float32)}, element=5, index=4
    )
    assert np.all(other.ane == 1)  # element 4 stays 0: exp(0)^2
    with pytest.raises(ValueError):
        parse_range("1:2")
    with pytest.raises(ValueError):
        parse_range("0:1:0")


def test_cli_run_report_first_divergence_and_sweep(cnn, capsys):
    from fastane.cli import main

    def cli(*argv):
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, err = cli("run", cnn, "--random", "--report", "--compute-units", "CPU_AND_NE")
    assert rc == 0, err
    assert "ESTIMATE" in out and "conv+relu" in out
    rc, out, _ = cli("run", cnn, "--random", "--first-divergence", "--tolerance", "0")
    assert rc == 0 and "first divergence" in out and "range [" in out
    rc, out, err = cli("sweep", cnn, "--input", "x", "--range", "-2:2:3", "--json")
    assert rc == 0, err
    import json

    assert [p["x"] for p in json.loads(out)["points"]] == [-2.0, 0.0, 2.0]
    rc, out, err = cli("roofline", cnn, "--summary")
    assert rc == 0 and "ANE total" in out, err
    import json as _json

    obs = os.path.join(os.path.dirname(cnn), "observed.json")
    first = fastane.load_model(cnn).placement({"x": (1, 3, 8, 8)})
    conv = next(l for l in first if l.op.startswith("conv"))
    _json.dump({conv.nodes[0].name: "gpu"}, open(obs, "w"))
    rc, out, err = cli("run", cnn, "--random", "--report", "--compare-placement", obs)
    assert rc == 0, err
    # an fp32 program: its conv is predicted off the ANE (the fp32 rule), on the CPU
    assert "0 layers agree, 1 disagree" in out and f"{conv.name}: predicted cpu, observed gpu" in out
    open(obs, "w").write("[1, 2]")
    rc, _, err = cli("run", cnn, "--random", "--report", "--compare-placement", obs)
    assert rc == 2 and "expected" in err
    rc, _, err = cli("run", cnn, "--random", "--report", "--compute-units", "GPU_ONLY")
    assert rc == 2 and "compute units" in err


def test_placement_prediction_rules(tmp_path):
    from fastane.model.placement.predict import predict

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        c = mb.greater(x=x, y=0.5)
        s = mb.select(cond=c, a=x, b=np.float32(0.0))
        return mb.relu(x=s)

    # fp16: in an fp32 program the fp32 rule takes every op off the ANE before these rules
    # (fp32 first: the converter's passes change the program they are given)
    fp32 = fastane.load_model(_save(prog, tmp_path / "g32.mlpackage", ct.target.iOS17))
    m = fastane.load_model(_save(prog, tmp_path / "g.mlpackage", ct.target.iOS17, fp16=True))
    b32, l32 = fp32.bind({"x": (1, 4, 8)})
    by_op = {lay.nodes[0].op: p for lay, p in zip(l32, predict(l32, b32, "CPU_AND_NE", "m4"))}
    assert (by_op["relu"].unit, by_op["relu"].rule) == ("cpu", "fp32 compute precision")
    bound, layers = m.bind({"x": (1, 4, 8)})
    units = {l.nodes[0].op: p for l, p in zip(layers, predict(layers, bound, "CPU_AND_NE"))}
    assert units["greater"].unit == "cpu" and units["where"].unit == "cpu"
    # the relu alone (32 elements) is a program with no matrix product: on the M1 the CPU
    # (the non-matrix program floor, torchnative's NPU2.md section 7.1); on an M4, which
    # reports no such floor, the ANE
    assert (units["relu"].unit, units["relu"].rule) == ("cpu", "non-matrix program floor")
    m4 = {l.nodes[0].op: p for l, p in zip(layers, predict(layers, bound, "CPU_AND_NE", "m4"))}
    assert m4["relu"].unit == "ane"
    assert {p.unit for p in predict(layers, bound, "CPU_ONLY")} == {"cpu"}
    assert [p.unit for _, p in m.predict_placement({"x": (1, 4, 8)}, "CPU_AND_NE")] == [
        p.unit for p in predict(layers, bound, "CPU_AND_NE")
    ]
    every = {l.nodes[0].op: p for l, p in zip(layers, predict(layers, bound, "ALL"))}
    assert every["greater"].unit in ("gpu", "cpu")

    # the SPEC 5 limit: W > 16384 leaves the ANE
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 1, 1, 20000))], opset_version=ct.target.iOS17)
    def wide(x):
        return mb.relu(x=x)

    mw = fastane.load_model(_save(wide, tmp_path / "w.mlpackage", ct.target.iOS17, fp16=True))
    b2, l2 = mw.bind({"x": (1, 1, 1, 20000)})
    p = next(p for lay, p in zip(l2, predict(l2, b2, "CPU_AND_NE")) if lay.op == "relu")
    assert p.unit == "cpu" and "16384" in p.reason


# ------------------------------------------------------------------ neural network .mlmodel
def test_neural_network_mlmodel_against_numpy(tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fc = RNG.standard_normal((5, 64)).astype(np.float32)
    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 8, 8))], [("y", None)])
    b.add_convolution(
        "conv",
        kernel_channels=3,
        output_channels=4,
        height=3,
        width=3,
        stride_height=1,
        stride_width=1,
        border_mode="same",
        groups=1,
        W=w.transpose(2, 3, 1, 0),
        b=np.ones(4, np.float32),
        has_bias=True,
        input_name="x",
        output_name="c",
    )
    b.add_activation("relu", "RELU", "c", "r")
    b.add_pooling(
        "pool",
        height=2,
        width=2,
        stride_height=2,
        stride_width=2,
        layer_type="MAX",
        padding_type="VALID",
        input_name="r",
        output_name="p",
    )
    b.add_flatten("flat", mode=0, input_name="p", output_name="f")
    b.add_inner_product(
        "fc",
        W=fc,
        b=np.zeros(5, np.float32),
        input_channels=64,
        output_channels=5,
        has_bias=True,
        input_name="f",
        output_name="y",
    )
    p = tmp_path / "nn.mlmodel"
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(p))
    m = fastane.load_model(str(p))
    assert m.graph.origin.startswith("coreml neuralNetwork")
    x = RNG.standard_normal((3, 8, 8))
    from numpy.lib.stride_tricks import sliding_window_view as sw

    win = sw(np.pad(x, ((0, 0), (1, 1), (1, 1))), (3, 3), axis=(1, 2))
    r = np.maximum(np.einsum("chwij,ocij->ohw", win, w) + 1, 0)
    want = fc @ r.reshape(4, 4, 2, 4, 2).max(axis=(2, 4)).reshape(-1)
    np.testing.assert_allclose(m.reference(x)["y"], want, rtol=1e-4, atol=1e-4)
    y = m(x)["y"]
    assert y.shape == (5,) and np.abs(y - want).max() < 1e-2 * np.abs(want).max()


@pytest.mark.parametrize("mode", ["BOTTOM_RIGHT_HEAVY", "TOP_LEFT_HEAVY"])
def test_neural_network_same_pooling_keeps_its_asymmetry(tmp_path, mode):
    # an even window with SAME padding pads one pixel: at the end (BOTTOM_RIGHT_HEAVY, the
    # default) or at the start (TOP_LEFT_HEAVY); max pooling pads with -inf
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    b = NeuralNetworkBuilder([("x", datatypes.Array(2, 5, 5))], [("y", None)])
    b.add_pooling(
        "pool",
        height=2,
        width=2,
        stride_height=1,
        stride_width=1,
        layer_type="MAX",
        padding_type="SAME",
        same_padding_asymmetry_mode=mode,
        input_name="x",
        output_name="y",
    )
    p = tmp_path / "pool.mlmodel"
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(p))
    m = fastane.load_model(str(p))
    x = RNG.standard_normal((2, 5, 5)).astype(np.float32)
    pad = ((0, 0), (0, 1), (0, 1)) if mode == "BOTTOM_RIGHT_HEAVY" else ((0, 0), (1, 0), (1, 0))
    from numpy.lib.stride_tricks import sliding_window_view as sw

    want = sw(np.pad(x, pad, constant_values=-np.inf), (2, 2), axis=(1, 2)).max(axis=(3, 4))
    np.testing.assert_array_equal(m.reference(x)["y"], want)
    np.testing.assert_array_equal(m(x)["y"], want.astype(np.float16))


# ------------------------------------------------------------------ iOS18 sparse pairs
def test_lut_to_sparse_and_sparse_shift_scale_ios18(tmp_path):
    mask = (RNG.random((4, 6)) < 0.5).astype(mtypes.np_uint1_dtype)
    k = int(mask.sum())
    idx = RNG.integers(0, 4, k).astype(mtypes.np_uint2_dtype)
    lut = RNG.standard_normal((2, 1, 4, 1)).astype(np.float32)

    def lut_sparse():
        m_, v_ = mb.constexpr_lut_to_sparse(indices_mask=mask, indices_nonzero_data=idx, lut=lut)
        return mb.constexpr_sparse_to_dense(nonzero_data=v_, mask=m_)

    _check((4, 6), lut_sparse, ct.target.iOS18, tmp_path)
    vlut = RNG.standard_normal((1, 1, 4, 2)).astype(np.float32)

    def lut_sparse_vector():
        m_, v_ = mb.constexpr_lut_to_sparse(
            indices_mask=mask, indices_nonzero_data=idx, lut=vlut, vector_axis=0
        )
        return mb.constexpr_sparse_to_dense(nonzero_data=v_, mask=m_)

    _check((8, 6), lut_sparse_vector, ct.target.iOS18, tmp_path)
    nz = RNG.integers(-100, 100, k).astype(np.int8)
    sc = RNG.random((2, 3)).astype(np.float32)

    def shift_sparse():
        m_, v_ = mb.constexpr_sparse_blockwise_shift_scale(data_mask=mask, nonzero_data=nz, scale=sc)
        return mb.constexpr_sparse_to_dense(nonzero_data=v_, mask=m_)

    _check((4, 6), shift_sparse, ct.target.iOS18, tmp_path)


def test_stats_only_without_weights_matches_a_run(tmp_path):
    big = (RNG.standard_normal((64, 32, 3, 3)) * 0.1).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 32, 8, 8))], opset_version=ct.target.iOS18)
    def prog(x):
        q = np.clip(np.round(big / 0.01), -127, 127).astype(np.int8)
        w = mb.constexpr_blockwise_shift_scale(data=q, scale=np.full((64, 1, 1, 1), 0.01, np.float32))
        return mb.relu(x=mb.conv(x=x, weight=w, pad_type="same"))

    p = _save(prog, tmp_path / "big.mlpackage", ct.target.iOS18)
    light = fastane.load_model(p, weights=False)
    rep = light.report({"x": (1, 32, 8, 8)}, stats_only=True)
    with pytest.raises(ModelError, match="without its weights"):
        light(np.zeros((1, 32, 8, 8), np.float32))
    full = fastane.load_model(p).report(RNG.standard_normal((1, 32, 8, 8)).astype(np.float32))
    ane = [(r.stats.tasks, r.stats.macs) for r in rep.layers if r.placement == "ane"]
    assert ane and ane == [(r.stats.tasks, r.stats.macs) for r in full.layers if r.placement == "ane"]


def test_readme_example(tmp_path):
    """scripts/coreml_example.py, as the README runs it: fine at unit scale, the square
    overflows fp16 on the planar engine at 60x."""
    import runpy
    from fastane.model.run.hunt import first_divergence

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ns = runpy.run_path(os.path.join(root, "scripts", "coreml_example.py"))
    m = fastane.load_model(_save(ns["prog"], tmp_path / "net.mlpackage", ct.target.iOS17, fp16=True))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert first_divergence(m, x).layer is None
    d = first_divergence(m, 60 * x)
    assert d.layer == "mul_0_cast_fp16" and d.inf_born > 0
    assert list(d.inputs.values())[0]["max"] > 255.9


def test_batch_norm_folds_and_conv_transpose_matches_onnx(tmp_path):
    """With coremltools' passes off, batch_norm stays in the program: fastane folds it into
    the conv (one ANE layer). A conv_transpose gives the bits of the same ONNX
    ConvTranspose."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    wt = (RNG.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32)  # C_in, C_out, kh, kw

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 8, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=W, bias=B, pad_type="same")
        y = mb.batch_norm(
            x=y,
            mean=np.full(8, 0.1, np.float32),
            variance=np.full(8, 2.0, np.float32),
            gamma=np.full(8, 0.5, np.float32),
            beta=np.full(8, 0.2, np.float32),
            epsilon=1e-5,
        )
        return mb.conv_transpose(x=y, weight=wt, strides=[2, 2], pad_type="valid")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mm = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=ct.target.iOS17,
            compute_precision=ct.precision.FLOAT32,
            pass_pipeline=ct.PassPipeline.EMPTY,
        )
    mm.save(str(tmp_path / "bn.mlpackage"))
    m = fastane.load_model(str(tmp_path / "bn.mlpackage"))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    rep = m.report(x)
    ops = [(r.layer.op, r.placement) for r in rep.layers]
    assert ("conv+batch_norm", "ane") in ops and ("conv_transpose", "ane") in ops
    assert rep.first_bad is None
    # the same ConvTranspose through ONNX, fed the Core ML model's intermediate
    y = m({"x": x})
    g = helper.make_graph(
        [helper.make_node("ConvTranspose", ["h", "w"], ["z"], strides=[2, 2])],
        "g",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 17, 17])],
        [numpy_helper.from_array(wt, "w")],
    )
    p = tmp_path / "ct.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    h = np.asarray(_intermediate(m, x), np.float32)
    z = fastane.load_model(str(p))({"h": h})["z"]
    assert np.array_equal(list(y.values())[0], z)


def _intermediate(model, x):
    """The output of the model's first layer (conv + batch_norm), as the ANE made it."""
    got = {}

    def observe(layer, xs, outs, rec):
        if rec.placement == "ane":
            got.setdefault("first_ane", outs[0])

    model.report(x, observe=observe)
    return got["first_ane"]


def test_fp16_input_and_transposed_constant(tmp_path):
    """An fp16 model input (the caller's array rounded to fp16 once, then float32 in the
    graph); matmul with transpose_y on a constant."""
    K = (RNG.standard_normal((6, 5)) * 0.5).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5), dtype=mtypes.fp16)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.matmul(x=x, y=K.astype(np.float16), transpose_y=True)

    m = fastane.load_model(_save(prog, tmp_path / "h.mlpackage", ct.target.iOS16, fp16=True))
    assert np.dtype(m.inputs["x"].dtype) == np.float16
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    want = x.astype(np.float16).astype(np.float64) @ K.astype(np.float16).astype(np.float64).T
    ref = list(m.reference(x).values())[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    assert np.abs(list(m(x).values())[0] - want).max() < 1e-2


def test_mutated_packages_give_model_errors(cnn, tmp_path):
    """Random byte flips in the spec and the weight blob: the load either works or raises
    ModelError -- never another exception."""
    rng = np.random.default_rng(3)
    d = os.path.join(cnn, "Data", "com.apple.CoreML")
    spec = open(os.path.join(d, "model.mlmodel"), "rb").read()
    blob = open(os.path.join(d, "weights", "weight.bin"), "rb").read()
    p = tmp_path / "mut.mlpackage"
    shutil.copytree(cnn, p)
    pd = os.path.join(p, "Data", "com.apple.CoreML")
    outcomes = {"ok": 0, "error": 0}
    for i in range(80):
        s, b = bytearray(spec), bytearray(blob)
        target = s if i % 2 == 0 else b
        for _ in range(1 + i % 4):
            target[int(rng.integers(0, len(target)))] = int(rng.integers(0, 256))
        if i % 7 == 3:
            target = target[: int(rng.integers(0, len(target)))]
            if i % 2 == 0:
                s = target
            else:
                b = target
        open(os.path.join(pd, "model.mlmodel"), "wb").write(bytes(s))
        open(os.path.join(pd, "weights", "weight.bin"), "wb").write(bytes(b))
        try:
            m = fastane.load_model(str(p))
            m.bind({k: tuple(1 if isinstance(v, str) else v for v in t.shape) for k, t in m.inputs.items()})
            outcomes["ok"] += 1
        except ModelError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and sum(outcomes.values()) == 80


def test_mutated_neural_network_gives_model_errors(tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 6, 6))], [("y", None)])
    b.add_convolution(
        "conv",
        kernel_channels=3,
        output_channels=4,
        height=3,
        width=3,
        stride_height=1,
        stride_width=1,
        border_mode="same",
        groups=1,
        W=RNG.standard_normal((3, 3, 3, 4)).astype(np.float32),
        b=np.ones(4, np.float32),
        has_bias=True,
        input_name="x",
        output_name="c",
    )
    b.add_activation("relu", "RELU", "c", "y")
    good = tmp_path / "g.mlmodel"
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(good))
    spec = open(good, "rb").read()
    rng = np.random.default_rng(5)
    bad = tmp_path / "m.mlmodel"
    errors = 0
    for i in range(120):
        s = bytearray(spec)
        for _ in range(1 + i % 5):
            s[int(rng.integers(0, len(s)))] = int(rng.integers(0, 256))
        if i % 9 == 4:
            s = s[: int(rng.integers(0, len(s)))]
        open(bad, "wb").write(bytes(s))
        try:
            m = fastane.load_model(str(bad))
            m.bind({k: tuple(1 if isinstance(v, str) else v for v in t.shape) for k, t in m.inputs.items()})
        except ModelError:
            errors += 1
    assert errors > 0


def test_exp2_and_rsqrt_on_the_ne_tables(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.rsqrt(x=mb.exp2(x=x), epsilon=0.0)

    m = fastane.load_model(_save(prog, tmp_path / "e2.mlpackage", ct.target.iOS17))
    x = RNG.uniform(-4, 4, (4, 8)).astype(np.float32)
    rep = m.report(x)
    assert [(r.layer.op, r.placement, r.layer.call) for r in rep.layers] == [
        ("exp2", "ane", "exp2"),
        ("rsqrt", "ane", "rsqrt"),
    ]
    want = 2.0 ** (-x.astype(np.float64) / 2)
    assert np.abs(list(m(x).values())[0] - want).max() < 2e-2 * np.abs(want).max()
    plan = m.report({"x": (4, 8)}, stats_only=True)
    assert [r.stats.tasks for r in plan.layers] == [r.stats.tasks for r in rep.layers]


def test_elu_and_erf_on_the_ne_tables(tmp_path):
    """MIL elu (its alpha) and erf: fastane's elu and erf tables on the ANE, bit for bit
    fastane.elu/erf; Core ML's estimate, for the ops in fp16 (the program is fp32, which bars
    the ANE), keeps them on the ANE of an M4, now without the note that fastane runs them on
    the host (on the M1 such a small program with no matrix product goes to the CPU: the
    non-matrix program floor)."""
    from fastane.model.placement.predict import predict

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.erf(x=mb.elu(x=x, alpha=0.5))

    m = fastane.load_model(_save(prog, tmp_path / "ee.mlpackage", ct.target.iOS17))
    x = RNG.uniform(-10, 4, (4, 8)).astype(np.float16).astype(np.float32)
    rep = m.report(x)
    assert [(r.layer.op, r.placement, r.layer.call) for r in rep.layers] == [
        ("elu", "ane", "elu"),
        ("erf", "ane", "erf"),
    ]
    assert all("table (no Apple block in the corpus" in r.layer.reason for r in rep.layers)
    want = fastane.erf(fastane.elu(x, alpha=0.5))
    np.testing.assert_array_equal(
        np.asarray(list(m(x).values())[0], np.float16).view(np.uint16), want.view(np.uint16)
    )
    bound, layers = m.bind({"x": (4, 8)})
    # the program is fp32: off the ANE (the fp32 rule); the rules after it read as if fp16
    assert {p.rule for p in predict(layers, bound, "CPU_AND_NE", "m4")} == {"fp32 compute precision"}
    for p in predict(layers, bound, "CPU_AND_NE", "m4", declared={}):
        assert p.unit == "ane" and "fastane runs it on the host" not in p.reason
    assert {p.rule for p in predict(layers, bound, "CPU_AND_NE", declared={})} == {"non-matrix program floor"}


def test_sigmoid_hard_and_coremltools_hardswish_on_the_ane(tmp_path):
    """MIL sigmoid_hard (its alpha, beta) on fastane's hard-sigmoid block, and the form
    coremltools' torch frontend writes for hardswish -- ``w = thresholded_relu(x, -3)``,
    ``mul(w, sigmoid_hard(w, 1/6, 1/2))`` (apple/coremltools@e0e2f42
    coremltools/converters/mil/frontend/torch/ops.py ``hardswish``) -- whose sigmoid_hard and
    mul run as hard_swish; the thresholded relu is its greater/where composition (host).
    Bit for bit fastane.hard_sigmoid / hard_swish; Core ML's estimate, for the ops in fp16 (the
    program is fp32, which bars the ANE), keeps the ANE layers on the ANE of an M4, now without
    the note that fastane runs them on the host (on the M1 the non-matrix program floor takes
    such a small program to the CPU)."""
    from fastane.model.placement.predict import predict

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        h = mb.sigmoid_hard(x=x, alpha=0.3, beta=0.4)
        w = mb.thresholded_relu(x=h, alpha=-3.0)
        return mb.mul(x=w, y=mb.sigmoid_hard(x=w, alpha=1.0 / 6, beta=0.5))

    m = fastane.load_model(_save(prog, tmp_path / "hs.mlpackage", ct.target.iOS17))
    x = RNG.uniform(-10, 10, (4, 8)).astype(np.float16).astype(np.float32)
    rep = m.report(x)
    assert [(r.layer.op, r.placement, r.layer.call) for r in rep.layers if r.layer.op != "cast"] == [
        ("sigmoid_hard", "ane", "hard_sigmoid"),
        ("thresholded_relu", "host", ""),
        ("thresholded_relu", "host", ""),
        ("sigmoid_hard+mul", "ane", "hard_swish"),
    ]
    assert all("table (no Apple block in the corpus" in rep.layers[i].layer.reason for i in (0, 3))
    h = fastane.hard_sigmoid(x, 0.3, 0.4)
    want = fastane.hard_swish(np.where(h > -3, h, 0))
    np.testing.assert_array_equal(
        np.asarray(list(m(x).values())[0], np.float16).view(np.uint16), want.view(np.uint16)
    )
    bound, layers = m.bind({"x": (4, 8)})
    # the program is fp32: off the ANE (the fp32 rule); the rules after it read as if fp16
    assert {p.unit for p in predict(layers, bound, "CPU_AND_NE", "m4")} == {"cpu"}
    for lay, p in zip(layers, predict(layers, bound, "CPU_AND_NE", "m4", declared={})):
        if lay.placement == "ane":
            assert p.unit == "ane" and "fastane runs it on the host" not in p.reason
    for lay, p in zip(layers, predict(layers, bound, "CPU_AND_NE", declared={})):
        if lay.placement == "ane":
            assert (p.unit, p.rule) == ("cpu", "non-matrix program floor")


def test_neural_network_sigmoid_hard(tmp_path):
    """A NeuralNetwork's SIGMOID_HARD activation (alpha, beta) imports as hard_sigmoid and
    runs on its block."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 4, 4))], [("y", None)])
    b.add_activation("hs", "SIGMOID_HARD", "x", "y", params=[0.25, 0.375])
    p = tmp_path / "hs.mlmodel"
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(p))
    m = fastane.load_model(str(p))
    x = RNG.uniform(-6, 6, (3, 4, 4)).astype(np.float16).astype(np.float32)
    (layer,) = [r for r in m.report(x).layers if r.placement == "ane"]
    assert (layer.layer.nodes[0].op, layer.placement, layer.layer.call) == (
        "hard_sigmoid",
        "ane",
        "hard_sigmoid",
    )
    np.testing.assert_array_equal(
        np.asarray(m(x)["y"], np.float16).view(np.uint16),
        fastane.hard_sigmoid(x, 0.25, 0.375).view(np.uint16),
    )


@pytest.mark.parametrize("mode", ["linear", "linear_symmetric", "linear_lut"])
def test_neural_network_quantized_weights(tmp_path, mode):
    """Weights quantized by coremltools (8-bit per-channel linear, 4-bit table) decode to
    what coremltools' own dequantization gives."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    from coremltools.models.neural_network import quantization_utils as qu

    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 6, 6))], [("y", None)])
    b.add_convolution(
        "conv",
        kernel_channels=3,
        output_channels=4,
        height=3,
        width=3,
        stride_height=1,
        stride_width=1,
        border_mode="valid",
        groups=1,
        W=w.transpose(2, 3, 1, 0),
        b=None,
        has_bias=False,
        input_name="x",
        output_name="y",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = qu.quantize_weights(
            ct.models.MLModel(b.spec, skip_model_load=True), 8 if "lut" not in mode else 4, mode
        )
    spec = q if hasattr(q, "neuralNetwork") else q.get_spec()
    ct.models.MLModel(spec, skip_model_load=True).save(str(tmp_path / "q.mlmodel"))
    deq = type(spec)()
    deq.CopyFrom(spec)
    qu._dequantize_nn_spec(deq.neuralNetwork)
    ct.models.MLModel(deq, skip_model_load=True).save(str(tmp_path / "d.mlmodel"))
    a, d = fastane.load_model(str(tmp_path / "q.mlmodel")), fastane.load_model(str(tmp_path / "d.mlmodel"))
    wa = next(v for k, v in a.graph.consts.items() if v.shape == (4, 3, 3, 3))
    wd = next(v for k, v in d.graph.consts.items() if v.shape == (4, 3, 3, 3))
    np.testing.assert_allclose(wa, wd, rtol=1e-6, atol=1e-7)


def test_attention_and_comparisons(tmp_path):
    """iOS18 scaled_dot_product_attention as its composition; greater_equal / not_equal as
    negated comparisons; fill, shape."""

    @mb.program(
        input_specs=[
            mb.TensorSpec(shape=(2, 4, 8)),
            mb.TensorSpec(shape=(2, 6, 8)),
            mb.TensorSpec(shape=(2, 6, 8)),
        ],
        opset_version=ct.target.iOS18,
    )
    def prog(q, k, v):
        a = mb.scaled_dot_product_attention(query=q, key=k, value=v)
        r = mb.select(cond=mb.greater_equal(x=a, y=0.0), a=a, b=mb.fill(shape=[2, 4, 8], value=-1.0))
        return mb.select(cond=mb.not_equal(x=r, y=-1.0), a=r, b=mb.fill(shape=[2, 4, 8], value=5.0))

    m = fastane.load_model(_save(prog, tmp_path / "att.mlpackage", ct.target.iOS18))
    q, k, v = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 4, 8), (2, 6, 8), (2, 6, 8)))
    s = q.astype(np.float64) @ k.transpose(0, 2, 1) / np.sqrt(8)
    e = np.exp(s - s.max(-1, keepdims=True))
    a = (e / e.sum(-1, keepdims=True)) @ v
    want = np.where(a >= 0, a, 5.0)
    ins = dict(zip(m.inputs, (q, k, v)))
    np.testing.assert_allclose(list(m.reference(ins).values())[0], want, rtol=1e-5, atol=1e-6)
    rep = m.report(ins)
    assert sum(r.placement == "ane" and r.layer.call == "matmul" for r in rep.layers) == 2


def test_op_with_a_missing_parameter(tmp_path):
    from coremltools.proto import Model_pb2

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 6))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.slice_by_index(x=x, begin=[0, 1], end=[2, 5])

    p = _save(prog, tmp_path / "s.mlpackage", ct.target.iOS17)
    sp = os.path.join(p, "Data", "com.apple.CoreML", "model.mlmodel")
    spec = Model_pb2.Model()
    spec.ParseFromString(open(sp, "rb").read())
    for b in spec.mlProgram.functions["main"].block_specializations.values():
        for op in b.operations:
            if op.type == "slice_by_index":
                del op.inputs["begin"]
    open(sp, "wb").write(spec.SerializeToString())
    with pytest.raises(ModelError, match="slice_by_index.*malformed"):
        fastane.load_model(p)


def test_docs_name_every_mil_op():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = open(os.path.join(root, "docs", "models.md")).read()
    table = doc.split("### Every MIL op")[1].split("### Placement prediction")[0]
    missing = [k for k in sorted(ci.MIL_OPS) if f"`{k}`" not in table and not k.startswith("constexpr")]
    assert not missing, f"docs/models.md's MIL op table lacks {missing}"
    assert all(f"`{k}`" in doc for k in ci.MIL_OPS if k.startswith("constexpr"))


def _torch_nets(torch):
    """Three networks as users write them: a small classifier; a MobileNet-style stack
    (depthwise conv, ReLU6, Hardswish, SiLU, max pooling, nearest upsampling, a transposed
    conv, sigmoid); a pre-norm transformer block (LayerNorm, attention with softmax, GELU)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.shape = (1, 10, d, heads)  # literal sizes: traced shape arithmetic would not convert

        def forward(self, x):
            b, t, d, h = self.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            a = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
            x = x + self.o((a @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.ff(self.ln2(x))

    small = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    mobile = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.BatchNorm2d(16),
        nn.ReLU6(),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16),
        nn.BatchNorm2d(16),
        nn.Hardswish(),
        nn.Conv2d(16, 24, 1),
        nn.SiLU(),
        nn.MaxPool2d(2),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.ConvTranspose2d(24, 8, 2, 2),
        nn.Sigmoid(),
    )
    return {
        "small": (small, (1, 3, 16, 16)),
        "mobile": (mobile, (1, 3, 32, 32)),
        "block": (Block(), (1, 10, 32)),
    }


@pytest.mark.parametrize("name", ["small", "mobile", "block"])
def test_torch_round_trip_opt_in(tmp_path, name):
    """Opt-in (needs torch, not in the test extra; `pip install torch`): a traced torch
    network converted by coremltools, run by fastane, against torch's own float32 output."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net, shape = _torch_nets(torch)[name]
    net = net.eval()
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(net, x, check_trace=False)
        mm = ct.convert(
            traced,
            inputs=[ct.TensorType(name="x", shape=x.shape)],
            convert_to="mlprogram",
            minimum_deployment_target=ct.target.iOS17,
        )
    mm.save(str(tmp_path / "t.mlpackage"))
    m = fastane.load_model(str(tmp_path / "t.mlpackage"))
    want = net(x).detach().numpy().astype(np.float64)
    got = list(m({"x": x.numpy()}).values())[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-2 * max(np.abs(want).max(), 1.0)


@pytest.mark.parametrize("axes", [[1], [1, 3], [0, 2]])
def test_a_layer_norm_over_leading_axes_is_normalised_there(tmp_path, axes):
    """MIL layer_norm over axes that are not the trailing ones (the channel layer_norm of a
    (B, C, 1, S) tensor that Apple's ml-ane-transformers writes): the axes moved last, the
    layer normalised there as a row operation, moved back; against numpy's normalisation
    over those axes (float64), within the fp16 chain's error."""
    shape = (2, 6, 3, 5)
    inner = [shape[a] for a in axes]
    g = (RNG.random(inner) + 0.5).astype(np.float32)
    b = RNG.standard_normal(inner).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.layer_norm(x=x, axes=axes, gamma=g, beta=b, epsilon=1e-5)

    m = fastane.load_model(_save(prog, tmp_path / "ln.mlpackage", ct.target.iOS17))
    x = RNG.standard_normal(shape).astype(np.float32)
    x16 = x.astype(np.float16).astype(np.float64)
    mean = x16.mean(axis=tuple(axes), keepdims=True)
    var = ((x16 - mean) ** 2).mean(axis=tuple(axes), keepdims=True)
    keep = [slice(None) if a in axes else None for a in range(len(shape))]
    want = (x16 - mean) / np.sqrt(var + 1e-5) * g.astype(np.float64)[tuple(keep)] + b[tuple(keep)]
    got = list(m(x).values())[0].astype(np.float64)
    assert got.shape == shape and np.abs(got - want).max() < 2e-2
    layers = m.placement({next(iter(m.inputs)): shape})
    assert [lay.placement for lay in layers if lay.nodes[0].op == "layer_norm"] == ["ane"]


def test_row_ops_run_on_the_ane(tmp_path):
    """MIL softmax, layer_norm, reduce_* and instance_norm over trailing axes run as planar
    row programs (fastane.lower.rows), within the fp16 chain's error of numpy; a valid
    avg_pool runs as a depthwise convolution; a non-trailing reduction stays on the host
    with its reason."""
    g = RNG.random(8).astype(np.float32) + 0.5

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 6, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        a = mb.softmax(x=x, axis=-1)
        b = mb.layer_norm(x=a, axes=[-1], gamma=g, beta=np.full(8, 0.1, np.float32), epsilon=1e-5)
        c = mb.instance_norm(x=b, epsilon=1e-3)
        d = mb.reduce_mean(x=c, axes=[2, 3], keep_dims=True)
        e = mb.reduce_max(x=b, axes=[1], keep_dims=True)
        f = mb.avg_pool(x=b, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        return d, e, f

    m = fastane.load_model(_save(prog, tmp_path / "rows.mlpackage", ct.target.iOS17))
    layers = m.placement({next(iter(m.inputs)): (1, 4, 6, 8)})
    where = {lay.nodes[0].op: (lay.placement, lay.call, lay.reason) for lay in layers}
    assert where["softmax"][:2] == ("ane", "softmax")
    assert where["layer_norm"][0] == "ane"
    assert where["reduce_mean"][:2] == ("ane", "reduce_mean")
    assert where["reduce_max"][0] == "host" and "trailing" in where["reduce_max"][2]
    assert where["avg_pool"][:2] == ("ane", "conv2d") and "depthwise" in where["avg_pool"][2]
    x = RNG.standard_normal((1, 4, 6, 8)).astype(np.float32)
    ref, out = m.reference(x), m(x)
    for name in m.outputs:
        assert np.abs(out[name].astype(np.float64) - ref[name]).max() < 2e-2, name


def test_flexible_inputs_record_their_kind_and_default_shape(tmp_path):
    """A model description's range-shaped or enumerated input: ``Graph.flexible`` its kind and
    ``Graph.default_shapes`` its default (the description's ``shape``), in a NeuralNetwork
    and an ML Program alike; a fixed input is in neither."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    from tests.helpers.coreml import flexible

    b = NeuralNetworkBuilder([("x", datatypes.Array(3, 8, 8))], [("y", None)])
    b.add_activation("relu", "RELU", "x", "y")
    spec = b.spec
    flexible("range", (3, 8, 8))(spec)
    p = tmp_path / "nn.mlmodel"
    ct.models.MLModel(spec, skip_model_load=True).save(str(p))
    g = fastane.load_model(str(p)).graph
    assert (g.flexible, g.default_shapes) == ({"x": "range"}, {"x": (3, 8, 8)})

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 8))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.relu(x=x)

    g = fastane.load_model(
        _save(prog, tmp_path / "e.mlpackage", ct.target.iOS17, edit=flexible("enumerated", (1, 4, 8)))
    ).graph
    assert (g.flexible, g.default_shapes) == ({"x": "enumerated"}, {"x": (1, 4, 8)})
    fixed = fastane.load_model(_save(prog, tmp_path / "f.mlpackage", ct.target.iOS17)).graph
    assert (fixed.flexible, fixed.default_shapes) == ({}, {})


def test_a_shape_outside_the_declared_range_or_set_is_refused(tmp_path):
    """Core ML refuses a prediction at a shape the model does not allow; so does binding
    (``Graph.allowed_shapes``), one line: beyond a range's bounds, not among enumerated
    shapes."""
    from tests.helpers.coreml import flexible, symbolic

    @mb.program(input_specs=[mb.TensorSpec(shape=symbolic((1, 4, 8, 8)))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.relu(x=x)

    m = fastane.load_model(
        _save(prog, tmp_path / "r.mlpackage", ct.target.iOS17, edit=flexible("range", (1, 4, 8, 8)))
    )
    assert m.graph.allowed_shapes == {"x": ("range", ((1, 2), (1, 8), (1, 16), (1, 16)))}
    m.bind({"x": (1, 4, 16, 3)})
    with pytest.raises(
        ModelError, match=r"^input 'x': dimension 2 is 17, outside its declared range 1\.\.16$"
    ):
        m.bind({"x": (1, 4, 17, 8)})

    @mb.program(input_specs=[mb.TensorSpec(shape=symbolic((1, 4, 8, 8)))], opset_version=ct.target.iOS17)
    def prog2(x):
        return mb.relu(x=x)

    e = fastane.load_model(
        _save(prog2, tmp_path / "e.mlpackage", ct.target.iOS17, edit=flexible("enumerated", (1, 4, 8, 8)))
    )
    e.bind({"x": (1, 4, 16, 16)})
    with pytest.raises(ModelError, match=r"shape \(1, 4, 9, 9\) is not one of its enumerated shapes"):
        e.bind({"x": (1, 4, 9, 9)})


def test_freeze_keeps_what_the_placement_reads(tmp_path):
    """A frozen model keeps the declared precision and the flexible inputs it still has."""

    @mb.program(
        input_specs=[mb.TensorSpec(shape=(1, 4, 8)), mb.TensorSpec(shape=(1, 4, 8))],
        opset_version=ct.target.iOS17,
    )
    def prog(x, y):
        return mb.add(x=mb.relu(x=x), y=y)

    m = fastane.load_model(_save(prog, tmp_path / "f.mlpackage", ct.target.iOS17))
    frozen = m.freeze({"y": np.ones((1, 4, 8), np.float32)})
    assert list(frozen.graph.inputs) == ["x"] and frozen.graph.declared == m.graph.declared
    assert frozen.graph.file_bytes == m.graph.file_bytes > 0
