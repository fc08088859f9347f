"""``fastane probes list | build DIR [--only ID ...] | compare DIR RESULTS.json [--chip CHIP]
[--json]``: the programs a Mac is asked to run (:mod:`fastane.model.probes`, docs/probes.md).

``list`` prints each probe and the question it answers; ``build`` writes them as ML
Programs and a manifest into ``DIR`` (needs coremltools); on a Mac,
``python docs/compute_plan_dump.py --probes DIR`` dumps their compute plans and times them
into ``DIR/results.json``; ``compare`` puts fastane's prediction beside each observation
(the chip: the one the results name, unless ``--chip``).  A bad directory, results file or
argument is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import ModelError, quote

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="each probe and the question it answers")
    b = sub.add_parser(
        "build", help="write the probes as .mlpackage files and a manifest (needs coremltools)"
    )
    b.add_argument("directory", metavar="DIR")
    b.add_argument(
        "--only", nargs="+", metavar="ID", help="only the probes whose id starts with one of these"
    )
    c = sub.add_parser("compare", help="fastane's predictions beside what a Mac observed")
    c.add_argument("directory", metavar="DIR", help="the directory `fastane probes build` wrote")
    c.add_argument("results", metavar="RESULTS.json", help="what docs/compute_plan_dump.py --probes wrote")
    c.add_argument("--chip", default=None, help="the chip (default: the one the results name)")
    c.add_argument("--json", action="store_true", help="the comparison as JSON")


def run(args) -> int:
    from . import probes
    from .cli import error_line

    try:
        if args.action == "list":
            return _list(probes.PROBES)
        if args.action == "build":
            os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' pass bars, before it is imported
            paths = probes.build(args.directory, args.only, _progress("building"))
            print(f"wrote {len(paths)} probes and {probes.MANIFEST} to {quote(args.directory, marks=False)}")
            return 0
        results = probes.load_results(args.results)
        rows = probes.compare(args.directory, results, args.chip, _progress("predicting"))
    except (ModelError, ValueError, OSError) as exc:
        return error_line("probes", exc)
    if args.json:
        print(json.dumps({"chip": results.get("chip"), "os": results.get("os"), "probes": rows}, indent=1))
    else:
        _table(rows, results)
    return 0


def _progress(verb):
    def show(i, n, what):
        name = getattr(what, "id", what)
        end = "\n" if i + 1 == n else ""
        print(
            f"\r[{i + 1}/{n}] {verb} {quote(str(name), 40, marks=False):40s}",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return show


def _list(probes) -> int:
    question = None
    for p in probes:
        if p.question != question:
            question = p.question
            print(f"\n{p.kind}: {question}")
        shape = "x".join(map(str, p.shape))
        print(f"  {p.id:34s} {p.op:10s} x {shape}  ({p.units}, {'fp16' if p.fp16 else 'fp32'})")
    return 0


def _table(rows, results) -> None:
    system = results.get("os") or "macOS not stated"
    print(
        f"probes observed on {quote(str(results.get('chip')), 60, marks=False)} "
        f"({quote(str(system), 60, marks=False)}) against fastane:"
    )
    for r in rows:
        if r["error"] or r["refused"]:
            who, why = ("the Mac", r["error"]) if r["error"] else ("fastane refuses it", r["refused"])
            print(f"  {r['id']:34s} {who}: {quote(why, 200, marks=False)}")
            continue
        cells = []
        if r["agree"] is not None:
            seen = "/".join(sorted({m for _, _, m in r["ops"] if m})) or "-"
            pred = "/".join(sorted({f or "-" for _, f, _ in r["ops"]})) or "-"
            a, n = r["agree"]
            cells.append(f"fastane {pred:9s} mac {seen:9s} {a} of {n} ops agree")
        if "ratio" in r:
            off = " -- not comparable: the Mac ran it off the ANE" if r["comparable"] is False else ""
            cells.append(
                f"predicted {r['predicted_ms']:.3f} ms, measured {r['measured_ms']:.3f} ms "
                f"(x{r['ratio']:.2f}){off}"
            )
        print(f"  {r['id']:34s} " + ("; ".join(cells) or "nothing observed"))
    placed = [r["agree"] for r in rows if r["agree"] is not None and r["agree"][1]]
    if placed:
        print(f"placement: {sum(a == n for a, n in placed)} of {len(placed)} probes agree on every op")
    timed = [r["ratio"] for r in rows if "ratio" in r and r["comparable"] is not False]
    if timed:
        from ..roofline.calibrate import rms_log_error

        print(
            f"time: rms log-error x{rms_log_error(timed):.3f} over {len(timed)} latency probes run on the ANE"
        )
