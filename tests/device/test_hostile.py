"""Regressions for hostile programs and inputs (c7c8773, 2026-12-01): each defect the fuzzing found.

1. every fault is found while planning, before any task writes memory (LUT blocks too),
   with the faulting TD's address, and stats-only reports the same fault;
2. int8/uint8 DMA formats on an fp16 task are refused at plan time (no silent integer
   outputs; the INT8 path moves integer tensors for integer tasks:
   tests/device/test_device_int8.py);
3. one task cannot make the host allocate more than ``engine.TASK_HOST_BYTES``;
4. huge numpy calls get precise errors before allocating; the real matmul K limit;
5. ``Device.run`` returns a slot several TDs write whole (``concat.hwx``).
"""

import numpy as np
import pytest
from tests.helpers.reference import ref_matmul

import fastane
from fastane import DeviceFault, lut
from fastane.device import Device, HostMemoryFault, Task, UnsupportedTask, engine
from fastane.device.taskmanager import TM_ERROR1, TM_ERROR2, fault_code
from fastane.td import Program, load_program
from fastane.td.asm import eltwise_td
from fastane.td.fields import TD_STRIDE

F16 = np.float16


@pytest.fixture
def dev():
    return Device(memory_size=16 << 20)


def relu_then_tanh(block: bytes) -> Program:
    """A relu task writing slot 4, then a tanh task (LUT ``block``) writing slot 6."""
    relu = eltwise_td((1, 4, 64), nonlinear="relu", src=5, dst=4, eon=False, nid=1)
    tanh = eltwise_td((1, 4, 64), nonlinear="lut", src=5, dst=6, kernel_slot=1, nid=2)
    return Program.from_tds([relu, tanh], kernel=block, name="relu+tanh")


def bad_block() -> bytes:
    raw = bytearray(lut.get_block("tanh").to_bytes())
    raw[2 * 42 : 2 * 42 + 2] = (0xFFFF).to_bytes(2, "little")  # word 42, the mode word
    return bytes(raw)


def buffers(dev, nbytes=0x1000):
    regions = {s: dev.alloc(nbytes, f"slot{s}") for s in (4, 5, 6)}
    dev.memory.view(regions[5].iova, nbytes)[:] = 0x3C  # fp16 1.0017...
    for s in (4, 6):
        dev.memory.view(regions[s].iova, nbytes)[:] = 0xA5  # a canary
    return regions


def assert_untouched(dev, program, bars, stats_only, exc=DeviceFault):
    """Submit; the task faults with ``exc``, memory, KMem and L2 exactly as before."""
    dev.load(program)
    before, kmem = dev.memory.data.copy(), dev.engine.kmem.data.copy()
    l2 = dict(dev.engine.l2.resident)
    task = dev.submit(program, bars, stats_only=stats_only)
    assert task.status == Task.FAULTED
    with pytest.raises(exc) as info:
        task.wait()
    assert isinstance(info.value, DeviceFault)
    assert np.array_equal(dev.memory.data, before), "a faulting program wrote memory"
    assert np.array_equal(dev.engine.kmem.data, kmem), "a faulting program loaded KMem"
    assert dev.engine.l2.resident == l2
    assert dev.read32(0x20000 + TM_ERROR1) == fault_code(info.value)
    return info.value


# ---------------------------------------------------------------- 1. faults before any write
@pytest.mark.parametrize("stats_only", [False, True])
def test_bad_lut_block_faults_before_the_first_task_writes(dev, stats_only):
    program = relu_then_tanh(bad_block())
    err = assert_untouched(dev, program, buffers(dev), stats_only, UnsupportedTask)
    assert "mode word 0xffff" in str(err)
    loaded = dev.load(program)
    assert err.td_index == 1 and err.td_addr == loaded.td_region.iova + TD_STRIDE
    assert dev.read32(0x20000 + TM_ERROR2) == err.td_addr  # the faulting TD, not the chain head


