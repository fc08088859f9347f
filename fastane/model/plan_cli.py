"""``fastane plan MODEL [--chip CHIP] [--compute-units ALL|CPU_AND_NE|CPU_AND_GPU|CPU_ONLY]
[--precision fp16|fp32] [--reshape-frequency frequent|infrequent] [--shape NAME=1x3x224x224] [--json]
[--compare MAC_PLAN.json] [--quiet]``:
where Core ML would run each op, predicted from the shapes alone
(:meth:`fastane.Model.compute_plan`; nothing computed, no weights read): per op the preferred
device, the devices that support it, its share of the model's work, the confidence and the
reason.  ``--precision``: the compute precision assumed for a model that declares none (ONNX,
NeuralNetwork; default fp16), refused (one line, exit status 2) for an ML Program.
``--reshape-frequency``: the hint the model is loaded with (Core ML's default ``frequent``;
``infrequent``, iOS 17.4 / macOS 14.4, may keep a range-shaped input on the ANE away from its
default shape).  ``--json`` writes the plan in the
shape of Core ML's MLComputePlan (:mod:`fastane.model.placement.compute_plan`);
``--compare`` matches each op by output name against a plan dumped on a Mac
(``docs/compute_plan_dump.py``) and prints the agreement per op and in total.  A plan that
leaves the ANE (:meth:`~fastane.model.placement.compute_plan.ComputePlan.leaves_ane`) adds one
warning line on stderr (``--quiet`` drops it; the JSON of the plan and of the comparison
carries it as ``leavesANE``).  A bad model, argument or plan file is one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import json

from ..errors import ModelError, quote
from .cli import add_precision_argument, add_quiet_argument, add_shape_argument

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the model file (.onnx, .mlpackage, .mlmodel)")
    p.add_argument("--chip", default="m1", help="the chip (default m1)")
    p.add_argument(
        "--compute-units", default="ALL", metavar="UNITS", help="ALL, CPU_AND_NE, CPU_AND_GPU or CPU_ONLY"
    )
    add_precision_argument(p)
    p.add_argument(
        "--reshape-frequency",
        default=None,
        metavar="frequent|infrequent",
        help="the MLOptimizationHints.reshapeFrequency the model is loaded with (default frequent, Core "
        "ML's): infrequent may keep a range-shaped input on the ANE away from its default shape",
    )
    add_shape_argument(p)
    p.add_argument("--json", action="store_true", help="the plan (or the comparison) as JSON")
    p.add_argument(
        "--compare",
        metavar="MAC_PLAN.json",
        default=None,
        help="compare with a plan dumped on a Mac (docs/compute_plan_dump.py), op by op",
    )
    add_quiet_argument(p)
    p.set_defaults(input=[], random=False, stats_only=True)


def run(args) -> int:
    from . import load_model
    from .cli import CommandError, error_line, read_inputs, warning_line
    from .placement.compute_plan import load_observed
    from .placement.predict import check_reshape_frequency

    try:
        if args.reshape_frequency is not None:
            check_reshape_frequency(args.reshape_frequency)  # before the model is read
        model = load_model(args.model, weights=False)
        shapes = read_inputs(model, args)
        plan = model.compute_plan(
            shapes,
            args.chip,
            args.compute_units,
            warn=False,
            precision=args.precision,
            reshape_frequency=args.reshape_frequency,
        )
        observed = None if args.compare is None else load_observed(args.compare)
    except (CommandError, ModelError, ValueError, TypeError, NotImplementedError, OSError) as exc:
        return error_line("plan", exc)
    if observed is None:
        print(plan.to_json() if args.json else plan.table())
    else:
        _comparison(plan, observed, args)
    warning_line("plan", plan, args.quiet)
    return 0


def _comparison(plan, observed: dict, args) -> None:
    """Print ``plan`` against the ``observed`` devices (``--compare``), op by op and in total."""
    from .placement.compute_plan import compare

    leave = plan.leaves_ane()
    cmp = compare([(o.label, o.outputs, o.preferred) for o in plan.ops], observed)
    weight = {o.label: o.weight for o in plan.ops}
    matched = [r for r in cmp["rows"] if r[2] is not None]
    agree_w = sum(weight[r[0]] for r in matched if r[1] in r[2].split("/"))
    matched_w = sum(weight[r[0]] for r in matched)
    total = {
        "ops": len(plan.ops),
        "matched": len(matched),
        "agree": cmp["agree"],
        "disagree": len(cmp["disagree"]),
        "not_in_mac_plan": len(cmp["unmatched"]),
        "not_in_fastane_plan": cmp["unknown"],
        "agreement": cmp["agree"] / len(matched) if matched else None,
        "weighted_agreement": agree_w / matched_w if matched_w else None,
    }
    if args.json:
        rows = [
            {
                "output": name,
                "fastane": pred,
                "mac": seen,
                "agree": None if seen is None else pred in seen.split("/"),
            }
            for name, pred, seen in cmp["rows"]
        ]
        print(
            json.dumps(
                {
                    "compare": args.compare,
                    "computeUnits": plan.compute_units,
                    "ops": rows,
                    "total": total,
                    "leavesANE": None if leave is None else leave.as_dict(),
                },
                indent=1,
            )
        )
        return
    print(
        f"fastane's plan for {plan.compute_units} on {plan.chip} against {quote(args.compare, marks=False)} "
        f"(preferred devices, ops matched by output name):"
    )
    for name, pred, seen in cmp["rows"]:
        verdict = (
            "not in the Mac plan" if seen is None else ("agree" if pred in seen.split("/") else "DIFFER")
        )
        print(f"  {quote(name, 40, marks=False)[:40]:40s} fastane {pred:4s} mac {seen or '-':9s} {verdict}")
    pct = "-" if total["agreement"] is None else f"{100 * total['agreement']:.1f}%"
    wpct = "-" if total["weighted_agreement"] is None else f"{100 * total['weighted_agreement']:.1f}%"
    print(
        f"total: {total['agree']} of {total['matched']} matched ops agree ({pct}; {wpct} of their work), "
        f"{total['not_in_mac_plan']} ops not in the Mac plan, {total['not_in_fastane_plan']} Mac ops "
        f"not in fastane's"
    )
