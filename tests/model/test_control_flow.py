"""Control flow (fastane/model/control.py): If, Loop and Scan as exporters emit them, and as
hostile files abuse them.  The op-by-op comparison with onnx's reference is in
test_onnx_ops.py (its CASES) and the backend suite."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError, ModelNotImplementedError  # noqa: E402
from fastane.model import budget  # noqa: E402
from fastane.model.cost import node_cost  # noqa: E402
from fastane.model.placement.place import CONTROL_FLOW  # noqa: E402

_RNG = np.random.default_rng(11)


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "cf", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def node(op, ins, outs, name="", **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def branch(nodes, out, shape, elem=T.FLOAT):
    return helper.make_graph(nodes, "branch", [], [vi(out, elem, shape)])


def fp16(*shape):
    return _RNG.uniform(-3, 3, shape).astype(np.float16).astype(np.float32)


# ------------------------------------------------------------------------ If
def _exported_branch(then_out=None):
    """What torch.onnx exports for ``x.relu() * 2 if x.shape[0] > 2 else x - 1``: the
    condition from the input's shape (Shape -> Gather -> Greater), an If whose branches
    read ``x`` from the outer graph; ``then_out``: a then branch of another shape."""
    then = branch(
        [
            node("Relu", ["x"], ["/Relu_output_0"], "/Relu"),
            node("Mul", ["/Relu_output_0", "two"], ["/Mul_output_0"], "/Mul"),
        ],
        "/Mul_output_0",
        ["n", 4],
    )
    if then_out is not None:
        then = then_out
    other = branch([node("Sub", ["x", "one"], ["/Sub_output_0"], "/Sub")], "/Sub_output_0", ["n", 4])
    nodes = [
        node("Shape", ["x"], ["/Shape_output_0"], "/Shape"),
        node("Gather", ["/Shape_output_0", "zero"], ["/Gather_output_0"], "/Gather", axis=0),
        node("Greater", ["/Gather_output_0", "two_i"], ["/Greater_output_0"], "/Greater"),
        node("If", ["/Greater_output_0"], ["y"], "/If", then_branch=then, else_branch=other),
    ]
    inits = [
        const("zero", 0),
        const("two_i", 2),
        const("two", 2.0, np.float32),
        const("one", 1.0, np.float32),
    ]
    return model(nodes, [vi("x", T.FLOAT, ["n", 4])], [vi("y", T.FLOAT, None)], inits)


@pytest.mark.parametrize("n", [1, 4])
def test_a_branch_on_a_shape_is_decided_at_bind_and_inlined(n):
    proto = _exported_branch()
    m = fastane.load_model(proto)
    x = fp16(n, 4)
    layers = m.placement({"x": x.shape})
    ops = [nd.op for layer in layers for nd in layer.nodes]
    assert "if" not in ops
    assert ops == (["relu", "mul"] if n > 2 else ["sub"])
    # the branch's nodes are renamed into the model's namespace, and placed as any others
    assert all(
        nd.name.startswith("/If/" + ("then" if n > 2 else "else") + "/") for la in layers for nd in la.nodes
    )
    assert layers[0].placement == "ane"
    (ref,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(m.reference({"x": x})["y"], ref, rtol=1e-6)
    rep = m.report({"x": x})
    assert all(r.ok for r in rep.layers)


def test_a_condition_known_only_at_run_hosts_both_branches():
    proto = _exported_branch()
    g = proto.graph
    g.input.append(vi("c", T.BOOL, []))
    g.node[3].input[0] = "c"
    del g.node[:3]
    m = fastane.load_model(proto)
    x = fp16(3, 4)
    (layer,) = m.placement({"x": x.shape, "c": ()})
    assert (layer.placement, layer.reason, [nd.op for nd in layer.nodes]) == ("host", CONTROL_FLOW, ["if"])
    assert [p.unit for _, p in m.predict_placement({"x": x.shape, "c": ()})] == ["cpu"]
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        (ref,) = ReferenceEvaluator(proto).run(None, feeds)
        np.testing.assert_allclose(m.reference(feeds)["y"], ref, rtol=1e-6)
        np.testing.assert_array_equal(m(feeds)["y"], ref.astype(np.float16))


def test_branches_of_different_types_need_a_condition_known_at_bind():
    flat = branch(
        [node("Reshape", ["x", "minus_one"], ["/Reshape_output_0"], "/Reshape")], "/Reshape_output_0", [None]
    )
    proto = _exported_branch(then_out=flat)
    proto.graph.initializer.append(const("minus_one", [-1]))
    m = fastane.load_model(proto)
    for n in (1, 4):  # decided at bind: either branch's type is fine
        x = fp16(n, 4)
        (ref,) = ReferenceEvaluator(proto).run(None, {"x": x})
        np.testing.assert_allclose(m.reference({"x": x})["y"], ref, rtol=1e-6)
    proto.graph.input.append(vi("c", T.BOOL, []))
    proto.graph.node[3].input[0] = "c"
    m = fastane.load_model(proto)
    with pytest.raises(
        ModelNotImplementedError,
        match=r"node '/If' \(If\): output 0 \('y'\) is float32\[12\] in the then branch and float32\[3x4\] in the else branch; .* same types",
    ):
        m.placement({"x": (3, 4), "c": ()})


def test_a_branch_never_taken_is_never_imported():
    """An exporter's dead branch may hold an op fastane lacks: the model runs while the
    condition does not take it, and says why when it does."""
    bad = branch([node("SequenceEmpty", [], ["s"], "/Seq"), node("Identity", ["x"], ["z"])], "z", [2])
    proto = model(
        [
            node(
                "If",
                ["c"],
                ["y"],
                "/If",
                then_branch=branch([node("Neg", ["x"], ["t"])], "t", [2]),
                else_branch=bad,
            )
        ],
        [vi("x", T.FLOAT, [2])],
        [vi("y", T.FLOAT, [2])],
        [numpy_helper.from_array(np.array(True), "c")],
    )
    x = fp16(2)
    np.testing.assert_array_equal(fastane.load_model(proto).reference({"x": x})["y"], -x)
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(False), "c"))
    with pytest.raises(ModelError, match=r"node '/If/else//Seq': ONNX op 'SequenceEmpty' is not supported"):
        fastane.load_model(proto).reference({"x": x})


# ------------------------------------------------------------------------ Loop and Scan
def _doubling(cond_out=None, m_input=False, with_cond=False):
    """A Loop doubling ``v``: M a constant 3 (``m_input``: the graph input ``m``), the
    condition omitted (``with_cond``: the graph input ``c``); the body's condition output
    ``cond_out`` (default: the constant false, ignored when the loop has none)."""
    body = helper.make_graph(
        [
            node("Constant", [], ["c_out"], value=numpy_helper.from_array(np.array(False)))
            if cond_out is None
            else cond_out,
            node("Add", ["v", "v"], ["v_out"], "double"),
        ],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [2])],
    )
    inputs = [vi("x", T.FLOAT, [2])]
    inits = []
    if m_input:
        inputs.append(vi("m", T.INT64, []))
    else:
        inits.append(const("m", 3))
    if with_cond:
        inputs.append(vi("c", T.BOOL, []))
    loop = node("Loop", ["m", "c" if with_cond else "", "x"], ["y"], "/Loop", body=body)
    return model([loop], inputs, [vi("y", T.FLOAT, [2])], inits)


def test_a_loop_without_a_condition_runs_its_trip_count():
    """ONNX: with the condition omitted the body's condition output is ignored (a for
    loop); onnx's reference runs no iteration then, so the expectation is numpy's."""
    x = fp16(2)
    m = fastane.load_model(_doubling())
    np.testing.assert_array_equal(m.reference({"x": x})["y"], x * 2**3)
    (layer,) = m.placement({"x": (2,)})
    assert (layer.placement, layer.reason) == ("host", CONTROL_FLOW)


def test_scan_axes_and_directions():
    """Scan over axis 1, backwards, its outputs stacked on axis 1 in reverse (onnx's
    reference implements axis 0 forwards only): against a numpy loop."""
    body = helper.make_graph(
        [node("Add", ["s", "xi"], ["s_out"]), node("Mul", ["s_out", "w"], ["y"])],
        "body",
        [vi("s", T.FLOAT, [2]), vi("xi", T.FLOAT, [2])],
        [vi("s_out", T.FLOAT, [2]), vi("y", T.FLOAT, [2])],
    )
    scan = node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        "/Scan",
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1],
        scan_output_directions=[1],
    )
    ins = [vi("s0", T.FLOAT, [2]), vi("x", T.FLOAT, [2, 5]), vi("w", T.FLOAT, [2])]
    m = fastane.load_model(model([scan], ins, [vi("s", T.FLOAT, [2]), vi("ys", T.FLOAT, [2, 5])]))
    feeds = {"s0": fp16(2), "x": fp16(2, 5), "w": fp16(2)}
    s, ys = feeds["s0"].copy(), []
    for i in reversed(range(5)):
        s = s + feeds["x"][:, i]
        ys.append(s * feeds["w"])
    got = m.reference(feeds)
    np.testing.assert_allclose(got["s"], s, rtol=1e-6)
    np.testing.assert_allclose(got["ys"], np.stack(ys[::-1], axis=1), rtol=1e-6)


def test_a_branch_inside_a_loop_follows_the_iteration():
    """An If on the iteration number inside a Loop: bound with the body, decided per
    iteration on the host; against onnx's reference."""
    then = branch([node("Add", ["v", "v"], ["a"])], "a", [2])
    other = branch([node("Neg", ["v"], ["b"])], "b", [2])
    body = helper.make_graph(
        [
            node("Identity", ["c"], ["c_out"]),
            node("Less", ["it", "two"], ["small"]),
            node("If", ["small"], ["v_out"], "/inner", then_branch=then, else_branch=other),
            node("Identity", ["v_out"], ["s_out"]),
        ],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [2]), vi("s_out", T.FLOAT, [2])],
    )
    loop = node("Loop", ["m", "t", "x"], ["y", "ys"], "/Loop", body=body)
    inits = [const("m", 5), const("two", 2), numpy_helper.from_array(np.array(True), "t")]
    proto = model([loop], [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [2]), vi("ys", T.FLOAT, [5, 2])], inits)
    x = fp16(2)
    ref = ReferenceEvaluator(proto).run(None, {"x": x})
    got = fastane.load_model(proto).reference({"x": x})
    for r, name in zip(ref, ("y", "ys")):
        np.testing.assert_allclose(got[name], r, rtol=1e-6)


