"""The placement rules read each compile limit from the chip's ANE generation
(:class:`fastane.roofline.chips.Family`): the W/H extent (16384 up to the M3's generation,
65536 from the M4's), N and C, the rank, one core's KMem and the size floor.  Changing a
family's figure changes the prediction; a figure measured on that generation decides
"likely", another "uncertain"."""

from dataclasses import replace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.model.placement.predict import predict  # noqa: E402
from fastane.roofline import chips  # noqa: E402


def _save(tmp_path, name, nodes, inputs, inits=()):
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=list(inits),
    )
    p = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


def _on(path, shapes, chip, op):
    """The prediction of the layer holding ``op`` on ``chip`` under CPU_AND_NE."""
    bound, layers = fastane.load_model(str(path), weights=False).bind(shapes)
    return next(
        p
        for lay, p in zip(layers, predict(layers, bound, "CPU_AND_NE", chip))
        if op in {n.op for n in lay.nodes}
    )


def _decision(path, shapes, chip, op):
    """``(unit, confidence)`` of :func:`_on`."""
    p = _on(path, shapes, chip, op)
    return p.unit, p.confidence


def _relu(tmp_path, shape):
    return _save(
        tmp_path, f"relu{'x'.join(map(str, shape))}", [helper.make_node("Relu", ["x"], ["y"])], [("x", shape)]
    )


def _with(chip, **figures):
    """``chip`` whose family has ``figures`` replaced."""
    chip = chips.get(chip)
    return replace(chip, family=replace(chip.family, **figures))


def _measured(v, unit="elements"):
    return chips.Figure(v, unit, "measured", "test")


#: the lone relu, sin and cos of these tests are programs with no matrix product, which the M1's
#: generation sends to the CPU at their sizes (``Family.no_matrix``, torchnative's M1): the
#: tests of the other rules read an M1 without that floor, and say what the M1 itself does
_NO_FLOOR = {"no_matrix": None}


@pytest.mark.parametrize("width", [16385, 20000, 65536])
def test_a_row_between_16384_and_65536_follows_the_generation(tmp_path, width):
    path = _relu(tmp_path, [1, 1, 1, width])
    shapes = {"x": (1, 1, 1, width)}
    # up to the M3's generation the compiler refuses it (measured there)
    for key in ("m1", "m2", "m3", "m3-ultra"):
        p = _on(path, shapes, key, "relu")
        assert (p.unit, p.confidence) == ("cpu", "likely"), key
        assert f"W = {width} > 16384" in p.reason and chips.get(key).family.name in p.reason
    # from the M4's it takes W up to 65536: on the ANE, uncertain (no Core ML report)
    for key in ("m4", "m4-max", "m5", "m5-max"):
        p = _on(path, shapes, key, "relu")
        assert (p.unit, p.confidence) == ("ane", "uncertain"), key
        assert "up to 65536" in p.reason
    # a chip of no known generation: off the ANE, uncertain, the M1's limit assumed
    p = _on(path, shapes, "a17-pro", "relu")
    assert (p.unit, p.confidence) == ("cpu", "uncertain")
    assert "the M1's limit; A17 Pro's is not known" in p.reason


def test_the_extent_is_read_from_the_family_record(tmp_path):
    path = _relu(tmp_path, [1, 1, 1, 20000])
    shapes = {"x": (1, 1, 1, 20000)}
    assert _on(path, shapes, "m3", "relu").unit == "cpu"
    wider = _with("m3", max_extent=_measured(65536))
    assert _on(path, shapes, wider, "relu").unit == "ane"
    narrower = _with("m5", max_extent=_measured(16384))
    assert _decision(path, shapes, narrower, "relu") == ("cpu", "likely")


def test_beyond_65536_the_measured_generation_is_sure(tmp_path):
    path = _relu(tmp_path, [1, 1, 1, 70000])
    shapes = {"x": (1, 1, 1, 70000)}
    # H17 (the M5's): 65536 measured by ANEForge; H16 (the M4's): the same tier, derived
    assert chips.get("m5").family.max_extent.kind == "measured"
    assert _decision(path, shapes, "m5", "relu") == ("cpu", "likely")
    assert _decision(path, shapes, "m4", "relu") == ("cpu", "uncertain")
    # the reason names the generation's limit, not SPEC 5's 16384
    for key in ("m4", "m5"):
        reason = _on(path, shapes, key, "relu").reason
        assert "W = 70000 > 65536" in reason and "> 16384" not in reason, key


