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

from dataclasses import dataclass

import numpy as np

from .faults import DecodeFault, L2Fault, L2Overflow, UnsupportedTask

WORDS = tuple(f"Planar.Word[{i}]" for i in range(4))
FP16 = 2
#: below this many elements a task's kernel runs on one thread (as kernels.mac._threads_for does for the MAC array)
SERIAL_ELEMENTS = 1 << 18
L2_BYTES = 2 << 20
L2_UNIT = 16

#: fastane's readings of TD bits the recovered bit map leaves unnamed, as
#: ``name -> (byte offset, bit, width)`` like the bit map's own entries.  They are
#: decisions from the corpus (docs/device.md, "Planar engine"); the engine adds them to
#: every decoded register file (:func:`registers`).
UNNAMED = {
    # ChCfg bits [3:2]: the second operand's format (2 on every binary planar TD, 0 else)
    "Common.ChCfg.Src1InFmt": (0x130, 2, 2),
    # 0x158 bit 0 / bit 4: source 0 / source 1 is a per-row vector broadcast along W
    "Common.Broadcast.Src0": (0x158, 0, 1),
    "Common.Broadcast.Src1": (0x158, 4, 1),
    # Common.Cfg bits [7:4] (0x15c): 0 NE task, 2 planar unary, 3 planar binary, 5 reduction
    "Common.Cfg.TaskType": (0x15C, 4, 4),
    # TileDMASrc's second register set (source 1): the first set's layout, 0x14 bytes on
    "TileDMASrc1.BaseAddr.Addr": (0x188, 6, 26),
    "TileDMASrc1.RowStride.Stride": (0x18C, 6, 26),
    "TileDMASrc1.PlaneStride.PlaneStride": (0x190, 6, 26),
    "TileDMASrc1.DepthStride.Stride": (0x194, 6, 26),
    "TileDMASrc1.GroupStride.Stride": (0x198, 6, 26),
    "TileDMASrc1.Fmt.MemFmt": (0x1A9, 4, 2),
    # L2's source-1 window (16-byte units like SourceBase/strides) and the result's
    # group stride (where a reduction puts group g's value)
    "L2.Source1Base.Addr": (0x1FC, 4, 17),
    "L2.Source1ChannelStride.Stride": (0x200, 4, 17),
    "L2.Source1RowStride.Stride": (0x204, 4, 17),
    "L2.ResultGroupStride.Stride": (0x224, 4, 17),
}
_UNNAMED_WSM = tuple((name, off // 4, (off % 4) * 8 + bit, (1 << width) - 1)
                     for name, (off, bit, width) in UNNAMED.items())

# Word 0 bits
_BINARY = 1 << 19
_SUBTRACT = 1 << 18
_BINOP = 0b11 << 2
_ABS = 1 << 6
_RED_MAX = 1 << 1
_RECIP = 1 << 12
_BINOPS = ("add", "mul", "max", "min")
TASK_REDUCE = 5


def unnamed_fields(words) -> dict:
    """``{name: value}`` of the :data:`UNNAMED` registers, from a TD's 157 words."""
    return {name: (words[i] >> s) & m for name, i, s, m in _UNNAMED_WSM}


def registers(td) -> dict:
    """The register file of a :class:`~fastane.td.TaskDescriptor` as the engine sees it:
    every named field plus the :data:`UNNAMED` registers."""
    regs = td.fields()
    regs.update(unnamed_fields(td.words))
    return regs


def set_unnamed(td, values: dict | None = None, **kw):
    """Write :data:`UNNAMED` registers of ``td`` in place (keyword form: dots -> ``_``,
    e.g. ``TileDMASrc1_RowStride_Stride=50``); returns ``td``."""
    alias = {n.replace(".", "_"): n for n in UNNAMED}
    for name, v in {**(values or {}), **{alias.get(k, k): v for k, v in kw.items()}}.items():
        if name not in UNNAMED:
            raise KeyError(f"{name!r} is not one of fastane's unnamed registers ({', '.join(UNNAMED)})")
        off, bit, width = UNNAMED[name]
        if not 0 <= int(v) < 1 << width:
            raise ValueError(f"{name} is {width} bits wide; {v} does not fit")
        i, s, m = off // 4, (off % 4) * 8 + bit, (1 << width) - 1
        td.words[i] = (td.words[i] & ~(m << s) & 0xFFFFFFFF) | int(v) << s
    return td


def is_planar(regs: dict) -> bool:
    return any(regs.get(w, 0) for w in WORDS)


def operation(regs: dict) -> tuple:
    return tuple(regs.get(w, 0) for w in WORDS)


def ops(regs: dict) -> int:
    """Elements a planar task processes: ``NumGroups x Cout x Hout x Wout`` (for a row
    reduction, every input element once)."""
    return (max(regs["Common.GroupConvCfg.NumGroups"], 1) * regs["Common.Cout.Cout"]
            * regs["Common.OutDim.Hout"] * regs["Common.OutDim.Wout"])


def _f16(bits: int) -> float:
    return float(np.uint16(bits).view(np.float16))


def _f16_bits(x: float) -> int:
    return int(np.array(x, np.float16).view(np.uint16))


#: Word 0 of each operation; the reductions need ``Common.Cfg.TaskType`` = 5 as well
OPCODES = {"scale": 0x0, "abs": _ABS, "add": _BINARY, "mul": _BINARY | 1 << 2,
           "max": _BINARY | 2 << 2, "min": _BINARY | 3 << 2, "sub": _BINARY | _SUBTRACT,
           "sum": 0x0, "max-reduce": _RED_MAX, "recip-sum": _RECIP}


def words(name: str, out_scale: float = 1.0, offset: float = 0.0, in_scale: float = 1.0) -> tuple:
    """The four Planar words of operation ``name`` (:data:`OPCODES`): ``out = out_scale *
    op(in_scale * a, b) + offset``, every value rounded to fp16 (word 3 = fp32 1.0)."""
    if name not in OPCODES:
        raise ValueError(f"unknown planar operation {name!r} (one of {', '.join(OPCODES)})")
    return (OPCODES[name], _f16_bits(out_scale) << 16 | _f16_bits(offset), _f16_bits(in_scale) << 16,
            0x3F800000)


# ---------------------------------------------------------------------------- decode
@dataclass(frozen=True)
class PlanarConfig:
    """A planar task's decoded operation (see the module docstring)."""

    words: tuple
    name: str              # "scale", "abs", "add", "sub", "mul", "max", "min",
    #                        "sum", "max-reduce", "recip-sum"; "?" when unknown
    binary: bool           # two operands
    reduce: bool           # a row reduction
    in_scale: float        # s0: fp16 scale of the RBase0 operand (word 2, high half)
    out_scale: float       # s: fp16 output scale (word 1, high half)
    offset: float          # c: fp16 output offset (word 1, low half)
    broadcast: tuple       # (source 0, source 1) per-row vectors broadcast along W
    #: why the task cannot be computed (None: it can); counted all the same
    unsupported: str | None = None

    @property
    def op(self) -> int:
        """The kernel's operation code (:mod:`fastane.kernels.planar`)."""
        from fastane.kernels import planar as k
        return {"scale": k.OP_PASS, "abs": k.OP_ABS, "add": k.OP_ADD, "sub": k.OP_SUB,
                "mul": k.OP_MUL, "max": k.OP_MAX, "min": k.OP_MIN, "sum": k.RED_SUM,
                "recip-sum": k.RED_SUM, "max-reduce": k.RED_MAX}[self.name]

    @property
    def recip(self) -> bool:
        return self.name == "recip-sum"


def _words_text(words) -> str:
    return ", ".join(f"{w:#x}" for w in words)


def _decode_op(w0: int, reduce: bool):
    """``(name, binary, problem)`` of Word 0; ``problem`` says why it is not emulated."""
    if reduce:
        known = _RED_MAX | _RECIP
        if w0 & ~known:
            return "?", False, (f"Word[0] bits {w0 & ~known:#x} in a row reduction (Common.Cfg."
                                f"TaskType 5) have no known meaning (reductions: 0x0 sum, 0x2 max, "
                                f"0x1000 sum then reciprocal)")
        if w0 == _RED_MAX | _RECIP:
            return "?", False, ("Word[0] = 0x1002 (reciprocal of a max reduction) was never "
                                "observed; its meaning is not established")
        return {0: "sum", _RED_MAX: "max-reduce", _RECIP: "recip-sum"}[w0], False, None
    known = _BINARY | _SUBTRACT | _BINOP | _ABS
    if w0 & ~known:
        extra = w0 & ~known
        hint = (" (0x2 and 0x1000 are reduction codes: they need Common.Cfg.TaskType 5)"
                if extra & (_RED_MAX | _RECIP) else "")
        return "?", bool(w0 & _BINARY), (f"Word[0] bits {extra:#x} have no known meaning for an "
                                         f"elementwise planar task{hint}")
    if w0 & _BINARY:
        if w0 & _ABS:
            return "?", True, "Word[0] combines abs (0x40) with a binary operation (0x80000): never observed"
        k = (w0 & _BINOP) >> 2
        if w0 & _SUBTRACT:
            if k:
                return "?", True, (f"Word[0] = {w0:#x}: the subtract bit (0x40000) with "
                                   f"{_BINOPS[k]} was never observed")
            return "sub", True, None
        return _BINOPS[k], True, None
    if w0 & (_SUBTRACT | _BINOP):
        return "?", False, (f"Word[0] = {w0:#x}: bits {w0 & (_SUBTRACT | _BINOP):#x} select a binary "
                            f"operation, but the binary bit 0x80000 is clear")
    return ("abs" if w0 & _ABS else "scale"), False, None


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
    halves = {"Word[1] high half (output scale)": w1 >> 16, "Word[1] low half (output offset)": w1 & 0xFFFF,
              "Word[2] high half (operand-0 scale)": w2 >> 16}
    for label, bits in halves.items():
        if bits & 0x7C00 == 0x7C00:
            raise DecodeFault(f"{where}: {label} = {bits:#06x} is not a finite fp16 value", word=label, **ctx)
    f3 = float(np.uint32(w3).view(np.float32))
    if not np.isfinite(f3):
        raise DecodeFault(f"{where}: Word[3] = {w3:#010x} is not a finite fp32 scale", word=3, **ctx)
    if problem is None and w2 & 0xFFFF:
        problem = (f"Word[2] low half = {w2 & 0xFFFF:#06x}: it is 0 in every corpus TD and its "
                   f"meaning (an operand-0 offset?) is unknown")
    if problem is None and w3 != 0x3F800000:
        problem = (f"Word[3] = {w3:#010x} (fp32 {f3:g}): every corpus TD has 1.0 there and where "
                   f"this output scale acts in the pipeline is unknown")
    # the operands
    rbe1 = regs["Header.RBE1"]
    if name == "?":
        binary = binary or bool(rbe1)
    elif binary and not rbe1 and not regs.get("Common.ChCfg.Src1InFmt", 0):
        raise DecodeFault(f"{where}: {name} takes two operands, but RBE1 = 0 and the second "
                          f"operand's format (ChCfg bits [3:2]) is 0: there is no second operand",
                          **ctx)
    elif not binary and rbe1:
        raise DecodeFault(f"{where}: {name} is unary, but RBE1 enables a second operand (BAR slot "
                          f"{regs['Header.RBase1']})", slot=regs["Header.RBase1"], **ctx)
    fmts = {"ChCfg.InFmt": regs["Common.ChCfg.InFmt"], "ChCfg.OutFmt": regs["Common.ChCfg.OutFmt"]}
    if binary:
        fmts["ChCfg.Src1InFmt"] = regs.get("Common.ChCfg.Src1InFmt", FP16) if not rbe1 else \
            regs.get("TileDMASrc1.Fmt.MemFmt", FP16)
    bad = {k: v for k, v in fmts.items() if v != FP16}
    if problem is None and bad:
        problem = (f"only fp16 planar operands are emulated ({', '.join(f'{k} = {v}' for k, v in bad.items())}; "
                   f"2 = FP16)")
    bcast = (bool(regs.get("Common.Broadcast.Src0", 0)), bool(regs.get("Common.Broadcast.Src1", 0)))
    if bcast[1] and not binary:
        raise DecodeFault(f"{where}: Common.Broadcast.Src1 is set on a unary operation", **ctx)
    cfg = PlanarConfig(words, name, binary, reduce, _f16(w2 >> 16), _f16(w1 >> 16), _f16(w1 & 0xFFFF),
                       bcast, problem)
    if problem is not None and strict:
        raise UnsupportedTask(f"{where}: {problem}; run the program with stats_only=True to count "
                              f"it", **ctx)
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
    dims = dict(Cin=r["Common.Cin.Cin"], Hin=r["Common.InDim.Hin"], Win=r["Common.InDim.Win"],
                Cout=r["Common.Cout.Cout"], Hout=r["Common.OutDim.Hout"], Wout=r["Common.OutDim.Wout"],
                NumGroups=r["Common.GroupConvCfg.NumGroups"])
    zero = [k for k, v in dims.items() if v < 1]
    if zero:
        raise DecodeFault(f"{what}: {', '.join(zero)} must be at least 1 ({dims})", planar=cfg.words)
    shape_in = (dims["Cin"], dims["Hin"], dims["Win"])
    shape_out = (dims["Cout"], dims["Hout"], dims["Wout"])
    if shape_in != shape_out:
        raise DecodeFault(f"{what}: a planar task maps every element to one output element, but "
                          f"Cin x Hin x Win = {'x'.join(map(str, shape_in))} differs from Cout x Hout x "
                          f"Wout = {'x'.join(map(str, shape_out))}", planar=cfg.words)
    g = dims["NumGroups"]
    problem = None
    if cfg.reduce and (dims["Cin"], dims["Hin"]) != (1, 1):
        problem = (f"a row reduction of Cin x Hin = {dims['Cin']}x{dims['Hin']} per group: every "
                   f"corpus reduction has one row (1x1) per group, and where the values of several "
                   f"rows would go in L2 is unknown")
    elif cfg.reduce and r["L2.SourceCfg.SourceType"] == 3:
        problem = ("a row reduction reading its rows from L2 (SourceType 3): every corpus "
                   "reduction streams its rows from DRAM, and how grouped rows sit in L2 is unknown")
    elif not cfg.reduce and g != 1:
        problem = (f"an elementwise planar task with NumGroups = {g}: every corpus elementwise task "
                   f"has one group, and how groups would be addressed is unknown")
    if problem is not None:
        if strict:
            raise UnsupportedTask(f"{what}: {problem}", planar=cfg.words)
    fmt = {k: r[f"Common.ChCfg.{k}"] if r[f"Common.ChCfg.{k}"] in (0, 1, 2) else FP16
           for k in ("InFmt", "OutFmt")}
    return PlanarGeometry(*shape_in, *shape_out, fmt["InFmt"], fmt["OutFmt"], groups=g,
                          reduce=cfg.reduce, src_broadcast=cfg.broadcast[0])


# ---------------------------------------------------------------------------- operands
@dataclass(frozen=True)
class L2Operand:
    """An operand an earlier task left in L2 (source 1 read from ``L2.Source1Base``)."""

    addr: int
    shape: tuple        # the tensor as held, (1, C, H, W) or (1, C, H, 1) when broadcast
    nbytes: int = 0     # nothing moves through TileDMA


def plan_source(regs: dict, bars, g: PlanarGeometry, what: str):
    """TileDMASrc of source 0 (``RBase0``): for a row reduction, ``NumGroups`` rows at
    ``GroupStride`` (the group is the outermost dimension)."""
    from . import tile_dma
    return tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what, groups=g.groups if g.reduce else 1)


