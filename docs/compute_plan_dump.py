"""Dump Core ML's compute plan of a model as the JSON ``fastane plan --json`` writes, for
``fastane plan MODEL --compare mac_plan.json``.

UNTESTED on a Mac: it needs macOS 14.4 or later and coremltools 8 or later
(``coremltools.models.compute_plan``, a thin wrapper of Core ML's ``MLComputePlan``), which
the Linux machines fastane is developed on cannot run; fastane's suite drives it with a
stand-in for the plan only (tests/model/placement/test_compute_plan.py).  On the Mac:

    python compute_plan_dump.py net.mlpackage --compute-units CPU_AND_NE -o mac_plan.json

and on Linux:

    fastane plan net.mlpackage --compute-units CPU_AND_NE --compare mac_plan.json

The file mirrors MLComputePlan: ``modelStructure.program.functions.main.block.operations``,
each with ``operatorName``, ``outputs`` (names), ``deviceUsage`` (``preferred``,
``supported``: ``cpu``, ``gpu``, ``neuralEngine``; null for a ``const``) and
``estimatedCost`` (``weight``, null where Core ML gives none).  A NeuralNetwork
``.mlmodel`` gives ``modelStructure.neuralNetwork.layers`` (``name``, ``type``,
``outputNames``, ``deviceUsage``; Core ML estimates no cost for them).  Only the main
function's top-level block is written (fastane refuses nested blocks: ``cond``,
``while_loop``).

With ``--probes DIR`` (a directory ``fastane probes build DIR`` wrote; docs/probes.md) it
dumps the plan of every probe of ``DIR/probes.json`` under the probe's compute units and
times its predictions (``MLModel.predict`` from Python, seeded float32 inputs, ``--warmup``
calls dropped, the median and minimum of ``--runs`` more), all in ``DIR/results.json``
(``"format": "fastane-probes-results-1"``, with the Mac's chip, macOS and coremltools
versions) for ``fastane probes compare DIR DIR/results.json``:

    python compute_plan_dump.py --probes probes/
"""

from __future__ import annotations  # the annotations below on the Python 3.9 of macOS

import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import coremltools as ct
import numpy as np
from coremltools.models.compute_plan import MLComputePlan

FORMAT = "fastane-compute-plan-1"  # fastane.model.placement.compute_plan.FORMAT
PROBES_FORMAT = "fastane-probes-results-1"  # fastane.model.probes.RESULTS_FORMAT
DEVICE = {
    "MLNeuralEngineComputeDevice": "neuralEngine",
    "MLGPUComputeDevice": "gpu",
    "MLCPUComputeDevice": "cpu",
}


def device(d):
    return DEVICE.get(type(d).__name__, type(d).__name__)


def usage(u):
    if u is None:
        return None
    return {
        "preferred": device(u.preferred_compute_device),
        "supported": sorted(device(d) for d in u.supported_compute_devices),
    }


def chip() -> str:
    try:
        return subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return platform.machine()


def loaded(model: str, compute_units: str):
    """``(MLModel or None, compiled path)`` of ``model``.  Keep the MLModel while the path is
    used: coremltools deletes the compiled model with it ("This path is available only for
    the lifetime of this Python object", ``MLModel.get_compiled_model_path``)."""
    if model.rstrip("/").endswith(".mlmodelc"):
        return None, model
    m = ct.models.MLModel(model, compute_units=ct.ComputeUnit[compute_units])
    return m, m.get_compiled_model_path()


