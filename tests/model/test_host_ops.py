"""The host-only ops (no ANE lowering in fastane) in ONNX models: hostile shapes refused at
bind before anything is allocated, run-time indices bounds-checked, the placement's
reason, integer outputs keeping their dtype, and a user-style model (attention by Einsum,
a TopK head, a Resize) that loads and runs against onnxruntime.  The node-by-node
numerics are ONNX's own backend suite (test_onnx_backend.py)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError, ModelNotImplementedError  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=19):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return fastane.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def _vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _i64(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


def _f32(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


BIG = 1 << 20


@pytest.mark.parametrize(
    "node,inits,shape,match",
    [
        (helper.make_node("Tile", ["x", "r"], ["y"]), [_i64("r", [BIG, BIG])], (4, 4), "limit"),
        (helper.make_node("Tile", ["x", "r"], ["y"]), [_i64("r", [2, -1])], (4, 4), "non-negative"),
        (helper.make_node("Tile", ["x", "r"], ["y"]), [_i64("r", [2])], (4, 4), "repeats"),
        (
            helper.make_node("OneHot", ["i", "d", "v"], ["y"]),
            [_i64("i", [[1, 2]]), _i64("d", 1 << 40), _f32("v", [0, 1])],
            (4, 4),
            "limit",
        ),
        (
            helper.make_node("Resize", ["x", "", "s"], ["y"]),
            [_f32("s", [1e6, 1e6])],
            (4, 4),
            "limit",
        ),
        (helper.make_node("Resize", ["x", "", "s"], ["y"]), [_f32("s", [1, -2])], (4, 4), "finite and > 0"),
        (helper.make_node("Resize", ["x", "", "s"], ["y"]), [_f32("s", [1, np.inf])], (4, 4), "finite"),
        (
            helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,cd->abcd"),
            [],
            (1 << 14, 1 << 14),
            "limit",
        ),
        (
            helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,cd->"),
            [],
            (1 << 14, 1 << 14),
            "multiply-adds",
        ),
        (helper.make_node("Einsum", ["x"], ["y"], equation="abc->a"), [], (4, 4), "rank"),
        (helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,ab->c"), [], (4, 4), "invalid"),
        (helper.make_node("Einsum", ["x", "x"], ["y"], equation="ab,bc"), [], (4, 5), "label 'b'"),
        (helper.make_node("TopK", ["x", "k"], ["v", "i"]), [_i64("k", [9])], (4, 4), "outside"),
        (helper.make_node("CumSum", ["x", "a"], ["y"]), [_i64("a", 5)], (4, 4), "out of range"),
        (helper.make_node("Trilu", ["x"], ["y"]), [], (4,), "at least 2"),
        (helper.make_node("Split", ["x", "s"], ["a", "b"]), [_i64("s", [1, 2])], (4, 4), "do not cover"),
        (
            helper.make_node("GatherND", ["x", "i"], ["y"]),
            [_i64("i", np.zeros((2, 3), np.int64))],
            (4, 4),
            "last dim",
        ),
        (
            helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
            [_i64("i", [[0], [1]]), _f32("u", np.zeros((2, 3)))],
            (4, 4),
            "updates",
        ),
    ],
    ids=lambda v: getattr(v, "op_type", None) or "",
)
def test_hostile_shapes_refused_at_bind(node, inits, shape, match):
    outs = [_vi(o, None) for o in node.output]
    m = _model([node], [_vi("x", list(shape))], outs, inits)
    with pytest.raises(ModelError, match=match):
        m.bind({"x": shape})


def test_data_dependent_k_is_refused():
    m = _model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"])],
        [_vi("x", [4, 4]), _vi("k", [1], T.INT64)],
        [_vi("v", None), _vi("i", None)],
    )
    with pytest.raises(ModelError, match="K .*constant.*data-dependent"):
        m.bind({"x": (4, 4), "k": (1,)})


def test_nonzero_of_a_run_time_tensor_is_refused_and_of_a_constant_folded():
    """NonZero's output shape is its input's count of nonzero values: refused at bind for
    a model input, folded for a constant."""
    m = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", [2, 3])], [_vi("y", None, T.INT64)])
    with pytest.raises(ModelNotImplementedError, match="NonZero's output shape .* known only at run time"):
        m.bind({"x": (2, 3)})
    m = _model(
        [helper.make_node("NonZero", ["c"], ["i"]), helper.make_node("Cast", ["i"], ["f"], to=T.FLOAT)]
        + [
            helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
            helper.make_node("Add", ["x", "s"], ["y"]),
        ],
        [_vi("x", [1])],
        [_vi("y", None)],
        [_f32("c", [[0, 2, 0], [1, 0, 3]])],
    )
    bound, _ = m.bind({"x": (1,)})
    assert [n.op for n in bound.folded] == ["nonzero", "cast", "reduce_sum"]
    assert bound.consts["i"].tolist() == [[0, 1, 1], [1, 0, 2]]
    assert m({"x": np.zeros(1, np.float32)})["y"].tolist() == [5.0]


def test_an_attention_mask_from_the_input_shape_folds_at_bind():
    """The exporters' mask: ``Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape``
    of the input's (known) shape is a constant at bind, for each bound sequence length."""
    m = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
            helper.make_node("Concat", ["n1", "n1"], ["ss"], axis=0),
            helper.make_node(
                "ConstantOfShape", ["ss"], ["ones"], value=numpy_helper.from_array(np.array([1], np.int64))
            ),
            helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
            helper.make_node("Cast", ["tri"], ["keep"], to=T.BOOL),
            helper.make_node("Where", ["keep", "zero", "ninf"], ["mask"]),
            helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["x", "xt"], ["sc"]),
            helper.make_node("Add", ["sc", "mask"], ["y"]),
        ],
        [_vi("x", [1, "seq", 4])],
        [_vi("y", None)],
        [_i64("one", 1), _i64("ax", [0]), _f32("zero", 0.0), _f32("ninf", -1e4)],
    )
    for seq in (3, 5):
        bound, _ = m.bind({"x": (1, seq, 4)})
        folded = [n.op for n in bound.folded]
        assert "expand" in folded and [n.op for n in bound.nodes] == ["transpose", "matmul", "add"], folded
        mask = bound.consts["mask"]
        np.testing.assert_array_equal(mask, np.where(np.tril(np.ones((seq, seq))) > 0, 0.0, -1e4))


