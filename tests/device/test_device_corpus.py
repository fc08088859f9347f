"""Real M1 programs from the corpus through the device (FASTANE_CORPUS)."""

import dataclasses

import numpy as np
import pytest

from fastane.device import Device
from fastane.td import load_program

SHAPE = (1, 1, 2560, 1600)  # every eiln kernel: fp16 1600 x 2560, 500-tile buffers


@pytest.fixture(scope="module")
def dev():
    return Device(memory_size=64 << 20)


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).uniform(-6, 6, SHAPE).astype(np.float16)


def load(corpus, group, name):
    return load_program(corpus / "m1-kernels" / group / f"{name}.bin")


@pytest.mark.parametrize(
    "group,name,fn,tol,kernel_bytes",
    [
        ("activation", "relu", lambda v: np.maximum(v, 0), 0.0, 0),
        ("unary", "tanh", np.tanh, 2e-3, 128),  # a LUT read from KMem (KernelDMA lane 0)
        ("unary", "exp", np.exp, 5e-3, 128),  # PostScale log2(e), then the exp2 table
    ],
)
def test_elementwise_programs(dev, corpus, x, group, name, fn, tol, kernel_bytes):
    program = load(corpus, group, name)
    slots = dev.tensors(program)
    assert {s: t.role for s, t in slots.items()} == {4: "output", 5: "input"}
    out = dev.run(program, {5: x})
    y, ref = out[4].astype(np.float64), fn(x.astype(np.float64))
    finite = np.isfinite(ref) & (np.abs(ref) < 60000)
    err = np.abs(y - ref)[finite] / np.maximum(1.0, np.abs(ref[finite]))
    assert err.max() <= tol
    s = out.stats
    row = 3200  # 1600 fp16, already a multiple of 64
    assert (s.tasks, s.macs, s.control_dma_bytes) == (1, 0, 0x274)
    assert s.tile_dma_src_bytes == s.tile_dma_dst_bytes == 2560 * row
    assert s.kernel_dma_bytes == kernel_bytes
    # stats-only: the same counts, except the data-dependent LUT range events
    counted = dev.run(program, {5: x}, stats_only=True).stats
    assert without_events(counted) == without_events(s)
    assert counted.tasks_detail == [without_events(s)]


def without_events(s):
    return dataclasses.replace(s, lut_underflow=0, lut_overflow=0, tasks_detail=[])


def test_planar_program_is_counted_and_computed(dev, corpus, x):
    program = load(corpus, "binary", "add")
    assert {s: t.role for s, t in dev.tensors(program).items()} == {4: "output", 5: "input", 6: "input"}
    s = dev.run(program, stats_only=True).stats
    assert s.planar_ops == 1600 * 2560 and s.macs == 0
    assert s.tile_dma_src_bytes == 2 * 2560 * 3200 and s.tile_dma_dst_bytes == 2560 * 3200
    out = dev.run(program, {5: x, 6: x})  # the planar engine (tests/device/test_planar_corpus.py)
    assert np.array_equal(out[4], (x.astype(np.float64) * 2).astype(np.float16))
    assert out.stats == s


def test_l2_model_reproduces_the_corpus_result_bases(corpus):
    """In every corpus MAC task that streams DRAM to DRAM, the source working set of the
    L2 model ends exactly where the compiler put the result (ResultBase)."""
    from fastane.device import l2, mac

    programs = sorted((corpus / "m1-kernels").glob("*/*.bin")) + sorted((corpus / "m1-hwx").glob("*.hwx"))
    checked = 0
    for path in programs + [corpus / "seed-conv1x1.td"]:
        for td in load_program(path).tds:
            regs = td.fields()
            if (
                any(td.planar_words)
                or regs["L2.SourceCfg.SourceType"] != 2
                or regs["L2.ResultCfg.ResultType"] != 2
            ):
                continue
            g = mac.geometry(regs, path.name)
            p = l2.plan(regs, g, 2, 2, {}, path.name)
            assert p.source[0] + p.source[1] == p.result[0], path.name
            checked += 1
    assert checked == 30


def test_hwx_programs_run(dev, corpus):
    from tests.helpers.device import ref_conv

    x = np.random.default_rng(1).standard_normal((1, 3, 1, 1)).astype(np.float16)
    out = dev.run(load_program(corpus / "m1-hwx" / "model.hwx"), {5: x})
    # model.hwx: a 3 -> 3 1x1 conv whose kernel region holds the weight 3.0 everywhere
    assert np.array_equal(out[4], ref_conv(x, np.full((3, 3, 1, 1), 3.0)))
    assert out.stats.macs == 9 and out.stats.kernel_dma_bytes == 3 * 64
    # gemm.hwx: 512 x 512, 32 output channels per core, 16 lanes of 32 KiB at l * 32 KiB
    gemm = load_program(corpus / "m1-hwx" / "gemm.hwx")
    td = gemm.tds[0]
    assert [td[f"KernelDMASrc.CoeffBaseAddr[{i}].Addr"] * 64 for i in range(16)] == [
        i * 32 * 512 * 2 for i in range(16)
    ]
    s = dev.run(gemm, {5: np.ones((1, 512, 1, 1))}).stats
    assert s.macs == 512 * 512 and s.kernel_dma_bytes == 512 * 512 * 2
