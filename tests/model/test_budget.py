"""The host budget (:mod:`fastane.model.budget`): models that ask too much are refused at
bind time with the limit's name and value, in ``run`` and ``roofline`` alike; models
within it run, with ``--report``, in 4 GiB of address space.

The command-line reproducers run in a child with a 4 GiB address-space limit and a
timeout: before the budget they hung or exhausted memory."""

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402
from fastane.model import budget, zoo  # noqa: E402
from fastane.model.graph import Graph, Node, TensorType, bind  # noqa: E402
from tests.helpers.cli import cli as _cli, one_line as _line  # noqa: E402
from tests.helpers.coreml import convert  # noqa: E402


def _c(name, v):
    return numpy_helper.from_array(np.asarray(v), name)


def _onnx(path, nodes, inits, inputs=(), outputs=("y",)):
    g = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return str(path)


def _expand_then(path, shape, node, wshape=None):
    """A model that Expands a 1x1x1x1 constant to ``shape`` (and another to ``wshape``),
    then runs ``node`` on them: a few hundred bytes."""
    nodes = [helper.make_node("Expand", ["x0", "s"], ["x"])]
    inits = [_c("x0", np.ones((1, 1, 1, 1), np.float32)), _c("s", np.array(shape, np.int64))]
    if wshape is not None:
        nodes.append(helper.make_node("Expand", ["w0", "ws"], ["w"]))
        inits += [_c("w0", np.ones((1, 1, 1, 1), np.float32)), _c("ws", np.array(wshape, np.int64))]
    return _onnx(path, nodes + [node], inits)


# ------------------------------------------------------------------------ the limits
def test_limits_and_old_names():
    from fastane.model.graph import MAX_FOLD_ELEMENTS, MAX_TENSOR_ELEMENTS
    from fastane.model.budget import MAX_EINSUM_WORK
    from fastane.model.tensor import MAX_TENSOR_ELEMENTS as T

    assert MAX_TENSOR_ELEMENTS == T == budget.MAX_TENSOR_ELEMENTS == 1 << 28
    assert MAX_FOLD_ELEMENTS == budget.MAX_FOLD_ELEMENTS
    assert MAX_EINSUM_WORK == budget.MAX_EINSUM_WORK
    for name, (value, _) in budget.LIMITS.items():
        assert getattr(budget, name) == value and value & (value - 1) == 0
    e = budget.beyond("node 'c' (Conv)", 3_100_000_000_000, "multiply-adds", "MAX_LAYER_WORK")
    assert str(e) == (
        "node 'c' (Conv): 3.1e12 multiply-adds, beyond fastane's limit for work per layer (MAX_LAYER_WORK = 2^36)"
    )


def _graph(nodes, inputs, outputs, consts=None):
    return Graph("g", inputs, outputs, nodes, consts or {})


def test_run_work_sums_the_nodes():
    """Five matmuls of 2^36 multiply-adds each: every one within the per-layer limit, the
    run beyond MAX_RUN_WORK; nothing is allocated (bind sees shapes only)."""
    f32 = np.dtype(np.float32)
    t = TensorType(f32, (4096, 4096))
    nodes = [Node("matmul", f"mm{i}", ["a", "b"], [f"y{i}"]) for i in range(5)]
    g = _graph(nodes, {"a": t, "b": t}, [f"y{i}" for i in range(5)])
    with pytest.raises(ModelError, match=r"model 'g': .* beyond .*work per run \(MAX_RUN_WORK = 2\^38\)"):
        bind(g, {"a": t, "b": t})
    bind(_graph(nodes[:3], {"a": t, "b": t}, ["y0", "y1", "y2"]), {"a": t, "b": t})


