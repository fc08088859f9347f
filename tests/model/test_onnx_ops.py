"""Every ONNX op the importer claims (``SUPPORTED``) is run by a test: a one-node model per
line of :data:`CASES` here, or ONNX's own node tests selected by test_onnx_backend.py.

Each line builds the node with ``onnx.helper`` and compares fastane with onnx's reference
implementation (``onnx.reference.ReferenceEvaluator``):

* the fp32 host path (``Model.reference``, what a host layer computes and what the report
  measures ANE layers against): within ``1e-5`` relative (``1e-6`` absolute near zero);
  integer and boolean outputs equal;
* the run (ANE layers and host layers, float outputs returned as fp16): every layer of the
  report within its tolerance, and each float output within 1 ulp of fp16 of the reference
  (the output's rounding) plus, for each ANE layer of a table or MAC kind, that kind's
  tolerance (``fastane.model.run.model.TOLERANCE``, relative to the output's largest
  value).  Float inputs hold fp16 values, so an exact ANE op rounds only its result.  An
  integer output of an ANE layer (the INT8 path of the QLinear ops) within one
  quantization step (docs/models.md), of the host equal.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

try:
    from onnx.reference import ReferenceEvaluator  # noqa: E402
except ImportError:  # pragma: no cover - onnx < 1.13
    ReferenceEvaluator = None

import fastane  # noqa: E402
from fastane.model.frontends.onnx.importer import SUPPORTED, docs_table  # noqa: E402
from fastane.model.run.model import TOLERANCE  # noqa: E402

from tests.helpers.onnx_backend import selected_op_types  # noqa: E402

_RNG = np.random.default_rng(7)


def x(*shape, lo=-3.0, hi=3.0, dtype=np.float32):
    """A graph input of ``shape`` with values in ``[lo, hi)`` (fp16 values for a float)."""
    v = _RNG.uniform(lo, hi, shape)
    v = v.astype(np.float16).astype(dtype) if np.dtype(dtype).kind == "f" else np.floor(v).astype(dtype)
    return ("input", np.asarray(v))


def k(value, dtype=np.float32):
    """A constant input (an initializer)."""
    return ("const", np.asarray(value, dtype))


def w(*shape):
    """A constant weight of ``shape``, values in [-0.6, 0.6)."""
    return k(_RNG.uniform(-0.6, 0.6, shape))


def rnn(op, nd, seq=5, batch=2, inp=3, h=4, layout=0, states=0, lens=None, **attrs):
    """A recurrent op's line: ``nd`` directions, biases, ``states`` initial states (and
    LSTM's peepholes with both), ``lens`` sequence lengths (None: absent)."""
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    st = (batch, nd, h) if layout else (nd, batch, h)
    ins = [x(*xs), w(nd, g * h, inp), w(nd, g * h, h), w(nd, 2 * g * h)]
    ins += [None if lens is None else k(lens, np.int32)] + [x(*st) for _ in range(states)]
    ins += [w(nd, 3 * h)] if op == "LSTM" and states == 2 else []
    direction = (
        {1: "forward", 2: "bidirectional"}[nd] if attrs.get("direction") is None else attrs.pop("direction")
    )
    return Case(
        op,
        {"hidden_size": h, "layout": layout, "direction": direction, **attrs},
        ins,
        22,
        3 if op == "LSTM" else 2,
    )


class Case(NamedTuple):
    op: str
    attrs: dict
    inputs: list
    opset: int = 21
    n_out: int = 1
    #: the node's inputs: the first ``n_in`` (None: all; the others read by its subgraphs)
    n_in: int | None = None


def body(nodes, inputs, outputs):
    """A subgraph of ``nodes`` with ``inputs`` and ``outputs`` given as ``(name, ONNX
    element type, shape)``; it may read the case's tensors (``i0``, ``i1`` ...)."""
    vis = [[helper.make_tensor_value_info(*v) for v in vs] for vs in (inputs, outputs)]
    return helper.make_graph(nodes, "body", *vis)


