"""Calibration of the time model's free parameters on the calibration points only
(docs/roofline.md, "Calibration"): ``python -m fastane.networks.calibrate`` re-runs the fit
on the one path's plans (:func:`fastane.networks.calibrate.one_path`) and prints the fitted
values and each point's error; :data:`FITTED` holds the committed result, which
:data:`fastane.roofline.model.DEFAULT_PARAMS` uses (a test checks that :func:`fit`
reproduces it).  ``arrays`` below: a function from a point's ``spec`` (and its
``weight_bits``) to the per-task counter arrays of its plan
(:func:`fastane.roofline.model.task_arrays`).

The free parameters (fields of :class:`~fastane.roofline.model.ModelParams`), and what
fixes each:

``program_overhead_s``
    a fixed cost per program (one Core ML prediction);
``direct_overhead_s``
    a fixed cost per program dispatched directly (the direct-ANE points);
``direct_copy_bw``
    the rate at which ANEForge's Python harness copies a call's input and output
    (:attr:`Point.io_bytes`; its streaming probes are little else): a property of the
    measurement, never of a prediction;
``dispatch_s``
    a fixed cost per task descriptor;
``compute_efficiency``
    the fraction of the FP16 peak a MAC task attains;
``tile_scale``
    the TileDMA rate over the seed's TileDMA/KernelDMA ratio x the read bandwidth (it
    absorbs what the SoC's system cache serves of activation reads; no explicit term);
and the :data:`OPTIONAL` ones, kept by :func:`select`: ``kernel_overlap`` (the share of
KernelDMA time hidden under TileDMA), ``pointwise_efficiency`` (the one-tap MAC rate) and
``chip_overhead_s.<chip>`` (a Core ML program's fixed cost on the chips of
:data:`OWN_OVERHEAD`).

The fit minimizes the sum of squared log errors over :data:`POINTS`, under the bound of
:data:`FIXED_COST_BOUND` (MobileNetV3-small runs in 0.13 ms on an A16: its program
overhead plus its tasks' dispatch cannot exceed that).  It is a coordinate descent over
fixed grids (deterministic: the same plans give the same values), rounded to three
significant digits.
"""

from __future__ import annotations

import functools
import itertools
import math
from math import prod
from dataclasses import dataclass

import numpy as np

from .. import workloads
from . import chips
from . import spec as _spec
from .fitted import FITTED  # the committed result of fit() (the model imports it from there)
from .model import ModelParams, array_times, calibrated, w8a8

__all__ = [
    "Point",
    "ANEFORGE_PROGRAMS",
    "aneforge_point",
    "POINTS",
    "FIXED_COST_BOUND",
    "FITTED",
    "OWN_OVERHEAD",
    "fit",
    "errors",
    "point_workload",
    "point_arrays",
]


@dataclass(frozen=True)
class Point:
    """A public measurement: what ran, where, how long, who says so."""

    id: str
    what: str
    spec: str  # a built-in workload name, "transformer:<spec>" or "matmul:MxKxN"
    chip: str
    measured_s: float
    source: str
    programs: int = 1  # programs a run submits
    #: how the programs are submitted (``ModelParams.runtime``): "coreml" or "direct"
    runtime: str = "coreml"
    #: 0: fp16 weights; else every weight palettized to codes of that many bits
    weight_bits: int = 0
    #: 8: a W8A8 program (int8 weights and activations, :func:`~.model.w8a8`); 16: fp16
    activation_bits: int = 16
    #: runs of the workload in one program (batch 2 as two sequences)
    repeat: int = 1
    #: the measurement includes the harness's copy of a call's input and output between the
    #: caller's arrays and the program (ANEForge's Python harness: :attr:`io_bytes`); False:
    #: the measurement is of the program alone
    harness_copy: bool = False

    @functools.cached_property
    def io_bytes(self) -> int:
        """Bytes the harness copies per call (:func:`io_bytes` of the point's ``spec`` and
        ``repeat``) where :attr:`harness_copy`, else 0."""
        return io_bytes(self.spec, self.repeat) if self.harness_copy else 0


