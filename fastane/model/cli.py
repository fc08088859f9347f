"""``fastane run MODEL --input NAME=x.npy [-o out.npz] [--report] [--json] [--chip CHIP]
[--shape NAME=1x3x224x224] [--random] [--stats-only] [--compute-units UNITS] [--quiet]``: run
a model on the emulated ANE.

Without ``--report`` it prints each output's name, shape and dtype (and saves them with
``-o``); ``--report`` prints the per-layer table (:meth:`fastane.Model.report`), ``--json``
the same as JSON, ``--stats-only`` the report from the shapes alone (nothing computed:
the same programs counted on a stats-only device).  ``--chip`` runs the model as on that chip:
its time model, and the numerics that differ between ANE generations (the crop path of
slices: :mod:`fastane.model.run.movement`).  For a Core ML model, or any model with
``--compute-units``, the predicted compute plan (:meth:`fastane.Model.compute_plan`) gives
the report its Core ML column and table, and a plan that leaves the ANE one warning line on
stderr (:func:`warning_line`; ``--quiet`` drops it, ``--json`` carries it too).
``--random`` feeds seeded standard-normal inputs to the inputs not given (their shapes from
the model or ``--shape``).  A bad model file, a missing input, a wrong
shape or dtype is one line on stderr and exit status 2; any other exception (a bug in
fastane) one line too, ``fastane run: internal error: TYPE: MESSAGE``, and exit status 3
(the environment variable ``FASTANE_TRACEBACK=1`` shows its traceback instead).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..errors import ModelError, quote, quote_names
from .budget import MAX_TENSOR_ELEMENTS
from .files import npy_header, open_file
from .tensor import check_size

__all__ = [
    "add_arguments",
    "add_input_arguments",
    "add_shape_argument",
    "add_quiet_argument",
    "add_precision_argument",
    "warning_line",
    "check_html",
    "write_html",
    "save_html",
    "run",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model file (.onnx, .mlpackage, .mlmodel)")
    add_input_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT.npz", help="save the outputs (fp16) as .npz")
    p.add_argument(
        "--report",
        action="store_true",
        help="per-layer report: placement, tasks, predicted time, saturations, error against fp32",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument(
        "--html",
        metavar="REPORT.html",
        default=None,
        help="write the report as one self-contained HTML page (needs jinja2: the report extra)",
    )
    p.add_argument(
        "--chip",
        default="m1",
        help="run as on this chip: its time model and the numerics of its ANE generation, e.g. the "
        "crop path of slices (default m1)",
    )
    p.add_argument(
        "--stats-only",
        action="store_true",
        help="report from the shapes alone (model or --shape), computing nothing",
    )
    p.add_argument(
        "--first-divergence",
        action="store_true",
        help="stop at the first layer whose error against fp32 (same layer, same "
        "inputs) leaves its tolerance, or where an inf/NaN is born; print its "
        "inputs' ranges",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="one error tolerance for --first-divergence (default: per op class)",
    )
    p.add_argument(
        "--compare-placement",
        metavar="OBSERVED.json",
        default=None,
        help="with --report: compare the predicted placement with one observed on a "
        "Mac (a plan of docs/compute_plan_dump.py, or {op output name: ane|cpu|gpu})",
    )
    p.add_argument(
        "--compute-units",
        default=None,
        metavar="UNITS",
        help="predict Core ML's placement per layer for ALL, CPU_AND_NE, CPU_AND_GPU or "
        "CPU_ONLY (an estimate; default ALL for Core ML models): a column of the report, "
        "and a warning when the model would leave the ANE",
    )
    add_precision_argument(p)
    add_quiet_argument(p, "the random inputs, ")


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    """``--input NAME=FILE.npy`` (repeated), ``--shape``, ``--random`` and ``--seed``: the inputs
    :func:`read_inputs` reads or makes."""
    p.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input array (repeat for each input; NAME= may be left out for a one-input model)",
    )
    add_shape_argument(p, " for --random inputs")
    p.add_argument(
        "--random",
        action="store_true",
        help="feed seeded standard-normal data to the inputs not given with --input",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """``--precision fp16|fp32``: the compute precision the predicted compute plan assumes for
    a model that declares none (:meth:`fastane.Model.compute_plan`)."""
    p.add_argument(
        "--precision",
        default=None,
        metavar="fp16|fp32",
        help="the compute precision Core ML's converter would give a model that declares none "
        "(ONNX, NeuralNetwork): fp16 (default, coremltools' default) or fp32 (the fp32 "
        "placement rule applies); refused for an ML Program, whose precision is its own",
    )


def add_quiet_argument(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--quiet``: no notes or warnings on stderr (errors still print)."""
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help=f"no notes on stderr ({what}the warning that Core ML would leave the ANE)",
    )


