"""Benchmarks of the roofline model (pytest-benchmark): planning per-task Stats of whole
workloads with the analytic plan, and estimating their time.

    .venv/bin/python -m pytest bench/bench_roofline.py --benchmark-only

Each round starts cold (the tiling cache cleared), so the figure is what a first
``fastane roofline`` run pays.
"""
import pytest

from fastane.roofline import model


def _plan_cold(name):
    model._tile_conv.cache_clear()
    return model.plan_workload(name)


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_plan_stats(benchmark, name):
    plan = benchmark(_plan_cold, name)
    stats = plan.stats
    assert stats.tasks == len(stats.tasks_detail) > 0
    assert stats.macs == plan.workload.macs


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_estimate(benchmark, name):
    tasks = model.plan_workload(name).tasks
    est = benchmark(model.estimate, tasks, "m1")
    assert est.time_s > 0
