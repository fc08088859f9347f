"""The calibrated values of the time model's free parameters: the committed result of
:func:`fastane.roofline.calibrate.fit` on the one path's plans
(``python -m fastane.networks.calibrate`` re-runs it; a test checks it reproduces these).
docs/roofline.md, "Calibration"."""

FITTED = {
    "program_overhead_s": 0.000112,
    "dispatch_s": 1.78e-07,
    "compute_efficiency": 0.98,
    "tile_scale": 0.933,
    "direct_overhead_s": 0.000112,
    "direct_copy_bw": 8000000000.0,
    "kernel_overlap": 1.0,
    "pointwise_efficiency": 0.53,
    "chip_overhead_s": {"a14": 0.000355},
}
