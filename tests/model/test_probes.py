"""The probes a Mac is asked to run (fastane/model/probes.py, ``fastane probes``): built here,
their plans and times dumped by docs/compute_plan_dump.py driven by stand-ins for Core ML
(the real ones need macOS), compared back."""

import importlib.util
import json
import os
import re

import pytest

from fastane.cli import main
from fastane.model import load_model, probes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: small probes of both kinds, quick to build
SOME = ["conv3x3-3to8-16", "softmax-2e14", "time-conv3x3-64-32x32"]


def test_the_probes_are_distinct_and_say_what_they_decide():
    ids = [p.id for p in probes.PROBES]
    assert len(ids) == len(set(ids))
    assert {p.kind for p in probes.PROBES} == {"placement", "latency"}
    assert all(p.question and p.units in ("ALL", "CPU_AND_NE") for p in probes.PROBES)
    # a latency probe is timed where fastane's time is the ANE's: not under ALL
    assert all(p.units == "CPU_AND_NE" for p in probes.PROBES if p.kind == "latency")
    assert [p.id for p in probes.select(["softmax-"])] == [f"softmax-2e{e}" for e in (14, 16, 18, 20, 22)]
    with pytest.raises(ValueError, match="no probe id starts with 'conv5x5'"):
        probes.select(["conv3x3", "conv5x5"])


def test_chip_of_reads_a_macs_brand_string():
    assert probes.chip_of("Apple M1 Pro") == "m1-pro"
    assert probes.chip_of("Apple M4") == "m4"
    with pytest.raises(ValueError, match="give --chip"):
        probes.chip_of("Apple M9 Extreme")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("coremltools")
    d = tmp_path_factory.mktemp("probes")
    seen = []
    paths = probes.build(d, SOME, progress=lambda i, n, p: seen.append((i, n, p.id)))
    assert seen == [(i, 3, pid) for i, pid in enumerate(SOME)]
    return d, paths


def test_build_writes_each_probe_and_the_manifest(built):
    d, paths = built
    assert sorted(os.path.basename(p) for p in paths) == sorted(f"{pid}.mlpackage" for pid in SOME)
    manifest = json.loads((d / probes.MANIFEST).read_text())
    assert manifest["format"] == "fastane-probes-1"
    assert [p["id"] for p in manifest["probes"]] == SOME
    for p in manifest["probes"]:
        model = load_model(str(d / f"{p['id']}.mlpackage"), weights=False)
        plan = model.compute_plan(
            {k: tuple(v) for k, v in p["inputs"].items()}, "m1", p["computeUnits"], warn=False
        )
        assert plan.precision == p["computePrecision"] == "fp16"
        assert [o.operator for o in plan.ops].count(p["op"]) == 1, [o.operator for o in plan.ops]


def _dumper():
    spec = importlib.util.spec_from_file_location(
        "compute_plan_dump", os.path.join(ROOT, "docs", "compute_plan_dump.py")
    )
    dump = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dump)
    return dump


def _mac(monkeypatch, dump, devices, ms):
    """Stand-ins for Core ML on a Mac: each program's own operations (read from its spec)
    placed by op type (``devices``), each prediction ``ms`` milliseconds by the timer."""
    import coremltools as ct
    from coremltools.models import compute_device as cd
    from coremltools.models import compute_plan as cp

    kinds = {
        "ane": cd.MLNeuralEngineComputeDevice,
        "cpu": cd.MLCPUComputeDevice,
        "gpu": cd.MLGPUComputeDevice,
    }

    def dev(unit):
        return object.__new__(kinds[unit])

    class Plan:
        def __init__(self, path):
            block = next(
                iter(ct.utils.load_spec(path).mlProgram.functions["main"].block_specializations.values())
            )
            ops = [
                cp.MLModelStructureProgramOperation(
                    {},
                    op.type,
                    [cp.MLModelStructureProgramNamedValueType(o.name, None) for o in op.outputs],
                    [],
                    None,
                )
                for op in block.operations
            ]
            fn = cp.MLModelStructureProgramFunction([], cp.MLModelStructureProgramBlock([], ops, []))
            self.model_structure = cp.MLModelStructure(None, cp.MLModelStructureProgram({"main": fn}), None)

        @classmethod
        def load_from_path(cls, path, compute_units):
            return cls(path)

        def get_compute_device_usage_for_mlprogram_operation(self, o):
            if o.operator_name == "const":
                return None
            unit = devices.get(o.operator_name, "ane")
            return cp.MLComputePlanDeviceUsage(dev(unit), [dev("cpu"), dev(unit)])

        def get_estimated_cost_for_mlprogram_operation(self, o):
            return None if o.operator_name == "const" else cp.MLComputePlanCost(0.5)

    class Model:
        def __init__(self, path, compute_units=None):
            self.path = path

        def get_compiled_model_path(self):
            return self.path

        def predict(self, feed):
            assert all(v.dtype.name == "float32" for v in feed.values())
            clock[0] += ms / 1e3

    clock = [0.0]
    monkeypatch.setattr(dump, "MLComputePlan", Plan)
    monkeypatch.setattr(dump, "chip", lambda: "Apple M1")
    monkeypatch.setattr(ct.models, "MLModel", Model)
    monkeypatch.setattr(dump.time, "perf_counter", lambda: clock[0])


