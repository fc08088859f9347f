"""Public reports of numeric failures on the ANE from projects other than coremltools (other
runtimes, model ports, projects that measure the engine), each rebuilt as the smallest
ONNX or MIL model that holds the op, run with fastane at the reported inputs.  Each test
asserts what fastane does: the report reproduced (and the hunt names the op), or not, and
its docstring says why."""

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX rebuilds need onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import fastane  # noqa: E402
from fastane.errors import SaturationWarning  # noqa: E402
from fastane.model.run.hunt import first_divergence  # noqa: E402


def _onnx(nodes, shapes, inits):
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, T.FLOAT, list(s)) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return fastane.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _matmul(w):
    return _onnx([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": (1, w.shape[0])}, {"w": w})


def _quiet(model, feeds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)
        return model(feeds)


def _mil(tmp_path, name, body, shape):
    """The MIL program ``body(x)`` on an input of ``shape``, converted with fp16 compute
    precision (as the reports' Core ML exports are) and loaded."""
    ct = pytest.importorskip("coremltools", reason="the Core ML rebuilds need coremltools")
    from coremltools.converters.mil import Builder as mb

    from tests.helpers.coreml import save

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return body(mb, x)

    model = fastane.load_model(save(prog, tmp_path / f"{name}.mlpackage", ct.target.iOS17, fp16=True))
    return model, next(iter(model.inputs))


def _one(outputs):
    (y,) = outputs.values()
    return np.asarray(y, np.float64)


def test_aneforge_115_matmul_saturates_at_fp16_max_over_2():
    """sbryngelson/ANEForge#115 (M5, macOS 26.5; the same on an M2 Pro, ANEForge#145):
    "All-1000 inputs with ones weights: K=32 (sum 32000) exact, K=33 (sum 33000) returns
    inf".  Reproduced: fastane's Q16.16 accumulator clamps at 32768 and the flagged output
    reads inf.  The bisection of bench/numeric_cliffs.py ("matmul inf-cliff ~32758.8, flat
    across K") feeds fp16(total / K): the sums it can make are 32752 and 32768 for every K,
    and fastane gives 32752 and inf."""
    for k, v, finite in [(32, 1000, True), (33, 1000, False), (4, 8100, True), (4, 8400, False)]:
        model = _matmul(np.ones((k, 16), np.float32))
        x = np.full((1, k), v, np.float32)
        y = _quiet(model, {"x": x})["y"]
        assert np.isfinite(y).all() == finite
        if finite:
            np.testing.assert_array_equal(y, k * v)
        else:
            assert np.isposinf(y).all() and np.isfinite(model.reference({"x": x})["y"]).all()
            d = first_divergence(model, {"x": x})
            assert (d.op, d.placement, d.inf_born) == ("MatMul", "ane", 16)
    for k in (4, 8, 32, 64, 128):
        model = _matmul(np.ones((k, 16), np.float32))
        for total, want in [(32758.8, 32752.0), (32761.0, np.inf)]:
            x = np.full((1, k), np.float16(total / k), np.float32)
            assert _quiet(model, {"x": x})["y"][0, 0] == want


def test_aneforge_115_reduce_sum_past_2048_rounds_the_other_way():
    """sbryngelson/ANEForge#115 and its docs/numeric-cliffs.md (M2 Pro and M5): "A
    reshape -> reduce_sum sweep is exact through 2048, then a target sum of 2049 can read
    back as 2050".  Not reproduced: the boundary is the same (fp16 holds every integer
    through 2048), but fastane's planar sum is exact and rounded once, ties to even, so
    2049 reads 2048 (2050 on the chip: a rounding of partial sums, or ties away from zero,
    that fastane does not have).  The probe of bench/numeric_cliffs.py: 8 integers."""
    model = _onnx(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        {"x": (1, 8)},
        {"axes": np.array([1], np.int64)},
    )
    (layer,) = model.placement({"x": (1, 8)})
    assert (layer.placement, layer.call) == ("ane", "reduce_sum")
    got = {}
    for total in range(2040, 2056):
        base, rem = divmod(total, 8)
        row = np.full((1, 8), base, np.float32)
        row[0, :rem] += 1
        got[total] = float(model({"x": row})["y"][0])
    assert all(got[t] == t for t in range(2040, 2049))
    assert got[2049] == 2048.0 and got[2051] == 2052.0 and got[2053] == 2052.0


def test_aneforge_153_bounded_matmul_with_30000_carriers_stays_finite():
    """sbryngelson/ANEForge#153 (M2 Pro, macOS 26.5.2), the follow-up of ANEForge#115 item
    3: "[31,15] @ [15,16] ... bound |x|@|W| max = 30133.0 ... opt=0: 0/496 non-finite;
    opt=1: 227/496 non-finite".  Not reproduced, as expected: the inf comes from the
    int8-weight variant that ANEForge's own autotuner picks at opt=1, a lowering of that
    runtime, not of Core ML; fastane's fp16 path (and a DequantizeLinear int8 weight, folded
    to an fp16 constant when the model is bound) gives the chip's opt=0 result: finite."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((31, 15)).astype(np.float32)
    x[rng.random(x.shape) < 1 / 16] = 30000.0
    w = rng.standard_normal((15, 16)) / np.sqrt(15)
    w = (w * 30133.0 / (np.abs(x) @ np.abs(w)).max()).astype(np.float32)  # the report's bound
    q_scale = np.float32(np.abs(w).max() / 127)
    q = np.clip(np.round(w / q_scale), -127, 127).astype(np.int8)
    direct = _onnx([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x.shape}, {"w": w})
    int8 = _onnx(
        [
            helper.make_node("DequantizeLinear", ["q", "s"], ["wd"]),
            helper.make_node("MatMul", ["x", "wd"], ["y"]),
        ],
        {"x": x.shape},
        {"q": q, "s": q_scale},
    )
    for model in (direct, int8):
        assert [layer.op for layer in model.placement({"x": x.shape}) if layer.placement == "ane"][
            -1
        ] == "MatMul"
        y = model({"x": x})["y"]
        assert np.isfinite(y).all()
        np.testing.assert_allclose(y, model.reference({"x": x})["y"], atol=0.02 * np.abs(y).max())
        assert first_divergence(model, {"x": x}).layer is None


def _scores():
    return np.random.default_rng(0).uniform(-50, 50, (2, 8)).astype(np.float32)  # soft-capped to +-50


def _masked_softmax(tmp_path, name, fill):
    """scores + mask (row 0 masked whole, row 1 from position 5) -> softmax, as the reports'
    attention builds it."""
    mask = np.zeros((2, 8), np.float32)
    mask[0], mask[1, 5:] = fill, fill
    return _mil(tmp_path, name, lambda mb, x: mb.softmax(x=mb.add(x=x, y=mask), axis=-1), (2, 8))


def test_cactus_734_gemma4_audio_mask_of_minus_1e9(tmp_path):
    """cactus-compute/cactus#734 (M4 Pro): "attention_invalid_logits_value = -1e9, which
    overflows to -inf in the FLOAT16 NPU graph ... Fully-masked padded rows then softmax to
    NaN, and partial rows diverge on the ANE" (and: "Before the fix the ANE diverged and
    CPU-only returned NaN").  Partly reproduced: coremltools keeps the add in fp32 and casts
    its sum to fp16; fastane's cast gives -inf, the fully masked row is NaN and the hunt
    names the add (the infs' birth).  The partial row does not diverge in fastane: its
    masked terms exp to exactly 0.  The fix (-1e4) is finite."""
    model, name = _masked_softmax(tmp_path, "gemma4", -1e9)
    x = {name: _scores()}
    y, ref = _one(model(x)), _one(model.reference(x))
    assert np.isnan(y[0]).all()
    np.testing.assert_allclose(y[1], ref[1], atol=2e-3)
    d = first_divergence(model, x)
    assert (d.op, d.placement, d.inf_born) == ("add", "ane", 11)
    fixed, name = _masked_softmax(tmp_path, "gemma4_fixed", -1e4)
    y = _one(fixed({name: _scores()}))
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y[1], ref[1], atol=2e-3)


def test_enviouswispr_996_modernbert_mask_of_float32_min(tmp_path):
    """saurabhav88/EnviousWispr#996 (a FLOAT16 ModernBERT export): "ModernBERT builds its
    additive attention mask with torch.finfo(float32).min ... In half precision that is
    -inf ... its softmax is NaN ... GPU and Neural Engine clamp the constant to -65504 and
    survive; CPU does not."  Not reproduced: fastane rounds a constant beyond fp16 to -inf
    (docs/numerics.md, "Operands"; the host's cast, as the CPU), so the fully masked row is
    NaN; a saturating conversion to -65504, as the report puts on the ANE, is not
    fastane's."""
    model, name = _masked_softmax(tmp_path, "modernbert", float(np.finfo(np.float32).min))
    x = {name: _scores()}
    y, ref = _one(model(x)), _one(model.reference(x))
    assert np.isnan(y[0]).all() and np.isnan(ref[0]).all()  # the reference casts as the CPU does
    np.testing.assert_allclose(y[1], ref[1], atol=2e-3)
    d = first_divergence(model, x)
    assert (d.op, d.inf_born) == ("add", 11)


def test_executorch_19523_rms_norm_square_sum_overflows(tmp_path):
    """pytorch/executorch#19523 (the Core ML backend, CPU_AND_NE): "x * rsqrt(mean(x^2)) *
    weight is numerically unstable on CoreML/ANE because the explicit FP32 cast around the
    mean reduction is silently stripped ..., leaving the squared sum to overflow in FP16";
    its fix, x * sqrt(d) / vector_norm(x), "keeps the reduction in a single op that survives
    CoreML lowering, so FP16 inference remains stable".  The overflow is reproduced: a row
    whose squares each fit fp16 but sum past 65504 reads 0 (reduce_mean rounds the sum to
    fp16 before its 1/d), and the hunt names the reduce_mean.  The fix is not: fastane runs
    reduce_l2_norm as square, sum, sqrt, the same sum rounded to fp16, so it collapses at
    the same rows; the report says the ANE's does not."""
    d = 64
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, d)).astype(np.float32)
    x[0, 0] *= 80  # each square < 6400, their sum ~ 1.4e5
    assert (x[0, 0] ** 2).max() < 65504 < (x[0, 0] ** 2).sum()

    def rms(mb, t):
        ms = mb.reduce_mean(x=mb.mul(x=t, y=t), axes=[-1], keep_dims=True)
        return mb.mul(x=t, y=mb.rsqrt(x=mb.add(x=ms, y=1e-6)))

    def vector_norm(mb, t):
        n = mb.maximum(x=mb.reduce_l2_norm(x=t, axes=[-1], keep_dims=True), y=float(np.sqrt(d * 1e-6)))
        return mb.real_div(x=mb.mul(x=t, y=float(np.sqrt(d))), y=n)

    for body, op in [(rms, "reduce_mean"), (vector_norm, "reduce_l2_norm")]:
        model, name = _mil(tmp_path, body.__name__, body, x.shape)
        y, ref = _one(_quiet(model, {name: x})), _one(model.reference({name: x}))
        assert not y[0, 0].any() and np.abs(ref[0, 0]).max() > 1  # the row collapses to 0
        np.testing.assert_allclose(y[0, 1:], ref[0, 1:], atol=1e-2)
        div = first_divergence(model, {name: x})
        assert (div.op, div.placement) == (op, "ane") and div.inf_born >= 1


def test_hollance_16bit_small_products_vanish():
    """hollance/neural-engine, docs/16-bit.md: "if your model has activations that are
    relatively large (> 1e2) or relatively small (< 1e-4), you will lose precision. Or
    worse, ... very small numbers become 0."  Reproduced, and fastane says where: each
    product is rounded to the accumulator's 2^-16 grid (docs/numerics.md, "Products"), so a
    matmul of activations 1e-3 with weights below 1e-3 (products below 2^-17, finite in
    fp16) reads 0 where the fp32 evaluation is about 5e-5, and the hunt names the MatMul."""
    w = np.random.default_rng(2).uniform(0.5, 1.0, (64, 8)).astype(np.float32) * 1e-3
    model = _matmul(w)
    x = np.full((1, 64), 1e-3, np.float32)
    assert np.float16(1e-3) * np.float16(w).max() < 2.0**-17
    y, ref = model({"x": x})["y"], model.reference({"x": x})["y"]
    assert not y.any() and (ref > 4e-5).all()
    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement) == ("MatMul", "ane") and d.error > d.tolerance
