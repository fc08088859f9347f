"""Elementwise binary ops on the ANE's planar engine: ``add``, ``sub``, ``mul``,
``maximum``, ``minimum`` (the lowering and its numpy-style entry points), and ``divide``
(the reciprocal table, then a planar multiply, as Apple's ``binary/div.bin``); the
one-operand planar programs ``absolute``, ``negative`` and ``square``; and the
compositions of tables and planar tasks (:data:`COMPOSED`, :func:`composed`): ``log`` (the
log2 table, then a multiply by fp16 ln 2, as ``unary/log.bin``) and ``softplus`` (exp,
+ 1, log: no corpus program).

Apple's compiler runs these as planar tasks (corpus ``binary/add.bin`` and friends): one
task per tile, source 0 through TileDMASrc, source 1 through its second register set,
the result through TileDMADst, ``Planar.Word[0]`` the operation (docs/device.md, "Planar
engine"); ``sub`` is, as in ``binary/sub.bin``, an add of ``-1 * b`` (source 0, scale
``Word[2]`` = -1) and ``a`` (negation is exact: the same value as ``a - b``).  Each result is ``round16(op(a, b))``: the exact result rounded once to fp16
(RNE; the planar engine's arithmetic, :mod:`fastane.kernels.planar`); a NaN result is
``0x7e00``.

The lowering: both operands (rounded to fp16, as every entry point does) sit flat and
dense in their slots (``SLOT_A``, ``SLOT_B``; the result in ``SLOT_OUT``), cut into
``(1, 1, rows, width)`` tiles exactly as the activations' elementwise programs are (rows
of a multiple of 32 elements, so every tile starts on a 64-byte burst, plus a remainder
row), sized so that the three tiles fit the 2 MiB L2 together (four with a ReLU after
the op: :func:`binary`'s ``activation``).  numpy broadcasting is
materialised on the host first (a copy: layout work, no value changes); the planar
engine's own per-row broadcast (``Common.Broadcast``) is not used yet.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errstate import report_events
from ..m1 import ALIGN, L2_UNIT, LIMITS, round_up
from ..operands import fp16_operand as _fp16_operand
from ..stats import Stats, last_stats, record
from ..td import BarSlot
from ..td.asm import eltwise_td
from .bind import Bound
from .cache import cached, reclaim
from .emit import task_chains
from .lowered import SLOT_TD
from .rows import LN2
from .runtime import concat_stats, default_device, stats_device
from .tiler import flat_tiles

__all__ = [
    "add",
    "sub",
    "mul",
    "maximum",
    "minimum",
    "divide",
    "absolute",
    "negative",
    "square",
    "binary",
    "unary",
    "composed",
    "COMPOSED",
    "lower",
    "lowered",
    "plan",
    "OPS",
    "UNARY",
]

#: fastane name -> the planar operation (fastane.td.asm.PLANAR_BINARY)
OPS = {"add": "add", "sub": "sub", "mul": "mul", "maximum": "max", "minimum": "min"}
#: one-operand planar programs: fastane name -> program name (see :func:`lower`)
UNARY = {"absolute": "abs", "negative": "neg", "square": "square"}
SLOT_OUT, SLOT_A, SLOT_B = 4, 5, 6
#: ops Apple computes as a chain of tables and planar tasks: name -> its stages, each
#: ``("table", activation)`` (an elementwise NE program, :func:`fastane.lower.run_eltwise`)
#: or ``(op, constant)`` (the planar program of ``op``, :data:`OPS`, with the constant as
#: its second operand).  ``log``: ``unary/log.bin``'s log2 table, then its scale by fp16
#: ln 2 (0x398c).  ``softplus``: no corpus program; ``log(1 + exp(x))`` from the same
#: primitives (exp's PostScale and exp2 table, a planar + 1, log), with no safeguard
#: against exp's overflow (docs/numerics.md, "Whole-op compositions").
COMPOSED = {
    "log": (("table", "log2"), ("mul", LN2)),
    "softplus": (("table", "exp"), ("add", 1.0), ("table", "log2"), ("mul", LN2)),
}


@dataclasses.dataclass(eq=False)
class LoweredBinary(Bound):
    """A planar program over ``n`` elements: its operands' slots (``slots``, the result's
    last) each hold ``nbytes``; the buffers it binds on a device are kept for the next
    call, as every lowered program's are (:class:`~fastane.lower.bind.Bound`)."""

    op: str
    n: int
    tiles: tuple  # (first element, rows, width)
    programs: tuple
    nbytes: int
    relu: bool = False  # each tile's result through an NE task's ReLU (a second task)

    @property
    def n_tasks(self) -> int:
        return len(self.tiles) * (2 if self.relu else 1)

    @property
    def program(self):
        return self.programs[0]

    @property
    def slots(self) -> tuple:
        """The operands' slots, then the result's."""
        return (SLOT_A, SLOT_OUT) if self.op in UNARY.values() else (SLOT_A, SLOT_B, SLOT_OUT)

    def buffer_sizes(self) -> dict:
        return {slot: self.nbytes for slot in self.slots}


