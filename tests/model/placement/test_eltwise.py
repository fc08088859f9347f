"""The activation family's PRelu rule (fastane.model.placement.eltwise): a constant slope
that is one value runs on the ANE through LeakyRelu's block (alone, or fused into the NE
stage of a convolution, as LeakyRelu is); other slopes stay on the host with the reason.
An elementwise op of every family on integer tensors stays on the host, exactly.  Log and
Softplus run on the ANE as their compositions of tables and planar tasks, and the fp16
hunt finds softplus's overflow in a model.  Elu (any alpha fp16 holds) and a bare Erf run
on fastane's own elu and erf tables, alone or fused into a convolution's NE stage.
HardSigmoid (any alpha, beta fp16 holds) runs on its one range-clamp block, HardSwish and
``Mul(x, HardSigmoid(x))`` (1/6, 1/2) as silu's chain with that block, alone or fused."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane import activations, lut  # noqa: E402
from fastane.model.placement.eltwise import INTEGER  # noqa: E402

X = np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32) * 4


def _model(nodes, inits=(), inputs=("x",), shape=X.shape):
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, T.FLOAT, list(shape)) for n in inputs],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in dict(inits).items()],
    )
    return fastane.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _prelu(slope, src="x"):
    return _model([helper.make_node("PRelu", [src, "s"], ["y"])], {"s": slope})


@pytest.mark.parametrize(
    "slope",
    [np.float32(0.2), [0.2], np.full((4, 1, 1), 0.2), np.full((1, 4, 1, 1), 0.01), [-1.5]],
    ids=["scalar", "one-element", "equal-per-channel", "equal-0.01", "negative"],
)
def test_prelu_with_one_slope_runs_on_the_ane_as_leaky_relu(slope):
    model = _prelu(slope)
    (layer,) = model.placement({"x": X.shape})
    assert (layer.placement, layer.call, layer.kind, layer.op) == ("ane", "prelu", "table", "PRelu")
    s = float(np.asarray(slope).reshape(-1)[0])
    y = model({"x": X})["y"]
    x16 = X.astype(np.float16)
    np.testing.assert_array_equal(y.view(np.uint16), activations.leaky_relu(x16, s).view(np.uint16))
    # the fp32 host on the same fp16 input: the slope and the product each rounded once to
    # fp16 (measured 6.7e-4 relative at most, below 2^-10)
    ref = model.reference({"x": x16.astype(np.float32)})["y"].astype(np.float64)
    assert np.all(np.abs(y.astype(np.float64) - ref) <= 2.0**-10 * np.abs(ref))
    rec = model.report({"x": X}).layers[0]
    assert rec.placement == "ane" and rec.error <= rec.tolerance


@pytest.mark.parametrize(
    "slope,reason",
    [
        (
            np.linspace(0.1, 0.4, 4).reshape(4, 1, 1),
            "PRelu with 4 distinct slopes: the ANE's leaky_relu block has one slope",
        ),
        ([1e6], "PRelu slope 1000000.0 is not finite in fp16: the slope of the ANE's block cannot hold it"),
        ([np.nan], "PRelu slope nan is not finite in fp16: the slope of the ANE's block cannot hold it"),
        (
            np.full((3, 2, 4, 8, 8), 0.2),
            "PRelu slope broadcasts the input to a larger shape: no ANE lowering in fastane yet",
        ),
    ],
    ids=["per-channel", "beyond-fp16", "nan", "broadcast-up"],
)
def test_prelu_with_other_slopes_stays_on_the_host_with_the_reason(slope, reason):
    model = _prelu(slope)
    (layer,) = model.placement({"x": X.shape})
    assert (layer.placement, layer.reason, layer.kind) == ("host", reason, "exact")
    y, ref = model({"x": X})["y"], model.reference({"x": X})["y"]
    with np.errstate(over="ignore"):  # a slope of 1e6: products beyond fp16 (inf both ways)
        np.testing.assert_array_equal(y, ref.astype(np.float16))


def test_prelu_with_a_run_time_slope_stays_on_the_host():
    model = _model([helper.make_node("PRelu", ["x", "s"], ["y"])], inputs=("x", "s"))
    (layer,) = model.placement({"x": X.shape, "s": X.shape})
    assert layer.placement == "host"
    assert (
        layer.reason
        == "PRelu slope is not constant: the ANE's leaky_relu block holds its slope in the program"
    )


@pytest.mark.parametrize("slope", [0.2, 0.01])
def test_prelu_fuses_after_a_convolution_as_leaky_relu_does(slope):
    rng = np.random.default_rng(1)
    conv = {"w": rng.standard_normal((4, 4, 3, 3)), "b": rng.standard_normal(4)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    prelu = _model(
        nodes + [helper.make_node("PRelu", ["c", "s"], ["y"])], {**conv, "s": np.full((4, 1, 1), slope)}
    )
    leaky = _model(nodes + [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=slope)], conv)
    (p,) = prelu.placement({"x": X.shape})
    (q,) = leaky.placement({"x": X.shape})
    assert (p.placement, p.call, p.op) == ("ane", "conv2d", "Conv+PRelu")
    assert p.detail == q.detail and p.detail["activation"] == ("leaky_relu" if slope == 0.01 else "lut block")
    assert p.plan() == q.plan()
    np.testing.assert_array_equal(prelu({"x": X})["y"], leaky({"x": X})["y"])


@pytest.mark.parametrize(
    "op,n_in",
    [("Abs", 1), ("Neg", 1), ("Relu", 1), ("Sign", 1), ("Add", 2), ("Mul", 2), ("Max", 2), ("Div", 2)],
)
def test_integer_operands_stay_on_the_host_exactly(op, n_in):
    """Each placement family (unary, activation, binary, divide) declines integer tensors
    with the reason; the host's result is exact (beyond float64's 2^53 too)."""
    a = np.array([[-(2**62) - 3, -7, 0, 9, 2**61 + 1]], np.int64)
    b = np.array([[3, -2, 5, 4, -(2**20)]], np.int64)
    names = ["a", "b"][:n_in]
    g = helper.make_graph(
        [helper.make_node(op, names, ["y"])],
        "t",
        [helper.make_tensor_value_info(n, T.INT64, [1, 5]) for n in names],
        [helper.make_tensor_value_info("y", T.INT64, None)],
    )
    model = fastane.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = dict(zip(names, (a, b)))
    (layer,) = model.placement({k: v.shape for k, v in feeds.items()})
    assert (layer.placement, layer.reason) == ("host", INTEGER)
    fn = {
        "Abs": np.abs,
        "Neg": np.negative,
        "Relu": lambda v: np.maximum(v, 0),
        "Sign": np.sign,
        "Add": np.add,
        "Mul": np.multiply,
        "Max": np.maximum,
        "Div": lambda p, q: np.vectorize(_trunc_div)(p, q),
    }[op]
    np.testing.assert_array_equal(model(feeds)["y"], fn(*feeds.values()))


def _trunc_div(p, q):
    """``p / q`` truncated toward zero, in Python's exact integers."""
    d = abs(int(p)) // abs(int(q))
    return -d if (p < 0) != (q < 0) else d


