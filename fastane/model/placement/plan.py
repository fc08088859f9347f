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

:func:`chains` adds residency to the stats-only plan: runs of convolution/matmul layers
where each reads the previous one's output, and nothing else does, are lowered as one
chain (:func:`fastane.lower.chain.plan_chain`), keeping each intermediate in L2 where it
fits.  A computed run does not chain: it lowers layer by layer through DRAM (the values
are the same either way, docs/lower.md section 10).
"""

from __future__ import annotations

import math

from ... import lower as _lower
from ...lower import chain as _chain
from ...lower.problems import conv_problem, linear_problem, matmul_problem
from ...roofline.model import sum_stats
from ...stats import Stats

__all__ = ["conv", "linear", "matmul", "eltwise", "binary", "composed", "problem_stats", "chains"]


def problem_stats(problem) -> Stats:
    """The Stats of ``problem``'s program (a :class:`~fastane.lower.Conv` or an
    :class:`~fastane.lower.Eltwise`) on the stats-only device; none for None (nothing to
    compute)."""
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
    return problem_stats(None if c.empty else c)


def linear(x_shape, n_out: int, bias: bool, activation, kernel_bits: int = 0) -> Stats:
    """``fastane.linear`` of ``x`` (..., K) with ``n_out`` outputs (``kernel_bits``: see
    :func:`conv`)."""
    return problem_stats(linear_problem(x_shape, n_out, bias, activation, kernel_bits))


def matmul(a_shape, b_shape, activation) -> Stats:
    """``fastane.matmul`` of operands of these shapes (np.matmul semantics)."""
    problem = matmul_problem(a_shape, b_shape, activation)
    return problem_stats(None if problem is None else problem[1])


def eltwise(shape, activation) -> Stats:
    """An activation of :mod:`fastane.activations` over a tensor of ``shape``."""
    n = math.prod(shape)
    return problem_stats(_lower.Eltwise(n, activation) if n else None)


def binary(shape, op: str, relu: bool = False) -> Stats:
    """A :mod:`fastane.lower.binary` op (``op`` a key of its :data:`~fastane.lower.binary.OPS` or
    :data:`~fastane.lower.binary.UNARY`) whose result has ``shape``; ``relu``: with the NE
    task of a ReLU after it (``binary(..., activation="relu")``)."""
    from ...lower import binary as _binary

    return _binary.plan(shape, op, relu)


def composed(shape, name: str) -> Stats:
    """A composition of :data:`fastane.lower.binary.COMPOSED` over a tensor of ``shape``:
    its stages' programs, in order."""
    from ...lower.binary import COMPOSED

    total = Stats()
    for stage, arg in COMPOSED[name]:
        total = total + (eltwise(shape, arg) if stage == "table" else binary(shape, stage))
    return total


def _tail(a, b, types):
    """The :class:`~fastane.lower.chain.Tail` layer ``b`` is on the result of layer ``a``
    (an add, add + ReLU or multiply on the ANE whose one operand is ``a``'s one output,
    the other of the same shape: no broadcast), or None."""
    n = b.nodes[0]
    if b.placement != "ane" or b.call not in _chain.TAIL_OPS or len(a.outputs) != 1 or len(n.inputs) != 2:
        return None
    out = a.outputs[0]
    if n.inputs.count(out) != 1:
        return None
    if len({tuple(types[t].shape) for t in n.inputs}) != 1:
        return None
    return _chain.Tail(b.call, len(b.nodes) == 2 and b.nodes[1].op == "relu")


def chains(layers, outputs, types) -> dict:
    """The stats-only plans of the placed ``layers`` that chain, ``{index: (Stats,
    source_in_l2, result_in_l2)}``.  Layer ``i + 1`` chains with layer ``i`` when both
    are on the ANE as one convolution (:attr:`~fastane.model.placement.place.Layer.problem`),
    the source of ``i + 1`` (its first node's first input) is the one output of ``i``, read
    once (not also as a weight), and no other layer reads that output nor is it one of the
    model's ``outputs``.  Each run of
    such layers is lowered as a whole (:func:`fastane.lower.chain.plan_chain`); a run that
    does not chain (shapes that do not join, a layer past the lowering's limits) is left
    out, its layers planned one by one.  From ``types`` (the bound graph's), a run (or a
    single convolution) whose result only an add, add + ReLU or multiply of the same shape
    reads ends in that layer as its tail (:class:`~fastane.lower.chain.Tail`: it reads
    the result in L2, its other operand from DRAM) where the chain rules allow."""
    readers: dict = {}
    for layer in layers:
        for t in layer.inputs:
            readers[t] = readers.get(t, 0) + 1
    probs = [layer.problem() if layer.placement == "ane" and layer.problem else None for layer in layers]
    probs = [None if p is None or p.empty else p for p in probs]

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

    def tail(i):  # layer i + 1 a planar op on layer i's result, which nothing else reads
        a = layers[i]
        ok = probs[i] is not None and readers.get(a.outputs[0]) == 1 and a.outputs[0] not in outputs
        return _tail(a, layers[i + 1], types) if ok else None

    links = [link(i) for i in range(len(layers) - 1)]
    tails = {i: t for i in range(len(layers) - 1) if (t := tail(i)) is not None}
    out: dict = {}
    memo: dict = {}
    for start, stop in _runs_to_tails(links, tails):
        key = (tuple(probs[start:stop]), tails.get(stop - 1))
        if key not in memo:
            try:
                memo[key] = _chain.plan_chain(*key[:1], tail=key[1])
            except (ValueError, NotImplementedError, MemoryError):
                memo[key] = None
        for i, (tasks, src, res) in zip(range(start, stop + 1), memo[key] or ()):
            out[i] = (sum_stats(tasks), src, res)
    return out


def _runs_to_tails(links, tails) -> list:
    """The runs :func:`fastane.lower.chain.runs` finds, and the single layers a tail
    follows, ``[(start, stop)]`` (the tail, if any, at ``stop``)."""
    found = _chain.runs(links)
    ends = {stop - 1 for _, stop in found}
    starts = {i for start, stop in found for i in range(start, stop)}
    return sorted(found + [(i, i + 1) for i in tails if i not in starts and i not in ends])
