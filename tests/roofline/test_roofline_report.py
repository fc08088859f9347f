"""Reports: text table, JSON and plot (the ``fastane roofline`` command: tests/networks/test_cli.py)."""

import dataclasses
import json
import sys

import pytest

from fastane.roofline import model, report
from fastane.networks.plan import analyze


@pytest.fixture(scope="module")
def gpt2():
    # the seed's model (1 ms a program): the calibrated one is tested in test_calibration.py
    return analyze("gpt2", "m1", model.SEED_PARAMS)


def test_table_has_layers_total_and_ridge(gpt2):
    text = report.table(gpt2)
    assert "ridge 161.8 OP/B" in text
    assert "TOTAL" in text and "layers.11.mlp.fc2" in text
    assert "tokens/s" in text
    short = report.table(gpt2, layers=False)
    assert "layers.11.mlp.fc2" not in short and "TOTAL" in short


def test_total_is_the_sum_of_layers(gpt2):
    tot = gpt2.total
    assert tot.macs == sum(e.macs for e in gpt2.layers)
    assert tot.dram_bytes == sum(e.dram_bytes for e in gpt2.layers)
    assert tot.time_s == pytest.approx(sum(e.time_s for e in gpt2.layers) + 1e-3)


def test_json_is_serialisable(gpt2):
    d = report.to_json(gpt2)
    text = json.dumps(d)
    back = json.loads(text)
    assert back["chip"]["key"] == "m1"
    assert back["chip"]["ridge_point"] == pytest.approx(161.7647, rel=1e-4)
    wl = back["workloads"][0]
    assert wl["name"] == "gpt2" and len(wl["layers"]) == len(gpt2.layers)
    assert set(wl["tokens_per_s_by_chip"]) >= {"m1", "m4-max", "a17-pro"}
    assert wl["total"]["bound"] == "memory"


def test_plot_writes_a_png(tmp_path, gpt2):
    pytest.importorskip("matplotlib")
    path = tmp_path / "roof.png"
    report.plot([gpt2, analyze("resnet50", "m1")], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(tmp_path, gpt2, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(RuntimeError, match="needs matplotlib"):
        report.plot(gpt2, str(tmp_path / "x.png"))


def test_the_model_lines_name_the_overhead_the_totals_pay():
    # a chip's own Core ML overhead and the direct runtime's, not program_overhead_s
    values = {**model.FITTED, "chip_overhead_s": {"a14": 500e-6}, "program_overhead_s": 50e-6}
    own = model.calibrated(values)
    r = analyze("gpt2", "a14", own)
    assert r.total.overhead_s == pytest.approx(500e-6)
    assert report.model_line(r).endswith("500.0 us a program")
    assert "50.0 us program overhead, 500.0 us on the A14 Bionic)" in report.tokens_table(r)
    direct = dataclasses.replace(own, runtime="direct", direct_overhead_s=300e-6)
    r = analyze("gpt2", "a14", direct)
    assert report.model_line(r).endswith("300.0 us a program")
    assert "300.0 us program overhead);" in report.tokens_table(r)
