"""The host budget (:mod:`fastane.model.budget`): models that ask too much are refused at
bind time with the limit's name and value, in ``run`` and ``roofline`` alike; models
within it run, with ``--report``, in 4 GiB of address space.

The command-line reproducers run in a child with a 4 GiB address-space limit and a
timeout: before the budget they hung or exhausted memory."""

import os
import resource
import subprocess
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import ModelError  # noqa: E402
from fastane.model import budget, zoo  # noqa: E402
from fastane.model.graph import Graph, Node, TensorType, bind  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AS_LIMIT = 4 << 30
CLI = "import sys; from fastane.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(*argv, timeout=120):
    """``fastane ARGV`` in a child limited to 4 GiB of address space: (status, stderr)."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))

    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, "-c", CLI, *map(str, argv)],
        cwd=ROOT,
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stderr


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


def _line(err):
    lines = [ln for ln in err.splitlines() if ln.startswith("fastane")]
    assert lines and "Traceback" not in err, err[-2000:]
    return lines[-1]


# ------------------------------------------------------------------------ the limits
def test_limits_and_old_names():
    from fastane.model.graph import MAX_FOLD_ELEMENTS, MAX_TENSOR_ELEMENTS
    from fastane.model.ops.host import MAX_EINSUM_WORK
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


def test_legitimate_models_fit():
    """ResNet-50 at 224 x 224 and a GPT-2-sized block (d 768, 12 heads) at 1024 tokens bind."""
    fastane.load_model(zoo.resnet50(), weights=False).bind({"x": (1, 3, 224, 224)})
    m = fastane.load_model(zoo.transformer(d=768, heads=12, seq=1024), weights=False)
    m.bind({"x": (1, 1024, 768)})


def test_report_errors_in_chunks_match():
    from fastane.model.run.model import _errors

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((3, 1000)).astype(np.float32)
    ref[0, :5] = [np.inf, np.nan, 0, 1e-6, -np.inf]
    y = (ref + rng.standard_normal(ref.shape) * 1e-3).astype(np.float16)
    y[0, 1] = np.nan
    assert _errors(y, ref, chunk=7) == _errors(y, ref)


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

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=ct.target.iOS17,
            compute_precision=ct.precision.FLOAT32,
        )
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
    assert check_size((1 << 62,) * 30 + (0,), "input 'x'") == 0


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
