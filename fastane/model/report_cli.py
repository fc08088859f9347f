"""``fastane report MODEL -o REPORT.html [--input NAME=FILE.npy] [--random] [--shape NAME=1x3x224x224]
[--chip CHIP] [--compute-units UNITS] [--precision fp16|fp32] [--quiet]``: one self-contained HTML
page of a model (:meth:`fastane.Model.html_report`): the summary, the predicted time on every
chip, the layer table with Core ML's predicted placement, the graph and the roofline.

With ``--input`` or ``--random`` the model runs (errors against fp32, saturations and LUT events
per layer); without either, the page is counted from the shapes alone (the model's, or
``--shape``), as ``fastane run --stats-only``.  A bad model, argument or output path is one line
on stderr and exit status 2, before any work where it can be checked first.
"""

from __future__ import annotations

import argparse

from ..errors import ModelError
from .cli import (
    CommandError,
    add_input_arguments,
    add_precision_argument,
    add_quiet_argument,
    check_html,
    error_line,
    read_inputs,
    warning_line,
    write_html,
)

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model file (.onnx, .mlpackage, .mlmodel)")
    p.add_argument(
        "-o", "--output", dest="html", required=True, metavar="REPORT.html", help="the page to write"
    )
    add_input_arguments(p)
    p.add_argument(
        "--chip",
        default="m1",
        help="the chip the model runs as on: the plan, the table, the roofline and the numerics of its "
        "ANE generation (default m1)",
    )
    p.add_argument(
        "--compute-units", default="ALL", metavar="UNITS", help="ALL, CPU_AND_NE, CPU_AND_GPU or CPU_ONLY"
    )
    add_precision_argument(p)
    add_quiet_argument(p, "the random inputs, ")
    p.set_defaults(command_name="report")


def run(args) -> int:
    from . import load_model
    from ..roofline import chips as _chips
    from .placement.compute_plan import check_precision
    from .placement.predict import check_units
    from .run.model import progress_bar

    args.stats_only = not args.input and not args.random
    try:
        try:
            _chips.get(args.chip)
            check_units(args.compute_units)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        check_precision(args.precision)
        check_html(args.html)
        model = load_model(args.model, weights=not args.stats_only, chip=args.chip)
        check_precision(args.precision, model.graph)
        arrays = read_inputs(model, args)
        rep = model.report(
            arrays,
            args.chip,
            stats_only=args.stats_only,
            progress=None if args.quiet else progress_bar(),
        )
        plan = model.compute_plan(
            {k: getattr(v, "shape", v) for k, v in arrays.items()},
            args.chip,
            args.compute_units,
            warn=False,
            report=rep,
            precision=args.precision,
        )
        write_html(model, arrays, args, rep, plan)
    except (
        CommandError,
        ModelError,
        ValueError,
        TypeError,
        NotImplementedError,
        OSError,
        RuntimeError,
    ) as exc:
        return error_line("report", exc)
    warning_line("report", plan, args.quiet)
    return 0
