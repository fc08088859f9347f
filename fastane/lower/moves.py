"""Data movement as ANE tasks: concat, slice, split, constant pad and the transposes that keep
the last axis, lowered to NE pass-through tasks the way Apple's ``concat.hwx`` is built
(docs/lower.md, "Data movement as ANE tasks").

Every op here is a set of **boxes**: strided copies of an N-D block of elements from one
tensor (or from the fill constant) into another.  A tensor sits in its slot in the layout of
SPEC 5 generalised to N dimensions: its last axis is a row of ``round_up(2 W, 64)`` bytes and
every other axis counts whole rows (a ``(1, C, H, W)`` tensor: row, plane and image strides
exactly as the lowering's convolutions lay them out; ``(1, 16384, 1, 1)``: one 64-byte row a
channel, ``concat.hwx``'s).  A box becomes TDs as ``concat.hwx``'s two TDs are: one NE task
per ``(C, H, W)`` window, ``NE.MACCfg.KernelMode = 1``, ``OpMode = 4`` (the source passes the
MAC array unchanged), ``NonlinearMode = 0``, ``PostScale = 1.0`` (0x3c00), no bias and no
KernelDMA lane enabled; TileDMASrc reads the window at its ``BaseAddr`` with its
``RowStride``/``PlaneStride``, TileDMADst writes it at its own (``concat.hwx`` TD 1:
``TileDMADst.BaseAddr`` 0x100000 = 16384 channels x 64 bytes).  What the registers cannot
express raises ``NotImplementedError`` with the register that stops it:

* a window that begins inside a row (an offset on the last axis that is not a multiple of
  32 fp16 elements): ``BaseAddr`` counts 64-byte units;
* a step on the last axis, or a transpose that moves it: the element stride is fixed at the
  format's size (TileDMA has ``RowStride``, ``PlaneStride``, ``DepthStride`` and
  ``GroupStride``, all in 64-byte units, and no column stride);
* a negative step: the stride fields are unsigned.

A box's row axes are merged where both sides are contiguous, the last two become the task's
C (``PlaneStride``) and H (``RowStride``), any before them are one task per index, and each
task is cut so its source and its result fit the 2 MiB L2 together (``TileHeight`` = its
rows).  Pad writes its constant first: a task whose source is 64-byte rows of the value
(fp16) in slot 1 read with row and plane strides 0 (fastane's choice: the corpus has no pad
program), then the input over it, its TileDMADst with ``Fmt.ZeroPadLast`` = 0 so that the
rest of each row's last 64-byte burst keeps the fill.  A move of more tensors than a
program's BAR slots (outputs from slot 4, inputs after them: :data:`SLOTS`) runs as several
programs, each binding the tensors of a run of its boxes and writing its slab of the outputs
at their offsets, each input read once (fastane's choice: the corpus has no such program).

The NE's identity stage gives every fp16 value back unchanged -- infinities, signed zeros,
subnormals -- except a NaN, which reads out as the NE's quiet NaN 0x7e00 whatever its
payload (docs/device.md, NE; docs/numerics.md).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np

from ..m1 import ALIGN, L2_UNIT, LIMITS, NUM_BARS, Limits, round_up
from ..operands import fp16_operand
from ..stats import Stats, record
from ..td import BarSlot
from ..td.asm import eltwise_td, fp16_bits
from .bind import alloc_buffer
from .cache import CACHE_SIZE, reclaim
from .emit import task_chains
from .lowered import SLOT_KERNEL, SLOT_OUTPUT, SLOT_TD
from .runtime import concat_stats, default_device, stats_device

__all__ = [
    "Box",
    "Move",
    "FILL",
    "MAX_TASKS",
    "SLOTS",
    "row_strides",
    "is_identity",
    "storage_bytes",
    "concat",
    "slice_",
    "split",
    "pad",
    "transpose",
    "lower",
    "run",
    "plan",
]

#: a box's source index for the fill constant (slot 1, :data:`SLOT_FILL`)
FILL = -1
#: the program's constant region: 64-byte rows of the pad value (``concat.hwx``'s slot 1 is
#: its 0x4000 bytes of ``__TEXT,__const``, which no TD reads)
SLOT_FILL = SLOT_KERNEL
_F16 = np.dtype(np.float16)
#: fastane's bound on one move's tasks (its TDs are built one by one, about 0.1 ms each): a
#: move of more tasks (4 GiB of 1 MiB tiles, or millions of tiny windows) stays on the host
MAX_TASKS = 4096


def _rows(shape) -> tuple:
    """``shape`` as stored: at least one axis (a scalar is one element)."""
    return tuple(shape) or (1,)


def row_strides(shape) -> tuple:
    """Byte strides of the row axes of a tensor of ``shape`` in its slot (every axis but the
    last; the last axis is a row of ``round_up(2 W, 64)`` bytes)."""
    s = _rows(shape)
    row = round_up(2 * s[-1], ALIGN)
    return tuple(row * math.prod(s[k + 1 : -1]) for k in range(len(s) - 1))


def storage_bytes(shape) -> int:
    """Bytes of a tensor of ``shape`` in its slot (at least one 64-byte burst)."""
    s = _rows(shape)
    return max(math.prod(s[:-1]) * round_up(2 * s[-1], ALIGN), ALIGN)


@dataclasses.dataclass(frozen=True)
class Box:
    """A strided copy of ``shape`` (row axes, then the row length W) from input ``src``
    (:data:`FILL`: the fill constant) at byte ``src_base`` with byte strides ``src_strides``
    (one per row axis) to output ``dst`` at ``dst_base`` with ``dst_strides``."""

    src: int
    dst: int
    shape: tuple
    src_base: int
    src_strides: tuple
    dst_base: int
    dst_strides: tuple


@dataclasses.dataclass(frozen=True)
class Move:
    """A data-movement op: its name, input and output shapes, the fp16 bits of its fill
    value (None: no fill) and its boxes, in the order their tasks run."""

    name: str
    ins: tuple
    outs: tuple
    boxes: tuple
    fill: int | None = None

    def describe(self) -> str:
        ins = ", ".join("x".join(map(str, s)) for s in self.ins)
        outs = ", ".join("x".join(map(str, s)) for s in self.outs)
        return f"{self.name} {ins} -> {outs}"


def _last_offset(k: int, what: str) -> int:
    """The byte offset of element ``k`` of a row; NotImplementedError unless it is a whole
    number of 64-byte units (``BaseAddr``)."""
    if (2 * k) % ALIGN:
        raise NotImplementedError(
            f"{what} begins at element {k} of the last axis: TileDMA's BaseAddr counts 64-byte "
            f"units (32 fp16 elements) and a row has no column offset"
        )
    return 2 * k


def concat(shapes, axis: int) -> Move:
    """Concatenation of tensors of ``shapes`` along ``axis`` (non-negative)."""
    shapes = tuple(tuple(s) for s in shapes)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    out = tuple(out)
    o_rows = row_strides(out)
    last = axis == len(_rows(out)) - 1
    boxes, off = [], 0
    for i, s in enumerate(shapes):
        base = _last_offset(off, f"concat operand {i}") if last else off * o_rows[axis] if o_rows else 0
        if math.prod(s):
            boxes.append(Box(i, 0, _rows(s), 0, row_strides(s), base, o_rows))
        off += s[axis] if s else 1
    return Move("concat", shapes, (out,), tuple(boxes))


def slice_(shape, window) -> Move:
    """The slice of a tensor of ``shape`` by ``window``: one ``(start, stop, step)`` per axis
    (as ``slice.indices`` gives them)."""
    return split(shape, [window], "slice")


def split(shape, windows, name: str = "split") -> Move:
    """The slices of a tensor of ``shape`` by each of ``windows`` (see :func:`slice_`): one
    output each."""
    shape = tuple(shape)
    s_rows = row_strides(shape)
    outs, boxes = [], []
    for j, win in enumerate(windows):
        win = tuple(win) or ((0, 1, 1),)
        out = tuple(len(range(*w)) for w in win)
        outs.append(out[: len(shape)] if shape else ())
        (l0, _, lstep) = win[-1]
        if any(st < 0 for _, _, st in win):
            raise NotImplementedError(f"{name}: a negative step: TileDMA's stride fields are unsigned")
        if lstep != 1 and out[-1] > 1:
            raise NotImplementedError(
                f"{name}: step {lstep} on the last axis: TileDMA's element stride is fixed (its strides "
                f"count 64-byte rows and planes)"
            )
        if not math.prod(out):
            continue
        base = _last_offset(l0, name) + sum(w[0] * s for w, s in zip(win, s_rows))
        strides = tuple(w[2] * s for w, s in zip(win, s_rows))
        boxes.append(Box(0, j, out, base, strides, 0, row_strides(out)))
    return Move(name, (shape,), tuple(outs), tuple(boxes))


def pad(shape, widths, value: float = 0.0) -> Move:
    """``shape`` padded by ``widths`` ((before, after) per axis, non-negative) with the
    constant ``value`` (rounded to fp16)."""
    shape = tuple(shape)
    out = tuple(d + a + b for d, (a, b) in zip(shape, widths))
    o_rows = row_strides(out)
    boxes = []
    if math.prod(out):
        boxes.append(Box(FILL, 0, _rows(out), 0, (0,) * len(o_rows), 0, o_rows))
    if math.prod(shape):
        lead = widths[-1][0] if widths else 0
        base = _last_offset(lead, "pad's input") + sum(a * s for (a, _), s in zip(widths, o_rows))
        boxes.append(Box(0, 0, _rows(shape), 0, row_strides(shape), base, o_rows))
    with np.errstate(over="ignore"):
        bits = fp16_bits(float(np.float16(value)))
    return Move("pad", (shape,), (out,), tuple(boxes), bits)


def transpose(shape, perm) -> Move:
    """The transpose of a tensor of ``shape`` by ``perm``; the last axis must stay last."""
    shape, perm = tuple(shape), tuple(perm)
    if perm and perm[-1] != len(shape) - 1 and shape[perm[-1]] * shape[-1] > 1:
        raise NotImplementedError(
            f"transpose {perm} moves the last axis: TileDMA's element stride is fixed (its strides "
            f"count 64-byte rows and planes, with no column stride)"
        )
    out = tuple(shape[p] for p in perm)
    s_rows = row_strides(shape) + (0,)
    boxes = ()
    if math.prod(out):
        boxes = (Box(0, 0, _rows(out), 0, tuple(s_rows[p] for p in perm[:-1]), 0, row_strides(out)),)
    return Move("transpose", (shape,), (out,), boxes)


def is_identity(move: Move) -> bool:
    """Whether ``move`` gives back its one input, element for element, as its one output of
    the same shape (a pad of zero widths, a slice of the whole tensor or a split into one
    part, a transpose by the identity, a concat of one input): it moves no element, and a
    model compiler drops it (coremltools' ``noop_elimination`` removes a pad, slice, split or
    transpose whose output has its input's shape)."""
    if len(move.ins) != 1 or move.outs != move.ins:
        return False
    shape = move.outs[0]
    rows = row_strides(shape)
    # a fill box before it is overwritten: the input's box alone decides
    return Box(0, 0, _rows(shape), 0, rows, 0, rows) in move.boxes


# ------------------------------------------------------------------------ boxes -> tasks
def _axes(box: Box) -> list:
    """The box's row axes ``(n, src stride, dst stride)``, axes of one element dropped and
    neighbours that are contiguous on both sides merged."""
    axes = [(n, s, d) for n, s, d in zip(box.shape[:-1], box.src_strides, box.dst_strides) if n != 1]
    merged: list = []
    for n, s, d in reversed(axes):
        if merged:
            n2, s2, d2 = merged[-1]
            if s == s2 * n2 and d == d2 * n2:
                merged[-1] = (n * n2, s2, d2)
                continue
        merged.append((n, s, d))
    return merged[::-1]


def _tasks(box: Box, lim: Limits):
    """``(C, H, W, src base, src (row, plane), dst base, dst (row, plane))`` per task."""
    w_all = box.shape[-1]
    axes = _axes(box)
    lead, tail = axes[:-2], axes[-2:]
    while len(tail) < 2:  # one row axis is the channels (concat.hwx: C = 16384, H = 1)
        tail.append((1, 0, 0))
    (c_all, s_pl, d_pl), (h_all, s_row, d_row) = tail
    w_step = lim.max_hw // lim.col_align * lim.col_align  # rows cut on 64-byte bursts
    # source and result of one task in L2 together, 16-byte channel rows
    budget = lim.l2_bytes // 2
    for idx in itertools.product(*(range(n) for n, _, _ in lead)):
        sb = box.src_base + sum(i * s for i, (_, s, _) in zip(idx, lead))
        db = box.dst_base + sum(i * d for i, (_, _, d) in zip(idx, lead))
        for w0 in range(0, w_all, w_step):
            w = min(w_step, w_all - w0)
            ch = round_up(2 * w, L2_UNIT)
            c_t = min(c_all, lim.max_channels, max(budget // ch, 1))
            h_t = min(h_all, lim.max_hw, max(budget // (c_t * ch), 1))
            for c0 in range(0, c_all, c_t):
                c = min(c_t, c_all - c0)
                for h0 in range(0, h_all, h_t):
                    h = min(h_t, h_all - h0)
                    yield (
                        c,
                        h,
                        w,
                        sb + c0 * s_pl + h0 * s_row + 2 * w0 if box.src != FILL else sb,
                        (s_row, s_pl),
                        db + c0 * d_pl + h0 * d_row + 2 * w0,
                        (d_row, d_pl),
                    )


def _stride(v: int, w: int) -> int:
    """A stride for eltwise_td's layout check (a positive multiple of 64), later set to the
    box's own ``v`` (0 for an axis of one element, or the fill)."""
    return v if v > 0 else round_up(2 * w, ALIGN)


def _task_td(move: Move, box: Box, task, slot_in, slot_out) -> object:
    c, h, w, sb, (sr, sp), db, (dr, dp) = task
    src = SLOT_FILL if box.src == FILL else slot_in[box.src]
    td = eltwise_td(
        (c, h, w),
        nonlinear="identity",
        src=src,
        src_base=sb,
        src_strides=(_stride(sr, w), _stride(sp, w)),
        dst=slot_out[box.dst],
        dst_base=db,
        dst_strides=(_stride(dr, w), _stride(dp, w)),
        eon=False,
    )
    src_bytes = 2 * ALIGN if box.src == FILL else storage_bytes(move.ins[box.src])
    # the strides as the box has them (an axis of one element: 64 bytes, as concat.hwx's),
    # the depth strides one whole tensor each (concat.hwx: 16384 x 64 in, 16400 x 64 out)
    td.update(
        {
            "TileDMASrc.RowStride.Stride": (sr if (sr or box.src == FILL) else ALIGN) >> 6,
            "TileDMASrc.PlaneStride.PlaneStride": (sp if (sp or box.src == FILL) else ALIGN) >> 6,
            "TileDMASrc.DepthStride.Stride": src_bytes >> 6,
            "TileDMASrc.GroupStride.Stride": 0,
            "TileDMADst.RowStride.RowStride": (dr or ALIGN) >> 6,
            "TileDMADst.PlaneStride.PlaneStride": (dp or ALIGN) >> 6,
            "TileDMADst.DepthStride.DepthStride": storage_bytes(move.outs[box.dst]) >> 6,
            "TileDMADst.GroupStride.GroupStride": 0,
            # over a fill: the rest of each row's last burst keeps the fill (docs/device.md,
            # TileDMA: the destination zero-fills it only with ZeroPadLast)
            "TileDMADst.Fmt.ZeroPadLast": int(move.fill is None or box.src == FILL),
            # all 16 NE cores, as concat.hwx's two TDs (ActiveNE 4, ENE = ActiveNE + 1)
            "Common.Cfg.ActiveNE": 4,
            "Header.ENE": 5,
        }
    )
    return td


#: BAR slots one program of a move binds its tensors to: outputs from slot 4, inputs after
#: them (the corpus's convention, SPEC 6), up to the last of the task's :data:`NUM_BARS`
SLOTS = NUM_BARS - SLOT_OUTPUT
#: the key of the fill constant's tensor in :attr:`LoweredMove.binds` (an output is
#: ``("y", k)``, an input ``("x", k)``)
_FILL_KEY = ("fill", 0)


@dataclasses.dataclass(frozen=True)
class LoweredMove:
    """The programs of a :class:`Move` and, per program, its BAR slots: ``binds[i]`` is
    ``((slot, tensor), ...)`` for ``programs[i]``, ``tensor`` ``("y", k)`` for output ``k``
    (slots from 4), ``("x", k)`` for input ``k`` (after the outputs), ``("fill", 0)`` for the
    fill constant (slot 1)."""

    move: Move
    programs: tuple
    binds: tuple
    n_tasks: int


def _groups(move: Move) -> list:
    """The move's boxes in runs, in order, each with the outputs and inputs it binds: one
    run binding every tensor when they fit :data:`SLOTS`; else runs as long as their boxes'
    tensors fit (docs/lower.md section 13, "More tensors than BAR slots")."""
    if len(move.outs) + len(move.ins) <= SLOTS:
        return [(list(move.boxes), range(len(move.outs)), range(len(move.ins)))]
    runs: list = []
    for b in move.boxes:
        src = set() if b.src == FILL else {b.src}
        if runs:
            boxes, outs, ins = runs[-1]
            if len(outs | {b.dst}) + len(ins | src) <= SLOTS:
                boxes.append(b)
                outs.add(b.dst)
                ins.update(src)
                continue
        runs.append(([b], {b.dst}, src))
    return [(boxes, sorted(outs), sorted(ins)) for boxes, outs, ins in runs]


@functools.lru_cache(maxsize=CACHE_SIZE)
def lower(move: Move, limits: Limits = LIMITS) -> LoweredMove:
    """The program(s) of ``move`` (cached): one run of programs binding every tensor, or,
    when its tensors need more BAR slots than a task has, one per run of boxes whose tensors
    fit (each input read once, each output written once, at its offsets)."""
    runs = []
    for boxes, outs, ins in _groups(move):
        tasks = [(b, t) for b in boxes for t in itertools.islice(_tasks(b, limits), MAX_TASKS + 1)]
        runs.append((boxes, outs, ins, tasks))
    n_tasks = sum(len(r[3]) for r in runs)
    if n_tasks > MAX_TASKS:
        raise NotImplementedError(
            f"{move.describe()}: more than {MAX_TASKS} tasks (fastane's bound on one move, moves.MAX_TASKS)"
        )
    programs, binds = [], []
    for boxes, outs, ins, tasks in runs:
        slot_out = dict(zip(outs, range(SLOT_OUTPUT, SLOT_OUTPUT + len(outs))))
        slot_in = dict(zip(ins, range(SLOT_OUTPUT + len(outs), SLOT_OUTPUT + len(outs) + len(ins))))
        tds = [_task_td(move, b, t, slot_in, slot_out) for b, t in tasks]
        if not tds:
            continue
        bars = {SLOT_TD: None}
        bind = []
        if move.fill is not None and any(b.src == FILL for b in boxes):
            bars[SLOT_FILL] = BarSlot(SLOT_FILL, "kernel", _fill_bytes(move), "fill")
            bind.append((SLOT_FILL, _FILL_KEY))
        for k, slot in slot_out.items():
            bars[slot] = BarSlot(slot, "output", storage_bytes(move.outs[k]), f"y{k}")
            bind.append((slot, ("y", k)))
        for k, slot in slot_in.items():
            bars[slot] = BarSlot(slot, "input", storage_bytes(move.ins[k]), f"x{k}")
            bind.append((slot, ("x", k)))
        tds[-1]["Header.EON"] = 1
        chains = task_chains(tds, 1, dict(sorted(bars.items())), move.name, limits)
        programs += chains
        binds += [tuple(sorted(bind))] * len(chains)
    return LoweredMove(move, tuple(programs), tuple(binds), n_tasks)


def _fill_bytes(move: Move) -> int:
    return max(round_up(2 * _rows(s)[-1], ALIGN) for s in move.outs)


def _view(raw: np.ndarray, shape) -> np.ndarray:
    """The fp16 elements of a tensor of ``shape`` in its slot's bytes ``raw``."""
    s = _rows(shape)
    rows, row = math.prod(s[:-1]), round_up(2 * s[-1], ALIGN)
    return raw[: rows * row].reshape(rows, row)[:, : 2 * s[-1]].view(_F16).reshape(shape)


def _execute(low: LoweredMove, xs=None, device=None, stats_only: bool = False):
    """Run ``low`` on ``xs`` (fp16 arrays of the move's input shapes): ``(outputs, Stats)``
    (outputs None in stats-only mode)."""
    dev = device if device is not None else default_device()
    move = low.move
    sizes = {("y", k): storage_bytes(t) for k, t in enumerate(move.outs)}
    sizes.update({("x", k): storage_bytes(t) for k, t in enumerate(move.ins)})
    if move.fill is not None:
        sizes[_FILL_KEY] = _fill_bytes(move)
    regions = {}
    try:
        for key, n in sizes.items():
            regions[key] = alloc_buffer(dev, n, f"{move.name}:{key[0]}{key[1]}", False, reclaim)
        raw = {key: dev.memory.view(r.iova, r.size) for key, r in regions.items()}
        if not stats_only:
            for k, (shape, x) in enumerate(zip(move.ins, xs)):
                _view(raw["x", k], shape)[...] = x
            if move.fill is not None:
                raw[_FILL_KEY].view(np.uint16)[...] = move.fill
        total = Stats()
        for prog, bind in zip(low.programs, low.binds):
            bars = {slot: regions[key] for slot, key in bind}
            total = concat_stats(total, dev.submit(prog, bars, stats_only=stats_only).wait())
        if stats_only:
            return None, total
        return [np.array(_view(raw["y", k], shape)) for k, shape in enumerate(move.outs)], total
    finally:
        for r in regions.values():
            dev.free(r)
        for prog in low.programs:
            dev.unload(prog)


def run(move: Move, xs, device=None, limits: Limits | None = None) -> list:
    """``move`` on the arrays ``xs`` (rounded once to fp16, as every entry point does) on the
    device (``limits``: what one task may hold, the machine's by default): the outputs (fp16);
    the Stats are :func:`fastane.last_stats`."""
    if len(xs) != len(move.ins):
        raise ValueError(f"{move.describe()}: {len(move.ins)} inputs, got {len(xs)}")
    x16 = []
    for k, (x, shape) in enumerate(zip(xs, move.ins)):
        x = fp16_operand(x, move.name, f"x{k}")
        if x.shape != tuple(shape):
            raise ValueError(f"{move.describe()}: input {k} has shape {x.shape}")
        x16.append(x)
    outs, st = _execute(lower(move, limits or LIMITS), x16, device)
    record(st)
    return outs


def plan(move: Move) -> Stats:
    """The Stats of ``move``, counted on the lowering's stats-only device."""
    return _execute(lower(move), device=stats_device(), stats_only=True)[1]
