"""The planar engine (PE): elementwise and row-reduction work outside the MAC array (SPEC 4).

A task is a planar task when any of the four Planar words (TD offset 0x22c) is non-zero.
What fastane reads from them, and from a few TD bits the bit map leaves unnamed, was
established from the 40 planar TDs of the corpus (docs/device.md, "Planar engine", has
the evidence for each line):

* **Word 0, the operation.**  Elementwise: ``0x0`` scale/offset only; ``0x40`` abs;
  ``0x80000 | k << 2`` the binary ops add (k = 0), multiply (1), max (2), min (3);
  ``0xc0000`` subtract (``a - b``; bit 18 on an add).  Row reduction (a task whose
  ``Common.Cfg.TaskType`` is 5): ``0x0`` sum, ``0x2`` max, ``0x1000`` sum then
  reciprocal.
* **Word 1** = (output scale ``s`` in the high half, output offset ``c`` in the low half),
  fp16: ``out = s * y + c``.  **Word 2** = (scale ``s0`` of the RBase0 operand, 0);
  **Word 3** = an fp32 output scale, 1.0 in every corpus TD.
* The operands: ``a`` (source 0) comes through TileDMASrc from ``RBase0`` when
  ``L2.SourceCfg.SourceType`` = 2, else from L2 at ``L2.SourceBase`` (types 3 and 0);
  ``b`` (source 1, binary ops only) through TileDMASrc's second register set from
  ``RBase1`` when ``RBE1`` is set, else from L2 at ``L2.Source1Base``.  A source may be a
  per-row vector (W = 1) broadcast along the row (``Common.Broadcast.Src0/Src1``).

The arithmetic (each stage rounded once to fp16, RNE) is :mod:`fastane.kernels.planar`.
Counters: ``planar_ops`` = the elements the task processes (``NumGroups x C x H x W``);
TileDMA bytes for every streamed operand and the result.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

import numpy as np

from ..m1 import FP16, L2_BYTES, L2_UNIT
from ..td.planar import (
    ABS,
    BINARY,
    BINOP,
    BINOPS,
    OPCODES,
    RECIP,
    RED_MAX,
    SUBTRACT,
    TASK_REDUCE,
    UNNAMED,
    is_planar,
    operation,
    registers,
    set_unnamed,
    unnamed_fields,
    words,
)
from . import tile_dma
from .dims import task_dims
from .faults import DecodeFault, L2Fault, L2Overflow, UnsupportedTask
from .host_memory import task_host_bytes

#: below this many elements a task's kernel runs on one thread (as kernels.parallel.threads_for does for the MAC array)
SERIAL_ELEMENTS = 1 << 18


def ops(regs: dict) -> int:
    """Elements a planar task processes: ``NumGroups x Cout x Hout x Wout`` (for a row
    reduction, every input element once)."""
    return (
        max(regs["Common.GroupConvCfg.NumGroups"], 1)
        * regs["Common.Cout.Cout"]
        * regs["Common.OutDim.Hout"]
        * regs["Common.OutDim.Wout"]
    )


def _f16(bits: int) -> float:
    return float(np.uint16(bits).view(np.float16))


# ---------------------------------------------------------------------------- decode
@dataclass(frozen=True)
class PlanarConfig:
    """A planar task's decoded operation (see the module docstring)."""

    words: tuple
    name: str  # "scale", "abs", "add", "sub", "mul", "max", "min",
    #                        "sum", "max-reduce", "recip-sum"; "?" when unknown
    binary: bool  # two operands
    reduce: bool  # a row reduction
    in_scale: float  # s0: fp16 scale of the RBase0 operand (word 2, high half)
    out_scale: float  # s: fp16 output scale (word 1, high half)
    offset: float  # c: fp16 output offset (word 1, low half)
    broadcast: tuple  # (source 0, source 1) per-row vectors broadcast along W
    #: why the task cannot be computed (None: it can); counted all the same
    unsupported: str | None = None

    @functools.cached_property
    def op(self) -> int:
        """The kernel's operation code (:mod:`fastane.kernels.planar`)."""
        from fastane.kernels import planar as k

        return {
            "scale": k.OP_PASS,
            "abs": k.OP_ABS,
            "add": k.OP_ADD,
            "sub": k.OP_SUB,
            "mul": k.OP_MUL,
            "max": k.OP_MAX,
            "min": k.OP_MIN,
            "sum": k.RED_SUM,
            "recip-sum": k.RED_SUM,
            "max-reduce": k.RED_MAX,
        }[self.name]

    @property
    def recip(self) -> bool:
        return self.name == "recip-sum"


