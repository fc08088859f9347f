"""``fastane bench``: runs are reduced to in-run ratios, stored, and compared; a slower
machine is not a regression, a slower fastane is."""

import json
import textwrap

import pytest

from fastane import bench
from fastane.cli import main


def _record(ratios=None, per_ref=None, median=1.0):
    entry = {"median_s": median, "ratios": ratios or {}}
    if per_ref is not None:
        entry["per_reference"] = per_ref
    return {"format": bench.FORMAT, "name": "x", "benchmarks": {"b::test": entry}}


def test_ratio_regression_and_threshold():
    old = _record({"numpy_f32": 0.30, "numpy_f16": 60.0})
    new = _record({"numpy_f32": 0.24, "numpy_f16": 60.0})  # 20% slower vs float32 BLAS
    rows = bench.compare(old, new, fail_above=10)
    by = {r["metric"]: r for r in rows}
    assert by["vs numpy_f32"]["regressed"] and by["vs numpy_f32"]["change_pct"] == pytest.approx(-20)
    assert not by["vs numpy_f16"]["regressed"]
    assert not any(r["regressed"] for r in bench.compare(old, new, fail_above=25))
    assert not any(r["regressed"] for r in bench.compare(new, old, fail_above=0))  # faster


def test_slower_machine_is_not_a_regression():
    """The same ratios on a machine twice as slow: medians doubled, nothing regressed."""
    old = _record({"numpy_f32": 0.3}, per_ref=2.0, median=1.0)
    new = _record({"numpy_f32": 0.3}, per_ref=2.0, median=2.0)
    assert not any(r["regressed"] for r in bench.compare(old, new, fail_above=1))


def test_per_reference_used_without_baselines():
    old, new = _record(per_ref=2.0), _record(per_ref=3.0)  # 1.5x the time per reference
    (row,) = bench.compare(old, new, fail_above=10)
    assert row["metric"] == "per reference" and row["regressed"]
    assert row["change_pct"] == pytest.approx((2 / 3 - 1) * 100)


def test_pytest_json_reduction_and_errors():
    data = {
        "machine_info": {"cpu": "x"},
        "benchmarks": [
            {"fullname": "a::t", "stats": {"median": 0.5}, "extra_info": {"speedup_vs_np": 4.0, "gmacs": 3}}
        ],
    }
    rec = bench.record_from_pytest_json(data, reference_s=0.25)
    assert rec["benchmarks"]["a::t"] == {"median_s": 0.5, "ratios": {"np": 4.0}, "per_reference": 2.0}
    with pytest.raises(ValueError, match="not a pytest-benchmark JSON"):
        bench.record_from_pytest_json({"x": 1}, None)
    with pytest.raises(ValueError, match="malformed benchmark entry"):
        bench.record_from_pytest_json({"benchmarks": [{"fullname": "a"}]}, None)


SUITE = """
import os
def test_tiny(benchmark):
    benchmark.pedantic(lambda: sum(range(100)), rounds=3, iterations=1)
    benchmark.extra_info["speedup_vs_numpy_f32"] = float(os.environ["FAKE_RATIO"])
"""


def test_cli_save_compare_fail(tmp_path, monkeypatch, capsys):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(textwrap.dedent(SUITE))
    monkeypatch.chdir(tmp_path)
    # under pytest-xdist the child pytest would take itself for a worker (pytest-benchmark
    # then disables the benchmarks and refuses --benchmark-only)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("FAKE_RATIO", "0.30")
    assert main(["bench", "--suite", str(suite), "--save", "base"]) == 0
    stored = json.loads((tmp_path / ".benchmarks" / "fastane" / "base.json").read_text())
    assert stored["format"] == bench.FORMAT and stored["machine"]["cpus"] >= 1
    (entry,) = stored["benchmarks"].values()
    assert entry["ratios"] == {"numpy_f32": 0.30} and entry["per_reference"] > 0
    monkeypatch.setenv("FAKE_RATIO", "0.29")  # within 10%
    assert main(["bench", "--suite", str(suite), "--compare", "base"]) == 0
    monkeypatch.setenv("FAKE_RATIO", "0.15")  # half as fast vs numpy
    assert main(["bench", "--suite", str(suite), "--compare", "base", "--fail-above", "20"]) == 1
    assert "REGRESSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--compare", "nothing-stored"], "no stored benchmark run"),
        (["--save", "../evil"], "--save NAME must be"),
        (["--fail-above", "nan"], "--fail-above"),
        (["--suite", "/nonexistent/bench"], "benchmark suite not found"),
    ],
)
def test_cli_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