def test_scan_outputs_need_a_trip_count_known_at_bind():
    body = helper.make_graph(
        [node("Identity", ["c"], ["c_out"]), node("Identity", ["v"], ["v_out"]), node("Neg", ["v"], ["s"])],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [2]), vi("s", T.FLOAT, [2])],
    )
    loop = node("Loop", ["m", "", "x"], ["y", "ys"], "/Loop", body=body)
    proto = model(
        [loop],
        [vi("x", T.FLOAT, [2]), vi("m", T.INT64, [])],
        [vi("y", T.FLOAT, [2]), vi("ys", T.FLOAT, None)],
    )
    with pytest.raises(
        ModelNotImplementedError, match="its scan outputs stack one value per iteration.*M is not a constant"
    ):
        fastane.load_model(proto).placement({"x": (2,), "m": ()})


def test_a_carried_value_keeps_its_type():
    body = helper.make_graph(
        [node("Identity", ["c"], ["c_out"]), node("Concat", ["v", "v"], ["v_out"], axis=0)],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [None])],
    )
    proto = model(
        [node("Loop", ["m", "", "x"], ["y"], "/Loop", body=body)],
        [vi("x", T.FLOAT, [2])],
        [vi("y", T.FLOAT, None)],
        [const("m", 3)],
    )
    with pytest.raises(
        ModelNotImplementedError,
        match=r"loop-carried value 0 enters as float32\[2\] and leaves the body as float32\[4\]",
    ):
        fastane.load_model(proto).placement({"x": (2,)})