@pytest.mark.parametrize("op", ["Log", "Softplus"])
def test_log_and_softplus_run_their_compositions_on_the_ane(op):
    from fastane.lower import binary
    from fastane.model.placement import plan

    x = np.abs(X) + np.float32(0.1)
    model = _model([helper.make_node(op, ["x"], ["y"])])
    (layer,) = model.placement({"x": X.shape})
    name = op.lower()
    assert (layer.placement, layer.kind, layer.call) == ("ane", "table", name)
    np.testing.assert_array_equal(model({"x": x})["y"], binary.composed(name, x).astype(np.float32))
    assert fastane.last_stats().tasks == plan.composed(X.shape, name).tasks


def test_first_divergence_finds_the_softplus_overflow(tmp_path, capsys):
    """A Conv -> Softplus -> Conv model: its fp32 evaluation is finite everywhere; on the
    ANE, softplus's exp overflows fp16 for inputs beyond 11.09 and the hunt names that layer
    (before this op ran on the ANE, the hunt found nothing: the host's softplus is float32)."""
    from fastane.cli import main

    w = np.zeros((4, 4, 1, 1), np.float32)
    w[np.arange(4), np.arange(4)] = 1.0  # identity 1x1 convolutions
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Softplus", ["c"], ["s"]),
        helper.make_node("Conv", ["s", "w"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", T.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    p = tmp_path / "sp.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    model = fastane.load_model(str(p))
    x = np.full(X.shape, 11.5, np.float32)
    x[:, :, :4] = 3.0
    assert np.isfinite(model.reference({"x": x})["y"]).all()
    from fastane.model.run.hunt import first_divergence

    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement) == ("Softplus", "ane") and d.inf_born == x.size // 2
    np.save(tmp_path / "x.npy", x)
    main(["run", str(p), "--input", f"x={tmp_path / 'x.npy'}", "--first-divergence"])
    out = capsys.readouterr().out
    assert "first divergence" in out and "Softplus" in out


def _ref_bits(block, x):
    """The Fraction reference (tests/helpers/lut_reference.py) of ``block`` at each fp16
    value of ``x``: fp16 patterns, NaN canonical."""
    from tests.helpers.lut_reference import ref_lut

    words = block.to_words()
    xb = np.asarray(x, np.float16).view(np.uint16).reshape(-1)
    return np.array([ref_lut(words, int(b))[0] for b in xb], np.uint16).reshape(np.shape(x))


def _bits(y):
    b = np.asarray(y, np.float16).view(np.uint16).copy()
    b[np.isnan(np.asarray(y, np.float16))] = 0x7E00
    return b


#: fp16 inputs over each table's range and beyond, with the specials
_XS = np.concatenate(
    [np.linspace(-12, 6, 4 * 8 * 8 * 2 - 6), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-7]]
).astype(np.float16)


