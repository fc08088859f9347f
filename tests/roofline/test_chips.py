"""The chip table to the M5 and A18: every figure of every chip and of every ANE generation
(:data:`fastane.roofline.chips.FAMILIES`) has a kind and a source, the new chips resolve by
name and alias, each chip names its generation, and the figures taken from Apple or from
measurements are the ones the sources give."""

import pytest

from fastane.roofline import chips
from fastane.roofline.chips import CHIPS, FAMILIES

KINDS = ("marketing", "measured", "derived", "assumption")
FAMILY_FIGURES = ("max_extent", "max_channels", "max_rank", "kmem_core_bytes", "trig_table")


def test_every_figure_of_every_chip_has_a_kind_and_a_source():
    for c in CHIPS.values():
        figs = {k: v for k, v in c.figures().items() if isinstance(v, dict)}
        # every figure a chip must have is there (the others are None where unknown)
        assert {"cores", "lanes_fp16", "peak_marketing", "peak_ops_fp16", "dram_bw", "kernel_dma_bw"} <= set(
            figs
        )
        assert {"tile_dma_bw", "dispatch_s", "read_bw_model", "clock_hz"} <= set(figs), c.key
        for name, fig in figs.items():
            assert fig["kind"] in KINDS and fig["source"].strip(), (c.key, name)
            assert fig["value"] > 0, (c.key, name)


def test_every_chip_names_its_generation_and_every_limit_is_sourced():
    for c in CHIPS.values():
        assert c.family is FAMILIES[c.family.key], c.key
        assert c.figures()["family"] == c.family.key
    assert {c.family.key for c in CHIPS.values()} == set(FAMILIES)
    for f in FAMILIES.values():
        assert f.source.strip() and f.name
        for name in FAMILY_FIGURES:
            fig = getattr(f, name)
            assert fig.kind in KINDS and fig.source.strip(), (f.key, name)
            # a limit not measured on the generation says why
            assert fig.kind == "measured" or fig.note, (f.key, name)


def test_the_generations():
    by = {k: sorted(c.key for c in CHIPS.values() if c.family.key == k) for k in FAMILIES}
    assert by["h13"] == ["a14", "m1", "m1-max", "m1-pro", "m1-ultra"]
    assert by["h14"] == ["a15", "m2", "m2-max", "m2-pro", "m2-ultra"]
    assert by["h15"] == ["m3", "m3-max", "m3-pro", "m3-ultra"]
    assert by["h16"] == ["m4", "m4-max", "m4-pro"]
    assert by["h17"] == ["m5", "m5-max", "m5-pro"]
    assert by["unknown"] == ["a16", "a17-pro", "a18", "a18-pro"]
    # W and H: 16384 up to the M3's generation, 65536 from the M4's (ANEForge's "A16" tier)
    for k, extent in (("h13", 16384), ("h14", 16384), ("h15", 16384), ("h16", 65536), ("h17", 65536)):
        assert FAMILIES[k].max_extent.value == extent
    assert FAMILIES["unknown"].max_extent.kind == "assumption"
    # the size floor was reported on an M4 only
    assert [k for k, f in FAMILIES.items() if f.size_floor] == ["h16"]


@pytest.mark.parametrize(
    "name, key",
    [
        ("M5", "m5"),
        ("m5 pro", "m5-pro"),
        ("M5 Max", "m5-max"),
        ("m5max", "m5-max"),
        ("a18 pro", "a18-pro"),
        ("A18 Pro", "a18-pro"),
        ("a18pro", "a18-pro"),
        ("A18", "a18"),
        ("M3 Pro", "m3-pro"),
        ("m3ultra", "m3-ultra"),
        ("M2 Pro", "m2-pro"),
        ("m2max", "m2-max"),
        ("M2 Ultra", "m2-ultra"),
        ("A17 Pro", "a17-pro"),
        ("M4", "m4"),
    ],
)
def test_new_chips_resolve_by_name_and_alias(name, key):
    assert chips.get(name).key == key