def test_bytes_held_at_once():
    """Six 384 MiB expansions kept as outputs: each node within MAX_LAYER_BYTES, the
    tensors alive at once beyond MAX_RUN_BYTES (named at the node where they pass it)."""
    f32 = np.dtype(np.float32)
    shape = np.array([1, 96, 1024, 1024], np.int64)
    nodes = [Node("expand", f"e{i}", ["x", "s"], [f"y{i}"], source="Expand") for i in range(6)]
    g = _graph(nodes, {"x": TensorType(f32, (1, 1, 1, 1))}, [f"y{i}" for i in range(6)], {"s": shape})
    with pytest.raises(ModelError, match=r"node 'e1' \(Expand\): .*\(MAX_RUN_BYTES = 2\^30\)"):
        bind(g, {"x": TensorType(f32, (1, 1, 1, 1))})
    # the same six, each freed by its only reader (a Relu into one small Reduce)
    nodes = []
    for i in range(6):
        nodes += [
            Node("expand", f"e{i}", ["x", "s"], [f"y{i}"]),
            Node("reduce_max", f"r{i}", [f"y{i}"], [f"m{i}"], {"keepdims": 0}),
        ]
    g = _graph(nodes, {"x": TensorType(f32, (1, 1, 1, 1))}, [f"m{i}" for i in range(6)], {"s": shape})
    bind(g, {"x": TensorType(f32, (1, 1, 1, 1))})


def test_bytes_held_are_a_running_total(monkeypatch):
    """RunBudget keeps the bytes of the tensors it holds as a running total: after every
    node it is their sum, and the peak is as the tensors held across each node (all but
    its inputs, summed anew) make it."""
    from fastane.model.cost import RunBudget, check_node

    node, checked = RunBudget.node, []

    def node_summed_anew(self, n, in_types, out_types, folded):
        across = sum(b for t, b in self.held.items() if t not in set(n.inputs))
        peak = max(self.peak, check_node(n, in_types, out_types).bytes + across)
        cost = node(self, n, in_types, out_types, folded)
        assert self.peak == peak and self.held_bytes == sum(self.held.values()), n.describe()
        checked.append(n)
        return cost

    monkeypatch.setattr(RunBudget, "node", node_summed_anew)
    fastane.load_model(zoo.resnet50(), weights=False).bind({"x": (1, 3, 224, 224)})
    fastane.load_model(zoo.transformer(d=64, heads=2, seq=16), weights=False).bind({"x": (1, 16, 64)})
    # tensors freed by their last reader, as in test_bytes_held_at_once
    f32 = np.dtype(np.float32)
    nodes = []
    for i in range(3):
        nodes += [
            Node("expand", f"e{i}", ["x", "s"], [f"y{i}"]),
            Node("reduce_max", f"r{i}", [f"y{i}"], [f"m{i}"], {"keepdims": 0}),
        ]
    shape = np.array([1, 4, 64, 64], np.int64)
    g = _graph(nodes, {"x": TensorType(f32, (1, 1, 1, 1))}, [f"m{i}" for i in range(3)], {"s": shape})
    bind(g, {"x": TensorType(f32, (1, 1, 1, 1))})
    assert len(checked) > 100


def test_legitimate_models_fit():
    """ResNet-50 at 224 x 224 and a GPT-2-sized block (d 768, 12 heads) at 1024 tokens bind."""
    fastane.load_model(zoo.resnet50(), weights=False).bind({"x": (1, 3, 224, 224)})
    m = fastane.load_model(zoo.transformer(d=768, heads=12, seq=1024), weights=False)
    m.bind({"x": (1, 1024, 768)})


def test_report_errors_in_chunks_match():
    from fastane.model.run.model import array_errors

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((3, 1000)).astype(np.float32)
    ref[0, :5] = [np.inf, np.nan, 0, 1e-6, -np.inf]
    y = (ref + rng.standard_normal(ref.shape) * 1e-3).astype(np.float16)
    y[0, 1] = np.nan
    assert array_errors(y, ref, chunk=7) == array_errors(y, ref)


def test_random_inputs_drawn_in_chunks_are_the_same():
    from fastane.model.cli import _standard_normal

    want = np.random.default_rng(3).standard_normal((2, 3, 50, 70)).astype(np.float16)
    got = _standard_normal(np.random.default_rng(3), (2, 3, 50, 70), np.float16, chunk=999)
    assert np.array_equal(want, got)


