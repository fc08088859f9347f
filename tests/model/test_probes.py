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
#: small probes of each op kind and both kinds of question, quick to build
SOME = [
    "linear1-depth512",
    "conv3x3-3to8-16",
    "softmax-2e14",
    "layer_norm-axis1-4x2",
    "time-conv3x3-64-32x32",
]


def test_the_probes_are_distinct_and_selected_by_prefix():
    ids = [p.id for p in probes.PROBES]
    assert len(ids) == len(set(ids))
    assert {p.kind for p in probes.PROBES} == {"placement", "latency"}
    assert {p.op for p in probes.PROBES} == {"linear", "conv", "softmax", "add", "layer_norm"}
    assert [p.id for p in probes.select(["softmax-"])] == [
        f"softmax-2e{e}" for e in (14, 16, 18, 20, 22, 24, 25)
    ]
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
    assert seen == [(i, len(SOME), pid) for i, pid in enumerate(SOME)]
    return d, paths


def _spec_ops(path):
    """``[(op type, output names)]`` of the main block of the ML Program at ``path``: the
    operations a Mac's compute plan lists, by the names it gives them."""
    import coremltools as ct

    block = next(
        iter(ct.utils.load_spec(str(path)).mlProgram.functions["main"].block_specializations.values())
    )
    return [(op.type, [o.name for o in op.outputs]) for op in block.operations]


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
        # the op the probe asks about, by the output name a Mac's plan gives it, is one of fastane's ops
        ours = {n for o in plan.ops for n in o.outputs}
        theirs = [names for kind, names in _spec_ops(d / f"{p['id']}.mlpackage") if kind == p["op"]]
        assert len(theirs) == 1 and set(theirs[0]) <= ours, (theirs, ours)


def _dumper():
    spec = importlib.util.spec_from_file_location(
        "compute_plan_dump", os.path.join(ROOT, "docs", "compute_plan_dump.py")
    )
    dump = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dump)
    return dump


def _mac(monkeypatch, dump, devices, ms, refuse=(), unpredictable=()):
    """Stand-ins for Core ML on a Mac: each program's own operations (read from its spec,
    named ``ios17.<op>`` as Core ML names them) placed by op type (``devices``, else the
    ANE); each prediction ``ms`` milliseconds by the timer; a compiled model usable only
    while its MLModel lives (coremltools deletes it with the object); the probes whose
    id is in ``refuse`` fail to compile, those in ``unpredictable`` to predict."""
    import coremltools as ct
    from coremltools.models import compute_device as cd
    from coremltools.models import compute_plan as cp

    kinds = {
        "ane": cd.MLNeuralEngineComputeDevice,
        "cpu": cd.MLCPUComputeDevice,
        "gpu": cd.MLGPUComputeDevice,
    }
    alive = set()

    def dev(unit):
        return object.__new__(kinds[unit])

    class Plan:
        def __init__(self, path):
            ops = [
                cp.MLModelStructureProgramOperation(
                    {},
                    f"ios17.{kind}",
                    [cp.MLModelStructureProgramNamedValueType(n, None) for n in names],
                    [],
                    None,
                )
                for kind, names in _spec_ops(path)
            ]
            fn = cp.MLModelStructureProgramFunction([], cp.MLModelStructureProgramBlock([], ops, []))
            self.model_structure = cp.MLModelStructure(None, cp.MLModelStructureProgram({"main": fn}), None)

        @classmethod
        def load_from_path(cls, path, compute_units):
            assert path in alive, "the compiled model was deleted with its MLModel"
            return cls(path)

        def get_compute_device_usage_for_mlprogram_operation(self, o):
            if o.operator_name == "ios17.const":
                return None
            unit = devices.get(o.operator_name.split(".")[-1], "ane")
            return cp.MLComputePlanDeviceUsage(dev(unit), [dev("cpu"), dev(unit)])

        def get_estimated_cost_for_mlprogram_operation(self, o):
            return None if o.operator_name == "ios17.const" else cp.MLComputePlanCost(0.5)

    class Model:
        def __init__(self, path, compute_units=None):
            self.path = path
            if any(path.endswith(f"/{r}.mlpackage") for r in refuse):
                raise RuntimeError("Error compiling model")
            alive.add(path)

        def __del__(self):
            alive.discard(self.path)

        def get_compiled_model_path(self):
            return self.path

        def predict(self, feed):
            assert all(v.dtype.name == "float32" for v in feed.values())
            if any(self.path.endswith(f"/{r}.mlpackage") for r in unpredictable):
                raise RuntimeError("prediction failed")
            clock[0] += ms / 1e3

    clock = [0.0]
    monkeypatch.setattr(dump, "MLComputePlan", Plan)
    monkeypatch.setattr(dump, "chip", lambda: "Apple M1")
    monkeypatch.setattr(ct.models, "MLModel", Model)
    monkeypatch.setattr(dump.time, "perf_counter", lambda: clock[0])


