"""The chips the roofline model knows: every figure with its source and its kind.

A :class:`Figure` is one number with its unit, its *kind* and its *source*:

``"marketing"``
    Apple's own headline figure (TOP/s, memory bandwidth).  Not a measurement.
``"measured"``
    measured on real hardware by someone named in ``source``.
``"derived"``
    computed from other figures (the formula is in ``note``): the implied clock, a
    measurement borrowed from another chip and scaled, a bandwidth computed from the
    memory type.
``"assumption"``
    fastane's own guess where nothing is known; change it in :class:`Chip` or in
    :class:`fastane.roofline.model.ModelParams` to explore.

Marketing and measured numbers are separate fields and are never mixed: the roofline
*ridge point* uses marketing figures (``peak_ops_fp16 / dram_bw``, 11e12 / 68e9 = 161.76
OP/byte on the M1, SPEC section 8); the *time model* uses the measured DMA engine
bandwidths (KernelDMA 37.99 GB/s, TileDMA 59.08 GB/s, measured on an M3; seed
``m1-ane-reverse-engineering.txt``, section "DRAM Throughput").

Sources, abbreviated in the table below:

- ``SPEC 1`` / ``SPEC 8``: /work/shared/SPEC.md sections 1 and 8 (``docs/roofline.md``
  repeats the figures).
- ``seed m1-ane``: seed ``m1-ane-reverse-engineering.txt`` (eiln, "retrospective
  reverse engineering of the M1 ANE"), section "DRAM Throughput".
- ``anemll-bench``: ANE read bandwidth measured with anemll-bench, as quoted in SPEC 8.
- ``maderix``: "Inside the M4 Apple Neural Engine, Part 2: ANE Benchmarks"
  (maderix.substack.com, 2026): the M4's 38 TOPS counts INT8 and is twice the FP16
  rate of about 19 TFLOP/s; about 0.095 ms of XPC + IOKit overhead per request.
- ``Apple``: Apple newsroom announcements of each chip (M1 Pro/Max Oct 2021, M1 Ultra
  Mar 2022, A16 Sep 2022, A17 Pro Sep 2023, M4 Pro/Max Oct 2024).  The later ones were read
  as quoted by the press: M2 Pro/Max Jan 2023 (meterpreter.org, news18.com: 16-core Neural
  Engine, 15.8 TOPS, 200 and 400 GB/s); M2 Ultra Jun 2023 (apple.com Mac Pro page,
  gadgetpilipinas.net: 32 cores, 31.6 TOPS, 800 GB/s); M3 family Oct 2023 (macrumors.com
  2023-10-31: 18 TOPS, M3 Pro 150 GB/s); M3 Ultra Mar 2025 (bgr.com, macitynet.it: 32-core
  Neural Engine, 819 GB/s, no TOPS); A18 and A18 Pro Sep 2024 (phonearena.com,
  gadgets360.com: 16 cores, 35 TOPS, 17% more memory bandwidth); M5 Oct 2025
  (finanznachrichten.de / dpa-AFX, macobserver.com: 16-core Neural Engine, 153 GB/s, no
  TOPS); M5 Pro/Max Mar 2026 (lowyat.net, mikeshouts.com: 16-core Neural Engine, 307 and
  614 GB/s, no TOPS).
- ``anemll-bench Results.MD @0a9a5de``: Anemll/anemll-bench ``Results.MD`` at 0a9a5de
  (M2 Pro 61.93, M2 Max 62.01, M5 70.21, M5 Max 148.39 GB/s); issues #2 (M2 Ultra 61.68)
  and #8 (M3 Ultra 120.60; two models at once no faster on the Ultras).
- ``maderix/ANE``: the github repository maderix/ANE @d91c984 (README.md,
  benchmarks/ANE_BENCHMARK_REPORT.md, training/m5result.md) and its PR #50 (M5 Max:
  19.27 TFLOP/s FP16, 35.61 TOPS INT8, aneSubType h17).

Each chip's ANE generation is a :class:`Family` of :data:`FAMILIES` (H13 = the M1's, named
as in ANEForge ``aneforge/_targets.py`` @020dcad and the Asahi Linux device trees), with the
compile limits the placement rules (:mod:`fastane.model.placement.predict`) read: W and H
at most 16384 up to the M3's generation (H15), 65536 from the M4's (H16); N and C 65536;
rank 5; KMem 64 KiB a core; and the size floor Core ML was seen to apply to small fp16
matmuls and attention on an M4 (H16's :class:`SizeFloor`: the thresholds and their report
ids); and the program floors and edges (each a :class:`Floor`): a one-row ``linear``'s
reduction depth and a ``linear``'s output width on an M3 Max (H15), the weights of a program of
1x1 convolutions, the CPU-or-GPU edge of an fp32 matmul and the edges of a program with no
matrix product on torchnative's M1 (H13; its Core ML rounds do not name the Mac, the
repository's other rounds name its only one an M1: kind "measured" since 2026-12-06, when it
was found, "assumption" before), the fp32 edge on an M4 (H16).  ANEForge names its tiers A13..A16 after the architecture (its "A16" is H16, the
M4's), not after the A-series chips.  No public source found names the
generation of the A16, A17 Pro, A18 and A18 Pro: their family is ``"unknown"``, with the
M1's limits assumed.

Each family also holds the numerics that differ between ANE generations, which a model run
as on one of its chips follows (:mod:`fastane.model.run.movement`): ``slice_crop``, the
fixed-point crop path of a slice with a non-zero offset on its last axis (values beyond 4094
in magnitude read out as +-inf), measured by ANEForge on the M1, M1 Max, M2 Pro and M2 Max
(H13, H14) and measured absent on the M4, M4 Pro, M4 Max, M5 and M5 Pro (H16, H17).  No chip
of H15 or of the "unknown" family was measured: the M1's crop path is assumed there.
ANEForge's "pre-A16" names its tiers before H16, not the chips before the A16 Bionic.
``trig_table``, whether the generation's compiler has the sin and cos tables: from H15 on by
ANEForge's op floors (read from the compiler, kind "derived"), the M1's (none) assumed for the
"unknown" family; the placement prediction (:mod:`fastane.model.placement.predict`) reads it.

Per-task limits (KMem 16 x 64 KiB, L2 2 MiB, TD 0x274 bytes) are the M1's (SPEC 1, 5);
the time model assumes every chip here has the same ones, which is unknown beyond the
M1's generation.

The types (:class:`Figure`, :class:`Family`, :class:`Chip`) and the builders of the table live in
:mod:`fastane.roofline.figure`; this module is the table and its look-up.
"""

