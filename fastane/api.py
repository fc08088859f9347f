"""The numpy-facing surface: ``matmul``, ``linear``, ``conv1d``, ``conv2d``.

Every call rounds its operands to fp16 (round half to even, as Core ML does for an fp16
model), runs the MAC array's arithmetic (exact products rounded to the Q16.16 grid, a
saturating 32-bit accumulator in a fixed time order, fp16 readout; SPEC section 2 and
docs/numerics.md) and returns ``np.float16`` arrays, as the ANE would.  Saturated
outputs are surfaced through :func:`fastane.errstate`; the counters of the last call on
this thread are returned by :func:`last_stats`.

This module only validates, reshapes and dispatches: the arithmetic lives in
``fastane.kernels``.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .errstate import report as _report
from .kernels import conv as _conv
from .kernels import mac as _mac
from .stats import Stats, last_stats, record

__all__ = ["matmul", "linear", "conv1d", "conv2d", "last_stats"]

_MATMUL_SIG = "(n?,k),(k,m?)->(n?,m?)"


# ---------------------------------------------------------------------------- operands
def _fp16_operand(x, func: str, name: str) -> np.ndarray:
    """``x`` rounded to fp16 (RNE) and returned as exact float64 values, C-contiguous."""
    arr = np.asarray(x)
    kind = arr.dtype.kind
    if kind == "c":
        raise TypeError(f"{func}: {name} has complex dtype {arr.dtype}; the ANE has no complex arithmetic")
    if kind not in "biuf":
        raise TypeError(f"{func}: {name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.dtype != np.float16:
        with np.errstate(over="ignore"):  # large values become +-inf, as in an fp16 model
            arr = arr.astype(np.float16)
    return arr.astype(np.float64, order="C")


def _finish(func: str, acc: np.ndarray, flag: np.ndarray, macs: int) -> np.ndarray:
    """Read the accumulators out to fp16, record Stats and surface saturation."""
    y = np.empty(acc.shape, np.float64)
    _mac.readout(acc.reshape(-1), flag.reshape(-1), y.reshape(-1))
    isnan = np.isnan(acc)
    nan = int(np.count_nonzero(isnan))
    saturated = int(np.count_nonzero((flag != 0) & ~isnan))
    record(Stats(tasks=1, macs=macs, saturated=saturated, nan_outputs=nan))
    _report("saturation", saturated,
                     f"{func}: {saturated} of {acc.size} outputs saturated the Q16.16 accumulator "
                     f"(a partial sum left [-32768, 32768)); they read out as +-inf")
    return y


def _store(result64: np.ndarray, out, func: str) -> np.ndarray:
    res = result64.astype(np.float16)
    if out is None:
        return res
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{func}: out must be a numpy array, got {type(out).__name__}")
    if out.shape != res.shape:
        raise ValueError(f"{func}: out has shape {out.shape}, but the result has shape {res.shape}")
    if not np.can_cast(np.float16, out.dtype, casting="same_kind"):
        raise TypeError(f"{func}: cannot store float16 results into out of dtype {out.dtype}")
    np.copyto(out, res)
    return out


# ---------------------------------------------------------------------------- matmul
def matmul(a, b, out=None) -> np.ndarray:
    """Matrix product of ``a`` and ``b`` as the ANE computes it; ``np.matmul`` semantics.

    Batch dimensions broadcast, a 1-D operand is promoted to a matrix and the added
    dimension is removed afterwards, scalars are rejected.  Operands are rounded to fp16;
    the sum over ``k`` runs in order ``k = 0..K-1`` in a saturating Q16.16 accumulator.
    Returns ``np.float16`` (written into ``out`` when given).
    """
    a16 = _fp16_operand(a, "matmul", "a")
    b16 = _fp16_operand(b, "matmul", "b")
    for i, x in enumerate((a16, b16)):
        if x.ndim == 0:
            raise ValueError(f"matmul: Input operand {i} does not have enough dimensions (has 0, "
                             f"gufunc core with signature {_MATMUL_SIG} requires 1)")
    a_vec, b_vec = a16.ndim == 1, b16.ndim == 1
    A = a16[None, :] if a_vec else a16
    B = b16[:, None] if b_vec else b16
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K != K2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature {_MATMUL_SIG} (size {K2} is different from {K})")
    try:
        batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: operands could not be broadcast together: batch dimensions "
                         f"{A.shape[:-2]} of a {a16.shape} and {B.shape[:-2]} of b {b16.shape}") from None
    nb = math.prod(batch)
    ia = np.broadcast_to(np.arange(math.prod(A.shape[:-2])).reshape(A.shape[:-2]), batch).reshape(-1)
    ib = np.broadcast_to(np.arange(math.prod(B.shape[:-2])).reshape(B.shape[:-2]), batch).reshape(-1)
    A3 = A.reshape((math.prod(A.shape[:-2]), M, K))
    B3 = B.reshape((math.prod(B.shape[:-2]), K, N))
    if nb * M * N == 0 or K == 0:
        acc = np.zeros((nb, M, N))
        flag = np.zeros((nb, M, N), np.int8)
    else:
        acc, flag = _mac.matmul_q16(A3, B3, ia.astype(np.int64), ib.astype(np.int64), False)
    y = _finish("matmul", acc, flag, nb * M * N * K).reshape(batch + (M, N))
    if a_vec:
        y = y[..., 0, :]
    if b_vec:
        y = y[..., 0]
    return _store(y, out, "matmul")


def linear(x, weight, bias=None) -> np.ndarray:
    """``x @ weight.T + bias`` as the ANE computes it (PyTorch ``nn.functional.linear``).

    ``weight`` has shape ``(out_features, in_features)``; ``x`` has shape
    ``(..., in_features)``.  The bias is added in fp16 after readout (rounded once).
    """
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out_features, in_features), got shape {w.shape}")
    x_arr = np.asarray(x)
    if x_arr.ndim == 0 or x_arr.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: x has shape {x_arr.shape}, expected (..., {w.shape[1]}) to match "
                         f"weight of shape {w.shape}")
    y = matmul(x_arr, w.T)
    if bias is not None:
        y = _add_bias(y, bias, w.shape[0], axis=-1, func="linear")
    return y


def _add_bias(y16: np.ndarray, bias, channels: int, axis: int, func: str) -> np.ndarray:
    """fp16 ``y + bias`` along ``axis``, rounded once to fp16 (the NE's bias stage)."""
    b = _fp16_operand(bias, func, "bias")
    if b.shape != (channels,):
        raise ValueError(f"{func}: bias must have shape ({channels},), got {b.shape}")
    shape = [1] * y16.ndim
    shape[axis] = channels
    return (y16.astype(np.float64) + b.reshape(shape)).astype(np.float16)


# ---------------------------------------------------------------------------- convolution
def _pair(v, func: str, name: str, minimum: int) -> tuple[int, int]:
    vals = (v, v) if np.ndim(v) == 0 else tuple(v)
    if len(vals) != 2:
        raise ValueError(f"{func}: {name} must be an int or a pair of ints, got {v!r}")
    try:
        vals = tuple(operator.index(x) for x in vals)
    except TypeError:
        raise TypeError(f"{func}: {name} must be an int or a pair of ints, got {v!r}") from None
    if min(vals) < minimum:
        raise ValueError(f"{func}: {name} must be >= {minimum}, got {v!r}")
    return vals


def _padding(padding, k, dil, stride, func: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """((top, bottom), (left, right)) zero padding."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{func}: padding='same' is not supported for strided convolutions")
            tot = [d * (kk - 1) for d, kk in zip(dil, k)]
            return (tot[0] // 2, tot[0] - tot[0] // 2), (tot[1] // 2, tot[1] - tot[1] // 2)
        raise ValueError(f"{func}: invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    ph, pw = _pair(padding, func, "padding", 0)
    return (ph, ph), (pw, pw)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None) -> np.ndarray:
    """2-D convolution in NCHW as the ANE computes it (PyTorch ``conv2d`` conventions).

    ``x``: ``(N, C, H, W)`` or unbatched ``(C, H, W)``; ``weight``: ``(CO, C/groups, KH, KW)``;
    ``bias``: ``(CO,)``; ``stride``, ``dilation``: int or pair; ``padding``: int, pair,
    ``"valid"`` or ``"same"`` (zeros).  Each output sums over input channel (within its
    group), then kernel row, then kernel column, in a saturating Q16.16 accumulator; the
    bias is added in fp16 after readout.  ``activation``: ``None`` or ``"relu"``.
    Returns ``np.float16``.
    """
    func = "conv2d"
    x16 = _fp16_operand(x, func, "input")
    w16 = _fp16_operand(weight, func, "weight")
    if w16.ndim != 4:
        raise ValueError(f"{func}: expected a 4-D weight (out_channels, in_channels/groups, kH, kW), "
                         f"got shape {w16.shape}")
    unbatched = x16.ndim == 3
    if unbatched:
        x16 = x16[None]
    if x16.ndim != 4:
        raise ValueError(f"{func}: expected 3-D (unbatched) or 4-D (batched) input, got shape {np.shape(x)}")
    groups = operator.index(groups)
    if groups < 1:
        raise ValueError(f"{func}: groups must be a positive integer, got {groups}")
    N, C, H, W = x16.shape
    CO, CG, KH, KW = w16.shape
    if CO % groups:
        raise ValueError(f"{func}: out_channels ({CO}) must be divisible by groups ({groups})")
    if C != CG * groups:
        raise ValueError(f"{func}: Given groups={groups}, weight of size {list(w16.shape)}, expected "
                         f"input{list(x16.shape)} to have {CG * groups} channels, but got {C} channels instead")
    s = _pair(stride, func, "stride", 1)
    d = _pair(dilation, func, "dilation", 1)
    (pt, pb), (pl, pr) = _padding(padding, (KH, KW), d, s, func)
    oh = (H + pt + pb - d[0] * (KH - 1) - 1) // s[0] + 1
    ow = (W + pl + pr - d[1] * (KW - 1) - 1) // s[1] + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(f"{func}: the padded input ({H + pt + pb}x{W + pl + pr}) is smaller than the "
                         f"dilated kernel ({d[0] * (KH - 1) + 1}x{d[1] * (KW - 1) + 1})")
    if activation not in (None, "relu"):
        raise NotImplementedError(f"{func}: activation={activation!r} is not implemented yet "
                                  "(None and 'relu' are)")
    if N * CO * oh * ow == 0 or CG * KH * KW == 0:
        acc = np.zeros((N, CO, oh, ow))
        flag = np.zeros(acc.shape, np.int8)
    else:
        acc, flag = _conv.conv2d_q16(x16, w16, s[0], s[1], d[0], d[1], pt, pl, oh, ow, groups, False)
    y = _finish(func, acc, flag, N * CO * oh * ow * CG * KH * KW).astype(np.float16)
    if bias is not None:
        y = _add_bias(y, bias, CO, axis=1, func=func)
    if activation == "relu":
        y = np.where(y > 0, y, np.where(np.isnan(y), y, np.float16(0)))
    return y[0] if unbatched else y


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None) -> np.ndarray:
    """1-D convolution in NCL as the ANE computes it (a conv2d of height 1).

    ``x``: ``(N, C, L)`` or ``(C, L)``; ``weight``: ``(CO, C/groups, K)``; other arguments
    as :func:`conv2d` (ints or ``"valid"``/``"same"`` for ``padding``).
    """
    func = "conv1d"
    xa, wa = np.asarray(x), np.asarray(weight)
    if xa.ndim not in (2, 3):
        raise ValueError(f"{func}: expected 2-D (unbatched) or 3-D (batched) input, got shape {xa.shape}")
    if wa.ndim != 3:
        raise ValueError(f"{func}: expected a 3-D weight (out_channels, in_channels/groups, k), got shape {wa.shape}")

    def widen(v, name, height_value):  # an int or 1-tuple along L -> (H value, L value)
        if np.ndim(v) == 0:
            return (height_value, v)
        if len(v) != 1:
            raise ValueError(f"{func}: {name} must be an int or a 1-tuple, got {v!r}")
        return (height_value, v[0])

    pad = padding if isinstance(padding, str) else widen(padding, "padding", 0)
    y = conv2d(xa[..., None, :], wa[..., None, :], bias=bias, stride=widen(stride, "stride", 1),
               padding=pad, dilation=widen(dilation, "dilation", 1), groups=groups, activation=activation)
    return y[..., 0, :]