def n(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


#: If branches reading the case's ``i1`` (each names its own ``t``)
THEN = body([n("Add", ["i1", "i1"], ["t"]), n("Relu", ["t"], ["y"])], [], [("y", T.FLOAT, [2, 3])])
ELSE = body([n("Mul", ["i1", "i1"], ["t"])], [], [("t", T.FLOAT, [2, 3])])
#: a Loop body: v + i3 + the iteration number, carried, and its negation stacked (one axis:
#: the reference concatenates the values along their first axis, np.vstack, where ONNX's
#: shape inference and onnxruntime stack them on a new one: the same for a 1-D value)
LOOP = body(
    [
        n("Identity", ["c"], ["c_out"]),
        n("Cast", ["it"], ["itf"], to=T.FLOAT),
        n("Add", ["v", "i3"], ["a"]),
        n("Add", ["a", "itf"], ["v_out"]),
        n("Neg", ["v_out"], ["s_out"]),
    ],
    [("it", T.INT64, []), ("c", T.BOOL, []), ("v", T.FLOAT, [3])],
    [("c_out", T.BOOL, []), ("v_out", T.FLOAT, [3]), ("s_out", T.FLOAT, [3])],
)
#: a while loop: doubles v until the iteration number reaches 4
WHILE = body(
    [
        n("Constant", [], ["four"], value=numpy_helper.from_array(np.array(4, np.int64))),
        n("Less", ["it", "four"], ["c_out"]),
        n("Add", ["v", "v"], ["v_out"]),
    ],
    [("it", T.INT64, []), ("c", T.BOOL, []), ("v", T.FLOAT, [2, 3])],
    [("c_out", T.BOOL, []), ("v_out", T.FLOAT, [2, 3])],
)
#: a Scan body: a running sum, and each step's sum times the case's i2
SCAN = body(
    [n("Add", ["s", "xi"], ["s_out"]), n("Mul", ["s_out", "i2"], ["y"])],
    [("s", T.FLOAT, [2]), ("xi", T.FLOAT, [2])],
    [("s_out", T.FLOAT, [2]), ("y", T.FLOAT, [2])],
)

#: one line per ONNX op not run by the backend suite's selection (and a few that are)
CASES = [
    Case("Softplus", {}, [x(2, 3, 4)]),
    Case("HardSwish", {}, [x(2, 3, 4, lo=-5, hi=5)]),
    Case("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [x(2, 3, 4)]),
    Case("Elu", {"alpha": 0.7}, [x(2, 3, 4)]),
    Case("Erf", {}, [x(2, 3, 4)]),
    Case("Log", {}, [x(2, 3, 4, lo=0.1, hi=5)]),
    # the reductions of a function, imported as their compositions (COMPOSED_REDUCTIONS):
    # axes as an input (opset 18) and as an attribute (opset 13)
    Case("ReduceLogSumExp", {"keepdims": 1}, [x(2, 3, 8), k([-1], np.int64)], 18),
    Case("ReduceLogSumExp", {"axes": [1], "keepdims": 0}, [x(2, 3, 8)], 13),
    Case("ReduceSumSquare", {"keepdims": 1}, [x(2, 3, 8, lo=-1, hi=1), k([-1], np.int64)], 18),
    Case("ReduceL2", {"axes": [2], "keepdims": 1}, [x(2, 3, 8)], 13),
    Case("ReduceL2", {"keepdims": 0}, [x(2, 3, 8), k([1, 2], np.int64)], 18),
    Case("ReduceLogSum", {"keepdims": 1}, [x(2, 3, 8, lo=0.5, hi=2), k([-1], np.int64)], 18),
    Case("ReduceL1", {"axes": [-1], "keepdims": 1}, [x(2, 3, 8)], 13),
    Case("Floor", {}, [x(2, 3, 4)]),
    Case("Shrink", {"bias": 0.5, "lambd": 1.0}, [x(2, 3, 4)]),
    Case("Ceil", {}, [x(2, 3, 4)]),
    Case("PRelu", {}, [x(1, 3, 4, 4), k(_RNG.uniform(0, 1, (3, 1, 1)))]),
    Case("Sub", {}, [x(2, 3, 4), x(2, 3, 4)]),
    Case("Min", {}, [x(2, 3, 4), x(2, 3, 4)]),
    Case("Max", {}, [x(2, 3, 4), x(2, 3, 4)]),
    Case("Sum", {}, [x(2, 3), x(2, 3), x(2, 3)]),
    # integer elementwise (T5's relative-position buckets): exactly, on the host
    Case("Abs", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Neg", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Add", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), x(3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Mul", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case(
        "Div",
        {},
        [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), k(_RNG.choice([-7, -3, -1, 2, 5], (3, 4)), np.int64)],
    ),
    Case("Min", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Max", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Relu", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int32)]),
    Case("Sign", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("Clip", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), k(-7, np.int64), k(9, np.int64)]),
    Case("Shrink", {"bias": 2.0, "lambd": 3.0}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64)]),
    Case("PRelu", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int64), k([2, -1, 3, 0], np.int64)]),
    Case("Sub", {}, [x(2, 3, 4, lo=-50, hi=50, dtype=np.int32), x(2, 3, 4, lo=-50, hi=50, dtype=np.int32)]),
    Case("Pow", {}, [x(2, 3, 4, lo=-9, hi=9, dtype=np.int64), k(_RNG.integers(0, 4, (4,)), np.int64)]),
    Case("Cast", {"to": T.INT32}, [x(2, 3, 4, lo=-9, hi=9)]),
    Case("Dropout", {}, [x(2, 3, 4)]),
    Case("Identity", {}, [x(2, 3)]),
    Case("GlobalMaxPool", {}, [x(1, 3, 4, 5)]),
    Case("Shape", {"start": 1}, [x(2, 3, 4)]),
    Case("Size", {}, [x(2, 3, 4)]),
    Case(
        "Slice",
        {},
        [x(4, 6), k([1, 0], np.int64), k([3, 6], np.int64), k([0, 1], np.int64), k([1, 2], np.int64)],
    ),
    Case("Slice", {"starts": [1], "ends": [3], "axes": [1]}, [x(4, 6)], opset=9),
    Case("Pad", {"mode": "reflect"}, [x(1, 2, 4, 4), k([0, 0, 1, 2, 0, 0, 2, 1], np.int64)]),
    Case("ConstantOfShape", {}, [k([2, 3], np.int64)]),
    Case(
        "ConstantOfShape",
        {"value": numpy_helper.from_array(np.array([7], np.int32))},
        [k([4, 0, 2], np.int64)],
    ),
    Case(
        "ConstantOfShape", {"value": numpy_helper.from_array(np.array([-1.5], np.float32))}, [k([], np.int64)]
    ),
    Case("NonZero", {}, [k([[0, 1.5, 0], [2, 0, -1], [0, 0, 0]])]),
    Case("InstanceNormalization", {"epsilon": 1e-3}, [x(2, 3, 4, 5), x(3), x(3)]),
    Case("InstanceNormalization", {}, [x(2, 3, 7), k([0.5, -1, 2]), k([0, 1, -1])]),
    Case("GroupNormalization", {"num_groups": 2}, [x(2, 4, 3, 3), x(4), x(4)]),
    Case("GroupNormalization", {"num_groups": 3, "epsilon": 1e-2}, [x(1, 6, 5), x(3), x(3)], opset=18),
    rnn("LSTM", 1),
    rnn("LSTM", 2, layout=1, states=2, lens=[5, 5]),
    rnn("LSTM", 1, direction="reverse", states=1),
    rnn("GRU", 1),
    rnn("GRU", 2, linear_before_reset=1, states=1, lens=[5, 5]),
    rnn("GRU", 1, layout=1, direction="reverse"),
    rnn("RNN", 1, states=1),
    rnn("RNN", 2, layout=1),
    Case("Constant", {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))}, []),
    Case("DynamicQuantizeLinear", {}, [x(2, 3, 4, lo=-2, hi=5)], n_out=3),
    Case("DynamicQuantizeLinear", {}, [x(3, 4, lo=0.5, hi=4)], n_out=3),
    Case(
        "MatMulInteger",
        {},
        [x(2, 3, 5, lo=0, hi=255, dtype=np.uint8), k(_RNG.integers(-128, 127, (5, 4)), np.int8)]
        + [k(131, np.uint8), k([3, -5, 0, 127], np.int8)],
    ),
    Case(
        "MatMulInteger",
        {},
        [x(4, 6, lo=-128, hi=127, dtype=np.int8), x(6, 3, lo=-128, hi=127, dtype=np.int8)],
    ),
    Case(
        "ConvInteger",
        {"pads": [1, 0, 1, 2], "strides": [1, 2], "group": 2},
        [x(1, 4, 5, 6, lo=0, hi=255, dtype=np.uint8), k(_RNG.integers(0, 255, (6, 2, 3, 3)), np.uint8)]
        + [k(100, np.uint8), k([7, 0, 255, 128, 3, 90], np.uint8)],
    ),
    Case(
        "ConvInteger",
        {},
        [x(2, 3, 9, lo=-128, hi=127, dtype=np.int8), k(_RNG.integers(-128, 127, (2, 3, 4)), np.int8)],
    ),
    Case("QuantizeLinear", {}, [x(2, 3, 4), k(0.05), k(3, np.uint8)]),
    Case(
        "DequantizeLinear",
        {"axis": 1},
        [x(2, 3, 4, lo=-100, hi=100, dtype=np.int8), k([0.1, 0.2, 0.3]), k([1, -2, 0], np.int8)],
    ),
    Case(
        "QLinearConv",
        {"pads": [1, 1, 1, 1]},
        [
            *(x(1, 2, 5, 5, lo=0, hi=255, dtype=np.uint8), k(0.02), k(128, np.uint8)),
            *(k(_RNG.integers(-50, 50, (3, 2, 3, 3)), np.int8), k(0.01), k(0, np.int8)),
            *(k(0.05), k(120, np.uint8), k([100, -200, 300], np.int32)),
        ],
    ),
    Case(
        "QLinearMatMul",
        {},
        [
            *(x(2, 4, lo=0, hi=255, dtype=np.uint8), k(0.02), k(128, np.uint8)),
            *(k(_RNG.integers(-50, 50, (4, 3)), np.int8), k(0.01), k(0, np.int8)),
            *(k(0.05), k(120, np.uint8)),
        ],
    ),
    # control flow: a condition known at run (host), or at bind (the branch inlined)
    Case("If", {"then_branch": THEN, "else_branch": ELSE}, [x(lo=1, hi=2, dtype=np.bool_), x(2, 3)], n_in=1),
    Case("If", {"then_branch": THEN, "else_branch": ELSE}, [x(lo=0, hi=1, dtype=np.bool_), x(2, 3)], n_in=1),
    Case("If", {"then_branch": THEN, "else_branch": ELSE}, [k(True, np.bool_), x(2, 3)], 11, n_in=1),
    Case("Loop", {"body": LOOP}, [k(3, np.int64), k(True, np.bool_), x(3), x(3)], n_out=2, n_in=3),
    Case("Loop", {"body": WHILE}, [k(10, np.int64), k(True, np.bool_), x(2, 3)], opset=11),
    Case("Loop", {"body": WHILE}, [x(lo=10, hi=11, dtype=np.int64), x(lo=1, hi=2, dtype=np.bool_), x(2, 3)]),
    Case("Scan", {"body": SCAN, "num_scan_inputs": 1}, [x(2), x(3, 2), x(2)], n_out=2, n_in=2),
]


