"""Calibration of the time model's free parameters on the calibration points only
(docs/roofline.md, "Calibration"): ``python -m fastane.networks.calibrate`` re-runs the fit
on the one path's plans (:func:`fastane.networks.calibrate.one_path`) and prints the fitted
values and each point's error; :data:`FITTED` holds the committed result, which
:data:`fastane.roofline.model.DEFAULT_PARAMS` uses (a test checks that :func:`fit`
reproduces it).  ``arrays`` below: a function from a point's ``spec`` to the per-task
counter arrays of its plan (:func:`fastane.roofline.model.task_arrays`).

The free parameters, and what fixes each:

``program_overhead_s``
    a fixed cost per program (one Core ML prediction);
``dispatch_s``
    a fixed cost per task descriptor;
``compute_efficiency``
    the fraction of the FP16 peak a MAC task attains;
``tile_scale``
    the TileDMA rate over the seed's TileDMA/KernelDMA ratio x the read bandwidth (it
    absorbs what the SoC's system cache serves of activation reads; no explicit term).

The fit minimizes the sum of squared log errors over :data:`POINTS`, under the bound of
:data:`FIXED_COST_BOUND` (MobileNetV3-small runs in 0.13 ms on an A16: its program
overhead plus its tasks' dispatch cannot exceed that).  It is a coordinate descent over
fixed grids (deterministic: the same plans give the same values), rounded to three
significant digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import workloads
from . import chips
from . import spec as _spec
from .fitted import FITTED  # the committed result of fit() (the model imports it from there)
from .model import ModelParams, array_times

__all__ = ["Point", "POINTS", "FIXED_COST_BOUND", "FITTED", "fit", "errors", "point_workload"]


@dataclass(frozen=True)
class Point:
    """A public measurement: what ran, where, how long, who says so."""

    id: str
    what: str
    spec: str  # a built-in workload name, "transformer:<spec>" or "matmul:MxKxN"
    chip: str
    measured_s: float
    source: str
    programs: int = 1  # Core ML programs a run submits


#: the calibration points (/work/shared/measured/ane-latency.md, as corrected in
#: docs/roofline.md: the GPT-2 large 512-token forward ran on an M1 Max)
POINTS = (
    Point(
        "K1",
        "ResNet-50 fp16, 224x224",
        "resnet50",
        "a16",
        1.52e-3,
        "apple/coremltools docs-guides opt-quantization-perf.md (iPhone 14 Pro, iOS 17)",
    ),
    Point("K2", "ResNet-50 fp16, 224x224", "resnet50", "a17-pro", 1.38e-3, "same table (iPhone 15 Pro)"),
    Point("K3", "MobileNetV2 fp16, 224x224", "mobilenetv2", "a16", 0.48e-3, "same table"),
    Point("K4", "MobileNetV2 fp16, 224x224", "mobilenetv2", "a17-pro", 0.49e-3, "same table"),
    Point(
        "K5",
        "Llama lm_head, [1,4096] x 4096x128256 fp16",
        "matmul:1x4096x128256",
        "m1",
        17.26e-3,
        "Anemll/anemll-bench Results.MD (1050.67 MB / 60.87 GB/s)",
    ),
    Point(
        "K6",
        "Llama lm_head, [1,4096] x 4096x128256 fp16",
        "matmul:1x4096x128256",
        "m4-pro",
        8.31e-3,
        "Anemll/anemll-bench Results.MD (1050.67 MB / 126.36 GB/s)",
    ),
    Point(
        "K7",
        "GPT-2 large, 512-token forward, LM head on the last position",
        "transformer:layers=36,d=1280,heads=20,ffn=5120,vocab=50257,seq=512,kv=512,lm_tokens=1,"
        "act=gelu,norm=layer",
        "m1-max",
        210e-3,
        'smpanaro/more-ane-transformers evals/SPEED.md @529f1e3 ("2021 MBP M1": an M1 Max)',
    ),
)

#: (workload, chip, seconds): the fixed costs of this run are at most its measured time
FIXED_COST_BOUND = (
    "mobilenetv3-small",
    "a16",
    0.13e-3,
    "apple/coremltools docs-guides opt-palettization-perf.md, MobileNetv3-small Float16",
)


_GRIDS = {
    "program_overhead_s": ("geom", 1e-6, 1e-3, 61),
    "dispatch_s": ("geom", 1e-8, 1e-5, 61),
    "compute_efficiency": ("lin", 0.05, 1.0, 96),
    "tile_scale": ("geom", 0.25, 16.0, 61),
}
_START = {"program_overhead_s": 1e-4, "dispatch_s": 1e-6, "compute_efficiency": 0.5, "tile_scale": 1.0}


def point_workload(spec: str):
    """The workload a point's ``spec`` names."""
    if spec.startswith("transformer:"):
        return _spec.parse_transformer(spec.split(":", 1)[1])
    if spec.startswith("matmul:"):
        return _spec.parse_matmul(spec.split(":", 1)[1])
    return workloads.get(spec)


def _grid(kind, lo, hi, n):
    if kind == "geom":
        return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def predict(arrays: dict, chip, values: dict, programs: int = 1) -> float:
    """Predicted seconds of a run (its tasks' arrays) with the free parameters ``values``."""
    p = ModelParams(bandwidth="read", one_ane=True, system_cache=True, **values)
    t = array_times(arrays, chips.get(chip), p)
    return float(t["total"].sum()) + programs * p.program_overhead_s


def _objective(values: dict, pts: list, bound) -> float:
    err = sum(math.log(predict(a, p.chip, values, p.programs) / p.measured_s) ** 2 for p, a in pts)
    tasks, limit = bound
    fixed = values["program_overhead_s"] + tasks * values["dispatch_s"]
    return err + (1e3 * (fixed / limit - 1) ** 2 if fixed > limit else 0.0)


def fit(arrays, sweeps: int = 6) -> dict:
    """Fit the free parameters on :data:`POINTS` planned by ``arrays`` (see the module
    docstring); the values, rounded to three significant digits."""
    pts = [(p, arrays(p.spec)) for p in POINTS]
    bound_arrays = arrays(FIXED_COST_BOUND[0])
    bound = (len(bound_arrays["macs"]), FIXED_COST_BOUND[2])
    values = dict(_START)
    grids = {k: _grid(*g) for k, g in _GRIDS.items()}
    for _ in range(sweeps):
        for k, grid in grids.items():
            best = min(grid, key=lambda v: (_objective({**values, k: v}, pts, bound), v))
            values[k] = best
    return {k: float(f"{v:.3g}") for k, v in values.items()}


def errors(arrays, values: dict | None = None, points=POINTS) -> list:
    """``[(point, predicted seconds, predicted / measured)]`` of ``points`` planned by
    ``arrays``, with ``values`` (default :data:`FITTED`)."""
    values = FITTED if values is None else values
    out = []
    for p in points:
        t = predict(arrays(p.spec), p.chip, values, p.programs)
        out.append((p, t, t / p.measured_s))
    return out


def rms_log_error(ratios) -> float:
    """exp(rms of ln(predicted / measured)): 1.0 is exact, 1.3 is 30% typical error."""
    ratios = list(ratios)
    return math.exp(math.sqrt(sum(math.log(r) ** 2 for r in ratios) / len(ratios))) if ratios else math.nan