def test_a_macs_results_compare_op_by_op_and_in_time(built, monkeypatch, capsys):
    d, _ = built
    dump = _dumper()
    _mac(monkeypatch, dump, {"softmax": "gpu", "linear": "cpu"}, ms=0.25)
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
    # a linear's MIL output is fastane's bias op: matched by its name all the same (one-row, depth
    # 512: the M3 Max's depth floor is "uncertain" on the M1, the ANE)
    assert [(f, m) for _, f, m in rows["linear1-depth512"]["ops"]] == [("ane", "cpu")]
    t = rows["time-conv3x3-64-32x32"]
    assert t["measured_ms"] == pytest.approx(0.25) and t["ratio"] == pytest.approx(
        t["predicted_ms"] / t["measured_ms"]
    )
    assert t["comparable"] is True and 0.05 < t["predicted_ms"] < 1.0
    assert main(["probes", "compare", str(d), path]) == 0
    out = capsys.readouterr().out
    assert "fastane cpu       mac gpu       0 of 1 ops agree" in out
    assert "placement: 2 of 5 probes agree on every op" in out  # conv3x3 and the latency conv
    assert "time: rms log-error" in out and "over 1 latency probes run on the ANE" in out
    # the chip the results name, or the one given
    assert main(["probes", "compare", str(d), path, "--chip", "m4", "--json"]) == 0
    rows4 = {r["id"]: r for r in json.loads(capsys.readouterr().out)["probes"]}
    assert rows4["softmax-2e14"]["ops"][0][1] == "ane"  # the M1's floor is not the M4's


def test_a_probe_the_mac_ran_off_the_ane_or_refused_is_not_timed_against_it(built, monkeypatch, capsys):
    d, _ = built
    dump = _dumper()
    _mac(
        monkeypatch,
        dump,
        {"conv": "cpu"},
        ms=1.0,
        refuse=["softmax-2e14"],
        unpredictable=["linear1-depth512"],
    )
    path = dump.probes(str(d), 0, 3)
    results = probes.load_results(path)
    assert results["probes"]["softmax-2e14"] == {
        "plan": None,
        "time_ms": None,
        "error": "RuntimeError: Error compiling model",
    }
    # a plan read before the timing failed is kept
    kept = results["probes"]["linear1-depth512"]
    assert (
        kept["plan"] is not None
        and kept["time_ms"] is None
        and kept["error"] == "RuntimeError: prediction failed"
    )
    rows = {r["id"]: r for r in probes.compare(d, results)}
    assert rows["time-conv3x3-64-32x32"]["comparable"] is False
    assert rows["softmax-2e14"]["error"] == "RuntimeError: Error compiling model"
    assert main(["probes", "compare", str(d), path]) == 0
    out = capsys.readouterr().out
    assert "not comparable: the Mac ran it off the ANE" in out
    assert "softmax-2e14                       the Mac: RuntimeError: Error compiling model" in out