def _model(case: Case):
    names, inputs, inits, feeds = [], [], [], {}
    for i, given in enumerate(case.inputs):
        if given is None:  # an omitted optional input
            names.append("")
            continue
        role, v = given
        name = f"i{i}"
        names.append(name)
        if role == "const":
            inits.append(numpy_helper.from_array(v, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(v.dtype)
            inputs.append(helper.make_tensor_value_info(name, elem, v.shape))
            feeds[name] = v
    outs = [f"y{i}" for i in range(case.n_out)]
    node = helper.make_node(case.op, names[: case.n_in], outs, name=f"n_{case.op}", **case.attrs)
    graph = helper.make_graph(
        [node], "t", inputs, [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outs], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)]), feeds


def _ulp16(v):
    a = np.minimum(np.abs(np.asarray(v, np.float64)), 65504).astype(np.float16)
    return np.maximum(np.spacing(a).astype(np.float64), 2.0**-24)


def _check_close(y, ref, allow, what):
    y, ref = np.asarray(y), np.asarray(ref)
    assert y.shape == ref.shape, (what, y.shape, ref.shape)
    if ref.dtype.kind != "f":
        diff = np.abs(y.astype(np.int64) - ref.astype(np.int64))
        assert not (diff > allow).any(), f"{what}: {y} against {ref}"
        return
    err = np.abs(y.astype(np.float64) - ref.astype(np.float64))
    bad = ~(err <= allow)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {err.size} beyond; worst {err.max()} (allowed {np.min(allow)})"
    )


