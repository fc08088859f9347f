"""The calibrated values of the time model's free parameters: the committed result of
:func:`fastane.roofline.calibrate.fit` on the one path's plans
(``python -m fastane.networks.calibrate`` re-runs it; a test checks it reproduces these).
docs/roofline.md, "Calibration"."""

FITTED = {
    "program_overhead_s": 5.62e-05,
    "dispatch_s": 7.94e-07,
    "compute_efficiency": 0.56,
    "tile_scale": 1.41,
}