def add_shape_argument(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--shape NAME=1x3x224x224`` (repeated): an input's shape (:func:`parse_shape`)."""
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=1x3x224x224",
        help="bind an input's shape (symbolic dimensions)" + what,
    )


class CommandError(Exception):
    """A command-line argument the commands refuse (printed as one line, exit status 2)."""


#: the longest error line the commands print (characters)
MAX_ERROR_LINE = 400


def error_line(command: str, exc) -> int:
    """Print ``exc`` (an exception or a message) as one line on stderr (its first line, unprintable characters
    escaped, cut after :data:`MAX_ERROR_LINE` characters); the exit status, 2."""
    lines = str(exc).splitlines()
    msg = quote(lines[0], MAX_ERROR_LINE, marks=False) if lines else type(exc).__name__
    print(f"fastane {command}: error: {msg}", file=sys.stderr)
    return 2


#: the exit status of an exception that is not the model's or the command line's (a bug)
INTERNAL_ERROR = 3


def internal_error(command: str, exc: BaseException) -> int:
    """Print ``exc`` (not a ModelError: a bug, or memory the budget did not foresee) as one
    line, ``fastane run: internal error: MemoryError: ...``; the exit status,
    :data:`INTERNAL_ERROR`."""
    lines = str(exc).splitlines()
    msg = quote(f"{type(exc).__name__}: {lines[0] if lines else ''}", MAX_ERROR_LINE, marks=False)
    print(f"fastane {command}: internal error: {msg}", file=sys.stderr)
    return INTERNAL_ERROR


def warning_line(command: str, plan, quiet: bool = False):
    """Print the :class:`~fastane.model.placement.compute_plan.LeavesANE` of ``plan`` (a
    compute plan, or None) as one line on stderr, ``fastane plan: warning: Core ML may run
    ...``, unless ``quiet``; return it (None when the plan stays on the ANE)."""
    leave = None if plan is None else plan.leaves_ane()
    if leave is not None and not quiet:
        print(f"fastane {command}: warning: {leave.message}", file=sys.stderr)
    return leave


def parse_shape(text: str):
    """``NAME=1x3x224x224`` (a ``--shape`` argument) -> ``(name, shape)``; :class:`CommandError` if malformed."""
    if "=" not in text:
        raise CommandError(f"--shape {text!r}: expected NAME=1x3x224x224")
    name, dims = text.split("=", 1)
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
    except ValueError:
        raise CommandError(f"--shape {text!r}: dimensions must be integers separated by 'x'") from None
    if any(d < 0 for d in shape):
        raise CommandError(f"--shape {text!r}: negative dimension")
    return name, shape


def _bound_shape(t, name: str, shapes: dict) -> tuple:
    """The concrete shape of input ``name`` (type ``t``): its declared shape, or the one
    ``--shape`` gives; a symbolic dimension left unbound is a one-line error."""
    shape = shapes.get(name, t.shape)
    if len(shape) != len(t.shape) or any(isinstance(d, str) for d in shape):
        raise CommandError(
            f"input {quote(name)} has shape {t}: bind it with --shape {quote(name, marks=False)}="
            + "x".join(str(d) if isinstance(d, int) else "N" for d in t.shape)
        )
    return shape


