"""The ``fastane`` command line: ``fastane demo | disasm | roofline | bench | run | sweep | plan | probes | report | eval | warm``.

Each subcommand lives in the module that owns its subject and exposes
``add_arguments(parser)`` and ``run(args) -> int``; modules are imported only when
their subcommand runs, so ``fastane --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, one-line help)
COMMANDS = {
    "demo": ("fastane.demo", "show the ANE accumulator saturating where a CPU would not, and throughput"),
    "disasm": ("fastane.td.disasm", "disassemble task descriptors (.hwx, corpus .bin, raw TD)"),
    "roofline": (
        "fastane.networks.cli",
        "roofline model of built-in networks and model files on the ANE (table, JSON, plot)",
    ),
    "bench": ("fastane.bench", "run the benchmark suite; store runs and compare them as in-run ratios"),
    "run": ("fastane.model.cli", "run a model (ONNX, Core ML) on the emulated ANE, with a per-layer report"),
    "sweep": (
        "fastane.model.sweep_cli",
        "sweep a model input over a range: an output on the ANE and in fp32",
    ),
    "plan": (
        "fastane.model.plan_cli",
        "where Core ML would run each op (a compute plan predicted per chip and compute units)",
    ),
    "probes": (
        "fastane.model.probes_cli",
        "the programs a Mac is asked to run to decide open placement and timing questions: build, compare",
    ),
    "report": (
        "fastane.model.report_cli",
        "one self-contained HTML page of a model: placement, errors, graph, roofline, time per chip",
    ),
    "eval": (
        "fastane.model.eval_cli",
        "evaluate a model over a dataset: accuracy on the ANE against float32, the inputs that changed",
    ),
    "warm": ("fastane.warm", "compile the kernels a first run needs into Numba's cache, on every core"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fastane", description="Apple Neural Engine (M1) emulator")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _command(args, rest)
    except Exception as exc:  # a bug: one line, not a traceback (FASTANE_TRACEBACK=1 shows it)
        if os.environ.get("FASTANE_TRACEBACK"):
            raise
        from .model.cli import internal_error

        return internal_error(args.command, exc)


def _command(args, rest) -> int:
    module = importlib.import_module(COMMANDS[args.command][0])
    cmd = argparse.ArgumentParser(prog=f"fastane {args.command}", description=COMMANDS[args.command][1])
    if args.command == "sweep":  # --range -20:20:2001 (a value that starts with '-')
        rest = [
            f"--range={rest[i + 1]}" if a == "--range" and i + 1 < len(rest) else a
            for i, a in enumerate(rest)
            if not (i and rest[i - 1] == "--range")
        ]
    module.add_arguments(cmd)
    return int(module.run(cmd.parse_args(rest)) or 0)


if __name__ == "__main__":
    sys.exit(main())