def test_a_good_chain_runs_and_a_block_changed_later_faults_though_the_plan_is_cached(dev):
    program = relu_then_tanh(lut.get_block("tanh").to_bytes())
    regions = buffers(dev)
    dev.submit(program, regions).wait()  # plan cached
    y = dev.read(regions[6], 4 * 128).view(F16)
    x = dev.read(regions[5], 4 * 128).view(F16)
    assert np.array_equal(y, lut.get_block("tanh")(x))
    loaded = dev.load(program)
    word = loaded.kernel_region.iova + 2 * 42
    dev.memory.write(word, np.frombuffer((0xFFFF).to_bytes(2, "little"), np.uint8))
    dev.memory.view(regions[4].iova, 0x1000)[:] = 0xA5
    assert_untouched(dev, program, regions, False, UnsupportedTask)


def test_a_lut_block_an_earlier_task_writes_is_refused(dev):
    """The block is checked before the chain runs; one the chain itself writes cannot be."""
    block = lut.get_block("tanh").to_bytes()
    program = relu_then_tanh(block)
    regions = buffers(dev)
    loaded = dev.load(program)
    bars = {**regions, 4: loaded.kernel_region}  # the relu task writes over the block
    err = assert_untouched(dev, program, bars, False, UnsupportedTask)
    assert "written by TD 0" in str(err)


def test_fault_carries_the_td_address_for_a_planning_fault(dev):
    program = relu_then_tanh(lut.get_block("tanh").to_bytes())
    regions = buffers(dev)
    del regions[6]  # the tanh task's output slot unmapped
    err = assert_untouched(dev, program, regions, False)
    assert err.td_index == 1 and err.td_addr == dev.load(program).td_region.iova + TD_STRIDE


# ---------------------------------------------------------------- 2. integer formats
@pytest.mark.parametrize("stats_only", [False, True])
@pytest.mark.parametrize("field", ["TileDMADst.Fmt.MemFmt", "TileDMASrc.Fmt.MemFmt"])
@pytest.mark.parametrize("fmt", [0, 1])
def test_integer_dma_formats_are_refused_at_plan_time(dev, field, fmt, stats_only):
    td = eltwise_td((1, 4, 64), nonlinear="relu", src=5, dst=4).update({field: fmt})
    program = Program.from_tds([td])
    err = assert_untouched(dev, program, buffers(dev), stats_only, UnsupportedTask)
    assert f"MemFmt = {fmt}" in str(err) and "only fp16" in str(err)
    with pytest.raises(UnsupportedTask):
        dev.run(program, {5: np.full((1, 1, 4, 64), 156.5)})


# ---------------------------------------------------------------- 3. host memory per task
def zero_stride_td(**extra):
    """A relu TD naming a 32767 x 8192 tensor whose rows and planes all sit on the same 16 KiB."""
    td = eltwise_td((1, 1, 8192), nonlinear="relu", src=5, dst=4)
    return td.update(
        {
            "Common.InDim.Hin": 32767,
            "Common.OutDim.Hout": 32767,
            "TileDMASrc.RowStride.Stride": 0,
            "TileDMASrc.PlaneStride.PlaneStride": 0,
            "TileDMADst.RowStride.RowStride": 0,
            "TileDMADst.PlaneStride.PlaneStride": 0,
            "Common.TileCfg.TileHeight": 1,
            **extra,
        }
    )


@pytest.mark.parametrize("stats_only", [False, True])
def test_zero_strides_cannot_make_the_host_allocate_gigabytes(dev, stats_only):
    program = Program.from_tds([zero_stride_td()])
    bars = buffers(dev, 0x4000)
    err = assert_untouched(dev, program, bars, stats_only, HostMemoryFault)
    assert err.nbytes > engine.TASK_HOST_BYTES and err.cap == engine.TASK_HOST_BYTES
    assert "TASK_HOST_BYTES" in str(err)