def test_a_program_fastane_refuses_is_one_row_not_the_end(built, tmp_path, capsys):
    d, _ = built
    manifest = json.loads((d / probes.MANIFEST).read_text())
    for p in manifest["probes"]:
        (tmp_path / f"{p['id']}.mlpackage").symlink_to(d / f"{p['id']}.mlpackage")
        if p["id"] == "softmax-2e14":
            p["inputs"] = {"x": [1, 1 << 19, 512]}  # not the program's shape: fastane refuses to bind it
    (tmp_path / probes.MANIFEST).write_text(json.dumps(manifest))
    res = tmp_path / "results.json"
    res.write_text(
        json.dumps({"format": probes.RESULTS_FORMAT, "chip": "Apple M1", "probes": {i: {} for i in SOME}})
    )
    rows = {r["id"]: r for r in probes.compare(tmp_path, probes.load_results(res))}
    assert rows["softmax-2e14"]["refused"] == "input 'x': expected shape (1, 32, 512), got (1, 524288, 512)"
    assert all(rows[i]["refused"] is None for i in SOME if i != "softmax-2e14")
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 0
    assert "softmax-2e14                       fastane refuses it: " in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "not probe results: format 'list'"),
        ('{"format": "x"}', "format 'x'"),
        ('{"format": "fastane-probes-results-1", "probes": []}', "'probes' is not an object of objects"),
        (
            '{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": -1}}}}',
            "probe 'a': time_ms",
        ),
        ('{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": 1e400}}}}', "finite"),
        (
            '{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": 1e-320}}}}',
            "at least 1e-6",
        ),
        (
            '{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": true}}}}',
            "probe 'a'",
        ),
        (
            '{"format": "fastane-probes-results-1", "probes": {"a": {"time_ms": {"median": 1'
            + "0" * 400
            + "}}}}",
            "finite",
        ),
        ("{", "not a readable JSON results file"),
    ],
)
def test_malformed_results_are_one_precise_error(tmp_path, text, message):
    p = tmp_path / "results.json"
    p.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        probes.load_results(p)


def test_a_mac_op_fastane_does_not_name_is_shown_not_fatal(built, tmp_path, capsys):
    d, _ = built
    op = {"operatorName": "ios17.softmax", "outputs": [{"name": "zzz"}], "estimatedCost": None}
    op["deviceUsage"] = {"preferred": "neuralEngine", "supported": ["neuralEngine"]}
    plan = {
        "format": "fastane-compute-plan-1",
        "modelStructure": {"program": {"functions": {"main": {"block": {"operations": [op]}}}}},
    }
    res = tmp_path / "renamed.json"
    res.write_text(
        json.dumps(
            {"format": probes.RESULTS_FORMAT, "chip": "Apple M1", "probes": {"softmax-2e14": {"plan": plan}}}
        )
    )
    (row,) = probes.compare(d, probes.load_results(res))
    assert row["ops"] == [("zzz", None, "ane")] and row["agree"] == (0, 0)
    assert main(["probes", "compare", str(d), str(res)]) == 0
    assert "fastane -         mac ane       0 of 0 ops agree" in capsys.readouterr().out
    op["outputs"] = []  # an operation known by no output: one line, not a traceback
    res.write_text(
        json.dumps(
            {"format": probes.RESULTS_FORMAT, "chip": "Apple M1", "probes": {"softmax-2e14": {"plan": plan}}}
        )
    )
    assert main(["probes", "compare", str(d), str(res)]) == 2
    assert "not a compute plan: an operation's outputs or deviceUsage is malformed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "../x"},
        {"id": "x", "kind": "latency", "op": "conv", "computeUnits": "ALL"},  # no inputs
        {"id": "x", "kind": "latency", "op": "conv", "computeUnits": "ALL", "inputs": {"x": 5}},
        {
            "id": "x",
            "kind": "latency",
            "op": "conv",
            "computeUnits": "ALL",
            "inputs": {"x": [1 << 20, 1 << 20]},
        },
        {"id": "x", "kind": "other", "op": "conv", "computeUnits": "ALL", "inputs": {"x": [1]}},
        {"id": "x", "kind": "latency", "op": "conv", "computeUnits": "BOGUS", "inputs": {"x": [1]}},
        "x",
    ],
)
def test_a_malformed_manifest_entry_is_one_line(tmp_path, capsys, entry):
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"format": probes.RESULTS_FORMAT, "chip": "Apple M1", "probes": {"x": {}}}))
    (tmp_path / probes.MANIFEST).write_text(json.dumps({"format": "fastane-probes-1", "probes": [entry]}))
    assert main(["probes", "compare", str(tmp_path), str(res)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is malformed (an id that is a file name of the directory" in err[0]


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
    assert main(["probes", "build", str(tmp_path), "--only", "nope"]) == 2
    assert "no probe id starts with 'nope'" in capsys.readouterr().err
