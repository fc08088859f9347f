"""The roofline model: chip figures, the time model on hand-computed cases, decode bounds."""

import math

import pytest

from fastane.roofline import chips, model
from fastane.roofline.chips import CHIPS
from fastane.networks.plan import analyze
from fastane.roofline.model import ModelParams, estimate, task_times, tokens_per_s_bound

# the hand-computed cases below are the seed's model (1 ms a program, 1 us a task, the M3
# engine bandwidths, every lane busy); the calibrated default is tested in test_calibration.py
SEED = model.SEED_PARAMS
from fastane.stats import Stats

TD = 0x274  # 628 bytes of ControlDMA per task (SPEC 5)


# ----------------------------------------------------------------------------- chips


def test_m1_ridge_point_is_161_8_op_per_byte():
    # SPEC 8: "M1: 11 TOP/s, 68 GB/s DRAM -> ridge point 11e12 / 68e9 = 162 OP/byte"
    m1 = chips.get("m1")
    assert m1.peak_ops_fp16.value == 11e12
    assert m1.dram_bw.value == 68e9
    assert m1.ridge_point == pytest.approx(11e12 / 68e9)
    assert round(m1.ridge_point, 1) == 161.8


def test_m1_figures_keep_marketing_and_measured_apart():
    m1 = chips.get("m1")
    assert m1.peak_marketing.kind == "marketing" and m1.dram_bw.kind == "marketing"
    assert m1.ane_read_bw.kind == "measured" and m1.ane_read_bw.value == 61e9
    assert m1.cores.value == 16 and m1.lanes_fp16.value == 2048
    # implied clock 11e12 / (2 x 2048) = 2.685546875 GHz, and it says it is implied
    assert m1.clock_hz.value == pytest.approx(11e12 / 4096)
    assert m1.clock_hz.kind == "derived" and "implied" in m1.clock_hz.note
    assert m1.dispatch_s.kind == "assumption" and m1.dispatch_s.value == 1e-6


def test_m3_carries_the_seed_dma_measurements_and_others_borrow_them():
    m3 = chips.get("m3")
    assert m3.kernel_dma_bw.value == 37.99e9 and m3.kernel_dma_bw.kind == "measured"
    assert m3.tile_dma_bw.value == 59.08e9 and m3.tile_dma_bw.kind == "measured"
    for c in CHIPS.values():
        if c.key != "m3":
            assert c.kernel_dma_bw.kind == "derived"
            assert "borrowed" in c.kernel_dma_bw.note and "M3" in c.kernel_dma_bw.note
    # M1: 37.99 GB/s x 61 / 63 (anemll-bench read bandwidths of M1 and M3)
    assert chips.get("m1").kernel_dma_bw.value == pytest.approx(37.99e9 * 61 / 63)


def test_every_figure_has_a_kind_and_a_source():
    for c in CHIPS.values():
        for name, fig in c.figures().items():
            if isinstance(fig, dict):
                assert fig["kind"] in ("marketing", "measured", "derived", "assumption"), (c.key, name)
                assert fig["source"], (c.key, name)
        assert c.ridge_point > 0


def test_int8_marketing_figures_are_flagged_and_not_used_as_fp16():
    m4 = chips.get("m4")
    assert m4.peak_marketing.value == 38e12 and m4.peak_marketing_precision == "int8"
    assert m4.peak_ops_fp16.value == 19e12
    assert chips.get("a17-pro").peak_marketing_precision == "int8"
    for key in ("m1", "m2", "m3", "m1-ultra"):
        c = chips.get(key)
        assert c.peak_marketing_precision == "fp16" and c.peak_ops_fp16 == c.peak_marketing


def test_anemll_read_bandwidths_from_spec():
    expected = {"m1": 61, "m1-max": 55, "m2": 60, "m3": 63, "m4": 64, "m4-pro": 126, "m4-max": 119}
    for key, gbs in expected.items():
        assert chips.get(key).ane_read_bw.value == gbs * 1e9
    assert chips.get("m1-pro").ane_read_bw is None  # never measured: not made up


def test_chip_lookup_by_name_and_alias():
    assert chips.get("M1 Max").key == "m1-max"
    assert chips.get("m1max").key == "m1-max"
    assert chips.get("A17").key == "a17-pro"
    assert chips.get("a14 bionic").key == "a14"
    with pytest.raises(ValueError, match="unknown chip"):
        chips.get("m9")


# ------------------------------------------------------------------ the time model