@pytest.mark.parametrize(
    "node, table",
    [
        (helper.make_node("Elu", ["x"], ["y"]), lut.get_block("elu")),
        (helper.make_node("Elu", ["x"], ["y"], alpha=0.7), lut.elu_block(0.7)),
        (helper.make_node("Elu", ["x"], ["y"], alpha=-2.5), lut.elu_block(-2.5)),
        (helper.make_node("Erf", ["x"], ["y"]), lut.get_block("erf")),
    ],
    ids=["elu", "elu-0.7", "elu-negative", "erf"],
)
def test_elu_and_erf_run_on_the_ane_with_their_tables(node, table):
    """ONNX Elu (any alpha fp16 holds) and a bare Erf: one NE task a tile with fastane's own
    table, the layer's reason naming it; bit for bit the Fraction reference of the block."""
    from fastane.model.placement import plan

    model = _model([node])
    (layer,) = model.placement({"x": X.shape})
    name = node.op_type.lower()
    assert (layer.placement, layer.kind, layer.call) == ("ane", "table", name)
    assert layer.reason.startswith(f"fastane's {name} table (no Apple block in the corpus")
    x = _XS.reshape(X.shape).astype(np.float32)
    y = model({"x": x})["y"]
    assert np.array_equal(_bits(y), _ref_bits(table, x))
    assert fastane.last_stats().tasks == plan.eltwise(X.shape, name).tasks


def test_elu_with_an_alpha_beyond_fp16_stays_on_the_host():
    model = _model([helper.make_node("Elu", ["x"], ["y"], alpha=1e6)])
    (layer,) = model.placement({"x": X.shape})
    assert layer.placement == "host"
    assert layer.reason == "Elu alpha 1000000.0 is not finite in fp16: the ANE's elu block cannot hold it"