@pytest.mark.skipif(ReferenceEvaluator is None, reason="the installed onnx has no onnx.reference")
@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{c.opset}" for c in CASES])
def test_op_against_onnx_reference(case):
    proto, feeds = _model(case)
    ref = ReferenceEvaluator(proto).run(None, feeds)
    model = fastane.load_model(proto)
    host = model.reference(feeds)
    rep = model.report(feeds)
    assert [r.layer.name for r in rep.layers if not r.ok] == []
    extra = sum(
        TOLERANCE[r.layer.kind]
        for r in rep.layers
        if r.placement == "ane" and r.layer.kind in ("table", "mac")
    )
    steps = int(any(r.placement == "ane" for r in rep.layers))
    for name, r in zip(model.outputs, ref):
        r = np.asarray(r)
        _check_close(host[name], r, 1e-5 * np.abs(r) + 1e-6 if r.dtype.kind == "f" else 0, f"{name} (host)")
        top = float(np.abs(r).max()) if r.dtype.kind == "f" and r.size else 0.0
        _check_close(
            rep.values[name],
            r,
            _ulp16(r) + 1e-5 * np.abs(r) + extra * top if r.dtype.kind == "f" else steps,
            f"{name} (run)",
        )


def test_every_supported_op_is_tested():
    """Each ONNX op type the importer claims has a line in :data:`CASES` or runs in the
    backend suite's selection (tests/helpers/onnx_backend.py)."""
    tested = {c.op for c in CASES} | selected_op_types()
    assert sorted(set(SUPPORTED) - tested) == []


