"""The model graph and the ONNX importer: shapes, folding, binding, and hostile files."""

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import FastaneError, ModelError  # noqa: E402
from fastane.model import graph as G  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def test_import_fastane_does_not_import_onnx():
    code = "import fastane, sys; assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_error_is_a_value_error():
    assert issubclass(ModelError, ValueError) and issubclass(ModelError, FastaneError)


@pytest.mark.parametrize("data", [b"", b"\x00garbage" * 10, b"\xff" * 64])
def test_garbage_files(tmp_path, data):
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    with pytest.raises(ModelError, match="m.onnx"):
        fastane.load_model(p)


def test_truncated_file(tmp_path):
    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", [2, 16])], [_vi("y", [2, 16])], [w])
    data = m.SerializeToString()
    p = tmp_path / "m.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError):
        fastane.load_model(p)


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="cannot read model"):
        fastane.load_model(tmp_path / "nope.onnx")


def test_unknown_op_is_named():
    # (Hardmax and NonZero, the ops this test used, are imported now: tests/model/test_host_ops.py)
    m = _model([helper.make_node("Unique", ["x"], ["y"], name="hm")], [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(ModelError, match="'hm'.*'Unique' is not supported"):
        fastane.load_model(m)


def test_custom_domain():
    n = helper.make_node("Foo", ["x"], ["y"], domain="com.example", name="f")
    with pytest.raises(ModelError, match="com.example.Foo"):
        fastane.load_model(_model([n], [_vi("x", [2])], [_vi("y", [2])]))


def test_huge_initializer_dims_are_refused_before_allocation():
    t = T()
    t.name, t.data_type = "w", T.FLOAT
    t.dims.extend([1 << 20, 1 << 20])  # 4 TiB declared, nothing held
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [1])], [_vi("y", [1])], [t])
    with pytest.raises(ModelError, match="beyond fastane's limit"):
        fastane.load_model(m)


def test_initializer_size_mismatch():
    t = T()
    t.name, t.data_type = "w", T.FLOAT
    t.dims.extend([1000])
    t.raw_data = b"\x00" * 8
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [1000])], [_vi("y", [1000])], [t])
    with pytest.raises(ModelError, match="holds 8 bytes"):
        fastane.load_model(m)


def test_external_data_refused():
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = T.EXTERNAL
    t.ClearField("raw_data")
    e = t.external_data.add()
    e.key, e.value = "location", "/etc/passwd"
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [4])], [_vi("y", [4])], [t])
    with pytest.raises(ModelError, match="external tensor data"):
        fastane.load_model(m)


def test_huge_reshape_and_expand_are_refused_at_bind():
    for node, extra in (
        (helper.make_node("Reshape", ["x", "s"], ["y"]), np.array([-1, 1], np.int64)),
        (helper.make_node("Expand", ["x", "s"], ["y"]), np.array([1 << 20, 1 << 10, 4], np.int64)),
    ):
        s = numpy_helper.from_array(extra, "s")
        m = fastane.load_model(_model([node], [_vi("x", [4])], [_vi("y", None)], [s]))
        x = np.ones(4, np.float32)
        if node.op_type == "Reshape":
            assert m({"x": x})["y"].shape == (4, 1)
        else:
            with pytest.raises(ModelError, match="beyond fastane's limit"):
                m({"x": x})


def test_huge_input_dims_via_symbols():
    m = fastane.load_model(
        _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", "M"])], [_vi("y", ["N", "M"])])
    )
    with pytest.raises(ModelError, match="beyond fastane's limit"):
        m.bind({"x": (1 << 20, 1 << 20)})  # shapes only: nothing allocated