def plan_second(cfg: PlanarConfig, regs: dict, bars, g: PlanarGeometry, resident: dict, what: str):
    """Source 1 of a binary operation: a TileDMASrc plan (``RBase1``, the second register
    set) or an :class:`L2Operand` (checked against the results resident in L2)."""
    from . import tile_dma
    if not cfg.binary:
        return None
    shape = (1, g.cin, g.hin, g.win)
    if regs["Header.RBE1"]:
        if cfg.broadcast[1]:
            raise UnsupportedTask(f"{what}: a broadcast second operand streamed from DRAM (RBE1 with "
                                  f"Common.Broadcast.Src1) was never observed", planar=cfg.words)
        rows = min(g.hin, regs["Common.TileCfg.TileHeight"] or g.hin)
        base = regs.get("L2.Source1Base.Addr", 0) * L2_UNIT
        nbytes = rows * regs.get("L2.Source1RowStride.Stride", 0) * L2_UNIT
        if base + nbytes > L2_BYTES:
            raise L2Overflow(f"{what}: the second operand's L2 working set [{base:#x}, {base + nbytes:#x})"
                             f" does not fit the {L2_BYTES >> 20} MiB L2", addr=base, nbytes=nbytes)
        return tile_dma.plan_src(regs, bars, g.cin, g.hin, g.win, what, second=True)
    addr = regs.get("L2.Source1Base.Addr", 0) * L2_UNIT
    held = resident.get(addr)
    if held is None:
        raise L2Fault(f"{what}: the second operand is read from L2 at {addr:#x} (RBE1 = 0, "
                      f"L2.Source1Base), where no earlier task left a result", addr=addr)
    ok = {shape} | ({shape[:3] + (1,)} if cfg.broadcast[1] else set())
    if held[0] not in ok:
        raise L2Fault(f"{what}: the result in L2 at {addr:#x} is {held[0]}; the second operand is "
                      f"{' or '.join(map(str, sorted(ok)))}", addr=addr)
    return L2Operand(addr, held[0])


