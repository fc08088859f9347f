"""The fp16 lane of the elementwise tasks: kernel-less NE tasks and planar elementwise
tasks computed on fp16 patterns where they lie, with no float64 tensors between the blocks.

The block-by-block path of :class:`fastane.device.engine.Engine` decodes every source to
float64 (TileDMASrc), computes, encodes to fp16 and converts back to float64 (for L2) or
writes fp16 (TileDMADst).  For these tasks every step is a function of the fp16 patterns,
so the lane reads the checked TileDMA windows (or the fp16 tensor an earlier task left in
L2) as uint16 and writes the destination window (or a new fp16 tensor kept in L2)
directly, one parallel pass per task:

* a kernel-less NE task (``KernelMode = 1``) with one bias for every channel: its result
  is a function of the input pattern, looked up in the stage's table of all 65536
  patterns (:func:`fastane.device.ne.pattern_table`, built by the same kernel);
* a unary planar task (scale and offset, abs): likewise, through its table of the 65536
  patterns, built by :func:`fastane.kernels.planar.eltwise_serial` itself (a source
  broadcast along the row, or too few elements for a table: as a binary task);
* a binary planar task: :func:`fastane.kernels.planar.eltwise_window`, the same
  arithmetic as :func:`fastane.kernels.planar.eltwise_parallel` on decoded operands;
* a planar row reduction (sum, max, 1/sum) streamed from DRAM into L2:
  :func:`fastane.kernels.planar.reduce_window` on the rows in place.

Same bits and the same counters as the block path (tests/device/test_eltwise_lane.py compares
both, and the reference).  Where a case does not fit -- another format, odd strides, a
bias per channel, too few elements for an NE table, a destination overlapping a source
-- :func:`run` returns None and the block path runs.
"""

from __future__ import annotations

import functools

import numpy as np

from fastane.kernels import ne_table as _ktable
from fastane.kernels import parallel as _kpar
from fastane.kernels import planar as _kplanar
from fastane.kernels import planar_f32 as _kf32

from . import mac, ne, planar, tile_dma
from .taskplan import with_events


def run(p, memory: np.ndarray, kmem, l2mem):
    """Run the task of plan ``p`` on the fp16 lane: its Stats, or None if it does not fit."""
    if p.is_planar:
        return _planar(p, memory, l2mem)
    if p.geometry.mode != mac.PASSTHROUGH:
        return None
    return _ne(p, memory, kmem, l2mem)


def _ne(p, memory, kmem, l2mem):
    g = p.geometry
    shape = (g.cin, g.hin, g.win)
    if (g.cout, g.hout, g.wout) != shape:
        return None
    src = _source(p.src, p.l2, memory, l2mem, shape)
    if src is None:
        return None
    if ne.plain(p.ne) and src[3] == 1:  # identity or ReLU alone: no table to look up
        dst = _destination(p, memory, l2mem, shape, (src,))
        if dst is None:
            return None
        (a, ap, ar, _step), (out, dp, dr, wpad), keep = src, dst[:4], dst[4]
        nans = 0
        if a.size and out.size:
            nans = _ktable.plain_window(a, ap, ar, *shape, p.ne.nonlinear == ne.RELU, out, dp, dr, wpad)
        keep()
        return with_events(p.stats, 0, int(nans), 0, 0)
    table = ne.pattern_table(p.ne, kmem, g.cin * g.hin * g.win)
    if table is None:
        return None
    return _lookup(p, memory, l2mem, shape, src, table)


def _lookup(p, memory, l2mem, shape, src, table):
    """Run a task that is a function of the input pattern, through its uint64 table."""
    dst = _destination(p, memory, l2mem, shape, (src,))
    if dst is None:
        return None
    (a, ap, ar, _step), (out, dp, dr, wpad), keep = src, dst[:4], dst[4]
    counts = np.zeros(3, np.int64)
    if a.size and out.size:
        nw = _kpar.workers() if shape[0] * shape[1] * shape[2] >= _ktable.LOOKUP_PARALLEL else 1
        if nw > 1:
            _ktable.lookup_window_par(a, ap, ar, *shape, table, out, dp, dr, wpad, counts, nw)
        else:
            _ktable.lookup_window(a, ap, ar, *shape, table, out, dp, dr, wpad, counts)
    keep()
    return with_events(p.stats, 0, int(counts[0]), int(counts[1]), int(counts[2]))


def _planar(p, memory, l2mem):
    g, cfg = p.geometry, p.planar
    shape = (g.cin, g.hin, g.win)
    if (g.cout, g.hout, g.wout) != shape:
        return None
    if cfg.reduce:
        return _reduce(p, memory, l2mem)
    a = _source(p.src, p.l2, memory, l2mem, shape, broadcast=g.src_broadcast)
    if a is None:
        return None
    if not cfg.binary:
        if a[3] == 1 and g.cin * g.hin * g.win >= ne.TABLE_MIN:  # a table, as for the NE
            table = _unary_table(cfg.op, cfg.in_scale, cfg.out_scale, cfg.offset)
            return _lookup(p, memory, l2mem, shape, a, table)
        b = (_EMPTY, 0, 0, 0)  # a broadcast row or a small tensor: computed as below
    else:
        b = _second(p.src1, memory, l2mem, shape)
        if b is None:
            return None
    dst = _destination(p, memory, l2mem, shape, (a, b))
    if dst is None:
        return None
    out, dp, dr, wpad, keep = dst
    nans = 0
    if out.size and _copy(cfg) and a[3] == 1:  # each pattern as it is: no arithmetic to compile
        nans = _ktable.plain_window(a[0], a[1], a[2], *shape, False, out, dp, dr, wpad)
    elif out.size and _float32(cfg):  # through the CPU's fp16 conversions: the same bits
        mul, sub = cfg.op == _kplanar.OP_MUL, cfg.op == _kplanar.OP_SUB
        nans = _kf32.binary_window(*a, *b, *shape, mul, sub, cfg.in_scale, cfg.out_scale, out, dp, dr, wpad)
    elif out.size:
        nans = _kplanar.eltwise_window(
            *a, *b, *shape, cfg.op, cfg.in_scale, cfg.out_scale, cfg.offset, out, dp, dr, wpad
        )
    keep()
    return with_events(p.stats, 0, int(nans), 0, 0)


