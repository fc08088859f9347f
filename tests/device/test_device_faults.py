"""Faults: each raises its precise exception, sets the TM error state, and leaves unified
memory (and L2) untouched, because every check runs before any data moves."""

import dataclasses

import numpy as np
import pytest
from tests.helpers.device import F16, TD_SIZE, assert_submit_faults, l2_chain, looping_program, seed_program

from fastane.device import (
    BARFault,
    ChainFault,
    DecodeFault,
    Device,
    DMARangeFault,
    KMemOverflow,
    L2Fault,
    L2Overflow,
    UnsupportedTask,
    pack_weights,
)
from fastane.device.taskmanager import TM_IRQ_EVTC
from fastane.td import Program, conv_td


@pytest.fixture
def dev():
    return Device(memory_size=8 << 20)


@pytest.fixture
def seed(corpus):
    return seed_program(corpus, np.ones((3, 8, 1, 1), F16))


def io(dev, n_in=0x4000, n_out=0x4000):
    src, dst = dev.alloc(n_in, "in"), dev.alloc(n_out, "out")
    dev.memory.view(src.iova, src.size)[:] = 0x3C  # non-zero input bytes
    return src, dst


def assert_faults(dev, program, bars, exc, match=None):
    """Submit; the task faults with ``exc``; memory and L2 are exactly as before."""
    fault = assert_submit_faults(dev, program, bars, exc, match)
    assert dev.read32(0x20000 + TM_IRQ_EVTC(1)) >= 1
    return fault


def test_unmapped_bar(dev, seed):
    src, _ = io(dev)
    err = assert_faults(dev, seed, {4: src}, BARFault, "slot 5 is not mapped")
    assert err.slot == 5


def test_disabled_slot(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"Header.WBE": 0})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, BARFault, "WBE")


def test_output_range_past_its_buffer(dev, seed):
    src, dst = io(dev)
    err = assert_faults(dev, seed, {4: src, 5: dst.window(0, 3 * 4 * 64 - 64)}, DMARangeFault, "TileDMADst")
    assert (err.slot, err.nbytes) == (5, 768)


def test_input_range_past_its_buffer(dev, seed):
    src, dst = io(dev)
    assert_faults(dev, seed, {4: src.window(0, 1024), 5: dst}, DMARangeFault, "TileDMASrc")


def test_dma_base_address_past_the_buffer(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"TileDMADst.BaseAddr.Addr": 0x4000 // 64 - 4})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, DMARangeFault)


def test_kernel_lane_past_the_kernel_buffer(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"KernelDMASrc.CoeffBaseAddr[2].Addr": 0x4000 // 64})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, DMARangeFault, "lane 2")


def test_kmem_overflow_lane_size(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"KernelDMASrc.CoeffBfrSize[0].MemBfrSize": 1025})
    err = assert_faults(
        dev,
        Program.from_tds([td], kernel=bytes(0x20000)),
        {4: src, 5: dst},
        KMemOverflow,
        "0x10040 bytes into a 0x10000-byte KMem",
    )
    assert err.lane == 0


def test_kmem_overflow_kernel_too_big(dev):
    # 1 x 4096 x 3 x 3 fp16 = 72 KiB for one core: more than its 64 KiB
    td = conv_td((1, 4096, 3, 3), (1, 1, 1, 1), kernel=3)
    src, dst = io(dev, 4096 * 3 * 64, 0x4000)
    program = Program.from_tds([td], kernel=bytes(4096 * 9 * 2))
    assert_faults(dev, program, {4: src, 5: dst}, KMemOverflow)
    with pytest.raises(KMemOverflow):
        pack_weights(np.zeros((1, 4096, 3, 3)))


def test_mac_reads_more_kernel_than_loaded(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"KernelDMASrc.CoeffDMAConfig[2].En": 0})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, KMemOverflow, "core 2")


def test_l2_overflow_result_past_2mib(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"L2.ResultBase.Addr": (2 << 20) // 16 - 8})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, L2Overflow, "2 MiB")


def test_l2_overflow_task_too_big(dev):
    # 256 channels x 63 rows of 64 pixels (1.97 MiB) plus 16 x 63 result rows: > 2 MiB
    td = conv_td((1, 256, 63, 64), (1, 16, 63, 64))
    program = Program.from_tds([td], kernel=bytes(16 * 512))
    src, dst = io(dev, 256 * 63 * 128, 16 * 63 * 128)
    assert_faults(dev, program, {4: src, 5: dst}, L2Overflow, "result working set")


def test_l2_source_never_written(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"L2.SourceCfg.SourceType": 3, "L2.SourceBase.Addr": 0x100})
    assert_faults(
        dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, L2Fault, "no earlier task"
    )