def test_antialias_is_not_implemented():
    m = _model(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)],
        [_vi("x", [1, 1, 4, 4])],
        [_vi("y", None)],
        [_f32("s", [1, 1, 0.5, 0.5])],
    )
    with pytest.raises(ModelNotImplementedError, match="antialias") as e:
        m.bind({"x": (1, 1, 4, 4)})
    assert isinstance(e.value, NotImplementedError) and isinstance(e.value, ModelError)


@pytest.mark.parametrize(
    "op,idx",
    [
        ("GatherElements", [[0, 4]]),
        ("GatherND", [[0, -5]]),
        ("ScatterElements", [[4, 0]]),
        ("ScatterND", [[-5, 0]]),
    ],
)
def test_run_time_indices_are_bounds_checked(op, idx):
    ins = ["x", "i"] + (["u"] if op.startswith("Scatter") else [])
    i = np.array(idx, np.int64)
    u = np.ones(i.shape if op == "ScatterElements" else i.shape[:-1], np.float32)
    m = _model(
        [helper.make_node(op, ins, ["y"])],
        [_vi("x", [4, 4]), _vi("i", list(i.shape), T.INT64)]
        + ([_vi("u", list(u.shape))] if len(ins) > 2 else []),
        [_vi("y", None)],
    )
    feeds = {"x": np.zeros((4, 4), np.float32), "i": i}
    if len(ins) > 2:
        feeds["u"] = u
    with pytest.raises(ModelError, match="out of range"):
        m(feeds)


def test_placement_reason_and_integer_outputs():
    m = _model(
        [
            helper.make_node("Einsum", ["x", "x"], ["e"], equation="ij,kj->ik"),
            helper.make_node("ArgMax", ["e"], ["a"], axis=1, keepdims=0),
            helper.make_node("TopK", ["e", "k"], ["v", "i"], axis=-1),
        ],
        [_vi("x", [3, 5])],
        [_vi("a", None, T.INT64), _vi("v", None), _vi("i", None, T.INT64)],
        [_i64("k", [2])],
    )
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    bound, layers = m.bind({"x": x.shape})
    assert [(lay.op, lay.placement) for lay in layers] == [
        ("Einsum", "host"),
        ("ArgMax", "host"),
        ("TopK", "host"),
    ]
    assert all("no ANE lowering in fastane" in lay.reason for lay in layers)
    out = m({"x": x})
    e = x.astype(np.float64) @ x.T.astype(np.float64)
    assert out["a"].dtype == np.int64 and out["i"].dtype == np.int64
    np.testing.assert_array_equal(out["a"], e.argmax(1))
    np.testing.assert_array_equal(out["i"], np.argsort(-e, 1, kind="stable")[:, :2])
    np.testing.assert_allclose(out["v"], np.sort(e, 1)[:, ::-1][:, :2], rtol=2**-10)
    rep = m.report({"x": x})
    assert [r.placement for r in rep.layers] == ["host"] * 3


