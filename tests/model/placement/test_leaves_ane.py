"""A predicted compute plan that leaves the ANE (:meth:`ComputePlan.leaves_ane`): the triggers
(fp32 compute precision, which bars the ANE, with every op on the ANE in fp16; ops at risk,
counted apart from the ops off the ANE; a range-shaped input, a "config" rule at any share, more
than ``LEAVE_SHARE`` of the work off the ANE), the silence of a model on the ANE and of the settings without it,
:class:`fastane.LeavesANEWarning` from :meth:`Model.compute_plan`, and the one warning line of
``fastane plan`` and ``fastane run``."""

import json
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.cli import main  # noqa: E402
from fastane.errors import LeavesANEWarning  # noqa: E402
from fastane.model import zoo  # noqa: E402
from fastane.model.placement import compute_plan  # noqa: E402
from fastane.model.placement.predict import RULES  # noqa: E402

RNG = np.random.default_rng(3)
SHAPE = (1, 3, 16, 16)
W = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)


def _mlpackage(path, fp16, edit=None, shape=SHAPE):
    """conv -> relu -> avg_pool 2x2 as an ML Program (:func:`tests.helpers.coreml.conv_relu_pool`)
    on an input of ``shape`` (symbolic axes: any size binds)."""
    pytest.importorskip("coremltools")
    from tests.helpers.coreml import conv_relu_pool

    return conv_relu_pool(path, W, shape, fp16, edit)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> model path: the Core ML program in fp16, in fp32, range-shaped (fp16; H and W
    symbolic, SHAPE the default)."""
    from tests.helpers.coreml import flexible, symbolic

    d = tmp_path_factory.mktemp("leave")
    return {
        "fp16": _mlpackage(d / "fp16.mlpackage", True),
        "fp32": _mlpackage(d / "fp32.mlpackage", False),
        "range": _mlpackage(d / "range.mlpackage", True, flexible("range", SHAPE), symbolic(SHAPE)),
    }


def _onnx(path, nodes, x_shape, out_type=TensorProto.FLOAT, inits=()):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """name -> ONNX path: a ResNet-style net (every op on the ANE), a conv carrying most of the
    work before a 16 x 16 max-pooling window (beyond the ANE's 13), an einsum (host only)
    carrying most of it, a matmul carrying most of it before an arg-max (host only)."""
    d = tmp_path_factory.mktemp("leave")
    net = d / "net.onnx"
    onnx.save(zoo.resnet(seed=0, width=8, size=16), str(net))
    w = RNG.standard_normal((256, 256)).astype(np.float32)
    k = (RNG.standard_normal((8, 64, 3, 3)) * 0.1).astype(np.float32)
    return {
        "net": str(net),
        "pool": _onnx(
            d / "pool.onnx",
            [
                helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[16, 16], strides=[16, 16]),
            ],
            (1, 64, 32, 32),
            inits=[("k", k)],
        ),
        "einsum": _onnx(
            d / "einsum.onnx",
            [
                helper.make_node("Einsum", ["x", "w"], ["e"], equation="ij,jk->ik"),
                helper.make_node("Relu", ["e"], ["y"]),
            ],
            (256, 256),
            inits=[("w", w)],
        ),
        "argmax": _onnx(
            d / "argmax.onnx",
            [helper.make_node("MatMul", ["x", "w"], ["e"]), helper.make_node("ArgMax", ["e"], ["y"], axis=1)],
            (256, 256),
            TensorProto.INT64,
            inits=[("w", w)],
        ),
    }


SHAPES = {"pool": (1, 64, 32, 32), "einsum": (256, 256), "argmax": (256, 256), "net": SHAPE}


def _plan(path, shape=SHAPE, units="ALL", warn=False, chip=None):
    """The plan of ``path`` for input ``x`` of ``shape`` (no warning unless ``warn``)."""
    model = fastane.load_model(path, weights=False)
    return model.compute_plan({"x": shape}, chip=chip, compute_units=units, warn=warn)


def _silent(path, shape=SHAPE, units="ALL"):
    """:func:`_plan` warning, failing on a LeavesANEWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", LeavesANEWarning)
        return _plan(path, shape, units, warn=True)


def _rules_named(plan):
    """Every op off the ANE names a rule of predict.RULES; one on it, none or one that puts it
    at risk (a range-shaped input at its default shape)."""
    for o in plan.ops:
        assert (o.rule in RULES) if o.preferred != "ane" else o.rule in ("", "flexible input shapes"), o


def test_fp32_precision_takes_every_op_off_the_ane(models):
    fp16 = _silent(models["fp16"])
    assert {o.preferred for o in fp16.ops} == {"ane"} and fp16.leaves_ane() is None
    m = fastane.load_model(models["fp32"], weights=False)
    with pytest.warns(LeavesANEWarning, match=r"rule: fp32 compute precision") as rec:
        plan = m.compute_plan({"x": SHAPE})
    assert len(rec) == 1 and rec[0].filename == __file__  # it points at the caller
    # Core ML bars the ANE for ops typed fp32 (coremltools' Typed Execution guide): every op off
    # it, where fastane's run puts the conv and the pooling on the ANE in fp16
    assert {(o.preferred, o.rule) for o in plan.ops} == {("cpu", "fp32 compute precision")}
    assert {o.placement for o in plan.ops if o.label in ("conv_0", "avg_pool_0")} == {"ane"}
    leave = plan.leaves_ane()
    assert plan.table().splitlines()[-1].endswith("work by device: cpu 100.0%")
    n = len(plan.ops)
    assert len(leave.off.ops) == n == leave.total and leave.off.share == pytest.approx(1.0)
    assert leave.off.rules == ["fp32 compute precision"] and leave.at_risk.ops == []
    assert {"conv_0", "relu_0", "avg_pool_0"} <= {o.label for o in leave.off.ops}
    assert leave.message.startswith(
        f"Core ML may run {n} of {n} ops (100.0% of the modelled work) off the ANE"
    )
    _rules_named(plan)


def test_range_shaped_input_leaves(models):
    # away from the default shape: every op off the ANE (Core ML runs the ANE only at the
    # default, developer forums thread 724930)
    plan = _plan(models["range"], (1, 3, 32, 32))
    assert {(o.preferred, o.rule) for o in plan.ops} == {("cpu", "flexible input shapes")}
    assert all("(its default (1, 3, 16, 16))" in o.reason for o in plan.ops)
    leave = plan.leaves_ane()
    assert leave.off.rules == ["flexible input shapes"] and leave.off.share == pytest.approx(1.0)
    assert leave.at_risk.ops == [] and "at risk" not in leave.message
    # the heaviest ops first, four of them named, then how many more
    assert [o.weight for o in leave.off.ops] == sorted((o.weight for o in leave.off.ops), reverse=True)
    msg = leave.message
    assert len(plan.ops) > compute_plan.LEAVE_NAMES and msg.count("\n") == 0
    assert f"and {len(plan.ops) - compute_plan.LEAVE_NAMES} more; rule: flexible input shapes" in msg
    assert msg.startswith(
        f"Core ML may run {len(plan.ops)} of {len(plan.ops)} ops (100.0% of the modelled work)"
    )
    _rules_named(plan)
    # at the default shape: on the ANE, at risk (models with a range input stayed off it)
    at = _plan(models["range"])
    assert {(o.preferred, o.confidence, o.rule) for o in at.ops} == {
        ("ane", "uncertain", "flexible input shapes")
    }
    leave = at.leaves_ane()
    assert leave.off.ops == [] and leave.at_risk.rules == ["flexible input shapes"]
    assert leave.message.startswith(f"Core ML may run 0 of {len(at.ops)} ops off the ANE (ALL on m1); ")
    _rules_named(at)


def test_settings_without_the_ane_never_warn(models):
    for units in ("CPU_ONLY", "CPU_AND_GPU"):
        for name in ("fp32", "range"):
            plan = _silent(models[name], units=units)
            assert plan.leaves_ane() is None and {o.rule for o in plan.ops} == {"compute units"}
    assert _plan(models["range"], units="CPU_AND_NE").leaves_ane().compute_units == "CPU_AND_NE"


def test_a_config_rule_warns_at_any_share(graphs):
    plan = _plan(graphs["pool"], SHAPES["pool"])
    leave = plan.leaves_ane()
    assert [o.label for o in leave.off.ops] == ["y"] and leave.off.rules == ["pooling window > 13"]
    # not by the share (the conv carries most of the work), nor fastane's placement (host)
    assert leave.off.share < compute_plan.LEAVE_SHARE and leave.off.ops[0].placement == "host"
    assert "off the ANE (ALL on m1): 'y'; rule: pooling window > 13" in leave.message
    _rules_named(plan)


def _op(name, preferred, weight, rule="", placement="ane", confidence="likely"):
    return compute_plan.PlannedOp(
        name, name, name, [name], name, preferred, ("cpu", preferred), weight, confidence, "", rule, placement
    )


def test_an_op_fastane_runs_on_the_ane_warns_at_any_share():
    """An op off the ANE by an "op" rule, little of the work: it warns when fastane runs it on
    the ANE, not when fastane runs it on the host."""
    for placement, warns in (("ane", True), ("host", False)):
        ops = [_op("conv", "ane", 0.9), _op("sel", "gpu", 0.1, "not an ANE op", placement)]
        leave = compute_plan.ComputePlan("m", "ALL", "m1", ops).leaves_ane()
        assert (leave is not None) == warns
        if warns:
            assert [o.label for o in leave.off.ops] == ["sel"] and leave.off.share == pytest.approx(0.1)


def test_ops_at_risk_are_counted_apart_from_those_off_the_ane():
    """An op off the ANE by a rule and ops left on it at risk: the line and the JSON give each
    count and share apart; ops at risk warn at any share, an op on the ANE without a rule is
    neither."""
    floor = "flexible input shapes"
    ops = [
        _op("conv", "ane", 0.6, floor, confidence="uncertain"),
        _op("relu", "ane", 0.05, floor, confidence="uncertain"),
        _op("pool", "gpu", 0.25, "pooling window > 13", "host"),
        _op("add", "ane", 0.1),
    ]
    leave = compute_plan.ComputePlan("m", "ALL", "m1", ops).leaves_ane()
    assert [o.label for o in leave.off.ops] == ["pool"] and leave.off.share == pytest.approx(0.25)
    assert [o.label for o in leave.at_risk.ops] == ["conv", "relu"] and leave.at_risk.share == pytest.approx(
        0.65
    )
    assert leave.message == (
        "Core ML may run 1 of 4 ops (25.0% of the modelled work) off the ANE (ALL on m1): 'pool'; rule: "
        "pooling window > 13; 2 ops on it (65.0% of the modelled work) are at risk: 'conv', 'relu'; rule: "
        "flexible input shapes (an estimate; the compute plan gives each op's reason)"
    )
    d = leave.as_dict()
    assert d["total"] == 4 and d["message"] == leave.message
    assert d["off"] == {"ops": ["pool"], "share": pytest.approx(0.25), "rules": ["pooling window > 13"]}
    assert d["at_risk"] == {"ops": ["conv", "relu"], "share": pytest.approx(0.65), "rules": [floor]}
    # one op at risk with little of the work, nothing off the ANE: it warns
    few = [_op("conv", "ane", 0.95), _op("relu", "ane", 0.05, floor, confidence="uncertain")]
    leave = compute_plan.ComputePlan("m", "CPU_AND_NE", "m1", few).leaves_ane()
    assert leave.off.ops == [] and [o.label for o in leave.at_risk.ops] == ["relu"]
    assert leave.message.startswith(
        "Core ML may run 0 of 2 ops off the ANE (CPU_AND_NE on m1); 1 op on it (5.0% of the modelled work) "
        "is at risk: 'relu'; rule: flexible input shapes"
    )


def test_most_of_the_work_off_the_ane_warns(graphs, monkeypatch):
    # on the M1 the relu after the einsum is a program with no matrix product, on the CPU at
    # this size (the non-matrix program floor, torchnative's NPU2.md section 7.1): a "config"
    # rule, which warns whatever the share
    m1 = _plan(graphs["einsum"], SHAPES["einsum"]).leaves_ane()
    assert m1.off.rules == ["host-only op", "non-matrix program floor"] and m1.off.share == 1
    # on the M4 (no such floor reported) the relu stays: the share decides
    einsum = _plan(graphs["einsum"], SHAPES["einsum"], chip="m4")
    leave = einsum.leaves_ane()
    assert leave.off.rules == ["host-only op"] and leave.off.share > compute_plan.LEAVE_SHARE
    # an op the ANE does not run, with little of the work: no warning
    argmax = _plan(graphs["argmax"], SHAPES["argmax"])
    off = [o for o in argmax.ops if o.preferred != "ane"]
    assert [o.rule for o in off] == ["host-only op"] and argmax.leaves_ane() is None
    # the threshold is LEAVE_SHARE's
    monkeypatch.setattr(compute_plan, "LEAVE_SHARE", leave.off.share + 0.01)
    assert einsum.leaves_ane() is None
    for plan in (einsum, argmax):
        _rules_named(plan)


def test_a_model_on_the_ane_is_silent(graphs, capsys):
    plan = _silent(graphs["net"])
    assert {o.preferred for o in plan.ops} == {"ane"} and plan.leaves_ane() is None
    assert json.loads(plan.to_json())["leavesANE"] is None
    assert main(["plan", graphs["net"], "--shape", "x=1x3x16x16"]) == 0
    assert capsys.readouterr().err == ""
    argv = ["run", graphs["net"], "--random", "--shape", "x=1x3x16x16", "--compute-units", "ALL"]
    assert main(argv + ["--report", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines()[1].split()[:4] == ["layer", "op", "place", "Core"]
    assert main(argv) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_warning_class_is_filterable(models):
    assert issubclass(LeavesANEWarning, UserWarning) and fastane.LeavesANEWarning is LeavesANEWarning
    m = fastane.load_model(models["range"], weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LeavesANEWarning)
        with pytest.raises(LeavesANEWarning, match="flexible input shapes"):
            m.compute_plan({"x": SHAPE})
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=LeavesANEWarning)
        m.compute_plan({"x": SHAPE})
        m.compute_plan({"x": SHAPE}, warn=False)
    assert not [w for w in rec if issubclass(w.category, LeavesANEWarning)]


def _cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, err


def test_plan_prints_one_warning_line(models, capsys):
    out, err = _cli(capsys, "plan", models["fp32"])
    (line,) = err.splitlines()
    assert line.startswith(
        "fastane plan: warning: Core ML may run 3 of 3 ops (100.0% of the modelled work) off the ANE (ALL on m1): "
    )
    assert "'conv_0'" in line
    assert line.endswith(
        "rule: fp32 compute precision (an estimate; the compute plan gives each op's reason)"
    )
    assert "compute plan of" in out and "warning" not in out
    assert _cli(capsys, "plan", models["fp32"], "--quiet")[1] == ""
    out, err = _cli(capsys, "plan", models["fp32"], "--json", "-q")
    d = json.loads(out)
    assert err == "" and d["leavesANE"]["off"]["rules"] == ["fp32 compute precision"]
    assert d["leavesANE"]["at_risk"] == {"ops": [], "share": 0, "rules": []}
    assert d["leavesANE"]["message"] == line.removeprefix("fastane plan: warning: ")
    ops = d["modelStructure"]["program"]["functions"]["main"]["block"]["operations"]
    assert {o["fastane"]["rule"] for o in ops} == {"fp32 compute precision"}
    assert {o["fastane"]["placement"] for o in ops} == {"ane"}


def test_run_prints_one_warning_line(models, capsys):
    _, err = _cli(capsys, "run", models["range"], "--random", "--shape", "x=1x3x16x16")
    lines = err.splitlines()
    assert [ln for ln in lines if "warning" in ln] == lines[-1:]
    assert lines[-1].startswith("fastane run: warning: ") and "rule: flexible input shapes" in lines[-1]
    assert _cli(capsys, "run", models["range"], "--random", "--shape", "x=1x3x16x16", "-q")[1] == ""
    # --report: the Core ML column (device, "?" when uncertain, the rule) and the warning
    out, err = _cli(capsys, "run", models["fp32"], "--random", "--report", "-q")
    assert err == "" and "cpu? fp32 compute precision" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("conv_0 "))
    assert row.split()[:5] == ["conv_0", "conv+relu", "ane", "cpu?", "fp32"]
    out, err = _cli(capsys, "run", models["fp32"], "--random", "--json")
    pred = json.loads(out)["predicted_placement"]
    assert pred["leaves_ane"]["off"]["rules"] == ["fp32 compute precision"]
    assert {x["rule"] for x in pred["layers"]} == {"fp32 compute precision"}
    assert err.splitlines()[-1] == "fastane run: warning: " + pred["leaves_ane"]["message"]
    # the plan a run reports is the one fastane plan prints: the same ops, devices and rules
    m = fastane.load_model(models["fp32"], weights=False)
    same = m.compute_plan({"x": SHAPE}, warn=False)
    assert pred["leaves_ane"] == same.leaves_ane().as_dict()


def test_the_infrequent_reshape_hint_keeps_other_shapes_at_risk(models, capsys):
    """Loaded with MLOptimizationHints.reshapeFrequency = .infrequent (iOS 17.4 / macOS 14.4),
    a range-shaped input away from its default may stay on the ANE (coremltools' Flexible
    Input Shapes guide): at risk, where the default hint takes it off."""
    m = fastane.load_model(models["range"], weights=False)
    shape = {"x": (1, 3, 32, 32)}
    plan = m.compute_plan(shape, warn=False, reshape_frequency="infrequent")
    assert {(o.preferred, o.confidence, o.rule) for o in plan.ops} == {
        ("ane", "uncertain", "flexible input shapes")
    }
    assert all("'infrequent'" in o.reason for o in plan.ops) and plan.reshape_frequency == "infrequent"
    assert {o.preferred for o in m.compute_plan(shape, warn=False).ops} == {"cpu"}
    out, err = _cli(
        capsys, "plan", models["range"], "--shape", "x=1x3x32x32", "--reshape-frequency", "infrequent"
    )
    assert "reshape frequency infrequent" in out.splitlines()[0] and "at risk" in err
    out, _ = _cli(
        capsys,
        "plan",
        models["range"],
        "--json",
        "-q",
        "--shape",
        "x=1x3x32x32",
        "--reshape-frequency",
        "INFREQUENT",
    )
    assert json.loads(out)["reshapeFrequency"] == "infrequent"
    with pytest.raises(
        ValueError, match="reshape frequency 'sometimes': expected one of frequent, infrequent"
    ):
        m.compute_plan(shape, reshape_frequency="sometimes")
    assert main(["plan", models["range"], "--reshape-frequency", "sometimes"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("fastane plan: ") and "expected one of frequent, infrequent" in line