def test_looping_chain_is_detected(dev):
    src, dst = io(dev)
    err = assert_faults(dev, looping_program(), {4: src, 5: dst}, ChainFault, "loops")
    assert err.addr == dev.load(looping_program()).td_region.iova or err.addr


def test_chain_without_eon_is_detected(dev, seed):
    src, dst = io(dev)
    td = seed.tds[0].copy()
    program = Program.from_tds([td], kernel=seed.kernel)
    td = program.tds[0].update({"Header.EON": 0})
    program = dataclasses.replace(program, td_stream=td.to_bytes())
    assert_faults(dev, program, {4: src, 5: dst}, ChainFault, "never ends")


def test_chain_longer_than_pushed_count(dev, seed):
    """Registers: TM_INFO says 1 TD, the chain has 2."""
    rng = np.random.default_rng(0)
    w0, w1 = (rng.standard_normal((c, 8, 1, 1)).astype(F16) for c in (8, 3))
    program = l2_chain((1, 8, 4, 3), w0, w1)
    loaded = dev.load(program)
    src, dst = io(dev)
    bars = {**loaded.bars, 4: src, 5: dst}
    before = dev.memory.data.copy()
    task = dev.tm.submit(
        0, [bars[i].iova if i in bars else 0 for i in range(32)], loaded.td_region.iova, TD_SIZE, 1
    )
    with pytest.raises(ChainFault, match="within the 1 TDs"):
        task.wait()
    assert np.array_equal(dev.memory.data, before)


def test_second_task_faulting_leaves_the_first_undone(dev):
    rng = np.random.default_rng(0)
    w0, w1 = (rng.standard_normal((c, 8, 1, 1)).astype(F16) for c in (8, 3))
    program = l2_chain((1, 8, 4, 3), w0, w1)
    src, _ = io(dev)
    assert_faults(dev, program, {4: src}, BARFault, "TD 1")  # TD 1's output slot unmapped


def test_malformed_td(dev, seed):
    src, dst = io(dev)
    stream = bytearray(seed.td_stream)
    stream[0x124:0x128] = (0x12345678).to_bytes(4, "little")  # Common's packet header
    program = dataclasses.replace(seed, td_stream=bytes(stream))
    assert_faults(dev, program, {4: src, 5: dst}, DecodeFault, "Common")


def test_unsupported_modes(dev, seed, corpus):
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"Common.ChCfg.InFmt": 1, "TileDMASrc.Fmt.MemFmt": 1})
    assert_faults(dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, UnsupportedTask, "FP16")
    td = seed.tds[0].copy().update({"L2.ResultCfg.ResultType": 1})  # 0 is the L2 vector type
    assert_faults(
        dev, Program.from_tds([td], kernel=seed.kernel), {4: src, 5: dst}, UnsupportedTask, "ResultType"
    )


def test_l2_source_checked_again_when_l2_changes_under_a_cached_plan(dev, seed):
    """A chain reading L2 has its plan kept under what L2 held when it started: run with a
    result of the right shape there, then with L2 emptied and with a result of another
    shape, the same chain faults as on its first push (the kept plan is not reused)."""
    src, dst = io(dev)
    td = seed.tds[0].copy().update({"L2.SourceCfg.SourceType": 3, "L2.SourceBase.Addr": 0x100})
    program = Program.from_tds([td], kernel=seed.kernel)
    shape = (1, td["Common.Cin.Cin"], td["Common.InDim.Hin"], td["Common.InDim.Win"])
    held = np.ones(shape)
    for _ in range(2):
        dev.engine.l2.keep(0x100 * 16, held, held.size * 2)
        dev.load(program)
        dev.submit(program, {4: src, 5: dst}).wait()
    dev.engine.l2.clear()
    assert_faults(dev, program, {4: src, 5: dst}, L2Fault, "no earlier task")
    other = np.ones(shape[:3] + (shape[3] + 1,))
    dev.engine.l2.keep(0x100 * 16, other, other.size * 2)
    assert_faults(dev, program, {4: src, 5: dst}, L2Fault, "the result in L2")
    dev.engine.l2.clear()
    dev.engine.l2.keep(0x100 * 16, held, held.size * 2)
    dev.submit(program, {4: src, 5: dst}).wait()
