"""``fastane eval MODEL DATA [--labels L] [--chip CHIP] [--batch N] [--workers N]
[--scheduler ADDRESS] [-o results.csv|.parquet|.jsonl] [--resume] [--report] [--json]
[--html PAGE.html]``: does
the model's accuracy survive the ANE, over a whole dataset (:func:`fastane.evaluate`).

DATA is an ``.npz`` of one array per model input (the inputs along the first axis), a folder
of ``.npy``/``.npz`` files (one input each) or a folder of images (``--resize``, ``--crop``,
``--mean``, ``--std``, ``--scale``, ``--layout`` make them inputs, as torchvision's
transforms would).  The output is the summary (agreement with the float32 reference,
accuracy with ``--labels``, the inputs that changed their answer, events); ``--report`` adds
the layers where inputs went beyond tolerance, ``--json`` prints everything as JSON,
``--html`` writes the evaluation's page (:meth:`fastane.model.evaluate.Evaluation.html`), whole or
not at all, its path checked before the run.
``--workers N`` runs N worker processes of an embedded Dask cluster (default: this process,
or one worker per core when the first task shows that the rest would take more than
:data:`fastane.model.evaluate.AUTO_CLUSTER_SECONDS`), ``--scheduler tcp://host:8786`` an
existing one.  A bad model, dataset
or argument is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ModelError, quote

__all__ = ["add_arguments", "run"]


def _floats(text: str) -> tuple:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def _size(text: str) -> tuple:
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model file (.onnx, .mlpackage, .mlmodel)")
    p.add_argument(
        "data", metavar="DATA", help="an .npz (inputs along the first axis), or a folder of .npy/.npz/images"
    )
    p.add_argument(
        "--labels",
        metavar="FILE",
        default=None,
        help="class labels: .npy, FILE.npz:KEY, .txt (one a line), .csv (id,label)",
    )
    p.add_argument("--chip", default="m1", help="run as on this chip (default m1)")
    p.add_argument(
        "--task",
        default="auto",
        choices=("auto", "classify", "sequence", "regress"),
        help="the metric: top-1, arg-max per position, or errors only (default: from the output's shape)",
    )
    p.add_argument(
        "--target",
        metavar="OUTPUT",
        default=None,
        help="the output the metric reads (default: the first float one)",
    )
    p.add_argument("--class-axis", type=int, default=-1, help="the axis of the classes (default -1)")
    p.add_argument(
        "--reference",
        default="auto",
        choices=("auto", "onnxruntime", "fastane"),
        help="the float32 reference (default: onnxruntime for ONNX when installed, else fastane's host path)",
    )
    p.add_argument("--batch", type=int, default=16, help="inputs per task (default 16)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes: 1 runs here, N on a local Dask cluster (default: here, or one per "
        "core when the first task shows the rest would take more than 20 s and Dask is installed)",
    )
    p.add_argument(
        "--scheduler", metavar="ADDRESS", default=None, help="run on this Dask scheduler (tcp://host:8786)"
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="RESULTS",
        default=None,
        help="the rows, one per input: .csv, .parquet or .jsonl",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue the run whose partial results -o's file has"
    )
    p.add_argument("--report", action="store_true", help="also the layers where inputs went beyond tolerance")
    p.add_argument("--json", action="store_true", help="the summary and the run as JSON on stdout")
    p.add_argument(
        "--html",
        metavar="PAGE.html",
        default=None,
        help="write the evaluation as one self-contained HTML page (needs jinja2: the report extra)",
    )
    p.add_argument("--worst", type=int, default=5, help="the worst inputs kept per layer (default 5)")
    g = p.add_argument_group("images (a folder of images as DATA)")
    g.add_argument("--resize", type=_size, default=None, metavar="N|HxW", help="shorter side to N, or to HxW")
    g.add_argument("--crop", type=_size, default=None, metavar="N|HxW", help="centre crop")
    g.add_argument("--scale", type=float, default=1 / 255, help="multiply the pixels by this (default 1/255)")
    g.add_argument("--mean", type=_floats, default=None, metavar="R,G,B", help="subtract per channel")
    g.add_argument("--std", type=_floats, default=None, metavar="R,G,B", help="divide per channel")
    g.add_argument("--layout", default="NCHW", choices=("NCHW", "NHWC"), help="default NCHW")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def run(args) -> int:
    from .cli import CommandError, check_html, error_line, save_html
    from .evaluate import Preprocess, evaluate, partial_path

    try:
        if args.html:
            check_html(args.html)
        pre = Preprocess(
            resize=args.resize,
            crop=args.crop,
            scale=args.scale,
            mean=args.mean,
            std=args.std,
            layout=args.layout,
        )
        ev = evaluate(
            args.model,
            args.data,
            args.labels,
            chip=args.chip,
            task=args.task,
            target=args.target,
            class_axis=args.class_axis,
            reference=args.reference,
            batch=args.batch,
            workers=args.workers,
            scheduler=args.scheduler,
            output=args.output,
            resume=args.resume,
            preprocess=pre,
            worst=args.worst,
            progress=False if args.quiet or args.json else None,
        )
    except (CommandError, ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        return error_line("eval", exc)
    except KeyboardInterrupt:
        kept = (
            f"; the rows done are in {quote(partial_path(args.output))}: --resume continues"
            if args.output
            else ""
        )
        print(f"fastane eval: interrupted{kept}", file=sys.stderr)
        return 130
    if args.json:
        print(ev.to_json())
    else:
        print(ev.table(layers=15 if args.report else 0))
    if args.output:
        print(f"fastane eval: {len(ev.rows)} rows written to {args.output}", file=sys.stderr)
    if args.html:
        try:
            save_html(args.html, ev.html(), args.quiet)
        except (CommandError, ValueError, OSError, RuntimeError) as exc:
            return error_line("eval", exc)  # the summary printed, the rows written
    return 0
