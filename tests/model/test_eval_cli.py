"""``fastane eval``: the summary, --report, --json, results files, and one-line errors (exit
status 2)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx", reason="the evaluation tests build their model with onnx (the onnx extra)")
pytest.importorskip("onnxruntime", reason="the ONNX reference is onnxruntime (the onnx extra)")

from fastane.cli import main
from tests.helpers.evaluate import labelled_job

N = 20


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalcli")
    labelled_job(d, N, name="m.onnx")
    return d


def _eval(capsys, *argv):
    rc = main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_summary_report_and_json(job, capsys):
    rc, out, err = _eval(
        capsys, job / "m.onnx", job / "data.npz", "--labels", f"{job / 'data.npz'}:labels", "--workers", "1"
    )
    assert rc == 0, err
    assert f"{N} inputs of" in out and "reference: onnxruntime float32" in out
    assert f"accuracy on {N} labelled inputs" in out and "top-1 agreement" in out
    assert "layers with inputs" not in out
    rc, out, _ = _eval(capsys, job / "m.onnx", job / "data.npz", "--workers", "1", "--report")
    assert rc == 0 and "layers with inputs beyond tolerance or events" in out and "MatMul_0" in out
    rc, out, _ = _eval(capsys, job / "m.onnx", job / "data.npz", "--workers", "1", "--json", "--chip", "m4")
    d = json.loads(out)
    assert rc == 0 and d["summary"]["chip"] == "m4" and d["summary"]["inputs"] == N
    assert d["summary"]["inputs_with"]["saturation"] == 1 and d["run"]["workers"] == 1


def test_results_file_and_resume_flag(job, capsys, tmp_path):
    out = tmp_path / "r.csv"
    rc, _, err = _eval(capsys, job / "m.onnx", job / "data.npz", "--workers", "1", "-o", out, "--batch", "3")
    assert rc == 0 and f"{N} rows written to" in err
    assert len(out.read_text().splitlines()) == N + 1
    (tmp_path / "r.csv.partial.jsonl").write_text("junk\n")
    rc, _, err = _eval(capsys, job / "m.onnx", job / "data.npz", "--workers", "1", "-o", out)
    assert rc == 2 and "holds the partial results of an earlier run" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["{d}/nope.onnx", "{d}/data.npz"], "cannot read model"),
        (["{d}/m.onnx", "{d}/nope.npz"], "no such file or folder"),
        (["{d}/m.onnx", "{d}/data.npz", "--labels", "{d}/nope.npy"], "no such file"),
        (["{d}/m.onnx", "{d}/data.npz", "--labels", "{d}/data.npz:nope"], "no array 'nope'"),
        (["{d}/m.onnx", "{d}/data.npz", "--workers", "0"], "workers: expected a positive integer"),
        (["{d}/m.onnx", "{d}/data.npz", "--batch", "0"], "batch: expected a positive integer"),
        (["{d}/m.onnx", "{d}/data.npz", "-o", "{d}/r.txt"], "expected .csv, .parquet, .jsonl"),
        (["{d}/m.onnx", "{d}/data.npz", "--resume"], "resume needs the output file"),
        (["{d}/m.onnx", "{d}/data.npz", "--chip", "z9"], "z9"),
        (["{d}/m.onnx", "{d}/data.npz", "--target", "y"], "target output 'y'"),
    ],
)
def test_errors_are_one_line(job, capsys, args, message):
    rc, out, err = (
        _eval(capsys, *[a.format(d=job) for a in args], "--workers", "1")
        if "--workers" not in args
        else _eval(capsys, *[a.format(d=job) for a in args])
    )
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastane eval: error:") and message in lines[0], err
