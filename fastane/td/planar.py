"""The planar engine's TD words: the four Planar words, the operations they encode, and the
registers the bit map leaves unnamed (:data:`fastane.td.fields.UNNAMED_FIELDS`).

What the words mean was established from the 40 planar TDs of the corpus (docs/device.md,
"Planar engine"); :mod:`fastane.device.planar` runs the tasks.

* **Word 0, the operation.**  Elementwise: ``0x0`` scale/offset only; ``0x40`` abs;
  ``0x80000 | k << 2`` the binary ops add (k = 0), multiply (1), max (2), min (3);
  ``0xc0000`` subtract (``a - b``; bit 18 on an add).  Row reduction (a task whose
  ``Common.Cfg.TaskType`` is 5): ``0x0`` sum, ``0x2`` max, ``0x1000`` sum then
  reciprocal.
* **Word 1** = (output scale ``s`` in the high half, output offset ``c`` in the low half),
  fp16: ``out = s * y + c``.  **Word 2** = (scale ``s0`` of the RBase0 operand, 0);
  **Word 3** = an fp32 output scale, 1.0 in every corpus TD.
"""

from __future__ import annotations

import numpy as np

from .fields import UNNAMED_FIELDS

__all__ = [
    "WORDS",
    "TASK_REDUCE",
    "UNNAMED",
    "OPCODES",
    "PLANAR_UNARY",
    "PLANAR_BINARY",
    "unnamed_fields",
    "registers",
    "set_unnamed",
    "is_planar",
    "operation",
    "words",
]

WORDS = tuple(f"Planar.Word[{i}]" for i in range(4))
#: ``Common.Cfg.TaskType`` of a row reduction
TASK_REDUCE = 5

#: the unnamed registers as ``name -> (byte offset, bit, width)``, like the bit map's entries
UNNAMED = {f.name: (f.offset, f.bit, f.width) for f in UNNAMED_FIELDS}
_UNNAMED_WSM = tuple((f.name, f.word, f.shift, f.mask) for f in UNNAMED_FIELDS)

# Word 0 bits
BINARY = 1 << 19
SUBTRACT = 1 << 18
BINOP = 0b11 << 2
ABS = 1 << 6
RED_MAX = 1 << 1
RECIP = 1 << 12
BINOPS = ("add", "mul", "max", "min")

#: Word 0 of each operation; the reductions need ``Common.Cfg.TaskType`` = 5 as well
OPCODES = {
    "scale": 0x0,
    "abs": ABS,
    "add": BINARY,
    "mul": BINARY | 1 << 2,
    "max": BINARY | 2 << 2,
    "min": BINARY | 3 << 2,
    "sub": BINARY | SUBTRACT,
    "sum": 0x0,
    "max-reduce": RED_MAX,
    "recip-sum": RECIP,
}
#: the elementwise operations a TD builder emits (:func:`fastane.td.asm.eltwise_td`)
PLANAR_UNARY = ("scale", "abs")
PLANAR_BINARY = ("add", "sub", "mul", "max", "min")


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
        width = UNNAMED[name][2]
        if not 0 <= int(v) < 1 << width:
            raise ValueError(f"{name} is {width} bits wide; {v} does not fit")
        td[name] = int(v)
    return td


def is_planar(regs: dict) -> bool:
    """A task is a planar task when any of the four Planar words is non-zero."""
    return any(regs.get(w, 0) for w in WORDS)


def operation(regs: dict) -> tuple:
    return tuple(regs.get(w, 0) for w in WORDS)


def _f16_bits(x: float) -> int:
    return int(np.array(x, np.float16).view(np.uint16))


def words(name: str, out_scale: float = 1.0, offset: float = 0.0, in_scale: float = 1.0) -> tuple:
    """The four Planar words of operation ``name`` (:data:`OPCODES`): ``out = out_scale *
    op(in_scale * a, b) + offset``, every value rounded to fp16 (word 3 = fp32 1.0)."""
    if name not in OPCODES:
        raise ValueError(f"unknown planar operation {name!r} (one of {', '.join(OPCODES)})")
    return (
        OPCODES[name],
        _f16_bits(out_scale) << 16 | _f16_bits(offset),
        _f16_bits(in_scale) << 16,
        0x3F800000,
    )
