"""The cost of the one path: the numpy API lowered to TDs and run on the device, against
the same MAC kernels called directly (pytest-benchmark).

    .venv/bin/python -m pytest bench/bench_api.py --benchmark-only

* ``test_matmul_512``: ``fastane.matmul`` of two 512 x 512 fp16 matrices (one task on
  the device) against (a) ``direct``: what the front end did before the lowering --
  operands to float64, ``matmul_q16``, ``readout``, fp16 result -- and (b) ``kernel``:
  ``matmul_q16`` + ``readout`` alone on prepared float64 operands.  The three are timed
  interleaved, round by round, and the medians compared (the machine is shared and
  noisy: only the ratios within one run mean something).
* ``test_tiny``: per-call cost of a 4 x 4 matmul, a 1 x 1 conv and a linear layer
  (dominated by the lowering cache look-up, the task manager and the engine's checks).
* ``test_attention_batched``: ``(32, 128, 64) @ (32, 64, 128)``: one grouped convolution
  (a few tasks), not 32 of them.
* ``test_stats_only``: the lowering run stats-only over a whole workload (every cache
  cleared first), the planner behind ``fastane roofline``.
* ``test_activation``: ``fastane.tanh`` and ``fastane.silu`` on 1000 and 2**20 elements
  (elementwise programs on the device) against the NE kernel called directly, as
  ``fastane.activations`` computed before the one path; interleaved medians.
* ``test_moves``: data movement as pass-through tasks on the device (``fastane.lower.moves``,
  docs/lower.md section 13) -- a concat of two ``1 x 256 x 56 x 56`` fp16 tensors along
  channels, attention's ``(1, 197, 12, 64) -> (1, 12, 197, 64)`` transpose and its
  ``(1, 197, 3, 64)`` one at a smaller width -- against numpy; interleaved medians.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

import fastane
from fastane import lower, workloads
from fastane.kernels import mac
from fastane.lower import moves
from fastane.networks.plan import analyze


def _direct_matmul(a16, b16):
    """The pre-lowering front end: fp16 operands -> float64 -> kernels -> fp16."""
    a = a16.astype(np.float64).reshape((-1,) + a16.shape[-2:])
    b = b16.astype(np.float64).reshape((-1,) + b16.shape[-2:])
    idx = np.arange(len(a), dtype=np.int64)
    acc, flag = mac.matmul_q16(a, b, idx, idx if len(b) == len(a) else idx * 0, False)
    y = np.empty(acc.shape)
    mac.readout(acc.reshape(-1), flag.reshape(-1), y.reshape(-1))
    isnan = np.isnan(acc)
    int(np.count_nonzero((flag != 0) & ~isnan))
    return y.astype(np.float16).reshape(a16.shape[:-1] + b16.shape[-1:])


def _interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds of each function, timed round-robin (one call each per round)."""
    times = {k: [] for k in fns}
    for f in fns.values():
        f()
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def test_matmul_512(benchmark, smoke, note):
    rng = np.random.default_rng(0)
    a16 = rng.standard_normal((512, 512)).astype(np.float16)
    b16 = rng.standard_normal((512, 512)).astype(np.float16)
    a, b = a16.astype(np.float64)[None], b16.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    out = np.empty(512 * 512)

    def kernel():
        acc, flag = mac.matmul_q16(a, b, z, z, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)

    y = fastane.matmul(a16, b16)
    assert np.array_equal(y.view(np.uint16), _direct_matmul(a16, b16).view(np.uint16))
    assert fastane.last_stats().tasks == 1
    med = _interleaved(
        {
            "device": lambda: fastane.matmul(a16, b16),
            "direct": lambda: _direct_matmul(a16, b16),
            "kernel": kernel,
        },
        1 if smoke else 21,
    )
    info = {f"{k}_ms": v * 1e3 for k, v in med.items()}
    info["overhead_vs_direct_pct"] = 100 * (med["device"] / med["direct"] - 1)
    info["overhead_vs_kernel_pct"] = 100 * (med["device"] / med["kernel"] - 1)
    benchmark.extra_info.update(info)
    benchmark.pedantic(lambda: fastane.matmul(a16, b16), rounds=1 if smoke else 11, iterations=1)
    note(
        f"matmul 512^3: device {info['device_ms']:.2f} ms, direct kernels {info['direct_ms']:.2f} ms "
        f"({info['overhead_vs_direct_pct']:+.1f}%), kernel alone {info['kernel_ms']:.2f} ms "
        f"({info['overhead_vs_kernel_pct']:+.1f}%), interleaved medians"
    )


