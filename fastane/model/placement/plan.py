"""Stats-only planning of a model's ANE layers: the same programs the run would submit,
lowered from the shapes alone and run on the lowering's stats-only device (counting, not
computing: no weights or activations needed).

Each function mirrors what the public entry point the layer calls would lower
(:func:`fastane.conv2d`, :func:`fastane.linear`, :func:`fastane.matmul`, the activations,
:mod:`fastane.lower.binary`), so the Stats equal those of a computed run (a test checks it).

:func:`chains` adds residency to the stats-only plan: runs of convolution/matmul layers
where each reads the previous one's output, and nothing else does, are lowered as one
chain (:func:`fastane.lower.chain.plan_chain`, as the roofline's layer-shape plan does),
keeping each intermediate in L2 where it fits.  A computed run does not chain: it lowers
layer by layer through DRAM (the values are the same either way, docs/lower.md section 10).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ... import lower as _lower
from ...lower import chain as _chain
from ...stats import Stats

__all__ = [
    "conv",
    "linear",
    "matmul",
    "eltwise",
    "binary",
    "conv_problem",
    "linear_problem",
    "matmul_problem",
    "problem_stats",
    "chains",
]


def _run(low) -> Stats:
    _, st = _lower.execute(low, device=_lower.stats_device(), stats_only=True)
    return st


def problem_stats(c) -> Stats:
    """The Stats of one :class:`~fastane.lower.Conv` (None: an empty product, no task)."""
    return Stats() if c is None else _run(_lower.build(c))


def conv(
    x_shape, w_shape, stride, pads, dilation, groups, bias: bool, activation, kernel_bits: int = 0
) -> Stats:
    """A conv2d (``x_shape`` N C H W) or conv1d (N C W) with ``pads`` ((b, e), ...);
    ``kernel_bits``: a weight kept compressed in KMem with codes of that many bits."""
    return problem_stats(
        conv_problem(x_shape, w_shape, stride, pads, dilation, groups, bias, activation, kernel_bits)
    )


def conv_problem(
    x_shape, w_shape, stride, pads, dilation, groups, bias: bool, activation, kernel_bits: int = 0
):
    """The :class:`~fastane.lower.Conv` :func:`conv` lowers (None: an empty one)."""
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
        return None
    return c


def linear(x_shape, n_out: int, bias: bool, activation, kernel_bits: int = 0) -> Stats:
    """``fastane.linear`` of ``x`` (..., K) with ``n_out`` outputs (``kernel_bits``: see
    :func:`conv`)."""
    return problem_stats(linear_problem(x_shape, n_out, bias, activation, kernel_bits))


def linear_problem(x_shape, n_out: int, bias: bool, activation, kernel_bits: int = 0):
    """The :class:`~fastane.lower.Conv` :func:`linear` lowers (None: an empty one)."""
    M, K = math.prod(x_shape[:-1]), x_shape[-1]
    if M * n_out == 0 or K == 0:
        return None
    c = _lower.Conv.matmul(M, K, n_out, 1, bias, activation)
    if kernel_bits:
        c = dataclasses.replace(c, kernel_bits=kernel_bits)
    return c


def matmul(a_shape, b_shape, activation) -> Stats:
    """``fastane.matmul`` of operands of these shapes (np.matmul semantics)."""
    return problem_stats(matmul_problem(a_shape, b_shape, activation))


def matmul_problem(a_shape, b_shape, activation):
    """The :class:`~fastane.lower.Conv` :func:`matmul` lowers (None: an empty one)."""
    A = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    B = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    (M, K), N = A[-2:], B[-1]
    batch = np.broadcast_shapes(A[:-2], B[:-2])
    nb, ba, bb = math.prod(batch), math.prod(A[:-2]), math.prod(B[:-2])
    if nb * M * N == 0 or K == 0:
        return None
    if bb == 1:
        return _lower.Conv.matmul(nb * M, K, N, 1, False, activation)
    if ba == 1:
        return _lower.Conv.matmul(nb * N, K, M, 1, False, activation)
    return _lower.Conv.matmul(M, K, N, nb, False, activation)


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


def _total(tasks) -> Stats:
    out = Stats()
    for t in tasks:
        out = out.plus_counts(t)
    out.tasks_detail = list(tasks)
    return out


def chains(layers, outputs) -> dict:
    """The stats-only plans of the placed ``layers`` that chain, ``{index: (Stats,
    source_in_l2, result_in_l2)}``.  Layer ``i + 1`` chains with layer ``i`` when both
    are on the ANE as one convolution (:attr:`~fastane.model.placement.place.Layer.problem`),
    the source of ``i + 1`` (its first node's first input) is the one output of ``i``, read
    once (not also as a weight), and no other layer reads that output nor is it one of the
    model's ``outputs``.  Each run of
    such layers is lowered as a whole (:func:`fastane.lower.chain.plan_chain`); a run that
    does not chain (shapes that do not join, a layer past the lowering's limits) is left
    out, its layers planned one by one."""
    readers: dict = {}
    for layer in layers:
        for t in layer.inputs:
            readers[t] = readers.get(t, 0) + 1
    probs = [layer.problem() if layer.placement == "ane" and layer.problem else None for layer in layers]

    def link(i):
        a, b = layers[i], layers[i + 1]
        return (
            probs[i] is not None
            and probs[i + 1] is not None
            and len(a.outputs) == 1
            and b.nodes[0].inputs[0] == a.outputs[0]
            and sum(t == a.outputs[0] for n in b.nodes for t in n.inputs) == 1  # read once, as the source
            and readers.get(a.outputs[0]) == 1
            and a.outputs[0] not in outputs
        )

    out: dict = {}
    memo: dict = {}
    for start, stop in _chain.runs([link(i) for i in range(len(layers) - 1)]):
        key = tuple(probs[start:stop])
        if key not in memo:
            try:
                memo[key] = _chain.plan_chain(key)
            except (ValueError, NotImplementedError, MemoryError):
                memo[key] = None
        for i, (tasks, src, res) in zip(range(start, stop), memo[key] or ()):
            out[i] = (_total(tasks), src, res)
    return out