def test_memory_bound_task_by_hand():
    # One decode task of a (1 x 4096) @ (4096 x 4096) matmul: a kernel group of 128 output
    # channels.  On the M3 (the chip the DMA bandwidths were measured on):
    macs = 128 * 4096  # 524,288 MACs
    kernel = 128 * 4096 * 2  # 1,048,576 B (1 MiB: 16 cores x 64 KiB)
    src = 4096 * 64  # 262,144 B: 4096 channels x one 64-byte row
    dst = 128 * 64  # 8,192 B
    task = Stats(
        tasks=1,
        macs=macs,
        control_dma_bytes=TD,
        kernel_dma_bytes=kernel,
        tile_dma_src_bytes=src,
        tile_dma_dst_bytes=dst,
    )
    compute = 2 * 524_288 / 18e12  # 5.825e-8 s
    dma = (
        0.939 * 1_048_576 / 37.99e9  # 25.918 us KernelDMA
        + 0.981 * 262_144 / 59.08e9  # 4.353 us TileDMA src
        + 8_192 / 59.08e9
        + 628 / 59.08e9
    )  # 0.149 us dst + ControlDMA
    assert dma == pytest.approx(30.42e-6, rel=1e-3)
    t = task_times([task], "m3", SEED)
    assert t["compute"][0] == pytest.approx(compute)
    assert t["dma"][0] == pytest.approx(dma)
    assert t["total"][0] == pytest.approx(dma + 1e-6)  # max(compute, dma) + 1 us dispatch
    e = estimate([task], "m3", SEED)
    assert e.time_s == pytest.approx(dma + 1e-6 + 1e-3)  # + the 1 ms program overhead
    # intensity 2 x 524,288 / 1,319,540 B = 0.7946 OP/B << ridge 18e12 / 100e9 = 180
    assert e.intensity == pytest.approx(1_048_576 / 1_319_540)
    assert e.bound == "memory" and e.limiter == "overhead"  # 1 ms > 31 us of one task
    assert estimate([task], "m3", SEED, program=False).limiter == "dma"


def test_compute_bound_task_by_hand():
    # A task doing 2^30 MACs on 1 MiB of kernel, 1 MiB in and 1 MiB out (M3):
    task = Stats(
        tasks=1,
        macs=2**30,
        control_dma_bytes=TD,
        kernel_dma_bytes=2**20,
        tile_dma_src_bytes=2**20,
        tile_dma_dst_bytes=2**20,
    )
    compute = 2 * 1_073_741_824 / 18e12  # 119.30 us
    dma = (
        0.939 * 1_048_576 / 37.99e9  # 25.92 us
        + 0.981 * 1_048_576 / 59.08e9  # 17.41 us
        + 1_048_576 / 59.08e9
        + 628 / 59.08e9
    )  # 17.76 us
    assert compute == pytest.approx(119.30e-6, rel=1e-4)
    assert dma == pytest.approx(61.09e-6, rel=1e-3)
    e = estimate([task], "m3", SEED, program=False)
    assert e.time_s == pytest.approx(compute + 1e-6)
    # intensity 2^31 / (3 x 2^20 + 628) = 682.5 OP/B > ridge 180: compute-bound, ~100% of roof
    assert e.intensity == pytest.approx(2**31 / (3 * 2**20 + 628))
    assert e.bound == "compute" and e.limiter == "compute"
    assert e.pct_of_roof == pytest.approx(100 * compute / (compute + 1e-6))


def test_program_overhead_is_the_fit_intercept_in_seconds():
    p = SEED
    assert (p.kernel_coef, p.tile_coef, p.program_overhead_s) == (0.939, 0.981, 0.001)
    task = Stats(tasks=1, kernel_dma_bytes=10**6)
    with_ = estimate([task], "m3", SEED)
    without = estimate([task], "m3", SEED, program=False)
    assert with_.time_s - without.time_s == pytest.approx(1e-3)
    other = estimate([task], "m3", ModelParams(program_overhead_s=1e-6))
    assert other.time_s - without.time_s == pytest.approx(1e-6)


def test_kernel_and_tile_dma_times_add():
    k = Stats(tasks=1, kernel_dma_bytes=37_990_000)  # 1 ms alone on the M3's KernelDMA
    t = Stats(tasks=1, tile_dma_src_bytes=59_080_000)  # 1 ms alone on its TileDMA
    both = Stats(tasks=1, kernel_dma_bytes=37_990_000, tile_dma_src_bytes=59_080_000)
    dk, dt, db = (task_times([s], "m3", SEED)["dma"][0] for s in (k, t, both))
    assert db == pytest.approx(dk + dt)  # serial, not overlapped
    assert db == pytest.approx(0.939e-3 + 0.981e-3)


def test_pointwise_efficiency_slows_one_tap_macs_alone():
    m = 10**9
    tasks = [
        Stats(tasks=1, macs=m),  # multi-tap
        Stats(tasks=1, macs=m, pointwise_macs=m),  # one-tap
        Stats(tasks=1, macs=m, int8_macs=m, pointwise_macs=m),  # one-tap on the INT8 lanes
        Stats(tasks=1, planar_ops=m),  # no MACs: no one-tap share
    ]
    p = ModelParams(pointwise_efficiency=0.5)
    r = model.rates("m1", p)
    compute = task_times(tasks, "m1", p)["compute"]
    assert compute[0] == pytest.approx(2 * m / r["peak"])
    assert compute[1] == pytest.approx(2 * 2 * m / r["peak"])
    assert compute[2] == pytest.approx(2 * 2 * m / r["peak_int8"])
    assert compute[3] == pytest.approx(m / (r["peak"] * p.planar_fraction))