def test_channels_and_rank_are_read_from_the_family_record(tmp_path):
    c = _relu(tmp_path, [1, 70000, 1, 1])
    assert _on(c, {"x": (1, 70000, 1, 1)}, "m1", "relu").confidence == "likely"
    m2 = _on(c, {"x": (1, 70000, 1, 1)}, "m2", "relu")  # C measured on the M2's generation, N not
    assert (m2.unit, m2.confidence) == ("cpu", "uncertain") and "C = 70000 > 65536" in m2.reason
    assert (
        _on(c, {"x": (1, 70000, 1, 1)}, _with("m2", max_channels=_measured(65536)), "relu").confidence
        == "likely"
    )
    wide = _with("m1", max_channels=_measured(1 << 17), **_NO_FLOOR)
    assert _on(c, {"x": (1, 70000, 1, 1)}, wide, "relu").unit == "ane"
    r = _relu(tmp_path, [1, 1, 2, 2, 2])  # rank 5: within the M1's five dimensions
    assert _on(r, {"x": (1, 1, 2, 2, 2)}, _with("m1", **_NO_FLOOR), "relu").unit == "ane"
    # the M1 itself: a lone relu of 8 elements is below its non-matrix program floor
    p = _on(r, {"x": (1, 1, 2, 2, 2)}, "m1", "relu")
    assert (p.unit, p.confidence, p.rule) == ("cpu", "likely", "non-matrix program floor")
    p = _on(r, {"x": (1, 1, 2, 2, 2)}, _with("m1", max_rank=_measured(4, "dims")), "relu")
    assert (p.unit, p.reason) == ("cpu", "rank 5 > 4")


def test_kmem_is_read_from_the_family_record(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 64, 3, 3), np.float32), "w")  # 64 x 3 x 3 x 2 = 1152 B a channel
    path = _save(
        tmp_path,
        "conv",
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [("x", [1, 64, 8, 8])],
        [w],
    )
    shapes = {"x": (1, 64, 8, 8)}
    assert "KMem" not in _on(path, shapes, "m1", "conv").reason
    p = _on(path, shapes, _with("m1", kmem_core_bytes=_measured(1024, "B")), "conv")
    assert (p.unit, p.confidence) == ("ane", "uncertain") and "exceeds one core's KMem (1 KiB)" in p.reason
    p = _on(
        path,
        shapes,
        _with("m2", kmem_core_bytes=replace(chips.FAMILIES["h14"].kmem_core_bytes, value=1024)),
        "conv",
    )
    assert "the M1's limit; M2's is not known" in p.reason


def _matmul64(tmp_path):
    """A 64 x 64 by 64 x 64 MatMul: ``(path, shapes)``."""
    path = _save(
        tmp_path,
        "mm",
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [64, 64]), ("b", [64, 64])],
    )
    return path, {"a": (64, 64), "b": (64, 64)}


def test_the_size_floor_is_read_from_the_family_record(tmp_path):
    path, shapes = _matmul64(tmp_path)
    assert chips.get("m4").family.size_floor and not chips.get("m5").family.size_floor
    assert _decision(path, shapes, "m4", "matmul") == ("cpu", "likely")
    assert _decision(path, shapes, "m5", "matmul") == ("ane", "uncertain")
    floored = _with("m5", size_floor=chips.FAMILIES["h16"].size_floor)
    assert _on(path, shapes, floored, "matmul").unit == "cpu"


def test_the_size_floor_thresholds_are_the_family_records(tmp_path):
    """predict reads the thresholds, and the report ids it cites, from ``Family.size_floor``."""
    path, shapes = _matmul64(tmp_path)
    floor = chips.FAMILIES["h16"].size_floor
    assert [f.value for f in floor.matmul] == [384 * 384, 512 * 512]
    assert [f.value for f in floor.attention] == [1 << 20, 1 << 21]
    assert _on(path, shapes, "m4", "matmul").reason.startswith(
        "a matmul operand of 4096 elements <= 147456: Core ML prefers the CPU "
        "(vx435-matmul-f16-le384, vx435-matmul-f16-512)"
    )
    # a lower floor: 64 x 64 is above its ANE threshold, on the ANE, likely
    lower = replace(floor, matmul=(_measured(32 * 32), _measured(48 * 48)))
    assert _decision(path, shapes, _with("m4", size_floor=lower), "matmul") == ("ane", "likely")
    # between its thresholds: uncertain, the figures' sources cited
    between = replace(floor, matmul=(_measured(32 * 32), _measured(128 * 128)))
    p = _on(path, shapes, _with("m4", size_floor=between), "matmul")
    assert (p.unit, p.confidence) == ("ane", "uncertain")
    assert "ANE (16384) sizes reported on an M4 (test, test)" in p.reason


def test_a_chip_without_a_generation_is_of_the_unknown_one(tmp_path):
    path = _relu(tmp_path, [1, 1, 1, 20000])
    bare = replace(chips.get("m4"), family=None)
    p = _on(path, {"x": (1, 1, 1, 20000)}, bare, "relu")
    assert (p.unit, p.confidence) == ("cpu", "uncertain") and "the M1's limit; M4's is not known" in p.reason