from __future__ import annotations

from dataclasses import replace

from .. import m1 as _m1
from .figure import (
    DISPATCH_PER_TASK_S,
    M3_ANE_READ,
    M3_KERNEL_DMA,
    M3_TILE_DMA,
    Chip,
    Family,
    Figure,
    Floor,
    SizeFloor,
    make_chip,
    core_count,
    make_figure,
    gbs,
    mb,
    tops,
)

__all__ = [
    "Figure",
    "Family",
    "SizeFloor",
    "Floor",
    "Chip",
    "FAMILIES",
    "CHIPS",
    "get",
    "family_of",
    "names",
    "M3_KERNEL_DMA",
    "M3_TILE_DMA",
    "M3_ANE_READ",
    "DISPATCH_PER_TASK_S",
    "with_figures",
]


_ANEMLL = "anemll-bench via SPEC 8"
_LPDDR4X = "not an Apple figure: LPDDR4X-4266 on a 64-bit bus as reported by teardowns (4266e6 x 8 B)"
_LPDDR5 = "not an Apple figure: LPDDR5-6400 on a 64-bit bus as reported by teardowns (6400e6 x 8 B)"

_m1_read = gbs(61, "measured", _ANEMLL)
_m1max_read = gbs(55, "measured", _ANEMLL)
_m2_read = gbs(60, "measured", _ANEMLL)
_m3_read = gbs(63, "measured", _ANEMLL)
_m3max_read = gbs(120.22, "measured", "anemll-bench Results.MD (docs/measurements.md)")
_m4_read = gbs(64, "measured", _ANEMLL)
_RESULTS = "anemll-bench Results.MD @0a9a5de"
_m5max_read = gbs(148.39, "measured", _RESULTS)
_M2_PRO_PEAK = tops(
    15.8,
    source="Apple (Jan 2023)",
    note="'up to 15.8 trillion operations per second' (as reported by meterpreter.org), the M2's figure",
)
#: no Apple figure for the M5 generation's Neural Engine; the FP16 rate measured on an M5 Max
_M5_PEAK = tops(
    19.27,
    "assumption",
    "maderix/ANE PR #50",
    "no Apple figure: Apple gives no TOPS for the M5 generation's 16-core Neural Engine (Oct 2025, "
    "Mar 2026); taken as the FP16 rate measured on an M5 Max",
)
_M5_FP16 = tops(
    19.27,
    "derived",
    "maderix/ANE PR #50",
    "borrowed: 19.27 TFLOP/s FP16 (35.61 TOPS INT8 W8A8) measured on an M5 Max, 'unchanged from M4'; "
    "the base M5 gave 12.2-12.4 TFLOP/s at spatial 64, a shape that gave the M4 11.7 "
    "(maderix/ANE ANE_BENCHMARK_REPORT.md)",
)
_A18_PEAK = tops(
    35,
    source="Apple (Sep 2024)",
    note="'35 trillion operations per second' (as reported by PhoneArena and Gadgets360); likely INT8, "
    "as the A17 Pro's 35",
)
_HALF_INT8 = tops(
    17.5,
    "derived",
    "fastane",
    "35 TOPS / 2, assuming the INT8 headline doubles the FP16 rate as on the M4 (maderix)",
)
_A18_DRAM = gbs(
    59.9,
    "derived",
    "Apple (Sep 2024)",
    "not an Apple figure: the A16's and A17 Pro's 51.2 GB/s (LPDDR5-6400) x 1.17, Apple's '17 percent "
    "more memory bandwidth' (as reported by Gadgets360 and 4nownews)",
)

_ANGSTRONOMICS = "Angstronomics, 'Apple A16 die analysis' (angstronomics.com/p/apple-a16-die-analysis)"
_ECLECTIC = (
    "The Eclectic Light Company, 'Apple silicon: memory and internal storage' (Mar 2024): "
    "'a System Level Cache of anything from 8-96 MB, for the M1 chip range from basic to Ultra'"
)


#: system-level cache sizes (die-shot analyses; nobody measured them on an ANE)
_SLC = {
    "m1": mb(8, "derived", _ECLECTIC, "die analysis, as reported"),
    "m1-pro": mb(
        24,
        "assumption",
        _ECLECTIC,
        "between the M1's 8 and the M1 Max's 48 MB; half the Max's memory channels",
    ),
    "m1-max": mb(48, "derived", _ECLECTIC, "half the M1 Ultra's 96 MB (one of its two dies)"),
    "m1-ultra": mb(96, "derived", _ECLECTIC, "die analysis, as reported (two dies of 48 MB)"),
    "a14": mb(16, "derived", _ANGSTRONOMICS, "die analysis"),
    "a15": mb(32, "derived", _ANGSTRONOMICS, "die analysis"),
    "a16": mb(24, "derived", _ANGSTRONOMICS, "die analysis"),
    "a17-pro": mb(
        24,
        "assumption",
        _ANGSTRONOMICS,
        "the A16's 24 MB (same LPDDR5 memory system); no analysis found for the A17 Pro",
    ),
}


