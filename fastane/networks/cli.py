"""``fastane roofline [WORKLOAD | MODEL ...] [--transformer SPEC] [--matmul MxKxN] --chip m1
[--json] [--plot FILE.png] [--summary] [--compare OLD.json [--fail-above PCT]]``.

Built-in workloads (:func:`fastane.workloads.names`), the ``--transformer`` and ``--matmul``
specs (:mod:`fastane.roofline.spec`) and model files (.onnx, .mlpackage, .mlmodel; their
symbolic dimensions bound to 1) are planned one way (:func:`fastane.networks.plan.analyze`)
and reported in one JSON schema (:func:`fastane.roofline.report.to_json`, ``"schema":
"fastane.roofline/2"``), which ``--compare`` reads back: exit status 1 when a network's
predicted time or DRAM traffic grew by more than ``--fail-above`` percent.  With no
workload it reports :data:`DEFAULT_WORKLOADS`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from .. import workloads as _workloads
from ..errors import ModelError
from ..model import is_model_path, load_model
from ..model.cli import error_line
from ..roofline import chips as _chips
from ..roofline import compare as _compare
from ..roofline import model as _model
from ..roofline import report as _report
from ..roofline import spec as _spec
from .plan import analyze

__all__ = ["DEFAULT_WORKLOADS", "add_arguments", "user_workloads", "run", "main"]

#: what ``fastane roofline`` reports when given no workload: a decode step, a vision net
DEFAULT_WORKLOADS = ("gpt2", "resnet50")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fastane roofline``."""
    parser.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD",
        help=f"built-in workloads (default: {' '.join(DEFAULT_WORKLOADS)}; "
        "--list shows them) or model files (MODEL.onnx, .mlpackage, .mlmodel)",
    )
    parser.add_argument(
        "--transformer",
        action="append",
        default=[],
        metavar="SPEC",
        help="your own transformer: 'layers=24,d=1024,heads=16,ffn=4096,vocab=50257,"
        "seq=512,kv=512,lm_tokens=1' (optional kv_heads=, head_dim=, gated=0|1, "
        "act=gelu|silu|relu, norm=layer|rms, cache=none|concat; vocab=0: no LM head); repeatable",
    )
    parser.add_argument(
        "--matmul",
        action="append",
        default=[],
        metavar="MxKxN",
        help="one matmul (M x K) @ (K x N), the K x N weights in KMem; repeatable",
    )
    parser.add_argument(
        "--chip", default="m1", help=f"chip to model (default m1): {', '.join(_chips.names())}"
    )
    parser.add_argument(
        "--runtime",
        choices=_model.RUNTIMES,
        default="coreml",
        help="how the program is submitted: coreml (an MLModel prediction, Core ML's fixed cost; "
        "default) or direct (the private ANE API, as direct-ANE benchmarks run)",
    )
    parser.add_argument(
        "--palettize",
        type=int,
        default=0,
        metavar="BITS",
        help="built-in workloads with every weight palettized to BITS-bit codes (1-8), as "
        "coremltools' palettize_weights writes them; KernelDMA moves the codes",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of tables")
    parser.add_argument("--plot", metavar="FILE.png", help="write a log-log roofline plot (needs matplotlib)")
    parser.add_argument("--summary", action="store_true", help="totals only, no per-layer rows")
    parser.add_argument("--list", action="store_true", help="list workloads and chips, then exit")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--compare",
        metavar="OLD.json",
        help="compare with a stored `fastane roofline --json` report: per-layer and total "
        "changes; exit 1 when a workload's time or DRAM traffic grew beyond --fail-above",
    )
    parser.add_argument(
        "--fail-above",
        type=float,
        default=0.0,
        metavar="PCT",
        help="regression threshold for --compare, percent (default 0: any growth)",
    )
    # removed: the roofline plans by lowering only; the flag is kept to say so
    parser.add_argument("--analytic", action="store_true", help=argparse.SUPPRESS)


def user_workloads(args) -> list:
    """The workloads ``fastane roofline`` was asked for: the built-in names, then every
    ``--transformer`` and ``--matmul`` spec (:mod:`fastane.roofline.spec`); the default
    workloads when none is given.  A malformed spec raises ValueError (one line)."""
    specs = [_spec.parse_transformer(s) for s in getattr(args, "transformer", [])]
    specs += [_spec.parse_matmul(s) for s in getattr(args, "matmul", [])]
    names = args.workloads or ([] if specs else list(DEFAULT_WORKLOADS))
    wls = [_workloads.get(n) for n in names] + specs
    bits = getattr(args, "palettize", 0)
    if bits and not 1 <= bits <= 8:
        raise ValueError(f"--palettize must be 1-8 bits, got {bits}")
    return [_workloads.palettized(w, bits) for w in wls] if bits else wls