def lower(n: int, op: str, relu: bool = False) -> LoweredBinary:
    """The program of ``op`` (a planar op of :data:`OPS` or :data:`UNARY`) over ``n`` fp16
    elements (cached with every lowered program: :func:`fastane.lower.cache.cached`);
    ``relu``: each tile's result then goes through an NE task with ReLU (see
    :func:`binary`)."""
    return cached(("planar", n, op, bool(relu)), lambda: _lower(n, op, bool(relu)))


def _lower(n: int, op: str, relu: bool = False) -> LoweredBinary:
    if n < 1:
        raise ValueError(f"cannot lower a binary op on {n} elements")
    if op not in OPS.values() and op not in UNARY.values():
        raise ValueError(f"unknown planar op {op!r}; one of {sorted(OPS.values()) + sorted(UNARY.values())}")
    unary = op in ("abs", "neg")
    if relu and op in UNARY.values():
        raise ValueError(f"a ReLU after {op!r} is not lowered (only after a binary op)")
    # the operands and the result in L2 at once: the activations' flat tiling (with a
    # ReLU, the planar result stays in L2 and the NE task's result is staged after it)
    _, _, _, tiles = flat_tiles(n, None, LIMITS, k=2 if unary else 4 if relu else 3)
    tds = []
    for j, (e0, h, w) in enumerate(tiles):
        base = dict(src_base=2 * e0, dst=SLOT_OUT, dst_base=2 * e0, eon=False)
        two = dict(base, src1_base=2 * e0)  # the second operand at the same element
        if op == "abs":  # unary/abs.bin: Word[0] = 0x40
            td = eltwise_td((1, h, w), op="abs", src=SLOT_A, **base)
        elif op == "neg":  # the scale op with operand scale -1 (softmin's TD0 negates so)
            td = eltwise_td((1, h, w), op="scale", in_scale=-1.0, src=SLOT_A, **base)
        elif op == "square":  # unary/square.bin: a multiply with RBase0 = RBase1 = the input
            td = eltwise_td((1, h, w), op="mul", src=SLOT_A, src1=SLOT_A, **two)
        elif op == "sub":  # as binary/sub.bin: add(-1 * b, a), b through source 0
            td = eltwise_td((1, h, w), op="add", in_scale=-1.0, src=SLOT_B, src1=SLOT_A, **two)
        else:
            td = eltwise_td((1, h, w), op=op, src=SLOT_A, src1=SLOT_B, **two)
        if relu:  # the result kept in L2 (after both sources), then an NE task's ReLU
            t = h * round_up(2 * w, L2_UNIT)  # one tile in L2
            td = eltwise_td((1, h, w), op=op, src=SLOT_A, src1=SLOT_B, keep=True, l2_dst=2 * t, **two)
            tds.append(td)
            td = eltwise_td((1, h, w), nonlinear="relu", src_in_l2=True, l2_src=2 * t, **base)
        tds.append(td)
    nbytes = max(round_up(2 * n), ALIGN)
    bars = {
        SLOT_TD: None,
        SLOT_OUT: BarSlot(SLOT_OUT, "output", nbytes, "y"),
        SLOT_A: BarSlot(SLOT_A, "input", nbytes, "a"),
    }
    if op not in UNARY.values():
        bars[SLOT_B] = BarSlot(SLOT_B, "input", nbytes, "b")
    programs = tuple(task_chains(tds, 2 if relu else 1, dict(sorted(bars.items())), f"{op}{n}", LIMITS))
    return LoweredBinary(op, n, tuple(tiles), programs, nbytes, relu)