def point_workload(spec: str, weight_bits: int = 0):
    """The workload a point's ``spec`` names (``weight_bits``: palettized to that width)."""
    kind, _, rest = spec.partition(":")
    parse = {
        "transformer": _spec.parse_transformer,
        "matmul": _spec.parse_matmul,
        "convs": _spec.parse_convs,
        "relu": _spec.parse_relu,
    }
    wl = parse[kind](rest) if rest and kind in parse else workloads.get(spec)
    return workloads.palettized(wl, weight_bits) if weight_bits else wl


def io_bytes(spec: str, repeat: int = 1) -> int:
    """fp16 bytes of a one-input, one-output program's input and output (its first layer's
    input, its last layer's output), ``repeat`` runs of it: what a harness that converts
    the caller's arrays each call copies (:attr:`Point.io_bytes`)."""
    layers = point_workload(spec).layers
    first, last = layers[0], layers[-1]

    def elems(layer, side):
        if layer.kind == "matmul":
            return layer.B * layer.M * (layer.K if side == "in" else layer.N)
        if layer.kind == "conv2d":
            return layer.cin * layer.h * layer.w if side == "in" else layer.cout * layer.hout * layer.wout
        return layer.n_inputs * prod(layer.in_shape) if side == "in" else prod(layer.out_shape)  # eltwise

    return 2 * repeat * (elems(first, "in") + elems(last, "out"))


_ANEFORGE = "sbryngelson/ANEForge@067717a bench/results/device_compare_wattcomplete_results_{}.json"


#: the programs of ANEForge's watt-complete comparison (``bench/device_compare_wattcomplete.py``:
#: ``wl_gemm``, ``wl_conv``), spec and description: the calibration points K12-K14 and K18-K24
#: and the validation points S25-1..5 (:mod:`~fastane.roofline.validate`) time them
ANEFORGE_PROGRAMS = (
    ("matmul:64x256x256", "GEMM 64x256x256 fp16"),
    ("matmul:128x1024x1024", "GEMM 128x1024x1024 fp16"),
    ("matmul:256x4096x4096", "GEMM 256x4096x4096 fp16"),
    ("convs:1x64x32x3", "one conv 3x3, 64 channels, 32x32, fp16"),
    ("convs:16x256x32x3", "16 x conv 3x3, 256 channels, 32x32, fp16"),
)
#: chip -> each of :data:`ANEFORGE_PROGRAMS`' (point id, seconds), in its order: the fastest
#: of 30 Python calls after 8 warm-ups.  K12-K14 came first (docs/roofline.md); the M1's
#: small GEMM and convolution (the harness's floor) and the M2's five were added on 2026-12-06
_ANEFORGE_RUNS = {
    "m1": (("K18", 0.1644e-3), ("K12", 0.405e-3), ("K13", 2.394e-3), ("K19", 0.1914e-3), ("K14", 1.918e-3)),
    "m2": (
        ("K20", 0.1099e-3),
        ("K21", 0.1351e-3),
        ("K22", 2.0434e-3),
        ("K23", 0.1068e-3),
        ("K24", 1.2649e-3),
    ),
}
#: the points whose source the table gives as "same" (that of K12, the row above them)
_ANEFORGE_SAME = ("K13", "K14")


def aneforge_point(cls, pid: str, program: tuple, chip: str, seconds: float, source: str = "", **fields):
    """A point (``cls``: :class:`Point` or a subclass, ``fields`` its other fields) of
    ANEForge's comparison: ``program`` (a row of :data:`ANEFORGE_PROGRAMS`) run on ``chip``,
    one program dispatched directly, its source ``source`` (default: the chip's results
    file)."""
    spec, what = program
    src = source or _ANEFORGE.format(chip.upper())
    return cls(
        pid, f"{what}, one program on the ANE directly", spec, chip, seconds, src, runtime="direct", **fields
    )