# ------------------------------------------------------------------------ ONNX reproducers
def test_expand_then_conv(tmp_path):
    """Before: no finish in 60 s (a 1.5e11 multiply-add convolution of expanded constants)."""
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv")
    p = _expand_then(tmp_path / "c.onnx", [1, 512, 128, 128], conv, [2048, 512, 3, 3])
    assert os.path.getsize(p) < 400
    want = "node 'conv' (Conv): 1.5e11 multiply-adds, beyond fastane's limit for work per layer (MAX_LAYER_WORK = 2^36)"
    with pytest.raises(ModelError) as e:
        fastane.load_model(p).report({}, stats_only=True)
    assert str(e.value) == want
    rc, err = _cli("run", p, "--random", "--report", timeout=60)
    assert rc == 2 and _line(err) == "fastane run: error: " + want
    rc, err = _cli("roofline", p, timeout=60)
    assert rc == 2 and _line(err) == "fastane roofline: error: " + want


def test_expand_then_max_pool(tmp_path):
    """Before: no finish in 60 s (a 128 x 128 window over 128 x 512 x 512 expanded values)."""
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[128, 128], name="pool")
    p = _expand_then(tmp_path / "p.onnx", [1, 128, 512, 512], pool)
    rc, err = _cli("run", p, "--random", "--report", timeout=60)
    assert rc == 2 and _line(err).endswith(
        "node 'pool' (MaxPool): 3.1e11 element operations, beyond fastane's limit for element "
        "operations per layer (MAX_LAYER_ELEMENT_OPS = 2^32)"
    )


@pytest.mark.parametrize("channels, ok", [(32, True), (64, False)])
def test_expand_then_relu_reports(tmp_path, channels, ok):
    """Before: --report on a Relu of 2^25 or 2^26 expanded elements exhausted 4 GiB (the
    per-layer error in float64 on the whole tensor).  Now 2^25 reports within 4 GiB and
    2^26 is refused at bind."""
    p = _onnx(
        tmp_path / "e.onnx",
        [helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("Relu", ["e"], ["y"], name="relu")],
        [_c("s", np.array([1, channels, 1024, 1024], np.int64))],
        [("x", [1, 1, 1, 1])],
    )
    rc, err = _cli("run", p, "--random", "--report")
    if ok:
        assert rc == 0, err[-2000:]
    else:
        assert rc == 2 and _line(err).startswith("fastane run: error: node 'relu' (Relu): 1.3e09 bytes")
        assert _line(err).endswith("(MAX_LAYER_BYTES = 2^30)")


def test_conv_with_a_pad_of_2_20(tmp_path):
    """Before: --report exhausted 4 GiB; now refused (the padded input and the output)."""
    p = _onnx(
        tmp_path / "c.onnx",
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1 << 20, 0, 0], name="conv")],
        [_c("w", np.ones((1, 1, 1, 1), np.float32))],
        [("x", [1, 1, 64, 64])],
    )
    rc, err = _cli("run", p, "--random", "--report", timeout=60)
    assert rc == 2 and "node 'conv' (Conv): " in err and "(MAX_LAYER_BYTES = 2^30)" in _line(err)


@pytest.mark.parametrize(
    "shape, limit",
    [
        ([100000, 100000], "MAX_TENSOR_ELEMENTS = 2^28"),
        ([1 << 20, 1 << 20, 4], "MAX_TENSOR_ELEMENTS = 2^28"),
        ([16384, 16384], "MAX_LAYER_BYTES = 2^30"),  # within the tensor limit
    ],
)
def test_run_random_checks_the_declared_input(tmp_path, shape, limit):
    """Before: --random built the input (74.5 GiB for 100000 x 100000) before any check."""
    p = _onnx(tmp_path / "i.onnx", [helper.make_node("Relu", ["x"], ["y"])], [], [("x", shape)])
    rc, err = _cli("run", p, "--random", timeout=60)
    assert rc == 2 and _line(err).endswith(f"({limit})")
    rc2, err2 = _cli("roofline", p, timeout=60)
    assert rc2 == 2 and _line(err2).split("error: ")[1] == _line(err).split("error: ")[1]


