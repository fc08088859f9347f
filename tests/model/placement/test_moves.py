"""Layout layers as the ANE's data movement (fastane/model/placement/moves.py): which layout
layers the ANE moves and why the others stay on the host, their values against the host's,
their tasks in the report and the stats-only plan, and the crop path of a slice moved by
the ANE."""

import numpy as np
import pytest

import fastane
from fastane.model.placement.moves import HOST_SIDES, IDENTITY, INTEGER, KEPT, MOVED
from fastane.roofline import chips

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper as h  # noqa: E402


def model_of(nodes, inputs, inits=(), opset=13, out="y"):
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info(out, T.FLOAT, None)], list(inits))
    return fastane.load_model(h.make_model(g, opset_imports=[h.make_opsetid("", opset)]))


def ints(name, values):
    return h.make_tensor(name, T.INT64, [len(values)], values)


def x_in(shape, name="x", dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, list(shape))


def by_name(rep):
    return {r.layer.name: r for r in rep.layers}


def test_moves_after_ane_layers_run_on_the_ane_and_give_the_hosts_values():
    w = (np.random.default_rng(0).standard_normal((6, 4, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Concat", ["c", "r"], ["cat"], axis=1, name="concat"),
        h.make_node("Slice", ["cat", "st", "en", "ax", "sp"], ["s"], name="slice"),
        h.make_node("Pad", ["s", "pads", "v"], ["p"], name="pad"),
        h.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 1, 3], name="transpose"),
        h.make_node("Split", ["t"], ["y", "z"], axis=1, name="split"),
    ]
    inits = [
        h.make_tensor("w", T.FLOAT, w.shape, w.ravel()),
        ints("st", [1, 2]),
        ints("en", [10, 8]),
        ints("ax", [1, 2]),
        ints("sp", [2, 1]),
        ints("pads", [0, 1, 2, 0, 0, 0, 0, 0]),
        h.make_tensor("v", T.FLOAT, [], [0.5]),
    ]
    m = model_of(nodes, [x_in((1, 4, 8, 8))], inits)
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    rep = m.report({"x": x})
    recs = by_name(rep)
    for name in ("concat", "slice", "pad", "transpose", "split"):
        r = recs[name]
        assert (r.placement, r.reason, r.layer.kind) == ("ane", MOVED, "layout"), name
        assert r.stats.tasks >= 1 and r.stats.tile_dma_src_bytes > 0 and r.stats.macs == 0
        assert r.error == 0.0, name  # against the same layer on the host: nothing changes
    # the report's ANE total counts them
    assert rep.total.tasks == sum(r.stats.tasks for r in rep.layers if r.placement == "ane")
    # the stats-only plan counts the same programs
    plan = by_name(m.report({"x": x.shape}, stats_only=True))
    for name in ("concat", "slice", "pad", "transpose", "split"):
        a, b = recs[name].stats, plan[name].stats
        assert (a.tasks, a.tile_dma_src_bytes, a.tile_dma_dst_bytes) == (
            b.tasks,
            b.tile_dma_src_bytes,
            b.tile_dma_dst_bytes,
        )


def test_a_move_that_feeds_the_ane_runs_there():
    w = np.ones((2, 8, 1, 1), np.float32)
    nodes = [
        h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3], name="transpose"),
        h.make_node("Conv", ["t", "w"], ["y"], name="conv"),
    ]
    m = model_of(nodes, [x_in((1, 5, 8, 6))], [h.make_tensor("w", T.FLOAT, w.shape, w.ravel())])
    (lay,) = [l for l in m.placement({"x": (1, 5, 8, 6)}) if l.name == "transpose"]
    assert (lay.placement, lay.reason) == ("ane", MOVED)


def test_what_stays_on_the_host_says_why():
    nodes = [
        h.make_node("Floor", ["x"], ["f"], name="floor"),
        h.make_node("Concat", ["f", "f"], ["cat"], axis=1, name="between_hosts"),
        h.make_node("Floor", ["cat"], ["g"], name="floor2"),
        h.make_node("Relu", ["g"], ["r"], name="relu"),
        h.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2], name="last_axis"),
        h.make_node("Slice", ["t", "st", "en", "ax"], ["s"], name="inside_a_row"),
        h.make_node("Reshape", ["s", "shape"], ["y"], name="reshape"),
    ]
    inits = [ints("st", [1]), ints("en", [4]), ints("ax", [3]), ints("shape", [1, -1])]
    m = model_of(nodes, [x_in((1, 2, 3, 4))], inits)
    lays = {l.name: l for l in m.placement({"x": (1, 2, 3, 4)})}
    assert (lays["between_hosts"].placement, lays["between_hosts"].reason) == ("layout", HOST_SIDES)
    assert "moves the last axis" in lays["last_axis"].reason and lays["last_axis"].placement == "layout"
    assert "BaseAddr counts 64-byte units" in lays["inside_a_row"].reason
    assert lays["reshape"].reason == KEPT["reshape"]
    x = np.random.default_rng(2).standard_normal((1, 2, 3, 4)).astype(np.float32) * 4
    y = m({"x": x})["y"]
    want = np.maximum(np.floor(np.floor(np.concatenate([x, x], 1))), 0).transpose(0, 1, 3, 2)[..., 1:4]
    assert np.array_equal(y, want.reshape(1, -1).astype(np.float16))