def _aneforge_points() -> tuple:
    """The points of :data:`_ANEFORGE_RUNS`, in the order of their ids."""
    out = [
        aneforge_point(
            Point,
            pid,
            program,
            chip,
            t,
            "same" if pid in _ANEFORGE_SAME else "",
            harness_copy=True,
        )
        for chip, run in _ANEFORGE_RUNS.items()
        for program, (pid, t) in zip(ANEFORGE_PROGRAMS, run, strict=True)
    ]
    return tuple(sorted(out, key=lambda p: int(p.id[1:])))


_ROOFLINES = "sbryngelson/ANEForge@{} bench/results/rooflines/roofline-apple-{}.json"


#: the two roofline submissions of :func:`_sweep_points`: chip, commit, file, machine
_SWEEP_RUNS = {
    "m1-air": ("m1", "112bd8d", "m1-MacBookAir10_1-bb9e71be3ae6-22b6e4fa", "MacBook Air M1, macOS 15.6.1"),
    "m4-air": ("m4", "14105bf", "m4-Mac16_12-d4109cd41a75-6779bad2", "MacBook Air M4, macOS 26.2"),
}
#: (id, run, spec, batch, seconds): ``linear`` N x N (matmul), ``relu`` R x 4096, one 3x3
#: convolution of C channels on 64 x 64 (convs) of a batch
_SWEEP = (
    ("K25", "m1-air", "matmul:512x512x512", 1, 0.3317e-3),
    ("K26", "m1-air", "matmul:1024x1024x1024", 1, 0.9933e-3),
    ("K27", "m1-air", "matmul:2048x2048x2048", 1, 4.9607e-3),
    ("K28", "m1-air", "matmul:4096x4096x4096", 1, 31.739e-3),
    ("K29", "m1-air", "relu:256x4096", 1, 0.8503e-3),
    ("K30", "m1-air", "relu:2048x4096", 1, 6.2168e-3),
    ("K31", "m1-air", "relu:8192x4096", 1, 25.6588e-3),
    ("K32", "m1-air", "convs:1x64x64x3", 8, 1.5805e-3),
    ("K33", "m1-air", "convs:1x128x64x3", 8, 3.4893e-3),
    ("K34", "m1-air", "convs:1x256x64x3", 4, 4.5644e-3),
    ("K35", "m1-air", "convs:1x512x64x3", 2, 7.0936e-3),
    ("K36", "m4-air", "matmul:512x512x512", 1, 0.2086e-3),
    ("K37", "m4-air", "matmul:1024x1024x1024", 1, 0.7459e-3),
    ("K38", "m4-air", "matmul:2048x2048x2048", 1, 3.5133e-3),
    ("K39", "m4-air", "matmul:4096x4096x4096", 1, 25.286e-3),
    ("K40", "m4-air", "relu:256x4096", 1, 0.5702e-3),
    ("K41", "m4-air", "relu:2048x4096", 1, 4.4613e-3),
    ("K42", "m4-air", "relu:8192x4096", 1, 17.8948e-3),
    ("K43", "m4-air", "convs:1x128x64x3", 16, 4.7067e-3),
    ("K44", "m4-air", "convs:1x256x64x3", 8, 5.9928e-3),
    ("K45", "m4-air", "convs:1x512x64x3", 4, 8.1417e-3),
)


def _sweep_what(spec: str, batch: int, machine: str) -> str:
    """The table's "model" cell of a :data:`_SWEEP` row."""
    kind, _, shape = spec.partition(":")
    if kind == "matmul":
        return f"GEMM {shape} fp16, one program on the ANE directly (saturation sweep, {machine})"
    if kind == "relu":
        rows = shape.split("x")[0]
        return f"relu of a {rows} x 4096 fp16 array, one program on the ANE directly (streaming probe, {machine})"
    c = shape.split("x")[1]
    return (
        f"conv 3x3, {c} channels, 64x64, batch {batch}, fp16, one program on the ANE directly "
        f"(saturation sweep, {machine})"
    )