def test_the_host_cap_is_what_a_task_may_allocate(dev, monkeypatch):
    """A task just under the cap runs; the same task with the cap lowered below it faults."""
    td = eltwise_td((1, 1, 64), nonlinear="relu", src=5, dst=4)
    program = Program.from_tds([td])
    bars = buffers(dev)
    dev.submit(program, bars).wait()
    monkeypatch.setattr(engine, "TASK_HOST_BYTES", 64)
    dev2 = Device(memory_size=16 << 20)
    assert_untouched(dev2, program, buffers(dev2), False, HostMemoryFault)


def test_the_numpy_api_stays_far_below_the_host_cap():
    """The largest tasks the lowering builds (L2-sized tiles) need a small part of the cap."""
    from fastane.device import mac, planar
    from fastane.device.engine import decode
    from fastane.lower import Conv, build
    from fastane.td.planar import is_planar

    for low in (
        build(Conv.matmul(512, 4096, 4096, 1, True, "gelu")),
        build(Conv(1, 256, 64, 64, 256, 3, 3, pad=((1, 1), (1, 1)), bias=True)),
    ):
        worst = 0
        for p in low.programs:
            for off in p.offsets[:64]:
                regs = decode(p.td_stream[off : off + 0x274])
                g = (
                    planar.geometry(regs, planar.config(regs, "t", False), "t", False)
                    if is_planar(regs)
                    else mac.geometry(regs, "t")
                )
                worst = max(worst, planar.host_bytes(g) if is_planar(regs) else mac.host_bytes(g))
        assert 0 < worst < engine.TASK_HOST_BYTES // 10


def test_host_bytes_count_every_buffer_of_a_task():
    """The estimate, written out buffer by buffer (float64 = 8 B, fp16 = 2 B, flag = 1 B)."""
    from fastane.device import mac, planar

    def geo(mode, kh, pad, fmt=2):  # an fp16 task (fmt 0 or 1: the INT8 path, below)
        return mac.Geometry(mode, 4, 6, 6, 8, 6, 6, kh, kh, 1, 1, 1, 1, pad, pad, 1, fmt, fmt, fmt)

    n_in, n_out = 4 * 6 * 6, 8 * 6 * 6
    sums, acc, flag, readout, result, copy = 4, 8, 1, 8, 2, 8
    conv = geo(mac.CONV, 3, 1)  # not plain: im2col columns of 4 * 3 * 3 per output pixel
    cols, weights = 4 * 9 * 36, 8 * 4 * 9
    per_out = sums + acc + flag + readout + result + copy
    # the float32 fast path's operand: a float32 copy of a plain source, the columns' patterns
    f32_copy, f16_cols = 4, 2
    assert (
        mac.host_bytes(conv)
        == 8 * (n_in + cols + weights) + f32_copy * n_in + f16_cols * cols + per_out * n_out
    )
    plain = geo(mac.CONV, 1, 0)
    assert mac.host_bytes(plain) == 8 * (n_in + 8 * 4) + f32_copy * n_in + per_out * n_out
    through = geo(mac.PASSTHROUGH, 1, 0)
    assert mac.host_bytes(through) == 8 * n_in + (readout + result + copy) * n_out
    # the INT8 path also holds its source and weights scaled by 2**-8 (fastane.kernels.mac_int8)
    assert (
        mac.host_bytes(geo(mac.CONV, 3, 1, fmt=1))
        == 8 * (2 * n_in + cols + 2 * weights) + f32_copy * 2 * n_in + f16_cols * cols + per_out * n_out
    )
    pg = planar.PlanarGeometry(4, 6, 6, 4, 6, 6, 0, 0, groups=3, reduce=True)
    assert planar.host_bytes(pg) == 3 * n_in * (8 + 8 + result + copy)


# ---------------------------------------------------------------- 4. huge numpy calls
def test_a_huge_broadcast_batch_is_refused_before_any_allocation():
    a = np.ones((2**14, 1, 1, 1), F16)
    b = np.ones((2**14, 1, 1), F16)
    with pytest.raises(ValueError, match="exceeds the 4 GiB the ANE can address"):
        fastane.matmul(a, b)