def test_figures_as_the_sources_give_them():
    g = {
        k: chips.get(k)
        for k in ("m2-pro", "m2-max", "m2-ultra", "m3-pro", "m3-ultra", "m5", "m5-pro", "m5-max")
    }
    # Apple's memory bandwidths (marketing)
    dram = {"m2-pro": 200, "m2-max": 400, "m2-ultra": 800, "m3-pro": 150, "m3-ultra": 819}
    dram |= {"m5": 153, "m5-pro": 307, "m5-max": 614}
    for k, v in dram.items():
        assert g[k].dram_bw.value == v * 1e9 and g[k].dram_bw.kind == "marketing", k
    # anemll-bench read bandwidths (measured); the M3 Pro and M5 Pro borrow their Max's
    read = {
        "m2-pro": 61.93,
        "m2-max": 62.01,
        "m2-ultra": 61.68,
        "m3-ultra": 120.60,
        "m5": 70.21,
        "m5-max": 148.39,
    }
    for k, v in read.items():
        assert g[k].ane_read_bw.value == pytest.approx(v * 1e9) and g[k].ane_read_bw.kind == "measured", k
    for k, sibling in (("m3-pro", "m3-max"), ("m5-pro", "m5-max")):
        assert g[k].ane_read_bw is None and g[k].read_bw_model.kind == "derived"
        assert g[k].read_bw_model.value == chips.get(sibling).ane_read_bw.value
    # Apple gives no TOPS for the M3 Ultra or the M5 generation: not marketing figures
    assert g["m3-ultra"].peak_marketing.kind == "derived" and g["m3-ultra"].peak_marketing.value == 36e12
    for k in ("m5", "m5-pro", "m5-max"):
        assert g[k].peak_marketing.kind == "assumption" and "no Apple figure" in g[k].peak_marketing.note
        # the figure's origin is the M5 Max's measurement, not Apple
        assert g[k].peak_marketing.source == g["m5-max"].peak_ops_fp16.source == "maderix/ANE PR #50"
    # the M3 Ultra's 36 is the M3's 18 (Apple, Oct 2023) doubled, not an Apple figure for the Ultra
    ultra = g["m3-ultra"].peak_marketing
    assert (
        ultra.source.startswith("fastane: 2 x") and "M3" in ultra.source and "no Apple figure" in ultra.note
    )
    assert g["m5-max"].peak_ops_fp16.kind == "measured" and g["m5"].peak_ops_fp16.kind == "derived"
    # one ANE of two per program on an Ultra
    for k in ("m2-ultra", "m3-ultra"):
        assert g[k].anes == 2 and g[k].anes_used.value == 1
        assert g[k].peak_ops_program == g[k].peak_ops_fp16.value / 2
    assert g["m2-ultra"].peak_marketing.value == 31.6e12 and g["m2-ultra"].cores.value == 32


def test_the_a18s_35_tops_is_int8_and_its_dram_is_derived():
    for k in ("a18", "a18-pro"):
        c = chips.get(k)
        assert c.peak_marketing.value == 35e12 and c.peak_marketing_precision == "int8"
        assert c.peak_ops_fp16.value == 17.5e12 and c.peak_ops_fp16.kind == "derived"
        # Apple's "17 percent more memory bandwidth" over LPDDR5-6400's 51.2 GB/s
        assert c.dram_bw.kind == "derived" and c.dram_bw.value == pytest.approx(51.2e9 * 1.17, rel=1e-3)
        assert c.ane_read_bw is None and "M4" in c.read_bw_model.note


def test_the_sin_and_cos_tables_by_generation():
    """ANEForge's op floors put sin and cos from its A15 tier (H15) on; the A-series chips of
    no published generation keep the M1's (none), assumed."""
    has = {k: bool(f.trig_table.value) for k, f in FAMILIES.items()}
    assert has == {"h13": False, "h14": False, "h15": True, "h16": True, "h17": True, "unknown": False}
    for k, f in FAMILIES.items():
        fig = f.trig_table
        assert fig.kind == ("assumption" if k == "unknown" else "derived"), k
        assert "aneforge/_targets.py @020dcad" in fig.source and fig.note, k
