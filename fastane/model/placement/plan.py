"""Stats-only planning of a model's ANE layers: the same programs the run would submit,
lowered from the shapes alone and run on the lowering's stats-only device (counting, not
computing: no weights or activations needed).

Each function mirrors what the public entry point the layer calls would lower
(:func:`fastane.conv2d`, :func:`fastane.linear`, :func:`fastane.matmul`, the activations,
:mod:`fastane.lower.binary`), so the Stats equal those of a computed run (a test checks it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ... import lower as _lower
from ...stats import Stats

__all__ = ["conv", "linear", "matmul", "eltwise", "binary"]


def _run(low) -> Stats:
    _, st = _lower.execute(low, device=_lower.stats_device(), stats_only=True)
    return st


def conv(
    x_shape, w_shape, stride, pads, dilation, groups, bias: bool, activation, kernel_bits: int = 0
) -> Stats:
    """A conv2d (``x_shape`` N C H W) or conv1d (N C W) with ``pads`` ((b, e), ...);
    ``kernel_bits``: a weight kept compressed in KMem with codes of that many bits."""
    if len(x_shape) == 3:
        x_shape = (x_shape[0], x_shape[1], 1, x_shape[2])
        w_shape = (w_shape[0], w_shape[1], 1, w_shape[2])
        stride, dilation, pads = (1, *stride), (1, *dilation), ((0, 0), *pads)
    N, C, H, W = x_shape
    CO, CG, KH, KW = w_shape
    c = _lower.Conv(
        N,
        C,
        H,
        W,
        CO,
        KH,
        KW,
        tuple(stride),
        tuple(dilation),
        tuple(tuple(p) for p in pads),
        groups,
        bias,
        activation,
        kernel_bits,
    )
    if N * CO * c.hout * c.wout == 0 or CG * KH * KW == 0:
        return Stats()
    return _run(_lower.build(c))


def linear(x_shape, n_out: int, bias: bool, activation, kernel_bits: int = 0) -> Stats:
    """``fastane.linear`` of ``x`` (..., K) with ``n_out`` outputs (``kernel_bits``: see
    :func:`conv`)."""
    M, K = math.prod(x_shape[:-1]), x_shape[-1]
    if M * n_out == 0 or K == 0:
        return Stats()
    c = _lower.Conv.matmul(M, K, n_out, 1, bias, activation)
    if kernel_bits:
        c = dataclasses.replace(c, kernel_bits=kernel_bits)
    return _run(_lower.build(c))


def matmul(a_shape, b_shape, activation) -> Stats:
    """``fastane.matmul`` of operands of these shapes (np.matmul semantics)."""
    A = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    B = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    (M, K), N = A[-2:], B[-1]
    batch = np.broadcast_shapes(A[:-2], B[:-2])
    nb, ba, bb = math.prod(batch), math.prod(A[:-2]), math.prod(B[:-2])
    if nb * M * N == 0 or K == 0:
        return Stats()
    if bb == 1:
        c = _lower.Conv.matmul(nb * M, K, N, 1, False, activation)
    elif ba == 1:
        c = _lower.Conv.matmul(nb * N, K, M, 1, False, activation)
    else:
        c = _lower.Conv.matmul(M, K, N, nb, False, activation)
    return _run(_lower.build(c))


def eltwise(shape, activation) -> Stats:
    """An activation of :mod:`fastane.activations` over a tensor of ``shape``."""
    n = math.prod(shape)
    if n == 0:
        return Stats()
    return _run(_lower.build(_lower.Eltwise(n, activation)))


def binary(shape, op: str, relu: bool = False) -> Stats:
    """A :mod:`fastane.lower.binary` op (``op`` a key of its :data:`~fastane.lower.binary.OPS` or
    :data:`~fastane.lower.binary.UNARY`) whose result has ``shape``; ``relu``: with the NE
    task of a ReLU after it (``binary(..., activation="relu")``)."""
    from ...lower import binary as _binary

    n = math.prod(shape)
    if n == 0:
        return Stats()
    return _binary.plan(n, _binary.OPS.get(op) or _binary.UNARY[op], relu)