_ANEFORGE = "ANEForge aneforge/_targets.py @020dcad"
_ASAHI = "Asahi Linux device trees"
_M1_SPEC5 = "SPEC 5 (M1)"


def _elements(v, kind, source, note=""):
    """A figure of ``v`` tensor elements (along one axis, or a whole tensor's: its note says)."""
    return make_figure(v, "elements", kind, source, note)


def _the_m1s(fig: Figure, what: str) -> Figure:
    """The M1's ``fig`` assumed for a generation nobody measured ``what`` on."""
    return make_figure(
        fig.value,
        fig.unit,
        "assumption",
        fig.source,
        f"the M1's {what}, assumed: not measured on this generation",
    )


#: the M1's per-task limits (SPEC 1 and 5; ``fastane.m1.LIMITS``), measured on the M1
_H13_CHANNELS = _elements(
    _m1.LIMITS.max_channels,
    "measured",
    "SPEC 5; a1111-13527-matmul-w23040",
    "N and C: the compiler message on an M1 Max reads N[1-65536] C[1-65536]",
)
_H13_RANK = make_figure(
    5,
    "dims",
    "measured",
    "a1111-13527-matmul-w23040",
    "N, D, C, H, W: the five dimensions the compiler message lists",
)
_H13_KMEM = make_figure(
    _m1.KMEM_CORE_BYTES,
    "B",
    "measured",
    "SPEC 1 (seed m1-ane)",
    "64 KiB a core, found by reverse engineering on the M1",
)
#: Core ML's size floor on an M4 (vx-lang/Vx#435, #437): an fp16 matmul whose largest operand
#: has at most 384 x 384 elements on the CPU, 512 x 512 on the ANE (only square products were
#: tried); an fp16 attention whose Q has at most 1,048,576 elements on the CPU, 2,097,152 on the ANE
_M4_SIZE_FLOOR = SizeFloor(
    matmul=(
        _elements(384 * 384, "measured", "vx435-matmul-f16-le384", "384 x 384 fp16 matmul: the CPU"),
        _elements(512 * 512, "measured", "vx435-matmul-f16-512", "512 x 512 fp16 matmul: the ANE"),
    ),
    attention=(
        _elements(1 << 20, "measured", "vx437-sdpa-f16-1x16x1024x64", "Q of 1x16x1024x64, fp16: the CPU"),
        _elements(1 << 21, "measured", "vx437-sdpa-f16-1x16x2048x64", "Q of 1x16x2048x64, fp16: the ANE"),
    ),
    seen_on="an M4",
)
#: Core ML's floors for a one-row ``linear`` on an M3 Max (chrishayuk/larql PR #312, read from the
#: fork cryptonomicsed-byte/larql @3c4f76b7, bench/ane/ADJUDICATION-ANE2.md and -ANE2C.md:
#: "Core ML's device choice for a `linear` tracks **k**, the input/reduction dimension, and is
#: independent of the output width **n**"): one-op programs, x [1, k] by a [n, k] weight
_LARQL = "an M3 Max"
_M3_LINEAR_DEPTH = Floor(
    _elements(4864, "measured", "larql-linear-k-le4864-cpu", "k <= 4864: the CPU preferred, n 512 to 8192"),
    _elements(5120, "measured", "larql-linear-k5120-ane", "k 5120: the ANE preferred, n 512 to 8192"),
    _LARQL,
)
_M3_LINEAR_DEPTH_INT8 = Floor(
    _elements(3072, "measured", "larql-int8-linear-k-le3072-cpu", "k 512 to 3072, int8 weights: the CPU"),
    _elements(4096, "measured", "larql-int8-linear-k4096-ane", "k 4096, int8 weights: the ANE ('MOVED')"),
    _LARQL,
)
#: torchnative's Mac (thisisthepy/torchnative docs/graph/ANEDECODE.md @5009ac2c, NPU2.md
#: @1ab63b1e): its Core ML rounds do not name it; the repository's only Mac is an M1 Mac mini
#: (docs/DTYPE.md @84b4ba73: "호스트 Apple M1 (P 4 + E 4, macOS darwin 25.5.0)"; AGENTS.md
#: @03b76e63: "8 cores · 16 GB"), so its figures are the M1's, measured (kind "assumption",
#: predictions "uncertain", until 2026-12-06, when the M1 was found)
_TN = "torchnative's M1 (a Mac mini, by inference)"
_TN_NOTE = "measured by torchnative on its M1 (a Mac mini, by inference)"


def _tn(v, unit, report, what):
    return make_figure(v, unit, "measured", report, f"{what}; {_TN_NOTE}")


