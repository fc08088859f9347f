"""The tensor dimensions a task's ``Common`` registers give, read and checked in one place
(the MAC/NE blocks' and the planar engine's geometries both start from them)."""

from __future__ import annotations

from .faults import DecodeFault

__all__ = ["task_dims"]

_SHAPES = (
    ("Cin", "Common.Cin.Cin"),
    ("Hin", "Common.InDim.Hin"),
    ("Win", "Common.InDim.Win"),
    ("Cout", "Common.Cout.Cout"),
    ("Hout", "Common.OutDim.Hout"),
    ("Wout", "Common.OutDim.Wout"),
)
_KERNEL = (
    ("Kh", "Common.ConvCfg.Kh"),
    ("Kw", "Common.ConvCfg.Kw"),
    ("Sy", "Common.ConvCfg.Sy"),
    ("Sx", "Common.ConvCfg.Sx"),
)
_GROUPS = (("NumGroups", "Common.GroupConvCfg.NumGroups"),)


def task_dims(regs: dict, what: str, kernel: bool = False, **fault) -> dict:
    """``{name: value}`` of the input and output dimensions, the group count and (with
    ``kernel``) the kernel size and strides; a zero among them is a :class:`DecodeFault`
    (``fault``: its extra context, e.g. the planar words)."""
    fields = _SHAPES + (_KERNEL if kernel else ()) + _GROUPS
    dims = {name: regs[field] for name, field in fields}
    zero = [k for k, v in dims.items() if v < 1]
    if zero:
        raise DecodeFault(f"{what}: {', '.join(zero)} must be at least 1 ({dims})", **fault)
    return dims
