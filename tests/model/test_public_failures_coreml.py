"""Public reports of numeric failures of Core ML models on the ANE, each rebuilt as the
smallest MIL program that holds the op (iOS17 ML Program, fp16 compute precision, as
coremltools' PyTorch converter writes it) and run as on the chip: what fastane gives at the
reported inputs, reproduced or not, and the layer the fp16 hunt names."""

import warnings

import numpy as np
import pytest

ct = pytest.importorskip(
    "coremltools", reason="the reports' programs are built with coremltools' MIL builder"
)
from coremltools.converters.mil import Builder as mb  # noqa: E402

import fastane  # noqa: E402
from fastane.model.run.hunt import first_divergence  # noqa: E402
from tests.helpers.coreml import save  # noqa: E402


def load(tmp_path, name, shape, body):
    """The fp16 ML Program ``body(x)`` on one input ``x`` of ``shape``, loaded by fastane."""

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return body(x)

    return fastane.load_model(save(prog, tmp_path / f"{name}.mlpackage", ct.target.iOS17, fp16=True))


def run(model, x):
    """``(ANE result, fp32 reference)`` of the one-output ``model`` at ``x``, as float64."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        (y,) = model({"x": x}).values()
        (ref,) = model.reference({"x": x}).values()
    return np.asarray(y, np.float64), np.asarray(ref, np.float64)


def placed(model, x, *ops):
    """Where ``model``'s layers of each op in ``ops`` run (the op -> "ane" / "host")."""
    where = {layer.op: layer.placement for layer in model.placement({"x": x.shape})}
    return {op: where[op] for op in ops}


def test_coremltools_2728_log_softmax_of_a_dominant_class_is_minus_inf(tmp_path):
    """apple/coremltools#2728: "The PyTorch `log_softmax` converter produces `-inf` values on
    Apple Neural Engine (ANE) in fp16 when the input has a dominant class with large logit
    values." The converter writes ``log(softmax(x))``; at the report's input the softmax of
    the seven small classes is below fp16's range, and the log of 0 is -inf.  Reproduced;
    fastane's cliff is a gap of 17.375 between the classes (at 17.25 the small classes give
    -16.64 where float32 gives -17.25), where the report reasons one at 6e-5 (a gap of 9.7,
    fp16's smallest normal): fastane's softmax keeps subnormals down to its exp2 table's
    range."""
    x = np.array([[0, 0, 0, 50, 0, 0, 0, 0]], np.float32)
    model = load(tmp_path, "log_softmax", x.shape, lambda x: mb.log(x=mb.softmax(x=x, axis=-1)))
    assert placed(model, x, "softmax", "log") == {"softmax": "ane", "log": "ane"}
    y, ref = run(model, x)
    np.testing.assert_array_equal(y[0, [0, 1, 2, 4, 5, 6, 7]], -np.inf)
    assert y[0, 3] == 0.0
    np.testing.assert_allclose(ref, np.where(x == 50, 0.0, -50.0), atol=1e-5)
    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement, d.inf_born) == ("log", "ane", 7)

    gap = np.arange(16.0, 18.0, 0.125, dtype=np.float32)
    rows = np.zeros((gap.size, 8), np.float32)
    rows[:, 3] = gap
    model = load(tmp_path, "log_softmax_gap", rows.shape, lambda x: mb.log(x=mb.softmax(x=x, axis=-1)))
    y, ref = run(model, rows)
    np.testing.assert_array_equal(np.isinf(y[:, 0]), gap >= 17.375)
    assert np.isfinite(ref).all() and abs(y[gap == 17.25, 0] - -16.64) < 0.01


def test_coremltools_2729_logcumsumexp_overflows_beyond_11_09_as_inf_not_nan(tmp_path):
    """apple/coremltools#2729: "The PyTorch `torch.logcumsumexp` converter produces `inf` /
    `NaN` on Apple Neural Engine (ANE) in fp16 for input values above ~11.09." The converter
    writes ``log(cumsum(exp(x)))``.  Reproduced for inf: from x = 12 on, ``exp`` overflows
    fp16 on the ANE (its cliff at ln 65504 = 11.09, the report's own figure), the host's
    cumsum carries the inf and the log keeps it; no NaN appears (the NaN of the title is not
    shown by the report's example, whose output it does not print)."""
    x = np.array([[1, 5, 10, 12, 15, 20, 50]], np.float32)
    model = load(tmp_path, "logcumsumexp", x.shape, lambda x: mb.log(x=mb.cumsum(x=mb.exp(x=x), axis=-1)))
    assert placed(model, x, "exp", "cumsum", "log") == {"exp": "ane", "cumsum": "host", "log": "ane"}
    y, ref = run(model, x)
    np.testing.assert_allclose(y[0, :3], ref[0, :3], rtol=2e-3)
    np.testing.assert_array_equal(y[0, 3:], np.inf)
    assert np.isfinite(ref).all() and not np.isnan(y).any()
    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement, d.inf_born) == ("exp", "ane", 4)