def test_kernel_overlap_hides_weights_under_tiles_never_below_the_weights_alone():
    both = Stats(tasks=1, kernel_dma_bytes=37_990_000, tile_dma_src_bytes=59_080_000)
    small_k = Stats(tasks=1, kernel_dma_bytes=37_990_000, tile_dma_src_bytes=1_000_000)
    serial, half, hidden = (
        task_times([both], "m3", ModelParams(kernel_overlap=o))["dma"][0] for o in (0.0, 0.5, 1.0)
    )
    assert serial == pytest.approx(0.939e-3 + 0.981e-3)
    assert half == pytest.approx(0.5 * 0.939e-3 + 0.981e-3)
    assert hidden == pytest.approx(0.981e-3)
    # fully overlapped, a task with little tile traffic still streams its weights
    assert task_times([small_k], "m3", ModelParams(kernel_overlap=1.0))["dma"][0] == pytest.approx(0.939e-3)


def test_runtime_path_and_chip_overhead_pick_the_fixed_cost():
    p = ModelParams(program_overhead_s=50e-6, direct_overhead_s=300e-6, chip_overhead_s=(("a14", 500e-6),))
    task = Stats(tasks=1, kernel_dma_bytes=10**6)
    alone = estimate([task], "a14", p, program=False).time_s
    assert estimate([task], "a14", p).time_s - alone == pytest.approx(500e-6)  # the chip's own
    assert estimate([task], "a16", p).overhead_s == pytest.approx(50e-6)  # every other chip
    direct = ModelParams(**{**vars(p), "runtime": "direct"})
    assert estimate([task], "a14", direct).overhead_s == estimate([task], "m1", direct).overhead_s == 300e-6
    with pytest.raises(ValueError, match="runtime must be one of coreml, direct"):
        ModelParams(runtime="metal")
    with pytest.raises(ValueError, match="pointwise_efficiency must be in"):
        ModelParams(pointwise_efficiency=0.0)
    with pytest.raises(ValueError, match="kernel_overlap must be in"):
        ModelParams(kernel_overlap=1.5)


def test_dram_bandwidth_bounds_all_engines():
    # the A14 borrows DMA bandwidths capped at its 34.1 GB/s DRAM; 0.939 x would beat DRAM
    s = Stats(tasks=1, kernel_dma_bytes=34_100_000)
    assert task_times([s], "a14")["dma"][0] >= 1e-3 * (1 - 1e-12)


def test_estimate_accepts_stats_with_or_without_detail():
    a = Stats(tasks=1, macs=10, kernel_dma_bytes=100)
    b = Stats(tasks=1, macs=20, tile_dma_src_bytes=300)
    agg = model.sum_stats([a, b])
    assert agg.tasks == 2 and agg.macs == 30 and agg.dram_bytes == 400
    assert estimate(agg, "m1").time_s == pytest.approx(estimate([a, b], "m1").time_s)
    lone = Stats(tasks=2, macs=30, kernel_dma_bytes=100, tile_dma_src_bytes=300)
    assert estimate(lone, "m1").tasks == 2  # counted as one aggregate task


# -------------------------------------------------------------------- decode bounds


@pytest.mark.parametrize("name", ["gpt2", "gpt2-xl", "llama-3.2-1b"])
def test_decode_tokens_per_s_cannot_exceed_bandwidth_over_2p(name):
    from fastane import workloads
    from fastane.roofline import report

    w = workloads.get(name)
    P = w.weight_params
    r = analyze(w, "m1")
    assert r.total.dram_bytes >= 2 * P  # every fp16 weight crosses DRAM once at least
    for key, row in report.tokens_per_s(r).items():
        bw = chips.get(key).dram_bw.value
        assert row["model"] <= bw / (2 * P)
        assert row["bound_dram"] <= bw / (2 * P)
        assert row["bound_2p"] == pytest.approx(bw / (2 * P))
        assert row["model"] <= row["bound_dram"]


def test_llama_decode_bound_numbers():
    # Llama-3.2-1B: P = 1,235,746,816 fp16 parameters (tied lm_head read every step):
    # M1 68e9 / (2 x 1.2357e9) = 27.51 tokens/s at most
    from fastane import workloads

    P = workloads.get("llama-3.2-1b").weight_params
    assert P == 1_235_746_816
    assert tokens_per_s_bound(2 * P, "m1") == pytest.approx(27.51, abs=0.01)
    assert math.isnan(tokens_per_s_bound(2 * P, "m1-pro", "ane_read"))
