"""Benchmarks of the roofline model (pytest-benchmark): planning per-task Stats of whole
networks as ``fastane roofline`` does (:func:`fastane.networks.plan.analyze`: the model
front end places and lowers every layer and counts it on a stats-only device), and
estimating their time.

    .venv/bin/python -m pytest bench/bench_roofline.py --benchmark-only

Each round starts cold (the program and tiling caches cleared), so the figure is what a
first ``fastane roofline`` run pays.
"""

import pytest

from fastane import lower, workloads
from fastane.networks.plan import analyze
from fastane.roofline import model


def _plan_cold(name):
    lower.cache_clear()
    lower.tiler._tile.cache_clear()
    return analyze(name).plan


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_plan_stats(benchmark, name):
    p = benchmark(_plan_cold, name)
    stats = p.stats
    assert stats.tasks == len(stats.tasks_detail) > 0
    assert stats.macs == workloads.get(name).macs


@pytest.mark.parametrize("name", ["llama-3.2-1b", "resnet50"])
def test_estimate(benchmark, name):
    tasks = analyze(name).plan.tasks
    est = benchmark(model.estimate, tasks, "m1")
    assert est.time_s > 0
