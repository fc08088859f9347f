"""The calibrated values of the time model's free parameters: the committed result of
:func:`fastane.roofline.calibrate.fit` on the one path's plans
(``python -m fastane.networks.calibrate`` re-runs it; a test checks it reproduces these).
docs/roofline.md, "Calibration"."""

FITTED = {
    "program_overhead_s": 7.94e-05,
    "dispatch_s": 5.01e-07,
    "compute_efficiency": 1.0,
    "tile_scale": 1.07,
    "direct_overhead_s": 0.000355,
    "kernel_overlap": 0.75,
    "pointwise_efficiency": 0.45,
    "chip_overhead_s": {"a14": 0.000316},
}