def test_user_style_model_against_onnxruntime():
    """Attention scores by Einsum (ANE-free), a Conv on the ANE, nearest and linear Resize,
    CumSum, a TopK head: loads, runs, and agrees with onnxruntime float32."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c", "", "s"], ["r"], mode="nearest"),
        helper.make_node(
            "Resize", ["r", "", "", "z"], ["q"], mode="linear", coordinate_transformation_mode="align_corners"
        ),
        helper.make_node("Reshape", ["q", "sh"], ["f"]),
        helper.make_node("Einsum", ["f", "f"], ["a"], equation="bcn,bdn->bcd"),
        helper.make_node("CumSum", ["a", "ax"], ["cs"]),
        helper.make_node("TopK", ["cs", "k"], ["v", "i"]),
    ]
    inits = [
        _f32("w", w),
        _f32("s", [1, 1, 2, 2]),
        _i64("z", [1, 4, 5, 7]),
        _i64("sh", [1, 4, 35]),
        _i64("ax", 2),
        _i64("k", [2]),
    ]
    g = helper.make_graph(
        nodes, "u", [_vi("x", [1, 2, 3, 4])], [_vi("v", None), _vi("i", None, T.INT64)], inits
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    proto.ir_version = 9
    m = fastane.load_model(proto)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    out = m({"x": x})
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    v, i = sess.run(None, {"x": x})
    scale = np.abs(v).max()
    assert np.abs(out["v"].astype(np.float64) - v).max() <= 2e-2 * scale
    assert out["i"].dtype == np.int64 and i.shape == out["i"].shape
    assert (out["i"] == i).mean() >= 0.75  # near-ties may swap after the ANE's fp16 conv
    bound, layers = m.bind({"x": x.shape})
    assert {lay.op: lay.placement for lay in layers}["Conv"] == "ane"


# ------------------------------------------------------------------ random nodes
_FZ = np.random.default_rng(1)


def _fz_int(lo, hi):
    return int(_FZ.integers(lo, hi))


def _fz_shape():
    return [_fz_int(0, 4) for _ in range(_fz_int(0, 4))]


def _fz_nodes():
    rng, rint, rshape = _FZ, _fz_int, _fz_shape
    a = rint(-4, 4)
    return [
        (
            "Einsum",
            {
                "equation": rng.choice(
                    [
                        "ij,jk->ik",
                        "ii->i",
                        "...ij->...ji",
                        "ij",
                        "i,i",
                        "ab,b->a",
                        "a...,a->...",
                        "ij,jk",
                        "->",
                        "i->",
                        "I->i",
                    ]
                )
            },
            1,
            [],
        ),
        ("TopK", {"axis": a, "largest": rint(0, 2)}, 2, [("k", np.array([rint(-1, 5)], np.int64))]),
        ("ArgMax", {"axis": a, "keepdims": rint(0, 2), "select_last_index": rint(0, 2)}, 1, []),
        ("Hardmax", {"axis": a}, 1, []),
        ("CumSum", {"exclusive": rint(0, 2), "reverse": rint(0, 2)}, 1, [("ax", np.array(a, np.int64))]),
        ("Tile", {}, 1, [("r", rng.integers(-1, 4, rint(0, 4)).astype(np.int64))]),
        ("Trilu", {"upper": rint(0, 2)}, 1, [("k", np.array(rint(-5, 5), np.int64))]),
        (
            "OneHot",
            {"axis": a},
            1,
            [("d", np.array(rint(-2, 6), np.int64)), ("v", np.array([0, 1], np.float32))],
        ),
        ("GatherND", {"batch_dims": rint(0, 3)}, 1, [("i", rng.integers(-4, 4, rshape()).astype(np.int64))]),
        ("GatherElements", {"axis": a}, 1, [("i", rng.integers(-4, 4, rshape()).astype(np.int64))]),
        (
            "ScatterND",
            {"reduction": rng.choice(["none", "add", "mul", "max", "min", "bad"])},
            1,
            [
                ("i", rng.integers(-4, 4, rshape()).astype(np.int64)),
                ("u", rng.standard_normal(rshape()).astype(np.float32)),
            ],
        ),
        (
            "ScatterElements",
            {"axis": a, "reduction": rng.choice(["none", "add", "mul"])},
            1,
            [
                ("i", rng.integers(-4, 4, rshape()).astype(np.int64)),
                ("u", rng.standard_normal(rshape()).astype(np.float32)),
            ],
        ),
        ("Split", {"axis": a}, rint(1, 4), [("s", rng.integers(-1, 4, rint(0, 4)).astype(np.int64))]),
        ("DepthToSpace", {"blocksize": rint(0, 3), "mode": rng.choice(["DCR", "CRD", "X"])}, 1, []),
        ("SpaceToDepth", {"blocksize": rint(0, 3)}, 1, []),
        (
            "Resize",
            {
                "mode": rng.choice(["nearest", "linear", "cubic"]),
                "coordinate_transformation_mode": rng.choice(
                    [
                        "half_pixel",
                        "align_corners",
                        "asymmetric",
                        "tf_crop_and_resize",
                        "pytorch_half_pixel",
                        "half_pixel_symmetric",
                    ]
                ),
                "nearest_mode": rng.choice(["floor", "ceil", "round_prefer_ceil"]),
                "exclude_outside": rint(0, 2),
            },
            1,
            [
                ("roi", rng.random(rint(0, 8)).astype(np.float32)),
                ("sc", (rng.random(rint(0, 4)) * 3).astype(np.float32)),
            ]
            if rng.random() < 0.5
            else [
                ("roi", np.zeros(0, np.float32)),
                ("", None),
                ("sz", rng.integers(0, 6, rint(0, 4)).astype(np.int64)),
            ],
        ),
        ("Mod", {"fmod": rint(0, 2)}, 1, [("b", rng.standard_normal(rshape()).astype(np.float32))]),
    ]


def test_random_host_op_nodes_run_or_raise_model_errors():
    """400 random nodes of the host ops (random shapes, attributes, constant operands,
    some hostile): each runs or raises ModelError / NotImplementedError, nothing else
    (3000 more, run once while developing, found nothing else either)."""
    rng, rint, rshape = _FZ, _fz_int, _fz_shape
    ran = 0
    for _ in range(400):
        cands = _fz_nodes()
        op, attrs, nout, extra = cands[rint(0, len(cands))]
        shape = rshape()
        inits, ins = [], ["x"]
        for n, v in extra:
            if v is None:
                ins.append("")
                continue
            inits.append(numpy_helper.from_array(v, n))
            ins.append(n)
        if op == "Einsum":
            ins = ["x"] * (attrs["equation"].split("->")[0].count(",") + 1)
        outs = [f"y{i}" for i in range(nout)]
        try:
            m = _model(
                [helper.make_node(op, ins, outs, **attrs)],
                [_vi("x", shape)],
                [_vi(o, None) for o in outs],
                inits,
            )
            with np.errstate(all="ignore"):
                m({"x": rng.standard_normal(shape).astype(np.float32)})
            ran += 1
        except (ModelError, NotImplementedError):
            pass
    assert ran > 40  # the cases are not all refused


def test_layer_norm_with_mean_and_inv_std_dev_runs_on_the_host_with_the_reason():
    """LayerNormalization asking for its Mean and InvStdDev outputs runs on the host (the
    ANE's chain writes only the normalised rows); with Y alone it stays on the ANE."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 8)) * 3 + 1).astype(np.float32)
    s, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(b, "b")]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1)
    m = _model([node], [_vi("x", [2, 3, 8])], [_vi("y", None), _vi("mean", None), _vi("inv", None)], inits)
    _, layers = m.bind({"x": x.shape})
    assert [lay.placement for lay in layers] == ["host"] and "Mean and InvStdDev" in layers[0].reason
    out = m({"x": x})
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    assert out["mean"].shape == out["inv"].shape == (2, 3, 1)
    np.testing.assert_allclose(out["mean"], mean, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(out["inv"], inv, rtol=1e-3)
    np.testing.assert_allclose(out["y"], (x64 - mean) * inv * s + b, rtol=1e-3, atol=1e-3)
    only_y = _model(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
        [_vi("x", [2, 3, 8])],
        [_vi("y", None)],
        inits,
    )
    assert [lay.placement for lay in only_y.bind({"x": x.shape})[1]] == ["ane"]


def test_layer_norm_stash_type_other_than_float32_is_refused():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], stash_type=0)
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "s")]
    with pytest.raises(ModelError, match="stash_type"):
        _model([node], [_vi("x", [1, 4])], [_vi("y", None)], inits).bind({"x": (1, 4)})


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1]),
        dict(kernel_shape=[3, 3], pads=[0, 1, 2, 0], count_include_pad=1),  # asymmetric
    ],
)
@pytest.mark.filterwarnings("ignore::fastane.errors.SaturationWarning")  # the inf input
def test_average_pool_is_a_depthwise_convolution_on_the_ane(attrs):
    """An AveragePool whose divisor is the whole window runs on the ANE as a depthwise
    convolution with weights fp16(1 / window): bit for bit the slow reference's conv."""
    from tests.helpers.reference import ref_conv2d

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((1, 3, 9, 10)) * 4).astype(np.float32)
    x[0, 0, 0, :4] = [60000, -60000, 1e-6, np.inf]  # saturation, subnormal products, inf
    m = _model(
        [helper.make_node("AveragePool", ["x"], ["y"], **attrs)], [_vi("x", [1, 3, 9, 10])], [_vi("y", None)]
    )
    _, layers = m.bind({"x": x.shape})
    assert [lay.placement for lay in layers] == ["ane"] and "fp16(1/" in layers[0].reason
    k = attrs["kernel_shape"]
    w16 = np.full((3, 1, *k), 1 / np.prod(k), np.float16)
    p = attrs.get("pads", [0] * 4)
    want = ref_conv2d(
        x.astype(np.float16),
        w16,
        stride=tuple(attrs.get("strides", [1, 1])),
        padding=((p[0], p[2]), (p[1], p[3])),
        dilation=tuple(attrs.get("dilations", [1, 1])),
        groups=3,
    )
    got = m({"x": x})["y"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.astype(np.float16).view(np.uint16))