def _words_text(words) -> str:
    return ", ".join(f"{w:#x}" for w in words)


def _decode_op(w0: int, reduce: bool):
    """``(name, binary, problem)`` of Word 0; ``problem`` says why it is not emulated."""
    if reduce:
        known = RED_MAX | RECIP
        if w0 & ~known:
            return (
                "?",
                False,
                (
                    f"Word[0] bits {w0 & ~known:#x} in a row reduction (Common.Cfg."
                    f"TaskType 5) have no known meaning (reductions: 0x0 sum, 0x2 max, "
                    f"0x1000 sum then reciprocal)"
                ),
            )
        if w0 == RED_MAX | RECIP:
            return (
                "?",
                False,
                (
                    "Word[0] = 0x1002 (reciprocal of a max reduction) was never "
                    "observed; its meaning is not established"
                ),
            )
        return {0: "sum", RED_MAX: "max-reduce", RECIP: "recip-sum"}[w0], False, None
    known = BINARY | SUBTRACT | BINOP | ABS
    if w0 & ~known:
        extra = w0 & ~known
        hint = (
            " (0x2 and 0x1000 are reduction codes: they need Common.Cfg.TaskType 5)"
            if extra & (RED_MAX | RECIP)
            else ""
        )
        return (
            "?",
            bool(w0 & BINARY),
            (f"Word[0] bits {extra:#x} have no known meaning for an elementwise planar task{hint}"),
        )
    if w0 & BINARY:
        if w0 & ABS:
            return "?", True, "Word[0] combines abs (0x40) with a binary operation (0x80000): never observed"
        k = (w0 & BINOP) >> 2
        if w0 & SUBTRACT:
            if k:
                return (
                    "?",
                    True,
                    (f"Word[0] = {w0:#x}: the subtract bit (0x40000) with {BINOPS[k]} was never observed"),
                )
            return "sub", True, None
        return BINOPS[k], True, None
    if w0 & (SUBTRACT | BINOP):
        return (
            "?",
            False,
            (
                f"Word[0] = {w0:#x}: bits {w0 & (SUBTRACT | BINOP):#x} select a binary "
                f"operation, but the binary bit 0x80000 is clear"
            ),
        )
    return ("abs" if w0 & ABS else "scale"), False, None