@pytest.mark.parametrize("op, alpha", [("Elu", 1.0), ("Elu", 0.3), ("Erf", None)])
def test_elu_and_erf_fuse_after_a_convolution(op, alpha):
    """In the NE stage of the convolution's tasks: the table on ``round16(readout + bias)``,
    bit for bit the activation on the convolution's own output."""
    w = np.random.default_rng(1).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.5
    conv = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    attrs = {} if alpha is None else {"alpha": alpha}
    fused = _model(conv + [helper.make_node(op, ["c"], ["y"], **attrs)], {"w": w})
    plain = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"w": w})
    (layer,) = fused.placement({"x": X.shape})
    assert (layer.placement, layer.call, layer.op) == ("ane", "conv2d", f"Conv+{op}")
    assert layer.detail["activation"] == (op.lower() if alpha in (None, 1.0) else "lut block")
    y = fused({"x": X})["y"]
    c = plain({"x": X})["y"].astype(np.float16)
    want = activations.erf(c) if alpha is None else activations.elu(c, alpha=alpha)
    assert np.array_equal(_bits(y), _bits(want))


def test_a_bare_erf_beside_a_gelu_pattern():
    """The exact GELU spelled out is fused into a gelu (its table); an Erf outside the
    pattern is the erf table's layer."""
    s2 = np.float32(np.sqrt(2.0))
    nodes = [
        helper.make_node("Div", ["x", "s2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("Erf", ["g"], ["y"]),
    ]
    model = _model(nodes, {"s2": s2, "one": 1.0, "half": 0.5})
    layers = model.placement({"x": X.shape})
    assert [(lay.op, lay.placement, lay.call) for lay in layers] == [
        ("Gelu(Div+Erf+Add+Mul+Mul)", "ane", "gelu"),
        ("Erf", "ane", "erf"),
    ]
    y = model({"x": X})["y"]
    assert np.array_equal(_bits(y), _bits(activations.erf(activations.gelu(X))))


#: the weights of the convolutions below
_W = np.random.default_rng(3).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.5
_CONV = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])


def test_conv_hard_swish_hard_sigmoid_and_the_mul_pattern_on_the_ane():
    """Conv -> HardSwish -> HardSigmoid(0.3, 0.4) -> ``Mul(h, HardSigmoid(h))`` with
    PyTorch's exported hard sigmoid (alpha 1/6 as float32, beta the default 0.5): the
    convolution with HardSwish fused (it keeps z, the hard-sigmoid block, the planar
    multiply), the HardSigmoid on its own block (one NE task), the pattern as hard_swish --
    three ANE layers, bit for bit the Fraction reference of each step
    (tests/helpers/activations.py) on the convolution's fp16 output."""
    from tests.helpers.activations import ref_hard_sigmoid, ref_hard_swish

    nodes = [
        _CONV,
        helper.make_node("HardSwish", ["c"], ["s"]),
        helper.make_node("HardSigmoid", ["s"], ["h"], alpha=0.3, beta=0.4),
        helper.make_node("HardSigmoid", ["h"], ["g"], alpha=1 / 6),
        helper.make_node("Mul", ["h", "g"], ["y"]),
    ]
    model = _model(nodes, {"w": _W})
    layers = model.placement({"x": X.shape})
    assert [(lay.op, lay.placement, lay.call) for lay in layers] == [
        ("Conv+HardSwish", "ane", "conv2d"),
        ("HardSigmoid", "ane", "hard_sigmoid"),
        ("HardSigmoid+Mul", "ane", "hard_swish"),
    ]
    assert layers[0].detail["activation"] == "hard_swish"
    assert layers[1].reason.startswith("fastane's hard_sigmoid table (no Apple block in the corpus")
    assert layers[2].reason.startswith("fastane's hard_swish table (no Apple block in the corpus")
    y = model({"x": X})["y"]
    conv = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"w": _W})
    z = np.asarray(conv({"x": X})["y"], np.float16).view(np.uint16).reshape(-1)
    h = [ref_hard_sigmoid(0.3, 0.4, ref_hard_swish(int(b))) for b in z]
    want = np.array([ref_hard_swish(b) for b in h], np.uint16).reshape(y.shape)
    assert np.array_equal(_bits(y), want)
    rep = model.report({"x": X})
    assert all(r.placement == "ane" and r.error <= r.tolerance for r in rep.layers)