def test_a_huge_activation_gets_a_user_facing_error():
    from fastane import lower

    x = np.broadcast_to(F16(1), (2**17, 2**17))
    with pytest.raises(ValueError, match=r"tanh: the input has 17179869184 elements .* 4 GiB the ANE"):
        fastane.tanh(x)
    with pytest.raises(ValueError, match=r"17179869184 fp16 elements .* exceeds the 4 GiB"):
        lower.build(lower.Eltwise(2**34, "tanh"))


def test_matmul_k_limit_is_the_documented_one():
    """K = 32,767 runs (bit-exact against the reference); K = 32,768 does not fit the L2."""
    rng = np.random.default_rng(1)
    k = 32767
    a = (rng.standard_normal((2, k)) * 0.05).astype(F16)
    b = (rng.standard_normal((k, 3)) * 0.05).astype(F16)
    assert np.array_equal(fastane.matmul(a, b).view(np.uint16), ref_matmul(a, b).view(np.uint16))
    a2, b2 = np.ones((2, k + 1), F16), np.ones((k + 1, 3), F16)
    with pytest.raises(NotImplementedError, match="L2"):
        fastane.matmul(a2, b2)


def test_readme_states_the_k_limit():
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "`K` is at most 32,767" in readme.replace("\n", " ")


# ---------------------------------------------------------------- 5. a slot written by several TDs
def test_concat_hwx_output_comes_back_whole(corpus):
    program = load_program(corpus / "m1-hwx" / "concat.hwx")
    dev = Device(memory_size=64 << 20)
    slots = dev.tensors(program)
    assert slots[4].role == "output" and slots[4].shape == (1, 16400, 1, 1)
    rng = np.random.default_rng(3)
    inputs = {
        s: (rng.standard_normal(t.shape) * 8).astype(F16) for s, t in slots.items() if t.role == "input"
    }
    out = dev.run(program, inputs)
    y = out[4]
    assert y.dtype == F16 and y.shape == (1, 16400, 1, 1)
    # the device's own bytes, through submit and a read of the region
    regions = {s: dev.alloc(t.nbytes) for s, t in slots.items()}
    for s, x in inputs.items():
        slots[s].view(dev.memory.view(regions[s].iova, regions[s].size))[...] = x[0]
    dev.submit(program, regions).wait()
    raw = dev.read(regions[4])
    assert np.array_equal(y[0], slots[4].view(raw))
    # concat: the 16,384 channels of one input, then the 16 of the other
    by_shape = {t.shape[1]: s for s, t in slots.items() if t.role == "input"}
    assert np.array_equal(y[0, :16384], inputs[by_shape[16384]][0])
    assert np.array_equal(y[0, 16384:], inputs[by_shape[16]][0])


def test_parts_that_do_not_tile_one_tensor_are_refused_by_run():
    """Two writes to one slot in different layouts: Device.run says so instead of guessing."""
    from fastane.device import tensor_slots

    a = eltwise_td((1, 4, 64), nonlinear="relu", src=5, dst=4, eon=False, nid=1)
    b = eltwise_td((1, 2, 32), nonlinear="relu", src=6, dst=4, dst_base=0x4000, nid=2)
    program = Program.from_tds([a, b])
    assert tensor_slots(program)[4].problem is not None
    with pytest.raises(NotImplementedError, match="do not tile one tensor"):
        Device(memory_size=16 << 20).run(program, {5: np.ones((1, 1, 4, 64)), 6: np.ones((1, 1, 2, 32))})