# ------------------------------------------------------------------------ Core ML reproducers
def _mlprogram(path, shape, body):
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return body(mb, x)

    m = convert(prog, ct.target.iOS17)
    m.save(str(path))
    return str(path)


def test_coreml_huge_input(tmp_path):
    p = _mlprogram(tmp_path / "big.mlpackage", (100000, 100000), lambda mb, x: mb.relu(x=x))
    rc, err = _cli("run", p, "--random", timeout=60)
    assert rc == 2 and _line(err).endswith(
        "1.0e10 elements, beyond fastane's limit for elements per tensor (MAX_TENSOR_ELEMENTS = 2^28)"
    )


@pytest.mark.parametrize("dilation", [1 << 20, (1 << 31) - 1])
def test_coreml_same_conv_with_a_huge_dilation(tmp_path, dilation):
    """Before: numpy was asked for 128 TiB (dilation 2^20) or said "array is too big"."""
    w = np.ones((1, 1, 3, 3), np.float32)
    p = _mlprogram(
        tmp_path / "d.mlpackage",
        (1, 1, 8, 8),
        lambda mb, x: mb.conv(x=x, weight=w, pad_type="same", dilations=[dilation, dilation]),
    )
    with pytest.raises(ModelError, match=r"\(conv\): .* bytes .*\(MAX_LAYER_BYTES = 2\^30\)$"):
        fastane.load_model(p).bind({"x": (1, 1, 8, 8)})
    rc, err = _cli("run", p, "--random", "--report", timeout=60)
    assert rc == 2 and _line(err).endswith("(MAX_LAYER_BYTES = 2^30)")


def test_shape_reads_no_values():
    """A Shape of a 2^28-element input costs nothing: only its consumers are costed."""
    f32 = np.dtype(np.float32)
    t = TensorType(f32, (16384, 16384))
    g = _graph([Node("shape", "s", ["x"], ["y"])], {"x": t}, ["y"])
    assert bind(g, {"x": t}).consts["y"].tolist() == [16384, 16384]


def test_a_pooling_window_too_wide_to_unfold_stays_on_the_host(tmp_path):
    """Before: a 32 x 32 AveragePool over 1 x 64 x 256 x 256 (within the budget) failed with
    a TD field's overflow that named no node: its unfold (the window is beyond the TD's
    31) would be 6.6 GB.  Now the layer runs on the host, with the reason."""
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[32, 32], name="pool")
    m = fastane.load_model(_onnx(tmp_path / "a.onnx", [pool], [], inputs=[("x", [1, 64, 256, 256])]))
    (layer,) = m.report({"x": (1, 64, 256, 256)}, stats_only=True).layers
    assert layer.placement == "host" and "max_unfold_bytes" in layer.reason


def test_hostile_ranks_and_products_are_one_short_line():
    """Before: a shape of 2000 dimensions quoted whole (a 6.7 KB message), and a product
    beyond any float raised OverflowError from the message's formatting."""
    from fastane.model.tensor import check_size

    with pytest.raises(ModelError, match=r"2000 dimensions, .*\(MAX_RANK = 2\^5\)") as e:
        check_size((2,) * 2000, "input 'x'")
    assert len(str(e.value)) < 300
    with pytest.raises(ModelError, match=r"8\.2e559 elements") as e:
        check_size((1 << 62,) * 30, "input 'x'")
    assert len(str(e.value)) < 300
    # an empty tensor with a huge dimension: refused too (the hosts allocate per axis)
    with pytest.raises(ModelError, match=r"elements along one axis, .*\(MAX_TENSOR_ELEMENTS = 2\^28\)"):
        check_size((1 << 62,) * 30 + (0,), "input 'x'")
    assert check_size((1 << 28, 0), "input 'x'") == 0


