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
  Mar 2022, A16 Sep 2022, A17 Pro Sep 2023, M4 Pro/Max Oct 2024).

Per-task limits (KMem 16 x 64 KiB, L2 2 MiB, TD 0x274 bytes) are the M1's (SPEC 1, 5);
fastane assumes every chip here has the same ones, which is unknown beyond the M1.

The types (:class:`Figure`, :class:`Chip`) and the builders of the table live in
:mod:`fastane.roofline.figure`; this module is the table and its look-up.
"""

from __future__ import annotations

from dataclasses import replace

from .figure import (
    DISPATCH_PER_TASK_S,
    M3_ANE_READ,
    M3_KERNEL_DMA,
    M3_TILE_DMA,
    Chip,
    Figure,
    make_chip,
    core_count,
    make_figure,
    gbs,
    mb,
    tops,
)

__all__ = [
    "Figure",
    "Chip",
    "CHIPS",
    "get",
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
        ),
        make_chip(
            "m2",
            "M2",
            cores=core_count(16, "Apple (Jun 2022)"),
            peak=tops(15.8),
            precision="fp16",
            dram=gbs(100),
            read=_m2_read,
        ),
        make_chip(
            "m3",
            "M3",
            cores=core_count(16, "Apple (Oct 2023)"),
            peak=tops(18),
            precision="fp16",
            dram=gbs(100),
            read=_m3_read,
        ),
        make_chip(
            "m3-max",
            "M3 Max",
            cores=core_count(16, "Apple (Oct 2023)"),
            peak=tops(18),
            precision="fp16",
            dram=gbs(400, source="Apple (Oct 2023)", note="16-core-CPU M3 Max; the 14-core has 300"),
            read=gbs(120.22, "measured", "anemll-bench Results.MD (docs/measurements.md)"),
            aliases=("m3max",),
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
            read=gbs(64, "measured", _ANEMLL),
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
        ),
        make_chip(
            "a17-pro",
            "A17 Pro",
            cores=core_count(16, "Apple (Sep 2023)"),
            peak=tops(
                35,
                source="Apple (Sep 2023)",
                note="likely INT8: twice the M3's 18 on the same ANE generation",
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
            proxy_name="M3 (same ANE generation)",
            aliases=("a17",),
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
