"""The planar engine (PE): elementwise and reduction work outside the MAC array (SPEC 4).

A task is a planar task when any of the four Planar words (TD offset 0x22c) is non-zero.
Its operands come from ``RBase0``/``RBase1`` through TileDMASrc (or from L2).  The
operation codes are hypotheses still being tested against the corpus, so the device
does not compute planar tasks yet: it counts them (one ``planar_ops`` per output element,
plus their DMA bytes) in stats-only mode and raises :class:`UnsupportedTask` when asked
for values.
"""
from __future__ import annotations

from .faults import UnsupportedTask

WORDS = tuple(f"Planar.Word[{i}]" for i in range(4))


def is_planar(regs: dict) -> bool:
    return any(regs.get(w, 0) for w in WORDS)


def operation(regs: dict) -> tuple:
    return tuple(regs.get(w, 0) for w in WORDS)


def ops(regs: dict) -> int:
    """Elementwise operations of a planar task: one per output element."""
    return regs["Common.Cout.Cout"] * regs["Common.OutDim.Hout"] * regs["Common.OutDim.Wout"]


def check_computable(regs: dict, what: str) -> None:
    op = operation(regs)
    raise UnsupportedTask(f"{what}: planar engine operation {op[0]:#x} (words "
                          f"{', '.join(f'{w:#x}' for w in op)}) is not emulated yet; "
                          f"run the program with stats_only=True to count it", planar=op)