def config(regs: dict, what: str, strict: bool = True) -> PlanarConfig:
    """Decode and check a planar task's words and operand registers.

    Malformed words (non-finite scales, a binary op without a second operand, a unary op
    given one) raise :class:`DecodeFault`.  What fastane does not emulate raises
    :class:`UnsupportedTask` when ``strict``; otherwise (stats-only runs) it is recorded in
    ``unsupported`` and the task is still counted.
    """
    words = operation(regs)
    w0, w1, w2, w3 = words
    ctx = dict(planar=words)
    where = f"{what}: planar words {_words_text(words)}"
    reduce = regs.get("Common.Cfg.TaskType", 0) == TASK_REDUCE
    name, binary, problem = _decode_op(w0, reduce)
    # the scales: fp16 halves of words 1 and 2, fp32 word 3
    halves = {
        "Word[1] high half (output scale)": w1 >> 16,
        "Word[1] low half (output offset)": w1 & 0xFFFF,
        "Word[2] high half (operand-0 scale)": w2 >> 16,
    }
    for label, bits in halves.items():
        if bits & 0x7C00 == 0x7C00:
            raise DecodeFault(f"{where}: {label} = {bits:#06x} is not a finite fp16 value", word=label, **ctx)
    f3 = float(np.uint32(w3).view(np.float32))
    if not np.isfinite(f3):
        raise DecodeFault(f"{where}: Word[3] = {w3:#010x} is not a finite fp32 scale", word=3, **ctx)
    if problem is None and w2 & 0xFFFF:
        problem = (
            f"Word[2] low half = {w2 & 0xFFFF:#06x}: it is 0 in every corpus TD and its "
            f"meaning (an operand-0 offset?) is unknown"
        )
    if problem is None and w3 != 0x3F800000:
        problem = (
            f"Word[3] = {w3:#010x} (fp32 {f3:g}): every corpus TD has 1.0 there and where "
            f"this output scale acts in the pipeline is unknown"
        )
    # the operands
    rbe1 = regs["Header.RBE1"]
    if name == "?":
        binary = binary or bool(rbe1)
    elif binary and not rbe1 and not regs.get("Common.ChCfg.Src1InFmt", 0):
        raise DecodeFault(
            f"{where}: {name} takes two operands, but RBE1 = 0 and the second "
            f"operand's format (ChCfg bits [3:2]) is 0: there is no second operand",
            **ctx,
        )
    elif not binary and rbe1:
        raise DecodeFault(
            f"{where}: {name} is unary, but RBE1 enables a second operand (BAR slot {regs['Header.RBase1']})",
            slot=regs["Header.RBase1"],
            **ctx,
        )
    fmts = {"ChCfg.InFmt": regs["Common.ChCfg.InFmt"], "ChCfg.OutFmt": regs["Common.ChCfg.OutFmt"]}
    if binary:
        fmts["ChCfg.Src1InFmt"] = (
            regs.get("Common.ChCfg.Src1InFmt", FP16) if not rbe1 else regs.get("TileDMASrc1.Fmt.MemFmt", FP16)
        )
    bad = {k: v for k, v in fmts.items() if v != FP16}
    if problem is None and bad:
        problem = (
            f"only fp16 planar operands are emulated ({', '.join(f'{k} = {v}' for k, v in bad.items())}; "
            f"2 = FP16)"
        )
    bcast = (bool(regs.get("Common.Broadcast.Src0", 0)), bool(regs.get("Common.Broadcast.Src1", 0)))
    if bcast[1] and not binary:
        raise DecodeFault(f"{where}: Common.Broadcast.Src1 is set on a unary operation", **ctx)
    cfg = PlanarConfig(
        words, name, binary, reduce, _f16(w2 >> 16), _f16(w1 >> 16), _f16(w1 & 0xFFFF), bcast, problem
    )
    if problem is not None and strict:
        raise UnsupportedTask(f"{where}: {problem}; run the program with stats_only=True to count it", **ctx)
    return cfg


# ---------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class PlanarGeometry:
    """A planar task's tensor geometry, in the shape the engine's blocks expect.

    For a row reduction ``(cin, hin, win)`` is one group's input row and ``groups`` the
    number of rows (``NumGroups``, one per group at TileDMASrc's ``GroupStride``); the
    result is one value per group, kept in L2 as a ``(1, 1, groups, 1)`` vector.
    """

    cin: int
    hin: int
    win: int
    cout: int
    hout: int
    wout: int
    in_fmt: int
    out_fmt: int
    groups: int = 1
    reduce: bool = False
    #: source 0 may be a (1, C, H, 1) vector broadcast along W (read by l2.plan)
    src_broadcast: bool = False
    kh: int = 1
    kw: int = 1
    sy: int = 1
    dy: int = 1
    kernel_fmt: int = FP16
    mode: str = "planar"
    macs: int = 0

    @property
    def reduce_groups(self) -> int:
        """Groups whose reduced values the task keeps in L2 (0: not a reduction)."""
        return self.groups if self.reduce else 0

    @property
    def elements(self) -> int:
        return self.groups * self.cout * self.hout * self.wout