#: "The threshold is roughly **4.7M weights in the compiled program**" (ANEDECODE.md section 3):
#: one 1x1 conv on (1, C, 1, 1) and chains of 576 -> 576 ones, fp16
_TN_CONV1X1 = Floor(
    _tn(
        8 * 576 * 576,
        "elements",
        "tn-conv-chain-8-cpu",
        "8 chained 576 -> 576 1x1 convs (2.65M weights): the CPU",
    ),
    _tn(576 * 8192, "elements", "tn-conv1x1-b1-large-ane", "a 576 -> 8192 1x1 conv (4.72M weights): the ANE"),
    _TN,
)
#: fp32 ``linear`` under ALL (NPU2.md section 2.2): one row of 1024 and 4096 the CPU, 128 rows of
#: 1024 the GPU
_TN_FP32 = Floor(
    _tn(4096 * 4096, "MACs", "tn-linear-f32-b1-cpu", "a 1 x 4096 -> 4096 fp32 linear: the CPU"),
    _tn(128 * 1024 * 1024, "MACs", "tn-linear-f32-b128-gpu", "a 128 x 1024 -> 1024 fp32 linear: the GPU"),
    _TN,
)
#: a program with no matrix product (NPU2.md @1ab63b1e section 7.1: one-op fp16 programs planned
#: under ALL; layer_norm up to 1024x4096, softmax up to 1x32x512x512 and batch_norm 1x64x32x32
#: "preferred" the CPU, batch_norm 32x256x64x64 the GPU; the ANE "supported" at every size,
#: preferred at none), by its largest tensor's elements.  Against it: sm-layernorm-axis1-size,
#: a lone layer_norm of 28,800 elements on an M1 Pro's ANE (smpanaro, macOS 13/14, CPU_AND_NE;
#: a check report the rule disagrees with)
_M1_NO_MATRIX = Floor(
    _tn(
        32 * 512 * 512,
        "elements",
        "tn-npu2-softmax-cpu",
        "a 1x32x512x512 softmax alone, the largest size on the CPU (with tn-npu2-layernorm-cpu, "
        "tn-npu2-batchnorm-small-cpu)",
    ),
    _tn(
        32 * 256 * 64 * 64,
        "elements",
        "tn-npu2-batchnorm-large-gpu",
        "a 32x256x64x64 batch_norm alone under ALL: the GPU, the smallest size on it",
    ),
    _TN,
)
#: fp32 matmul under ALL on an M4: 512 x 512 and below the CPU (vx-lang/Vx#435), 1024 x 1024 the
#: GPU (Vx scripts/ane_device_check.py @15ca48ae: "a large one goes to the GPU")
_M4_FP32 = Floor(
    make_figure(512**3, "MACs", "measured", "vx435-matmul-f32", "a 512 x 512 fp32 matmul: the CPU"),
    make_figure(1024**3, "MACs", "measured", "vxdc-matmul-f32-1024", "a 1024 x 1024 fp32 matmul: the GPU"),
    "an M4",
)
#: ANEForge's tiers are named A13..A16 after the ANE architecture, not after the A-series
#: chips: its "A16" tier is H16 on (the M4), so "16384 through A15, 65536 at A16" splits the
#: M3's generation from the M4's
_ANEFORGE_TIERS = (
    "ANEForge names its capability tiers A13..A16 after the ANE architecture (its A13 tier is "
    "the M1's H13), not after the A-series chips"
)

#: the fixed-point crop path of a slice with a non-zero offset on its last axis, as ANEForge
#: measured it (bench/numeric_cliffs.py @7ec4a50: the value bisected between 3000 and 60000
#: inside a (1, 1, 1, 8) tensor cropped by 1 on the last axis; the results in
#: bench/results/ROOFLINES.md @112bd8d and the submissions' JSON): 4094 (= 65504 / 16) comes
#: back finite, the next fp16 value 4096 as inf
_CROP = "ANEForge bench/numeric_cliffs.py @7ec4a50, bench/results/ROOFLINES.md @112bd8d"
_CROP_RULE = (
    "a slice with a non-zero begin on the last axis: |x| > 4094 (65504 / 16) reads out as +-inf "
    "('clamps |value| > 4094 to +/-inf', ANEForge docs/numeric-cliffs.md); a zero begin on the "
    "last axis, or an offset on another axis, takes the clean route (docs/cross-chip.md)"
)
_NO_CROP = (
    "no crop path: the slice is exact up to fp16's own range ('exact (no clamp)', the value still "
    "finite at 60000)"
)
#: ANEForge aneforge/_targets.py @020dcad: "The quirk is present on A13 AND A14 (M2 silicon:
#: 4094 finite -> 4100 inf, bit-exact, same as M1), absent on A16; A15 pending M3 data"
#: (its tiers A13..A16 are H13..H16)
_CROP_TIERS = "ANEForge aneforge/_targets.py @020dcad: 'A15 pending M3 data' (its A15 tier is H15)"


def _crop(kind: str, source: str, note: str) -> Figure:
    """The largest magnitude a slice with a last-axis offset keeps on a generation."""
    return make_figure(4094.0, "magnitude", kind, source, note)


def _no_crop(source: str) -> Figure:
    """A generation whose slices keep every finite fp16 value (measured)."""
    return make_figure(65504.0, "magnitude", "measured", source, _NO_CROP)


#: the sin and cos tables: ANEForge's op floors, read from the compiler's per-family op traits
#: (aneforge/_targets.py @020dcad, ``_OP_FLOOR``: "F4 trig (A15+) - the one genuinely
#: family-gated trig pair"; docs/cross-chip.md @067717a: "sin/cos are A15+ on the silicon", below
#: that floor ANEForge rewrites them as polynomials); every other table of fastane's (exp2, log2,
#: rsqrt, sqrt, erf, atan ...) is "native on M1+" there.  A floor read from the compiler, not
#: a run on the chip: kind "derived"
_TRIG = (
    "ANEForge aneforge/_targets.py @020dcad (_OP_FLOOR 'sin': Family.A15, 'cos': Family.A15), "
    "docs/cross-chip.md @067717a ('sin/cos are A15+ on the silicon')"
)


def _trig(has: bool, note: str, kind: str = "derived") -> Figure:
    """Whether a generation's ANE has the sin and cos tables (1) or not (0)."""
    return make_figure(1.0 if has else 0.0, "table", kind, _TRIG, note)