def test_docs_table_is_the_records():
    """docs/models.md's table of ONNX ops is the one the records give (the script's
    ``--check``), and it names exactly the ops of SUPPORTED."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, str(root / "scripts" / "onnx_ops_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    named = set(re.findall(r"(?:\| |, )([A-Z][A-Za-z0-9]*) \(", "\n".join(docs_table()[2:])))
    assert sorted(named) == SUPPORTED


def test_an_onnx_name_is_imported_by_one_record():
    """register_op refuses a second record for an ONNX op type at overlapping opsets (and
    registers nothing); an opset range selects one of two records."""
    from fastane.model.ops.opdef import OPS, OnnxName, register_op, same_type

    with pytest.raises(ValueError, match="ONNX Relu is already imported as relu"):
        register_op("relu_again", same_type, onnx=["Relu"])
    with pytest.raises(ValueError, match="already imported"):
        register_op("relu_again", same_type, onnx=[OnnxName("Relu", since=13, until=14)])
    assert "relu_again" not in OPS
    old, new = OnnxName("Relu", until=13), OnnxName("Relu", since=13)
    assert [old.covers(v) for v in (1, 12, 13, 21)] == [True, True, False, False]
    assert [new.covers(v) for v in (1, 12, 13, 21)] == [False, False, True, True]