def _list() -> int:
    print("workloads:")
    for n in _workloads.names():
        print("  " + _workloads.describe(n))
    print("chips:")
    for c in _chips.CHIPS.values():
        print(
            f"  {c.key:9s} {c.name:11s} {c.peak_ops_fp16.value / 1e12:5.1f} TOP/s FP16, "
            f"DRAM {c.dram_bw.value / 1e9:6.1f} GB/s, ridge {c.ridge_point:6.1f} OP/B"
        )
    return 0


def _models(args, chip, params) -> list | int:
    """The results of the model files ``args`` names, or the exit status of an error."""
    others = [n for n in args.workloads if not is_model_path(n)]
    if others or args.transformer or args.matmul:
        what = others[0] if others else "--transformer/--matmul"
        return error_line("roofline", f"give either built-in workloads or model files, not both ({what!r})")
    try:
        return [analyze(load_model(path, weights=False), chip, params) for path in args.workloads]
    except (ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        return error_line("roofline", exc)


def _summary(text: str) -> str:
    keep = ("model ", "ANE total", "placement:", "stats only")
    return "\n".join(ln for ln in text.splitlines() if ln.startswith(keep))


def run(args) -> int:
    """Run ``fastane roofline`` with parsed ``args``; returns the exit status."""
    if args.list:
        return _list()
    if args.analytic:
        print(
            "fastane roofline: --analytic was removed: every layer is planned by lowering it to TDs "
            "and counting them on a stats-only device; layers that cannot be lowered are reported "
            "as such (docs/roofline.md)",
            file=sys.stderr,
        )
        return 2
    files = any(is_model_path(n) for n in args.workloads)
    try:
        old = None
        if args.compare:
            if not (args.fail_above >= 0 and math.isfinite(args.fail_above)):
                raise ValueError(f"--fail-above must be a finite percentage >= 0, got {args.fail_above}")
            old = _compare.load(args.compare)
        chip = _chips.get(args.chip)
        params = _model.calibrated(runtime=args.runtime)
        if files and args.palettize:
            raise ValueError("--palettize applies to built-in workloads; a model file's weights are its own")
        wls = [] if files else user_workloads(args)
    except ValueError as e:
        print(f"fastane roofline: {e}", file=sys.stderr)
        return 2
    if files:
        results = _models(args, chip, params)
        if isinstance(results, int):
            return results
    else:
        results = []
        for i, w in enumerate(wls, 1):
            if not args.quiet:
                print(
                    f"[{i}/{len(wls)}] planning {w.name} ({len(w)} layers) ...",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            try:
                r = analyze(w, chip, params)
            except ModelError as exc:
                if not args.quiet:
                    print(file=sys.stderr)
                return error_line("roofline", exc)
            if not args.quiet:
                nl = len(r.plan.not_lowered)
                print(
                    f" {r.total.tasks} tasks in {r.plan_s:.2f} s (lowered"
                    + (f"; {nl} layers not on the ANE" if nl else "")
                    + ")",
                    file=sys.stderr,
                    flush=True,
                )
            results.append(r)
    if old is not None:
        cmp = _compare.compare(old, _report.to_json(results), args.fail_above)
        print(json.dumps(cmp, indent=1) if args.json else _compare.format_comparison(cmp))
        return 1 if cmp["regressed"] else 0
    if args.json:
        print(json.dumps(_report.to_json(results), indent=1))
    else:
        for r in results:
            if files:
                print(_summary(r.report.table()) if args.summary else r.report.table())
            else:
                print(_report.table(r, layers=not args.summary))
                if r.is_decode:
                    print()
                    print(_report.tokens_table(r))
            print()
    if args.plot:
        shown = [r for r in results if r.plan.tasks]
        if not shown:
            print("fastane roofline: error: no layer runs on the ANE: nothing to plot", file=sys.stderr)
            return 2
        try:
            _report.plot(shown, args.plot)
        except RuntimeError as e:
            print(f"fastane roofline: {e}", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="fastane roofline", description="roofline model of networks on the Apple Neural Engine"
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