def read_inputs(model, args) -> dict:
    names = list(model.inputs)
    # a name with unprintable characters is given as the messages print it
    shown = {quote(n, None, marks=False): n for n in names}
    arrays, npy = {}, {}
    try:
        for item in args.input:
            name, path = item.split("=", 1) if "=" in item else (None, item)
            if name is None:
                if len(names) != 1:
                    raise CommandError(
                        f"--input {item!r}: the model has {len(names)} inputs "
                        f"({quote_names(names)}); write NAME=FILE.npy"
                    )
                name = names[0]
            name = name if name in model.inputs else shown.get(name, name)
            if name not in model.inputs:
                raise CommandError(
                    f"--input {item!r}: the model has no input {quote(name)} (inputs: {quote_names(names)})"
                )
            # opened as a model's files are (a regular file: a FIFO would block), within the
            # largest tensor a model may take (float64) and a header; only the header is read
            # until the model is bound with its shape
            f = open_file(
                path,
                f"--input {quote(item)}",
                MAX_TENSOR_ELEMENTS * 8 + (1 << 20),
                "the largest input",
                missing=f"--input {quote(item)}: cannot read {quote(path)}: no such file",
            )
            if name in npy:  # given twice: the last one counts
                npy[name][0].close()
            npy[name] = (f, item, path)
            try:
                shape = npy_header(f)[0]
            except (OSError, ValueError, EOFError) as exc:
                raise CommandError(
                    f"--input {quote(item)}: cannot read {quote(path)} as a .npy array ({exc})"
                ) from None
            check_size(shape, f"--input {quote(item)}")
            arrays[name] = shape
        return _inputs_bound(model, args, names, shown, arrays, npy)
    finally:
        for f, _, _ in npy.values():
            f.close()


def _read_npy(f, item, path, shape) -> np.ndarray:
    """The array of the open .npy file ``f`` whose header gave ``shape``."""
    try:
        f.seek(0)
        a = np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CommandError(
            f"--input {quote(item)}: cannot read {quote(path)} as a .npy array ({exc})"
        ) from None
    if a.shape != shape:
        raise CommandError(f"--input {quote(item)}: {quote(path)} changed while it was read")
    return a


def _inputs_bound(model, args, names, shown, arrays, npy) -> dict:
    """The rest of :func:`read_inputs`: ``arrays`` maps each ``--input`` to its header's shape,
    its data read (``npy``: the open files) once the model is bound with every shape."""
    shapes = dict(parse_shape(s) for s in args.shape)
    shapes = {k if k in model.inputs else shown.get(k, k): v for k, v in shapes.items()}
    for name in shapes:
        if name not in model.inputs:
            raise CommandError(
                f"--shape: the model has no input {quote(name)} (inputs: {quote_names(names)})"
            )
    missing = [n for n in names if n not in arrays]
    if getattr(args, "stats_only", False):
        out = {}
        for name in names:
            if name in arrays:
                out[name] = arrays[name]
                continue
            out[name] = _bound_shape(model.inputs[name], name, shapes)
        return out
    if missing and not args.random:
        t = model.inputs[missing[0]]
        name = quote(missing[0], marks=False)
        raise CommandError(f"missing input '{name}' ({t}): give --input {name}=FILE.npy (or --random)")
    want = {name: _bound_shape(model.inputs[name], name, shapes) for name in missing}
    for name in missing:
        t = model.inputs[name]
        if np.dtype(t.dtype).kind != "f":
            raise CommandError(f"input {quote(name)} ({t}) is not a float tensor: --random cannot make it")
    # bind first: the sizes and the host budget are checked before any input is read or made
    model.bind({**arrays, **want})
    for name, (f, item, path) in npy.items():
        arrays[name] = _read_npy(f, item, path, arrays[name])
    rng = np.random.default_rng(args.seed)
    for name in missing:
        t = model.inputs[name]
        shape = want[name]
        arrays[name] = _standard_normal(rng, shape, t.dtype)
        if not getattr(args, "quiet", False):
            print(
                f"fastane {getattr(args, 'command_name', 'run')}: input {quote(name)}: random {np.dtype(t.dtype).name}"
                f"[{'x'.join(map(str, shape))}] (seed {args.seed})",
                file=sys.stderr,
            )
    return arrays


def _standard_normal(rng, shape, dtype, chunk: int = 1 << 20) -> np.ndarray:
    """``rng.standard_normal(shape).astype(dtype)``, drawn ``chunk`` values at a time (the
    same values: the generator fills in order) so that no float64 array of the whole
    shape is made."""
    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    for i in range(0, flat.size, chunk):
        flat[i : i + chunk] = rng.standard_normal(min(chunk, flat.size - i))
    return out