def read_operand(op, memory: np.ndarray, l2mem):
    """The values of a planned operand (None for a unary op)."""
    if op is None:
        return None
    if isinstance(op, L2Operand):
        return l2mem.read(op.addr)
    from . import tile_dma
    return tile_dma.read(op, memory)


# ---------------------------------------------------------------------------- running
def _rows(x: np.ndarray, width: int) -> np.ndarray:
    """``x`` as a C-contiguous float64 (rows, W) array (W = ``width`` or 1)."""
    x = np.asarray(x, dtype=np.float64)
    return np.ascontiguousarray(x.reshape(-1, x.shape[-1] if x.shape[-1] in (width, 1) else width))


def run(cfg: PlanarConfig, g: PlanarGeometry, a: np.ndarray, b: np.ndarray | None = None):
    """``(values, nan_outputs)``: the task's result as float64 (exact fp16 values),
    ``[1, C, H, W]`` for elementwise tasks, ``[1, 1, groups, 1]`` for a row reduction."""
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
    return out.view(np.float16).astype(np.float64).reshape(shape), int(nans)


__all__ = ["OPCODES", "TASK_REDUCE", "UNNAMED", "L2Operand", "PlanarConfig", "PlanarGeometry", "config",
           "geometry", "is_planar", "operation", "ops", "plan_second", "plan_source", "read_operand",
           "registers", "run", "set_unnamed", "unnamed_fields", "words"]