def _sweep_points() -> tuple:
    """ANEForge's roofline suite (``bench/roofline_suite.py --perf``) as two machines
    submitted it to ``bench/results/rooflines/`` (added on 2026-12-06), the fastest of
    several Python calls after warm-ups: its saturation sweep
    (``bench/device_saturation_sweep.py``: one ``linear`` of an N x N input by N x N
    weights, one-tap programs of 512 to 4096 positions; one 3 x 3 convolution of C channels
    on a 64 x 64 map, a batch of B images, as B runs) and its streaming probe
    (``bench/device_bandwidth_roofline.py``: one ``relu`` of an R x 4096 array, nothing
    but the harness's copies and the ANE's DMA)."""
    out = []
    for pid, run, spec, batch, t in _SWEEP:
        chip, commit, name, machine = _SWEEP_RUNS[run]
        src = _ROOFLINES.format(commit, name)
        what = _sweep_what(spec, batch, machine)
        out.append(Point(pid, what, spec, chip, t, src, runtime="direct", repeat=batch, harness_copy=True))
    return tuple(out)


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
        "K8",
        "ResNet-50, 4-bit palettized weights, fp16 activations, 224x224",
        "resnet50",
        "a16",
        1.41e-3,
        "apple/coremltools docs-guides opt-palettization-perf.md (iPhone 14 Pro, iOS 17, Xcode median)",
        weight_bits=4,
    ),
    Point(
        "K9",
        "ResNet-50, W8A8 (int8 weights and activations), 224x224",
        "resnet50",
        "a16",
        0.94e-3,
        "apple/coremltools docs-guides opt-quantization-perf.md (iPhone 14 Pro, iOS 17, Xcode median)",
        weight_bits=8,
        activation_bits=8,
    ),
    Point(
        "K10",
        "MobileOne-S1 (reparameterized) fp16, 224x224",
        "mobileone-s1",
        "a14",
        0.89e-3,
        "apple/ml-mobileone README (iPhone 12 Pro, ModelBench: 20 rounds x 50, first dropped, 10 high/low trimmed)",
    ),
    Point(
        "K11", "MobileOne-S2 (reparameterized) fp16, 224x224", "mobileone-s2", "a14", 1.18e-3, "same table"
    ),
    Point(
        "K15",
        "FastViT-T8 (reparameterized) fp16, 256x256",
        "fastvit-t8",
        "a14",
        0.8e-3,
        "apple/ml-fastvit README, latency column (iPhone 12 Pro, ModelBench)",
    ),
    Point(
        "K16",
        "Stable Diffusion 2.1 base UNet, one step, 6-bit palettized (SPLIT_EINSUM_V2)",
        "sd21-unet",
        "a14",
        689.7e-3,
        "apple/ml-stable-diffusion README, performance benchmarks (iPhone 12 Pro Max, 1.45 iter/s)",
        programs=2,
        weight_bits=6,
    ),
    Point(
        "K17",
        "Stable Diffusion 2.1 base UNet, one step, 6-bit palettized (SPLIT_EINSUM_V2)",
        "sd21-unet",
        "m1",
        456.6e-3,
        "same table (iPad Pro M1)",
        programs=2,
        weight_bits=6,
    ),
    *_aneforge_points(),
    *_sweep_points(),
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


#: chips whose Core ML programs get a fixed cost of their own (``chip_overhead_s``): the
#: A14's calibration points (iPhone 12 Pro, ModelBench, iOS 15+: MobileOne, FastViT) sit
#: on a floor several times the A16's (docs/roofline.md, "Calibration")
OWN_OVERHEAD = ("a14",)

