"""The INT8 path of the numpy surface: ``fastane.matmul``/``linear``/``conv2d`` with
``scale=`` (and optionally ``out_dtype=``) run on the 256 INT8 lanes of each core.

The keywords (the whole set):

* ``scale`` (a positive float; selecting the INT8 path): the NE multiplies the 32-bit
  integer accumulator (plus the bias) by it before the one rounding to the output
  (docs/numerics.md, "The INT8 path").  For a quantized product it is
  ``scale_a * scale_b / scale_out`` (integer output) or ``scale_a * scale_b`` (fp16
  output).  The NE holds it as an fp16 ``PostScale`` times ``2**-PostRightShift``, so
  it is used rounded to 11 significant bits (:func:`ne_scale` says to what);
* ``out_dtype``: ``"float16"`` (default), ``"int8"`` or ``"uint8"`` (saturating);
* the operands must be ``np.int8`` or ``np.uint8`` arrays (any combination); ``bias``
  (``linear``, ``conv2d``) holds integers in accumulator units, each an int16 times one
  common power of two (the NE's ``AccBias``/``AccBiasShift``); ``activation`` is None or
  ``"relu"`` (the LUT is not emulated on the INT8 path).

Zero points are not among the keywords: the NE has no zero-point field; an asymmetric
operand is the caller's to center.  The call (a matmul: each product of its batch) is cut
into tasks by the lowering's tiler (:func:`fastane.lower.plan_tiling`: kernel groups that
fit KMem at one byte a weight, output tiles that fit L2), each task built with
:func:`fastane.td.conv_td` and run on the default device.  As on the FP16 path the
reduction is never split (``NotImplementedError`` when one output channel's kernel does
not fit a core), and a kernel, stride or dilation beyond the TD's fields (the FP16 path's
im2col) raises ``NotImplementedError`` here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from . import lower as _lower
from .errors import DeviceFault, TDError
from .errstate import errstate, report_events
from .lower.problems import conv_problem
from .lower.tiler import axis, effective, kernel_groups, plan_tiling
from .m1 import FP16, LIMITS, Limits, kernel_layout
from .stats import Stats, record
from .td import Program, conv_td

__all__ = ["ne_scale", "matmul", "linear", "conv2d", "plan"]

_OUT = {"float16": FP16, "int8": 1, "uint8": 0}
_DTYPE = {code: name for name, code in _OUT.items()}
_DTYPE_NP = {code: np.dtype(name) for code, name in _DTYPE.items()}
_FMT = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1}
SRC, DST, KERNEL = 4, 5, 1  # conv_td's BAR slots


def options(func: str, scale, out_dtype) -> tuple | None:
    """``None`` (the FP16 path) or ``(scale, output format code)``; precise errors."""
    if scale is None:
        if out_dtype is not None:
            raise TypeError(
                f"{func}: out_dtype selects an integer result of the INT8 path, which needs scale="
            )
        return None
    if (
        isinstance(scale, bool)
        or not isinstance(scale, numbers.Real)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"{func}: scale must be a finite positive number, got {scale!r}")
    name = "float16" if out_dtype is None else np.dtype(out_dtype).name if _is_dtype(out_dtype) else out_dtype
    if name not in _OUT:
        raise ValueError(f"{func}: out_dtype must be 'float16', 'int8' or 'uint8', got {out_dtype!r}")
    return float(scale), _OUT[name]


def _is_dtype(x) -> bool:
    try:
        np.dtype(x)
    except TypeError:
        return False
    return True


def ne_scale(scale: float) -> tuple:
    """``(PostScale fp16 bits, PostRightShift)`` holding ``scale``: the right shift puts
    ``scale * 2**shift`` in [1, 2) where it can (0..31), and PostScale is that rounded to
    fp16 (11 significant bits).  The NE then multiplies by ``float16(scale * 2**shift) *
    2**-shift``."""
    shift = min(max(-math.floor(math.log2(scale)), 0), 31)
    with np.errstate(over="ignore"):
        bits = int(np.array([scale * 2.0**shift], np.float16).view(np.uint16)[0])
    if bits >= 0x7C00:
        raise ValueError(f"scale {scale!r} is beyond the NE's fp16 PostScale (at most 65504)")
    if bits == 0:
        raise ValueError(f"scale {scale!r} is below what PostScale x 2**-31 can hold")
    return bits, shift


def int8_operand(x, func: str, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype not in _FMT:
        raise TypeError(
            f"{func}: with scale= (the INT8 path), {name} must be an int8 or uint8 array, got {arr.dtype}"
        )
    return arr


def _bias(bias, cout: int, func: str):
    """The bias as (int16 values, AccBiasShift): integers, each ``v * 2**s`` with one s."""
    if bias is None:
        return None, 0
    b = np.asarray(bias)
    if b.dtype.kind not in "iu" and not (
        b.dtype.kind == "f" and np.all(np.isfinite(b)) and np.all(b == np.rint(b))
    ):
        raise TypeError(
            f"{func}: on the INT8 path the bias holds integers (accumulator units), got {b.dtype}"
        )
    if b.shape != (cout,):
        raise ValueError(f"{func}: bias must have shape ({cout},), got {b.shape}")
    v = [int(t) for t in b.tolist()]
    for s in range(32):
        if all(t % (1 << s) == 0 and -(2**15) <= t >> s < 2**15 for t in v):
            return np.array([t >> s for t in v], np.int16), s
    raise ValueError(f"{func}: every bias must be an int16 times one common power of two 2**s (s <= 31)")


def _kernel(w: np.ndarray, b16) -> bytes:
    """KernelDMA bytes of integer weights ``(Cout, Cin/groups, Kh, Kw)`` (one byte each) and
    the int16 bias vector, in the KMem layout (:func:`fastane.m1.kernel_layout`)."""
    cout = w.shape[0]
    per = int(np.prod(w.shape[1:]))
    lay = kernel_layout(cout, per, b16 is not None)
    out = bytearray(lay.nbytes)
    flat = np.ascontiguousarray(w).reshape(cout, per)
    for lane in range(lay.lanes):
        lo, hi = lane * lay.m, min((lane + 1) * lay.m, cout)
        off = lay.offsets[lane]
        chunk = flat[lo:hi].tobytes()
        out[off : off + len(chunk)] = chunk
        if b16 is not None:
            bb = b16[lo:hi].astype("<i2").tobytes()
            out[off + lay.bias_offset : off + lay.bias_offset + len(bb)] = bb
    return bytes(out)


def _run(
    func,
    x,
    w,
    b,
    stride,
    pad,
    dilation,
    groups,
    activation,
    opts,
    limits: Limits | None = None,
    stats_only=False,
):
    """The INT8 convolution of ``x`` ``(N, C, H, W)`` by ``w``, cut into tasks by the
    lowering's tiler (:func:`fastane.lower.plan_tiling`, the only one; ``Conv.kernel_int8``:
    one KMem byte a weight): one task per image x kernel group x output tile, each run on
    the default device with its input tile (and halo) sliced on the host.  The reduction is
    never split, so every output is the one task's accumulation, as untiled.  ``stats_only``:
    the same tasks counted on the lowering's stats-only device (nothing computed; ``y`` is
    left unwritten)."""
    scale, fo = opts
    limits = LIMITS if limits is None else limits  # (the module's LIMITS: tests shrink it)
    if activation not in (None, "relu"):
        raise NotImplementedError(
            f"{func}: on the INT8 path the activation is None or 'relu', not {activation!r}"
        )
    N, C, H, W = x.shape
    CO = w.shape[0]
    b16, bshift = _bias(b, CO, func)
    pbits, rshift = ne_scale(scale)
    conv = conv_problem(x.shape, w.shape, stride, pad, dilation, groups, b16 is not None, activation)
    conv = dataclasses.replace(conv, kernel_int8=True)
    t = plan_tiling(conv, limits)  # NotImplementedError when no tiling fits
    if t.mode == "im2col":
        raise NotImplementedError(
            f"{func}: the INT8 path does not unfold a kernel, stride or dilation beyond the TD's "
            f"fields (kernel <= {limits.max_kernel}, stride <= {limits.max_stride}, dilation <= "
            f"{limits.max_dilation}) on the host"
        )
    c = effective(conv, limits, force_padded=t.mode == "padded")[1]
    if t.mode == "padded":  # the padding materialized: zeros, as the TD's padding reads
        (pt, pb), (pl, pr) = conv.pad
        x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    sh, sw = c.span
    ry = list(zip(*axis(c.hout, t.th, c.stride[0], sh, c.pad[0][0], c.h)))
    rx = list(zip(*axis(c.wout, t.tw, c.stride[1], sw, c.pad[1][0], c.w)))
    y = np.empty((N, CO, c.hout, c.wout), _DTYPE_NP[fo])
    dev = _lower.stats_device() if stats_only else _lower.default_device()
    programs, total = {}, Stats()
    for co0, ct, ci0, cit, ng in kernel_groups(c, t.cout_t, t.groups_t):
        wk = w[co0 : co0 + ct]
        bk = None if b16 is None else b16[co0 : co0 + ct]
        for oy0, th, r0, rows, padt in ry:
            padb = (oy0 + th - 1) * c.stride[0] - c.pad[0][0] + sh - (r0 + rows)
            for ox0, tw, c0, cols, padl in rx:
                padr = (ox0 + tw - 1) * c.stride[1] - c.pad[1][0] + sw - (c0 + cols)
                key = (co0, rows, cols, th, tw, padt, padb, padl, padr)
                if key not in programs:
                    programs[key] = _program(
                        func, x.dtype, wk, bk, (cit, rows, cols), (ct, th, tw),
                        ((padt, padb), (padl, padr)), c, ng, activation, fo, pbits, rshift, bshift,
                    )  # fmt: skip
                for n in range(N):
                    if stats_only:
                        total = total + dev.run(programs[key], {}, stats_only=True).stats
                        continue
                    tile = x[n : n + 1, ci0 : ci0 + cit, r0 : r0 + rows, c0 : c0 + cols]
                    try:
                        with errstate(saturation="ignore"):
                            got = dev.run(programs[key], {SRC: np.ascontiguousarray(tile)})
                    except DeviceFault as exc:
                        raise NotImplementedError(f"{func}: an INT8 task does not fit: {exc}") from None
                    y[n, co0 : co0 + ct, oy0 : oy0 + th, ox0 : ox0 + tw] = got[DST][0]
                    total = total + got.stats
    return y, total


def plan(
    x_shape,
    x_dtype,
    w_shape,
    w_dtype,
    bias: bool,
    stride,
    pad,
    dilation,
    groups,
    activation,
    scale,
    out_dtype,
) -> Stats:
    """The Stats of the INT8 convolution :func:`conv2d` would run (``x_shape`` N C H W,
    ``w_shape`` Cout Cin/groups Kh Kw, ``pad`` ((t, b), (l, r))), counted from the shapes
    and dtypes alone on the stats-only device: no values needed (the weights are zero
    placeholders; an int8/uint8 weight is one KernelDMA byte whatever its values)."""
    x = np.broadcast_to(np.zeros((), x_dtype), tuple(x_shape))
    w = np.zeros(tuple(w_shape), w_dtype)
    b = np.zeros(w_shape[0], np.int64) if bias else None
    opts = options("plan", scale, out_dtype)
    return _run("plan", x, w, b, stride, pad, dilation, groups, activation, opts, stats_only=True)[1]


def _program(func, in_dtype, w, b16, src, dst, pad, c, groups, activation, fo, pbits, rshift, bshift):
    """One INT8 task's :class:`~fastane.td.Program`: ``src``/``dst`` ``(C, H, W)`` tiles."""
    try:
        td = conv_td(
            (1, *src),
            (1, *dst),
            kernel=(c.kh, c.kw),
            stride=c.stride,
            dilation=c.dilation,
            padding=pad,
            groups=groups,
            in_fmt=_FMT[in_dtype],
            kernel_fmt=_FMT[w.dtype],
            out_fmt=fo,
            bias="channel" if b16 is not None else None,
            nonlinear="relu" if activation == "relu" else "identity",
        )
        td.update(
            {
                "NE.PostScale.PostScale": pbits,
                "NE.PostScale.PostRightShift": rshift,
                "NE.AccBias.AccBiasShift": bshift,
            }
        )
        return Program.from_tds([td], kernel=_kernel(w, b16))
    except (TDError, ValueError) as exc:
        raise NotImplementedError(f"{func}: an INT8 task of the tiling does not fit a TD: {exc}") from None


