"""Benchmarks of the roofline model (pytest-benchmark): planning per-task Stats of whole
workloads by lowering every layer and counting it on a stats-only device, and estimating
their time.

    .venv/bin/python -m pytest bench/bench_roofline.py --benchmark-only

Each round starts cold (the program and tiling caches cleared), so the figure is what a
first ``fastane roofline`` run pays.
"""

import pytest

from fastane import lower
from fastane.roofline import model, plan


def _plan_cold(name):
    lower.cache_clear()
    lower.tiler._tile.cache_clear()
    return plan.plan_workload(name)


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_plan_stats(benchmark, name):
    p = benchmark(_plan_cold, name)
    stats = p.stats
    assert stats.tasks == len(stats.tasks_detail) > 0
    assert stats.macs == p.workload.macs


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_estimate(benchmark, name):
    tasks = plan.plan_workload(name).tasks
    est = benchmark(model.estimate, tasks, "m1")
    assert est.time_s > 0
