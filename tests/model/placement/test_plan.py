"""Stats-only planning (fastane.model.placement.plan) against the public entry points run
with data: the same programs, so the same counters, for every branch of the problems they
share (fastane.lower.conv_problem, linear_problem, matmul_problem, binary.lowered)."""

import numpy as np
import pytest

import fastane
from fastane.lower import binary as B
from fastane.lower import problems
from fastane.model.placement import plan
from fastane.stats import Stats

#: counters of the program, not of the data (saturations and LUT range events are counted
#: only when computing)
COUNTERS = (
    "tasks",
    "macs",
    "int8_macs",
    "planar_ops",
    "control_dma_bytes",
    "kernel_dma_bytes",
    "tile_dma_src_bytes",
    "tile_dma_dst_bytes",
    "dram_bytes",
)


def counted(st: Stats) -> dict:
    return {k: getattr(st, k) for k in COUNTERS} | {
        "tasks_detail": [{k: getattr(t, k) for k in COUNTERS} for t in st.tasks_detail]
    }


def data(*shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float16)


def ran(call) -> Stats:
    call()
    return fastane.last_stats()


#: (id, the call with data, its stats-only plan)
CONV = [
    (
        "conv2d",
        lambda: fastane.conv2d(data(2, 4, 9, 7), data(6, 4, 3, 3)),
        lambda: plan.conv((2, 4, 9, 7), (6, 4, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, False, None),
    ),
    (
        "conv2d-strided-padded-dilated-bias-gelu",
        lambda: fastane.conv2d(
            data(1, 3, 12, 10), data(5, 3, 3, 2), data(5), (2, 1), (1, 2), (1, 2), 1, "gelu"
        ),
        lambda: plan.conv((1, 3, 12, 10), (5, 3, 3, 2), (2, 1), ((1, 1), (2, 2)), (1, 2), 1, True, "gelu"),
    ),
    (
        "conv2d-grouped-silu",
        lambda: fastane.conv2d(data(1, 8, 6, 6), data(4, 4, 3, 3), None, 1, 1, 1, 2, "silu"),
        lambda: plan.conv((1, 8, 6, 6), (4, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2, False, "silu"),
    ),
    (
        "conv2d-depthwise-sigmoid",
        lambda: fastane.conv2d(data(1, 8, 6, 6), data(8, 1, 3, 3), data(8), 1, 1, 1, 8, "sigmoid"),
        lambda: plan.conv((1, 8, 6, 6), (8, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 8, True, "sigmoid"),
    ),
    (
        "conv2d-compressed",
        lambda: fastane.conv2d(data(1, 16, 5, 5), fastane.palettize(data(8, 16, 3, 3), 4), data(8)),
        lambda: plan.conv((1, 16, 5, 5), (8, 16, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, True, None, 4),
    ),
    (
        "conv2d-empty",
        lambda: fastane.conv2d(data(0, 4, 5, 5), data(4, 4, 3, 3)),
        lambda: plan.conv((0, 4, 5, 5), (4, 4, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1, False, None),
    ),
    (
        "conv1d",
        lambda: fastane.conv1d(data(2, 4, 20), data(6, 4, 3), data(6), 2, 1, 1, 1, "relu"),
        lambda: plan.conv((2, 4, 20), (6, 4, 3), (2,), ((1, 1),), (1,), 1, True, "relu"),
    ),
    (
        "conv1d-grouped-dilated",
        lambda: fastane.conv1d(data(1, 6, 17), data(9, 2, 3), None, 1, 2, 2, 3),
        lambda: plan.conv((1, 6, 17), (9, 2, 3), (1,), ((2, 2),), (2,), 3, False, None),
    ),
    (
        "conv1d-compressed",
        lambda: fastane.conv1d(data(1, 8, 12), fastane.palettize(data(4, 8, 3), 2)),
        lambda: plan.conv((1, 8, 12), (4, 8, 3), (1,), ((0, 0),), (1,), 1, False, None, 2),
    ),
]

LINEAR = [
    (
        "linear-bias-relu",
        lambda: fastane.linear(data(3, 5, 7), data(6, 7), data(6), "relu"),
        lambda: plan.linear((3, 5, 7), 6, True, "relu"),
    ),
    (
        "linear-compressed",
        lambda: fastane.linear(data(4, 16), fastane.palettize(data(8, 16), 3), data(8), "tanh"),
        lambda: plan.linear((4, 16), 8, True, "tanh", 3),
    ),
    (
        "linear-int8-codes",
        lambda: fastane.linear(data(4, 16), fastane.quantize(data(8, 16))),
        lambda: plan.linear((4, 16), 8, False, None, 8),
    ),
    (
        "linear-empty",
        lambda: fastane.linear(data(0, 7), data(6, 7), data(6)),
        lambda: plan.linear((0, 7), 6, True, None),
    ),
]

#: (a's shape, b's shape): one product, 1-D operands, b shared, a shared, both batched
#: (also through broadcasting), an empty batch
MATMUL = [
    ((4, 5), (5, 6)),
    ((5,), (5, 6)),
    ((4, 5), (5,)),
    ((2, 3, 4, 5), (5, 6)),
    ((4, 5), (3, 5, 6)),
    ((1, 4, 5), (3, 5, 6)),
    ((3, 4, 5), (3, 5, 6)),
    ((2, 1, 4, 5), (1, 3, 5, 6)),
    ((3, 4, 5), (1, 5, 6)),
    ((0, 4, 5), (5, 6)),
]

ELTWISE = [((3, 70), "tanh"), ((2, 5, 9), "sigmoid"), ((100,), "silu"), ((4, 4), "relu"), ((0, 3), "tanh")]

BINARY = [
    ((3, 40), "add", False),
    ((3, 40), "add", True),
    ((7,), "sub", False),
    ((2, 9), "mul", True),
    ((5, 5), "maximum", False),
    ((33,), "absolute", False),
    ((4, 8), "negative", False),
    ((6,), "square", False),
    ((0, 4), "add", False),
]


@pytest.mark.parametrize("run, planned", [c[1:] for c in CONV + LINEAR], ids=[c[0] for c in CONV + LINEAR])
def test_conv_and_linear_plans_count_what_the_call_runs(run, planned):
    assert counted(planned()) == counted(ran(run))


@pytest.mark.parametrize("a_shape, b_shape", MATMUL)
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_matmul_plans_count_what_the_call_runs(a_shape, b_shape, activation):
    a, b = data(*a_shape), data(*b_shape, seed=1)
    got = counted(plan.matmul(a_shape, b_shape, activation))
    assert got == counted(ran(lambda: fastane.matmul(a, b, activation=activation)))


def test_matmul_batching_rule_is_the_runs():
    """Each branch of the rule (which operand is shared) is covered above."""
    shared = {problems.matmul_problem(a, b)[0] for a, b in MATMUL if np.prod(a) and np.prod(b)}
    assert shared == {"a", "b", ""}


@pytest.mark.parametrize("shape, activation", ELTWISE)
def test_eltwise_plans_count_what_the_activation_runs(shape, activation):
    x = data(*shape)
    assert counted(plan.eltwise(shape, activation)) == counted(ran(lambda: getattr(fastane, activation)(x)))


@pytest.mark.parametrize("shape, op, relu", BINARY)
def test_binary_plans_count_what_the_planar_op_runs(shape, op, relu):
    a, b = data(*shape), data(*shape, seed=1)
    if op in B.UNARY:
        call = lambda: B.unary(op, a)  # noqa: E731
    else:
        call = lambda: B.binary(op, a, b, activation="relu" if relu else None)  # noqa: E731
    assert counted(plan.binary(shape, op, relu)) == counted(ran(call))


@pytest.mark.parametrize("name", sorted(B.COMPOSED))
@pytest.mark.parametrize("shape", [(3, 70), (1,), (0, 5)])
def test_composed_plans_count_what_the_composition_runs(name, shape):
    x = np.abs(data(*shape)) + np.float16(0.5)
    assert counted(plan.composed(shape, name)) == counted(ran(lambda: B.composed(name, x)))
