"""Hostile ONNX nodes and names: every malformed node, attribute, operand count or name is
one ModelError line naming the node, never another exception; the
API and the CLI say so in one line."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, defs, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.cli import main  # noqa: E402
from fastane.errors import ModelError, ModelNotImplementedError, quote  # noqa: E402
from fastane.model.frontends.onnx.importer import SUPPORTED  # noqa: E402
from tests.helpers.cli import cli, one_line  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


X = _vi("x", [1, 2, 4, 4])
Y = _vi("y", None)


def _exercise(m):
    """Load ``m`` without its weights and plan it from the shapes (as ``fastane roofline``
    does), then load it and run it with a report."""
    model = fastane.load_model(m, weights=False)
    shapes = {k: tuple(1 if isinstance(d, str) else d for d in t.shape) for k, t in model.inputs.items()}
    model.report(shapes, stats_only=True)
    model = fastane.load_model(m)
    rep = model.report({k: np.ones(s, model.inputs[k].dtype) for k, s in shapes.items()})
    rep.table()
    json.dumps(rep.as_dict())


def _only_model_errors(m):
    """``_exercise(m)``: None if it works, else the ModelError's message (one short line);
    any other exception fails the test."""
    try:
        _exercise(m)
    except ModelError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)
        return str(exc)
    return None


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# ------------------------------------------------------------------ the reproducers
@pytest.mark.parametrize(
    "nodes, inits, opset, message",
    [
        (
            [helper.make_node("Cast", ["x"], ["y"], name="c")],
            (),
            17,
            "node 'c' (Cast): the required attribute 'to'",
        ),
        (
            [helper.make_node("Reshape", ["x"], ["y"], name="r")],
            (),
            1,
            "node 'r' (Reshape): has no shape attribute",
        ),
        (
            [helper.make_node("Slice", ["x"], ["y"], name="s")],
            (),
            1,
            "node 's' (Slice): the required attribute",
        ),
        (
            [
                helper.make_node("Constant", [], [], name="k", value_float=1.0),
                helper.make_node("Relu", ["x"], ["y"]),
            ],
            (),
            17,
            "node 'k' (Constant): has 0 outputs, Constant-13 takes 1",
        ),
        (
            [helper.make_node("Conv", ["x"], ["y"], name="v")],
            (),
            17,
            "node 'v' (Conv): has 1 input, Conv-11 takes 2 to 3",
        ),
        (
            [
                helper.make_node("Range", ["a", "b", "d"], ["r"], name="g"),
                helper.make_node("Add", ["x", "r"], ["y"]),
            ],
            [_const("a", np.float32(0)), _const("b", np.float32(np.inf)), _const("d", np.float32(1))],
            17,
            "node 'g' (Range): start 0.0, limit inf, delta 1.0 give no finite length",
        ),
    ],
    ids=[
        "cast-without-to",
        "reshape-1-without-shape",
        "slice-1-without-starts",
        "constant-without-output",
        "conv-one-input",
        "range-to-inf",
    ],
)
def test_reproducers_are_one_model_error(nodes, inits, opset, message):
    with pytest.raises(ModelError) as info:
        _exercise(_model(nodes, [X], [Y], inits, opset))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_output_beyond_what_fastane_computes():
    m = _model(
        [helper.make_node("Dropout", ["x"], ["y", "mask"], name="d")], [X], [Y, _vi("mask", None, T.BOOL)]
    )
    with pytest.raises(
        ModelNotImplementedError,
        match=r"node 'd' \(Dropout\): fastane computes only output 0 of Dropout, the model uses output 1 \('mask'\)",
    ):
        fastane.load_model(m)


def test_omitted_outputs_are_fine():
    ln = helper.make_node("LayerNormalization", ["x", "s"], ["y", "", ""], axis=-1)
    assert _only_model_errors(_model([ln], [X], [Y], [_const("s", np.ones(4, np.float32))])) is None
    relu = helper.make_node("Relu", ["x"], [""])
    add = helper.make_node("Add", ["x", "x"], ["y"])
    assert _only_model_errors(_model([relu, add], [X], [Y])) is None


def test_layer_norm_scale_of_the_normalised_size():
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    for scale, ok in (
        ((1, 1, 1, 4), True),
        ((4,), True),
        ((1, 2, 4, 4), False),
        ((2, 1), False),
        ((1,) * 5 + (4,), False),
    ):
        ln = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1, name="ln")
        m = fastane.load_model(_model([ln], [X], [Y], [_const("s", np.full(scale, 2, np.float32))]))
        if ok:
            assert m({"x": x})["y"].shape == x.shape
        else:
            with pytest.raises(ModelError, match=r"node 'ln' \(LayerNormalization\): input 1 of shape"):
                m({"x": x})


@pytest.mark.parametrize(
    "node",
    [
        helper.make_node("LeakyRelu", ["x"], ["y"], alpha=float("nan")),
        helper.make_node("LeakyRelu", ["x"], ["y"], alpha=1e38),
        helper.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=float("nan")),
        helper.make_node("LayerNormalization", ["x", "s"], ["y"], epsilon=-1.0),
    ],
    ids=["leaky-relu-nan", "leaky-relu-beyond-fp16", "rms-norm-nan-epsilon", "layer-norm-negative-epsilon"],
)
def test_parameters_the_ane_block_cannot_hold_stay_on_the_host(node):
    m = fastane.load_model(_model([node], [X], [Y], [_const("s", np.ones(4, np.float32))], opset=23))
    rep = m.report({"x": np.ones((1, 2, 4, 4), np.float32)})
    assert [r.placement for r in rep.layers] == ["host"]


def test_negative_pads_are_model_not_implemented():
    pads = _const("p", np.array([0, 0, -1, 0, 0, 0, 0, 0], np.int64))
    m = _model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad")], [X], [Y], [pads])
    with pytest.raises(ModelNotImplementedError, match=r"node 'pad' \(Pad\): negative pads"):
        _exercise(m)


def test_required_input_given_empty():
    m = _model([helper.make_node("Conv", ["x", ""], ["y"], name="v")], [X], [Y])
    with pytest.raises(ModelError, match=r"node 'v' \(Conv\): input 1 \(W\) is required"):
        fastane.load_model(m)


def test_wrong_attribute_types():
    cases = [
        (
            helper.make_node("Concat", ["x", "x"], ["y"], axis=[1]),
            "attribute 'axis' is INTS, Concat-13 takes INT",
        ),
        (helper.make_node("Cast", ["x"], ["y"], to="float"), "attribute 'to' is STRING, Cast-13 takes INT"),
        (
            helper.make_node("Transpose", ["x"], ["y"], perm=3),
            "attribute 'perm' is INT, Transpose-13 takes INTS",
        ),
    ]
    for node, message in cases:
        with pytest.raises(ModelError, match=message):
            fastane.load_model(_model([node], [X], [Y]))
    bad = helper.make_tensor("v", T.STRING, [1], [b"a"])
    with pytest.raises(ModelError, match="element type"):
        fastane.load_model(_model([helper.make_node("Constant", [], ["y"], value=bad)], [X], [Y]))


# ------------------------------------------------------------------ every supported op
def _schema(op, opset=17):
    try:
        return defs.get_schema(op, opset, "")
    except Exception:
        return defs.get_schema(op)


def _ins(n):
    """``n`` input names: the graph input and float constants of its shape."""
    return ["x"] + [f"c{i}" for i in range(1, n)]


def _walk_model(op, ins, attrs=None, n_out=None):
    s = _schema(op)
    n_out = max(s.min_output, 1) if n_out is None else n_out
    outs = [f"y{i}" for i in range(n_out)]
    inits = [_const(f"c{i}", np.ones((1, 2, 4, 4), np.float32)) for i in range(1, 8)]
    inits = [t for t in inits if t.name in ins]
    node = helper.make_node(op, ins, outs, name=f"n_{op}", **(attrs or {}))
    return _model([node], [X], [_vi(o, None) for o in outs] or [Y], inits)


def _variants(op):
    s = _schema(op)
    n = max(s.min_input, 1)
    yield "no-inputs", []
    yield "no-attributes", _ins(n)
    yield "extra-input", _ins(n) + ["x"]
    yield "undefined-input", _ins(n) + ["nowhere"]
    yield "empty-inputs", [""] * n


@pytest.mark.parametrize("op", SUPPORTED)
def test_every_op_gives_a_model_error_or_works(op):
    for variant, ins in _variants(op):
        msg = _only_model_errors(_walk_model(op, ins))
        if msg is not None:
            assert f"n_{op}" in msg, (variant, msg)
    msg = _only_model_errors(_walk_model(op, _ins(max(_schema(op).min_input, 1)), n_out=0))
    assert msg is not None and f"n_{op}" in msg, msg


@pytest.mark.parametrize("seed", range(3))
def test_random_nodes_give_model_errors_or_work(seed):
    """Each supported op with random constant operands and extreme attribute values (a
    seeded slice of a walk of 35,000 such nodes)."""
    rng = np.random.default_rng(seed)
    operands = [
        np.int64(1),
        np.array([1, 2], np.int64),
        np.array([-1], np.int64),
        np.float32(0.5),
        np.array([2**40], np.int64),
        np.ones((1, 2, 4, 4), np.float32),
        np.zeros((0,), np.float32),
        np.array([0, 0, 0, 0, 1, 1, 1, 1], np.int64),
        np.array(np.nan, np.float32),
        np.ones((2, 2), np.int64),
    ]
    values = {
        onnx.AttributeProto.INT: [-1, 0, 1, 2, 2**40],
        onnx.AttributeProto.INTS: [[], [-1], [0, 0], [1, 1, 1, 1], [2**40, 1]],
        onnx.AttributeProto.FLOAT: [float("nan"), float("inf"), -1.0, 0.0, 1e38],
        onnx.AttributeProto.STRING: ["", "bogus"],
    }
    for op in SUPPORTED:
        s = _schema(op)
        lo = max(s.min_input, 1)
        n = int(rng.integers(lo, max(min(s.max_input, 5), lo) + 1))
        outs = [f"y{i}" for i in range(max(s.min_output, 1))]
        node = helper.make_node(op, ["x"] + [f"k{i}" for i in range(1, n)], outs, name=f"n_{op}")
        for k, spec in s.attributes.items():
            choices = values.get(int(spec.type))
            if choices and rng.random() < 0.3:
                v = choices[int(rng.integers(len(choices)))]
                node.attribute.append(helper.make_attribute(k, v, attr_type=int(spec.type)))
        inits = [_const(f"k{i}", operands[int(rng.integers(len(operands)))]) for i in range(1, n)]
        shape = [[1, 2, 4, 4], [2, 3], [5], []][int(rng.integers(4))]
        _only_model_errors(_model([node], [_vi("x", shape)], [_vi(o, None) for o in outs], inits))


_WRONG = {
    onnx.AttributeProto.INT: "s",
    onnx.AttributeProto.FLOAT: [1, 2],
    onnx.AttributeProto.INTS: 1,
    onnx.AttributeProto.FLOATS: "s",
    onnx.AttributeProto.STRING: 7,
    onnx.AttributeProto.TENSOR: 1.5,
}


@pytest.mark.parametrize("op", SUPPORTED)
def test_every_attribute_of_a_wrong_type_is_named(op):
    s = _schema(op)
    ins = _ins(max(s.min_input, 1))
    for k, spec in s.attributes.items():
        wrong = _WRONG.get(int(spec.type))
        if wrong is None:
            continue
        with pytest.raises(ModelError, match=f"attribute '{k}' is"):
            fastane.load_model(_walk_model(op, ins, {k: wrong}))


# ------------------------------------------------------------------ names
def _renamed(tmp_path, old: bytes, new: bytes, node):
    m = _model([node], [X], [Y])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString().replace(old, new))
    return p


def test_names_that_are_not_utf8(tmp_path, capsys):
    p = _renamed(tmp_path, b"NODEA", b"N\xff\xfe\x01A", helper.make_node("Relu", ["x"], ["y"], name="NODEA"))
    model = fastane.load_model(p)
    rep = model.report({"x": np.ones((1, 2, 4, 4), np.float32)})
    assert "N\\xff\\xfe\\x01A" in rep.table() and "\x01" not in rep.table()
    assert json.loads(rep.to_json())["layers"][0]["name"] == "N\\xff\\xfe\x01A"
    for extra in (["--report"], ["--json"]):
        assert main(["run", str(p), "--random", *extra]) == 0
    assert main(["roofline", str(p), "--json"]) == 0
    capsys.readouterr()
    bad = _renamed(tmp_path, b"NODEA", b"N\xff\n\x1b[", helper.make_node("Cast", ["x"], ["y"], name="NODEA"))
    assert main(["run", str(bad), "--random", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "N\\xff\\n\\x1b[" in err, err


def test_input_and_dimension_names_with_control_characters(tmp_path, capsys):
    x = _vi("XINP", ["DIMP", 3])
    w = _const("w", np.ones(3, np.float32))
    m = _model([helper.make_node("Add", ["XINP", "w"], ["y"])], [x], [Y], [w])
    for token in (b"XINP", b"DIMP"):
        p = tmp_path / "m.onnx"
        p.write_bytes(m.SerializeToString().replace(token, b"\xff\n\x1b" + token[3:]))
        assert main(["run", str(p), "--random", "--json"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "\x1b" not in err and "\\xff\\n\\x1bP" in err, err
    # the input's name as the messages print it binds it
    assert main(["run", str(p), "--random", "--shape", "XINP=2x3"]) == 0
    p.write_bytes(m.SerializeToString().replace(b"XINP", b"\xff\n\x1bP"))
    assert main(["run", str(p), "--random", "--shape", "\\xff\\n\\x1bP=2x3", "--report"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "random float32[2x3]" in err


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--report", "--compute-units", "ALL"],
        ["--first-divergence"],
        ["--json", "--compute-units", "ALL"],
    ],
)
def test_control_characters_never_reach_the_terminal(tmp_path, capsys, extra):
    relu = helper.make_node("Relu", ["x"], ["o\x1b[2J"], name="n\x1b]0;title\x07")
    p = tmp_path / "m.onnx"
    onnx.save(_model([relu], [X], [_vi("o\x1b[2J", None)]), str(p))
    assert main(["run", str(p), "--random", *extra]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert ("\\u001b" if "--json" in extra else "\\x1b" if "--first-divergence" not in extra else "") in out


def test_long_names_are_shortened():
    name = "n" * 4000
    with pytest.raises(ModelError) as info:
        fastane.load_model(_model([helper.make_node("Cast", ["x"], ["y"], name=name)], [X], [Y]))
    assert len(str(info.value)) < 200 and "(4000 characters)" in str(info.value)
    for node in (
        helper.make_node("Einsum", ["x"], ["y"], equation="\xff" * 2000 + "->->"),
        helper.make_node("Pad", ["x", "p"], ["y"], mode="\x00" * 4000),
        helper.make_node(
            "Resize", ["x", "", "s"], ["y"], mode="nearest", coordinate_transformation_mode="c" * 4000
        ),
    ):
        pads = _const("p", np.zeros(8, np.int64))
        scales = _const("s", np.ones(4, np.float32))
        with pytest.raises(ModelError) as info:
            _exercise(_model([node], [X], [Y], [pads, scales], opset=18))
        assert len(str(info.value)) < 300 and "characters)" in str(info.value), str(info.value)
    many = onnx.TensorProto(name="w", data_type=T.FLOAT, dims=[1] * 1000, float_data=[1.0, 2.0])
    with pytest.raises(ModelError, match=r"shape \(1, 1, 1.*MAX_RANK") as info:
        fastane.load_model(_model([helper.make_node("Add", ["x", "w"], ["y"])], [X], [Y], [many]))
    assert len(str(info.value)) < 300, str(info.value)


def test_quote():
    assert quote("abc") == "'abc'"
    assert quote("a\nb\x1b", marks=False) == "a\\nb\\x1b"
    assert quote(b"\xffz") == "'\\xffz'"
    assert quote("x" * 100, 10) == "'xxxxxxxxxx...(100 characters)'"


# ------------------------------------------------------------------ the API and the CLI
def test_api_bad_inputs_are_model_errors():
    model = fastane.load_model(_model([helper.make_node("Relu", ["x"], ["y"])], [X], [Y]))
    with pytest.raises(ModelError, match="NUL byte"):
        fastane.load_model("a\0b.onnx")
    with pytest.raises(ModelError, match="input 'x': expected an array or a shape"):
        model.report({"x": 1.5}, stats_only=True)
    with pytest.raises(ModelError, match="input 'x': not an array"):
        model({"x": [[1.0], [1.0, 2.0]]})
    with pytest.raises(ModelError, match="input 'x': expected dtype float32, got object"):
        model({"x": None})


@pytest.mark.parametrize(
    "command",
    [["run", "--random"], ["run", "--random", "--json"], ["run", "--random", "--report"], ["roofline"]],
)
def test_cli_errors_are_one_line(tmp_path, capsys, command):
    bad = [
        _model([helper.make_node("Cast", ["x"], ["y"], name="c")], [X], [Y]),
        _model([helper.make_node("Conv", ["x"], ["y"], name="c")], [X], [Y]),
        _model(
            [
                helper.make_node("Relu", ["x"], ["y"], name="c" * 5000, bogus=1),
                helper.make_node("Unknown", ["y"], ["z"]),
            ],
            [X],
            [Y],
        ),
    ]
    for i, m in enumerate(bad):
        p = tmp_path / f"bad{i}.onnx"
        onnx.save(m, str(p))
        rc = main([command[0], str(p), *command[1:]])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith(f"fastane {command[0]}: error: "), err
        assert len(err) < 500 and "Traceback" not in err


def test_string_attribute_not_utf8_escaped_as_names_are(tmp_path):
    """A string attribute that is not UTF-8 is decoded as names are (\\xNN escapes), not
    with U+FFFD replacement characters."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="MODEA")
    s = _const("s", np.ones(4, np.float32))
    m = _model([node], [X], [Y], [s])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString().replace(b"MODEA", b"M\xff\xfeDA"))
    with pytest.raises(ModelError) as e:
        fastane.load_model(p)
    assert "M\\xff\\xfeDA" in str(e.value) and "\ufffd" not in str(e.value), str(e.value)