# ------------------------------------------------------------------------ the budget, hostile files
def test_a_loops_cost_is_its_body_times_its_trip_count():
    """A body of one 2^30 multiply-add MatMul: 2^7 iterations bind (the loop's work 2^7
    times the body's), 2^8 are beyond MAX_RUN_WORK; nothing is computed."""
    body = helper.make_graph(
        [node("Identity", ["c"], ["c_out"]), node("MatMul", ["v", "w"], ["v_out"], "/mm")],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [1024, 1024])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [1024, 1024])],
    )
    ins = [vi("x", T.FLOAT, [1024, 1024]), vi("w", T.FLOAT, [1024, 1024])]
    for trips in (1 << 7, 1 << 8):
        proto = model(
            [node("Loop", ["m", "", "x"], ["y"], "/Loop", body=body)],
            ins,
            [vi("y", T.FLOAT, None)],
            [const("m", trips)],
        )
        m = fastane.load_model(proto)
        if trips == 1 << 8:
            with pytest.raises(ModelError, match=r"model 'cf': .* \(MAX_RUN_WORK = 2\^38\)"):
                m.placement({"x": (1024, 1024), "w": (1024, 1024)})
            continue
        bound, _ = m.bind({"x": (1024, 1024), "w": (1024, 1024)})
        (loop,) = bound.nodes
        inner = loop.attrs["bound"]
        assert inner.budget.work >= 1 << 30
        types = [bound.types[t] if t else None for t in loop.inputs]
        cost = node_cost(loop, types, [bound.types["y"]])
        assert (cost.work, cost.steps) == (trips * inner.budget.work, trips * inner.budget.steps)
        assert bound.budget.work == cost.work


def test_a_huge_trip_count_is_refused_at_bind():
    with pytest.raises(
        ModelError, match=r"node '/Loop' \(Loop\): 1.1e12 node evaluations .* \(MAX_LOOP_STEPS = 2\^17\)"
    ):
        proto = _doubling()
        proto.graph.initializer[0].CopyFrom(const("m", 1 << 40))
        fastane.load_model(proto).placement({"x": (2,)})