_TINY = {
    "matmul_4x4": lambda: fastane.matmul(_T4, _T4),
    "conv2d_1x1": lambda: fastane.conv2d(_X, _W),
    "linear_8_relu": lambda: fastane.linear(_L, _LW, _LB, activation="relu"),
}
_T4 = np.ones((4, 4), np.float16)
_X = np.ones((1, 8, 4, 4), np.float16)
_W = np.ones((3, 8, 1, 1), np.float16)
_L = np.ones((2, 8), np.float16)
_LW = np.ones((8, 8), np.float16)
_LB = np.ones(8, np.float16)


@pytest.mark.parametrize("name", list(_TINY))
def test_tiny(benchmark, smoke, note, name):
    fn = _TINY[name]
    for _ in range(20):
        fn()  # lowered once, buffers bound, Numba warm
    a64 = _T4.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    kernel = _interleaved(
        {"k": lambda: mac.readout(*mac.matmul_q16(a64, a64, z, z, False), np.empty((1, 4, 4)))},
        1 if smoke else 200,
    )["k"]
    benchmark.pedantic(fn, rounds=1 if smoke else 300, iterations=1, warmup_rounds=0 if smoke else 10)
    if not smoke:
        med = benchmark.stats.stats.median
        benchmark.extra_info.update(us_per_call=med * 1e6, kernel_4x4_us=kernel * 1e6)
        note(
            f"tiny call {name}: {med * 1e6:.0f} us per call (median; a 4x4 matmul kernel "
            f"alone: {kernel * 1e6:.0f} us)"
        )


def test_attention_batched(benchmark, smoke, note):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((32, 128, 64)).astype(np.float16)
    k = rng.standard_normal((32, 64, 128)).astype(np.float16)
    a, b = q.astype(np.float64), k.astype(np.float64)
    idx = np.arange(32, dtype=np.int64)

    def kernel():
        acc, flag = mac.matmul_q16(a, b, idx, idx, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), np.empty(acc.size))

    y = fastane.matmul(q, k)
    tasks = fastane.last_stats().tasks
    assert tasks <= 4
    assert np.array_equal(y.view(np.uint16), _direct_matmul(q, k).view(np.uint16))
    med = _interleaved(
        {"device": lambda: fastane.matmul(q, k), "direct": lambda: _direct_matmul(q, k), "kernel": kernel},
        1 if smoke else 15,
    )
    benchmark.extra_info.update(tasks=tasks, **{f"{n}_ms": v * 1e3 for n, v in med.items()})
    benchmark.pedantic(lambda: fastane.matmul(q, k), rounds=1 if smoke else 9, iterations=1)
    assert y.shape == (32, 128, 128)
    note(
        f"attention (32, 128, 64) @ (32, 64, 128): {tasks} task(s), device {med['device'] * 1e3:.2f} ms, "
        f"direct kernels {med['direct'] * 1e3:.2f} ms ({100 * (med['device'] / med['direct'] - 1):+.1f}%), "
        f"kernel alone {med['kernel'] * 1e3:.2f} ms"
    )


def _plan_cold(name):
    lower.cache_clear()
    lower.tiler._tile.cache_clear()
    return analyze(name).plan


@pytest.mark.parametrize("name,budget_s", [("llama-3.2-1b", 1.0), ("resnet50", 2.0)])
def test_stats_only(benchmark, smoke, note, name, budget_s):
    _plan_cold(name)  # warm the device's planning paths once
    plan = benchmark.pedantic(_plan_cold, args=(name,), rounds=1 if smoke else 5, iterations=1)
    st = plan.stats
    assert st.macs == workloads.get(name).macs
    if not smoke:
        med = benchmark.stats.stats.median
        benchmark.extra_info.update(seconds=med, tasks=st.tasks)
        note(
            f"stats-only lowering of {name}: {med:.3f} s (median, cold caches; budget "
            f"{budget_s} s), {st.tasks} tasks"
        )


