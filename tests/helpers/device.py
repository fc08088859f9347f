"""Shared helpers of the tests: fp16 bit views and comparisons, reference convolutions, TD
builders, the driver's register sequence, fault checks.  (Fixtures: tests/conftest.py.)"""

import dataclasses
import inspect

import numpy as np
import pytest

from fastane import DeviceFault
from fastane import activations as fastane_activations
from fastane.device import Task, pack_weights
from fastane.kernels.conv import conv2d_q16
from fastane.kernels.mac import readout
from fastane.td import Program, TaskDescriptor, conv_td, load_program
from fastane.device.taskmanager import (
    QUEUE_PRIORITIES,
    TM_ADDR,
    TM_INFO,
    TM_IRQ_ACK,
    TM_ERROR1,
    TM_IRQ_EN1,
    TM_IRQ_EN2,
    TM_IRQ_EVTC,
    TM_IRQ_INFO,
    TM_IRQ_TMST,
    TM_IRQ_UNK1,
    TM_IRQ_UNK2,
    TM_IS_IDLE,
    TM_PUSH,
    TM_STATUS,
    TM_TQ_EN,
    TQ_ADDR1,
    TQ_BAR1,
    TQ_NID1,
    TQ_PRTY,
    TQ_SIZE1,
    TQ_STATUS,
    TQ_STRIDE,
    fault_code,
)
from fastane.m1 import TD_SIZE, TD_STRIDE

F16 = np.float16


def bits(x):
    """The fp16 bit patterns of ``x`` (uint16)."""
    return np.asarray(x, F16).view(np.uint16)


def assert_same_f16(got, want):
    """Same shape, NaN at the same places, every other element the same fp16 pattern."""
    got, want = np.asarray(got, F16), np.asarray(want, F16)
    assert got.shape == want.shape
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), (
        f"NaN positions differ: got {np.argwhere(gn)[:5]}, want {np.argwhere(wn)[:5]}"
    )
    g, w = got.view(np.uint16)[~gn], want.view(np.uint16)[~wn]
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (
        f"{bad.size} of {g.size} differ, e.g. got {[hex(v) for v in g[bad[:5]]]} want {[hex(v) for v in w[bad[:5]]]}"
    )


def assert_submit_faults(dev, program, bars, exc, match=None):
    """Submit; the task faults with ``exc``; memory and L2 are exactly as before, TM_ERROR1
    holds the fault's code.  Returns the fault."""
    dev.load(program)
    before, l2 = dev.memory.data.copy(), dict(dev.engine.l2.resident)
    task = dev.submit(program, bars)
    assert task.status == Task.FAULTED
    with pytest.raises(exc, match=match) as info:
        task.wait()
    assert isinstance(info.value, DeviceFault)
    assert np.array_equal(dev.memory.data, before), "a faulting program wrote memory"
    assert dev.engine.l2.resident == l2
    assert dev.read32(0x20000 + TM_ERROR1) == fault_code(info.value)
    return info.value


def tq(qid, reg):
    """Offset of TQ register ``reg`` of queue ``qid`` in the TQ block."""
    return qid * TQ_STRIDE + reg


