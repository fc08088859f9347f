"""``fastane roofline``: built-in networks and model files, tables, JSON, progress, errors."""

import json

from fastane.networks import cli
from tests.helpers.roofline import run_roofline as _run


def test_cli_default_and_json(capsys):
    assert _run(["--summary", "--quiet"]) == 0
    out = capsys.readouterr().out
    for name in cli.DEFAULT_WORKLOADS:
        assert f"{name}:" in out
    assert _run(["gpt2", "--chip", "m4", "--json", "--quiet"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["chip"]["key"] == "m4"


def test_cli_progress_goes_to_stderr(capsys):
    assert _run(["mobilenetv2", "--summary"]) == 0
    cap = capsys.readouterr()
    assert "planning mobilenetv2" in cap.err and "planning" not in cap.out


def test_cli_errors_and_list(capsys):
    assert _run(["nosuchnet"]) == 2
    assert "unknown workload" in capsys.readouterr().err
    assert _run(["gpt2", "--chip", "m9"]) == 2
    assert _run(["--list"]) == 0
    out = capsys.readouterr().out
    assert "llama-3.2-1b" in out and "m4-max" in out


def test_fastane_cli_runs_roofline(capsys):
    from fastane import cli

    assert cli.main(["roofline", "gpt2", "--summary", "--quiet"]) == 0
    assert "tokens/s" in capsys.readouterr().out