def _op_model(path, op, inits, inputs=(), **attrs):
    """A model of one ``op`` node named 'n' on inputs ``x`` (or none) and constants."""
    names = [n for n, _ in inputs] + [t.name for t in inits]
    return _onnx(path, [helper.make_node(op, names, ["y"], name="n", **attrs)], inits, inputs)


@pytest.mark.parametrize(
    "op, kind, limit",
    [
        ("Conv", "conv", "1.0e06 kernel taps"),  # before: 26.5 CPU-s
        ("Conv", "batch0", "1.0e06 kernel taps"),  # a batch of 0: no work counted, the loop ran
        ("ConvTranspose", "deconv", "1.0e06 kernel taps"),  # before: 26.1 s
        ("AveragePool", "pool", "1.0e06 kernel taps"),  # before: 35 s
    ],
)
def test_kernel_taps(tmp_path, op, kind, limit):
    """The host makes one pass per kernel tap: a 1024 x 1024 kernel over a 1 x 1 output
    counted a million multiply-adds and took half a minute."""
    k = 1024
    w = [_c("w", np.ones((1, 1, k, k), np.float32))]
    x = {"conv": [1, 1, k, k], "batch0": [0, 1, k, k], "deconv": [1, 1, 1, 1], "pool": [1, 1, k, k]}[kind]
    if kind == "pool":
        p = _op_model(tmp_path / "k.onnx", op, [], [("x", x)], kernel_shape=[k, k])
    else:
        p = _op_model(tmp_path / "k.onnx", op, w, [("x", x)])
    rc, err = _cli("run", p, "--random", timeout=20)
    assert rc == 2 and _line(err) == (
        f"fastane run: error: node 'n' ({op}): {limit} (one host pass each), beyond fastane's "
        "limit for kernel taps per layer (MAX_KERNEL_TAPS = 2^14)"
    )


def test_einsum_of_more_than_two_operands(tmp_path):
    """Before: ``a,b,c,d->`` of 300 values each (2^32.9, within MAX_EINSUM_WORK) folded at
    bind in numpy's one nested loop for 28.5 s.  Now counted 64 times, and run as pairwise
    contractions when within the limit."""
    inits = [_c(k, np.ones(300, np.float32)) for k in "abcd"]
    p = _op_model(tmp_path / "e.onnx", "Einsum", inits, equation="a,b,c,d->")
    rc, err = _cli("run", p, timeout=20)
    assert rc == 2 and _line(err).endswith(
        "multiply-adds (counted 64 times: more than two operands), beyond fastane's limit for "
        "work per Einsum (MAX_EINSUM_WORK = 2^34)"
    )
    inits = [_c(k, np.full(100, 0.1, np.float32)) for k in "abcd"]
    p = _op_model(tmp_path / "e2.onnx", "Einsum", inits, equation="a,b,c,d->")
    y = fastane.load_model(p)({})["y"]
    assert y.shape == () and abs(float(y) - 1e4) < 10


def test_empty_tensors_with_huge_dimensions(tmp_path):
    """Before: OneHot of empty indices with depth 2^40 ran np.arange(2^40) (MemoryError
    through Model.__call__)."""
    inits = [
        _c("i", np.zeros((0,), np.int64)),
        _c("d", np.array([1 << 40], np.int64)),
        _c("v", np.array([0, 1], np.float32)),
    ]
    p = _op_model(tmp_path / "o.onnx", "OneHot", inits)
    rc, err = _cli("run", p, timeout=30)
    assert rc == 2 and _line(err).endswith(
        "elements along one axis, beyond fastane's limit for elements per tensor (MAX_TENSOR_ELEMENTS = 2^28)"
    )


def test_resize_shrinks_first(tmp_path):
    """Before: x[1, 65536] scaled by [8192, 1/65536] upscaled the first axis first: a
    2^29-element float64 intermediate (4 GiB) for an 8192 x 1 output."""
    p = str(tmp_path / "r.onnx")
    g = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], name="n")],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 65536])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[_c("s", np.array([8192, 1 / 65536], np.float32))],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    x = np.arange(65536, dtype=np.float32)[None]
    np.save(tmp_path / "x.npy", x)
    rc, err = _cli("run", p, "-i", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "y.npz", timeout=60)
    assert rc == 0, err[-2000:]
    y = np.load(tmp_path / "y.npz")["y"]
    assert y.shape == (8192, 1)


