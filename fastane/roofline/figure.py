"""The types of the chip table: a :class:`Figure` (a number with its unit, kind and
source), a :class:`Family` (one ANE generation and the compile limits its chips share), a
:class:`Chip` (the figures of one chip's ANE), and the builders the table in
:mod:`fastane.roofline.chips` is written with.  The kinds of figure and the sources are
explained there; :mod:`fastane.roofline.chips` re-exports every public name of this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Figure",
    "SizeFloor",
    "Floor",
    "Family",
    "Chip",
    "M3_KERNEL_DMA",
    "M3_TILE_DMA",
    "M3_ANE_READ",
    "DISPATCH_PER_TASK_S",
]


@dataclass(frozen=True)
class Figure:
    """One number with its unit, kind (marketing/measured/derived/assumption) and source."""

    value: float
    unit: str
    kind: str
    source: str
    note: str = ""

    def __post_init__(self):
        if self.kind not in ("marketing", "measured", "derived", "assumption"):
            raise ValueError(f"unknown kind of figure {self.kind!r}")

    def __float__(self) -> float:
        return float(self.value)

    def as_dict(self) -> dict:
        d = {"value": self.value, "unit": self.unit, "kind": self.kind, "source": self.source}
        if self.note:
            d["note"] = self.note
        return d


# -- the measurements every other chip borrows ----------------------------------------
#: KernelDMA (DRAM -> KMem) sustained read bandwidth, measured on an M3 (seed m1-ane).
M3_KERNEL_DMA = Figure(37.99e9, "B/s", "measured", "seed m1-ane (M3): KernelDMA 37.99 GB/s")
#: TileDMA (DRAM -> L2) sustained read bandwidth, measured on an M3 (seed m1-ane).
M3_TILE_DMA = Figure(59.08e9, "B/s", "measured", "seed m1-ane (M3): TileDMA 59.08 GB/s")
#: the M3's ANE read bandwidth by anemll-bench: the scale the two above are borrowed by.
M3_ANE_READ = Figure(63e9, "B/s", "measured", "anemll-bench via SPEC 8: M3 63 GB/s")
#: time a task costs beyond max(compute, DMA): nobody has measured it per task.
DISPATCH_PER_TASK_S = Figure(
    1e-6,
    "s",
    "assumption",
    "fastane assumption",
    "per task descriptor: ControlDMA of 0x274 bytes plus pipeline fill/drain, taken as "
    "1 us (~2,700 cycles at the implied 2.69 GHz); unmeasured. The only measured "
    "dispatch figure is per *request* (~0.095 ms XPC + IOKit on an M4, maderix), which "
    "is host-side and not per task",
)


@dataclass(frozen=True)
class SizeFloor:
    """Core ML's size floor for fp16 matrix products seen on an ANE generation, in tensor
    elements: ``matmul`` (a matmul's largest operand) and ``attention`` (the Q of a
    ``scaled_dot_product_attention``), each ``(cpu, ane)``: at most ``cpu`` elements on the
    CPU, at least ``ane`` on the ANE, in between not reported.  Each threshold is a
    :class:`Figure` whose ``source`` is the report id (``fastane/model/placement/reports.json``)
    that observed it; ``seen_on`` the chip the reports name."""

    matmul: tuple
    attention: tuple
    seen_on: str


@dataclass(frozen=True)
class Floor:
    """A size floor Core ML was seen to apply on an ANE generation, in one measure of work (the
    figures' unit): at most ``cpu`` on the CPU, at least ``other`` on the ANE (the GPU for a
    floor between the CPU and the GPU), in between not reported.  Each figure's ``source`` is
    the report id (``fastane/model/placement/reports.json``) that observed it; ``seen_on``
    the chip the reports name."""

    cpu: Figure
    other: Figure
    seen_on: str


@dataclass(frozen=True)
class Family:
    """One ANE generation (H13, H14 ...: the name reverse-engineering work gives it) and the
    compile limits its chips share, as the placement rules
    (:mod:`fastane.model.placement.predict`) read them, and the numerics that differ between ANE
    generations (``slice_crop``, ``trig_table``), as a model run reads them.  A figure of kind
    ``"measured"`` was seen on a chip of this generation; another kind is a guess the rules
    mark "uncertain"."""

    key: str
    name: str
    #: who says which chips are of this generation
    source: str
    #: the largest W and H (spatial extents, a matmul's contraction) a tensor may have
    max_extent: Figure
    #: the largest N and C
    max_channels: Figure
    #: the most dimensions of an ANE tensor (N, D, C, H, W)
    max_rank: Figure
    #: one core's KMem: the largest kernel per output channel a convolution task holds
    kmem_core_bytes: Figure
    #: the largest magnitude a slice with a non-zero offset on its last axis carries through:
    #: 4094 where such a slice takes the fixed-point crop path (a larger fp16 value reads out
    #: as +-inf), fp16's largest finite value 65504 where it does not (nothing cut); what
    #: :mod:`fastane.model.run.movement` applies to a model run as on a chip of this generation
    slice_crop: Figure
    #: whether the ANE of this generation has the sin and cos tables (1) or not (0): where it
    #: has not, the compiler does not lower them and the placement prediction
    #: (:mod:`fastane.model.placement.predict`) takes them off the ANE
    trig_table: Figure
    #: Core ML's size floor for fp16 matmul and attention seen on this generation, None where
    #: none was reported
    size_floor: SizeFloor | None = None
    #: a one-row ``linear`` alone in its program (no other op of it on the ANE), by its
    #: reduction depth: fp16 weights, and weights stored compressed (int8); None: not reported
    linear_depth: Floor | None = None
    linear_depth_int8: Floor | None = None
    #: the widest ``linear`` output seen on the ANE where W's limit is lower (its output
    #: features are not a W axis there); None: the W limit applies
    linear_width: Figure | None = None
    #: a program of 1x1 convolutions by the weights it holds (all its 1x1 convolutions')
    conv1x1_weights: Floor | None = None
    #: an fp32 matmul under ``ALL`` by its multiply-adds: the CPU or the GPU (the ANE takes no
    #: fp32 matmul)
    fp32_gpu: Floor | None = None
    #: a program segment with no matrix product (elementwise ops, normalisations, softmax) by
    #: its largest tensor's elements: the CPU up to ``cpu``, under ``ALL`` the GPU from
    #: ``other``; None: not reported (the segment stays on the ANE)
    no_matrix: Floor | None = None
    note: str = ""


@dataclass(frozen=True)
class Chip:
    """The figures of one chip's ANE.  Fields that are ``None`` are unknown."""

    key: str
    name: str
    cores: Figure
    lanes_fp16: Figure
    #: the headline TOP/s exactly as marketed (precision in ``peak_marketing_precision``)
    peak_marketing: Figure
    peak_marketing_precision: str
    #: the FP16 rate the model uses (== peak_marketing where that figure is FP16)
    peak_ops_fp16: Figure
    #: DRAM bandwidth of the SoC as marketed (or derived from the memory type for A-series)
    dram_bw: Figure
    #: measured ANE read bandwidth (anemll-bench), None where nobody measured it
    ane_read_bw: Figure | None
    kernel_dma_bw: Figure
    tile_dma_bw: Figure
    dispatch_s: Figure = DISPATCH_PER_TASK_S
    aliases: tuple = field(default=(), compare=False)
    #: the ANE read bandwidth the calibrated model streams weights at: this chip's own
    #: anemll-bench measurement, else a sibling's (derived, named in the note)
    read_bw_model: Figure | None = None
    #: ANEs on the chip (2 on an Ultra: two dies) and how many one Core ML program uses
    anes: int = 1
    anes_used: Figure | None = None
    #: the SoC's system-level cache (SLC) in bytes, None where no analysis reports it
    slc_bytes: Figure | None = None
    #: the chip's ANE generation and its compile limits
    family: Family | None = None

    @property
    def peak_ops_program(self) -> float:
        """FP16 OP/s one Core ML program can use: ``peak_ops_fp16`` x ANEs used / ANEs."""
        used = self.anes_used.value if self.anes_used is not None else self.anes
        return self.peak_ops_fp16.value * used / self.anes

    @property
    def clock_hz(self) -> Figure:
        """Clock implied by peak FP16 rate / (2 ops x FP16 lanes); a derived number."""
        hz = self.peak_ops_fp16.value / (2 * self.lanes_fp16.value)
        return Figure(
            hz,
            "Hz",
            "derived",
            "implied",
            f"{self.peak_ops_fp16.value:.4g} OP/s / (2 x {self.lanes_fp16.value:g} "
            "lanes): implied by the peak figure, not a measured clock"
            + (
                "; implausibly high for this lane count, so this chip likely has "
                "more lanes per core than the M1 (unknown)"
                if hz > 3.2e9
                else ""
            ),
        )

    @property
    def ridge_point(self) -> float:
        """Roofline ridge point in OP/byte: marketing peak FP16 / marketing DRAM bandwidth."""
        return self.peak_ops_fp16.value / self.dram_bw.value

    def figures(self) -> dict:
        """Every figure of the chip as a JSON-ready dict (value, unit, kind, source)."""
        out = {}
        for name in (
            "cores",
            "lanes_fp16",
            "peak_marketing",
            "peak_ops_fp16",
            "dram_bw",
            "ane_read_bw",
            "kernel_dma_bw",
            "tile_dma_bw",
            "dispatch_s",
            "read_bw_model",
            "anes_used",
            "slc_bytes",
        ):
            fig = getattr(self, name)
            out[name] = None if fig is None else fig.as_dict()
        out["peak_marketing"]["precision"] = self.peak_marketing_precision
        out["clock_hz"] = self.clock_hz.as_dict()
        out["ridge_point"] = self.ridge_point
        out["anes"] = self.anes
        out["family"] = None if self.family is None else self.family.key
        return out