@pytest.mark.parametrize(
    "after, op",
    [
        ([helper.make_node("HardSwish", ["c"], ["y"])], "Conv+HardSwish"),
        (
            [
                helper.make_node("HardSigmoid", ["c"], ["g"], alpha=1 / 6),
                helper.make_node("Mul", ["g", "c"], ["y"]),
            ],
            "Conv+HardSigmoid+Mul",
        ),
    ],
    ids=["HardSwish", "Mul-HardSigmoid"],
)
def test_the_fused_hard_swish_is_the_activation_on_the_convolutions_output(after, op):
    fused = _model([_CONV, *after], {"w": _W})
    plain = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"w": _W})
    (layer,) = fused.placement({"x": X.shape})
    assert (layer.placement, layer.call, layer.op) == ("ane", "conv2d", op)
    assert layer.detail["activation"] == "hard_swish"
    y = fused({"x": X})["y"]
    assert fastane.last_stats().tasks == 2 * 3  # two images, one tile each: conv, gate, multiply
    want = activations.hard_swish(plain({"x": X})["y"].astype(np.float16))
    assert np.array_equal(_bits(y), _bits(want))


@pytest.mark.parametrize(
    "node, table",
    [
        (helper.make_node("HardSigmoid", ["x"], ["y"]), lut.get_block("hard_sigmoid")),
        (
            helper.make_node("HardSigmoid", ["x"], ["y"], alpha=-0.7, beta=2.5),
            lut.hard_sigmoid_block(-0.7, 2.5),
        ),
        (helper.make_node("HardSwish", ["x"], ["y"]), None),
    ],
    ids=["hard-sigmoid", "hard-sigmoid-negative", "hard-swish"],
)
def test_hard_sigmoid_and_hard_swish_alone(node, table):
    """One NE task a tile (HardSigmoid), two (HardSwish: the gate, the multiply): bit for bit
    the reference evaluation of the block, and of the chain."""
    from fastane.model.placement import plan
    from tests.helpers.activations import ref_hard_swish

    model = _model([node])
    (layer,) = model.placement({"x": X.shape})
    name = "hard_sigmoid" if table is not None else "hard_swish"
    assert (layer.placement, layer.kind, layer.call) == ("ane", "table", name)
    x = _XS.reshape(X.shape).astype(np.float32)
    y = model({"x": x})["y"]
    if table is not None:
        assert np.array_equal(_bits(y), _ref_bits(table, x))
    else:
        xb = np.asarray(x, np.float16).view(np.uint16).reshape(-1)
        assert _bits(y).reshape(-1).tolist() == [ref_hard_swish(int(b)) for b in xb]
    assert fastane.last_stats().tasks == plan.eltwise(X.shape, name).tasks


def test_a_hard_sigmoid_beyond_fp16_stays_on_the_host():
    model = _model([helper.make_node("HardSigmoid", ["x"], ["y"], beta=1e6)])
    (layer,) = model.placement({"x": X.shape})
    assert layer.placement == "host" and layer.reason == (
        "HardSigmoid alpha 0.2, beta 1000000.0: not finite in fp16, the ANE's "
        "hard-sigmoid block cannot hold them"
    )


def test_mul_by_another_hard_sigmoid_is_two_layers():
    """``x * HardSigmoid(x)`` with ONNX's default alpha 0.2 is not hard_swish: the hard
    sigmoid's block, then the planar multiply."""
    nodes = [helper.make_node("HardSigmoid", ["x"], ["g"]), helper.make_node("Mul", ["x", "g"], ["y"])]
    layers = _model(nodes).placement({"x": X.shape})
    assert [(lay.op, lay.placement, lay.call) for lay in layers] == [
        ("HardSigmoid", "ane", "hard_sigmoid"),
        ("Mul", "ane", "mul"),
    ]