def test_expand_to_64_dimensions_is_one_line():
    """Found by the model-file campaign (seed 0, cases 77822 and 85220: a weight matrix of 64
    values given to Expand as its shape): numpy's broadcast raised RuntimeError beyond 32
    dimensions."""
    shape = _const("s", np.ones(64, np.int64))
    with pytest.raises(ModelError, match=r"64 dimensions, .*MAX_RANK"):
        _exercise(_model([helper.make_node("Expand", ["x", "s"], ["y"], name="e")], [X], [Y], [shape]))


@pytest.mark.parametrize(
    "node, inits, message",
    [
        # before: a list of 10^12 sizes built before any check (hung)
        (
            helper.make_node("Split", ["x"], ["y"], num_outputs=10**12, name="n"),
            [],
            "node 'n' (Split): num_outputs = 1000000000000, the node has 1 outputs",
        ),
        (
            helper.make_node("Split", ["x", "s"], ["y"], name="n"),
            [_const("s", np.ones(10**7, np.int64))],
            "node 'n' (Split): 10000000 split sizes for 1 outputs",
        ),
        (
            helper.make_node("Tile", ["x", "r"], ["y"], name="n"),
            [_const("r", np.ones(10**7, np.int64))],
            "node 'n' (Tile): repeats has 10000000 values, must be 1 non-negative integers",
        ),
        (
            helper.make_node("Pad", ["x", "p"], ["y"], name="n"),
            [_const("p", np.ones(10**7, np.int64))],
            "node 'n' (Pad): pads has 10000000 values for 1 axes",
        ),
        (
            helper.make_node("Reshape", ["x", "s"], ["y"], name="n"),
            [_const("s", np.ones(10**7, np.int64))],
            "node 'n' (Reshape): target shape: 1.0e07 dimensions, beyond fastane's limit for "
            "dimensions per tensor (MAX_RANK = 2^5)",
        ),
    ],
    ids=["split-num-outputs", "split-sizes", "tile", "pad", "reshape"],
)
def test_long_constants_are_counted_before_listing(tmp_path, node, inits, message):
    """A constant of 10^7 values turned into a Python list before its length was checked
    took seconds and put the whole list in the message (10^12 parts: a hang)."""
    p = str(tmp_path / "m.onnx")
    onnx.save(_model([node], [_vi("x", [4])], [Y], inits), p)
    rc, err = cli("run", p, "--random", timeout=30)
    assert rc == 2 and one_line(err) == "fastane run: error: " + message