def ref_conv(x, w, stride=(1, 1), pad=(0, 0), out_hw=None, groups=1, dil=(1, 1)):
    """MAC kernel + readout: the values a conv TD must produce, as float16."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    if out_hw is None:
        out_hw = (
            (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1,
            (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1,
        )
    acc, flag = conv2d_q16(
        np.ascontiguousarray(x),
        np.ascontiguousarray(w),
        stride[0],
        stride[1],
        dil[0],
        dil[1],
        pad[0],
        pad[1],
        out_hw[0],
        out_hw[1],
        groups,
        False,
    )
    out = np.empty(acc.shape)
    readout(acc, flag, out)
    return out.astype(F16)


def seed_program(corpus, w):
    """The seed 1x1 conv TD with weights ``w`` [3, 8, 1, 1] placed as its KernelDMA says."""
    p = load_program(corpus / "seed-conv1x1.td")
    kernel, fields = pack_weights(w)
    td = p.tds[0]
    assert all(td[k] == v for k, v in fields.items()), "pack_weights disagrees with the seed TD"
    return dataclasses.replace(p, kernel=kernel)


def padded_conv_td(x_shape, y_shape, kernel, pad, stride=(1, 1), **kw) -> TaskDescriptor:
    """A conv TD with zero padding, from the TD builder.

    Uses ``conv_td(..., padding=...)`` when the builder has it; otherwise builds the TD of
    the equivalent unpadded geometry and sets the padding fields (Px/Py), the real input
    dims and the input DMA strides the builder would give them.
    """
    if "padding" in inspect.signature(conv_td).parameters:
        return conv_td(x_shape, y_shape, kernel=kernel, stride=stride, padding=pad, **kw)
    n, c, h, w = x_shape
    td = conv_td((n, c, h + 2 * pad[0], w + 2 * pad[1]), y_shape, kernel=kernel, stride=stride, **kw)
    row = -(-w * 2 // 64) * 64
    plane = -(-row * h // 64) * 64
    td.update(
        {
            "Common.InDim.Hin": h,
            "Common.InDim.Win": w,
            "Common.ConvCfg.Py": pad[0],
            "Common.ConvCfg.Px": pad[1],
            "TileDMASrc.RowStride.Stride": row >> 6,
            "TileDMASrc.PlaneStride.PlaneStride": plane >> 6,
            "TileDMASrc.DepthStride.Stride": c * plane >> 6,
            "TileDMASrc.GroupStride.Stride": c * plane >> 6,
        }
    )
    return td


def l2_chain(x_shape, w0, w1):
    """Two 1x1 convs; the first keeps its result in L2, the second reads it from there."""
    n, c, h, w = x_shape
    c1, c2 = w0.shape[0], w1.shape[0]
    k0, f0 = pack_weights(w0)
    k1, f1 = pack_weights(w1, base=len(k0))
    td0 = conv_td(x_shape, (1, c1, h, w), nid=1).update(f0)
    td1 = conv_td((1, c1, h, w), (1, c2, h, w), src=6, nid=2).update(f1)
    base = td0["L2.ResultBase.Addr"]
    td0.update({"L2.ResultCfg.ResultType": 3, "Header.WBE": 0, "TileDMADst.DMAConfig.En": 0})
    td1.update(
        {
            "L2.SourceCfg.SourceType": 3,
            "L2.SourceBase.Addr": base,
            "Header.RBE0": 0,
            "TileDMASrc.DMAConfig.En": 0,
            "L2.ResultBase.Addr": base + h * td1["L2.SourceRowStride.Stride"],
        }
    )
    return Program.from_tds([td0, td1], kernel=k0 + k1, name="l2-chain")


def looping_program():
    """Two TDs pointing at each other, neither with EON."""
    tds = [conv_td((1, 8, 4, 1), (1, 3, 4, 1), nid=i + 1) for i in range(2)]
    p = Program.from_tds(tds, kernel=bytes(192))
    stream = bytearray(p.td_stream)
    for i, td in enumerate(p.tds):
        td.update(
            {
                "Header.EON": 0,
                "Header.NextSize": 0x9C,
                "Header.TBE": 1,
                "Header.NextPointer": TD_STRIDE * ((i + 1) % 2),
            }
        )
        stream[TD_STRIDE * i : TD_STRIDE * i + TD_SIZE] = td.to_bytes()
    return dataclasses.replace(p, td_stream=bytes(stream))


# -- the Linux driver's sequence (eiln/ane ane_tm.c), register by register ---------------
def driver_enable(tm):
    tm.tm_write32(TM_TQ_EN, tm.tm_read32(TM_TQ_EN) | 0x1000)
    for qid, prty in enumerate(QUEUE_PRIORITIES):
        tm.tq_write32(tq(qid, TQ_PRTY), prty)
    tm.tm_write32(TM_IRQ_EN1, 0x4000000)
    tm.tm_write32(TM_IRQ_EN2, 0x6)


def driver_execute(tm, qid, bars, iova, nid, td_count):
    tm.tq_write32(tq(qid, TQ_STATUS), 0x1)
    for bdx, bar in enumerate(bars):
        tm.tq_write32(tq(qid, TQ_BAR1) + 4 * bdx, bar)
    tm.tq_write32(tq(qid, TQ_SIZE1), ((TD_SIZE >> 2) - 1) << 0x10)
    tm.tq_write32(tq(qid, TQ_ADDR1), iova)
    tm.tq_write32(tq(qid, TQ_NID1), (nid & 0xFF) << 8 | 1)
    tm.tm_write32(TM_ADDR, tm.tq_read32(tq(qid, TQ_ADDR1)))
    tm.tm_write32(TM_INFO, tm.tq_read32(tq(qid, TQ_SIZE1)) | td_count)
    tm.tm_write32(TM_PUSH, QUEUE_PRIORITIES[qid] | (qid & 7) << 8)
    assert tm.tm_read32(TM_STATUS) & TM_IS_IDLE  # the poll the driver does
    events = []
    for line in (0, 1):
        for _ in range(tm.tm_read32(TM_IRQ_EVTC(line))):
            events.append(
                (
                    line,
                    tm.tm_read32(TM_IRQ_INFO(line)),
                    tm.tm_read32(TM_IRQ_UNK1(line)),
                    tm.tm_read32(TM_IRQ_TMST(line)),
                    tm.tm_read32(TM_IRQ_UNK2(line)),
                )
            )
        if line == 0:
            tm.tm_write32(TM_IRQ_ACK, tm.tm_read32(TM_IRQ_ACK) | 2)
    tm.tq_write32(tq(qid, TQ_STATUS), 0x0)
    return events


#: every elementwise activation of the public API (fastane.activations.__all__ less its helpers)
ACTIVATIONS = [n for n in fastane_activations.__all__ if n not in ("lut_table", "last_stats")]
