"""The INT8 path's decisions, in one place (SPEC 2: "INT8 path"; docs/numerics.md, INT8).

What is known of the silicon: each core has 256 INT8 MAC lanes (twice its 128 FP16
lanes); operands are int8 or uint8 (format codes 1 and 0); products are integers; the
accumulator is the same 32-bit register as on the FP16 path; the NE scales the result with
``PostScale``/``PostRightShift`` and adds ``AccBias``/``AccBiasShift``.  Everything else is
unknown, and these are fastane's **decisions** (every module of the INT8 path -- the
kernels' callers, the device blocks, the lowering, the reference tests -- takes them from
here):

1. :data:`ACC_UNIT`: the accumulator counts whole units: an int8/uint8 product is added
   exactly (``|a*b| <= 255*255``), and the 32-bit register holds
   ``[ACC_MIN, ACC_MAX]`` = ``[-2**31, 2**31 - 1]`` of them.  It clamps at every step with the
   sticky, direction-remembering flag of the FP16 path (SPEC 2, decision 3), in the same
   time order.
2. :data:`BIAS_STEP`: with ``MACCfg.BiasMode``, the bias is ``AccBias`` read as a signed
   16-bit integer (two's complement), times ``2**AccBiasShift``, added to the accumulator
   as **one more saturating step after the last product** (it can clamp and flag).  With
   ``MatrixBiasEn`` the per-channel vector in KMem holds int16 values (the same 2-byte
   slots as the fp16 biases) and the same shift applies.
3. :data:`POST_SCALE_FP16`: ``PostScale`` is an fp16 value on both paths (0x3c00 = 1.0);
   ``PostRightShift`` divides by ``2**PostRightShift`` exactly.  The NE forms
   ``v * PostScale * 2**-PostRightShift`` exactly (a 32-bit integer times an 11-bit
   significand is exact in float64) and rounds it **once**: :data:`ROUNDING`, to nearest,
   ties to even, onto the output format's grid (the integers, or fp16).  The right shift
   has no rounding of its own.
4. Nonlinearity: ``NonlinearMode`` 0 (identity) and 1 (ReLU, ``max(t, 0)`` before the
   rounding, which is the same as after it) are emulated; 2 (the LUT) is refused with
   :class:`UnsupportedTask` at plan time on the INT8 path.
5. :data:`OUTPUT_RANGE`: an int8/uint8 output **saturates** to its range ([-128, 127],
   [0, 255]); a flagged accumulator reads out as +inf/-inf (as on the FP16 path), which
   then scales and saturates like any value (+inf -> 127 / 255, -inf -> -128 / 0; a
   negative scale flips them).  :data:`NAN_TO_INT`: a NaN result (an inf times a zero
   PostScale, or a NaN PostScale) writes 0 to an integer output and NaN (0x7e00) to fp16.
   ``Stats.saturated`` counts outputs whose accumulator clamped or whose value was
   clamped to the integer range (NaN results count in ``nan_outputs`` only).
6. :data:`BINARY_POINT`: ``MACCfg.BinaryPoint`` takes no part in the arithmetic (any value
   is accepted; it is 28 in every FP16 program of the corpus).  Its meaning stays a
   hypothesis (SPEC 2).
7. Formats: the INT8 path runs when ``InFmt`` is 0 or 1; ``KernelFmt`` must then be 0 or 1
   too (every signedness combination of input and kernel is emulated), ``OutFmt`` is 0, 1
   or 2 (fp16).  TileDMASrc's ``MemFmt`` must equal ``InFmt`` and TileDMADst's ``MemFmt``
   ``OutFmt`` (no conversion in the DMA).  Mixed tasks (fp16 input, integer kernel) are the
   FP16 path's business.
8. :data:`OPERAND_SCALE`: how the kernels run it: an integer operand ``a`` is the exact
   value ``a * 2**-8``, so an integer product ``a*b`` is ``(a*2**-8)(b*2**-8)`` = ``a*b``
   units of 2**-16: exactly the FP16 path's Q16.16 accumulator, grid, clamps and flags
   with no rounding of the products.  The INT8 accumulation is therefore the FP16 path's
   kernel (:func:`fastane.kernels.mac.matmul_q16_into`) on scaled operands, one saturating
   accumulator in the code; the NE stage is :mod:`fastane.kernels.mac_int8`.
"""

from __future__ import annotations

import numpy as np

from fastane.kernels.acc import ACC_MAX as _ACC_MAX
from fastane.kernels.acc import ACC_MIN as _ACC_MIN
from fastane.kernels.mac_int8 import OPERAND_SCALE

from ..m1 import DTYPES, FP16
from .faults import UnsupportedTask