def test_a_limit_not_measured_names_its_kind_and_source(tmp_path):
    """A reason says "the M1's limit" only where the generation's figure is the M1's, assumed;
    a derived figure is named derived, with its source and note."""
    c = _relu(tmp_path, [1, 70000, 1, 1])
    shapes = {"x": (1, 70000, 1, 1)}
    for key in ("m2", "m3", "m4", "m5"):  # N and C derived from ANEForge's C measurements
        fig = chips.get(key).family.max_channels
        p = _on(c, shapes, key, "relu")
        assert fig.kind == "derived" and f"(derived, {fig.source}: {fig.note})" in p.reason, key
        assert "the M1's limit" not in p.reason, key
    p = _on(c, shapes, "a16", "relu")  # the M1's, assumed
    assert (
        "(the M1's limit; A16 Bionic's is not known; assumption, SPEC 5; a1111-13527-matmul-w23040)"
        in p.reason
    )
    w = _relu(tmp_path, [1, 1, 1, 70000])
    p = _on(w, {"x": (1, 1, 1, 70000)}, "m4", "relu")  # H16's 65536: derived from ANEForge's M5
    assert p.reason.startswith(
        "W = 70000 > 65536: the H16 generation's limit (derived, aneforge-caps-extents: "
    )
    assert "the M1's limit" not in p.reason


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_sin_and_cos_follow_the_generations_tables(tmp_path, op):
    """Before H15 (ANEForge's op floors) the compiler has no sin or cos: the layer leaves the
    ANE, "uncertain" (a floor read from the compiler, not a run); from H15 on it stays."""
    path = _save(tmp_path, op.lower(), [helper.make_node(op, ["x"], ["y"])], [("x", [1, 8, 4, 4])])
    shapes, name = {"x": (1, 8, 4, 4)}, op.lower()
    for chip in ("m1", "m2-pro", "a17-pro"):
        p = _on(path, shapes, chip, name)
        assert (p.unit, p.confidence, p.rule) == ("cpu", "uncertain", "no sin/cos table"), chip
        assert p.reason.startswith(f"a {name}: the ANE compiler has no {name} before the H15 generation (")
        assert "aneforge/_targets.py @020dcad" in p.reason
    assert "(assumption, " in _on(path, shapes, "a17-pro", name).reason
    for chip in ("m3", "m4", "m5"):
        assert _decision(path, shapes, chip, name)[0] == "ane", chip
    # the record decides, not the chip's name
    table = _with("m1", trig_table=chips.FAMILIES["h15"].trig_table, **_NO_FLOOR)
    assert _decision(path, shapes, table, name)[0] == "ane"
    # with the table, the M1's generation's non-matrix program floor takes a lone sin of 128
    # elements to the CPU: the sin rule no longer decides
    p = _on(path, shapes, _with("m1", trig_table=chips.FAMILIES["h15"].trig_table), name)
    assert (p.unit, p.rule) == ("cpu", "non-matrix program floor")


def _matmul(tmp_path, n=64):
    w = numpy_helper.from_array(np.ones((n, n), np.float32), "w")
    return _save(tmp_path, f"mm{n}", [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", (n, n))], [w])


def test_a_model_over_1_gb_leaves_the_ane_under_ios_only(tmp_path, monkeypatch):
    """coremltools' Bisect Model guide: a Neural Engine model on an iPhone "cannot be larger than
    1 GB" (apple/ml-stable-diffusion: on iOS and iPadOS, "not required for macOS"). The rule
    reads the model's stored bytes against ``IOS_MODEL_BYTES`` on the A-series chips alone; here
    the limit is lowered under a small model's 524288 bytes (512 x 512 weights at 16 bits)."""
    import importlib

    pr = importlib.import_module("fastane.model.placement.predict")  # the module, not its function
    path, n = _matmul(tmp_path, 512), 512 * 512 * 2
    assert pr.stored_bytes(fastane.load_model(str(path), weights=False).graph) == n
    shapes = {"x": (512, 512)}
    assert {_on(path, shapes, c, "matmul").unit for c in ("a16", "m4")} == {"ane"}
    monkeypatch.setattr(pr, "IOS_MODEL_BYTES", n)  # not above it: stays
    assert _on(path, shapes, "a16", "matmul").unit == "ane"
    monkeypatch.setattr(pr, "IOS_MODEL_BYTES", n - 1)
    for chip in sorted(chips.IOS_CHIPS):
        p = _on(path, shapes, chip, "matmul")
        assert (p.unit, p.confidence, p.rule) == ("cpu", "likely", "model > 1 GB on iOS"), chip
        assert f"{n} bytes" in p.reason
    for chip in ("m1", "m4", "m5-max"):  # macOS: no such limit
        assert _on(path, shapes, chip, "matmul").rule != "model > 1 GB on iOS"
    assert chips.IOS_CHIPS == {"a14", "a15", "a16", "a17-pro", "a18", "a18-pro"}