# ---------------------------------------------------------------------------- activations
def _direct_activation(x16, name):
    """What ``fastane.activations`` did before the one path: the NE kernel called directly
    on the flattened fp16 input (``ne_post``), then, for sigmoid/silu, the planar chain in
    numpy (``round16(L + 0.5)``, ``round16(x * s)``)."""
    from fastane import lut
    from fastane.kernels import ne

    table, scale = lower.problems.SINGLE_STAGE.get(name, ("sigmoid", 1.0))
    lutf, luti = lut.get_block(table).kernel_args()
    y = x16.astype(np.float64).reshape(1, 1, -1)
    res = np.empty(y.shape, np.uint16)
    ne.ne_post(y, np.zeros(0), scale, 2, lutf, luti, res, np.zeros(2, np.int64))
    r = res.view(np.float16).reshape(x16.shape)
    if name in ("sigmoid", "silu"):
        r = (r.astype(np.float64) + 0.5).astype(np.float16)
    if name == "silu":
        with np.errstate(invalid="ignore", over="ignore"):
            r = (x16.astype(np.float64) * r.astype(np.float64)).astype(np.float16)
    return r


@pytest.mark.parametrize("name,n", [("tanh", 1000), ("tanh", 1 << 20), ("silu", 1000), ("silu", 1 << 20)])
def test_activation(benchmark, smoke, note, name, n):
    """Per-call cost of an activation through its elementwise program on the device
    (``fastane.tanh``: one NE task per tile; ``fastane.silu``: NE task, planar +0.5, planar
    multiply) against the NE kernel called directly, as the activations did before."""
    x16 = (np.random.default_rng(n).standard_normal(n) * 4).astype(np.float16)
    fn = getattr(fastane, name)
    with fastane.errstate(lut_range="ignore"):
        y = fn(x16)
    tasks = fastane.last_stats().tasks
    assert np.array_equal(y.view(np.uint16), _direct_activation(x16, name).view(np.uint16))
    rounds = 1 if smoke else (301 if n < 10000 else 15)
    med = _interleaved({"device": lambda: fn(x16), "direct": lambda: _direct_activation(x16, name)}, rounds)
    benchmark.extra_info.update(tasks=tasks, **{f"{k}_ms": v * 1e3 for k, v in med.items()})
    benchmark.pedantic(lambda: fn(x16), rounds=1 if smoke else 11, iterations=1)
    note(
        f"{name} on {n} elements: {tasks} task(s), device {med['device'] * 1e3:.3f} ms, direct kernel "
        f"{med['direct'] * 1e3:.3f} ms (x{med['device'] / med['direct']:.1f}), interleaved medians"
    )


_MOVES = {
    "concat_256x56x56": (
        lambda: moves.concat([(1, 256, 56, 56)] * 2, 1),
        [(1, 256, 56, 56)] * 2,
        lambda a, b: np.concatenate([a, b], 1),
    ),
    "transpose_197x12x64": (
        lambda: moves.transpose((1, 197, 12, 64), (0, 2, 1, 3)),
        [(1, 197, 12, 64)],
        lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3)),
    ),
    "transpose_197x3x64": (
        lambda: moves.transpose((1, 197, 3, 64), (0, 2, 1, 3)),
        [(1, 197, 3, 64)],
        lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3)),
    ),
}


@pytest.mark.parametrize("name", list(_MOVES))
def test_moves(benchmark, smoke, note, name):
    """Per-call cost of a move on the device (TDs fetched, decoded and checked, every task's
    copy on the fp16 lane, inputs written into and outputs read out of their slots) against
    numpy's copy; the bytes checked against numpy's first (no NaN among the inputs)."""
    make, shapes, host = _MOVES[name]
    move = make()
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s).astype(np.float16) for s in shapes]
    (y,) = moves.run(move, xs)
    tasks = fastane.last_stats().tasks
    assert np.array_equal(y.view(np.uint16), host(*xs).view(np.uint16))
    med = _interleaved(
        {"device": lambda: moves.run(move, xs), "numpy": lambda: host(*xs)}, 1 if smoke else 31
    )
    benchmark.extra_info.update(tasks=tasks, **{f"{k}_ms": v * 1e3 for k, v in med.items()})
    benchmark.pedantic(lambda: moves.run(move, xs), rounds=1 if smoke else 11, iterations=1)
    note(
        f"{name}: {tasks} task(s), device {med['device'] * 1e3:.3f} ms, numpy {med['numpy'] * 1e3:.3f} ms "
        f"(x{med['device'] / med['numpy']:.1f}), interleaved medians"
    )