#: ANE generations by the names reverse-engineering work gives them (H13 = the M1's): what
#: puts a chip in each, and the compile limits the placement rules read from it
FAMILIES: dict[str, Family] = {
    f.key: f
    for f in [
        Family(
            "h13",
            "H13",
            f'{_ANEFORGE} (M1 = H13, M1 Max = h13g, both measured); {_ASAHI} t8103.dtsi (\'Apple T8103 "M1" '
            "SoC, Other names: H13G'); the A14: hollance/neural-engine docs/supported-devices.md (the M1's "
            "Neural Engine 'most likely' the A14's), 16 cores and 11 TOPS as the M1's (Apple)",
            max_extent=_elements(
                _m1.LIMITS.max_hw,
                "measured",
                "a1111-13527-matmul-w23040, sm-linear-lmhead-50257",
                "W and H: compiler messages on an M1 Max and an M1 Pro; ANEForge rejects 16385 on an M1",
            ),
            max_channels=_H13_CHANNELS,
            max_rank=_H13_RANK,
            kmem_core_bytes=_H13_KMEM,
            slice_crop=_crop(
                "measured",
                f"{_CROP}: M1 (MacBookPro17,1, macOS 26.5.2, PR #148; MacBookAir10,1, macOS 15.6.1, PR #267), "
                "M1 Max (MacBookPro18,2, macOS 26.5.1, PR #154)",
                f"'clamp @ 4094' on all three; {_CROP_RULE}",
            ),
            trig_table=_trig(
                False, "below the A15 floor (ANEForge's A13 tier is H13): the compiler has no sin or cos"
            ),
            conv1x1_weights=_TN_CONV1X1,
            fp32_gpu=_TN_FP32,
            no_matrix=_M1_NO_MATRIX,
        ),
        Family(
            "h14",
            "H14",
            f"{_ANEFORGE} (M2 = H14 by its M-series ladder, checked against Apple's aneArchitectureType); "
            f"{_ASAHI} t8112.dtsi ('Apple T8112 \"M2\" SoC, Other names: H14G'); the A15: Longhorn "
            "(@never_released, 2021-04-22, quoted by taisy0.com/2021/04/23/139477.html: 't8110 - H14P - Apple "
            "A15; t8112 - H14G - Apple M2') and hollance/neural-engine (the M2 'appears to use the 16-core "
            "Neural Engine from the A15')",
            max_extent=_elements(
                16384,
                "measured",
                _ANEFORGE,
                "W and H: measured by binary search on an M2 (ANEForge's A14 tier); " + _ANEFORGE_TIERS,
            ),
            max_channels=_elements(
                65536, "derived", _ANEFORGE, "C measured on an M2 (ANEForge's A14 tier); N taken as C"
            ),
            max_rank=_the_m1s(_H13_RANK, "rank"),
            kmem_core_bytes=_the_m1s(_H13_KMEM, "KMem"),
            slice_crop=_crop(
                "measured",
                f"{_CROP}: M2 Pro (Mac14,12, macOS 26.5.2, PR #145), M2 Max (Mac14,6, macOS 26.7.1, "
                "roofline-apple-m2-max-Mac14_6-8c6229361be7-773f5b28.json @72fb3ba)",
                f"'clamp @ 4094' on both (aneforge/_targets.py @020dcad: 'M2 silicon: 4094 finite -> 4100 inf, "
                f"bit-exact, same as M1'); {_CROP_RULE}",
            ),
            trig_table=_trig(
                False, "below the A15 floor (ANEForge's A14 tier is H14): the compiler has no sin or cos"
            ),
        ),
        Family(
            "h15",
            "H15",
            f'{_ANEFORGE} (M3 = H15 by its M-series ladder); {_ASAHI} t8122.dtsi (\'"M3" SoC, Other names: '
            "H15G'), t6030.dtsi ('\"M3 Pro\" SoC, Other names: H15J'), t6031-base.dtsi ('M3 Max/Ultra, Other "
            "names: H15J, H15S')",
            max_extent=_elements(
                16384,
                "measured",
                "rustane13-width-16384",
                "W and H: on an M3 Ultra W 16384 compiles and 17920 does not (the private compiler); ANEForge: "
                "16384 through its A15 (H15) tier",
            ),
            max_channels=_elements(
                65536, "derived", _ANEFORGE, "65536 measured on the generations before and after (H14, H17)"
            ),
            max_rank=_the_m1s(_H13_RANK, "rank"),
            kmem_core_bytes=_the_m1s(_H13_KMEM, "KMem"),
            slice_crop=_crop(
                "assumption",
                _CROP_TIERS,
                "the M1's crop path, assumed: no chip of this generation measured; ANEForge's docs put the "
                "crop path on its tiers before its 'A16' (H16), which include H15",
            ),
            trig_table=_trig(True, "ANEForge's A15 tier (H15) is the floor of sin and cos"),
            linear_depth=_M3_LINEAR_DEPTH,
            linear_depth_int8=_M3_LINEAR_DEPTH_INT8,
            linear_width=_elements(
                17408,
                "measured",
                "larql-linear-5120x17408",
                "a 5120 -> 17408 linear ran on the ANE of an M3 Max (the compute plan: 'actual: ANE'); one report",
            ),
        ),
        Family(
            "h16",
            "H16",
            f"{_ANEFORGE} (M4 = H16 by its M-series ladder); maderix/ANE README.md ('M4, H16G'); maderix/ANE "
            "PR #50 (an M4 reports aneSubType h16)",
            max_extent=_elements(
                65536,
                "derived",
                "aneforge-caps-extents",
                "W and H: ANEForge measured 65536 on an M5 and puts H16 in the same tier (its 'A16'); "
                + _ANEFORGE_TIERS
                + "; no Core ML report on an M4",
            ),
            max_channels=_elements(
                65536, "derived", _ANEFORGE, "C measured on an M5 (same tier); N taken as C"
            ),
            max_rank=_the_m1s(_H13_RANK, "rank"),
            kmem_core_bytes=_the_m1s(_H13_KMEM, "KMem"),
            slice_crop=_no_crop(
                f"{_CROP}: M4 (Mac16,12, macOS 26.2, PR #195), M4 Pro (Mac16,7, macOS 27.0.1, "
                "roofline-apple-m4-pro-Mac16_7-7fdf43ae2309-9094e75f.json @752f744), M4 Max (Mac16,6, macOS "
                "26.7, PR #271)"
            ),
            trig_table=_trig(True, "ANEForge's A16 tier (H16): above the A15 floor of sin and cos"),
            size_floor=_M4_SIZE_FLOOR,
            fp32_gpu=_M4_FP32,
        ),
        Family(
            "h17",
            "H17",
            f"{_ANEFORGE} (M5 = H17s, measured: the compiled bundle's directory H17S.bundle); maderix/ANE PR #50 "
            "(an M5 Max reports aneSubType h17)",
            max_extent=_elements(
                65536,
                "measured",
                "aneforge-caps-extents",
                "W and H: measured by binary search on an M5 through the private compiler path; no Core ML report",
            ),
            max_channels=_elements(65536, "derived", _ANEFORGE, "C measured on an M5; N taken as C"),
            max_rank=_the_m1s(_H13_RANK, "rank"),
            kmem_core_bytes=_the_m1s(_H13_KMEM, "KMem"),
            slice_crop=_no_crop(
                f"{_CROP}: M5 (Mac17,3, macOS 26.5.2), M5 Pro (Mac17,8, macOS 26.5.1, PR #136)"
            ),
            trig_table=_trig(
                True, "ANEForge folds H17 into its A16 tier (no op capability beyond it), above the floor"
            ),
            note="maderix/ANE training/m5result.md reports 'ANE Family: H16 (same as M4)' on a base M5 (macOS "
            "26.3), and PR #50 h17 on an M5 Max, 'distinct from the h16 subtype reported by both M4 and the base "
            "M5'; ANEForge reports H17 on an M5. ANEForge folds H16 and H17 into one tier, so the limits here are "
            "the same either way",
        ),
        Family(
            "unknown",
            "not published",
            "no public source found names the ANE generation of these chips; " + _ANEFORGE_TIERS,
            max_extent=_elements(
                16384,
                "assumption",
                _M1_SPEC5,
                "the M1's W and H; et7907-transpose-w32000: an A16 (iOS 17.2.1) refused W = 32000 through MPSGraph "
                "with W[1-16384]; 65536 if the chip is of the H16 generation or later (aneforge-caps-extents)",
            ),
            max_channels=_the_m1s(_H13_CHANNELS, "N and C"),
            max_rank=_the_m1s(_H13_RANK, "rank"),
            kmem_core_bytes=_the_m1s(_H13_KMEM, "KMem"),
            slice_crop=_crop(
                "assumption",
                _CROP_TIERS,
                "the M1's crop path, assumed: no A-series chip measured. ANEForge's 'absent on A16' names "
                "its A16 tier (H16, the M4's), not the A16 Bionic; " + _ANEFORGE_TIERS,
            ),
            trig_table=_trig(
                False,
                "the M1's, assumed: these chips' generation is not published; of H15 or later, they "
                "would have the tables",
                "assumption",
            ),
        ),
    ]
}


