"""``fastane sweep MODEL --input NAME --range LO:HI:N [--output NAME] [--at INDEX]
[--plot FILE.png] [--json] [--set OTHER=FILE.npy] [--shape NAME=1x3x8x8] [--chip CHIP]``: every element
of input ``NAME`` (or only ``--element INDEX``) set to each value of ``linspace(LO, HI, N)`` in turn, the model run on
the emulated ANE (as on ``--chip``, default the M1) and in fp32, one output element read
(:func:`fastane.model.run.hunt.sweep`).
The other inputs come from ``--set`` or are seeded standard-normal.  Without ``--plot``
(or without matplotlib) a text table; ``--json`` the points as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys


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
    p.add_argument(
        "--chip",
        default="m1",
        help="run as on this chip: the numerics of its ANE generation, e.g. the crop path of slices (default m1)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="plot (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="the points as JSON")
    p.add_argument(
        "--every", type=int, default=0, help="print every k-th point of the table (default: about 40 rows)"
    )


def run(args) -> int:
    from . import load_model
    from .cli import CommandError, error_line, read_inputs
    from .run.hunt import parse_range, sweep

    try:
        values = parse_range(args.range)
        model = load_model(args.model, chip=args.chip)
        for item in args.set:
            if "=" not in item:
                raise CommandError(f"--set {item!r}: expected NAME=FILE.npy")
        # the inputs as ``fastane run --random`` makes them: the --set files read under the
        # files rule, the model bound (sizes and host budget) before any value is drawn
        given = argparse.Namespace(input=args.set, shape=args.shape, random=True, seed=args.seed)
        base = read_inputs(model, given)
        sw = sweep(model, args.input, values, base, args.output, args.at, args.element)
    except (CommandError, ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        return error_line("sweep", exc)
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