def lowered(shape, name: str, relu: bool = False) -> LoweredBinary | None:
    """The program of ``name`` (a key of :data:`OPS` or :data:`UNARY`; ``relu``: then a
    ReLU) whose result has ``shape``; None when it is empty.  What :func:`binary` and
    :func:`unary` run and :func:`plan` counts."""
    n = int(np.prod(shape, dtype=np.int64))
    return lower(n, OPS.get(name) or UNARY[name], relu) if n else None


def plan(shape, name: str, relu: bool = False) -> Stats:
    """The Stats of :func:`lowered` ``(shape, name, relu)``, counted on the lowering's
    stats-only device."""
    low = lowered(shape, name, relu)
    if low is None:
        return Stats()
    return _execute(low, None, None, device=stats_device(), stats_only=True)[1]


def _execute(low: LoweredBinary, a16, b16, device=None, stats_only: bool = False):
    """Run ``low`` on buffers it keeps on the device (each call writes every operand
    element and reads every result element: nothing of an earlier call is read)."""
    dev = device if device is not None else default_device()
    b = low.acquire(dev, stats_only, reclaim)
    ok = False
    try:
        if not stats_only:
            for slot, x in zip(low.slots[:-1], (a16, b16)):
                b.raw[slot][: 2 * low.n].view(np.float16)[...] = x.reshape(-1)
        total = None
        for p in low.programs:
            st = dev.submit(p, b.regions, stats_only=stats_only).wait()
            total = st if total is None else concat_stats(total, st)
        y = None if stats_only else np.array(b.raw[SLOT_OUT][: 2 * low.n].view(np.float16))
        ok = True
        return y, total
    finally:
        low.release(b, keep=ok and not stats_only)


def binary(name: str, a, b, activation=None) -> np.ndarray:
    """``name`` (a key of :data:`OPS`) of ``a`` and ``b`` (numpy broadcasting) on the
    planar engine; ``np.float16``.

    ``activation="relu"``: each tile's result stays in L2 and an NE task (identity
    kernel mode, NonlinearMode 1) writes its ReLU, in the same program: ``relu(round16(op(a,
    b)))``, the bits of the two calls one after the other (the sum rounded to fp16 where it
    waits, as in DRAM), without the trip through DRAM.  The planar engine itself has no
    nonlinearity (no task of the corpus does); Apple's compiler emits an NE task for a
    ReLU after an add (docs/lower.md)."""
    if name not in OPS:
        raise ValueError(f"unknown binary op {name!r}; one of {sorted(OPS)}")
    if activation not in (None, "relu"):
        raise ValueError(f"{name}: activation must be None or 'relu', got {activation!r}")
    a16 = _fp16_operand(a, name, "a")
    b16 = _fp16_operand(b, name, "b")
    try:
        shape = np.broadcast_shapes(a16.shape, b16.shape)
    except ValueError:
        raise ValueError(
            f"{name}: operands could not be broadcast together with shapes {a16.shape} {b16.shape}"
        ) from None
    low = lowered(shape, name, activation == "relu")
    if low is None:
        record(Stats())
        return np.empty(shape, np.float16)
    a16 = np.broadcast_to(a16, shape)  # materialised below: layout, no rounding
    b16 = np.broadcast_to(b16, shape)
    y, stats = _execute(low, np.ascontiguousarray(a16), np.ascontiguousarray(b16))
    record(stats)
    report_events(stats, name)  # (a planar op counts no events today)
    y = y.reshape(shape)
    return y[()] if y.ndim == 0 else y