def test_a_host_memory_error_is_the_nodes_model_error(monkeypatch):
    """Before: a MemoryError of a host op (the budget is an estimate) escaped bind and
    Model.__call__ as itself (the CLI printed its traceback)."""
    import dataclasses

    from fastane.model.ops.opdef import OPS, host_eval

    def boom(node, x):
        raise MemoryError("Unable to allocate 8.0 TiB")

    monkeypatch.setitem(OPS, "relu", dataclasses.replace(OPS["relu"], host=boom))
    with pytest.raises(ModelError) as e:
        host_eval(Node("relu", "r", ["x"], ["y"], source="Relu"), [np.ones(2, np.float32)])
    assert str(e.value) == "node 'r' (Relu): the host ran out of memory (Unable to allocate 8.0 TiB)"


def test_sweep_binds_before_drawing(tmp_path):
    """Before: ``fastane sweep`` drew its random inputs from the declared shape before any
    check (x[2^20, 2^20]: a MemoryError traceback) and loaded ``--set`` files with np.load
    (a FIFO blocked it for ever)."""
    relu = helper.make_node("Relu", ["x"], ["y"], name="r")
    p = _onnx(tmp_path / "b.onnx", [relu], [], [("x", [1 << 20, 1 << 20]), ("z", [1])])
    rc, err = _cli("sweep", p, "-i", "z", "--range", "0:1:3", timeout=30)
    assert rc == 2 and _line(err).startswith("fastane sweep: error: input 'x': shape (1048576, 1048576)")
    assert _line(err).endswith("(MAX_TENSOR_ELEMENTS = 2^28)")
    p = _onnx(tmp_path / "s.onnx", [relu], [], [("x", [4])])
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    rc, err = _cli("sweep", p, "-i", "x", "--range", "0:1:3", "--set", f"x={fifo}", timeout=30)
    assert rc == 2 and _line(err).endswith("is a FIFO, not a regular file; fastane does not open it")


