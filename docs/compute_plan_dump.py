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
"""

import argparse
import json
import platform
import subprocess

import coremltools as ct
from coremltools.models.compute_plan import MLComputePlan

FORMAT = "fastane-compute-plan-1"  # fastane.model.placement.compute_plan.FORMAT
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a .mlpackage, .mlmodel or compiled .mlmodelc")
    p.add_argument("--compute-units", default="ALL", choices=["ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY"])
    p.add_argument("-o", "--output", default="mac_plan.json")
    args = p.parse_args()
    units = ct.ComputeUnit[args.compute_units]
    path = args.model
    if not path.rstrip("/").endswith(".mlmodelc"):
        path = ct.models.MLModel(args.model, compute_units=units).get_compiled_model_path()
    plan = MLComputePlan.load_from_path(path, compute_units=units)
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
        raise SystemExit(f"{args.model}: neither an ML Program nor a NeuralNetwork (a pipeline?)")
    out = {
        "format": FORMAT,
        "source": "MLComputePlan",
        "model": args.model,
        "computeUnits": args.compute_units,
        "chip": chip(),
        "modelStructure": structure,
    }
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
