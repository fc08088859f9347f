"""pytest-benchmark setup for fastane's benchmarks (not part of the default test run:
``testpaths = ["tests"]``).

* Files named ``bench_*.py`` in this folder are collected as test modules.
* ``compare`` times numpy baselines (numpy float16 matmul, numpy float32 BLAS) in the
  same run as the fastane measurement and stores medians, GMAC/s and ratios in
  ``benchmark.extra_info``; a table of them is printed at the end of the session.
* With ``--benchmark-disable`` (smoke mode) every measurement runs once.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

_ROWS: list[dict] = []
_NOTES: list[str] = []


def pytest_collect_file(file_path, parent):
    # (a file named on the command line is collected by pytest itself)
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def smoke_mode(config) -> bool:
    return bool(config.getoption("benchmark_disable", False))


def median_seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(max(1, rounds)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@pytest.fixture
def smoke(request) -> bool:
    """True under ``--benchmark-disable``: run everything once, skip extra rounds."""
    return smoke_mode(request.config)


@pytest.fixture
def measure(benchmark, smoke):
    """Time ``fn`` through pytest-benchmark (median of ``rounds``); returns the median.

    In smoke mode pytest-benchmark runs ``fn`` once without timing it, so it is timed here.
    """

    def run(fn, rounds: int) -> float:
        fn()  # warm-up: compile or load the Numba cache, touch the memory
        time.sleep(0.2)  # let OpenBLAS threads from an earlier baseline go idle
        if smoke:
            times = []

            def timed():
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)

            benchmark.pedantic(timed, rounds=1, iterations=1)
            return times[0]
        benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=0)
        return benchmark.stats.stats.median

    return run


@pytest.fixture
def compare(benchmark, smoke, request):
    """Record fastane's median beside numpy baselines measured now, in this run.

    ``baselines``: name -> (callable, rounds).  Stores ``<name>_s`` (median seconds),
    ``<name>_gmacs`` and ``speedup_vs_<name>`` (baseline time / fastane time).
    """

    def record(t_fastane: float, macs: int, baselines: dict) -> dict:
        info = {"macs": macs, "fastane_s": t_fastane, "fastane_gmacs": macs / t_fastane / 1e9}
        for name, (fn, rounds) in baselines.items():  # numpy: no warm-up needed, medians
            with np.errstate(all="ignore"):  # float16 baselines may overflow: not our concern
                t = median_seconds(fn, 1 if smoke else rounds)
            info[f"{name}_s"] = t
            info[f"{name}_gmacs"] = macs / t / 1e9
            info[f"speedup_vs_{name}"] = t / t_fastane
        benchmark.extra_info.update(info)
        _ROWS.append({"test": request.node.name, **info})
        return info

    return record


@pytest.fixture
def note():
    """Add a line to the summary printed at the end of the session."""
    return _NOTES.append


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if _NOTES:
        tr.section("fastane startup and compile times")
        for line in _NOTES:
            tr.write_line(line)
    if not _ROWS:
        return
    tr.section("fastane vs numpy, medians measured in this run")
    for row in _ROWS:
        parts = [
            f"{row['test']:<28} fastane {row['fastane_s'] * 1e3:9.2f} ms {row['fastane_gmacs']:7.2f} GMAC/s"
        ]
        for key, value in row.items():
            if key.startswith("speedup_vs_"):
                name = key[len("speedup_vs_") :]
                parts.append(f"{name} {row[name + '_gmacs']:7.2f} GMAC/s (fastane x{value:.2f})")
        tr.write_line(" | ".join(parts))
    if smoke_mode(config):
        tr.write_line("(smoke mode: one round each, figures are not meaningful)")