# ---------------------------------------------------------------------------- larger calls
def test_matmul_1024(benchmark, smoke, note):
    """``fastane.matmul`` at 1024^3 (a few tasks: kernel groups x column tiles) in GMAC/s,
    against ``matmul_q16`` + ``readout`` on prepared float64 operands; interleaved medians."""
    rng = np.random.default_rng(2)
    a16 = rng.standard_normal((1024, 1024)).astype(np.float16)
    b16 = rng.standard_normal((1024, 1024)).astype(np.float16)
    a, b = a16.astype(np.float64)[None], b16.astype(np.float64)[None]
    z = np.zeros(1, np.int64)
    out = np.empty(1024 * 1024)

    def kernel():
        acc, flag = mac.matmul_q16(a, b, z, z, False)
        mac.readout(acc.reshape(-1), flag.reshape(-1), out)

    y = fastane.matmul(a16, b16)
    tasks = fastane.last_stats().tasks
    kernel()
    assert np.array_equal(y.view(np.uint16), out.reshape(1024, 1024).astype(np.float16).view(np.uint16))
    med = _interleaved({"device": lambda: fastane.matmul(a16, b16), "kernel": kernel}, 1 if smoke else 9)
    macs = 1024**3
    benchmark.extra_info.update(
        tasks=tasks,
        **{f"{k}_ms": v * 1e3 for k, v in med.items()},
        **{f"{k}_gmacs": macs / v / 1e9 for k, v in med.items()},
    )
    benchmark.pedantic(lambda: fastane.matmul(a16, b16), rounds=1 if smoke else 5, iterations=1)
    note(
        f"matmul 1024^3: {tasks} task(s), device {macs / med['device'] / 1e9:.2f} GMAC/s "
        f"({med['device'] * 1e3:.1f} ms), kernel alone {macs / med['kernel'] / 1e9:.2f} GMAC/s "
        f"({100 * (med['device'] / med['kernel'] - 1):+.1f}%), interleaved medians"
    )


def test_conv_resnet50_3x3(benchmark, smoke, note):
    """ResNet-50's 3x3 layer (1x64x56x56, 64 filters, padding 1) through ``fastane.conv2d``
    against ``conv2d_q16`` + ``readout`` on prepared float64 operands; interleaved medians."""
    from fastane.kernels import conv

    rng = np.random.default_rng(3)
    x16 = rng.standard_normal((1, 64, 56, 56)).astype(np.float16)
    w16 = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float16)
    x, w = x16.astype(np.float64), w16.astype(np.float64)
    out = np.empty((1, 64, 56, 56))

    def kernel():
        acc, flag = conv.conv2d_q16(x, w, 1, 1, 1, 1, 1, 1, 56, 56, 1, False)
        mac.readout(acc, flag, out)

    y = fastane.conv2d(x16, w16, padding=1)
    tasks = fastane.last_stats().tasks
    kernel()
    assert np.array_equal(y.view(np.uint16), out.astype(np.float16).view(np.uint16))
    med = _interleaved(
        {"device": lambda: fastane.conv2d(x16, w16, padding=1), "kernel": kernel}, 1 if smoke else 21
    )
    benchmark.extra_info.update(tasks=tasks, **{f"{k}_ms": v * 1e3 for k, v in med.items()})
    benchmark.pedantic(lambda: fastane.conv2d(x16, w16, padding=1), rounds=1 if smoke else 11, iterations=1)
    note(
        f"resnet-50 3x3 conv 64x56x56 -> 64: {tasks} task(s), device {med['device'] * 1e3:.2f} ms, "
        f"kernel alone {med['kernel'] * 1e3:.2f} ms ({100 * (med['device'] / med['kernel'] - 1):+.1f}%), "
        f"interleaved medians"
    )
