"""The time model: per-task times from :class:`~fastane.stats.Stats` (the counters the
stats-only device fills when it runs a lowered program, :func:`fastane.networks.plan.analyze`),
on a :class:`~fastane.roofline.chips.Chip` (:func:`task_times`, :func:`estimate`).

The time model:

``compute = 2 x (MACs - INT8 MACs) / peak_fp16 + 2 x INT8 MACs / peak_int8 + planar_ops / planar_rate``
(``peak_int8``: :mod:`fastane.roofline.int8`, 256 INT8 lanes a core)
``dma = 0.939 x kernel/BW_kernel + 0.981 x tile_src/BW_tile + tile_dst/BW_tile + control/BW_tile``
(and at least all bytes / DRAM bandwidth)
``task = max(compute, dma) + dispatch``;  ``program = sum(task) + 0.001 s``

The seed measured (M3) ``T_AB = 0.001 + 0.939 T_A + 0.981 T_B``: KernelDMA and TileDMA
times add.  The seed gives no unit for the times; fastane reads them as **seconds**, so
the constant is **1 ms, once per measured execution** (one program submission), not per
task: the kernel/tile bandwidths the same text quotes are reciprocals of slopes in
seconds per byte (GB/s), and a regression intercept of 0.001 printed to three decimals
is a natural magnitude in seconds (0.5-1.5 ms, the order of a request's fixed cost) but
would be an implausibly exact +-0.5 us if the unit were milliseconds.  It is
``ModelParams.program_overhead_s``; set it to 1e-6 to explore the other reading.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..stats import PLAN_COUNTERS, Stats
from . import chips as _chips
from . import int8 as _int8
from .fitted import FITTED

__all__ = [
    "ModelParams",
    "RUNTIMES",
    "calibrated",
    "DEFAULT_PARAMS",
    "SEED_PARAMS",
    "rates",
    "task_times",
    "task_arrays",
    "w8a8",
    "Estimate",
    "estimate",
    "sum_stats",
    "tokens_per_s_bound",
    "dram_traffic",
]

#: counters of a Stats that add up over tasks (every field but the per-task list)
_COUNTERS = tuple(f.name for f in dataclasses.fields(Stats) if f.name != "tasks_detail")


def sum_stats(tasks: list) -> Stats:
    """One Stats adding up ``tasks`` (per-task Stats) and keeping them in ``tasks_detail``."""
    tot = Stats(tasks_detail=list(tasks))
    for name in _COUNTERS:
        setattr(tot, name, sum(getattr(t, name) for t in tasks))
    return tot


# ===================================================================== the time model


@dataclass(frozen=True)
class ModelParams:
    """Knobs of the time model (defaults: the seed's fit and fastane's assumptions)."""

    #: T_AB = intercept + kernel_coef T_A + tile_coef T_B (seed m1-ane, measured on an M3)
    kernel_coef: float = 0.939
    tile_coef: float = 0.981
    #: the fit's intercept, read as seconds (see the module docstring): once per program
    #: submitted through Core ML (``runtime="coreml"``)
    program_overhead_s: float = 0.001
    #: how the program is submitted: ``"coreml"`` (an ``MLModel`` prediction: Core ML's
    #: scheduling, ``program_overhead_s`` or the chip's own in ``chip_overhead_s``) or
    #: ``"direct"`` (dispatched through the private ANE API with no Core ML around it, as
    #: the direct-ANE micro-benchmarks run: ``direct_overhead_s``)
    runtime: str = "coreml"
    #: once per program dispatched directly (``runtime="direct"``)
    direct_overhead_s: float = 0.0
    #: the rate (B/s) at which a direct harness copies a call's input and output arrays to
    #: and from the program's buffers, for the points whose measurement includes that copy
    #: (ANEForge times the whole Python call: ``calibrate.Point.io_bytes``); a prediction
    #: of the program alone never pays it (``math.inf``: no copy)
    direct_copy_bw: float = math.inf
    #: ``((chip key, seconds), ...)``: a Core ML program's fixed cost on those chips,
    #: replacing ``program_overhead_s`` there (a device/OS generation with its own floor)
    chip_overhead_s: tuple = ()
    #: TileDMADst and ControlDMA: unmeasured; assumed to run at the TileDMA rate and to
    #: add serially like the measured engines (coefficient 1)
    dst_coef: float = 1.0
    control_coef: float = 1.0
    #: per-task dispatch; None uses the chip's figure (1 us, an assumption)
    dispatch_s: float | None = None
    #: planar-engine elementwise rate as a fraction of the chip's peak FP16 OP/s
    #: (unmeasured assumption: 1/16; planar layers are DMA-bound at any plausible rate)
    planar_fraction: float = 1 / 16
    #: fraction of the FP16 peak a MAC task attains (1.0: every lane busy every cycle)
    compute_efficiency: float = 1.0
    #: a one-tap task's (1 x 1 convolution, matmul: ``Stats.pointwise_macs``) MAC rate as a
    #: fraction of a multi-tap one's: an input element feeds one MAC an output channel, with
    #: no reuse across taps while the inputs shift through the array (1.0: no difference)
    pointwise_efficiency: float = 1.0
    #: which bandwidths the DMA engines run at: "dma" (the chip's kernel_dma_bw/tile_dma_bw,
    #: the seed's M3 engine measurements scaled) or "read" (KernelDMA at the chip's measured
    #: ANE read bandwidth ``read_bw_model``, the rate the lm_head benchmark streams weights
    #: at; TileDMA at that x the seed's TileDMA/KernelDMA ratio 59.08/37.99 x ``tile_scale``)
    bandwidth: str = "dma"
    #: multiplies the TileDMA rate in the "read" mode (a fit: it absorbs activation reads
    #: the SoC's system cache serves, which the model has no explicit term for)
    tile_scale: float = 1.0
    #: the share of a task's KernelDMA time hidden under its TileDMA traffic (0: the
    #: engines' times add, as the seed measured within one task; 1: weights stream while
    #: the tiles move, e.g. the next task's kernel prefetched); a task's DMA time is never
    #: below its KernelDMA time alone
    kernel_overlap: float = 0.0
    #: one Core ML program runs on one ANE of a multi-die chip (``Chip.peak_ops_program``)
    one_ane: bool = False
    #: the SoC's system cache serves activations: on a chip with a known ``slc_bytes``,
    #: TileDMA traffic (every task's tiles are at most the 2 MiB L2, far below any SLC) is
    #: not bounded by the DRAM bandwidth; weights and TDs still are
    system_cache: bool = False

    def __post_init__(self):
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        if not 0 < self.pointwise_efficiency <= 1:
            raise ValueError(f"pointwise_efficiency must be in (0, 1], got {self.pointwise_efficiency}")
        if not 0 <= self.kernel_overlap <= 1:
            raise ValueError(f"kernel_overlap must be in [0, 1], got {self.kernel_overlap}")
        if not self.direct_copy_bw > 0:
            raise ValueError(f"direct_copy_bw must be > 0 B/s, got {self.direct_copy_bw}")

    def overhead_s(self, chip) -> float:
        """The fixed cost of one program on ``chip`` by this runtime path."""
        if self.runtime == "direct":
            return self.direct_overhead_s
        key = _chips.get(chip).key
        return dict(self.chip_overhead_s).get(key, self.program_overhead_s)


#: the runtime paths a prediction can take (``ModelParams.runtime``)
RUNTIMES = ("coreml", "direct")

#: the model as the seed and fastane's first assumptions had it (1 ms per program, 1 us per
#: task, the M3 engine bandwidths scaled, every lane busy): kept to compare with
SEED_PARAMS = ModelParams()


def task_arrays(tasks) -> dict:
    """float64 arrays, one per counter the plan fixes (:data:`fastane.stats.PLAN_COUNTERS`)."""
    return {
        n: np.fromiter((getattr(t, n) for t in tasks), dtype=np.float64, count=len(tasks))
        for n in PLAN_COUNTERS
    }


def w8a8(arrays: dict) -> dict:
    """The per-task arrays of a W8A8 program from its fp16-activation plan with 8-bit
    weights: every tensor a task moves through TileDMA is int8 (1 byte an element instead
    of 2) and every MAC runs on the INT8 lanes.  An approximation at the plan's level:
    fastane lowers a quantized model's convolutions and matmuls to INT8 tasks
    (:mod:`fastane.model.placement.qlinear`), not a whole network's int8 residual adds
    and pooling, so a built-in workload is planned in fp16 and converted here."""
    out = dict(arrays)
    out["tile_dma_src_bytes"] = arrays["tile_dma_src_bytes"] / 2
    out["tile_dma_dst_bytes"] = arrays["tile_dma_dst_bytes"] / 2
    out["int8_macs"] = arrays["macs"].copy()
    return out


def _as_tasks(stats) -> list:
    """Per-task Stats of a Stats (its tasks_detail), a list, or a plan (a
    :class:`~fastane.roofline.plan.LayerPlan` or :class:`~fastane.roofline.plan.WorkloadPlan`)."""
    if hasattr(stats, "tasks") and hasattr(stats, "layers"):  # a WorkloadPlan
        return stats.tasks
    if hasattr(stats, "layer") and isinstance(getattr(stats, "stats", None), Stats):  # a LayerPlan
        return stats.stats.tasks_detail or [stats.stats]
    if isinstance(stats, Stats):
        return stats.tasks_detail or [stats]
    return list(stats)


def calibrated(values: dict = FITTED, **changes) -> ModelParams:
    """The calibrated model with the free parameters ``values`` (default: the committed
    fit, ``FITTED``; its ``chip_overhead_s`` a dict of chip key -> seconds) and any other
    field changed (``runtime="direct"``)."""
    values = dict(values)
    per_chip = tuple(sorted(values.pop("chip_overhead_s", {}).items()))
    return ModelParams(
        bandwidth="read", one_ane=True, system_cache=True, chip_overhead_s=per_chip, **values, **changes
    )


#: the calibrated model (``fastane.roofline.calibrate``: fitted on the calibration points of
#: docs/roofline.md only, planned on the one path; ``python -m fastane.networks.calibrate``
#: reproduces ``calibrate.FITTED``)
DEFAULT_PARAMS = calibrated()


def rates(chip, params: ModelParams = DEFAULT_PARAMS) -> dict:
    """The rates the time model uses on ``chip``: ``peak`` (OP/s attained by a MAC task),
    ``kernel`` and ``tile`` (B/s), ``dispatch`` (s a task)."""
    chip = _chips.get(chip)
    peak = chip.peak_ops_program if params.one_ane else chip.peak_ops_fp16.value
    if params.bandwidth == "read":
        kbw = chip.read_bw_model.value
        tbw = kbw * (_chips.M3_TILE_DMA.value / _chips.M3_KERNEL_DMA.value) * params.tile_scale
    elif params.bandwidth == "dma":
        kbw, tbw = chip.kernel_dma_bw.value, chip.tile_dma_bw.value
    else:
        raise ValueError(f"bandwidth must be 'dma' or 'read', got {params.bandwidth!r}")
    disp = chip.dispatch_s.value if params.dispatch_s is None else params.dispatch_s
    peak8 = _int8.peak_ops_int8_program(chip) if params.one_ane else _int8.peak_ops_int8(chip).value
    return {
        "peak": peak * params.compute_efficiency,
        "peak_int8": peak8 * params.compute_efficiency,
        "kernel": kbw,
        "tile": tbw,
        "dispatch": disp,
    }


def task_times(tasks, chip="m1", params: ModelParams = DEFAULT_PARAMS) -> dict:
    """Seconds per task, as arrays: ``compute``, ``kernel_dma``, ``tile_dma`` (src),
    ``dst_dma``, ``control_dma``, ``dma`` (the weighted sum), ``dispatch``, ``total``.

    A Stats without ``tasks_detail`` counts as one task (even when ``tasks`` > 1), so give
    per-task Stats for per-task maxima.
    """
    chip = _chips.get(chip)
    return array_times(task_arrays(_as_tasks(tasks)), chip, params)


def array_times(a: dict, chip, params: ModelParams) -> dict:
    """Per-task times (s) by term, from the counters of :func:`task_arrays`."""
    r = rates(chip, params)
    peak, kbw, tbw, disp = r["peak"], r["kernel"], r["tile"], r["dispatch"]
    mac = (
        2 * (a["macs"] - a["int8_macs"]) / peak + 2 * a["int8_macs"] / r["peak_int8"]
    )  # fastane.roofline.int8
    one_tap = np.divide(a["pointwise_macs"], a["macs"], out=np.zeros_like(mac), where=a["macs"] > 0)
    mac = mac * (1 + (1 / params.pointwise_efficiency - 1) * one_tap)
    compute = mac + a["planar_ops"] / (peak * params.planar_fraction)
    kern = a["kernel_dma_bytes"] / kbw
    tile = a["tile_dma_src_bytes"] / tbw
    dst = a["tile_dma_dst_bytes"] / tbw
    ctl = a["control_dma_bytes"] / tbw
    rest = params.tile_coef * tile + params.dst_coef * dst + params.control_coef * ctl
    dma = np.maximum(
        params.kernel_coef * kern * (1 - params.kernel_overlap) + rest, params.kernel_coef * kern
    )
    # the SoC's DRAM bandwidth bounds all engines together (matters where a borrowed DMA
    # bandwidth is capped at DRAM and the fit's coefficients < 1 would beat it)
    total_bytes = (
        a["kernel_dma_bytes"] + a["tile_dma_src_bytes"] + a["tile_dma_dst_bytes"] + a["control_dma_bytes"]
    )
    if params.system_cache and chip.slc_bytes is not None:
        total_bytes = a["kernel_dma_bytes"] + a["control_dma_bytes"]
    dma = np.maximum(dma, total_bytes / chip.dram_bw.value)
    n = len(compute)
    dispatch = np.full(n, disp)
    return {
        "compute": compute,
        "kernel_dma": kern,
        "tile_dma": tile,
        "dst_dma": dst,
        "control_dma": ctl,
        "dma": dma,
        "dispatch": dispatch,
        "total": np.maximum(compute, dma) + dispatch,
    }


@dataclass
class Estimate:
    """The model's verdict on a program (or one layer of it) for one chip."""

    name: str
    chip: str
    tasks: int
    macs: int
    planar_ops: int
    dram_bytes: int
    kernel_dma_bytes: int
    tile_dma_src_bytes: int
    tile_dma_dst_bytes: int
    control_dma_bytes: int
    #: sums over tasks (seconds)
    compute_s: float
    dma_s: float
    dispatch_s: float
    #: program overhead (the fit's intercept), 0 for a layer
    overhead_s: float
    #: predicted time: sum over tasks of max(compute, dma) + dispatch, + overhead
    time_s: float
    #: tasks whose DMA time exceeds their compute time
    dma_bound_tasks: int
    peak_ops: float
    dram_bw: float
    #: the DMA time split: KernelDMA (weights) and TileDMA (activations, TDs) seconds
    kernel_s: float = 0.0
    tile_s: float = 0.0

    @property
    def ops(self) -> int:
        """Operations: 2 per MAC plus the planar engine's elementwise operations."""
        return 2 * self.macs + self.planar_ops

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, OP per byte of DRAM traffic."""
        return self.ops / self.dram_bytes if self.dram_bytes else math.inf

    @property
    def ridge(self) -> float:
        """Ridge point of the chip (marketing peak / marketing DRAM bandwidth), OP/byte."""
        return self.peak_ops / self.dram_bw

    @property
    def bound(self) -> str:
        """ "memory" below the ridge point, "compute" at or above it (classic roofline)."""
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def limiter(self) -> str:
        """Largest part of the predicted time: "compute", "dma", "dispatch" (per task) or
        "overhead" (the once-per-program constant)."""
        parts = {
            "compute": self.compute_s,
            "dma": self.dma_s,
            "dispatch": self.dispatch_s,
            "overhead": self.overhead_s,
        }
        return max(parts, key=parts.get)

    @property
    def roof_ops(self) -> float:
        """Attainable OP/s at this intensity: min(peak, intensity x DRAM bandwidth)."""
        return min(self.peak_ops, self.intensity * self.dram_bw)

    @property
    def attained_ops(self) -> float:
        """OP/s the model predicts (ops / time)."""
        return self.ops / self.time_s if self.time_s else 0.0

    @property
    def pct_of_roof(self) -> float:
        return 100.0 * self.attained_ops / self.roof_ops if self.roof_ops else 0.0

    def as_dict(self) -> dict:
        d = dict(vars(self))
        for p in ("ops", "intensity", "ridge", "bound", "limiter", "roof_ops", "attained_ops", "pct_of_roof"):
            d[p] = getattr(self, p)
        if d["intensity"] == math.inf:
            d["intensity"] = None
        return d


def estimate(
    stats, chip="m1", params: ModelParams = DEFAULT_PARAMS, name: str = "", program: bool = True
) -> Estimate:
    """Predict the time of ``stats`` (a Stats with per-task ``tasks_detail``, a list of
    per-task Stats, a LayerPlan or a WorkloadPlan) on ``chip``.

    ``program=True`` adds the once-per-program overhead (``params.overhead_s(chip)``: the
    runtime path's, the chip's own where the fit gives one);
    use ``program=False`` for one layer of a larger program.
    """
    chip = _chips.get(chip)
    tasks = _as_tasks(stats)
    t = task_times(tasks, chip, params)
    tot = sum_stats(tasks) if not isinstance(stats, Stats) or not stats.tasks_detail else stats
    over = params.overhead_s(chip) if program else 0.0
    return Estimate(
        name=name,
        chip=chip.key,
        tasks=int(tot.tasks),
        macs=int(tot.macs),
        planar_ops=int(tot.planar_ops),
        dram_bytes=int(tot.dram_bytes),
        kernel_dma_bytes=int(tot.kernel_dma_bytes),
        tile_dma_src_bytes=int(tot.tile_dma_src_bytes),
        tile_dma_dst_bytes=int(tot.tile_dma_dst_bytes),
        control_dma_bytes=int(tot.control_dma_bytes),
        compute_s=float(t["compute"].sum()),
        dma_s=float(t["dma"].sum()),
        dispatch_s=float(t["dispatch"].sum()),
        overhead_s=over,
        time_s=float(t["total"].sum()) + over,
        dma_bound_tasks=int((t["dma"] > t["compute"]).sum()),
        peak_ops=chip.peak_ops_fp16.value,
        dram_bw=chip.dram_bw.value,
        kernel_s=float((params.kernel_coef * t["kernel_dma"]).sum()),
        tile_s=float(
            (
                params.tile_coef * t["tile_dma"]
                + params.dst_coef * t["dst_dma"]
                + params.control_coef * t["control_dma"]
            ).sum()
        ),
    )


def dram_traffic(est: "Estimate", chip="m1", params: ModelParams = DEFAULT_PARAMS) -> int:
    """Bytes ``est`` moves through DRAM in the model: every DMA byte, or, where the system
    cache serves activations (``params.system_cache`` on a chip with ``slc_bytes``), the
    weights (KernelDMA) and TDs (ControlDMA) only."""
    chip = _chips.get(chip)
    if params.system_cache and chip.slc_bytes is not None:
        return est.kernel_dma_bytes + est.control_dma_bytes
    return est.dram_bytes


def tokens_per_s_bound(dram_bytes: float, chip="m1", bandwidth: str = "dram") -> float:
    """Upper bound on decode tokens/s: a bandwidth / the bytes one token moves.

    ``bandwidth``: ``"dram"`` (marketing DRAM), ``"ane_read"`` (measured ANE read,
    anemll-bench; NaN where unmeasured) or ``"kernel_dma"`` (KernelDMA engine).
    With ``dram_bytes`` >= 2 x parameters (fp16 weights), this never exceeds
    bandwidth / 2P.
    """
    chip = _chips.get(chip)
    fig = {"dram": chip.dram_bw, "ane_read": chip.ane_read_bw, "kernel_dma": chip.kernel_dma_bw}[bandwidth]
    if fig is None:
        return math.nan
    return fig.value / dram_bytes
