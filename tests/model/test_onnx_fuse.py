"""GELU spelled out in ONNX ops is imported as one ``gelu`` node
(fastane/model/frontends/onnx/fuse.py): each spelling of the exact and the tanh form is
fused, a wrong constant or an intermediate read elsewhere is not, and the fused model's
fp32 reference is onnxruntime's value of the unfused file within float32 rounding.  Both
forms run on the ANE on Apple's gelu table."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.model.frontends.onnx.fuse import TOL  # noqa: E402

SHAPE = (2, 3, 64)
#: the constants PyTorch's exporters write (float32)
CONSTS = {"s2": 1.4142135, "r2": 0.70710677, "one": 1.0, "half": 0.5, "kappa": 0.044715, "beta": 0.7978846}
X = np.linspace(-6, 6, int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)


def _n(op, ins, out):
    return helper.make_node(op, ins, [out], name=out)


def _scale(kind):
    """``d``: ``x / sqrt(2)`` as Div or as Mul by 1/sqrt(2)."""
    return [_n("Div", ["x", "s2"], "d")] if kind == "div" else [_n("Mul", ["r2", "x"], "d")]


def _cube(kind):
    """``cu = x ** 3``: Pow, ``(x * x) * x`` or ``x * (x * x)``."""
    if kind == "pow":
        return [_n("Pow", ["x", "three"], "cu")]
    sq = _n("Mul", ["x", "x"], "sq")
    return [sq, _n("Mul", ["sq", "x"] if kind == "xx_x" else ["x", "sq"], "cu")]


def _ending(kind, inner):
    """``y = 0.5 * x * inner`` in each order the exporters write."""
    if kind == "half_then_x":
        return [_n("Mul", [inner, "half"], "m"), _n("Mul", ["x", "m"], "y")]
    if kind == "x_then_half":
        return [_n("Mul", ["x", inner], "m"), _n("Mul", ["half", "m"], "y")]
    return [_n("Mul", ["half", "x"], "m"), _n("Mul", ["m", inner], "y")]  # (0.5 * x) * inner


def exact(scale="div", ending="half_then_x"):
    return [*_scale(scale), _n("Erf", ["d"], "e"), _n("Add", ["e", "one"], "a"), *_ending(ending, "a")]


def tanh(cube="pow", ending="x_then_half"):
    return [
        *_cube(cube),
        _n("Mul", ["kappa", "cu"], "kc"),
        _n("Add", ["x", "kc"], "in"),
        _n("Mul", ["in", "beta"], "bi"),
        _n("Tanh", ["bi"], "t"),
        _n("Add", ["one", "t"], "a"),
        *_ending(ending, "a"),
    ]


def _model(nodes, outputs=("y",), **consts):
    values = {**CONSTS, "three": 3.0, **consts}
    used = {i for n in nodes for i in n.input}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in values.items() if k in used]
    g = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", T.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(o, T.FLOAT, SHAPE) for o in outputs],
        inits,
    )
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(proto)
    return proto


def _load(proto, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return fastane.load_model(path), path


def _ort(path, feeds):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _float32_rounding(ref, want):
    """``ref`` equals ``want`` within a few float32 roundings of the values it is made of
    (the subgraph rounds each of its steps: ``|x| <= 6``)."""
    np.testing.assert_allclose(ref, want, rtol=4 * 2.0**-23, atol=8 * 2.0**-23 * 6)


VARIANTS = [
    *[("exact", s, e) for s in ("div", "mul") for e in ("half_then_x", "x_then_half", "half_x")],
    *[("tanh", c, e) for c in ("pow", "xx_x", "x_xx") for e in ("half_then_x", "x_then_half", "half_x")],
]


@pytest.mark.parametrize("form, spelling, ending", VARIANTS)
def test_gelu_subgraph_fuses_to_one_gelu_node(form, spelling, ending, tmp_path):
    nodes = exact(spelling, ending) if form == "exact" else tanh(spelling, ending)
    m, path = _load(_model(nodes), tmp_path)
    (node,) = m.graph.nodes
    assert node.op == "gelu" and node.inputs == ["x"] and node.outputs == ["y"]
    assert node.attrs["approximate"] == ("none" if form == "exact" else "tanh")
    assert node.source == "Gelu(" + "+".join(n.op_type for n in nodes) + ")"
    (layer,) = m.placement({"x": SHAPE})
    assert layer.nodes == [node]
    assert (layer.placement, layer.call) == ("ane", "gelu")  # both forms: Apple's gelu table
    (want,) = _ort(path, {"x": X})
    _float32_rounding(m.reference(X)["y"], want)


@pytest.mark.parametrize(
    "form, const, value",
    [
        ("exact", "s2", 1.5),
        ("exact", "one", 1.0 + 2 * TOL),
        ("exact", "half", 0.6),
        ("tanh", "kappa", 0.05),
        ("tanh", "beta", 0.7),
        ("tanh", "three", 2.0),
    ],
)
def test_wrong_constant_is_not_fused(form, const, value, tmp_path):
    nodes = exact() if form == "exact" else tanh()
    m, _ = _load(_model(nodes, **{const: value}), tmp_path)
    assert [n.source for n in m.graph.nodes] == [n.op_type for n in nodes]


def test_constant_within_coremltools_tolerance_is_fused(tmp_path):
    m, _ = _load(_model(exact(), half=0.5 + TOL / 2), tmp_path)
    assert [n.op for n in m.graph.nodes] == ["gelu"]


@pytest.mark.parametrize("form", ["exact", "tanh"])
@pytest.mark.parametrize("how", ["reader", "output"])
def test_intermediate_read_elsewhere_is_not_fused(form, how, tmp_path):
    """The ``1 + erf`` / ``1 + tanh`` sum read by another node, or a model output."""
    nodes = exact() if form == "exact" else tanh()
    if how == "reader":
        nodes.append(_n("Neg", ["a"], "other"))
    m, path = _load(_model(nodes, outputs=("y", "other" if how == "reader" else "a")), tmp_path)
    assert "gelu" not in [n.op for n in m.graph.nodes]
    got = m.reference(X)
    for name, want in zip(m.graph.outputs, _ort(path, {"x": X})):
        _float32_rounding(got[name], want)


def _renamed(nodes, prefix, out):
    """``nodes`` with their intermediates prefixed and their result named ``out``."""
    made = {o for n in nodes for o in n.output}
    name = {t: out if t == "y" else prefix + t for t in made}
    return [
        helper.make_node(n.op_type, [name.get(i, i) for i in n.input], [name[n.output[0]]]) for n in nodes
    ]


def test_two_gelus_of_one_input(tmp_path):
    """Two GELUs of one input (the exact and the tanh form) both fuse: ``x`` has other
    readers, no intermediate does."""
    m, path = _load(_model([*exact(), *_renamed(tanh(), "t_", "z")], outputs=("y", "z")), tmp_path)
    assert [(n.op, n.attrs["approximate"]) for n in m.graph.nodes] == [("gelu", "none"), ("gelu", "tanh")]
    got = m.reference(X)
    for name, want in zip(("y", "z"), _ort(path, {"x": X})):
        _float32_rounding(got[name], want)


def test_torch_gelu_export_fuses(tmp_path):
    """``torch.nn.GELU()`` exported by torch.onnx at opset 17 imports as one gelu on the ANE."""
    torch = pytest.importorskip("torch", reason="opt-in: needs torch to export a GELU with torch.onnx")
    path = tmp_path / "gelu.onnx"
    kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(torch.nn.GELU(), (torch.from_numpy(X),), str(path), opset_version=17, **kw)
    m = fastane.load_model(path)
    assert [n.op for n in m.graph.nodes] == ["gelu"]
    (layer,) = m.placement({next(iter(m.graph.inputs)): SHAPE})
    assert (layer.placement, layer.call) == ("ane", "gelu")
    _float32_rounding(next(iter(m.reference(X).values())), torch.nn.GELU()(torch.from_numpy(X)).numpy())
