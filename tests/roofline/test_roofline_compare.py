"""``fastane roofline --compare``: per-layer and total changes, regressions and their exit code."""

import copy
import json

import pytest

from fastane.cli import main
from fastane.networks.plan import analyze
from fastane.roofline import compare as rc
from fastane.roofline import report


@pytest.fixture(scope="module")
def old_report():
    # planned as `fastane roofline gpt2` plans it (fastane.networks: the model path)
    return report.to_json([analyze("gpt2", "m1")])


def _write(tmp_path, data, name="old.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def test_same_report_no_change(old_report):
    res = rc.compare(old_report, copy.deepcopy(old_report))
    assert not res["regressed"]
    (w,) = res["workloads"]
    assert all(c["change_pct"] == 0 for c in w["total"]) and w["layers"] == []


def test_slower_layer_is_a_regression(old_report):
    new = copy.deepcopy(old_report)
    wl = new["workloads"][0]
    layer = wl["layers"][3]
    extra = layer["time_s"]  # that layer takes twice as long
    layer["time_s"] += extra
    wl["total"]["time_s"] += extra
    pct = extra / old_report["workloads"][0]["total"]["time_s"] * 100
    res = rc.compare(old_report, new, fail_above=pct / 2)
    assert res["regressed"]
    (changed,) = res["workloads"][0]["layers"]
    assert changed["layer"] == layer["layer"]
    (t,) = [c for c in changed["changes"] if c["metric"] == "time_s"]
    assert t["change_pct"] == pytest.approx(100.0)
    # above the threshold the same change passes
    assert not rc.compare(old_report, new, fail_above=pct * 2)["regressed"]
    # faster is never a regression
    assert not rc.compare(new, old_report)["regressed"]


def test_more_dram_traffic_is_a_regression(old_report):
    new = copy.deepcopy(old_report)
    new["workloads"][0]["total"]["dram_bytes"] *= 1.5
    res = rc.compare(old_report, new, fail_above=10)
    assert res["regressed"]
    assert "REGRESSED" in rc.format_comparison(res)


def test_new_and_missing_workloads(old_report):
    new = copy.deepcopy(old_report)
    new["workloads"][0]["name"] = "other"
    res = rc.compare(old_report, new)
    assert res["missing"] == ["gpt2"] and res["workloads"][0]["new"] and not res["regressed"]


def test_cli_compare_exit_codes(tmp_path, old_report, capsys):
    same = _write(tmp_path, old_report)
    assert main(["roofline", "gpt2", "--quiet", "--compare", str(same)]) == 0
    assert "0 workload(s) regressed" in capsys.readouterr().out
    faster = copy.deepcopy(old_report)
    faster["workloads"][0]["total"]["time_s"] /= 2  # the stored run was faster
    assert main(["roofline", "gpt2", "--quiet", "--compare", str(_write(tmp_path, faster, "f.json"))]) == 1
    out = capsys.readouterr().out
    assert "gpt2: REGRESSED" in out and "+100.00%" in out
    assert main(["roofline", "gpt2", "--quiet", "--json", "--compare", str(same)]) == 0
    assert json.loads(capsys.readouterr().out)["regressed"] is False


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("{not json", "not a JSON file"),
        ('{"workloads": [{"name": 3}]}', "not a fastane roofline report"),
        ("[1, 2]", "not a fastane roofline report"),
    ],
)
def test_cli_compare_bad_files(tmp_path, capsys, content, message):
    p = tmp_path / "old.json"
    if content is not None:
        p.write_text(content)
    assert main(["roofline", "gpt2", "--quiet", "--compare", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_bad_threshold(tmp_path, old_report, capsys):
    p = _write(tmp_path, old_report)
    assert main(["roofline", "gpt2", "--quiet", "--compare", str(p), "--fail-above", "-1"]) == 2
    assert "--fail-above" in capsys.readouterr().err