CHIPS: dict[str, Chip] = {
    c.key: replace(c, slc_bytes=_SLC.get(c.key))
    for c in [
        make_chip(
            "m1",
            "M1",
            cores=core_count(16, "SPEC 1"),
            peak=tops(11, source="SPEC 1, SPEC 8"),
            precision="fp16",
            dram=gbs(68, note="68.25 GB/s LPDDR4X-4266, 128-bit"),
            read=_m1_read,
            family=FAMILIES["h13"],
        ),
        make_chip(
            "m1-pro",
            "M1 Pro",
            cores=core_count(16, "Apple (Oct 2021)"),
            peak=tops(
                11,
                source="Apple (Oct 2021)",
                note="same 16-core ANE as the M1; the 11 TOP/s is the M1's figure",
            ),
            precision="fp16",
            dram=gbs(200, source="Apple (Oct 2021)"),
            proxy_read=_m1max_read,
            proxy_name="M1 Max (same ANE)",
            aliases=("m1pro",),
            family=FAMILIES["h13"],
        ),
        make_chip(
            "m1-max",
            "M1 Max",
            cores=core_count(16, "Apple (Oct 2021)"),
            peak=tops(
                11,
                source="Apple (Oct 2021)",
                note="same 16-core ANE as the M1; the 11 TOP/s is the M1's figure",
            ),
            precision="fp16",
            dram=gbs(400, source="Apple (Oct 2021)"),
            read=_m1max_read,
            aliases=("m1max",),
            family=FAMILIES["h13"],
        ),
        make_chip(
            "m1-ultra",
            "M1 Ultra",
            cores=core_count(32, "Apple (Mar 2022)"),
            peak=tops(22, source="SPEC 8"),
            precision="fp16",
            dram=gbs(800, source="Apple (Mar 2022)"),
            proxy_read=gbs(110, "derived", _ANEMLL, "2 x M1 Max 55 GB/s (two dies, two ANEs)"),
            proxy_name="2 x M1 Max",
            aliases=("m1ultra",),
            anes=2,
            model_read=make_figure(
                55e9,
                "B/s",
                "derived",
                _ANEMLL,
                "borrowed: one M1 Max ANE's read bandwidth (55 GB/s): Core ML uses one of "
                "the two ANEs (anes_used)",
            ),
            family=FAMILIES["h13"],
        ),
        make_chip(
            "m2",
            "M2",
            cores=core_count(16, "Apple (Jun 2022)"),
            peak=tops(15.8),
            precision="fp16",
            dram=gbs(100),
            read=_m2_read,
            family=FAMILIES["h14"],
        ),
        make_chip(
            "m2-pro",
            "M2 Pro",
            cores=core_count(16, "Apple (Jan 2023)"),
            peak=_M2_PRO_PEAK,
            precision="fp16",
            dram=gbs(200, source="Apple (Jan 2023)"),
            read=gbs(61.93, "measured", _RESULTS),
            aliases=("m2pro",),
            family=FAMILIES["h14"],
        ),
        make_chip(
            "m2-max",
            "M2 Max",
            cores=core_count(16, "Apple (Jan 2023)"),
            peak=_M2_PRO_PEAK,
            precision="fp16",
            dram=gbs(400, source="Apple (Jan 2023)"),
            read=gbs(62.01, "measured", _RESULTS),
            aliases=("m2max",),
            family=FAMILIES["h14"],
        ),
        make_chip(
            "m2-ultra",
            "M2 Ultra",
            cores=core_count(32, "Apple (Jun 2023)"),
            peak=tops(
                31.6,
                source="Apple (Jun 2023)",
                note="'32-core Neural Engine ... 31.6 trillion operations per second' (apple.com, Mac Pro): two M2 "
                "Max dies",
            ),
            precision="fp16",
            dram=gbs(800, source="Apple (Jun 2023)"),
            read=gbs(61.68, "measured", "anemll-bench issue #2", "one ANE's worth (anes_used)"),
            aliases=("m2ultra",),
            anes=2,
            used=make_figure(
                1,
                "ANEs",
                "derived",
                "anemll-bench issue #2 and #8",
                "the lm_head streams at 61.68 GB/s on the M2 Ultra as at 62.01 on the M2 Max; two models at once "
                "gained nothing on the M1 and M3 Ultras",
            ),
            family=FAMILIES["h14"],
        ),
        make_chip(
            "m3",
            "M3",
            cores=core_count(16, "Apple (Oct 2023)"),
            peak=tops(18),
            precision="fp16",
            dram=gbs(100),
            read=_m3_read,
            family=FAMILIES["h15"],
        ),
        make_chip(
            "m3-pro",
            "M3 Pro",
            cores=core_count(16, "Apple (Oct 2023)"),
            peak=tops(
                18,
                source="Apple (Oct 2023)",
                note="18 TOPS 'according to Apple' for the M3 family (MacRumors, 2023-10-31); maderix/ANE measured "
                "16.77 TFLOP/s FP16 on an M3 Pro (ANE_BENCHMARK_REPORT.md)",
            ),
            precision="fp16",
            dram=gbs(150, source="Apple (Oct 2023)"),
            proxy_read=_m3max_read,
            proxy_name="M3 Max (same ANE; Pro and Max read alike where both were measured: M1, M2, M4)",
            aliases=("m3pro",),
            family=FAMILIES["h15"],
        ),
        make_chip(
            "m3-max",
            "M3 Max",
            cores=core_count(16, "Apple (Oct 2023)"),
            peak=tops(18),
            precision="fp16",
            dram=gbs(400, source="Apple (Oct 2023)", note="16-core-CPU M3 Max; the 14-core has 300"),
            read=_m3max_read,
            aliases=("m3max",),
            family=FAMILIES["h15"],
        ),
        make_chip(
            "m3-ultra",
            "M3 Ultra",
            cores=core_count(32, "Apple (Mar 2025)"),
            peak=tops(
                36,
                "derived",
                "fastane: 2 x Apple's M3 figure (Oct 2023)",
                "no Apple figure: Apple gives no TOPS for the M3 Ultra's 32-core Neural Engine (Mar 2025); 2 x "
                "the M3's 18 (two M3 Max dies)",
            ),
            precision="fp16",
            dram=gbs(
                819,
                source="Apple (Mar 2025)",
                note="'over 800GB/s'; 819 GB/s in the Mac Studio specifications",
            ),
            read=gbs(120.60, "measured", "anemll-bench issue #8", "one ANE's worth (anes_used)"),
            aliases=("m3ultra",),
            anes=2,
            used=make_figure(
                1,
                "ANEs",
                "measured",
                "anemll-bench issue #8",
                "two models at once on the M3 Ultra gave no more bandwidth than one (120.60 GB/s, the M3 Max's 120.22)",
            ),
            family=FAMILIES["h15"],
        ),
        make_chip(
            "m4",
            "M4",
            cores=core_count(16, "Apple (May 2024)"),
            peak=tops(38, note="likely INT8 (SPEC 8)"),
            precision="int8",
            peak_fp16=tops(
                19, "measured", "maderix", "FP16 ~19 TFLOP/s measured; the 38 TOPS headline doubles it (INT8)"
            ),
            dram=gbs(120),
            read=_m4_read,
            family=FAMILIES["h16"],
        ),
        make_chip(
            "m4-pro",
            "M4 Pro",
            cores=core_count(16, "Apple (Oct 2024)"),
            peak=tops(38, source="Apple (Oct 2024)", note="likely INT8, as the M4's"),
            precision="int8",
            peak_fp16=tops(
                19, "derived", "maderix", "borrowed: the M4's measured ~19 TFLOP/s FP16 (same 16-core ANE)"
            ),
            dram=gbs(273, source="Apple (Oct 2024)"),
            read=gbs(126, "measured", _ANEMLL),
            aliases=("m4pro",),
            family=FAMILIES["h16"],
        ),
        make_chip(
            "m4-max",
            "M4 Max",
            cores=core_count(16, "Apple (Oct 2024)"),
            peak=tops(38, source="Apple (Oct 2024)", note="likely INT8, as the M4's"),
            precision="int8",
            peak_fp16=tops(
                19, "derived", "maderix", "borrowed: the M4's measured ~19 TFLOP/s FP16 (same 16-core ANE)"
            ),
            dram=gbs(546, source="Apple (Oct 2024)", note="16-core-CPU M4 Max; the 14-core has 410"),
            read=gbs(119, "measured", _ANEMLL),
            aliases=("m4max",),
            family=FAMILIES["h16"],
        ),
        make_chip(
            "m5",
            "M5",
            cores=core_count(16, "Apple (Oct 2025)"),
            peak=_M5_PEAK,
            precision="fp16",
            peak_fp16=_M5_FP16,
            dram=gbs(153, source="Apple (Oct 2025)"),
            read=gbs(70.21, "measured", _RESULTS),
            family=FAMILIES["h17"],
        ),
        make_chip(
            "m5-pro",
            "M5 Pro",
            cores=core_count(16, "Apple (Mar 2026)"),
            peak=_M5_PEAK,
            precision="fp16",
            peak_fp16=_M5_FP16,
            dram=gbs(307, source="Apple (Mar 2026)"),
            proxy_read=_m5max_read,
            proxy_name="M5 Max (same 16-core ANE; Pro and Max read alike where both were measured: M1, M2, M4)",
            aliases=("m5pro",),
            family=FAMILIES["h17"],
        ),
        make_chip(
            "m5-max",
            "M5 Max",
            cores=core_count(16, "Apple (Mar 2026)"),
            peak=_M5_PEAK,
            precision="fp16",
            peak_fp16=tops(
                19.27,
                "measured",
                "maderix/ANE PR #50",
                "FP16 19.27 TFLOP/s (INT8 W8A8 35.61 TOPS) on an M5 Max, macOS 26.4.1 (private API)",
            ),
            dram=gbs(614, source="Apple (Mar 2026)"),
            read=_m5max_read,
            aliases=("m5max",),
            family=FAMILIES["h17"],
        ),
        make_chip(
            "a14",
            "A14 Bionic",
            cores=core_count(16, "Apple (Sep 2020)"),
            peak=tops(11, source="SPEC 8"),
            precision="fp16",
            dram=gbs(34.1, "derived", "memory type", _LPDDR4X),
            proxy_read=_m1_read,
            proxy_name="M1 (same ANE)",
            family=FAMILIES["h13"],
        ),
        make_chip(
            "a15",
            "A15 Bionic",
            cores=core_count(16, "Apple (Sep 2021)"),
            peak=tops(15.8, source="SPEC 8"),
            precision="fp16",
            dram=gbs(34.1, "derived", "memory type", _LPDDR4X),
            proxy_read=_m2_read,
            proxy_name="M2 (same ANE generation)",
            family=FAMILIES["h14"],
        ),
        make_chip(
            "a16",
            "A16 Bionic",
            cores=core_count(16, "Apple (Sep 2022)"),
            peak=tops(17, source="Apple (Sep 2022)", note="'nearly 17 trillion operations/s'"),
            precision="fp16",
            dram=gbs(51.2, "derived", "memory type", _LPDDR5),
            proxy_read=_m2_read,
            proxy_name="M2 (closest measured generation)",
            family=FAMILIES["unknown"],
        ),
        make_chip(
            "a17-pro",
            "A17 Pro",
            cores=core_count(16, "Apple (Sep 2023)"),
            peak=tops(
                35,
                source="Apple (Sep 2023)",
                note="likely INT8: twice the M3's 18",
            ),
            precision="int8",
            peak_fp16=tops(
                17.5,
                "derived",
                "fastane",
                "35 TOPS / 2, assuming the INT8 headline doubles the FP16 rate as on the M4 (maderix)",
            ),
            dram=gbs(51.2, "derived", "memory type", _LPDDR5),
            proxy_read=_m3_read,
            proxy_name="M3 (the closest measured chip: the A17 Pro's ANE generation is not published)",
            aliases=("a17",),
            family=FAMILIES["unknown"],
        ),
        make_chip(
            "a18",
            "A18",
            cores=core_count(16, "Apple (Sep 2024)"),
            peak=_A18_PEAK,
            precision="int8",
            peak_fp16=_HALF_INT8,
            dram=_A18_DRAM,
            proxy_read=_m4_read,
            proxy_name="M4 (the closest measured chip: the A18's ANE generation is not published)",
            family=FAMILIES["unknown"],
        ),
        make_chip(
            "a18-pro",
            "A18 Pro",
            cores=core_count(16, "Apple (Sep 2024)"),
            peak=_A18_PEAK,
            precision="int8",
            peak_fp16=_HALF_INT8,
            dram=_A18_DRAM,
            proxy_read=_m4_read,
            proxy_name="M4 (the closest measured chip: the A18 Pro's ANE generation is not published)",
            aliases=("a18pro",),
            family=FAMILIES["unknown"],
        ),
    ]
}


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "-").replace("_", "-").replace("bionic", "").strip("-")


