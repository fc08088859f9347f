"""Operands from the user to fp16: the one place where fastane rounds an input.

Every entry point (the numpy API, the activations, :meth:`fastane.device.Device.run`)
turns what the user passes into a real numpy array with :func:`real_operand` and rounds it
to fp16 with :func:`fp16_operand`.  The rule (SPEC section 2, decision 1;
docs/numerics.md "Operands"): **one rounding to fp16, to nearest, ties to even**, from the
value the user gave, whatever its dtype:

* float16 passes unchanged; bool, integers, float32 and float64 (and Python scalars and
  sequences, which numpy makes int64/float64) round once (numpy's casts to float16 are
  direct, correctly rounded conversions; every integer whose fp16 rounding is finite is
  exact in float64);
* extended precision (``np.longdouble`` wider than float64) is first narrowed to float64
  *rounded to odd*, which makes the following rounding to fp16 the single correct
  rounding of the original value (53 bits >= 11 + 2), never a double rounding;
* values beyond the fp16 range become +-inf, NaN stays NaN (no numpy warning);
* complex, object (a Python int beyond 64 bits is one), string, bytes, datetime and
  structured dtypes are refused with a :class:`TypeError` that names the function and
  the operand.

Integer operands (the INT8 path's uint8/int8 tensors) are never rounded:
:func:`int_operand` accepts only values that already are integers of the format's range
(a float holding one is fine) and raises :class:`ValueError` for the others.

This module sits at the bottom of the import order (it imports numpy and two conversion
kernels only), so the device and the front ends share it.
"""

from __future__ import annotations

import numpy as np

from .kernels import mac_f32 as _kf32

#: fp16 arrays at least this large widen to float32 with the hardware's instructions
#: (``fastane.kernels.mac_f32.widen_f16``: numpy's bits, 25x faster at 2**20 elements);
#: smaller ones with numpy, whose call costs less than a kernel's dispatch.  float32 is
#: rounded to fp16 by the hardware (``f16_patterns``) at every size: numpy's rounding
#: needs an ``np.errstate`` for overflow, which costs more than the kernel's dispatch
HW_CONVERT_MIN = 4096

__all__ = ["real_operand", "fp16_operand", "int_operand"]


def real_operand(x, func: str, name: str) -> np.ndarray:
    """``x`` as a numpy array of a real dtype (bool, integer or float); else TypeError."""
    try:
        arr = np.asarray(x)
    except ValueError as exc:  # a ragged sequence
        raise ValueError(f"{func}: {name} is not a rectangular array ({exc})") from None
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError(
            f"{func}: {name} must be a real numeric array, got complex dtype "
            f"{arr.dtype} (the ANE has no complex arithmetic)"
        )
    if kind not in "biuf":
        hint = " (a Python int beyond 64 bits is one: pass it as a float)" if kind == "O" else ""
        raise TypeError(f"{func}: {name} must be a real numeric array, got dtype {arr.dtype}{hint}")
    return arr


def fp16_operand(x, func: str, name: str) -> np.ndarray:
    """``x`` rounded once to fp16 (to nearest, ties to even), as a float16 array."""
    arr = real_operand(x, func, name)
    if arr.dtype == np.float16:
        return arr
    if arr.dtype == np.float32:  # any size: no np.errstate to enter (2 us in a tiny call)
        out = np.empty(arr.shape, np.uint16)
        _kf32.f16_patterns(np.ascontiguousarray(arr).reshape(-1), out.reshape(-1))  # one rounding
        return out.view(np.float16)
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        arr = _round_to_odd_f64(arr)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond the range: +-inf, as in an fp16 model
        return arr.astype(np.float16)


def widen_fp16(x: np.ndarray) -> np.ndarray:
    """An fp16 array's values as float32 (exact)."""
    if x.size < HW_CONVERT_MIN:
        return x.astype(np.float32)
    out = np.empty(x.shape, np.float32)
    # flat: one compiled specialization whatever the rank
    _kf32.widen_f16(np.ascontiguousarray(x).view(np.uint16).reshape(-1), out.reshape(-1))
    return out


def _round_to_odd_f64(x: np.ndarray) -> np.ndarray:
    """Extended-precision ``x`` to float64 rounded to odd: truncated toward zero, the last
    bit set when inexact, so the later rounding to fp16 (11 bits << 53) is the single
    correct rounding of ``x``."""
    with np.errstate(over="ignore", invalid="ignore"):
        hi = x.astype(np.float64)
        toward_zero = np.abs(hi.astype(x.dtype)) > np.abs(x)
        hi = np.where(toward_zero, np.nextafter(hi, 0.0), hi)
        inexact = np.isfinite(hi) & (hi.astype(x.dtype) != x)
    bits = hi.view(np.uint64)
    return np.where(inexact, bits | np.uint64(1), bits).view(np.float64)


def int_operand(x, dtype, func: str, name: str) -> np.ndarray:
    """``x`` as an array of the integer ``dtype`` (uint8 or int8): every value must be an
    integer within the dtype's range (no rounding, no wrapping); else ValueError."""
    arr = real_operand(x, func, name)
    dtype = np.dtype(dtype)
    if arr.dtype == dtype:
        return arr
    info = np.iinfo(dtype)
    if arr.size:
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(arr) if arr.dtype.kind == "f" else np.zeros(arr.shape, bool)
            bad |= (arr < info.min) | (arr > info.max)
            if arr.dtype.kind == "f":
                bad |= arr != np.floor(arr)
        if bad.any():
            v = arr[bad].flat[0]
            raise ValueError(
                f"{func}: {name} must hold integers in [{info.min}, {info.max}] for a {dtype} "
                f"tensor (no rounding or wrapping), got {v!r}"
            )
    return arr.astype(dtype)
