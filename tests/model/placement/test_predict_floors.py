"""The size floors the placement estimate reads from the chip's ANE generation
(:class:`fastane.roofline.chips.Family`) beyond the M4's matmul/attention one: a one-row
``linear`` alone by its reduction depth (the M3 Max's), a ``linear``'s output width (the M3
Max's), the weights of a program of 1x1 convolutions (torchnative's M1, by inference),
the CPU or the GPU for an fp32 matmul under ``ALL`` (the M4's, torchnative's M1's) and the CPU
or the GPU for a program with no matrix product (torchnative's M1, by inference).  Each is
tested at both sides of its figures, read from the family record, on hand-made Core ML programs."""

from dataclasses import replace

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
from coremltools.converters.mil import Builder as mb  # noqa: E402

import fastane  # noqa: E402
from fastane.model.placement.predict import predict  # noqa: E402
from fastane.roofline import chips  # noqa: E402
from tests.helpers.coreml import convert, save  # noqa: E402

_FP16 = ct.converters.mil.mil.types.fp16
H13, H15, H16 = (chips.FAMILIES[k] for k in ("h13", "h15", "h16"))


def _predicted(path, shapes, chip, units, ops):
    """The predictions of the layers holding one of ``ops`` (fastane's op names)."""
    bound, layers = fastane.load_model(str(path), weights=False).bind(shapes)
    return [
        p for lay, p in zip(layers, predict(layers, bound, units, chip)) if {n.op for n in lay.nodes} & ops
    ]


def _one(path, shapes, chip, units="CPU_AND_NE", ops=frozenset({"matmul"})):
    """``(unit, confidence, reason, rule)`` of the one layer holding ``ops``."""
    (p,) = _predicted(path, shapes, chip, units, ops)
    return p


def _linear(tmp_path, k, n, rows=1, relu=False, int8=False):
    """A fp16 ``linear`` of a ``(rows, k)`` input by a constant ``[n, k]`` weight (a relu after
    it when ``relu``; the weight int8 per channel when ``int8``), macOS15."""

    w = np.random.default_rng(k + n).standard_normal((n, k)).astype(np.float16)

    @mb.program(input_specs=[mb.TensorSpec(shape=(rows, k), dtype=_FP16)], opset_version=ct.target.macOS15)
    def prog(x):
        y = mb.linear(x=x, weight=w)
        return mb.relu(x=y) if relu else y

    path = tmp_path / f"linear{k}x{n}x{rows}{relu}{int8}.mlpackage"
    if not int8:
        return save(prog, path, ct.target.macOS15, True), {"x": (rows, k)}
    import coremltools.optimize.coreml as cto

    config = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
    model = cto.linear_quantize_weights(
        convert(prog, ct.target.macOS15, True), config=cto.OptimizationConfig(global_config=config)
    )
    model.save(str(path))
    return str(path), {"x": (rows, k)}