def _finish(func: str, total: Stats, size: int) -> None:
    """Record the call's Stats and surface its saturations (as the FP16 surface does)."""
    record(total)
    report_events(total, func, size)


def matmul(a, b, opts, activation=None) -> np.ndarray:
    """``a @ b`` of int8/uint8 operands on the INT8 path (``np.matmul``'s 1-D promotion and
    batch broadcasting; one task a product of the batch)."""
    func = "matmul"
    a, b = int8_operand(a, func, "a"), int8_operand(b, func, "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{func}: operands must be at least 1-D, got {a.shape} @ {b.shape}")
    A = a[None] if a.ndim == 1 else a
    B = b[:, None] if b.ndim == 1 else b
    (M, K), (K2, N) = A.shape[-2:], B.shape[-2:]
    if K != K2:
        raise ValueError(f"{func}: core dimensions differ: a {a.shape} @ b {b.shape} ({K} != {K2})")
    try:
        batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(
            f"{func}: batch dimensions of a {a.shape} and b {b.shape} do not broadcast"
        ) from None
    if M * N * K * math.prod(batch) == 0:
        raise ValueError(f"{func}: the INT8 path needs non-empty operands, got {a.shape} @ {b.shape}")
    A, B = np.broadcast_to(A, batch + (M, K)), np.broadcast_to(B, batch + (K, N))
    y = np.empty(batch + (M, N), np.dtype(_DTYPE[opts[1]]))
    total = Stats()
    for idx in np.ndindex(*batch):
        # the (B, C, 1, S) layout: Cin = K, rows of a along S, weights b^T
        x = np.ascontiguousarray(A[idx].T).reshape(1, K, 1, M)
        w = np.ascontiguousarray(B[idx].T).reshape(N, K, 1, 1)
        r, st = _run(func, x, w, None, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, activation, opts)
        y[idx] = r.reshape(N, M).T
        total = total + st
    _finish(func, total, y.size)
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