def geometry(regs: dict, cfg: PlanarConfig, what: str, strict: bool = True) -> PlanarGeometry:
    """Decode and check the geometry of a planar task."""
    r = regs
    dims = task_dims(r, what, planar=cfg.words)
    shape_in = (dims["Cin"], dims["Hin"], dims["Win"])
    shape_out = (dims["Cout"], dims["Hout"], dims["Wout"])
    if shape_in != shape_out:
        raise DecodeFault(
            f"{what}: a planar task maps every element to one output element, but "
            f"Cin x Hin x Win = {'x'.join(map(str, shape_in))} differs from Cout x Hout x "
            f"Wout = {'x'.join(map(str, shape_out))}",
            planar=cfg.words,
        )
    g = dims["NumGroups"]
    problem = None
    if cfg.reduce and (dims["Cin"], dims["Hin"]) != (1, 1):
        problem = (
            f"a row reduction of Cin x Hin = {dims['Cin']}x{dims['Hin']} per group: every "
            f"corpus reduction has one row (1x1) per group, and where the values of several "
            f"rows would go in L2 is unknown"
        )
    elif cfg.reduce and r["L2.SourceCfg.SourceType"] == 3:
        problem = (
            "a row reduction reading its rows from L2 (SourceType 3): every corpus "
            "reduction streams its rows from DRAM, and how grouped rows sit in L2 is unknown"
        )
    elif not cfg.reduce and g != 1:
        problem = (
            f"an elementwise planar task with NumGroups = {g}: every corpus elementwise task "
            f"has one group, and how groups would be addressed is unknown"
        )
    if problem is not None:
        if strict:
            raise UnsupportedTask(f"{what}: {problem}", planar=cfg.words)
    fmt = {
        k: r[f"Common.ChCfg.{k}"] if r[f"Common.ChCfg.{k}"] in (0, 1, 2) else FP16
        for k in ("InFmt", "OutFmt")
    }
    return PlanarGeometry(
        *shape_in,
        *shape_out,
        fmt["InFmt"],
        fmt["OutFmt"],
        groups=g,
        reduce=cfg.reduce,
        src_broadcast=cfg.broadcast[0],
    )


def host_bytes(g: PlanarGeometry) -> int:
    """Host bytes a planar task makes the engine allocate at most (from the registers):
    per element its two float64 operands, the fp16 result and its float64 copy."""
    n = g.groups * g.cin * g.hin * g.win
    return task_host_bytes(f64=2 * n, results=n)


# ---------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class L2Operand:
    """An operand an earlier task left in L2 (source 1 read from ``L2.Source1Base``)."""

    addr: int
    shape: tuple  # the tensor as held, (1, C, H, W) or (1, C, H, 1) when broadcast
    nbytes: int = 0  # nothing moves through TileDMA


def plan_source(regs: dict, bars, g: PlanarGeometry, what: str):
    """TileDMASrc of source 0 (``RBase0``): for a row reduction, ``NumGroups`` rows at
    ``GroupStride`` (the group is the outermost dimension)."""
    return tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what, groups=g.groups if g.reduce else 1)


