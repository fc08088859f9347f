"""``fastane run``: outputs, the report, and one-line errors (exit status 2)."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from fastane.cli import main  # noqa: E402
from fastane.model import zoo  # noqa: E402


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    p = d / "net.onnx"
    onnx.save(zoo.resnet(seed=0, width=8, size=16), str(p))
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32))
    return d


def _run(capsys, *argv):
    rc = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_run_saves_outputs(net, capsys, tmp_path):
    rc, out, err = _run(capsys, net / "net.onnx", "--input", f"x={net / 'x.npy'}", "-o", tmp_path / "o.npz")
    assert rc == 0
    assert out.strip().endswith("float16[2x10]")
    saved = np.load(tmp_path / "o.npz")
    assert list(saved) and saved[list(saved)[0]].dtype == np.float16


def test_run_report_table_and_json(net, capsys):
    rc, out, _ = _run(capsys, net / "net.onnx", "-i", net / "x.npy", "--report")
    assert rc == 0 and "Conv+BatchNormalization+Relu" in out and "first layer beyond its tolerance" in out
    rc, out, _ = _run(capsys, net / "net.onnx", "-i", net / "x.npy", "--json", "--chip", "m4")
    d = json.loads(out)
    assert rc == 0 and d["chip"] == "m4" and d["layers"][0]["placement"] == "ane"


def test_run_random_with_shape(net, capsys):
    rc, out, err = _run(capsys, net / "net.onnx", "--random", "--shape", "x=1x3x16x16")
    assert rc == 0 and "random float32[1x3x16x16]" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["{d}/missing.onnx"], "cannot read model"),
        (["{d}/x.npy"], "not a valid ONNX model"),
        (["{d}/net.onnx"], "missing input 'x'"),
        (["{d}/net.onnx", "-i", "{d}/bad.npy"], "expected shape (N, 3, 16, 16), got (1, 3, 15, 16)"),
        (["{d}/net.onnx", "-i", "{d}/int.npy"], "expected dtype float32, got int32"),
        (["{d}/net.onnx", "-i", "y={d}/x.npy"], "has no input 'y'"),
        (["{d}/net.onnx", "-i", "{d}/nothere.npy"], "cannot read"),
        (["{d}/net.onnx", "--random"], "bind it with --shape x=Nx3x16x16"),
        (["{d}/net.onnx", "--random", "--shape", "x=1x3xa"], "dimensions must be integers"),
        (["{d}/net.onnx", "--random", "--shape", "x=1x3x16x16", "--report", "--chip", "z9"], "unknown chip"),
    ],
)
def test_errors_are_one_line(net, capsys, args, message):
    np.save(net / "bad.npy", np.zeros((1, 3, 15, 16), np.float32))
    np.save(net / "int.npy", np.zeros((1, 3, 16, 16), np.int32))
    rc, out, err = _run(capsys, *[a.format(d=net) for a in args])
    lines = [ln for ln in err.splitlines() if not ln.startswith("fastane run: input")]
    assert rc == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err, err


def test_stats_only_report(net, capsys):
    rc, out, _ = _run(capsys, net / "net.onnx", "--stats-only", "--shape", "x=1x3x16x16")
    assert rc == 0 and "stats only" in out and "Conv+BatchNormalization+Relu" in out
    rc, out, err = _run(capsys, net / "net.onnx", "--stats-only")
    assert rc == 2 and "bind it with --shape" in err


def test_roofline_of_a_model(net, capsys, tmp_path):
    rc = main(["roofline", str(net / "net.onnx"), "--json"])
    out, _ = capsys.readouterr()
    d = json.loads(out)["workloads"][0]  # one schema with the built-in networks
    assert rc == 0 and d["stats_only"] and d["layers"][0]["placement"] == "ane"
    assert d["layers"][0]["time_s"] > 0 and d["total"]["tasks"] > 0
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    rc = main(["roofline", str(net / "net.onnx"), "--summary", "--plot", str(png), "--quiet"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "ANE total" in out and png.stat().st_size > 0


def test_roofline_model_errors(net, capsys):
    rc = main(["roofline", str(net / "net.onnx"), "gpt2"])
    _, err = capsys.readouterr()
    assert rc == 2 and "not both" in err
    rc = main(["roofline", str(net / "x.npy.onnx")])
    _, err = capsys.readouterr()
    assert rc == 2 and "cannot read model" in err and "Traceback" not in err


def test_report_and_save_in_one_run(net, capsys, tmp_path):
    import fastane

    rc, out, _ = _run(capsys, net / "net.onnx", "-i", net / "x.npy", "--report", "-o", tmp_path / "o.npz")
    assert rc == 0 and "ANE total" in out
    saved = np.load(tmp_path / "o.npz")
    model = fastane.load_model(net / "net.onnx")
    want = model({"x": np.load(net / "x.npy")})
    for k, v in want.items():
        np.testing.assert_array_equal(saved[k], v)


def test_a_bad_compute_units_is_refused_before_the_model_runs(net, capsys):
    """Checked with --chip, before the inputs are drawn and the model runs: the error is the
    only line on stderr."""
    rc, out, err = _run(
        capsys, net / "net.onnx", "--random", "--shape", "x=1x3x16x16", "--compute-units", "GPU"
    )
    (line,) = err.splitlines()
    assert (
        rc == 2 and out == "" and line.startswith("fastane run: error: --compute-units: compute units 'GPU'")
    )
