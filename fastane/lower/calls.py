"""Call adapters: the numpy API's calls (already validated, fp16 operands) as lowered
programs run on a device, returning ``(y, Stats, lowered program)``.  docs/lower.md,
sections 6 and 9.
"""

from __future__ import annotations

import numpy as np

from ..kernels import layout as _klayout
from ..m1 import LIMITS, Limits
from .cache import build
from .compressed import PalettizedWeight
from .problems import Eltwise, conv_problem, fold, matmul_conv
from .runtime import execute

__all__ = ["run_conv", "run_matmul", "run_eltwise"]


def run_conv(
    x16,
    w16,
    bias16=None,
    stride=(1, 1),
    pad=((0, 0), (0, 0)),
    dilation=(1, 1),
    groups=1,
    activation=None,
    *,
    affine=None,
    device=None,
    stats_only=None,
    limits: Limits = LIMITS,
):
    """``(y, Stats, Lowered)`` of an NCHW convolution on the device (no validation: see
    :func:`fastane.conv2d`).  ``x16`` ``(N, C, H, W)`` and ``w16`` ``(CO, C/groups, KH,
    KW)`` are fp16; ``affine = (scale, shift)`` is folded into the weights and bias first
    (:func:`fold`)."""
    x16 = np.asarray(x16)
    bits = w16.bits if isinstance(w16, PalettizedWeight) else 0  # kept compressed
    if not bits:
        w16 = np.asarray(w16)
    if affine is not None:
        if bits:
            raise NotImplementedError("an affine folded into a palettized weight would decompress it")
        w16, bias16 = fold(w16, bias16, *affine)
    conv = conv_problem(
        x16.shape, w16.shape, stride, pad, dilation, groups, bias16 is not None, activation, bits
    )
    low = build(conv, limits)
    y, st = execute(low, x16, w16, bias16, device=device, stats_only=stats_only)
    return y, st, low


def run_matmul(
    a3, b3, ia, ib, *, bias16=None, activation=None, device=None, stats_only=None, limits: Limits = LIMITS
):
    """``(y, Stats, Lowered)``: ``y[i] = a3[ia[i]] @ b3[ib[i]]`` (fp16 ``(B, M, N)``) on the
    device, as 1x1 convolutions in the (B, C, 1, S) layout (:func:`~fastane.lower.problems.matmul_conv`):

    * ``b`` shared (one right operand): every left operand's rows go along S, one
      convolution with ``Cin = K``, ``Cout = N``, weights ``b^T`` (``bias16``, per N, fused);
    * ``a`` shared (one left operand, several right ones): the roles swap -- ``a`` is the
      kernel (``Cout = M``) and the right operands' columns go along S;
    * both batched: one grouped convolution with a group per product (``Cin = B K``,
      ``Cout = B N``), so a batch of attention heads is a few tasks, not one per head.
    """
    BA, M, K = a3.shape
    BB, _, N = b3.shape
    B = len(ia)
    shared, conv = matmul_conv(BA, BB, B, M, K, N, bias16 is not None, activation)
    low = build(conv, limits)
    if shared == "b":
        rows = a3.reshape(BA * M, K) if BA == B else a3[ia].reshape(B * M, K)

        def fill(v):
            _klayout.transpose(rows, v[0, :, 0, :])

        def read(v):
            out = np.empty((B * M, N), np.float16)
            _klayout.transpose(v[0, :, 0, :], out)
            return out.reshape(B, M, N)

        w = b3[0]
        y, st = execute(
            low,
            fill,
            lambda: _transposed(w).reshape(N, K, 1, 1),
            bias16,
            device=device,
            stats_only=stats_only,
            read=read,
            weight_of=w,
        )
    elif shared == "a":
        cols = b3 if BB == B else b3[ib]

        def fill(v):
            v[0, :, 0, :].reshape(K, B, N)[...] = cols.transpose(1, 0, 2)

        def read(v):
            return np.ascontiguousarray(v[0, :, 0, :].reshape(M, B, N).transpose(1, 0, 2))

        y, st = execute(
            low, fill, a3[0].reshape(M, K, 1, 1), None, device=device, stats_only=stats_only, read=read
        )
    else:
        lhs = a3 if (BA == B and np.array_equal(ia, np.arange(B))) else a3[ia]
        rhs = b3 if (BB == B and np.array_equal(ib, np.arange(B))) else b3[ib]

        def fill(v):
            _klayout.transpose(lhs, v[0, :, 0, :].reshape(B, K, M))

        def read(v):
            out = np.empty((B, M, N), np.float16)
            _klayout.transpose(v[0, :, 0, :].reshape(B, N, M), out)
            return out

        bias = None if bias16 is None else np.tile(np.asarray(bias16).reshape(-1), B)
        y, st = execute(
            low,
            fill,
            lambda: _transposed(rhs).reshape(B * N, K, 1, 1),
            bias,
            device=device,
            stats_only=stats_only,
            read=read,
            weight_of=rhs,
        )
    return y, st, low


def run_eltwise(x16, activation, *, device=None, stats_only=None, limits: Limits = LIMITS):
    """``(y, Stats, LoweredEltwise)``: ``activation`` (a name of :mod:`fastane.activations`,
    ``"relu"``, or a :class:`fastane.lut.CoeffBlock`) applied to the fp16 array ``x16`` (any
    shape, at least one element) by an elementwise program on the device.

    The lowering follows Apple's elementwise programs (corpus ``unary/tanh.bin``,
    ``unary/sigmoid.bin``, ``activation/silu.bin``), per tile of the flattened tensor:

    * relu and every single-stage LUT activation: **one NE task**, ``KernelMode = 1`` (the
      input passes the MAC array unchanged), ``NonlinearMode`` 1 (relu) or 2 with the
      activation's 43-word block in core 0's KMem, ``PostScale`` (exp: 0x3dc5), DRAM to DRAM;
    * sigmoid: the NE task with the sigmoid - 0.5 table keeps its result in L2, then a
      **planar task** (Word 0 = 0x0, scale 1, offset 0.5) writes ``round16(L + 0.5)``;
    * silu: as sigmoid, but the planar +0.5 writes the sigmoid to an intermediate slot (3),
      and a **planar multiply** (0x80004) of the input (slot 5) by it (slot 3) writes the
      output, as Apple's silu program does;
    * hard_swish: silu's chain without the +0.5: the NE task with the hard-sigmoid block
      writes the gate to the intermediate slot (3), the planar multiply writes the output.
    """
    x16 = np.asarray(x16)
    low = build(Eltwise(int(x16.size), activation), limits)
    y, st = execute(
        low, x16, device=device, stats_only=stats_only, read=lambda v: v.reshape(x16.shape).copy()
    )
    return y, st, low


def _transposed(x: np.ndarray) -> np.ndarray:
    """``swapaxes(x, -1, -2)`` as a C-contiguous fp16 array (the weights ``B^T``)."""
    x = np.asarray(x, np.float16)
    if x.ndim >= 2 and x.strides[-2] == x.itemsize and x.size:  # already a transposed view
        return np.ascontiguousarray(np.swapaxes(x, -1, -2))
    out = np.empty(x.shape[:-2] + (x.shape[-1], x.shape[-2]), np.float16)
    _klayout.transpose(x, out)
    return out
