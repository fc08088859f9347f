"""The calibrated time model: the fit on the one path's plans reproduces the committed values,
and the model orders chips as the measurements do (docs/roofline.md, "Calibration" and
"Validation")."""

from pathlib import Path

import pytest

from fastane.networks.calibrate import one_path
from fastane.networks.plan import analyze
from fastane.roofline import calibrate, chips, model, report, validate
from fastane.roofline.fitted import FITTED


@pytest.fixture(scope="module")
def arrays():
    return one_path()


def test_refitting_reproduces_the_committed_values(arrays):
    assert calibrate.fit(arrays) == FITTED
    p = model.DEFAULT_PARAMS
    flat = {k: v for k, v in FITTED.items() if k != "chip_overhead_s"}
    assert {k: getattr(p, k) for k in flat} == flat
    assert dict(p.chip_overhead_s) == FITTED["chip_overhead_s"]
    assert set(FITTED["chip_overhead_s"]) == set(calibrate.OWN_OVERHEAD)


def test_a_fit_can_start_where_another_ended(arrays):
    # the leave-one-out fits of calibrate.select start from the fit on every point
    assert calibrate.fit(arrays, sweeps=0, start=FITTED) == FITTED
    assert calibrate.fit(arrays, sweeps=0) != FITTED  # the fixed start is elsewhere
    assert len(calibrate.subsets()) == 2 ** len(calibrate.OPTIONAL) and calibrate.subsets()[0] == ()


def test_every_free_parameter_is_pinned_by_a_point(arrays):
    # each fitted value moves the calibration error: none is left at a start value no point sees
    base = calibrate.errors(arrays)
    flat = {k: v for k, v in FITTED.items() if k != "chip_overhead_s"}
    changed = [{**FITTED, k: v * 0.8} for k, v in flat.items()]  # every value stays in its range
    changed += [{**FITTED, "chip_overhead_s": {c: 2 * v}} for c, v in FITTED["chip_overhead_s"].items()]
    for values in changed:
        moved = calibrate.errors(arrays, values)
        assert any(abs(r - r0) > 1e-3 for (_, _, r), (_, _, r0) in zip(moved, base)), values


def test_a_palettized_point_moves_only_its_weight_bytes(arrays):
    fp16, pal4 = arrays("resnet50"), arrays("resnet50", 4)
    assert pal4["macs"].sum() == fp16["macs"].sum()
    assert pal4["kernel_dma_bytes"].sum() < 0.3 * fp16["kernel_dma_bytes"].sum()
    wl = calibrate.point_workload("resnet50", 4)
    assert (wl.name, wl.weight_bits) == ("resnet50-pal4", 4)


def test_direct_points_pay_the_direct_overhead_not_core_mls(arrays):
    direct = [p for p in calibrate.POINTS if p.runtime == "direct"]
    assert direct
    for p in direct:
        a = calibrate.point_arrays(arrays, p)
        t_direct = calibrate.predict(a, p.chip, FITTED, runtime="direct")
        t_coreml = calibrate.predict(a, p.chip, FITTED)
        assert t_direct - t_coreml == pytest.approx(
            FITTED["direct_overhead_s"] - FITTED["program_overhead_s"]
        )


def test_fixed_costs_respect_the_mobilenetv3_bound():
    name, chip, limit, _ = calibrate.FIXED_COST_BOUND
    r = analyze(name, chip)
    assert r.total.overhead_s + r.total.dispatch_s <= limit
    assert FITTED["program_overhead_s"] < 0.13e-3  # far below the seed's 1 ms


def test_calibration_points_within_2x(arrays):
    rows = calibrate.errors(arrays)
    assert all(0.5 <= ratio <= 2 for _, _, ratio in rows), [(p.id, r) for p, _, r in rows]
    # the Core ML points as tight as the whole set of 17 was before the direct-ANE points of
    # 2026-12-06 (45 points: x1.216, docs/roofline.md "Calibration")
    assert calibrate.rms_log_error(r for p, _, r in rows if p.runtime == "coreml") < 1.2
    assert calibrate.rms_log_error(r for _, _, r in rows) < 1.25