def test_coremltools_2359_mish_stays_correct_where_softplus_overflows(tmp_path):
    """apple/coremltools#2359: "The built-in Mish activation function in `coremltools`
    introduces significant numerical errors in Core ML models when using 16-bit floating
    point precision (FLOAT16) on configurations with `ComputeUnit=CPU_AND_NE`" (narrowed by
    its reporter to softplus, apple/coremltools#2687).  The converter writes
    ``x * tanh(softplus(x))``.  Not reproduced: fastane's softplus gives inf beyond 11.09
    (not Apple's 0 beyond 10.39), tanh(inf) = 1, and mish stays x, as in float32; the hunt
    still names softplus (the inf it makes), but the model's output is right."""
    x = np.array([[8, 9, 10, 10.4, 10.5, 11, 12, 15, 20, 50]], np.float32)
    model = load(tmp_path, "mish", x.shape, lambda x: mb.mul(x=x, y=mb.tanh(x=mb.softplus(x=x))))
    assert placed(model, x, "softplus", "tanh", "mul") == {"softplus": "ane", "tanh": "ane", "mul": "ane"}
    y, ref = run(model, x)
    np.testing.assert_allclose(y, ref, rtol=1e-3)
    np.testing.assert_array_equal(y, x.astype(np.float16))
    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement, d.inf_born) == ("softplus", "ane", 4)


def test_coremltools_2585_rms_norm_sum_of_squares_overflows(tmp_path):
    """apple/coremltools#2585 (comment of 2025-09-06): "Default implementation of RMS will
    overflow for ANE due to FP16." The plain ``x * rsqrt(mean(x^2) + eps)`` over 64 values of
    a few hundred: ``x * x`` is beyond fp16 for |x| > 255.9, the mean is inf, rsqrt(inf) = 0 and
    every output is 0 where float32 gives values of order 1.  Reproduced; the hunt names the
    square.  The row divided by 8 still gives 0 (its sum of squares overflows), divided by 32 it
    is normalised correctly."""
    x = (np.random.default_rng(0).standard_normal((1, 64)) * 300).astype(np.float32)

    def rms(v):
        sq = mb.reduce_mean(x=mb.mul(x=v, y=v), axes=[-1], keep_dims=True)
        return mb.mul(x=v, y=mb.rsqrt(x=sq, epsilon=1e-6))

    model = load(tmp_path, "rms_norm", x.shape, rms)
    assert placed(model, x, "mul", "reduce_mean", "rsqrt") == {
        "mul": "ane",
        "reduce_mean": "ane",
        "rsqrt": "ane",
    }
    y, ref = run(model, x)
    assert (y == 0).all() and np.abs(ref).max() > 1.0
    d = first_divergence(model, {"x": x})
    assert (d.op, d.placement) == ("mul", "ane") and d.inf_born > 0
    # x / 8: every square fits fp16 (at most 7602), but their sum (75 254) does not: the
    # mean is the planar sum times fp16(1/64), so the overflow comes at an rms of 32, not 256
    assert np.abs(x / 8).max() ** 2 < 65504 < float(np.sum(np.square(x / 8)))
    y, ref = run(model, x / 8)
    assert (y == 0).all()
    y, ref = run(model, x / 32)
    np.testing.assert_allclose(y, ref, atol=1e-2, rtol=1e-2)


def test_coremltools_2669_finfo_min_mask_is_nan_in_the_program_itself(tmp_path):
    """apple/coremltools#2669: "The result is an all-NaN model that loads, runs, and silently
    returns garbage" (an attention mask of float32's lowest value, -3.4e38, cast to fp16 by
    the converter).  The fp16 program's constant is -inf, so a fully masked row's softmax
    is NaN on the ANE and in fastane's float32 evaluation of the same program alike: the
    failure is the converter's cast, on every compute unit, not the ANE's arithmetic."""
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[0, 0, 0, :] = np.finfo(np.float32).min  # a fully masked row
    mask[0, 0, 1, 2:] = np.finfo(np.float32).min
    x = np.random.default_rng(1).standard_normal((1, 1, 4, 4)).astype(np.float32)
    model = load(tmp_path, "masked_softmax", x.shape, lambda x: mb.softmax(x=mb.add(x=x, y=mask), axis=-1))
    y, ref = run(model, x)
    assert np.isnan(y[0, 0, 0]).all() and np.isnan(ref[0, 0, 0]).all()
    np.testing.assert_allclose(y[0, 0, 1:], ref[0, 0, 1:], atol=1e-3)
    assert not np.isnan(y[0, 0, 1:]).any()
