"""The MAC array and the NE on the INT8 path: one task's integer convolution (or
pass-through) and its NE stage, as :mod:`fastane.device.int8` decides them.

The engine plans an INT8 task like any other (the checks of :func:`fastane.device.int8.check_task`
run in the MAC block's geometry, TileDMA checks ``MemFmt``, KernelDMA loads the integer
kernel: one byte a weight, so twice the output channels per KMem byte of the FP16 path, by
the one layout rule :func:`fastane.m1.kernel_layout`), then calls :func:`run` with the
source TileDMASrc read (integers as float64) and the kernel decoded out of KMem.
"""

from __future__ import annotations

import numpy as np

from fastane.kernels import mac_int8 as _k

from . import int8
from .mac import CONV
from .ne import RELU, NEConfig

__all__ = ["is_int8", "run", "coefficients"]


def is_int8(p) -> bool:
    """Whether the planned task ``p`` (an engine TaskPlan) runs on the INT8 path."""
    return not p.is_planar and int8.is_int(p.geometry.in_fmt)


def coefficients(regs: dict, cfg: NEConfig, c: int, kmem) -> tuple:
    """``(bias, scale)`` of the NE on the INT8 path for ``c`` output channels: the bias in
    accumulator units per channel (decision 2: ``AccBias`` or the KMem vector as int16,
    times ``2**AccBiasShift``; empty without ``BiasMode``), and ``PostScale *
    2**-PostRightShift`` (decision 3; exact)."""
    shift = regs["NE.AccBias.AccBiasShift"]
    if cfg.bias_vector:
        m, off = cfg.per_core, cfg.bias_offset
        lanes = -(-c // m)
        raw = kmem.data[:lanes, off : off + 2 * m].copy().view("<i2").reshape(-1)[:c]
        bias = raw.astype(np.float64) * float(2**shift)  # exact: |v| <= 2**15 * 2**31
    elif cfg.bias_mode:
        bias = np.full(c, float(int8.acc_bias(cfg.acc_bias, shift)))
    else:
        bias = np.zeros(0)
    scale = cfg.f16(cfg.post_scale) * 2.0 ** -regs["NE.PostScale.PostRightShift"]
    return bias, scale


def run(p, x: np.ndarray, w, kmem) -> tuple:
    """``(values, saturated, nan_outputs)`` of an INT8 task: ``values`` float64
    ``[1, Cout, Hout, Wout]`` exact in the output format (integers, or fp16 values),
    what TileDMADst writes.  ``x``: the source ``[1, Cin, Hin, Win]`` (integers as float64),
    ``w``: the kernel ``[Cout, Cin/groups, Kh, Kw]`` (integers as float64; None for a
    pass-through task)."""
    g, cfg, regs = p.geometry, p.ne, p.regs
    if g.mode == CONV:
        acc, flag = _k.conv2d_int(
            np.ascontiguousarray(x), np.ascontiguousarray(w), g.sy, g.sx, g.dy, g.dx,
            g.pad_top, g.pad_left, g.hout, g.wout, g.groups,
        )  # fmt: skip
    else:  # a pass-through: the integers are the accumulators
        acc = np.ascontiguousarray(x, dtype=np.float64)
        flag = np.zeros(acc.shape, np.int8)
    c = g.cout
    bias, scale = coefficients(regs, cfg, c, kmem)
    lo, hi = int8.output_range(g.out_fmt)
    out = np.empty((c, acc.size // max(c, 1)))
    counts = np.zeros(2, np.int64)
    _k.ne_int(
        acc.reshape(out.shape),
        flag.reshape(out.shape),
        bias,
        scale,
        cfg.nonlinear == RELU,
        int8.is_int(g.out_fmt),
        float(lo),
        float(hi),
        float(int8.NAN_TO_INT),
        out,
        counts,
    )
    return out.reshape(1, c, g.hout, g.wout), int(counts[0]), int(counts[1])