def test_a_one_row_linear_alone_follows_the_depth_floor(tmp_path):
    floor = H15.linear_depth
    cpu, ane = int(floor.cpu.value), int(floor.other.value)
    assert (cpu, ane) == (4864, 5120) and floor.cpu.source == "larql-linear-k-le4864-cpu"
    p = _one(*_linear(tmp_path, cpu, 64), "m3-max")
    assert (p.unit, p.confidence, p.rule) == ("cpu", "likely", "linear depth floor")
    assert f"reduction depth {cpu} <= {cpu}: Core ML prefers the CPU (larql-linear-k-le4864-cpu" in p.reason
    assert _one(*_linear(tmp_path, ane, 64), "m3-max")[:2] == ("ane", "likely")
    between = _one(*_linear(tmp_path, (cpu + ane) // 2, 64), "m3-max")
    assert between[:2] == ("ane", "uncertain") and "sizes reported on an M3 Max" in between.reason
    # under ALL too: the floor is the CPU's, not the GPU's
    assert _one(*_linear(tmp_path, cpu, 64), "m3-max", "ALL").unit == "cpu"
    # another generation: left on the ANE, uncertain, the M3 Max's report named
    other = _one(*_linear(tmp_path, cpu, 64), "m1")
    assert other[:2] == ("ane", "uncertain") and "on an M3 Max Core ML prefers the CPU" in other.reason
    # the family record decides: a lower floor puts the same linear on the ANE
    lower = replace(floor, cpu=replace(floor.cpu, value=256), other=replace(floor.other, value=512))
    m3 = replace(chips.get("m3-max"), family=replace(H15, linear_depth=lower))
    assert _one(*_linear(tmp_path, cpu, 64), m3)[:2] == ("ane", "likely")


def test_the_depth_floor_is_for_one_row_alone(tmp_path):
    cpu = int(H15.linear_depth.cpu.value)
    # two rows: no floor
    assert _one(*_linear(tmp_path, cpu, 64, rows=2), "m3-max")[:2] == ("ane", "likely")
    # a relu after it (another op of the program on the ANE): no floor
    path, shapes = _linear(tmp_path, cpu, 64, relu=True)
    p = _one(path, shapes, "m3-max")
    assert p.unit == "ane" and p.rule != "linear depth floor"


def test_int8_weights_have_their_own_depth_floor(tmp_path):
    floor = H15.linear_depth_int8
    cpu, ane = int(floor.cpu.value), int(floor.other.value)
    assert (cpu, ane) == (3072, 4096)
    p = _one(*_linear(tmp_path, cpu, 64, int8=True), "m3-max")
    assert (p.unit, p.rule) == ("cpu", "linear depth floor") and "(int8 weights)" in p.reason
    assert _one(*_linear(tmp_path, ane, 64, int8=True), "m3-max")[:2] == ("ane", "likely")
    # the same depth with fp16 weights is below the fp16 floor
    assert _one(*_linear(tmp_path, ane, 64), "m3-max").unit == "cpu"


def test_a_linear_output_wider_than_w_on_the_m3_max(tmp_path):
    width = int(H15.linear_width.value)
    assert width == 17408 and H15.linear_width.source == "larql-linear-5120x17408"
    p = _one(*_linear(tmp_path, 64, width, rows=2), "m3-max")
    assert (p.unit, p.confidence) == ("ane", "uncertain") and "one report" in p.reason
    # wider than the one seen: the W limit again
    assert _one(*_linear(tmp_path, 64, width + 1, rows=2), "m3-max")[:2] == ("cpu", "likely")
    # the M1's generation: the W limit (sm-linear-lmhead-50257)
    assert _one(*_linear(tmp_path, 64, width, rows=2), "m1").unit == "cpu"


def _convs(tmp_path, layers, kernel=1, hw=1):
    """1x1 (or ``kernel`` x ``kernel``) convs chained on a fp16 ``(1, C, hw, hw)`` input: ``layers``
    a list of ``(in, out)`` channels; each weight one value of its own."""
    shape = (1, layers[0][0], hw, hw)
    ws = [np.full((o, i, kernel, kernel), (j + 1) / 1024, np.float16) for j, (i, o) in enumerate(layers)]

    @mb.program(input_specs=[mb.TensorSpec(shape=shape, dtype=_FP16)], opset_version=ct.target.macOS15)
    def prog(x):
        for w in ws:
            x = mb.conv(x=x, weight=w, pad_type="same")
        return x

    name = "-".join(f"{i}x{o}" for i, o in layers)
    return save(prog, tmp_path / f"convs{name}k{kernel}.mlpackage", ct.target.macOS15, True), {"x": shape}


def _conv_units(path, shapes, chip, units="ALL"):
    return {(p.unit, p.confidence, p.rule) for p in _predicted(path, shapes, chip, units, {"conv"})}


def test_a_program_of_1x1_convs_follows_its_weight_floor(tmp_path):
    floor = H13.conv1x1_weights
    cpu, ane = int(floor.cpu.value), int(floor.other.value)
    assert (cpu, ane) == (8 * 576 * 576, 576 * 8192) and floor.cpu.kind == "measured"
    # one conv of exactly the CPU's figure, of the ANE's, and between them
    assert _conv_units(*_convs(tmp_path, [(576, cpu // 576)]), "m1") == {
        ("cpu", "likely", "1x1 conv weight floor")
    }
    assert _conv_units(*_convs(tmp_path, [(576, ane // 576)]), "m1") == {("ane", "likely", "")}
    between = _predicted(*_convs(tmp_path, [(576, 6144)]), "m1", "ALL", {"conv"})
    assert {p[:2] for p in between} == {("ane", "uncertain")}
    assert "sizes reported on torchnative's M1" in between[0].reason
    # the program's weights, not one conv's: two convs of half the ANE's figure each
    assert _conv_units(*_convs(tmp_path, [(576, 4096), (4096, 576)]), "m1") == {("ane", "likely", "")}
    assert _conv_units(*_convs(tmp_path, [(576, 2304), (2304, 576)]), "m1") == {
        ("cpu", "likely", "1x1 conv weight floor")
    }
    # another generation: left on the ANE, uncertain
    assert _conv_units(*_convs(tmp_path, [(576, cpu // 576)]), "m4") == {("ane", "uncertain", "")}


def test_the_weight_floor_is_for_1x1_convs(tmp_path):
    # a 3x3 convolution holding fewer weights: no floor
    assert _conv_units(*_convs(tmp_path, [(64, 128)], kernel=3, hw=32), "m1") == {("ane", "likely", "")}


def _fp32_matmul(tmp_path, s):
    """An fp32 ML Program: a [s, s] by [s, s] matmul of two inputs (``s**3`` multiply-adds)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(s, s)) for _ in "xy"], opset_version=ct.target.iOS17)
    def prog(x, y):
        return mb.matmul(x=x, y=y)

    return save(prog, tmp_path / f"mm{s}.mlpackage", ct.target.iOS17), {"x": (s, s), "y": (s, s)}


def _side(figure) -> int:
    s = round(figure.value ** (1 / 3))
    assert s**3 == figure.value
    return s


@pytest.mark.parametrize("chip, family", [("m4", H16), ("m1", H13)])
def test_fp32_matmul_under_all_goes_to_the_cpu_or_the_gpu_by_size(tmp_path, chip, family):
    floor = family.fp32_gpu
    cpu, gpu = _side(floor.cpu), _side(floor.other)
    conf = "likely" if floor.cpu.kind == "measured" else "uncertain"
    small = _one(*_fp32_matmul(tmp_path, cpu), chip, "ALL")
    assert (small.unit, small.confidence, small.rule) == ("cpu", conf, "fp32 compute precision")
    assert f"<= {int(floor.cpu.value)}: Core ML prefers the CPU ({floor.cpu.source}" in small.reason
    large = _one(*_fp32_matmul(tmp_path, gpu), chip, "ALL")
    assert (large.unit, large.confidence) == ("gpu", conf) and "Core ML prefers the GPU" in large.reason
    # between: the generation's default, uncertain
    between = _one(*_fp32_matmul(tmp_path, (cpu + gpu) // 2), chip, "ALL")
    assert between[:2] == ("cpu" if family.size_floor else "gpu", "uncertain")
    # CPU_AND_NE leaves the GPU out
    assert _one(*_fp32_matmul(tmp_path, gpu), chip, "CPU_AND_NE").unit == "cpu"


def test_fp32_attention_stays_on_the_cpu_under_all(tmp_path):
    shape = (1, 1, 2048, 128)  # 2^30 multiply-adds in each of its matmuls: the M4's GPU side

    @mb.program(input_specs=[mb.TensorSpec(shape=shape) for _ in "qkv"], opset_version=ct.target.iOS18)
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v)

    path = save(prog, tmp_path / "sdpa.mlpackage", ct.target.iOS18)
    ps = _predicted(path, dict.fromkeys("qkv", shape), "m4", "ALL", {"matmul"})
    assert ps and {p[:2] for p in ps} == {("cpu", "likely")}


def _softmax_after(tmp_path, shape, conv=False):
    """A fp16 softmax over the last axis of ``shape`` alone (after a 1x1 conv when ``conv``),
    macOS15."""

    @mb.program(input_specs=[mb.TensorSpec(shape=shape, dtype=_FP16)], opset_version=ct.target.macOS15)
    def prog(x):
        if conv:
            x = mb.conv(x=x, weight=np.ones((shape[1], shape[1], 1, 1), np.float16))
        return mb.softmax(x=x, axis=-1)

    path = tmp_path / f"softmax{'x'.join(map(str, shape))}{conv}.mlpackage"
    return save(prog, path, ct.target.macOS15, True), {"x": shape}


def test_a_program_without_a_matrix_product_follows_the_m1s_floor(tmp_path):
    floor = H13.no_matrix
    cpu, gpu = int(floor.cpu.value), int(floor.other.value)
    assert (cpu, gpu) == (32 * 512 * 512, 32 * 256 * 64 * 64)
    assert (floor.cpu.source, floor.other.source) == ("tn-npu2-softmax-cpu", "tn-npu2-batchnorm-large-gpu")
    assert {floor.cpu.kind, floor.other.kind} == {"measured"}
    # the figures are the family record's: a smaller one is read as such, on small programs
    small = replace(floor, cpu=replace(floor.cpu, value=1024), other=replace(floor.other, value=4096))
    m1 = replace(chips.get("m1"), family=replace(H13, no_matrix=small))
    sm = frozenset({"softmax"})
    at_cpu, between, at_gpu = (_softmax_after(tmp_path, (1, 4, n)) for n in (256, 512, 1024))
    p = _one(*at_cpu, m1, "ALL", sm)
    assert (p.unit, p.confidence, p.rule) == ("cpu", "likely", "non-matrix program floor")
    assert "its largest tensor 1024 elements <= 1024: Core ML prefers the CPU on torchnative's M1" in p.reason
    assert "(tn-npu2-softmax-cpu, tn-npu2-batchnorm-large-gpu)" in p.reason
    assert _one(*at_gpu, m1, "ALL", sm)[:2] == ("gpu", "likely")
    p = _one(*between, m1, "ALL", sm)
    assert p[:2] == ("ane", "uncertain") and "between the CPU (1024) and GPU (4096) sizes" in p.reason
    # without the GPU: the CPU up to the figure, above it the ANE, uncertain (no larger size tried)
    assert _one(*at_cpu, m1, "CPU_AND_NE", sm).unit == "cpu"
    p = _one(*at_gpu, m1, "CPU_AND_NE", sm)
    assert p[:2] == ("ane", "uncertain") and "above the largest size tried" in p.reason
    # the M1's own figures: the same small programs on the CPU
    assert _one(*at_gpu, "m1", "ALL", sm)[:2] == ("cpu", "likely")
    # another generation: nothing changes (Vx's M4 saw lone adds, muls and softmaxes on the ANE)
    for chip in ("m2", "m3-max", "m4", "m5"):
        p = _one(*at_cpu, chip, "ALL", sm)
        assert p[:2] == ("ane", "likely") and "matrix" not in p.reason, chip
    # a segment with a matrix product is not such a program
    conv = _one(*_softmax_after(tmp_path, (1, 4, 1, 8), conv=True), "m1", "CPU_AND_NE", sm)
    assert conv.rule != "non-matrix program floor" and "no matrix product" not in conv.reason