_INDEX = {}
for _c in CHIPS.values():
    for _n in (_c.key, _c.name, *_c.aliases):
        _INDEX[_norm(_n)] = _c
        _INDEX[_norm(_n).replace("-", "")] = _c


#: the chips Apple ships only in iPhones and iPads (the A series): a model on them runs under
#: iOS or iPadOS, whose Core ML limits a Neural Engine model's size (the placement estimate)
IOS_CHIPS = frozenset(k for k in CHIPS if k.startswith("a"))


def names() -> list[str]:
    """Keys of the known chips, in table order."""
    return list(CHIPS)


def get(name: "str | Chip") -> Chip:
    """The chip called ``name`` (``"m1"``, ``"M1 Max"``, ``"m4-pro"``, ``"a17"`` ...)."""
    if isinstance(name, Chip):
        return name
    key = _norm(str(name))
    chip = _INDEX.get(key) or _INDEX.get(key.replace("-", ""))
    if chip is None:
        raise ValueError(f"unknown chip {name!r}; known chips: {', '.join(CHIPS)}")
    return chip


def family_of(chip: "str | Chip") -> Family:
    """The ANE generation of ``chip`` (a name or a :class:`Chip`); the ``"unknown"`` family for
    a chip built by hand without one."""
    chip = get(chip)
    return chip.family if chip.family is not None else FAMILIES["unknown"]


def with_figures(chip: "str | Chip", **figures) -> Chip:
    """A copy of ``chip`` with some figures replaced (floats become assumption figures)."""
    chip = get(chip)
    upd = {}
    for k, v in figures.items():
        if not isinstance(v, Figure):
            old = getattr(chip, k)
            v = Figure(float(v), old.unit if old is not None else "", "assumption", "user")
        upd[k] = v
    return replace(chip, **upd)