def plan_second(cfg: PlanarConfig, regs: dict, bars, g: PlanarGeometry, resident: dict, what: str):
    """Source 1 of a binary operation: a TileDMASrc plan (``RBase1``, the second register
    set) or an :class:`L2Operand` (checked against the results resident in L2)."""
    if not cfg.binary:
        return None
    shape = (1, g.cin, g.hin, g.win)
    if regs["Header.RBE1"]:
        if cfg.broadcast[1]:
            raise UnsupportedTask(
                f"{what}: a broadcast second operand streamed from DRAM (RBE1 with "
                f"Common.Broadcast.Src1) was never observed",
                planar=cfg.words,
            )
        rows = min(g.hin, regs["Common.TileCfg.TileHeight"] or g.hin)
        base = regs.get("L2.Source1Base.Addr", 0) * L2_UNIT
        nbytes = rows * regs.get("L2.Source1RowStride.Stride", 0) * L2_UNIT
        if base + nbytes > L2_BYTES:
            raise L2Overflow(
                f"{what}: the second operand's L2 working set [{base:#x}, {base + nbytes:#x})"
                f" does not fit the {L2_BYTES >> 20} MiB L2",
                addr=base,
                nbytes=nbytes,
            )
        return tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what, second=True)
    addr = regs.get("L2.Source1Base.Addr", 0) * L2_UNIT
    held = resident.get(addr)
    if held is None:
        raise L2Fault(
            f"{what}: the second operand is read from L2 at {addr:#x} (RBE1 = 0, "
            f"L2.Source1Base), where no earlier task left a result",
            addr=addr,
        )
    ok = {shape} | ({shape[:3] + (1,)} if cfg.broadcast[1] else set())
    if held[0] not in ok:
        raise L2Fault(
            f"{what}: the result in L2 at {addr:#x} is {held[0]}; the second operand is "
            f"{' or '.join(map(str, sorted(ok)))}",
            addr=addr,
        )
    return L2Operand(addr, held[0])


def read_operand(op, memory: np.ndarray, l2mem):
    """The values of a planned operand (None for a unary op)."""
    if op is None:
        return None
    if isinstance(op, L2Operand):
        return l2mem.read(op.addr)
    return tile_dma.read(op, memory)


# ---------------------------------------------------------------------------- running
def _rows(x: np.ndarray, width: int) -> np.ndarray:
    """``x`` as a C-contiguous float64 (rows, W) array (W = ``width`` or 1)."""
    x = np.asarray(x, dtype=np.float64)
    return np.ascontiguousarray(x.reshape(-1, x.shape[-1] if x.shape[-1] in (width, 1) else width))


def run(cfg: PlanarConfig, g: PlanarGeometry, a: np.ndarray, b: np.ndarray | None = None):
    """``(values, nan_outputs)``: the task's result as float16 (what TileDMADst writes
    and L2 keeps), ``[1, C, H, W]`` for elementwise tasks, ``[1, 1, groups, 1]`` for a row
    reduction."""
    from fastane.kernels import planar as k

    big = g.elements >= SERIAL_ELEMENTS
    if cfg.reduce:
        x = _rows(a, g.win)
        out = np.empty(x.shape[0], dtype=np.uint16)
        fn = k.reduce_parallel if big else k.reduce_serial
        nans = fn(x, cfg.op, cfg.in_scale, cfg.recip, cfg.out_scale, cfg.offset, out)
        shape = (1, 1, g.groups, 1)
    else:
        x = _rows(a, g.win)
        y = _rows(b, g.win) if b is not None else np.empty((x.shape[0], 0))
        out = np.empty((x.shape[0], g.wout), dtype=np.uint16)
        fn = k.eltwise_parallel if big else k.eltwise_serial
        nans = fn(x, y, cfg.op, cfg.in_scale, cfg.out_scale, cfg.offset, out)
        shape = (1, g.cout, g.hout, g.wout)
    return out.view(np.float16).reshape(shape), int(nans)


__all__ = [
    "OPCODES",
    "TASK_REDUCE",
    "UNNAMED",
    "L2Operand",
    "PlanarConfig",
    "PlanarGeometry",
    "config",
    "geometry",
    "is_planar",
    "operation",
    "ops",
    "plan_second",
    "plan_source",
    "read_operand",
    "registers",
    "run",
    "set_unnamed",
    "unnamed_fields",
    "words",
]