def _borrowed_dma(read_bw: Figure | None, proxy: str, dram: Figure) -> tuple[Figure, Figure]:
    """KernelDMA and TileDMA bandwidths borrowed from the M3 measurement.

    Scaled by ``read_bw / 63 GB/s`` (this chip's anemll-bench read bandwidth over the
    M3's), capped at the chip's DRAM bandwidth.  ``proxy`` names whose read bandwidth
    ``read_bw`` is when the chip has no measurement of its own.
    """
    out = []
    for base, what in ((M3_KERNEL_DMA, "KernelDMA"), (M3_TILE_DMA, "TileDMA")):
        scale = read_bw.value / M3_ANE_READ.value
        value = min(base.value * scale, dram.value)
        note = (
            f"borrowed: {what} measured on an M3 ({base.value / 1e9:.2f} GB/s, seed m1-ane) "
            f"x {proxy} ANE read {read_bw.value / 1e9:g} GB/s / M3 63 GB/s (anemll-bench)"
        )
        if value < base.value * scale:
            note += f", capped at DRAM {dram.value / 1e9:g} GB/s"
        out.append(Figure(value, "B/s", "derived", "seed m1-ane + anemll-bench", note))
    return out[0], out[1]


def make_figure(v, unit, kind, source, note=""):
    """A :class:`Figure`."""
    return Figure(v, unit, kind, source, note)