def _copy(cfg) -> bool:
    """A unary pass with unit scales and no offset: the value of every fp16 pattern is
    itself (a NaN reads out as 0x7e00, and is counted), what
    :func:`fastane.kernels.ne_table.plain_window` writes without ReLU."""
    return (
        not cfg.binary
        and cfg.op == _kplanar.OP_PASS
        and cfg.in_scale == 1.0
        and cfg.out_scale == 1.0
        and cfg.offset == 0.0
    )


def _float32(cfg) -> bool:
    """A binary add, subtract or multiply without an output offset: each stage one
    operation on fp16 values, which float32 rounds as float64 does
    (:mod:`fastane.kernels.planar_f32`)."""
    return cfg.binary and cfg.offset == 0 and cfg.op in _F32_OPS


_F32_OPS = (_kplanar.OP_ADD, _kplanar.OP_SUB, _kplanar.OP_MUL)


def _reduce(p, memory, l2mem):
    """A row reduction streamed from DRAM into L2: :func:`fastane.kernels.planar.
    reduce_window` on the rows in place, the ``(1, 1, groups, 1)`` fp16 result kept in L2
    as the block path keeps it."""
    g, cfg = p.geometry, p.planar
    if p.src is None or p.dst is not None or (g.cin, g.hin) != (1, 1):
        return None
    rows = tile_dma.fp16_rows(p.src, memory)
    if rows is None or rows[2] != g.groups:
        return None
    value = np.empty((1, 1, g.groups, 1), np.float16)
    nans = _kplanar.reduce_window(
        *rows, cfg.op, cfg.in_scale, cfg.recip, cfg.out_scale, cfg.offset, value.reshape(-1).view(np.uint16)
    )
    l2mem.keep(p.l2.result[0], value, p.l2.result[1])
    return with_events(p.stats, 0, int(nans), 0, 0)


@functools.lru_cache(maxsize=ne.TABLES)
def _unary_table(op: int, in_scale: float, out_scale: float, offset: float) -> np.ndarray:
    """A unary planar operation on every fp16 pattern, by the kernel itself
    (:func:`fastane.kernels.planar.eltwise_serial` on the decoded patterns), as
    :func:`fastane.kernels.ne_table.lookup_window`'s table (a NaN output: its NaN bit)."""
    x = ne.pattern_values().reshape(-1, 1)
    out = np.empty(x.shape, np.uint16)
    _kplanar.eltwise_serial(x, np.empty((x.shape[0], 0)), op, in_scale, out_scale, offset, out)
    bits = out.reshape(-1).astype(np.uint64)
    table = bits | (((bits & 0x7FFF) > 0x7C00).astype(np.uint64) << np.uint64(_ktable.NAN_SHIFT))
    table.flags.writeable = False
    return table


_EMPTY = np.zeros(0, np.uint16)


def _held(value, shape, broadcast):
    """An fp16 tensor kept in L2 as an operand ``(flat uint16, plane, row, step)``, or None
    (kept as float64 by the block path, or not of the shape read)."""
    if value is None or value.dtype != np.float16 or not value.flags.c_contiguous:
        return None
    _, c, h, w = value.shape
    if (c, h) != shape[:2] or w not in ((shape[2], 1) if broadcast else (shape[2],)):
        return None
    return value.reshape(-1).view(np.uint16), h * w, w, 1 if w == shape[2] else 0


def _source(src, l2plan, memory, l2mem, shape, broadcast=False):
    """Source 0 as ``(flat uint16, plane, row, step)``: the TileDMASrc window, or L2."""
    if src is not None:
        if tuple(src.shape) != shape:
            return None
        got = tile_dma.fp16_source(src, memory)
        return None if got is None else (*got, 1)
    return _held(l2mem.resident[l2plan.source[0]][2], shape, broadcast)


def _second(op, memory, l2mem, shape):
    if isinstance(op, planar.L2Operand):
        return _held(l2mem.resident[op.addr][2], shape, op.shape[3] == 1 and shape[2] != 1)
    return _source(op, None, memory, l2mem, shape)


def _destination(p, memory, l2mem, shape, sources):
    """``(flat uint16 out, plane, row, wpad, keep)``: TileDMADst's window (``keep`` does
    nothing), or a new fp16 tensor that ``keep()`` leaves in L2; None when the window
    cannot be written in place or overlaps a source (the block path reads every source
    before it writes)."""
    if p.dst is None:
        value = np.empty((1, *shape), np.float16)
        out = value.reshape(-1).view(np.uint16)

        def keep():
            l2mem.keep(p.l2.result[0], value, p.l2.result[1])

        return out, shape[1] * shape[2], shape[2], shape[2], keep
    window = tile_dma.fp16_window(p.dst, memory)
    if window is None:
        return None
    lo, hi = p.dst.index, p.dst.index + p.dst.extent
    base = memory.__array_interface__["data"][0]
    for s in sources:
        arr = s[0]
        start = arr.__array_interface__["data"][0] - base
        if arr.size and 0 <= start < memory.size and start < hi and lo < start + arr.nbytes:
            return None
    return (*window, _nothing)


def _nothing():
    pass