def test_topk_partitions_and_counts_its_temporaries(tmp_path):
    """Before: TopK sorted the whole axis (three int64 arrays of the input's size) and
    counted 4 bytes an input element: k = 1 of 2^26 values ran for 19 s and 2^24 peaked at
    256 MiB against 128 counted.  Now a partition (2^24: 240 MiB traced, counted 24 bytes
    an element besides the allowance) and 2^26 is refused at bind."""
    from fastane.model.cost import node_cost
    from fastane.model.ops.host import _order, _top

    k = helper.make_node("TopK", ["x", "k"], ["y", "i"], name="t")
    g = helper.make_graph(
        [k],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 26])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        initializer=[_c("k", np.array([1], np.int64))],
    )
    p = str(tmp_path / "t.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    rc, err = _cli("run", p, "--random", timeout=30)
    assert rc == 2 and _line(err).startswith("fastane run: error: node 't' (TopK): 2.1e09 bytes")
    f32 = TensorType(np.dtype(np.float32), (1 << 24,))
    node = Node("topk", "t", ["x", "k"], ["y", "i"], {"axis": -1})
    one = TensorType(np.dtype(np.float32), (1,))
    assert node_cost(node, [f32, None], [one, one]).bytes >= 28 << 24
    # the same indices as the whole axis's stable sort: ties to the lower index, NaN largest
    rng = np.random.default_rng(1)
    for _ in range(300):
        shape = tuple(rng.integers(1, 6, size=rng.integers(1, 3)))
        xf = rng.integers(0, 3, size=shape).astype(np.float32)
        xf[rng.random(shape) < 0.2] = np.nan
        for x in (xf, rng.integers(-2, 2, size=shape)):
            for n in range(shape[-1] + 1):
                for largest in (True, False):
                    assert (_top(x, n, largest) == _order(x, -1, largest)[..., :n]).all()


def test_node_count(tmp_path):
    """Before: 200k Relu nodes (a 5 MB file) loaded in 3.5 s and ran in 27 s (about 130 us
    a node).  Now a file of more than MAX_NODES nodes is refused before conversion, and a
    graph (ONNX or Core ML) of more when it is made."""
    n = budget.MAX_NODES + 1
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    g.node.extend([g.node[0]] * (n - 1))
    p = str(tmp_path / "n.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    msg = "model 'm': 131073 nodes, beyond fastane's limit for nodes per model (MAX_NODES = 2^17)"
    with pytest.raises(ModelError) as e:
        fastane.load_model(p)
    assert str(e.value) == msg
    f32 = TensorType(np.dtype(np.float32), (1,))
    nodes = [Node("relu", f"r{i}", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    with pytest.raises(ModelError) as e:
        _graph(nodes, {"t0": f32}, [f"t{n}"])
    assert (
        str(e.value)
        == "model 'g': 131073 nodes, beyond fastane's limit for nodes per model (MAX_NODES = 2^17)"
    )


def test_coreml_axes_counted_before_listing():
    """Before: Core ML's axes and perm were turned into a list of ints before any check
    (a constant of 10^7 values: seconds, and the whole list in the message)."""
    from fastane.model.frontends.coreml.mil import axis_list as _axes

    with pytest.raises(ModelError) as e:
        _axes(np.zeros(10**7, np.int64), 4, "op 'y' (transpose)", "perm")
    assert str(e.value) == "op 'y' (transpose): perm has 10000000 values for a 4-D tensor"


def test_a_graph_without_weights_is_held_to_the_plan_limit():
    """Planned only (stats-only, one layer at a time): not bound by the run limits, bound by
    MAX_PLAN_WORK."""
    f32 = np.dtype(np.float32)
    t = TensorType(f32, (4096, 4096))
    nodes = [Node("matmul", f"mm{i}", ["a", "b"], [f"y{i}"]) for i in range(5)]  # 5 x 2^36
    plan = Graph("g", {"a": t, "b": t}, [f"y{i}" for i in range(5)], nodes, {}, weights=False)
    bind(plan, {"a": t, "b": t})
    nodes = [Node("matmul", f"mm{i}", ["a", "b"], [f"y{i}"]) for i in range(33)]  # 33 x 2^36 > 2^41
    plan = Graph("g", {"a": t, "b": t}, [f"y{i}" for i in range(33)], nodes, {}, weights=False)
    with pytest.raises(ModelError, match=r"model 'g': .* beyond .*work per plan \(MAX_PLAN_WORK = 2\^41\)"):
        bind(plan, {"a": t, "b": t})


def test_a_nodes_cost_carries_its_kernel_taps():
    # the compute plan costs an op it does not lower as one task, its MACs one-tap when the
    # kernel has at most one tap (a matmul, a 1 x 1 convolution), as the device counts them
    from fastane.model.cost import node_cost

    f16 = np.float16
    x, y = TensorType(f16, (1, 8, 6, 6)), TensorType(f16, (1, 4, 6, 6))
    conv = {"strides": (1, 1), "dilations": None, "groups": 1, "auto_pad": None}
    c3 = Node("conv", "c3", ["x", "w"], ["y"], {**conv, "pads": ((1, 1), (1, 1)), "kernel": (3, 3)})
    c1 = Node("conv", "c1", ["x", "w"], ["y"], {**conv, "pads": ((0, 0), (0, 0)), "kernel": (1, 1)})
    assert node_cost(c3, [x, TensorType(f16, (4, 8, 3, 3))], [y]).taps == 9
    assert node_cost(c1, [x, TensorType(f16, (4, 8, 1, 1))], [y]).taps == 1
    mm = Node("matmul", "mm", ["a", "b"], ["c"])
    assert (
        node_cost(mm, [TensorType(f16, (4, 8)), TensorType(f16, (8, 3))], [TensorType(f16, (4, 3))]).taps == 0
    )