_OVERHEAD_GRID = ("geom", 1e-6, 1e-3, 61)
_GRIDS = {
    "program_overhead_s": _OVERHEAD_GRID,
    "dispatch_s": ("geom", 1e-8, 1e-5, 61),
    "compute_efficiency": ("lin", 0.05, 1.0, 96),
    "tile_scale": ("geom", 0.25, 16.0, 61),
    "direct_overhead_s": _OVERHEAD_GRID,
    "kernel_overlap": ("lin", 0.0, 1.0, 21),
    "pointwise_efficiency": ("lin", 0.05, 1.0, 96),
    "direct_copy_bw": ("geom", 0.5e9, 64e9, 43),
    **{f"chip_overhead_s.{c}": _OVERHEAD_GRID for c in OWN_OVERHEAD},
}
_START = {
    "program_overhead_s": 1e-4,
    "dispatch_s": 1e-6,
    "compute_efficiency": 0.5,
    "tile_scale": 1.0,
    "direct_overhead_s": 1e-4,
    "direct_copy_bw": 1e10,
    **{f"chip_overhead_s.{c}": 1e-4 for c in OWN_OVERHEAD},
}  # the optional parameters start at their no-effect values (OPTIONAL, below)


def _nest(flat: dict) -> dict:
    """The fit's flat coordinates (``chip_overhead_s.a14``) as ModelParams values."""
    out = {k: v for k, v in flat.items() if "." not in k}
    out["chip_overhead_s"] = {k.split(".", 1)[1]: v for k, v in flat.items() if "." in k}
    return out


def _grid(kind, lo, hi, n):
    if kind == "geom":
        return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def predict(
    arrays: dict, chip, values: dict, programs: int = 1, runtime: str = "coreml", io_bytes: int = 0
) -> float:
    """Predicted seconds of a run (its tasks' arrays) with the free parameters ``values``
    (:data:`FITTED`'s form), its programs submitted by ``runtime``, its harness copying
    ``io_bytes`` a call (:attr:`Point.io_bytes`) at ``direct_copy_bw``."""
    p = calibrated(values, runtime=runtime)
    t = array_times(arrays, chips.get(chip), p)
    return float(t["total"].sum()) + programs * p.overhead_s(chip) + io_bytes / p.direct_copy_bw


def point_arrays(arrays, p: Point) -> dict:
    """The per-task arrays of ``p``'s workload (palettized, W8A8, repeated as the point
    says)."""
    a = arrays(p.spec, p.weight_bits) if p.weight_bits else arrays(p.spec)
    if p.activation_bits == 8:
        a = w8a8(a)
    return {k: np.tile(v, p.repeat) for k, v in a.items()} if p.repeat > 1 else a


def _objective(flat: dict, pts: list, bound) -> float:
    values = _nest(flat)
    err = sum(
        math.log(predict(a, p.chip, values, p.programs, p.runtime, p.io_bytes) / p.measured_s) ** 2
        for p, a in pts
    )
    tasks, limit = bound
    fixed = calibrated(values).overhead_s(FIXED_COST_BOUND[1]) + tasks * flat["dispatch_s"]
    return err + (1e3 * (fixed / limit - 1) ** 2 if fixed > limit else 0.0)


#: the parameters whose place in the model the calibration decides (:func:`select`), and
#: each one's value when it is left out (no effect: the chip's overhead is then the
#: common one)
OPTIONAL = {
    **{k: getattr(ModelParams(), k) for k in ("kernel_overlap", "pointwise_efficiency")},
    **{f"chip_overhead_s.{c}": None for c in OWN_OVERHEAD},
}


def _flat(values: dict) -> dict:
    """:data:`FITTED`'s form as the fit's flat coordinates (``chip_overhead_s.a14``)."""
    out = {k: v for k, v in values.items() if k != "chip_overhead_s"}
    out.update({f"chip_overhead_s.{c}": v for c, v in values.get("chip_overhead_s", {}).items()})
    return out