def test_parts_tile_one_tensor_by_their_channel_ranges():
    """The parts TDs write of a slot are one tensor when their channel ranges, in any order
    and overlapping or not, leave no gap from the first (device._merge: the ranges sorted,
    no set of every channel)."""
    from fastane.device import tensor_slots

    def slot4(*parts):  # (channels, byte base) of each TD's (C, 4, 64) write to slot 4
        tds = [
            eltwise_td((c, 4, 64), src=5, dst=4, dst_base=b, eon=i == len(parts) - 1, nid=i % 255 + 1)
            for i, (c, b) in enumerate(parts)
        ]
        return tensor_slots(Program.from_tds(tds))[4]

    plane = 4 * 128
    assert (slot4((1, plane), (1, 0)).shape, slot4((1, plane), (1, 0)).base) == ((1, 2, 4, 64), 0)
    assert slot4((2, 0), (2, plane)).shape == (1, 3, 4, 64)  # overlapping
    assert (slot4((1, 2 * plane), (1, plane)).shape, slot4((1, 2 * plane), (1, plane)).base) == (
        (1, 2, 4, 64),
        plane,
    )
    assert slot4((1, 0), (1, 2 * plane)).problem is not None  # channel 1 is never written
    many = slot4(*((1, k * plane) for k in reversed(range(2000))))
    assert many.shape == (1, 2000, 4, 64) and many.problem is None


@pytest.mark.parametrize(
    "call",
    [
        lambda x: fastane.matmul(x, np.ones((1, 64))),
        lambda x: fastane.tanh(x),
        lambda x: fastane.relu(x),
    ],
)
def test_a_huge_broadcast_operand_is_refused_before_its_fp16_copy(call):
    """Found by the fuzzer: an int64 broadcast view of 2**28 x 16 elements was converted to
    fp16 (8 GiB) before any size check."""
    x = np.broadcast_to(np.int64(0), (2**28, 16, 1))
    with pytest.raises(ValueError, match="4 GiB the ANE can address"):
        call(x)


def test_a_huge_broadcast_linear_is_refused_before_its_fp16_copy():
    """Found by the campaign: converting this float32 view (1.4 G elements) took minutes
    before the product's size was checked."""
    x = np.broadcast_to(np.float32(1e-8), (2**20, 149, 1, 9))
    w = np.full((33, 9), 1e-8, np.float32)
    with pytest.raises(ValueError, match="exceeds the 4 GiB the ANE can address"):
        fastane.linear(x, w)
    with pytest.raises(ValueError, match="exceeds the 4 GiB the ANE can address"):
        fastane.matmul(x, w.T)


@pytest.mark.parametrize("word,value", [(35, 0x7E00), (4, 0x7C00), (37, 0xFC00), (40, 0x7E00)])
def test_a_lut_block_with_non_finite_coefficients_is_refused_while_planning(dev, word, value):
    """Found by the campaign: a NaN knot (exp.bin, word 35 = 0x7e00) sent every element down
    the exact-rounding slow path (75 s for one task).  What the hardware does with one is
    unknown: the block is refused before the chain runs."""
    raw = bytearray(lut.get_block("tanh").to_bytes())
    raw[2 * word : 2 * word + 2] = value.to_bytes(2, "little")
    err = assert_untouched(dev, relu_then_tanh(bytes(raw)), buffers(dev), False, UnsupportedTask)
    assert "not finite" in str(err)
    with pytest.raises(fastane.TDError, match="not finite"):
        lut.CoeffBlock.from_bytes(bytes(raw))


def test_a_call_too_big_for_the_emulated_dram_is_the_devices_own_error():
    # a 1 MiB device cannot hold the operands: fastane's DeviceMemoryError (a MemoryError
    # and a FastaneError), never a host allocation failure, and the device stays usable
    from fastane import lower
    from fastane.errors import DeviceMemoryError

    old = lower.default_device()
    lower.set_default_device(Device(memory_size=1 << 20))
    try:
        a = np.ones((256, 1024), np.float16)
        with pytest.raises(DeviceMemoryError, match="do not fit the device's unified memory"):
            fastane.matmul(a, a.T)
        small = np.ones((4, 4), np.float16)
        np.testing.assert_array_equal(fastane.matmul(small, small), ref_matmul(small, small))
    finally:
        lower.set_default_device(old)