__all__ = [
    "INT_FORMATS",
    "ACC_MIN",
    "ACC_MAX",
    "ACC_UNIT",
    "BIAS_STEP",
    "POST_SCALE_FP16",
    "ROUNDING",
    "OUTPUT_RANGE",
    "NAN_TO_INT",
    "BINARY_POINT",
    "OPERAND_SCALE",
    "LANES_PER_CORE",
    "is_int",
    "acc_bias",
    "output_range",
    "format_name",
    "check_task",
    "dma_format",
]

#: the integer format codes (fastane.m1.DTYPES: 0 uint8, 1 int8)
INT_FORMATS = (0, 1)
#: the 32-bit accumulator, in units of one integer product
ACC_MIN = int(_ACC_MIN)  # -(2**31)
ACC_MAX = int(_ACC_MAX)  # 2**31 - 1
ACC_UNIT = 1
#: decision 2: the bias is one saturating accumulator step after the last product
BIAS_STEP = "after the last product, saturating"
#: decision 3: PostScale is fp16 on both paths
POST_SCALE_FP16 = True
#: decision 3: the one rounding of the NE's result
ROUNDING = "nearest, ties to even"
#: decision 5: an integer output saturates to the range of its format
OUTPUT_RANGE = {
    code: (int(np.iinfo(DTYPES[code]).min), int(np.iinfo(DTYPES[code]).max)) for code in INT_FORMATS
}
#: decision 5: what a NaN result writes to an integer output
NAN_TO_INT = 0
#: decision 6: BinaryPoint takes no part in the arithmetic
BINARY_POINT = None
#: decision 8: the exact value the kernels give an integer operand (a * 2**-8):
#: fastane.kernels.mac_int8.OPERAND_SCALE, imported above
#: INT8 MAC lanes per core (SPEC 1; the FP16 path has half as many)
LANES_PER_CORE = 256


def is_int(fmt: int) -> bool:
    """Whether the TD format code ``fmt`` is an integer format (uint8 or int8)."""
    return fmt in INT_FORMATS


def acc_bias(bits: int, shift: int) -> int:
    """Decision 2: the accumulator units a 16-bit ``AccBias`` pattern adds with ``AccBiasShift``."""
    v = int(bits) & 0xFFFF
    return (v - 0x10000 if v & 0x8000 else v) << int(shift)


def output_range(fmt: int) -> tuple:
    """``(lo, hi)`` of an integer output format, or ``(0, 0)`` for fp16 (no clamp)."""
    return OUTPUT_RANGE.get(fmt, (0, 0)) if fmt != FP16 else (0, 0)


_NAMES = {0: "uint8", 1: "int8", FP16: "fp16"}


def format_name(fmt: int) -> str:
    """``"uint8"``, ``"int8"``, ``"fp16"`` (or ``"format 3"``) for a TD format code."""
    return _NAMES.get(fmt, f"format {fmt}")


def check_task(regs: dict, what: str) -> None:
    """Decision 7 (and 4): raise :class:`UnsupportedTask` unless the task's formats are a
    combination fastane emulates -- the FP16 path (everything fp16) or the INT8 path (an
    integer input, an integer kernel, any output format, no LUT).  Called by the MAC block
    while planning, before anything moves."""
    fi, fo, fk = regs["Common.ChCfg.InFmt"], regs["Common.ChCfg.OutFmt"], regs["NE.KernelCfg.KernelFmt"]
    conv = regs["NE.MACCfg.KernelMode"] == 0
    if fi == FP16:
        if fo != FP16 or (conv and fk != FP16):
            raise UnsupportedTask(
                f"{what}: the FP16 path needs fp16 throughout (InFmt {fi}, OutFmt {fo}, "
                f"KernelFmt {fk}; 2 = FP16): an fp16 input with a {format_name(fo)} output or a "
                f"{format_name(fk)} kernel is not emulated"
            )
        return
    if not is_int(fi):
        raise UnsupportedTask(f"{what}: InFmt {fi} is not a known format (0 uint8, 1 int8, 2 FP16)")
    if conv and not is_int(fk):
        raise UnsupportedTask(
            f"{what}: the INT8 path (InFmt {fi}, {format_name(fi)}) needs an integer kernel "
            f"(KernelFmt 0 or 1), got KernelFmt {fk} ({format_name(fk).upper()})"
        )
    if fo not in _NAMES:
        raise UnsupportedTask(f"{what}: OutFmt {fo} is not a known format (0 uint8, 1 int8, 2 FP16)")
    if regs["NE.MACCfg.NonlinearMode"] == 2:
        raise UnsupportedTask(f"{what}: NonlinearMode 2 (the LUT) is not emulated on the INT8 path")


def dma_format(regs: dict, engine: str) -> int:
    """Decision 7: the ``MemFmt`` a MAC task's TileDMA engine must move: its ``InFmt``
    (TileDMASrc) or ``OutFmt`` (TileDMADst)."""
    return regs["Common.ChCfg.OutFmt" if engine == "TileDMADst" else "Common.ChCfg.InFmt"]