def fit(arrays, sweeps: int = 6, points=POINTS, free=None, start: dict | None = None) -> dict:
    """Fit the free parameters on ``points`` (default :data:`POINTS`) planned by ``arrays``
    (see the module docstring); the values, rounded to three significant digits, in
    :data:`FITTED`'s form.  ``free``: the :data:`OPTIONAL` parameters fitted (default
    all); the others keep their no-effect value.  ``start``: where the descent begins
    (:data:`FITTED`'s form; default the fixed starting values)."""
    free = set(OPTIONAL) if free is None else set(free)
    pts = [(p, point_arrays(arrays, p)) for p in points]
    bound_arrays = arrays(FIXED_COST_BOUND[0])
    bound = (len(bound_arrays["macs"]), FIXED_COST_BOUND[2])
    flat = {k: v for k, v in _START.items() if k not in OPTIONAL or k in free}
    flat.update({k: v for k, v in OPTIONAL.items() if v is not None and k not in flat})
    if start is not None:
        flat.update({k: v for k, v in _flat(start).items() if k in flat})
    grids = {k: _grid(*g) for k, g in _GRIDS.items() if k not in OPTIONAL or k in free}
    for _ in range(sweeps):
        for k, grid in grids.items():
            flat[k] = min(grid, key=lambda v: (_objective({**flat, k: v}, pts, bound), v))
    return _nest({k: float(f"{v:.3g}") for k, v in flat.items()})


def errors(arrays, values: dict | None = None, points=POINTS) -> list:
    """``[(point, predicted seconds, predicted / measured)]`` of ``points`` planned by
    ``arrays``, with ``values`` (default :data:`FITTED`)."""
    values = FITTED if values is None else values
    out = []
    for p in points:
        t = predict(point_arrays(arrays, p), p.chip, values, p.programs, p.runtime, p.io_bytes)
        out.append((p, t, t / p.measured_s))
    return out


def rms_log_error(ratios) -> float:
    """exp(rms of ln(predicted / measured)): 1.0 is exact, 1.3 is 30% typical error."""
    ratios = list(ratios)
    return math.exp(math.sqrt(sum(math.log(r) ** 2 for r in ratios) / len(ratios))) if ratios else math.nan


def markdown(arrays, values: dict | None = None) -> str:
    """The calibration table of docs/roofline.md: every point with its prediction by
    ``values`` (default :data:`FITTED`) and the rms log-error, planned by ``arrays``."""
    rows = errors(arrays, values)
    lines = [
        "| id | model | chip | runtime | measured | predicted | pred/meas | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p, t, r in rows:
        lines.append(
            f"| {p.id} | {p.what} | {p.chip} | {p.runtime} | {p.measured_s * 1e3:.3f} ms | "
            f"{t * 1e3:.3f} ms | {r:.2f} | {p.source} |"
        )
    rr = [r for _, _, r in rows]
    lines += [
        "",
        f"rms log-error x{rms_log_error(rr):.3f} over {len(rr)} points, {sum(0.5 <= r <= 2 for r in rr)} within 2x",
    ]
    return "\n".join(lines)


def subsets() -> list:
    """Every subset of :data:`OPTIONAL`, as tuples of names (the order :func:`select` takes)."""
    return [
        tuple(k for k, on in zip(OPTIONAL, keep) if on)
        for keep in itertools.product((False, True), repeat=len(OPTIONAL))
    ]


#: sweeps of a leave-one-out fit, which starts from the fit on every point
LOO_SWEEPS = 2


def select(arrays, points=POINTS, among=None) -> list:
    """Which :data:`OPTIONAL` parameters the model keeps: for every subset (``among``,
    default :func:`subsets`), the fit's rms log-error on ``points`` and the leave-one-out
    one (each point predicted by a fit on the others, :data:`LOO_SWEEPS` sweeps from the
    fit on all of them), ``[(free names, fit rms, leave-one-out rms, worst held-out
    ratio)]``.  The committed model is the subset with the lowest leave-one-out error
    (docs/roofline.md, "Calibration").  Minutes: 2**len(OPTIONAL) x len(points) fits."""
    out = []
    for free in subsets() if among is None else among:
        every = fit(arrays, points=points, free=free)
        held = []
        for i, p in enumerate(points):
            values = fit(
                arrays, sweeps=LOO_SWEEPS, points=points[:i] + points[i + 1 :], free=free, start=every
            )
            held.append(errors(arrays, values, points=(p,))[0][2])
        whole = [r for _, _, r in errors(arrays, every, points)]
        worst = max(held, key=lambda r: abs(math.log(r)))
        out.append((free, rms_log_error(whole), rms_log_error(held), worst))
    return out
