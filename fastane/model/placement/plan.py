"""Stats-only planning of a model's ANE layers: the same programs the run would submit,
lowered from the shapes alone and run on the lowering's stats-only device (counting, not
computing: no weights or activations needed).

A thin layer with no geometry of its own: each function counts the problem the public
entry point the layer calls builds from its operands' shapes
(:func:`~fastane.lower.problems.conv_problem` for :func:`fastane.conv2d` and
:func:`fastane.conv1d`, :func:`~fastane.lower.problems.linear_problem`,
:func:`~fastane.lower.problems.matmul_problem`, an :class:`~fastane.lower.Eltwise` for the
activations, :func:`fastane.lower.binary.lowered`), so the Stats equal those of a computed
run (tests/model/placement/test_plan.py checks each call).
"""

from __future__ import annotations

import math

from ... import lower as _lower
from ...lower.problems import conv_problem, linear_problem, matmul_problem
from ...stats import Stats

__all__ = ["conv", "linear", "matmul", "eltwise", "binary"]


def _count(problem) -> Stats:
    """The Stats of ``problem``'s program on the stats-only device; none for None (nothing
    to compute)."""
    if problem is None:
        return Stats()
    _, st = _lower.execute(_lower.build(problem), device=_lower.stats_device(), stats_only=True)
    return st


def conv(
    x_shape, w_shape, stride, pads, dilation, groups, bias: bool, activation, kernel_bits: int = 0
) -> Stats:
    """A conv2d (``x_shape`` N C H W) or conv1d (N C W) with ``pads`` ((b, e), ...);
    ``kernel_bits``: a weight kept compressed in KMem with codes of that many bits."""
    c = conv_problem(x_shape, w_shape, stride, pads, dilation, groups, bias, activation, kernel_bits)
    return _count(None if c.empty else c)


def linear(x_shape, n_out: int, bias: bool, activation, kernel_bits: int = 0) -> Stats:
    """``fastane.linear`` of ``x`` (..., K) with ``n_out`` outputs (``kernel_bits``: see
    :func:`conv`)."""
    return _count(linear_problem(x_shape, n_out, bias, activation, kernel_bits))


def matmul(a_shape, b_shape, activation) -> Stats:
    """``fastane.matmul`` of operands of these shapes (np.matmul semantics)."""
    problem = matmul_problem(a_shape, b_shape, activation)
    return _count(None if problem is None else problem[1])


def eltwise(shape, activation) -> Stats:
    """An activation of :mod:`fastane.activations` over a tensor of ``shape``."""
    n = math.prod(shape)
    return _count(_lower.Eltwise(n, activation) if n else None)


def binary(shape, op: str, relu: bool = False) -> Stats:
    """A :mod:`fastane.lower.binary` op (``op`` a key of its :data:`~fastane.lower.binary.OPS` or
    :data:`~fastane.lower.binary.UNARY`) whose result has ``shape``; ``relu``: with the NE
    task of a ReLU after it (``binary(..., activation="relu")``)."""
    from ...lower import binary as _binary

    return _binary.plan(shape, op, relu)