def test_a_macs_results_compare_op_by_op_and_in_time(built, monkeypatch, capsys):
    d, _ = built
    dump = _dumper()
    _mac(monkeypatch, dump, {"softmax": "gpu"}, ms=0.25)
    path = dump.probes(str(d), warmup=2, runs=5)
    results = probes.load_results(path)
    assert results["chip"] == "Apple M1" and set(results["probes"]) == set(SOME)
    t = results["probes"]["softmax-2e14"]["time_ms"]
    assert t == {"median": pytest.approx(0.25), "min": pytest.approx(0.25), "runs": 5, "warmup": 2}
    rows = {r["id"]: r for r in probes.compare(d, results)}
    # the M1's floor for programs without a matrix product: fastane says the CPU, the stand-in the GPU
    assert [(f, m) for _, f, m in rows["softmax-2e14"]["ops"]] == [("cpu", "gpu")]
    assert rows["softmax-2e14"]["agree"] == (0, 1) and "ratio" not in rows["softmax-2e14"]
    assert rows["conv3x3-3to8-16"]["agree"] == (1, 1)
    t = rows["time-conv3x3-64-32x32"]
    assert t["measured_ms"] == pytest.approx(0.25) and t["ratio"] == pytest.approx(
        t["predicted_ms"] / t["measured_ms"]
    )
    assert t["comparable"] is True and 0.05 < t["predicted_ms"] < 1.0
    assert main(["probes", "compare", str(d), path]) == 0
    out = capsys.readouterr().out
    assert "softmax-2e14" in out and "fastane cpu       mac gpu       0 of 1 ops agree" in out
    assert "placement: 2 of 3 probes agree on every op" in out
    assert "time: rms log-error" in out and "over 1 latency probes run on the ANE" in out
    # the chip the results name, or the one given
    assert main(["probes", "compare", str(d), path, "--chip", "m4", "--json"]) == 0
    rows4 = {r["id"]: r for r in json.loads(capsys.readouterr().out)["probes"]}
    assert rows4["softmax-2e14"]["ops"][0][1] == "ane"  # the M1's floor is not the M4's


def test_a_probe_the_mac_ran_off_the_ane_is_not_timed_against_it(built, monkeypatch):
    d, _ = built
    dump = _dumper()
    _mac(monkeypatch, dump, {"conv": "cpu"}, ms=1.0)
    rows = {r["id"]: r for r in probes.compare(d, probes.load_results(dump.probes(str(d), 0, 3)))}
    assert rows["time-conv3x3-64-32x32"]["comparable"] is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "not probe results: format 'list'"),
        ('{"format": "x"}', "format 'x'"),
        ('{"format": "fastane-probes-results-1", "probes": []}', "'probes' is not an object of objects"),
        (
            '{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": -1}}}}',
            "probe 'a': time_ms needs a positive median",
        ),
        ("{", "not a readable JSON results file"),
    ],
)
def test_malformed_results_are_one_precise_error(tmp_path, text, message):
    p = tmp_path / "results.json"
    p.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        probes.load_results(p)


def test_the_command_line_lists_and_refuses_in_one_line(tmp_path, capsys):
    assert main(["probes", "list"]) == 0
    out = capsys.readouterr().out
    assert all(p.id in out for p in probes.PROBES)
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"format": probes.RESULTS_FORMAT, "chip": "Apple M1", "probes": {"x": {}}}))
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 2
    assert "probes.json' does not exist" in capsys.readouterr().err
    (tmp_path / probes.MANIFEST).write_text('{"format": "fastane-probes-1"}')
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 2
    assert "not a probe manifest (written by `fastane probes build`)" in capsys.readouterr().err
    (tmp_path / probes.MANIFEST).write_text(json.dumps({"format": "fastane-probes-1", "probes": []}))
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fastane probes: error: probe 'x' is in the results but not in probes.json"
    (tmp_path / probes.MANIFEST).write_text(
        json.dumps({"format": "fastane-probes-1", "probes": [{"id": "../x"}]})
    )
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 2
    assert "the probe id '../x' is not a file name of the directory" in capsys.readouterr().err
    assert main(["probes", "build", str(tmp_path), "--only", "nope"]) == 2
    assert "no probe id starts with 'nope'" in capsys.readouterr().err
