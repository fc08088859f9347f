"""Where a tiny call's time goes: perf_counter_ns timers around the stages (medians).

    .venv/bin/python scripts/profile_dispatch.py matmul4x4|submit_compute|submit_stats

Each stage is wrapped by a timer (about 0.3 us each, so the figures are a little high and
nested stages include their children); the TD is bench/bench_device.py's.  For a call
graph, ``python -m cProfile -s cumulative`` on the same calls.
"""

import collections
import functools
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fastane  # noqa: E402
from bench_device import X_SHAPE, _program  # noqa: E402
from fastane.device import AneLayout, Device  # noqa: E402

STAGES = [
    "fastane.api:_precheck_matmul",
    "fastane.api:_fp16_operand",
    "fastane.lower:run_matmul",
    "fastane.lower.calls:build",
    "fastane.lower.calls:execute",
    "fastane.device.device:Device.submit",
    "fastane.device.device:Device._bar_table",
    "fastane.device.taskmanager:TaskManager._complete",
    "fastane.device.engine:Engine.execute",
    "fastane.device.engine:Engine.plan",
    "fastane.device.engine:Engine.fetch",
    "fastane.device.engine:Engine.run",
    "fastane.device.kernel_dma:KMem.load",
    "fastane.device.mac:accumulate_fp16",
    "fastane.kernels.mac:matmul_q16_into",
    "fastane.kernels.mac:matmul_q16_small",
    "fastane.device.ne:finish",
]
times = collections.defaultdict(list)


def wrap(spec):
    modname, attr = spec.split(":")
    obj = importlib.import_module(modname)
    *path, name = attr.split(".")
    for p in path:
        obj = getattr(obj, p)
    f = getattr(obj, name)

    @functools.wraps(f)
    def timed(*a, **k):
        t = time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            times[attr].append(time.perf_counter_ns() - t)

    setattr(obj, name, timed)


def main(case="matmul4x4", n=3000):
    t4 = np.ones((4, 4), np.float16)
    dev = Device(memory_size=16 << 20)
    x = np.ones(X_SHAPE, np.float16)
    src, dst = dev.alloc(0x4000, "x"), dev.alloc(0x4000, "y")
    AneLayout.of(X_SHAPE).tile(x, out=dev.memory.view(src.iova, src.size))
    loaded = dev.load(_program())
    cases = {
        "matmul4x4": lambda: fastane.matmul(t4, t4),
        "submit_compute": lambda: dev.submit(loaded, {4: src, 5: dst}).wait(),
        "submit_stats": lambda: dev.submit(loaded, {4: src, 5: dst}, stats_only=True).wait(),
    }
    fn = cases[case]
    for _ in range(100):
        fn()  # lowered, planned, Numba warm
    for spec in STAGES:
        wrap(spec)
    times.clear()
    total = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        total.append(time.perf_counter_ns() - t)
    print(f"{case}: {statistics.median(total) / 1e3:.1f} us per call (median of {n}, timers included)")
    for name, v in times.items():
        print(f"  {name:36s} {statistics.median(v) / 1e3:7.1f} us  x{len(v) // n}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