def test_internal_errors_are_one_line(tmp_path, capsys, monkeypatch):
    """Before: an exception outside the commands' lists (a MemoryError, a bug) printed a
    full traceback; now one line and exit status 3 (2 stays the model's or the command
    line's error), the traceback with FASTANE_TRACEBACK=1."""
    import fastane.model

    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(fastane.model, "load_model", boom)
    monkeypatch.delenv("FASTANE_TRACEBACK", raising=False)
    p = str(tmp_path / "m.onnx")
    assert main(["run", p, "--random"]) == 3
    assert capsys.readouterr().err == "fastane run: internal error: RuntimeError: boom\n"
    monkeypatch.setenv("FASTANE_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["run", p, "--random"])


def test_unused_outputs_one_rule():
    """The host ops' converter and the others' name omitted outputs and refuse a later one
    used the same way (they raised different exception types and messages)."""
    from fastane.model.frontends.onnx.importer import output_names

    where = "node 't' (TopK)"
    assert output_names(["", "i"], "t", where, "TopK", 2) == ["fastane::t:unused0", "i"]
    assert output_names(["y"], "t", where, "TopK", 2) == ["y"]
    assert output_names(["y"], "t", where, "TopK", 2, keep=True) == ["y", "fastane::t:unused1"]
    with pytest.raises(
        ModelNotImplementedError,
        match=r"^node 't' \(TopK\): fastane computes only outputs 0 to 1 of TopK, the model uses output 2 \('z'\)$",
    ):
        output_names(["y", "", "z"], "t", where, "TopK", 2, keep=True)
    m = _model(
        [helper.make_node("TopK", ["x", "k"], ["", "i"], name="t")],
        [_vi("x", [4])],
        [_vi("i", None, T.INT64)],
        [_const("k", np.array([2], np.int64))],
    )
    out = fastane.load_model(m)({"x": np.array([1, 3, 2, 0], np.float32)})
    assert out["i"].tolist() == [1, 2]


@pytest.mark.parametrize("opset", [-5, 0, 2**31, 2**40, 2**63 - 1])
def test_opset_beyond_int32_is_not_a_type_error(opset):
    """onnx's schema lookup raises TypeError for an opset beyond int32 (SchemaError for one
    it does not know): the schema check takes both."""
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [X], [Y], opset=opset)
    try:
        fastane.load_model(m)
    except ModelError:
        pass