def test_integer_tensors_stay_on_the_host():
    nodes = [h.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat")]
    g = h.make_graph(
        nodes,
        "g",
        [x_in((2,), "a", T.INT64), x_in((3,), "b", T.INT64)],
        [h.make_tensor_value_info("y", T.INT64, None)],
    )
    m = fastane.load_model(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]))
    (lay,) = m.placement({"a": (2,), "b": (3,)})
    assert (lay.placement, lay.reason) == ("layout", INTEGER)


@pytest.mark.parametrize("chip", ["m1", "m4"])
def test_a_slice_the_ane_moves_takes_the_crop_path_of_the_chip(chip):
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Slice", ["r", "st", "en", "ax"], ["s"], name="slice"),
        h.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    m = model_of(nodes, [x_in((1, 2, 64))], [ints("st", [32]), ints("en", [64]), ints("ax", [2])])
    x = np.full((1, 2, 64), 5000.0, np.float32)
    x[0, 0, 40] = 100.0
    with fastane.errstate(saturation="ignore"):
        rep = m.report({"x": x}, chip=chip)
    r = by_name(rep)["slice"]
    assert r.placement == "ane" and r.stats.tasks == 1
    limit = chips.get(chip).family.slice_crop.value
    y = rep.values["y"]
    if limit < 65504:  # the M1's generation: the crop path
        assert r.stats.cropped == 63 and np.isinf(y).sum() == 63 and y[0, 0, 8] == 100
        assert r.error == np.inf
    else:
        assert r.stats.cropped == 0 and np.all(np.isfinite(y)) and r.error == 0.0


def test_a_pad_whose_value_is_an_input_stays_on_the_host():
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Pad", ["r", "pads", "v"], ["p"], name="pad"),
        h.make_node("Relu", ["p"], ["y"], name="relu2"),
    ]
    m = model_of(nodes, [x_in((1, 2, 3)), x_in((), "v")], [ints("pads", [0, 1, 0, 0, 0, 0])])
    lays = {l.name: l for l in m.placement({"x": (1, 2, 3), "v": ()})}
    assert lays["pad"].placement == "layout" and "not a constant" in lays["pad"].reason
    y = m({"x": np.ones((1, 2, 3), np.float32), "v": np.float32(7.0)})["y"]
    assert y.shape == (1, 3, 3) and np.array_equal(y[0, 0], np.full(3, 7.0, np.float16))


def test_a_move_that_gives_back_its_input_is_a_view():
    # the zero pads and whole slices of exported models (transformers' apply_tf_padding
    # before a 1x1 convolution): no element moves, no task is counted, the values are kept
    w = np.ones((2, 4, 1, 1), np.float32)
    nodes = [
        h.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
        h.make_node("Conv", ["p", "w"], ["c"], name="conv"),
        h.make_node("Slice", ["c", "st", "en"], ["y"], name="slice"),
    ]
    inits = [
        h.make_tensor("w", T.FLOAT, w.shape, w.ravel()),
        ints("pads", [0] * 8),
        ints("st", [0, 0, 0, 0]),
        ints("en", [1, 2, 8, 8]),
    ]
    m = model_of(nodes, [x_in((1, 4, 8, 8))], inits)
    x = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    rep = m.report({"x": x})
    recs = by_name(rep)
    assert (recs["pad"].placement, recs["pad"].reason, recs["pad"].stats.tasks) == ("layout", IDENTITY, 0)
    # the whole slice is the model's output: written, as noop_elimination keeps a block output
    assert (recs["slice"].placement, recs["slice"].reason) == ("ane", MOVED)
    assert rep.total.tasks == recs["conv"].stats.tasks + recs["slice"].stats.tasks
    # the same values as the convolution alone
    alone = model_of([h.make_node("Conv", ["x", "w"], ["y"], name="conv")], [x_in((1, 4, 8, 8))], inits[:1])
    np.testing.assert_array_equal(m(x)["y"], alone(x)["y"])


def test_a_view_passes_on_the_side_its_input_is_on():
    # conv -> zero pad (a view) -> pad (a move) -> a host op: the move's input is the ANE
    # conv's result seen through the view, so it moves on the ANE; and host op -> pad -> zero
    # pad -> conv: every reader of the move rounds it to fp16 through the view
    w = np.ones((4, 4, 1, 1), np.float32)
    zero = ints("zero", [0] * 8)
    rows = ints("rows", [0, 0, 1, 0, 0, 0, 1, 0])
    eq = "bchw->bchw"
    after = [
        h.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        h.make_node("Pad", ["c", "zero"], ["v"], name="view"),
        h.make_node("Pad", ["v", "rows"], ["p"], name="pad"),
        h.make_node("Einsum", ["p"], ["y"], equation=eq, name="host"),
    ]
    before = [
        h.make_node("Einsum", ["x"], ["e"], equation=eq, name="host"),
        h.make_node("Pad", ["e", "rows"], ["p"], name="pad"),
        h.make_node("Pad", ["p", "zero"], ["v"], name="view"),
        h.make_node("Conv", ["v", "w"], ["y"], name="conv"),
    ]
    x = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)
    inits = [h.make_tensor("w", T.FLOAT, w.shape, w.ravel()), zero, rows]
    for nodes in (after, before):
        m = model_of(nodes, [x_in((1, 4, 8, 8))], inits, opset=13)
        recs = by_name(m.report({"x": x}))
        assert recs["host"].placement == "host"
        assert (recs["view"].placement, recs["view"].reason) == ("layout", IDENTITY)
        assert (recs["pad"].placement, recs["pad"].reason) == ("ane", MOVED)
    # after the ANE the move changes no value (before it, it rounds what the conv would)
    assert by_name(model_of(after, [x_in((1, 4, 8, 8))], inits).report({"x": x}))["pad"].error == 0.0
