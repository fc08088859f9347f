"""``fastane sweep MODEL --input NAME --range LO:HI:N [--output NAME] [--at INDEX]
[--plot FILE.png] [--json] [--set OTHER=FILE.npy] [--shape NAME=1x3x8x8]``: every element
of input ``NAME`` (or only ``--element INDEX``) set to each value of ``linspace(LO, HI, N)`` in turn, the model run on
the emulated ANE and in fp32, one output element read (:func:`fastane.model.run.hunt.sweep`).
The other inputs come from ``--set`` or are seeded standard-normal.  Without ``--plot``
(or without matplotlib) a text table; ``--json`` the points as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ..errors import ModelError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model file (.onnx, .mlpackage, .mlmodel)")
    p.add_argument("--input", "-i", required=True, metavar="NAME", help="the input to sweep")
    p.add_argument("--range", required=True, metavar="LO:HI:N", help="the values, e.g. -20:20:2001")
    p.add_argument("--output", metavar="NAME", help="the output to read (default the first)")
    p.add_argument("--at", type=int, default=0, metavar="INDEX", help="flat element index (default 0)")
    p.add_argument(
        "--element",
        type=int,
        default=None,
        metavar="INDEX",
        help="sweep only this flat element of the input (the rest from --set or random)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="another input's value (default seeded standard-normal)",
    )
    p.add_argument(
        "--shape", action="append", default=[], metavar="NAME=1x3x8x8", help="bind an input's symbolic shape"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="FILE.png", help="plot (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="the points as JSON")
    p.add_argument(
        "--every", type=int, default=0, help="print every k-th point of the table (default: about 40 rows)"
    )


def run(args) -> int:
    from . import load_model
    from .cli import CommandError, parse_shape
    from .run.hunt import parse_range, sweep

    try:
        values = parse_range(args.range)
        model = load_model(args.model)
        shapes = dict(parse_shape(s) for s in args.shape)
        rng = np.random.default_rng(args.seed)
        base = {}
        for item in args.set:
            if "=" not in item:
                raise CommandError(f"--set {item!r}: expected NAME=FILE.npy")
            k, path = item.split("=", 1)
            base[k] = np.load(path, allow_pickle=False)
        for k, t in model.inputs.items():
            if k in base:
                continue
            shape = shapes.get(k, t.shape)
            if any(isinstance(d, str) for d in shape):
                raise CommandError(f"input {k!r} has shape {t}: bind it with --shape")
            if np.dtype(t.dtype).kind != "f":
                raise CommandError(f"input {k!r} ({t}) is not float: give it with --set")
            base[k] = rng.standard_normal(shape).astype(t.dtype)
        sw = sweep(model, args.input, values, base, args.output, args.at, args.element)
    except (CommandError, ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        print(f"fastane sweep: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(sw.as_dict()))
    else:
        print(sw.table(args.every or max(1, len(values) // 40)))
    if args.plot:
        try:
            sw.plot(args.plot)
        except RuntimeError as exc:
            print(f"fastane sweep: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0