def dump(model: str, compute_units: str, compiled: str | None = None) -> dict:
    """The compute plan of ``model`` under ``compute_units`` as fastane reads it;
    ``compiled``: its compiled path from :func:`loaded`, whose MLModel the caller keeps."""
    owner = None  # the MLModel that owns the compiled path, alive until the plan is read
    if compiled is None:
        owner, compiled = loaded(model, compute_units)
    plan = MLComputePlan.load_from_path(compiled, compute_units=ct.ComputeUnit[compute_units])
    s = plan.model_structure
    if s.program is not None:
        ops = []
        for op in s.program.functions["main"].block.operations:
            cost = plan.get_estimated_cost_for_mlprogram_operation(op)
            ops.append(
                {
                    "operatorName": op.operator_name,
                    "outputs": [{"name": o.name} for o in op.outputs],
                    "deviceUsage": usage(plan.get_compute_device_usage_for_mlprogram_operation(op)),
                    "estimatedCost": None if cost is None else {"weight": cost.weight},
                }
            )
        structure = {"program": {"functions": {"main": {"block": {"operations": ops}}}}}
    elif s.neuralnetwork is not None:
        layers = [
            {
                "name": layer.name,
                "type": layer.type,
                "outputNames": list(layer.output_names),
                "deviceUsage": usage(plan.get_compute_device_usage_for_neuralnetwork_layer(layer)),
            }
            for layer in s.neuralnetwork.layers
        ]
        structure = {"neuralNetwork": {"layers": layers}}
    else:
        raise ValueError(f"{model}: neither an ML Program nor a NeuralNetwork (a pipeline?)")
    return {
        "format": FORMAT,
        "source": "MLComputePlan",
        "model": model,
        "computeUnits": compute_units,
        "chip": chip(),
        "modelStructure": structure,
    }


def timed(m, inputs: dict, warmup: int, runs: int) -> dict:
    """Milliseconds of ``runs`` predictions of the MLModel ``m`` on seeded float32 ``inputs``
    (name -> shape) after ``warmup`` more: median and minimum."""
    rng = np.random.default_rng(0)
    feed = {k: rng.standard_normal(v).astype(np.float32) for k, v in inputs.items()}
    for _ in range(warmup):
        m.predict(feed)
    ms = []
    for _ in range(runs):
        t = time.perf_counter()
        m.predict(feed)
        ms.append((time.perf_counter() - t) * 1e3)
    return {"median": statistics.median(ms), "min": min(ms), "runs": runs, "warmup": warmup}


def probes(directory: str, warmup: int, runs: int) -> str:
    """Every probe of ``directory/probes.json`` dumped and timed into
    ``directory/results.json``, rewritten after each probe; a probe that fails (its compile,
    say) is recorded with its error and the others go on."""
    with open(os.path.join(directory, "probes.json")) as f:
        manifest = json.load(f)["probes"]
    out = {
        "format": PROBES_FORMAT,
        "chip": chip(),
        "os": "macOS " + platform.mac_ver()[0],
        "coremltools": ct.__version__,
        "timer": "MLModel.predict from Python (time.perf_counter)",
        "probes": {},
    }
    result = os.path.join(directory, "results.json")
    for i, p in enumerate(manifest, 1):
        pid = os.path.basename(p["id"])  # a file of the directory, whatever the manifest says
        path = os.path.join(directory, pid + ".mlpackage")
        print(f"[{i}/{len(manifest)}] {pid}", flush=True)
        entry = {"plan": None, "time_ms": None}
        try:  # a probe Core ML refuses is recorded with its error and stops no other
            m, compiled = loaded(path, p["computeUnits"])
            entry["plan"] = dump(path, p["computeUnits"], compiled)
            entry["time_ms"] = timed(m, p["inputs"], warmup, runs)
        except Exception as exc:  # the plan, if read, is kept
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"  {entry['error']}", flush=True)
        out["probes"][pid] = entry
        with open(result, "w") as f:
            json.dump(out, f, indent=1)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", help="a .mlpackage, .mlmodel or compiled .mlmodelc")
    p.add_argument("--compute-units", default="ALL", choices=["ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY"])
    p.add_argument("-o", "--output", default="mac_plan.json")
    p.add_argument(
        "--probes", metavar="DIR", help="dump and time every probe `fastane probes build DIR` wrote"
    )
    p.add_argument("--warmup", type=int, default=5, help="predictions dropped before timing a probe")
    p.add_argument("--runs", type=int, default=50, help="predictions timed per probe")
    args = p.parse_args()
    if args.probes:
        print(f"wrote {probes(args.probes, args.warmup, args.runs)}")
        return
    if args.model is None:
        p.error("give a model, or --probes DIR")
    try:
        plan = dump(args.model, args.compute_units)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    with open(args.output, "w") as f:
        json.dump(plan, f, indent=1)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