def test_io_bytes_are_a_programs_input_and_output():
    assert calibrate.io_bytes("matmul:256x4096x1024") == 2 * (256 * 4096 + 256 * 1024)
    assert calibrate.io_bytes("convs:16x256x32x3") == 2 * 2 * 256 * 32 * 32  # the stack's ends only
    assert calibrate.io_bytes("convs:1x64x64x3", 8) == 8 * 2 * 2 * 64 * 64 * 64  # a batch of 8
    assert calibrate.io_bytes("relu:2048x4096") == 2 * 2 * 2048 * 4096


def test_a_harness_copy_is_paid_at_the_copy_rate_by_its_points_alone(arrays):
    p = next(q for q in calibrate.POINTS if q.id == "K42")  # the M4's relu of 8192 x 4096
    assert p.io_bytes == 2 * 2 * 8192 * 4096
    a = calibrate.point_arrays(arrays, p)
    with_copy = calibrate.predict(a, p.chip, FITTED, runtime="direct", io_bytes=p.io_bytes)
    alone = calibrate.predict(a, p.chip, FITTED, runtime="direct")
    assert with_copy - alone == pytest.approx(p.io_bytes / FITTED["direct_copy_bw"])
    assert with_copy > 5 * alone  # a streaming program is its harness's copy
    # a prediction of the program (fastane roofline --runtime direct) never pays it
    r = analyze(calibrate.point_workload(p.spec), p.chip)
    direct = model.calibrated(runtime="direct")
    assert report.estimate(r.plan.tasks, p.chip, direct).time_s == pytest.approx(alone)
    # every ANEForge point says what its harness copies; no Core ML point copies
    assert all((q.io_bytes > 0) == ("ANEForge" in q.source or q.source == "same") for q in calibrate.POINTS)
    # the validation's run of a calibration program copies what the calibration's does:
    # the GEMM 128x1024x1024's fp16 input and output, 128 x 1024 each
    by_id = {q.id: q for q in calibrate.POINTS + validate.VALIDATION}
    assert by_id["K12"].io_bytes == by_id["S25-2"].io_bytes == 2 * (128 * 1024 + 128 * 1024)
    with pytest.raises(ValueError, match="direct_copy_bw must be > 0"):
        model.ModelParams(direct_copy_bw=0.0)


def test_ultra_runs_one_ane():
    u, mx = chips.get("m1-ultra"), chips.get("m1-max")
    assert u.peak_marketing.value == 22e12 and u.anes == 2 and u.anes_used.value == 1
    assert u.peak_ops_program == mx.peak_ops_program == 11e12
    assert model.rates(u)["kernel"] == model.rates(mx)["kernel"]
    lm = analyze(calibrate.point_workload("matmul:1x4096x128256"), "m1-ultra")
    assert lm.total.time_s == pytest.approx(report.estimate(lm.plan.tasks, "m1-max").time_s)


def test_chips_ordered_as_measured_on_compute_heavy_work():
    # gpt2-xl prefill: M2 faster than M1 Max (measured 406 vs 455 ms); A15 faster than A14
    r = analyze("gpt2-prefill", "m1-max")
    t = {c: report.estimate(r.plan.tasks, c).time_s for c in ("m1-max", "m2", "a14", "a15", "m3")}
    assert t["m2"] < t["m1-max"]
    assert t["a15"] < t["a14"]
    # weight streaming: M1 faster than M1 Max (measured 17.26 vs 19.24 ms)
    lm = analyze(calibrate.point_workload("matmul:1x4096x128256"), "m1")
    assert lm.total.time_s < report.estimate(lm.plan.tasks, "m1-max").time_s


def test_validation_rows_are_computed_for_every_point(arrays):
    rows = validate.rows(arrays)
    assert [p.id for p, _, _ in rows] == [p.id for p in validate.VALIDATION]
    assert all(t > 0 for _, t, _ in rows)
    assert not {p.id for p in validate.VALIDATION} & {p.id for p in calibrate.POINTS}


def test_the_calibration_table_in_the_docs_is_the_fits_own(arrays):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "roofline.md").read_text()
    assert calibrate.markdown(arrays) in doc, (
        "docs/roofline.md's calibration table is stale: paste `python -m fastane.networks.calibrate`"
    )


def test_the_validation_table_in_the_docs_is_the_models_own(arrays):
    # docs/roofline.md quotes `python -m fastane.networks.calibrate --validate` verbatim: a model change
    # that moves a prediction must regenerate the table (one place for each figure)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "roofline.md").read_text()
    assert validate.markdown(arrays) in doc, (
        "docs/roofline.md's validation table is stale: paste `python -m fastane.networks.calibrate --validate`"
    )