def test_a_trip_count_known_at_run_is_checked_before_running():
    m = fastane.load_model(_doubling(m_input=True))
    x = fp16(2)
    np.testing.assert_array_equal(m.reference({"x": x, "m": np.array(5)})["y"], x * 2**5)
    with pytest.raises(
        ModelError, match=r"node '/Loop' \(Loop\): trip count 1000000000000: .* \(MAX_LOOP_STEPS = 2\^17\)"
    ):
        m.reference({"x": x, "m": np.array(10**12)})


def test_a_loop_that_never_stops_is_an_error(monkeypatch):
    """A loop with neither a trip count nor a condition, or a condition that stays true, is
    refused at bind; one whose condition is known only at run stops at the limit."""
    forever = _doubling()
    forever.graph.node[0].input[0] = ""
    with pytest.raises(
        ModelError, match="has no trip count and its condition stays true: it would run forever"
    ):
        fastane.load_model(forever).placement({"x": (2,)})
    stays = _doubling(node("Identity", ["c"], ["c_out"]), with_cond=True)
    stays.graph.node[0].input[0] = ""
    m = fastane.load_model(stays)
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(m.reference({"x": x, "c": np.array(False)})["y"], x)
    monkeypatch.setattr("fastane.model.control.MAX_LOOP_STEPS", 64)  # 32 iterations of 2 nodes
    m = fastane.load_model(stays)
    with pytest.raises(ModelError, match=r"node '/Loop' \(Loop\): iteration 33: 66 node evaluations"):
        m.reference({"x": x, "c": np.array(True)})


def _nested(depth):
    """``depth`` Ifs, each the then branch of the one above, all on the graph's ``c``."""
    inner = branch([node("Neg", ["x"], ["y0"])], "y0", [2])
    for d in range(1, depth + 1):
        other = branch([node("Identity", ["x"], [f"e{d}"])], f"e{d}", [2])
        level = node("If", ["c"], [f"y{d}"], f"if{d}", then_branch=inner, else_branch=other)
        inner = branch([level], f"y{d}", [2])
    top = inner.node[0]
    return model([top], [vi("x", T.FLOAT, [2]), vi("c", T.BOOL, [])], [vi(top.output[0], T.FLOAT, [2])])


def test_subgraphs_nest_at_most_max_subgraph_depth():
    depth = budget.MAX_SUBGRAPH_DEPTH  # the model's graph is at depth 0, the top If's branches at 1
    m = fastane.load_model(_nested(depth))
    x = fp16(2)
    out = m.outputs[0]
    np.testing.assert_array_equal(m.reference({"x": x, "c": np.array(True)})[out], -x)
    np.testing.assert_array_equal(m.reference({"x": x, "c": np.array(False)})[out], x)
    with pytest.raises(
        ModelError, match=r"17 levels of nested subgraphs, beyond .* \(MAX_SUBGRAPH_DEPTH = 2\^4\)"
    ):
        fastane.load_model(_nested(depth + 1))


def test_deep_nesting_is_refused_before_conversion(tmp_path):
    """Nesting as deep as protobuf parses (it refuses a hundred messages deep) is refused
    by the count before anything is converted; a file deeper still does not parse."""
    with pytest.raises(ModelError, match=r"17 levels of nested subgraphs"):
        fastane.load_model(_nested(30))
    path = tmp_path / "deep.onnx"
    path.write_bytes(_nested(30).SerializeToString())
    with pytest.raises(ModelError, match="MAX_SUBGRAPH_DEPTH"):
        fastane.load_model(path)


def test_subgraph_names_are_quoted_in_errors():
    body = helper.make_graph(
        [node("Identity", ["c"], ["c_out"]), node("NoSuchOp", ["v"], ["v_out"], "bad\nname\x1b")],
        "body",
        [vi("it", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.FLOAT, [2])],
        [vi("c_out", T.BOOL, []), vi("v_out", T.FLOAT, [2])],
    )
    proto = model(
        [node("Loop", ["m", "", "x"], ["y"], "loop\t1", body=body)],
        [vi("x", T.FLOAT, [2])],
        [vi("y", T.FLOAT, [2])],
        [const("m", 3)],
    )
    with pytest.raises(ModelError) as info:
        fastane.load_model(proto)
    assert "'loop\\t1/body/bad\\nname\\x1b'" in str(info.value) and "\n" not in str(info.value)


def test_subgraph_nodes_count_towards_max_nodes(monkeypatch):
    monkeypatch.setattr("fastane.model.frontends.onnx.importer.check_nodes", _strict_nodes)
    with pytest.raises(ModelError, match=r"model 'cf' \(its subgraphs' nodes counted\): 5 nodes"):
        fastane.load_model(_nested(2))


def _strict_nodes(count, what):
    if count > 4:
        raise budget.beyond(what, count, "nodes", "MAX_NODES")