def run(args) -> int:
    from . import load_model
    from ..roofline import chips as _chips
    from .placement.compute_plan import check_precision
    from .placement.predict import check_units

    try:
        try:
            _chips.get(args.chip)
        except (KeyError, ValueError) as exc:
            raise CommandError(f"--chip {args.chip!r}: {exc}") from None
        if getattr(args, "compute_units", None) is not None:
            try:
                check_units(args.compute_units)
            except ValueError as exc:  # before the model runs: one line, no notes before it
                raise CommandError(f"--compute-units: {exc}") from None
        check_precision(getattr(args, "precision", None))
        if args.html:
            check_html(args.html)
        model = load_model(args.model, weights=not args.stats_only, chip=args.chip)
        check_precision(getattr(args, "precision", None), model.graph)  # before the inputs' notes
        arrays = read_inputs(model, args)
        if args.stats_only and args.output:
            raise CommandError("--stats-only computes nothing: it cannot save outputs (-o)")
        if getattr(args, "first_divergence", False):
            return _first_divergence(model, arrays, args)
        if args.report or args.json or args.stats_only or args.html:
            rep, outs = _report(model, arrays, args), None
        else:
            rep, outs = None, model(arrays)
    except (CommandError, ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        return error_line("run", exc)
    try:
        plan = _compute_plan(model, arrays, args, rep)
        if args.html:
            write_html(model, arrays, args, rep, plan)
    except (CommandError, ValueError, OSError, RuntimeError) as exc:
        return error_line("run", exc)
    if outs is None and not (args.report or args.json or args.stats_only):
        outs = rep.values
    if outs is None:
        rc = _print_report(rep, plan, args)
        if rc:
            return rc
        outs = rep.values if args.output else None
    else:
        for name, v in outs.items():
            print(f"{quote(name, marks=False)}: {v.dtype.name}[{'x'.join(map(str, v.shape))}]")
    if args.output:
        np.savez(args.output, **outs)
        print(f"fastane run: outputs saved to {args.output}", file=sys.stderr)
    warning_line("run", plan, args.quiet)
    return 0


def _compute_plan(model, arrays, args, rep=None):
    """The predicted compute plan (:meth:`fastane.Model.compute_plan`, its weights from
    ``rep`` where there is one) for ``--compute-units`` in ``--precision``, by default ``ALL``
    for a Core ML model or with ``--precision``; None for another model without either."""
    units = getattr(args, "compute_units", None)
    precision = getattr(args, "precision", None)
    if units is None and (str(model.graph.origin).startswith("coreml") or precision is not None):
        units = "ALL"
    if units is None:
        return None
    return model.compute_plan(_shapes(arrays), args.chip, units, warn=False, report=rep, precision=precision)


def check_html(path: str) -> str:
    """``path`` (``--html``, ``fastane report -o``) as an absolute path; a :class:`CommandError`
    before any work when its folder is missing or it names a folder, or Jinja2 is missing."""
    import importlib.util
    import os

    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise CommandError(f"--html {quote(path)}: a folder, not a file")
    if not os.path.isdir(os.path.dirname(full)):
        raise CommandError(f"--html {quote(path)}: no such folder {quote(os.path.dirname(full))}")
    if importlib.util.find_spec("jinja2") is None:
        from .run.page import NEEDS_JINJA2

        raise CommandError(NEEDS_JINJA2)
    return full


def write_html(model, arrays, args, rep=None, plan=None) -> None:
    """Write the HTML page of ``model`` (:meth:`fastane.Model.html_report`) for ``arrays`` (or
    shapes) on ``--chip`` to ``args.html``, from ``rep`` and ``plan`` where the command has
    them; the file is written whole or not at all (:func:`save_html`)."""
    import os

    units = getattr(args, "compute_units", None) or "ALL"
    if plan is not None and plan.compute_units != units:
        plan = None
    page = model.html_report(
        arrays,
        args.chip,
        units,
        precision=getattr(args, "precision", None),
        stats_only=args.stats_only,
        report=rep,
        plan=plan,
        source=os.path.basename(args.model),
    )
    save_html(args.html, page, getattr(args, "quiet", False))


def save_html(html: str, page: str, quiet: bool = False) -> None:
    """Write ``page`` to ``html`` (``--html``, checked again by :func:`check_html`) whole or not
    at all (a temporary file beside it, renamed), and say so on stderr unless ``quiet``."""
    import os
    import tempfile

    path = check_html(html)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fastane-", suffix=".html", dir=os.path.dirname(path))
    except OSError as exc:
        raise CommandError(f"--html {quote(html)}: cannot write there ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp's 0600 would keep the page from a web server
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if not quiet:
        print(f"fastane: wrote {html} ({len(page.encode()) / 1024:.0f} KiB)", file=sys.stderr)


def _first_divergence(model, arrays, args) -> int:
    """``fastane run --first-divergence``: the first layer beyond the tolerance."""
    from .run.hunt import first_divergence

    if args.stats_only:
        raise CommandError("--first-divergence computes the model: not with --stats-only")
    div = first_divergence(model, arrays, args.tolerance)
    if args.json:
        import json

        print(json.dumps(div.as_dict(), indent=1))
    else:
        print(div.text())
    return 0


def _report(model, arrays, args):
    """The per-layer report of ``fastane run --report/--json/--stats-only`` on ``--chip``."""
    from .run.model import progress_bar

    return model.report(
        arrays,
        chip=args.chip,
        stats_only=args.stats_only,
        progress=None if args.json or args.quiet else progress_bar(),
    )


def _print_report(rep, plan, args) -> int:
    """Print ``rep`` (a table, or JSON) with the predicted compute plan ``plan`` (or None) per
    layer and its comparison with a placement observed on a Mac (``--compare-placement``)."""
    layers = {} if plan is None else plan.by_layer()
    if args.json:
        d = rep.as_dict()
        if plan is not None:
            leave = plan.leaves_ane()
            d["predicted_placement"] = {
                "compute_units": plan.compute_units,
                "precision": plan.precision,
                "precision_declared": plan.precision_declared,
                "estimate": True,
                "layers": [
                    {
                        "name": name,
                        "unit": o.preferred,
                        "confidence": o.confidence,
                        "reason": o.reason,
                        "rule": o.rule,
                    }
                    for name, (o, *_) in layers.items()
                ],
                "leaves_ane": None if leave is None else leave.as_dict(),
            }
        import json

        print(json.dumps(d, indent=1))
    else:
        print(rep.table(plan))
        if plan is not None:
            print(prediction_table(rep, plan))
    if plan is not None and getattr(args, "compare_placement", None):
        from .placement.compute_plan import compare, load_observed

        items = [
            (name, {x for o in ops for x in (o.name, *o.outputs)}, ops[0].preferred)
            for name, ops in layers.items()
        ]
        try:
            cmp = compare(items, load_observed(args.compare_placement))
        except ValueError as exc:
            return error_line("run", f"--compare-placement: {exc}")
        print(
            f"against {args.compare_placement}: {cmp['agree']} layers agree, "
            f"{len(cmp['disagree'])} disagree, {len(cmp['unmatched'])} not in the file"
        )
        for name, p_, o in cmp["disagree"]:
            print(f"  {quote(name, marks=False)}: predicted {p_}, observed {o}")
    return 0


def _shapes(arrays) -> dict:
    return {k: tuple(v.shape) if hasattr(v, "shape") else tuple(v) for k, v in arrays.items()}


def prediction_table(rep, plan) -> str:
    """The predicted Core ML placement per layer of ``rep`` (an estimate: the compute plan
    ``plan``'s prediction, which a layer's ops share) as text."""
    lines = [
        f"predicted Core ML placement for compute units {plan.compute_units} (an ESTIMATE from "
        f"public rules and SPEC limits, not Core ML's decision; compare with Xcode's "
        f"performance report):"
    ]
    layers = plan.by_layer()
    counts: dict = {}
    for r in rep.layers:
        p = layers[r.layer.name][0]
        counts[p.preferred] = counts.get(p.preferred, 0) + 1
        lines.append(
            f"  {quote(r.layer.name, 32, marks=False)[:32]:32s} {quote(r.layer.op, 24, marks=False)[:24]:24s} "
            f"{p.preferred:4s} {p.confidence:9s} {p.reason}"
        )
    lines.append("  predicted: " + ", ".join(f"{n} {u}" for u, n in sorted(counts.items())))
    return "\n".join(lines)