def linear(x, weight, bias, activation, opts) -> np.ndarray:
    """``x @ weight.T + bias`` of int8/uint8 operands on the INT8 path."""
    func = "linear"
    x, w = int8_operand(x, func, "x"), int8_operand(weight, func, "weight")
    if w.ndim != 2 or x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: x {x.shape} and weight {w.shape} do not match (..., in) x (out, in)")
    N, K = w.shape
    batch = x.shape[:-1]
    M = math.prod(batch)
    if M * N * K == 0:
        raise ValueError("linear: the INT8 path needs non-empty operands")
    xc = np.ascontiguousarray(x.reshape(M, K).T).reshape(1, K, 1, M)
    y, total = _run(
        func, xc, w.reshape(N, K, 1, 1), bias, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, activation, opts
    )
    _finish(func, total, y.size)
    return np.ascontiguousarray(y.reshape(N, M).T).reshape(batch + (N,))


def conv2d(func, x, weight, bias, stride, pad, dilation, groups, activation, opts) -> np.ndarray:
    """An NCHW convolution of int8/uint8 operands on the INT8 path (validated by the caller)."""
    y, total = _run(
        func,
        int8_operand(x, func, "input"),
        int8_operand(weight, func, "weight"),
        bias,
        stride,
        pad,
        dilation,
        groups,
        activation,
        opts,
    )
    _finish(func, total, y.size)
    return y