def test_wrong_shapes_in_the_graph():
    w = numpy_helper.from_array(np.ones((4, 5, 3, 3), np.float32), "w")
    m = fastane.load_model(
        _model(
            [helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
            [_vi("x", [1, 3, 8, 8])],
            [_vi("y", [1, 4, 6, 6])],
            [w],
        )
    )
    with pytest.raises(ModelError, match="'c'.*3 channels"):
        m({"x": np.ones((1, 3, 8, 8), np.float32)})


def test_not_topological():
    n1 = helper.make_node("Relu", ["a"], ["y"])
    n2 = helper.make_node("Relu", ["x"], ["a"])
    with pytest.raises(ModelError, match="topological"):
        fastane.load_model(_model([n1, n2], [_vi("x", [2])], [_vi("y", [2])]))


def test_user_input_errors():
    m = fastane.load_model(
        _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])])
    )
    with pytest.raises(ModelError, match="missing input 'x'"):
        m({})
    with pytest.raises(ModelError, match=r"expected shape \(N, 3\), got \(2, 4\)"):
        m({"x": np.ones((2, 4), np.float32)})
    with pytest.raises(ModelError, match="expected dtype float32, got int64"):
        m({"x": np.ones((2, 3), np.int64)})
    with pytest.raises(ModelError, match="unknown input 'z'"):
        m({"x": np.ones((2, 3), np.float32), "z": 1})
    y = m(np.array([[-1.0, 0.5, 2.0]]))  # float64 for a float input: converted
    np.testing.assert_array_equal(y["y"], np.array([[0, 0.5, 2]], np.float16))