def unary(name: str, x) -> np.ndarray:
    """``name`` (a key of :data:`UNARY`) of ``x`` by a planar program; ``np.float16``."""
    if name not in UNARY:
        raise ValueError(f"unknown planar op {name!r}; one of {sorted(UNARY)}")
    x16 = _fp16_operand(x, name, "x")
    low = lowered(x16.shape, name)
    if low is None:
        record(Stats())
        return np.empty(x16.shape, np.float16)
    y, stats = _execute(low, np.ascontiguousarray(x16), None)
    record(stats)
    report_events(stats, name)
    y = y.reshape(x16.shape)
    return y[()] if y.ndim == 0 else y


def absolute(x):
    """``|x|`` on the planar engine (unary/abs.bin): exact."""
    return unary("absolute", x)


def negative(x):
    """``-x`` on the planar engine (a scale task, operand scale -1): exact."""
    return unary("negative", x)


def square(x):
    """``x * x`` on the planar engine (unary/square.bin): ``round16(x16 * x16)``."""
    return unary("square", x)


def add(a, b):
    """``a + b`` on the planar engine: ``round16(a16 + b16)``."""
    return binary("add", a, b)


def sub(a, b):
    """``a - b`` on the planar engine: ``round16(a16 - b16)``."""
    return binary("sub", a, b)


def mul(a, b):
    """``a * b`` on the planar engine: ``round16(a16 * b16)``."""
    return binary("mul", a, b)


def maximum(a, b):
    """``max(a, b)`` on the planar engine."""
    return binary("maximum", a, b)


def minimum(a, b):
    """``min(a, b)`` on the planar engine."""
    return binary("minimum", a, b)


def divide(a, b):
    """``a / b`` as Apple's ``binary/div.bin`` computes it: ``round16(a16 * r)`` with ``r =
    fastane.reciprocal(b16)`` (the mantissa-mode reciprocal table, an NE task), then a
    planar multiply: two roundings, the table's error (docs/lut.md: rel 8.4e-4) included.
    Runs as two programs, the reciprocal's (:func:`fastane.lower.run_eltwise`, the one
    behind :func:`fastane.reciprocal`) and the multiply (Apple chains the same two tasks
    in one); :func:`fastane.last_stats` gives both together."""
    from .calls import run_eltwise

    b16 = _fp16_operand(b, "divide", "b")
    if b16.size == 0:
        return binary("mul", a, b16)
    r, st, _ = run_eltwise(b16, "reciprocal")
    y = binary("mul", a, r)
    total = concat_stats(st, last_stats())
    record(total)
    report_events(total, "divide")
    return y


def composed(name: str, x) -> np.ndarray:
    """``name`` (a key of :data:`COMPOSED`) of ``x``: its stages one after the other, each
    a program of its own rounding once to fp16 (the intermediates go through DRAM, where
    Apple chains the tasks in one program: the same values); ``np.float16``.
    :func:`fastane.last_stats` gives the stages together, their LUT range events too (an
    overflowing exp is a ``lut_overflow``)."""
    from .calls import run_eltwise

    if name not in COMPOSED:
        raise ValueError(f"unknown composition {name!r}; one of {sorted(COMPOSED)}")
    y = _fp16_operand(x, name, "x")
    total = Stats()
    for stage, arg in COMPOSED[name]:
        if stage == "table":
            y, st = (run_eltwise(y, arg)[:2]) if y.size else (y, Stats())
        else:
            y = binary(stage, y, arg)
            st = last_stats()
        total = concat_stats(total, st)
    record(total)
    report_events(total, name)
    return y