def make_chip(
    key,
    name,
    *,
    cores,
    peak,
    precision,
    peak_fp16=None,
    dram,
    read=None,
    proxy_read=None,
    proxy_name="",
    aliases=(),
    lanes_per_core=128,
    anes=1,
    model_read=None,
    used=None,
    family,
):
    """Build a chip.  ``read`` is its own measured read bandwidth; ``proxy_read`` another
    chip's, used only to borrow the DMA bandwidths (and never reported as its own).  ``used``
    is the ANEs one program uses where ``anes`` > 1 (default: the M1 Ultra's measurement)."""
    if key == "m1":
        lanes = make_figure(
            cores.value * lanes_per_core,
            "lanes",
            "measured",
            "SPEC 1 (seed m1-ane)",
            "16 cores x 128 FP16 MAC lanes, found by reverse engineering",
        )
    else:
        lanes = make_figure(
            cores.value * lanes_per_core,
            "lanes",
            "assumption",
            "SPEC 1 (M1)",
            f"{cores.value:g} cores x {lanes_per_core} FP16 lanes: the M1's lanes "
            "per core, assumed for this chip",
        )
    if peak_fp16 is None:
        peak_fp16 = peak
    if key == "m3":
        kdma, tdma = M3_KERNEL_DMA, M3_TILE_DMA
    else:
        src = read if read is not None else proxy_read
        who = name if read is not None else proxy_name
        kdma, tdma = _borrowed_dma(src, who, dram)
    if model_read is None:
        if read is not None:
            model_read = read
        else:
            model_read = Figure(
                min(proxy_read.value, dram.value),
                "B/s",
                "derived",
                proxy_read.source,
                f"borrowed: the ANE read bandwidth of {proxy_name} "
                f"({proxy_read.value / 1e9:g} GB/s, anemll-bench), capped at DRAM "
                f"{dram.value / 1e9:g} GB/s; nobody measured this chip",
            )
    if anes > 1 and used is None:
        used = Figure(
            1,
            "ANEs",
            "measured",
            "anemll-bench Results.MD and issue #8",
            "Core ML runs a program on one ANE: the lm_head streams at 54.7 GB/s on the "
            "M1 Ultra as on the M1 Max, and two models at once gain nothing",
        )
    return Chip(
        key=key,
        name=name,
        cores=cores,
        lanes_fp16=lanes,
        peak_marketing=peak,
        peak_marketing_precision=precision,
        peak_ops_fp16=peak_fp16,
        dram_bw=dram,
        ane_read_bw=read,
        kernel_dma_bw=kdma,
        tile_dma_bw=tdma,
        aliases=aliases,
        read_bw_model=model_read,
        anes=anes,
        anes_used=used,
        family=family,
    )


def tops(v, kind="marketing", source="SPEC 8", note=""):
    """A compute figure of ``v`` TOP/s."""
    return make_figure(v * 1e12, "OP/s", kind, source, note)


def gbs(v, kind="marketing", source="SPEC 8", note=""):
    """A bandwidth figure of ``v`` GB/s."""
    return make_figure(v * 1e9, "B/s", kind, source, note)


def core_count(n, source):
    """A figure of ``n`` cores."""
    return make_figure(n, "cores", "marketing", source)


def mb(v, kind, source, note=""):
    """A size figure of ``v`` MiB."""
    return make_figure(v * 2**20, "B", kind, source, note)