def test_inconsistent_symbols():
    m = fastane.load_model(
        _model(
            [helper.make_node("Add", ["a", "b"], ["y"])],
            [_vi("a", ["N"]), _vi("b", ["N"])],
            [_vi("y", ["N"])],
        )
    )
    with pytest.raises(ModelError, match="'N' = 3"):
        m({"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})


def test_shape_arithmetic_is_folded():
    # y = reshape(x, concat(shape(x)[0:1], [-1])): a Flatten written as shape arithmetic
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["t"], axis=0),
        helper.make_node("Reshape", ["x", "t"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "ax"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    m = fastane.load_model(_model(nodes, [_vi("x", ["N", 2, 3])], [_vi("y", ["N", 6])], inits))
    bound, layers = m.bind({"x": (5, 2, 3)})
    assert [n.op for n in bound.folded] == ["shape", "gather", "unsqueeze", "concat"]
    assert [n.op for n in bound.nodes] == ["reshape", "relu"]
    assert bound.types["y"] == G.TensorType(np.dtype(np.float32), (5, 6))
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(m({"x": x})["y"], np.maximum(x.reshape(5, 6), 0).astype(np.float16))


def test_ane_layers_go_through_the_public_entry_points(monkeypatch):
    # the placement calls fastane.conv2d; no other path computes a conv for the ANE
    calls = []
    real = fastane.api.conv2d

    def spy(*a, **k):
        calls.append(a[1].shape)
        return real(*a, **k)

    monkeypatch.setattr(fastane.api, "conv2d", spy)
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    m = fastane.load_model(
        _model(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
            [_vi("x", [1, 3, 8, 8])],
            [_vi("y", [1, 4, 8, 8])],
            [w],
        )
    )
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    y = m({"x": x})["y"]
    assert calls == [(4, 3, 3, 3)]
    np.testing.assert_array_equal(y, real(x, np.ones((4, 3, 3, 3)), padding=1))


def test_asymmetric_padding_and_auto_pad():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    m = fastane.load_model(
        _model(
            [helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER")],
            [_vi("x", [1, 3, 7, 7])],
            [_vi("y", None)],
            [numpy_helper.from_array(w, "w")],
        )
    )
    y = m({"x": x})["y"]
    # SAME_UPPER, stride 2 on 7: total pad 2 -> (1, 1); compare with the explicit conv
    np.testing.assert_array_equal(y, fastane.conv2d(x, w, stride=2, padding=1))
    m2 = fastane.load_model(
        _model(
            [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1, 2, 0])],
            [_vi("x", [1, 3, 7, 7])],
            [_vi("y", None)],
            [numpy_helper.from_array(w, "w")],
        )
    )
    y2 = m2({"x": x})["y"]
    xp = np.pad(x, ((0, 0), (0, 0), (0, 2), (1, 0)))
    np.testing.assert_array_equal(y2, fastane.conv2d(xp, w))


def test_mutated_files_give_model_errors_only(tmp_path):
    """Random byte flips, truncations and splices of a valid model: loading (and binding at
    the declared shapes) either works or raises ModelError -- never another exception."""
    from fastane.model import zoo

    data = bytearray(zoo.resnet(seed=0, width=4, size=8).SerializeToString())
    rng = np.random.default_rng(1234)
    outcomes = {"ok": 0, "error": 0}
    for i in range(150):
        d = bytearray(data)
        kind = i % 3
        if kind == 0:
            for p in rng.integers(0, len(d), size=int(rng.integers(1, 8))):
                d[p] = int(rng.integers(0, 256))
        elif kind == 1:
            d = d[: int(rng.integers(1, len(d)))]
        else:
            a, b = sorted(rng.integers(0, len(d), size=2))
            d = d[:a] + d[b:] + d[a:b]
        p = tmp_path / f"m{i}.onnx"
        p.write_bytes(bytes(d))
        try:
            m = fastane.load_model(p)
            shapes = {k: tuple(1 if isinstance(s, str) else s for s in t.shape) for k, t in m.inputs.items()}
            m.bind(shapes)
            outcomes["ok"] += 1
        except ModelError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def _unknown_dims_model(x_dims, y_dims):
    """``x + y``, the inputs declared with ``x_dims``, ``y_dims`` (ints, -1, names, '?', None)."""
    return fastane.load_model(
        _model(
            [helper.make_node("Add", ["x", "y"], ["z"])],
            [_vi("x", x_dims), _vi("y", y_dims)],
            [_vi("z", None)],
        )
    )


def test_minus_one_and_question_marks_are_each_their_own_unknown():
    """An input declared ``[-1, 3, '?', '?']``: the -1 and each '?' bind to any size, the
    two '?' to different ones; fixed dimensions still checked."""
    m = _unknown_dims_model([-1, 3, "?", "?"], [1])
    x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(2, 3, 5, 7) / 64
    np.testing.assert_array_equal(m({"x": x, "y": np.ones(1, np.float32)})["z"], (x + 1).astype(np.float16))
    bound, _ = m.bind({"x": (4, 3, 1, 9), "y": (1,)})
    assert bound.types["z"].shape == (4, 3, 1, 9)
    with pytest.raises(ModelError, match=r"expected shape \(x:0, 3, x:2, x:3\), got \(2, 4, 5, 7\)"):
        m.bind({"x": (2, 4, 5, 7), "y": (1,)})


@pytest.mark.parametrize("dim", [-1, "?", None], ids=["minus-one", "question-mark", "empty"])
def test_anonymous_unknowns_of_two_inputs_are_not_the_same_size(dim):
    m = _unknown_dims_model([dim, 4], [dim, 1])
    bound, _ = m.bind({"x": (3, 4), "y": (1, 1)})
    assert bound.types["z"].shape == (3, 4) and bound.symbols == {"x:0": 3, "y:0": 1}


def test_equal_named_symbols_are_one_size():
    m = _unknown_dims_model(["batch", "seq"], ["batch", 1])
    assert m.bind({"x": (2, 5), "y": (2, 1)})[0].types["z"].shape == (2, 5)
    with pytest.raises(ModelError, match=r"input 'y': dimension 0 is 'batch' = 2 elsewhere, got 3"):
        m.bind({"x": (2, 5), "y": (3, 1)})


def test_other_negative_dimensions_are_refused():
    with pytest.raises(ModelError, match="negative dimension -2"):
        _unknown_dims_model([-2, 4], [1])


def test_shape_binds_the_unknown_dimensions_on_the_command_line(tmp_path, capsys):
    """``--shape`` gives the sizes of -1 and '?' dimensions; without it the message asks
    for one."""
    from fastane.cli import main

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "t", [_vi("x", [-1, 3, "?", "?"])], [_vi("y", None)]
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["run", str(path), "--random", "--shape", "x=2x3x4x5"]) == 0
    assert main(["run", str(path), "--random"]) != 0
    assert "bind it with --shape x=Nx3xNxN" in capsys.readouterr().err
