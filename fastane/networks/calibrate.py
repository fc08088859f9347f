"""The calibration and the validation on the one path (docs/roofline.md, "Calibration",
"Validation"): each point's workload planned as a model graph by
:func:`fastane.networks.plan.analyze`, as ``fastane roofline`` plans it.
``python -m fastane.networks.calibrate`` re-runs the fit and prints the calibration table
(each point's error);
``--validate`` prints the validation table instead, ``--select`` the choice of the optional
parameters (:func:`fastane.roofline.calibrate.select`, minutes).
"""

from __future__ import annotations

import sys

from ..roofline import calibrate, validate
from ..roofline.model import task_arrays
from .plan import analyze

__all__ = ["one_path", "main"]


def one_path():
    """A function from a point's ``spec`` to the per-task counter arrays of its one-path
    plan (:func:`fastane.roofline.model.task_arrays`), each workload planned once."""
    cache: dict = {}

    def arrays(spec: str, weight_bits: int = 0):
        key = (spec, weight_bits)
        if key not in cache:
            cache[key] = task_arrays(analyze(calibrate.point_workload(spec, weight_bits)).plan.tasks)
        return cache[key]

    return arrays


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    arrays = one_path()
    if "--validate" in argv:
        print(validate.markdown(arrays))
        return 0
    if "--select" in argv:
        print("| parameters fitted | fit rms | leave-one-out rms | worst held-out |")
        print("|---|---|---|---|")
        for free, whole, held, worst in calibrate.select(arrays):
            print(f"| {', '.join(free) or '(none)'} | x{whole:.3f} | x{held:.3f} | {worst:.2f} |")
        return 0
    values = calibrate.fit(arrays)
    same = values == calibrate.FITTED
    print("fitted:", values)
    print("committed FITTED:", calibrate.FITTED, "(same)" if same else "(DIFFERENT: update FITTED)")
    print()
    print(calibrate.markdown(arrays, values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