def test_average_pool_not_counting_the_padding_stays_on_the_host():
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    _, layers = _model([node], [_vi("x", [1, 2, 5, 5])], [_vi("y", None)]).bind({"x": (1, 2, 5, 5)})
    assert [lay.placement for lay in layers] == ["host"] and "divisor changes at the border" in layers[
        0
    ].reason


def test_norm_nodes_keep_their_names():
    """LayerNormalization and RMSNormalization nodes keep the model's names (the report
    names layers by them)."""
    inits = [numpy_helper.from_array(np.ones(8, np.float32), "s")]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln_a"),
        helper.make_node("RMSNormalization", ["y", "s"], ["z"], name="rms_b"),
        helper.make_node("LayerNormalization", ["z", "s"], ["w"], name="ln_c"),
    ]
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("w", None)], inits, opset=23)
    assert [n.name for n in m.graph.nodes] == ["ln_a", "rms_b", "ln_c"]


@pytest.mark.parametrize("zp_shape", [(3,), (3, 1)], ids=["1-D", "M x 1"])
def test_matmul_integer_per_row_zero_points(zp_shape):
    """MatMulInteger's zero point of A one a row (ONNX's spec: M values, or M x 1),
    exactly; onnx.reference subtracts a 1-D one along K instead."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    b = rng.integers(-128, 128, (5, 2)).astype(np.int8)
    zp = np.array([0, 200, 17], np.uint8).reshape(zp_shape)
    m = _model(
        [helper.make_node("MatMulInteger", ["a", "b", "z"], ["y"])],
        [_vi("a", [3, 5], T.UINT8)],
        [_vi("y", None, T.INT32)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(zp, "z")],
    )
    want = (a.astype(np.int64) - zp.reshape(3, 1)) @ b.astype(np.int64)
    y = m({"a": a})["y"]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want)


def _recurrent(op, x_shape, h, lens=None, **attrs):
    """A one-node LSTM/GRU/RNN model on input ``x`` with random weights and biases."""
    rng = np.random.default_rng(5)
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    inits = [
        _f32(n, rng.uniform(-0.6, 0.6, s))
        for n, s in (("W", (nd, g * h, x_shape[-1])), ("R", (nd, g * h, h)))
    ]
    inits += [_f32("B", rng.uniform(-0.6, 0.6, (nd, 2 * g * h)))]
    ins = ["x", "W", "R", "B"]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.asarray(lens, np.int32), "L"))
        ins.append("L")
    outs = ["y", "yh"]
    node = helper.make_node(op, ins, outs, hidden_size=h, **attrs)
    return _model([node], [_vi("x", list(x_shape))], [_vi(o, None) for o in outs], inits, opset=22)


def test_rnn_clip_bounds_the_activations_inputs():
    """``clip`` bounds the inputs of the activations (onnx.reference ignores it): one step
    of RNN is ``tanh(clip(x W^T + Wb + Rb))``."""
    x = np.random.default_rng(6).uniform(-3, 3, (1, 2, 3)).astype(np.float32)
    m = _recurrent("RNN", x.shape, 4, clip=0.5)
    c = m.graph.consts
    want = np.tanh(np.clip(x[0] @ c["W"][0].T + c["B"][0, :4] + c["B"][0, 4:], -0.5, 0.5))
    got = m.reference({"x": x})
    np.testing.assert_allclose(got["y"][0, 0], want, rtol=1e-6)
    np.testing.assert_allclose(got["yh"][0], want, rtol=1e-6)
    assert np.abs(np.arctanh(got["y"])).max() <= 0.5 + 1e-6


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lens_stop_each_sequence_at_its_length(op, direction):
    """With sequence lengths, each batch element's outputs are those of its own sequence
    cut to its length (a reverse direction starting at its last step), its ``Y`` rows
    beyond it 0."""
    lens = [5, 2, 0, 4]
    x = np.random.default_rng(7).uniform(-2, 2, (5, 4, 3)).astype(np.float32)
    got = _recurrent(op, x.shape, 3, lens, direction=direction).reference({"x": x})
    for b, n in enumerate(lens):
        alone = _recurrent(op, (max(n, 1), 1, 3), 3, direction=direction).reference(
            {"x": x[: max(n, 1), b : b + 1]}
        )
        if n == 0:  # nothing run: the initial state (0)
            assert not got["yh"][:, b].any() and not got["y"][:, :, b].any()
            continue
        np.testing.assert_allclose(got["y"][:n, :, b], alone["y"][:, :, 0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got["yh"][:, b], alone["yh"][:, 0], rtol=1e-6, atol=1e-7)
        assert not got["y"][n:, :, b].any()


def test_recurrent_non_default_activations_are_refused():
    with pytest.raises(ModelNotImplementedError, match="activations .* not implemented"):
        _recurrent("GRU", (2, 1, 3), 3, activations=["Relu", "Tanh"])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_run_on_the_host_with_core_mls_reason(op):
    """A recurrent layer is placed on the host with the reason Core ML's own placement
    gives (the CPU), not as an op fastane has no lowering for."""
    from fastane.model.placement.place import ON_CPU

    m = _recurrent(op, (3, 1, 2), 4)
    (layer,) = m.report({"x": np.ones((3, 1, 2), np.float32)}).layers
    assert (layer.layer.placement, layer.layer.reason) == ("host", ON_CPU["recurrent"])


def test_weight_normalisation_too_large_to_fold_runs_on_the_host():
    """A ReduceL2 of a weight beyond MAX_FOLD_ELEMENTS (wav2vec2's weight-normalised positional
    conv, 768 x 48 x 128): the composition's nodes read only constants, are not folded at bind
    and run as host layers (they have no dynamic input an ANE layer could take)."""
    from fastane.model.budget import MAX_FOLD_ELEMENTS
    from fastane.model.placement.place import CONSTANT_ONLY

    rng = np.random.default_rng(0)
    v = (0.01 * rng.standard_normal((MAX_FOLD_ELEMENTS // 1024 + 1, 1024))).astype(np.float32)
    m = _model(
        [
            helper.make_node("ReduceL2", ["v"], ["n"], keepdims=1, axes=[1]),
            helper.make_node("ReduceSum", ["n"], ["s"], keepdims=1, axes=[0]),
            helper.make_node("Mul", ["x", "s"], ["y"]),
        ],
        [_vi("x", [1, 1])],
        [_vi("y", [1, 1])],
        [numpy_helper.from_array(v, "v")],
        opset=13,
    )
    x = np.array([[0.5]], np.float32)
    rep = m.report({"x": x})
    host = [r for r in rep.layers if r.reason == CONSTANT_ONLY]
    assert host and all(r.placement == "host" for r in host)
    want = 0.5 * np.sqrt((v.astype(np.float64) ** 2).sum(1)).sum()
    np.testing.assert_allclose(m.reference({"x": x})["y"][0, 0], want, rtol=1e-5)
    np.testing.assert_allclose(float(rep.values["y"][0, 0]), want, rtol=2e-3)
